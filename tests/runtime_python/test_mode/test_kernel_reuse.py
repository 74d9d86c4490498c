"""Kernel reuse like MPK's load_mpk_kernel(output_dir): compile once, run later without a compiler.

compile(output_dir=D) keeps the module and its metadata beside test_rank0.cu/task_graph_rank0.json;
a new process that declares the same graph calls pk.load_mpk_kernel(D) and runs. The test
proves no compiler runs there (no compiler on PATH, MPK_CXX pointing nowhere, compile_module
patched to fail, an empty cache), and that every mismatch is an error naming what differs.

Run: pytest tests/runtime_python/test_mode/test_kernel_reuse.py -s
"""
import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest
import torch

from mirage.mpk import build
from mirage.mpk.errors import MPKRuntimeError

BLOCK = (128, 1, 1)

# One graph, declared identically by the compiling and the loading process: rmsnorm -> linear.
DECLARE = '''
import torch
from mirage.mpk import testing
from mirage.mpk.persistent_kernel import PersistentKernel


def declare(dtype=torch.float32, grid=4, extra=False, test_mode=True):
    gen = testing.generator(offset=31)
    params = testing.cpu_config(jitter_seed=5)
    params["test_mode"] = test_mode
    pk = PersistentKernel(**params)
    x, w = testing.randn((8, 64), dtype, gen), testing.randn((64,), dtype, gen)
    W = testing.randn((24, 64), dtype, gen, scale=0.125)
    out = torch.zeros(8, 24, dtype=dtype)
    y = pk.new_tensor((8, 64), dtype=dtype, name="y")
    pk.rmsnorm_layer(pk.attach_input(x, name="x"), pk.attach_input(w, name="w"), y, (grid, 1, 1), (128, 1, 1))
    pk.linear_layer(y, pk.attach_input(W, name="W"), pk.attach_input(out, name="out"), (3, 1, 1), (128, 1, 1))
    if extra:
        pk.new_tensor((2, 2), dtype=dtype, name="z")
    return pk, x, w, W, out


def check(pk, x, w, W, out, label):
    y = x.double() * torch.rsqrt(x.double().pow(2).mean(-1, keepdim=True) + 1e-6) * w.double()
    ref = y @ W.double().T
    # out's inputs are rmsnorm's fp32 outputs: one rounding from the float64 y (u_in)
    tol = testing.tol_linear(out.dtype, 64, y.abs() @ W.double().abs().T, input_rounding=out.dtype)
    testing.check_output(label, out, ref, tol, pk.layers[1].checks)
'''


@pytest.fixture(scope="module")
def kept(tmp_path_factory):
    """A kernel compiled with output_dir (what a first process leaves behind) and the declaring module."""
    root = tmp_path_factory.mktemp("reuse")
    (root / "declare_graph.py").write_text(DECLARE)
    sys.path.insert(0, str(root))
    import declare_graph
    pk, *tensors = declare_graph.declare()
    pk.compile(output_dir=str(root / "out"))
    pk()
    declare_graph.check(pk, *tensors, "reuse.compiled")
    pk.finalize()
    yield root, declare_graph
    sys.path.remove(str(root))


def test_compile_keeps_module_graph_and_metadata(kept):
    root, _ = kept
    files = sorted(os.listdir(root / "out"))
    assert files == ["kernel_metadata_rank0.json", "mpk_module_rank0.so", "task_graph_rank0.json",
                     "test_rank0.cu"], files
    meta = json.loads((root / "out" / "kernel_metadata_rank0.json").read_text())
    for key in ("format", "abi_version", "backend", "source_sha256", "graph_sha256", "csrc_sha256",
                "world_size", "rank", "tensors", "layers", "module_sha256", "module_bytes", "test_mode"):
        assert key in meta, key
    assert meta["backend"] == "cpu" and meta["world_size"] == 1 and meta["rank"] == 0
    assert meta["tensors"]["x"] == {"dims": [8, 64], "dtype": "float32", "kind": "attached"}
    print(f"REUSE kept {files}; metadata keys {sorted(meta)} PASS")


def test_a_new_process_loads_and_runs_without_a_compiler(kept, tmp_path):
    root, _ = kept
    script = tmp_path / "load.py"
    script.write_text(textwrap.dedent(f'''
        import os, sys
        sys.path.insert(0, {str(root)!r})
        from mirage.mpk import build
        def refuse(*a, **k):
            raise AssertionError("compile_module was called by load_mpk_kernel")
        build.compile_module = refuse
        import declare_graph
        pk, *tensors = declare_graph.declare()
        pk.load_mpk_kernel({str(root / "out")!r})
        pk()
        declare_graph.check(pk, *tensors, "reuse.loaded")
        pk.finalize()
        print("cache entries:", os.listdir(os.environ["MPK_CACHE_DIR"]))
    '''))
    empty_bin, cache = tmp_path / "bin", tmp_path / "cache"
    empty_bin.mkdir()
    cache.mkdir()
    env = dict(os.environ, PATH=str(empty_bin), MPK_CXX="no-such-compiler-mpk", MPK_CACHE_DIR=str(cache),
               MPK_LOG_LEVEL="INFO")     # the load_mpk_kernel line asserted below is an INFO record
    assert shutil.which("g++", path=env["PATH"]) is None
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120,
                          cwd=str(tmp_path))
    print(proc.stdout + proc.stderr)
    assert proc.returncode == 0, proc.stderr
    assert "EVIDENCE reuse.loaded float32 (8, 24)" in proc.stdout and " PASS" in proc.stdout
    assert "cache entries: []" in proc.stdout and "load_mpk_kernel: " in proc.stderr
    assert "compiling" not in proc.stderr


