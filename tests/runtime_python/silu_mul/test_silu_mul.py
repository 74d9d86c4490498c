"""silu_mul_layer's kernel alone (csrc/tasks/silu_mul.cuh): each task on one block, nothing else running,
every byte around its tiles poisoned (testing.run_tasks: writes only its output tiles, reads only its
input tiles, independent of its threads' order, every output element written).

Covers, for bf16, fp16 and fp32 at 128 threads (target_cc 80) and 256 (target_cc 90):
  - every task of a non-power-of-two g (grid.x: tiles [gate (m) | up (m)] of width 2m), a 2-D grid, an
    MPK-like tile width (m = 256), m no multiple of the 16-byte pack (the scalar path in bf16 / fp16),
    one output column per task (m = 1);
  - the edge tasks (first and last) of a 5 x 3 grid, and one-row tiles (grid.y = batch);
  - strided views the kernel accepts (header of silu_mul.cuh: x any row and column stride, y its own
    strides): x a column block of a wider matrix (the packed path with x's row stride 6I, not twice y's),
    x rows padded (the scalar path), x every other column (up is m x's column stride past gate, not m
    elements), y a column block of a wider output, y every other column;
  - gates through silu's tails (exp(-g) overflows below -88.7; the kernel's g < -80 branch) on the packed
    and the scalar path, finite only:
    NaN / inf inputs are tests/csrc/test_kernels_elementwise.cpp's (the evidence's finite check).

Run: python tests/runtime_python/silu_mul/test_silu_mul.py   (or pytest this file; -k to pick cases)
The integration test is test_silu_mul_testmode.py beside it; both use pytorch_reference.py.
"""
import sys

import pytest
import torch

from mirage.mpk import testing

ref = testing.load_reference(__file__)

DTYPES = [torch.bfloat16, torch.float16, torch.float32]
TARGETS = [80, 90]       # the worker block: 128 threads (sm_80), 256 (sm_90a / sm_100a)
# (batch, intermediate I, (g = grid.x, grid.y), coords): input [batch, 2I] in g tiles [gate | up] of width
# 2m (m = I / g), output [batch, I] in g column tiles of m; grid.y splits rows.
SHAPES = [
    (8, 96, (6, 1), None),           # every task of a non-power-of-two g: m = 16, the packed path
    (6, 320, (5, 3), "edges"),       # the first and last task of a 5 x 3 grid (m = 64, 2 rows)
    (3, 12, (3, 3), None),           # one-row tiles, m = 4: packed in fp32 only (pack 4; bf16 / fp16: 8)
    (5, 36, (1, 1), None),           # m = 36, no multiple of 8: the scalar path in bf16 / fp16
    (1, 5, (5, 1), None),            # one-row tiles of one output column ([gate | up] = 2 columns)
    (4, 512, (4, 2), None),          # m = 128, an MPK-like tile width (tests/csrc "task 2 of 4, I=512")
]
# Strided views, (row stride, column stride) per tensor, None = contiguous: (what, batch, I, grid, x, y)
STRIDED = [
    # x columns [2I, 4I) of a [B, 6I] matrix: the packed path with x's row stride 6I (y's is I)
    ("x column block", 4, 64, (4, 2), (384, 1), None),
    # x rows padded to 2I + 2 (tests/csrc "x row stride 130"): the scalar path (rows misaligned)
    ("x row stride 2I+2", 3, 64, (1, 1), (130, 1), None),
    # x every other column of [B, 4I]: gate and up at x's column stride
    ("x column stride 2", 3, 48, (3, 1), (192, 2), None),
    # y columns [1, 6) of a [3, 11] output, x rows padded to 12 (tests/csrc "column tile of [3,11]")
    ("y column tile of 3x11", 3, 5, (1, 1), (12, 1), (11, 1)),
    # y every other column of [B, 2I + 1] (tests/csrc "y col stride 2"), with a column split
    ("y column stride 2", 2, 8, (2, 1), None, (17, 2)),
    # y columns of a [B, 4I] output (packed: row stride 4I aligned) and x a column block of [B, 6I]:
    # g = 4; x's row stride is not twice y's
    ("x, y column blocks", 4, 128, (4, 2), (768, 1), (512, 1)),
]
# silu's tails, finite: exp(-g) overflows below -88.7, exp(g) is an fp32 subnormal below -87.3, the
# kernel rescales below -80; around 0 and large positive gates.
TAIL_GATES = [-120, -112, -105, -100, -95, -90, -88.8, -88.5, -87.5, -87, -85, -80.5, -80, -79.5, -50, -20,
              -1, -1e-30, 0.0, 1e-30, 1, 20, 80, 88.8]


