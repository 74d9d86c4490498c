"""identity_layer's kernel alone (csrc/tasks/identity.cuh): each task on one block, nothing else running,
every byte around its tiles poisoned (testing.run_tasks: writes only its output tiles, reads only its
input tiles, independent of its threads' order, every output element written).

Covers: bf16, fp16, fp32 at target_cc 80 and 90 (128- and 256-thread worker blocks); every task of an
even split on the 16-byte packed path (grid.x splits the last dim, so every tile is a column block
with row stride > cols); the edge tasks of a non-power-of-two 2-D split; one-row tiles; one-column
tiles (the scalar path); a 3-D tensor (tiles [B, S, h] folded into B * S rows); strided views the
kernel accepts (x a column block of a wider matrix with y contiguous, y with its own padded row
stride, x with column stride 2, a 3-D x sliced along its last dim), so that a kernel using x's
strides for y or y's for x fails; and special bit patterns (-0, subnormals, inf, NaN payloads).
The output equals the input by design: the layer's own checks (run.layer.checks: finite, nonzero, no
"differs from input") apply, and every element must be a bit copy.

Run: python tests/runtime_python/identity/test_identity.py   (or pytest this file; -k to pick cases;
     -m quick: the one case of the quick iteration subset)
The integration test is test_identity_testmode.py beside it; both use pytorch_reference.py.
"""
import sys

import pytest
import torch

from mirage.mpk import testing

ref = testing.load_reference(__file__)

DTYPES = [torch.bfloat16, torch.float16, torch.float32]
TARGETS = [80, 90]       # the worker block: 128 threads (sm_80), 256 (sm_90a / sm_100a)
_INT = {2: torch.int16, 4: torch.int32}
# (shape, (grid.x, grid.y), coords): grid.x splits the last dim, grid.y the first. Every task of an
# even split (tiles 2 x 2048, packed); the edge tasks (first and last) of a 3 x 3 split (tiles 2 x 32);
# one-row tiles; one-column tiles (no pack fits: the scalar path, a column stride of 1 but one
# element per row); a 3-D tensor, tiles [2, 6, 8] (strides (240, 40, 1)) folded into 12 rows.
SHAPES = [((16, 4096), (2, 8), None), ((6, 96), (3, 3), "edges"), ((8, 96), (1, 8), None),
          ((3, 7), (7, 1), None), ((4, 6, 40), (5, 2), None)]
# Strided views, (dtype, shape, grid, layout): "x_cols": x a column block of a 3x wider matrix (row
# stride 3 * H), y contiguous; "y_rows": y rows padded to H + 8, x contiguous; "x_step": x every other
# column (column stride 2: the scalar path); "3d": x [B, S, H] the second half of [B, S, 2H] along
# the last dim (row stride 2H, the leading dims still packed), y contiguous.
STRIDED = [(torch.bfloat16, (6, 256), (2, 3), "x_cols"), (torch.float32, (4, 96), (3, 2), "y_rows"),
           (torch.float16, (6, 64), (2, 3), "x_step"), (torch.bfloat16, (4, 6, 32), (2, 2), "3d")]


block_dim = testing.worker_block_dim


params = testing.case_params


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(_INT[t.element_size()])


def run_kernel(dtype, x, out, grid, coords, target_cc, values=True):
    """run_tasks over identity's tasks; the evidence (values) and a bit comparison over the tiles of the
    tasks that ran. values=False: inputs with NaN / inf, where only the bits are compared."""
    run = testing.run_tasks(
        lambda pk, t: pk.identity_layer(input=t["x"], output=t["out"], grid_dim=(grid[0], grid[1], 1),
                                        block_dim=block_dim(target_cc)),
        {"x": x, "out": out}, coords=coords, target_cc=target_cc)
    if values:
        # the test-mode test's budget (below half an ulp: a copy), and the layer's checks: the output
        # equals its input by design, so "differs from input" is not among them
        run.check("out", ref.identity(x), testing.tol_elementwise(dtype), checks=run.layer.checks,
                  inputs=(x,))
    cover = run.covered["out"]
    got, want = bits(run.outputs["out"])[cover], bits(x)[cover]
    bad = (got != want).nonzero().flatten()
    name = f"{run.layer.name}.out[kernel,{len(run.tasks)} task(s)]"
    assert bad.numel() == 0, (f"{name}: not a bit copy at {bad.numel()} of {got.numel()} elements of the "
                              f"tasks' tiles; first (in tile order) 0x{int(got[bad[0]]) & 0xFFFFFFFF:x} != "
                              f"0x{int(want[bad[0]]) & 0xFFFFFFFF:x}")
    testing.say(f"EVIDENCE {name} bit copy {tuple(x.shape)} ({got.numel()} elements) PASS")
    return run