def expect_refusal(kept, *fragments, **declare_kw):
    root, declare_graph = kept
    pk, *_ = declare_graph.declare(**declare_kw)
    with pytest.raises(ValueError) as e:
        pk.load_mpk_kernel(str(root / "out"))
    msg = str(e.value)
    print(f"REUSE refused {declare_kw}: {msg}")
    for f in fragments:
        assert f in msg, (f, msg)


def test_a_changed_grid_is_named(kept):
    expect_refusal(kept, "layer 'rmsnorm_0': grid_dim saved [4, 1, 1], now [2, 1, 1]", grid=2)


def test_a_changed_dtype_is_named(kept):
    expect_refusal(kept, "source_sha256: saved", "tensor 'x': dtype saved float32, now bfloat16",
                   "layer 'linear_1': variant saved mpk::linear_task<float>, now "
                   "mpk::linear_task<mpk::bf16_t>",
                   dtype=torch.bfloat16)


def test_an_extra_tensor_and_another_mode_are_named(kept):
    expect_refusal(kept, "tensor 'z': declared now, not in the saved kernel", extra=True)
    expect_refusal(kept, "test_mode: saved True, now False", test_mode=False)


def test_rank_and_world_size_are_checked(kept, tmp_path):
    root, declare_graph = kept
    other = tmp_path / "other"
    shutil.copytree(root / "out", other)
    path = other / "kernel_metadata_rank0.json"
    meta = json.loads(path.read_text())
    meta.update(world_size=2)
    path.write_text(json.dumps(meta))
    pk, *_ = declare_graph.declare()
    with pytest.raises(ValueError, match=r"world_size: saved 2, now 1"):
        pk.load_mpk_kernel(str(other))


def test_changed_kernel_sources_are_named(kept, tmp_path, monkeypatch):
    root, declare_graph = kept
    copy = tmp_path / "csrc"
    shutil.copytree(build.csrc_dir(), copy)
    with open(copy / "tasks" / "rmsnorm.cuh", "a") as f:
        f.write("\n// an edited kernel\n")
    monkeypatch.setenv("MPK_CSRC_DIR", str(copy))
    pk, *_ = declare_graph.declare()
    with pytest.raises(ValueError, match=r"csrc_sha256: saved '[0-9a-f]{64}', now '[0-9a-f]{64}'"):
        pk.load_mpk_kernel(str(root / "out"))


def test_skip_validation_skips_the_graph_check_only(kept):
    root, declare_graph = kept
    pk, *tensors = declare_graph.declare(grid=2)      # same variants: the module serves this graph too
    pk.load_mpk_kernel(str(root / "out"), skip_validation=True)
    pk()
    declare_graph.check(pk, *tensors, "reuse.skip_validation_grid2")
    pk.finalize()
    pk, *_ = declare_graph.declare(dtype=torch.bfloat16)     # other kernels: never loaded
    with pytest.raises(ValueError, match=r"source_sha256: saved"):
        pk.load_mpk_kernel(str(root / "out"), skip_validation=True)


def test_a_corrupted_or_missing_module_is_named(kept, tmp_path):
    root, declare_graph = kept
    broken = tmp_path / "broken"
    shutil.copytree(root / "out", broken)
    so = broken / "mpk_module_rank0.so"
    so.write_bytes(so.read_bytes()[:1000])
    pk, *_ = declare_graph.declare()
    with pytest.raises(MPKRuntimeError, match=rf"{so} \(1000 bytes\) does not match the checksum recorded at "
                                              rf"compile \(\d+ bytes\)"):
        pk.load_mpk_kernel(str(broken))
    so.unlink()
    with pytest.raises(FileNotFoundError, match=rf"{so} not found; run compile\(output_dir="):
        pk.load_mpk_kernel(str(broken))
    with pytest.raises(FileNotFoundError, match="mpk_module_rank0.so not found"):
        pk.load_mpk_kernel(str(tmp_path / "nowhere"))


def test_load_after_compile_and_compile_into_a_file_are_refused(kept, tmp_path):
    root, declare_graph = kept
    pk, *_ = declare_graph.declare()
    pk.compile()
    with pytest.raises(RuntimeError, match=r"load_mpk_kernel\(\): this PersistentKernel was already "
                                           r"compiled"):
        pk.load_mpk_kernel(str(root / "out"))
    pk.finalize()
    afile = tmp_path / "a_file"
    afile.write_text("x")
    pk, *_ = declare_graph.declare()
    with pytest.raises(NotADirectoryError, match=rf"compile\(output_dir='{afile}'\): {afile} exists and is "
                                                 rf"not a directory"):
        pk.compile(output_dir=str(afile))
