"""Memory safety in test mode (docs/runtime.md): a kernel that goes outside a tensor raises
MPKMemoryError naming the layer, the task's grid coordinate, the tensor and the byte range, in this
process, which then runs a normal graph fine. The broken kernels are the fault kinds overrun /
underrun / overread (mirage/mpk/faults.py) on rmsnorm's output 'out' [32, 128] bf16 (8192 bytes,
one 256-byte row per task). Negative controls: with the red-zone check off a near overrun passes
unnoticed; with the guard table withheld from the runtime a far overrun kills the process. And a
tensor given as both an input and an output is refused unless the layer declares that in-place use.
Run: python -m pytest tests/runtime_python/test_mode/test_memory_safety.py
"""
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from mirage.mpk import guard, layers, testing
from mirage.mpk.errors import MPKMemoryError
from mirage.mpk.faults import Fault
from mirage.mpk.persistent_kernel import PersistentKernel

BLOCK = (128, 1, 1)
LAST = (31, 0, 0)


def rmsnorm(fault=None, out=None, **params):
    """pk, out and the float64 reference of rmsnorm over x [32, 128] bf16, one row per task."""
    pk = PersistentKernel(test_mode=True, num_workers=2, num_local_schedulers=1, fault=fault, **params)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(32, 128, generator=g).to(torch.bfloat16)
    w = torch.randn(128, generator=g).to(torch.bfloat16)
    out = torch.zeros(32, 128, dtype=torch.bfloat16) if out is None else out
    pk.rmsnorm_layer(input=pk.attach_input(x, name="x"), weight=pk.attach_input(w, name="w"),
                     output=pk.attach_input(out, name="out"), grid_dim=(32, 1, 1), block_dim=BLOCK)
    pk.compile()
    ref = x.double() * torch.rsqrt(x.double().pow(2).mean(-1, keepdim=True) + 1e-6) * w.double()
    return pk, out, ref


def assert_heap_fine():
    """A normal graph in the same process, compared with its reference: nothing was corrupted."""
    pk, out, ref = rmsnorm()
    pk()
    torch.testing.assert_close(out.double(), ref, atol=0.05, rtol=0.02)
    pk.finalize()