KERNEL = [(d, *s, cc) for s in SHAPES for d in DTYPES for cc in TARGETS]
STRIDED_CASES = [(*s, cc) for s in STRIDED for cc in TARGETS]
# quick: x a column block of a wider matrix at 256 threads (x's and y's row strides differ, packed path)
QUICK = (torch.bfloat16, (6, 256), (2, 3), "x_cols", 90)


@pytest.mark.parametrize("dtype,shape,grid,coords,target_cc", params(KERNEL, None))
def test_identity_kernel(dtype, shape, grid, coords, target_cc):
    gen = testing.generator(offset=shape[0] * 1000 + shape[-1])
    x = testing.randn(shape, dtype, gen)
    run_kernel(dtype, x, torch.zeros(shape, dtype=dtype), grid, coords, target_cc)


@pytest.mark.parametrize("dtype,shape,grid,layout,target_cc", params(STRIDED_CASES, QUICK))
def test_identity_kernel_strided(dtype, shape, grid, layout, target_cc):
    gen = testing.generator(offset=13 * shape[-1] + shape[0])
    *lead, h = shape
    out = torch.zeros(shape, dtype=dtype)
    if layout == "x_cols":
        x = testing.randn((*lead, 3 * h), dtype, gen)[..., h:2 * h]
        assert x.stride() == (3 * h, 1)
    elif layout == "y_rows":
        x = testing.randn(shape, dtype, gen)
        out = torch.zeros(*lead, h + 8, dtype=dtype)[..., :h]
        assert out.stride() == (h + 8, 1)
    elif layout == "x_step":
        x = testing.randn((*lead, 2 * h), dtype, gen)[..., ::2]
        assert x.stride() == (2 * h, 2)
    else:
        x = testing.randn((*lead, 2 * h), dtype, gen)[..., h:]
        assert x.stride() == (lead[1] * 2 * h, 2 * h, 1)
    run_kernel(dtype, x, out, grid, None, target_cc)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
def test_identity_kernel_special_bits(dtype):
    """Every bit pattern arrives unchanged (no fp32 round trip): -0, the smallest subnormal, +-inf and
    NaNs with payloads (quiet and signalling) among random values, on both paths (a packed 2-D split
    and one-column tiles)."""
    gen = testing.generator(offset=17)
    n = {2: 16, 4: 32}[torch.finfo(dtype).bits // 8]
    x = testing.randn((4, 64), dtype, gen)
    b = bits(x)                                    # a view of x's bits: writing it writes x
    sign = 1 << (n - 1)
    exp_all = {torch.bfloat16: 0x7F80, torch.float16: 0x7C00, torch.float32: 0x7F800000}[dtype]   # +inf
    specials = [sign, 1, sign | 1, exp_all, sign | exp_all, exp_all | 1, exp_all | 0x5, sign | exp_all | 0x3]
    specials = [s - (1 << n) if s >= 1 << (n - 1) else s for s in specials]     # as signed ints
    b.view(-1)[torch.arange(len(specials)) * 29 % b.numel()] = torch.tensor(specials, dtype=b.dtype)
    run_kernel(dtype, x, torch.zeros(4, 64, dtype=dtype), (4, 2), None, 80, values=False)
    run_kernel(dtype, x[:, :7], torch.zeros(4, 7, dtype=dtype), (7, 1), None, 90, values=False)


if __name__ == "__main__":
    testing.run_pytest_file_as_script(__file__, sys.argv[1:])
