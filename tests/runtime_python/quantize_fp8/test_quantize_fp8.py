"""quantize_fp8: the kernel alone (testing.run_tasks; docs/kernel_tests.md).

Each task runs by itself on one emulated worker block, with no scheduler and everything outside its
declared tiles poisoned: a task that writes outside its output tiles, reads outside its input tiles,
races with itself or leaves an output element unwritten is a testing.MPKFootprintError naming its grid
coordinate, the tensor and the elements. The codes are held to half an e4m3 ulp of the unrounded
quotients (tol_elementwise(float8_e4m3): the one rounding the kernel adds), the scales to fp32's
rounding of amax / 448, and the codes bit for bit to torch's e4m3 rounding of x / s under the scales
the kernel wrote; both group sizes, 2-D and 3-D inputs, a group of zeros. Negative control: codes
from the scales of the other group size fail. test_quantize_fp8_testmode.py runs the layer in a graph.

Run: python tests/runtime_python/quantize_fp8/test_quantize_fp8.py   (or pytest this file; -k to pick cases)
"""
import sys

import pytest
import torch

from mirage.mpk import testing
from mirage.mpk.dtypes import float8_e4m3
from mirage.mpk.persistent_kernel import PersistentKernel

ref = testing.load_reference(__file__)

DTYPES = [torch.bfloat16, torch.float16, torch.float32]
TARGETS = [80, 90]       # the worker block: 128 threads (sm_80), 256 (sm_90a / sm_100a)
# (shape, grid.x, group, coords): an even split; the edge tasks of a non-power-of-two split (3 tiles of 2
# rows) with 64-wide groups; one row, one task; a 3-D [batch, topk, K] input split by batch.
SHAPES = [((16, 256), 4, 128, None), ((6, 192), 3, 64, "edges"), ((1, 128), 1, 128, None),
          ((3, 2, 256), 3, 64, None)]


block_dim = testing.worker_block_dim     # 128 threads (sm_80), 256 from Hopper on


def inputs(shape, dtype, seed):
    x = testing.randn(shape, dtype, testing.generator(offset=seed))
    x.view(-1, shape[-1])[0, :64] = 0        # a group of zeros (its scale 1e-10 / 448, its codes 0)
    return x


