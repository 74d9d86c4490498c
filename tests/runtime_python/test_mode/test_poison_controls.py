"""Copies and in-place outputs: the blind spots of one poison for every tensor (mirage/mpk/poisons.py).

With one poison and one red-zone byte for all tensors, a kernel that copies a never-written element of
x into a slot of y nothing should touch changes nothing there, and a copy from x's red zone into y's
neither: identity with `y[yt.row_stride - 1] = x[xt.row_stride - 1]` passed all of test_identity.py,
and one-past-the-end to one-past-the-end passed test mode's memory check. And an output a layer also
reads (rmsnorm in place) was never checked for unwritten elements. Each tensor now has its own poisons
and red-zone bytes, per run, and in-place outputs get a second run from the poison where the pass left
elements bit-identical (written.InPlace). The negative controls below break identity.cuh in a scratch
copy of csrc/ (MPK_CSRC_DIR), or skip a task of an in-place rmsnorm, and each must fail with a message
naming the task and the tensor; the positive controls (the same graphs unbroken) pass.

Run: python -m pytest -q -s tests/runtime_python/test_mode/test_poison_controls.py
"""
import os

import pytest
import torch

from mirage.mpk import poisons, testing
from mirage.mpk.errors import MPKFootprintError, MPKMemoryError, MPKUnwrittenError
from mirage.mpk.faults import Fault
from mirage.mpk.persistent_kernel import PersistentKernel

pytestmark = pytest.mark.skipif(os.environ.get("MPK_TEST_DEVICE", "cpu") != "cpu",
                                reason="negative controls of the CPU emulation's checks")

TILES = "    const Tile2D xt = tile2d(v.in_tile(0)), yt = tile2d(v.out_tile(0));\n"
# Two bugs in one scratch build (one compile for both controls): thread 0 also copies
# - the element one row stride minus one past its tile's origin: for a column block (grid 2), an
#   element of the neighbouring tile, x's neighbour (poison) to y's neighbour (poison); for the whole
#   tensor (grid 1), an element of its own tile (harmless);
# - the element just past the tile's last row: for the whole contiguous tensor (grid 1), one past its
#   end, red zone to red zone; for a column block it lands past the end too, but the first bug shows
#   first (the writes inside a span are checked before the red zones).
BROKEN = TILES + ("    if (threadIdx.x == 0) {  // negative controls\n"
                  "        y[yt.row_stride - 1] = x[xt.row_stride - 1];\n"
                  "        y[yt.rows * yt.row_stride] = x[xt.rows * xt.row_stride];\n"
                  "    }\n")


def identity_kernel(x: torch.Tensor, grid: int):
    out = torch.zeros_like(x)
    return testing.run_tasks(
        lambda pk, t: pk.identity_layer(input=t["x"], output=t["out"], grid_dim=(grid, 1, 1),
                                        block_dim=(128, 1, 1)), {"x": x, "out": out})


def identity_test_mode(x: torch.Tensor) -> torch.Tensor:
    pk = PersistentKernel(**testing.cpu_config())
    xd = pk.attach_input(x, name="x")
    y = pk.attach_input(torch.zeros_like(x), name="y")
    pk.identity_layer(input=xd, output=y, grid_dim=(1, 1, 1), block_dim=(128, 1, 1))
    pk.compile()
    try:
        pk()
        return y.data.clone()
    finally:
        pk.finalize()


def x_input() -> torch.Tensor:
    return testing.randn((4, 64), torch.float32, testing.generator(offset=31))


def test_poisons_and_red_fills_differ_per_tensor_and_run():
    """Every dtype: first poisons are NaN (floats; e4m3 has one NaN only) and recognisable, second ones
    finite, both distinct across tensors of a run; red-zone bytes distinct, no NaN in any float type;
    another run moves them."""
    floats = (torch.float32, torch.bfloat16, torch.float16, torch.float8_e4m3fn)
    for dtype in (*floats, torch.int32, torch.int64):
        width = torch.empty(0, dtype=dtype).element_size()
        view = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[width]
        for k in (0, 1):
            n = min(poisons.space(dtype, k), 64)
            pats = torch.tensor([poisons.poison(dtype, i, 3, k) for i in range(n)]).to(view)
            assert pats.unique().numel() == n, f"{dtype} poison {k}: not distinct over {n} tensors"
            assert bool(poisons.is_poison(pats, dtype).all()) == (k == 0), f"{dtype} poison {k}"
            if dtype.is_floating_point:
                assert bool(pats.view(dtype).float().isnan().all()) == (k == 0), f"{dtype} poison {k}"
        if width > 1:
            assert poisons.poison(dtype, 0, 3) != poisons.poison(dtype, 0, 4), f"{dtype}: runs alike"
    fills = [poisons.red_fill(i, 3, k) for k in (0, 1) for i in range(100)]
    assert len(set(fills[:100])) == 100 and all(a != b for a, b in zip(fills[:100], fills[100:]))
    for b in poisons.RED_FILLS:
        for dtype in floats:
            width = torch.empty(0, dtype=dtype).element_size()
            value = torch.tensor([b] * width, dtype=torch.uint8).view(dtype).float()
            assert value.isfinite().all(), (b, dtype)
    testing.say(f"POISONS distinct per tensor and run, red fills {len(poisons.RED_FILLS)} finite bytes PASS")