block_dim = testing.worker_block_dim


strided = testing.strided_view


def run_kernel(dtype, x, out, grid, coords, target_cc):
    """run_tasks over silu_mul's tasks, then the evidence over the tiles of the tasks that ran."""
    run = testing.run_tasks(
        lambda pk, t: pk.silu_mul_layer(input=t["x"], output=t["out"], grid_dim=(grid[0], grid[1], 1),
                                        block_dim=block_dim(target_cc)),
        {"x": x, "out": out}, coords=coords, target_cc=target_cc)
    # the reference pairs gate and up within each of the grid's g tiles; the budget of
    # test_silu_mul_testmode.py
    run.check("out", ref.silu_mul(x, groups=grid[0]), testing.tol_elementwise(dtype), inputs=(x,))
    return run


@pytest.mark.parametrize("target_cc", TARGETS)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("batch,inter,grid,coords", SHAPES,
                         ids=lambda c: "x".join(map(str, c)) if isinstance(c, tuple) else str(c))
def test_silu_mul_kernel(dtype, batch, inter, grid, coords, target_cc):
    gen = testing.generator(offset=batch * 100003 + inter * 17 + grid[0])
    x = testing.randn((batch, 2 * inter), dtype, gen, scale=2.0)   # gates well into silu's curved part
    out = torch.zeros(batch, inter, dtype=dtype)
    run_kernel(dtype, x, out, grid, coords, target_cc)


@pytest.mark.parametrize("target_cc", TARGETS)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("what,batch,inter,grid,x_layout,y_layout", STRIDED,
                         ids=[c[0].replace(" ", "_").replace(",", "") for c in STRIDED])
def test_silu_mul_kernel_strided(dtype, what, batch, inter, grid, x_layout, y_layout, target_cc):
    gen = testing.generator(offset=31 * inter + grid[0])
    x = strided((batch, 2 * inter), x_layout, dtype, gen, scale=2.0)
    out = strided((batch, inter), y_layout, dtype, gen, zeros=True)
    assert not (x.is_contiguous() and out.is_contiguous()), what
    run_kernel(dtype, x, out, grid, None, target_cc)


@pytest.mark.parametrize("target_cc", TARGETS)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("pad", [0, 1], ids=["packed", "scalar"])
def test_silu_mul_kernel_tails(dtype, pad, target_cc):
    """Gates through silu's tails in every tile (g = 2, m = 24): row b's ups are 1, -0.75, then random,
    so the tiny results stay inside the dtype's range where they can. pad 1: x's rows padded by one
    element, the scalar path (tests/csrc "tails, scalar")."""
    batch, m, g = 4, len(TAIL_GATES), 2
    gen = testing.generator(offset=4242)
    x = strided((batch, 2 * m * g), (2 * m * g + pad, 1), dtype, gen, scale=2.0)
    gates = torch.tensor(TAIL_GATES, dtype=torch.float32).to(dtype)
    for j in range(g):
        x[:, 2 * m * j:2 * m * j + m] = gates
        x[0, 2 * m * j + m:2 * m * (j + 1)] = 1.0
        x[1, 2 * m * j + m:2 * m * (j + 1)] = -0.75
    out = torch.zeros(batch, m * g, dtype=dtype)
    run_kernel(dtype, x, out, (g, 1), None, target_cc)



@pytest.mark.quick
def test_silu_mul_kernel_quick():
    """The quick subset's case (pytest -m quick, and the sanitizer runs of
    test_mode/test_kernel_sanitizers.py): x a column block (row stride 6I) at 256 threads, bf16."""
    test_silu_mul_kernel_strided(torch.bfloat16, *STRIDED[0], 90)


if __name__ == "__main__":
    testing.run_pytest_file_as_script(__file__, sys.argv[1:])