def run_kernel(dtype, x, grid, group, coords, target_cc):
    """run_tasks over the layer's tasks, then the evidence over the tiles of the tasks that ran."""
    def layer_call(pk, t):
        pk.quantize_fp8_layer(input=t["x"], output_fp8=t["q"], output_scale=t["s"], grid_dim=(grid, 1, 1),
                              block_dim=block_dim(target_cc), scale_ue8m0=False, group_size=group)

    scales = torch.zeros(*x.shape[:-1], x.shape[-1] // group)
    run = testing.run_tasks(layer_call, {"x": x, "q": torch.zeros(x.shape, dtype=torch.float8_e4m3fn),
                                         "s": scales}, coords, target_cc=target_cc)
    codes, scale = ref.quantize_fp8(x, group)
    run.check("q", codes, testing.tol_elementwise(float8_e4m3), run.layer.checks)
    run.check("s", scale, testing.tol_elementwise(torch.float32), run.layer.checks)
    # and bit for bit: torch's own e4m3 rounding (ties to even) of the fp32 quotients under the scales
    # the kernel wrote, clamped to +-448 first (torch turns a larger float into NaN, CUDA saturates)
    quotients = x.float().unflatten(-1, (-1, group)) / run.outputs["s"].unsqueeze(-1)
    exact = quotients.clamp(-ref.FP8_MAX, ref.FP8_MAX).flatten(-2).to(torch.float8_e4m3fn)
    cover = run.covered["q"]
    testing.assert_equal(f"{run.layer.name}.q bits vs torch's e4m3 of x / s", run.outputs["q"][cover].view(
        torch.uint8), exact[cover].view(torch.uint8))
    return run


@pytest.mark.parametrize("target_cc", TARGETS)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("shape,grid,group,coords", SHAPES, ids=lambda v: "x".join(map(str, v))
                         if isinstance(v, tuple) else str(v))
def test_kernel(dtype, shape, grid, group, coords, target_cc):
    run_kernel(dtype, inputs(shape, dtype, sum(shape) * 7 + group), grid, group, coords, target_cc)


@pytest.mark.parametrize("target_cc", TARGETS)
def test_kernel_strided(target_cc):
    # x a column block of a wider matrix: its row stride (3 * 128) is not its width, so a kernel that
    # takes one tensor's strides for another's fails here
    wide = testing.randn((6, 3 * 128), torch.bfloat16, testing.generator(offset=7))
    run_kernel(torch.bfloat16, wide[:, 128:256], 3, 64, None, target_cc)


def run_kernel_ue8m0(dtype, x, grid, group, coords, target_cc):
    """scale_ue8m0=True: the packed UE8M0 words exactly (every task's columns), the codes within half an
    e4m3 ulp of x / 2^ceil(log2 s) and bit for bit torch's e4m3 of that quotient."""
    from mirage.mpk.layers.quantize_fp8 import packed_scale_shape

    def layer_call(pk, t):
        pk.quantize_fp8_layer(input=t["x"], output_fp8=t["q"], output_scale=t["s"], grid_dim=(grid, 1, 1),
                              block_dim=block_dim(target_cc), scale_ue8m0=True, group_size=group)

    rows = x.numel() // x.shape[-1]
    words = torch.zeros(packed_scale_shape(rows, x.shape[-1], group), dtype=torch.uint32)
    run = testing.run_tasks(layer_call, {"x": x, "q": torch.zeros(x.shape, dtype=torch.float8_e4m3fn),
                                         "s": words}, coords, target_cc=target_cc)
    codes, packed, pow2 = ref.quantize_fp8_ue8m0(x, group)
    run.check("q", codes, testing.tol_elementwise(float8_e4m3), run.layer.checks)
    cover = run.covered["s"]
    got = run.outputs["s"].view(torch.int32).long() & 0xFFFFFFFF
    testing.assert_equal(f"{run.layer.name}.s UE8M0 words ({int(cover.sum())} of {cover.numel()})",
                         got[cover], packed[cover])
    exact = (x.double().unflatten(-1, (-1, group)) / pow2.unsqueeze(-1)).clamp(-ref.FP8_MAX, ref.FP8_MAX)
    exact = exact.flatten(-2).to(torch.float8_e4m3fn)
    qc = run.covered["q"]
    testing.assert_equal(f"{run.layer.name}.q bits vs torch's e4m3 of x / 2^e", run.outputs["q"][qc].view(
        torch.uint8), exact[qc].view(torch.uint8))
    return run


@pytest.mark.parametrize("target_cc", TARGETS)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("shape,grid,group,coords", SHAPES + [((5, 640), 5, 128, None)],
                         ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else str(v))
def test_kernel_ue8m0(dtype, shape, grid, group, coords, target_cc):
    # (5, 640): 5 groups, so the second word holds one code and three zero bytes; 5 rows, 3 padding columns
    x = inputs(shape, dtype, sum(shape) * 7 + group + 1)
    x.view(-1, shape[-1])[-1, -group:] *= 2.0 ** 10      # a group far from the others' scale (fp16: < 65504)
    run_kernel_ue8m0(dtype, x, grid, group, coords, target_cc)


def test_ue8m0_code_of_a_power_of_two_is_exact():
    """amax = 448 * 2^-6 exactly: s = 2^-6, whose code is 121 (ceil of an exact log2), not 122; just
    above it the next power. MPK's ceilf(log2f(s)) may round either way there; the bits do not."""
    x = torch.zeros(2, 128)
    x[0, 5], x[1, 7] = 448 * 2.0**-6, 448 * 2.0**-6 * (1 + 2.0**-23)
    run = run_kernel_ue8m0(torch.float32, x, 1, 128, None, 80)
    got = run.outputs["s"].view(torch.int32)
    assert got[0, 0] == 121 and got[0, 1] == 122, f"codes {got[0, :2].tolist()}, expected [121, 122]"


def test_ue8m0_bad_scale_shape_is_named():
    pk = PersistentKernel(**testing.cpu_config())
    x = pk.attach_input(torch.zeros(5, 640, dtype=torch.bfloat16), name="x")
    q = pk.attach_input(torch.zeros(5, 640, dtype=torch.float8_e4m3fn), name="q")
    s = pk.attach_input(torch.zeros(2, 5, dtype=torch.uint32), name="s")
    with pytest.raises(ValueError, match=r"'s' \(output_scale\) dim 1 is 5, expected 8"):
        pk.quantize_fp8_layer(input=x, output_fp8=q, output_scale=s, grid_dim=(5, 1, 1),
                              block_dim=(128, 1, 1))
    pk.finalize()


def test_other_group_size_fails():
    """Negative control: the 128-wide scales' codes checked against the 64-wide reference fail."""
    x = inputs((4, 256), torch.bfloat16, 11)
    got = run_kernel(torch.bfloat16, x, 2, 128, None, 80)
    wrong, _ = ref.quantize_fp8(x, 64)
    with pytest.raises(AssertionError):
        testing.assert_close("q vs the 64-wide reference (must FAIL)", got.outputs["q"], wrong,
                             testing.tol_elementwise(float8_e4m3))


if __name__ == "__main__":
    testing.run_pytest_file_as_script(__file__, sys.argv[1:])
