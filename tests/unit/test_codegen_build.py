"""Codegen and build: task_graph JSON schema, pointer-free source, compile cache, errors, concurrency.

Run: pytest tests/unit/test_codegen_build.py -s   (-s shows the EVIDENCE and TIMING lines)
The cache tests compile a one-line C++ source into a private MPK_CACHE_DIR (well under a second);
the kernels here use only identity / linear float32, so the suite's cache builds them once.
"""
import ctypes
import json
import os
import re
import shutil
import subprocess
import threading
import time

import pytest
import torch

from mirage.mpk import build, codegen, testing
from mirage.mpk import graph as graph_mod
from mirage.mpk.abi import TASK_TERMINATE
from mirage.mpk.errors import MPKCompileError
from mirage.mpk.persistent_kernel import PersistentKernel

BLOCK = (128, 1, 1)
TINY = 'extern "C" int mpk_tiny(void) { return 7; }\n'
COMPILER = os.environ.get("MPK_CXX", "g++")


def new_pk(**kw) -> PersistentKernel:
    params = PersistentKernel.get_default_init_parameters()
    params.update(test_mode=True, num_workers=3, num_local_schedulers=2)
    params.update(kw)
    return PersistentKernel(**params)


def join_kernel(rows=4, cols=8, seed=0, **kw) -> PersistentKernel:
    """L0: x -> y, 2 column tiles (grid.x splits an identity's last dim); L1: y -> z, one task."""
    pk = new_pk(**kw)
    g = testing.generator(seed)
    x = pk.attach_input(testing.randn((rows, cols), gen=g), name="x")
    y = pk.new_tensor(dims=(rows, cols), dtype=torch.float32, name="y")
    z = pk.attach_input(torch.zeros(rows, cols), name="z")
    pk.identity_layer(input=x, output=y, grid_dim=(2, 1, 1), block_dim=BLOCK)
    pk.identity_layer(input=y, output=z, grid_dim=(1, 1, 1), block_dim=BLOCK)
    return pk


def mpk_log():
    """The 'mirage.mpk' logger's messages (it has its own stderr handler, propagate=False)."""
    return testing.capture_log()


# ---- task_graph_rank{R}.json ------------------------------------------------------------------

MPK_TASK_KEYS = {"task_type", "variant_id", "inputs", "outputs", "trigger_event", "dependent_event",
                 "request_id", "expert_offset", "kv_idx", "merge_task_offset", "task_offset"}
OUR_TASK_KEYS = {"layer", "grid_coord", "trigger_events"}
TILE_KEYS = {"base_ptr", "offset", "data_type", "dims", "strides"}
EVENT_KEYS = {"event_type", "num_triggers", "first_task_id", "last_task_id", "waiters"}