CASES = {   # name: (fault, the message's first line)
    "one_row_past_end_red_zone": (
        Fault("overrun", "rmsnorm_0", LAST, amount=128),
        "task (31, 0, 0) of layer 'rmsnorm_0' wrote bytes [8192, 8448) of tensor 'out', which has 8192 "
        "bytes: 256 bytes past its end"),
    "one_element_past_end_red_zone": (
        Fault("overrun", "rmsnorm_0", LAST, amount=1),
        "task (31, 0, 0) of layer 'rmsnorm_0' wrote bytes [8192, 8194) of tensor 'out', which has 8192 "
        "bytes: 2 bytes past its end"),
    "far_past_end_guard_page": (
        Fault("overrun", "rmsnorm_0", LAST, amount=4, element=100_000),
        "task (31, 0, 0) of layer 'rmsnorm_0' wrote bytes [208192, 208200) of tensor 'out', which has 8192 "
        "bytes: 200000 to 200008 bytes past its end"),
    "before_start_red_zone": (
        Fault("underrun", "rmsnorm_0", (0, 0, 0), amount=2),
        "task (0, 0, 0) of layer 'rmsnorm_0' wrote bytes [-4, 0) of tensor 'out', which has 8192 bytes: "
        "4 bytes before its start"),
    "far_before_start_guard_page": (
        Fault("underrun", "rmsnorm_0", (5, 0, 0), amount=2, element=5000),
        "task (5, 0, 0) of layer 'rmsnorm_0' wrote bytes [-8724, -8720) of tensor 'out', which has 8192 "
        "bytes: 8720 to 8724 bytes before its start"),      # 10000 bytes before its tile, at byte 1280
    "read_far_past_end_guard_page": (
        Fault("overread", "rmsnorm_0", LAST, amount=4, element=100_000),
        "task (31, 0, 0) of layer 'rmsnorm_0' read bytes [208192, 208194) of tensor 'out', which has 8192 "
        "bytes: 200000 to 200002 bytes past its end (a guard page trapped it)"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_out_of_bounds_access_is_a_named_error_and_the_process_survives(case):
    fault, first_line = CASES[case]
    pk, out, ref = rmsnorm(fault)
    with pytest.raises(MPKMemoryError) as e:
        pk()
    print(f"\nMESSAGE {case}: {e.value}")
    assert str(e.value).splitlines()[0] == first_line
    assert "docs/runtime.md" in str(e.value)
    # the pass's in-bounds results were copied back to the user's tensor
    torch.testing.assert_close(out.double(), ref, atol=0.05, rtol=0.02)
    with pytest.raises(MPKMemoryError):   # a second launch: zones refilled, pages closed, the same report
        pk()
    pk.finalize()
    assert_heap_fine()


def test_negative_control_red_zone_check_off_near_overrun_unnoticed(monkeypatch):
    monkeypatch.setattr(guard.Guarded, "red_damage", lambda self: [])
    pk, out, _ = rmsnorm(CASES["one_row_past_end_red_zone"][0])
    pk()                                  # the overrun landed in the red zone, which nobody looks at
    pk.finalize()


def test_negative_control_without_the_guard_table_a_far_overrun_kills_the_process(tmp_path):
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        from mirage.mpk import memcheck
        from test_memory_safety import CASES, rmsnorm
        config = memcheck.Fences.config
        memcheck.Fences.config = lambda self: dict(config(self), num_guard_ranges=0)
        pk, out, ref = rmsnorm(CASES["far_past_end_guard_page"][0])
        pk()
        print("returned")
    """)
    env = dict(os.environ, MPK_LOG_LEVEL="WARNING")
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode != 0 and "returned" not in r.stdout, (r.returncode, r.stdout, r.stderr[-2000:])
    assert "Segmentation fault" in r.stderr or r.returncode == -11, r.stderr[-2000:]


def test_a_tensor_as_input_and_output_is_refused_unless_declared():
    pk = PersistentKernel(test_mode=True)
    x = pk.attach_input(torch.zeros(4, 8), name="x")
    with pytest.raises(ValueError) as e:
        pk.tensor_init_layer(input=x, dummy_input=x, dummy_output=pk.attach_input(torch.zeros(1), name="d"),
                             grid_dim=(1, 1, 1), block_dim=BLOCK)
    print(f"\nMESSAGE aliasing: {e.value}")
    assert str(e.value) == ("layer 'tensor_init_0': tensor 'x' is both its input 'dummy_input' ('x') "
                            "and its output 'input' ('x'); a tensor_init layer may not run in place there "
                            "(in-place uses it declares: none). Write to a separate tensor")
    y = pk.attach_input(torch.zeros(4, 8), name="y")
    view = pk.fuse_tensors([x], 0, 1, name="xv")          # a view of x: the same storage
    with pytest.raises(ValueError, match=r"layer 'tensor_init_0': tensor 'x' is both its input 'dummy_input' "
                                         r"\('xv'\) and its output 'input' \('x'\)"):
        pk.tensor_init_layer(input=x, dummy_input=view, dummy_output=y, grid_dim=(1, 1, 1), block_dim=BLOCK)
    pk.elementwise_add_layer(input_a=x, input_b=x, output=x, grid_dim=(2, 1, 1), block_dim=BLOCK)  # declared


def test_the_inplace_declaration_is_what_allows_it():
    x = PersistentKernel(test_mode=True).attach_input(torch.zeros(4, 8), name="x")
    io = dict(inputs=[layers.Access("input", x)], outputs=[layers.Access("output", x)], template=())
    assert layers.check_aliasing(layers.Layer("t_0", "t", (1, 1, 1), **io, inplace={"output": ("input",)})) \
        == ["'x' (output = input)"]
    with pytest.raises(ValueError, match=r"tensor 'x' is both its input 'input' \('x'\) and its output"):
        layers.check_aliasing(layers.Layer("t_0", "t", (1, 1, 1), **io))
    dummy = [layers.Access("output", x, written=False)]           # a dummy output is never written: fine
    assert layers.check_aliasing(layers.Layer("t_0", "t", (1, 1, 1), io["inputs"], dummy, ())) == []


def test_red_zones_without_guard_pages_as_on_the_gpu(monkeypatch):
    """The CUDA backend's guarded copies (guard.guarded_copy(pages=False): red zones only), driven
    on the CPU: a near overrun is still named; the guard table is empty."""
    copy = guard.guarded_copy
    monkeypatch.setattr(guard, "guarded_copy", lambda t, **kw: copy(t, pages=False))
    fault, first_line = CASES["one_row_past_end_red_zone"]
    pk, out, ref = rmsnorm(fault)
    assert pk._fences.config()["num_guard_ranges"] == 0
    with pytest.raises(MPKMemoryError) as e:
        pk()
    assert str(e.value).splitlines()[0] == first_line
    pk.finalize()


# ---- meta tensors (issue 31): guarded copies like the other tensors

def rmsnorm_into_a_meta_tensor(fault=None):
    """rmsnorm() with 'out' on the output_tokens meta tensor's storage ([1024] int64 = 8192 bytes, seen as
    the [32, 128] bf16 output: the same generated source, so the same build), output_tokens the first
    1024 of 1032 int64s, so a write past it lands in memory of ours. Returns pk, out, ref, the 1032."""
    storage = torch.full((1032,), -1, dtype=torch.int64)
    storage[:1024] = 0
    out = storage[:1024].view(torch.bfloat16).view(32, 128)
    meta = {"output_tokens": storage[:1024]}
    return (*rmsnorm(fault, out=out, max_num_batched_tokens=1024, meta_tensors=meta), storage)


META_CASES = {      # name: (fault, the message's first line)
    "near": (CASES["one_element_past_end_red_zone"][0],
             "task (31, 0, 0) of layer 'rmsnorm_0' wrote bytes [8192, 8200) of meta tensor 'output_tokens', "
             "which has 8192 bytes: 8 bytes past its end"),
    "far": (CASES["far_past_end_guard_page"][0],
            "task (31, 0, 0) of layer 'rmsnorm_0' wrote bytes [208192, 208200) of meta tensor "
            "'output_tokens', which has 8192 bytes: 200000 to 200008 bytes past its end"),
}


@pytest.mark.parametrize("case", list(META_CASES))
def test_meta_tensor_overrun_is_a_named_memory_error(case):
    """A tensor on a meta tensor's storage (MPK's demos attach output_tokens as the sampler's output) is
    read and written in the meta tensor's guarded copy, the one the runtime uses: a write past its end
    is an MPKMemoryError naming the meta tensor; the pass's results reach the meta tensor, nothing past
    it changes."""
    fault, first_line = META_CASES[case]
    pk, out, ref, storage = rmsnorm_into_a_meta_tensor(fault)
    with pytest.raises(MPKMemoryError) as e:
        pk()
    print(f"\nMESSAGE meta {case}: {str(e.value).splitlines()[0]}")
    assert str(e.value).splitlines()[0] == first_line, str(e.value)
    torch.testing.assert_close(out.double(), ref, atol=0.05, rtol=0.02)
    assert storage[1024:].tolist() == [-1] * 8, storage[1024:].tolist()
    pk.finalize()


def test_negative_control_meta_copy_red_zone_unchecked_near_overrun_unnoticed(monkeypatch):
    """The meta copy's red zone is what names it: unchecked, the same write passes (and stays in the copy's
    red zone: the memory past output_tokens is untouched)."""
    orig = guard.Guarded.red_damage
    monkeypatch.setattr(guard.Guarded, "red_damage", lambda g: [] if g.nbytes == 8192 else orig(g))
    pk, out, ref, storage = rmsnorm_into_a_meta_tensor(META_CASES["near"][0])
    pk()
    assert storage[1024:].tolist() == [-1] * 8, storage[1024:].tolist()
    print("\nCONTROL meta red zone unchecked: the overrun passed unnoticed")
    pk.finalize()


def test_a_shuffled_weight_is_refilled_in_its_guarded_copy_each_launch_and_outlives_finalize():
    """A shuffled tensor's storage is its guarded copy (memcheck.Fences.owned): pk() shuffles the inputs
    straight into it, with no copy per launch. So an input changed between launches must show in the
    next result, and the shuffle stays readable after finalize(), which unmaps the other copies."""
    g = torch.Generator().manual_seed(3)
    x, wg, wu = (torch.randn(*s, generator=g).to(torch.bfloat16) for s in ((4, 64), (32, 64), (32, 64)))
    out = torch.zeros(4, 64, dtype=torch.bfloat16)
    pk = PersistentKernel(test_mode=True, num_workers=2, num_local_schedulers=1)
    w = pk.shuffle_tensors([pk.attach_input(wg, name="wg"), pk.attach_input(wu, name="wu")], 0, 4, name="w")
    pk.linear_layer(pk.attach_input(x, name="x"), w, pk.attach_input(out, name="out"), (4, 1, 1), BLOCK)
    pk.compile()
    interleave = lambda: torch.cat([t[8 * i:8 * (i + 1)] for i in range(4) for t in (wg, wu)])  # noqa: E731
    for launch in range(2):
        if launch:
            wg.mul_(-2)                     # the shuffle must bring the new values in
        pk()
        tol = testing.tol_linear(torch.bfloat16, 64, x.double().abs() @ interleave().double().abs().T)
        ref = x.double() @ interleave().double().T
        testing.assert_close(f"linear over the shuffle, launch {launch}", out, ref, tol, pk=pk)
    pk.finalize()
    assert torch.equal(pk.get_tensor("w"), interleave())