def test_a_copy_of_the_neighbours_poison_is_a_footprint_error(tmp_path):
    """Negative control: identity's tile origin off by one row stride (thread 0 copies x's element
    (0, 63), task 1's, into y's (0, 63)). With one poison for x and y that wrote the value already
    there; now y's poison is not x's, so task (0, 0, 0) writes outside its tile, named."""
    x = x_input()
    identity_kernel(x, 2)                                       # positive control: the kernel unbroken
    with testing.mutated_kernel(tmp_path, "identity.cuh", TILES, BROKEN):
        with pytest.raises(MPKFootprintError) as e:
            identity_kernel(x, 2)
    msg = str(e.value).splitlines()[0]
    print(f"\nCAUGHT [off-by-one copy] kernel level: {msg}")
    assert msg == ("task (0, 0, 0) of layer 'identity_0' (identity) writes outside its declared output tiles "
                   "(first poison): tensor 'out' (float32, shape (4, 64), strides (64, 1)): (0, 63)"), msg


def test_a_copy_from_red_zone_to_red_zone_is_named(tmp_path):
    """Negative control: identity also copies x's one-past-the-end element into y's. With one red-zone
    byte for every tensor that left y's red zone as it was; now it is damage, named at kernel level
    (a write past y's end) and in test mode (an MPKMemoryError naming the task, the process unharmed)."""
    x = x_input()
    assert torch.equal(identity_test_mode(x), x)                # positive control: the kernel unbroken
    with testing.mutated_kernel(tmp_path, "identity.cuh", TILES, BROKEN):
        with pytest.raises(MPKFootprintError) as e:
            identity_kernel(x, 1)
        kernel_msg = str(e.value).splitlines()[0]
        with pytest.raises(MPKMemoryError) as e:
            identity_test_mode(x)
    print(f"\nCAUGHT [red zone copy] kernel level: {kernel_msg}")
    print(f"CAUGHT [red zone copy] test mode: {e.value}")
    assert kernel_msg == ("task (0, 0, 0) of layer 'identity_0' (identity) writes outside tensor 'out' "
                          "(float32, (4, 64), 1024 bytes): bytes [1024, 1028) relative to its first element, "
                          "past its end (first poison)"), kernel_msg
    assert str(e.value).startswith("task (0, 0, 0) of layer 'identity_0' wrote bytes [1024, 1028) of tensor "
                                   "'y', which has 1024 bytes: 4 bytes past its end"), str(e.value)


def rmsnorm_in_place(fault=None) -> torch.Tensor:
    """rmsnorm over x [6, 384] with output=x (a declared in-place use), 3 tasks of 2 rows."""
    gen = testing.generator(offset=47)
    x = testing.randn((6, 384), torch.float32, gen)
    w = testing.randn((384,), torch.float32, gen)
    pk = PersistentKernel(**testing.cpu_config(), fault=fault)
    xd = pk.attach_input(x, name="x")
    pk.rmsnorm_layer(input=xd, weight=pk.attach_input(w, name="w"), output=xd, grid_dim=(3, 1, 1),
                     block_dim=(128, 1, 1))
    pk.compile()
    try:
        pk()
        return x
    finally:
        pk.finalize()


def test_an_unwritten_in_place_tile_is_named():
    """Negative control: the `skip` fault on task (1, 0, 0) of an in-place rmsnorm leaves rows 2..3 of x
    as they were. Test mode cannot poison x before the pass (rmsnorm reads it), so those rows come out
    bit-identical; run again from the poison there, they still hold it: named. Positive control: the
    same graph with no fault passes and its rows are normalized."""
    out = rmsnorm_in_place()
    assert bool(out.isfinite().all()) and not bool(poisons.is_poison(out.view(torch.int32), out.dtype).any())
    with pytest.raises(MPKUnwrittenError) as e:
        rmsnorm_in_place(Fault("skip", "rmsnorm_0", (1, 0, 0)))
    print(f"\nCAUGHT [in-place skip] test mode: {e.value}")
    assert str(e.value) == ("1 output tile(s) were not written by the run (outputs it also reads: the "
                            "elements the pass left bit-identical, run again from the poison, still hold "
                            "it):\n"
                            "  layer 'rmsnorm_0' task (1, 0, 0): 768 of 768 elements of 'x'[2:4, 0:384] "
                            "unwritten"), str(e.value)