def test_task_graph_json_keeps_mpk_fields(tmp_path):
    pk = join_kernel()
    pk.compile(output_dir=str(tmp_path))
    cu, js = pk.output_files
    assert cu == str(tmp_path / "test_rank0.cu") and js == str(tmp_path / "task_graph_rank0.json")
    with open(js) as f:
        doc = json.load(f)
    tasks, events = doc["all_tasks"], doc["all_events"]
    assert {"all_tasks", "all_events", "first_tasks"} <= set(doc)
    for t in tasks:
        assert MPK_TASK_KEYS | OUR_TASK_KEYS <= set(t), set(t) ^ (MPK_TASK_KEYS | OUR_TASK_KEYS)
        for tile in t["inputs"] + t["outputs"]:
            assert set(tile) == TILE_KEYS
    for e in events:
        assert EVENT_KEYS <= set(e)

    # task 0 is TERMINATE; tasks 1, 2 = L0 (x = 0, 1); task 3 = L1
    assert len(tasks) == 4 and tasks[0]["task_type"] == TASK_TERMINATE
    # events: 0 TERMINATION, 1 the join (L0 tasks -> L1), 2 END_OF_TASK_GRAPH (the leaf L1).
    # first_task_id/last_task_id: MPK's half-open range of the waiters; [0, 0) when none, as MPK writes
    assert [e["event_type"] for e in events] == [0, 1, 2]
    assert {k: events[0][k] for k in EVENT_KEYS} == {
        "event_type": 0, "num_triggers": 0, "first_task_id": 0, "last_task_id": 0, "waiters": []}
    assert {k: events[1][k] for k in EVENT_KEYS} == {
        "event_type": 1, "num_triggers": 2, "first_task_id": 3, "last_task_id": 4, "waiters": [3]}
    assert {k: events[2][k] for k in EVENT_KEYS} == {
        "event_type": 2, "num_triggers": 1, "first_task_id": 0, "last_task_id": 0, "waiters": []}
    assert doc["first_tasks"] == [1, 2]

    t2 = tasks[2]
    assert t2["task_type"] == 121 and t2["variant_id"] == 0     # MPK's TASK_IDENTITY, in every graph
    assert t2["layer"] == "identity_0" and t2["grid_coord"] == [1, 0, 0]
    # x is (4, 8) float32; the tile of x = 1 starts at column 4: 4 * 4 bytes
    assert t2["inputs"] == [{"base_ptr": "x", "offset": 16, "data_type": "float32", "dims": [4, 4],
                             "strides": [8, 1]}]
    assert t2["outputs"] == [{"base_ptr": "y", "offset": 16, "data_type": "float32", "dims": [4, 4],
                              "strides": [8, 1]}]
    assert t2["iparams"] == [] and t2["fparams"] == []
    assert t2["trigger_event"] == 1 and t2["trigger_events"] == [1] and t2["dependent_event"] == -1
    assert (t2["request_id"], t2["expert_offset"], t2["kv_idx"]) == (-1, -1, -1)
    t3 = tasks[3]
    assert t3["layer"] == "identity_1" and t3["dependent_event"] == 1
    assert t3["trigger_event"] == 2 and t3["trigger_events"] == [2]
    assert t3["inputs"][0]["dims"] == [4, 8] and t3["inputs"][0]["offset"] == 0
    pk.finalize()


def test_generated_source_has_no_pointers_and_no_paths(tmp_path):
    a = join_kernel(rows=4, cols=8, seed=1)
    a.compile(output_dir=str(tmp_path / "a"))
    b = join_kernel(rows=6, cols=10, seed=2)       # other shapes, other data, other addresses
    b.compile(output_dir=str(tmp_path / "b"))
    src_a, src_b = (open(pk.output_files[0]).read() for pk in (a, b))
    assert not re.search(r"0[xX][0-9a-fA-F]+", src_a)
    for ptr in (t.data.data_ptr() for t in a._table()):
        assert str(ptr) not in src_a and f"{ptr:x}" not in src_a.lower()
    for path in (str(tmp_path), build.csrc_dir(), build.cache_dir(), os.path.expanduser("~"), os.getcwd()):
        assert path not in src_a, path
    includes = re.findall(r'#include\s+"([^"]+)"', src_a)
    assert includes and all(not inc.startswith("/") and ".." not in inc for inc in includes), includes
    # the source depends on the variant set only: one build serves both kernels
    assert src_a == src_b and a.build.key == b.build.key and b.build.hit
    a.finalize()
    b.finalize()


# ---- compile cache ------------------------------------------------------------------------------

def test_second_identical_kernel_hits_the_cache():
    a = join_kernel()
    a.compile()
    with mpk_log() as log:
        b = join_kernel()
        b.compile()
    assert b.build.hit and b.build.path == a.build.path and b.build.key == a.build.key
    assert any(m.startswith(f"cache hit {b.build.key[:16]}") for m in log), log
    b()                                       # and the hit module runs
    assert torch.equal(b.get_tensor("z"), b.get_tensor("x"))
    a.finalize()
    b.finalize()


def test_cpu_modules_share_one_runtime_object(tmp_path, monkeypatch):
    """The CPU backend links a generated module from the cached runtime object and the dispatcher's
    object (mirage/mpk/build.py, RUNTIME_TU): two variant sets are two modules over one runtime.o, and
    both run. Negative control: a damaged runtime.o is discarded and rebuilt, never linked."""
    monkeypatch.setenv("MPK_CACHE_DIR", str(tmp_path))
    x, w = testing.randn((4, 64), gen=testing.generator(1)), testing.randn((32, 64), gen=testing.generator(2))
    a = join_kernel()
    a.compile()
    lin = _linear_kernel(x, w, torch.zeros(4, 32))
    runtimes = sorted(tmp_path.glob("*/runtime.o"))
    modules = sorted(tmp_path.glob("*/module.so"))
    print(f"TWO OBJECTS: {len(modules)} modules over {len(runtimes)} runtime object(s); first miss "
          f"{a.build.seconds:.2f} s (the runtime's object too), second {lin.build.seconds:.2f} s")
    assert len(runtimes) == 1 and len(modules) == 2, (runtimes, modules)
    assert "-DMPK_DISPATCHER_OBJECT" in a.build.command and "-c" in a.build.command, a.build.command
    a()
    lin()
    assert torch.equal(a.get_tensor("z"), a.get_tensor("x"))
    ref = x.double() @ w.double().T
    testing.assert_close("linear (two objects)", lin.get_tensor("y"), ref,
                         testing.tol_linear(torch.float32, 64, x.double().abs() @ w.double().abs().T))
    a.finalize()
    lin.finalize()

    with open(runtimes[0], "r+b") as f:        # damaged: its checksum record no longer matches
        f.truncate(100)
    b = join_kernel(rows=3)
    b.compile()                                # same variants: the module is a hit, nothing is linked
    assert b.build.hit, "the module itself was whole"
    d = new_pk()
    xd = d.attach_input(torch.ones(2, 96, dtype=torch.bfloat16), name="x")
    yd = d.attach_input(torch.zeros(2, 96, dtype=torch.bfloat16), name="y")
    d.identity_layer(input=xd, output=yd, grid_dim=(1, 1, 1), block_dim=BLOCK)
    with mpk_log() as log:
        d.compile()                            # a new variant set: needs the runtime object again
    assert any("is damaged" in m and "runtime.o" in m for m in log), log
    assert os.path.getsize(runtimes[0]) > 100, "the runtime object was rebuilt"
    d()
    assert torch.equal(d.get_tensor("y"), d.get_tensor("x"))
    for k in (b, d):
        k.finalize()


def test_cache_miss_hit_flags_source_and_dir(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    monkeypatch.setenv("MPK_CACHE_DIR", str(root))
    with mpk_log() as log:
        first = build.compile_module(TINY, "cpu", True)
    key = first.key
    assert not first.hit and first.path == str(root / key / "module.so") and os.path.isfile(first.path)
    assert f"compiling {key[:16]} with {COMPILER} (cache miss)" in log, log
    assert any(re.fullmatch(rf"compiled {key[:16]} in \d+\.\d\d s", m) for m in log), log
    assert first.seconds > 0 and "-DMPK_TEST_MODE" in first.command
    assert ctypes.CDLL(first.path).mpk_tiny() == 7           # a real shared object

    with mpk_log() as log:
        again = build.compile_module(TINY, "cpu", True)
    assert again.hit and again.key == key and again.path == first.path and again.command == []
    assert log == [f"cache hit {key[:16]} ({first.path})"], log

    flags = build.compile_module(TINY, "cpu", False)          # no -DMPK_TEST_MODE
    source = build.compile_module(TINY + "// another source\n", "cpu", True)
    assert not flags.hit and not source.hit and len({key, flags.key, source.key}) == 3
    # published with os.replace: one directory per key, no temporary left behind
    assert sorted(p.name for p in root.iterdir() if p.is_dir()) == sorted([key, flags.key, source.key])


def test_runtime_object_is_keyed_by_the_runtime_headers_alone(tmp_path, monkeypatch):
    """The runtime object includes csrc/runtime/ only, so a scratch csrc/ whose task kernel differs (a
    negative control's mutation) links the cached runtime.o; one whose runtime header differs builds
    its own. Control: the dispatcher's key still covers the task kernel (a new module)."""
    monkeypatch.setenv("MPK_CACHE_DIR", str(tmp_path / "cache"))
    ours = build.csrc_dir()
    scratch = tmp_path / "csrc"
    shutil.copytree(ours, scratch)
    with open(scratch / "tasks" / "identity.cuh", "a") as f:
        f.write("\n// a mutated task kernel\n")
    src = codegen.source(codegen.Variants(new_identity_layers()), "cpu")
    first = build.compile_module(src, "cpu", True, generated=True)
    monkeypatch.setenv("MPK_CSRC_DIR", str(scratch))
    mutated = build.compile_module(src, "cpu", True, generated=True)
    runtimes = sorted((tmp_path / "cache").glob("*/runtime.o"))
    assert not mutated.hit and mutated.key != first.key, "the task kernel's edit must give a new module"
    assert len(runtimes) == 1, f"a task kernel's edit rebuilt the runtime object: {runtimes}"
    with open(scratch / "runtime" / "executor.cuh", "a") as f:
        f.write("\n// a mutated runtime header\n")
    build.compile_module(src, "cpu", True, generated=True)
    runtimes = sorted((tmp_path / "cache").glob("*/runtime.o"))
    assert len(runtimes) == 2, f"a runtime header's edit reused the runtime object: {runtimes}"
    print("RUNTIME OBJECT: a task kernel's edit reuses it, a runtime header's edit builds another PASS")


def new_identity_layers() -> list:
    pk = new_pk()
    x = pk.attach_input(torch.ones(2, 96, dtype=torch.bfloat16), name="x")
    y = pk.attach_input(torch.zeros(2, 96, dtype=torch.bfloat16), name="y")
    pk.identity_layer(input=x, output=y, grid_dim=(1, 1, 1), block_dim=BLOCK)
    return pk.layers


def test_cache_key_covers_headers_compiler_and_flags(tmp_path, monkeypatch):
    fl, csrc = build.flags("cpu", True, ""), build.csrc_dir()
    key = build.cache_key(TINY, COMPILER, fl, csrc)
    assert build.cache_key(TINY, COMPILER, fl, csrc) == key
    assert build.cache_key(TINY, COMPILER, build.flags("cpu", True, "thread"), csrc) != key
    assert build.cache_key(TINY + " ", COMPILER, fl, csrc) != key
    copy = tmp_path / "csrc"
    shutil.copytree(csrc, copy)
    assert build.cache_key(TINY, COMPILER, fl, str(copy)) == key    # same headers, other place: same key
    with open(copy / "runtime" / "abi.h", "a") as f:
        f.write("\n// an edit to a header\n")
    assert build.cache_key(TINY, COMPILER, fl, str(copy)) != key


def test_default_cache_dir(monkeypatch):
    monkeypatch.delenv("MPK_CACHE_DIR", raising=False)
    assert build.cache_dir() == os.path.join(os.path.expanduser("~"), ".cache", "mirage-mpk")


# ---- compile errors -------------------------------------------------------------------------------

def test_broken_compiler_command_raises_mpk_compile_error(tmp_path, monkeypatch):
    monkeypatch.setenv("MPK_CACHE_DIR", str(tmp_path / "cache"))
    cc = tmp_path / "brokencc"
    cc.write_text('#!/bin/sh\nif [ "$1" = "--version" ]; then echo "brokencc 1.0"; exit 0; fi\n'
                  'echo "brokencc: error: unrecognized command-line option \'-fPIC\'" >&2\nexit 3\n')
    cc.chmod(0o755)
    monkeypatch.setenv("MPK_CXX", str(cc))
    with pytest.raises(MPKCompileError) as e:
        build.compile_module(TINY, "cpu", True)
    err = e.value
    assert err.command[0] == str(cc) and "-shared" in err.command
    assert "unrecognized command-line option '-fPIC'" in err.errors
    assert os.path.isfile(err.source_path) and open(err.source_path).read() == TINY
    assert err.source_path.startswith(str(tmp_path / "cache" / "failed"))
    msg = str(err)
    assert "failed (exit 3)" in msg and f"command: {cc} " in msg and f"kept source: {err.source_path}" in msg
    assert not any(p.name.endswith(".so") for p in (tmp_path / "cache").rglob("*"))


def test_missing_compiler_is_named(monkeypatch):
    monkeypatch.setenv("MPK_CXX", "no-such-compiler-mpk")
    with pytest.raises(FileNotFoundError, match=r"compiler 'no-such-compiler-mpk' not found on PATH "
                                                r"\(set MPK_CXX to choose one; MPK_NVCC for nvcc\)"):
        build.compile_module(TINY, "cpu", True)


def test_broken_header_raises_mpk_compile_error(tmp_path, monkeypatch):
    monkeypatch.setenv("MPK_CACHE_DIR", str(tmp_path / "cache"))
    copy = tmp_path / "csrc"
    shutil.copytree(build.csrc_dir(), copy)
    header = copy / "tasks" / "identity.cuh"
    header.write_text(header.read_text() + "\nint this_header_is_broken(;\n")
    monkeypatch.setenv("MPK_CSRC_DIR", str(copy))
    pk = join_kernel()
    with pytest.raises(MPKCompileError) as e:
        pk.compile()
    err = e.value
    assert err.command[0] == COMPILER and str(copy) in err.command
    first = err.errors.splitlines()[0]
    assert "identity.cuh" in first and "error" in first, err.errors
    assert os.path.isfile(err.source_path) and err.source_path.endswith(".cu")
    assert '#include "tasks/identity.cuh"' in open(err.source_path).read()
    assert f"kept source: {err.source_path}" in str(err) and "first errors:" in str(err)
    # nothing was loaded: the kernel cannot run
    with pytest.raises(RuntimeError, match=r"pk\(\) called before compile\(\)"):
        pk()


# ---- variants ------------------------------------------------------------------------------------

def test_variants_are_per_kernel(tmp_path):
    a = new_pk()
    x = a.attach_input(torch.zeros(4, 8), name="x")
    w = a.attach_input(torch.zeros(8), name="w")
    y, z, v = (a.attach_input(torch.zeros(4, 8), name=n) for n in "yzv")
    a.identity_layer(input=x, output=y, grid_dim=(2, 1, 1), block_dim=BLOCK)
    a.rmsnorm_layer(input=y, weight=w, output=z, grid_dim=(2, 1, 1), block_dim=BLOCK)
    a.identity_layer(input=z, output=v, grid_dim=(4, 1, 1), block_dim=BLOCK)    # same variant again
    va = codegen.Variants(a.layers)
    assert va.cases == {"mpk::identity_task<float>": 0, "mpk::rmsnorm_task<float>": 1}

    b = new_pk()
    xb = b.attach_input(torch.zeros(4, 8, dtype=torch.bfloat16), name="x")
    yb = b.attach_input(torch.zeros(4, 8, dtype=torch.bfloat16), name="y")
    b.identity_layer(input=xb, output=yb, grid_dim=(1, 1, 1), block_dim=BLOCK)
    vb = codegen.Variants(b.layers)
    # numbered from 0 for this kernel: nothing of kernel a leaks in, nothing grows
    assert vb.cases == {"mpk::identity_task<mpk::bf16_t>": 0} and vb.kinds == {"identity": 121}
    src_b = codegen.source(vb, "cpu")
    assert "rmsnorm" not in src_b and "identity_task<float>" not in src_b
    assert codegen.Variants(a.layers).cases == va.cases
    assert codegen.source(codegen.Variants(a.layers), "cpu") == codegen.source(va, "cpu")

    doc = json.loads(codegen.task_graph_json(graph_mod.build(a.layers), va))
    assert [(t["layer"], t["variant_id"]) for t in doc["all_tasks"][1:]] == (
        [("identity_0", 0)] * 2 + [("rmsnorm_1", 1)] * 2 + [("identity_2", 0)] * 4)


# ---- two kernels, one .so, two threads --------------------------------------------------------------

def _linear_kernel(x, w, out):
    pk = new_pk()
    xd, wd, yd = pk.attach_input(x, name="x"), pk.attach_input(w, name="w"), pk.attach_input(out, name="y")
    pk.linear_layer(input=xd, weight=wd, output=yd, grid_dim=(16, 1, 1), block_dim=BLOCK)
    pk.compile()
    return pk


def test_two_kernels_from_one_so_run_concurrently_and_release_the_gil():
    """Each kernel runs in its own thread; the main thread watches both outputs meanwhile.

    Outputs start as NaN (as the test-mode poison leaves them) and fill in tile by tile. Seeing
    both partly written at one moment means both launches were inside the C code at once and
    neither held the GIL (with ctypes.PyDLL, which keeps it, only all-NaN or all-done is seen)."""
    batch, k, n = 128, 2048, 4096                # 2.1 GFLOP per launch, 16 column tiles
    g = testing.generator(7)
    w = testing.randn((n, k), gen=g)             # shared weight, read by both kernels
    xs = [testing.randn((batch, k), gen=g) for _ in range(2)]
    outs = [torch.full((batch, n), float("nan")) for _ in range(2)]
    pks = [_linear_kernel(x, w, out) for x, out in zip(xs, outs)]
    assert pks[0].build.path == pks[1].build.path
    assert pks[0]._runtime.lib._handle == pks[1]._runtime.lib._handle       # one loaded module
    assert pks[0]._runtime.handle != pks[1]._runtime.handle                 # two states

    barrier = threading.Barrier(2)
    windows, errors = [None, None], []

    def run(i):
        try:
            barrier.wait()
            t0 = time.perf_counter()
            pks[i]()
            windows[i] = (t0, time.perf_counter())
        except BaseException as e:           # re-raised below, in the test's thread
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    # test mode's kernels write guarded copies, copied back after the pass (mirage/mpk/memcheck.py)
    seen = [pk._fences.guarded[pk.tensors["y"].id].tensor for pk in pks]
    for t in threads:
        t.start()
    looks = both_partial = 0
    while any(t.is_alive() for t in threads):
        written = [int((~o[0].isnan()).sum()) for o in seen]       # columns of row 0 written so far
        both_partial += all(0 < c < n for c in written)
        looks += 1
        time.sleep(0.001)
    for t in threads:
        t.join()
    assert not errors, errors
    (a0, a1), (b0, b1) = windows
    print(f"\nTIMING launches [0, {a1 - a0:.3f}] and [{b0 - a0:.3f}, {b1 - a0:.3f}] s; the main thread "
          f"saw both outputs half-written in {both_partial} of {looks} looks")
    assert both_partial > 0, "never saw both launches in flight at once (GIL held, or not concurrent)"

    ref = [x.double() @ w.double().T for x in xs]
    scale = [x.double().abs() @ w.double().abs().T for x in xs]
    for i in range(2):
        tol = testing.tol_linear(torch.float32, k, scale[i])
        testing.assert_close(f"linear[thread {i}]", outs[i], ref[i], tol)
    assert not torch.equal(outs[0], outs[1])
    for pk in pks:
        pk.finalize()


def test_generated_source_header_says_how_to_build_it(tmp_path):
    """The .cu's header names its include directory and headers; its command, followed by hand, builds it."""
    from mirage.mpk import abi

    pk = join_kernel()
    pk.compile(output_dir=str(tmp_path))
    src = open(pk.output_files[0]).read()
    pk.finalize()
    lines = src.splitlines()
    i = next(k for k, line in enumerate(lines) if line.startswith("// Build by hand: "))
    headers = lines[i - 1].strip("/ .").split(", ")
    assert headers == ["runtime/runtime.h", "tasks/identity.cuh", "runtime/entry.h"], headers
    assert all(os.path.isfile(os.path.join(build.csrc_dir(), h)) for h in headers)
    cmd = (lines[i][len("// Build by hand: "):] + " " + lines[i + 1].lstrip("/ ").split("(")[0]).split()
    cmd = [{"<csrc>": build.csrc_dir(), "<this": pk.output_files[0], "file>": None,
            "module.so": str(tmp_path / "by_hand.so")}.get(w, w) for w in cmd]
    cmd = [w for w in cmd if w is not None] + ["-DMPK_TEST_MODE"]
    print("BUILD BY HAND:", " ".join(cmd))
    subprocess.run(cmd, check=True)
    lib = ctypes.CDLL(str(tmp_path / "by_hand.so"))
    assert lib.mpk_abi_version() == abi.ABI_VERSION


def test_a_compile_names_its_kernels_and_time(tmp_path, monkeypatch):
    """Progress (issue 10 item 5): a cache miss says which kernels it compiles, then how long it took."""
    monkeypatch.setenv("MPK_CACHE_DIR", str(tmp_path))
    with mpk_log() as log:
        r = build.compile_module(TINY, "cpu", True, what="mpk::rmsnorm_task<mpk::bf16_t>")
    want = f"compiling {r.key[:16]} (mpk::rmsnorm_task<mpk::bf16_t>) with {COMPILER} (cache miss)"
    assert log[0] == want, log
    assert re.fullmatch(rf"compiled {r.key[:16]} in \d+\.\d\d s", log[-1]), log
