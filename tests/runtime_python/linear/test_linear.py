"""linear_layer's kernel alone (csrc/tasks/linear.cuh): each task on one block, nothing else running,
every byte around its tiles poisoned (testing.run_tasks: writes only its output tiles, reads only its
input tiles, independent of its threads' order, every output element written).

Covers, for bf16, fp16 and fp32 at 128 threads (target_cc 80) and 256 (target_cc 90):
  - every task of a non-power-of-two column split with K = 1024 (the vector path; K long enough that
    the order of the fp32 accumulation shows in the bits), batch 13 (row chunks 8 + 4 + 1), 2-column and
    1-column tiles (the last column group repeats W row n - 1 and must store nothing for it), odd K and
    K below one 16-byte load (the scalar path), 8-row tiles of a 2 x 2 grid,
    a single output column at K = 4096 (an MPK hidden size);
  - the edge tasks (first and last) of a 5 x 3 grid, and one-row tiles (grid.y = batch);
  - strided views the kernel accepts (any strides; header of linear.cuh): x a column block of a wider
    matrix (row stride 3K, not K: a kernel reading x with K or with W's row stride fails), padded rows
    with a K mod 16-byte tail on the vector path, W every other column and x every other column (the
    scalar path with column strides), x rows misaligned, y a padded column block and y every other
    column (a kernel writing y with x's, W's or its own width's stride fails);
  - the stated summation order: the bits depend on K, the dtype and the path only, not on the grid's
    split nor on the block size: every case's bits at 128 threads equal those of one task over the whole
    output at 256 (as tests/csrc/test_kernels_linear.cpp checks; every tile of a case takes the same path).

Run: python tests/runtime_python/linear/test_linear.py   (or pytest this file; -k to pick cases)
The integration test is test_linear_testmode.py beside it; both use pytorch_reference.py.
"""
import sys

import pytest
import torch

from mirage.mpk import testing

ref = testing.load_reference(__file__)

DTYPES = [torch.bfloat16, torch.float16, torch.float32]
TARGETS = [80, 90]       # the worker block: 128 threads (sm_80), 256 (sm_90a / sm_100a)
# (batch, K, N, (grid.x, grid.y), coords): grid.x splits N (column tiles, row stride N), grid.y rows.
SHAPES = [
    (8, 1024, 48, (3, 1), None),     # every task of a non-power-of-two column split: 3 tiles of 16 columns
    (13, 256, 12, (3, 1), None),     # row chunks 8 + 4 + 1; one column group per tile
    (6, 520, 60, (5, 3), "edges"),   # the first and last task of a 5 x 3 grid (12 columns x 2 rows each)
    (3, 384, 10, (5, 3), None),      # one-row tiles of 2 columns: half of the column group is past n
    (1, 200, 7, (7, 1), None),       # decode (batch 1), one-column tiles
    (6, 37, 10, (5, 1), None),       # odd K: row stride 37 is no multiple of the pack, the scalar path
    (7, 200, 9, (1, 1), None),       # one task; row chunks 4 + 2 + 1; K = 200: a partial last warp step
    (16, 96, 40, (2, 2), None),      # row tiles of 8 rows (one full chunk each) x column tiles of 20
    (3, 4096, 1, (1, 1), None),      # one output column (3 of the 4 columns of the group past n), K = 4096
    (5, 3, 9, (3, 1), None),         # K below one 16-byte load: only some lanes have terms
]
# Strided views, (row stride, column stride) per tensor, None = contiguous (the kernel accepts any strides;
# the vector path needs unit column stride and 16-byte aligned rows, else the scalar path):
# (what, batch, K, N, grid, x, w, y)
STRIDED = [
    # x columns [K, 2K) of a [B, 3K] matrix: the vector path with x's row stride 3K, W's K, y's N
    ("x column block", 6, 256, 40, (5, 2), (768, 1), None, None),
    # padded rows, K + 5 (a multiple of the pack in every dtype): the vector path plus a K mod V tail
    ("padded rows K+5", 6, 203, 10, (2, 1), (208, 1), (208, 1), None),
    # the same with a short K: a tail of 37 mod V = 1 (fp32) or 5 (bf16, fp16) elements after the loads
    ("padded rows K+3", 9, 37, 8, (4, 1), (40, 1), (40, 1), None),
    # W every other column of [N, 2K]: the scalar path reading W with its column stride
    ("W column stride 2", 3, 50, 6, (2, 1), None, (100, 2), None),
    # x row stride K + 3: the scalar path; the second row tile starts misaligned
    ("x row stride K+3", 4, 128, 8, (2, 2), (131, 1), None, None),
    # x every other column, y every other column of [B, 2N]: column strides on both sides
    ("x, y column stride 2", 5, 96, 12, (3, 1), (192, 2), None, (24, 2)),
    # y columns [N, 2N) of a [B, 3N] output, x rows padded to 384: three different row strides
    ("y column block", 4, 320, 24, (3, 2), (384, 1), None, (72, 1)),
]


block_dim = testing.worker_block_dim


strided = testing.strided_view


def assert_same_bits(run, other, what: str) -> None:
    testing.same_bits(run, other, "out", what)


def check_split_and_block_invariance(dtype, run, x, w, out, target_cc):
    """Once per case (at 128 threads): the same bits from one task over the whole output at 256 threads
    (linear.cuh: the summation order depends on K, T and the path only)."""
    if target_cc != 80:
        return
    whole = strided(tuple(out.shape), tuple(out.stride()), dtype, None, zeros=True)
    assert_same_bits(run, run_kernel(dtype, x, w, whole, (1, 1), None, 90), "one task at 256 threads")


def run_kernel(dtype, x, w, out, grid, coords, target_cc):
    """run_tasks over linear's tasks, then the evidence over the tiles of the tasks that ran."""
    run = testing.run_tasks(
        lambda pk, t: pk.linear_layer(input=t["x"], weight=t["w"], output=t["out"],
                                      grid_dim=(grid[0], grid[1], 1), block_dim=block_dim(target_cc)),
        {"x": x, "w": w, "out": out}, coords=coords, target_cc=target_cc)
    scale = x.double().abs() @ w.double().abs().T            # sum_k |x_bk * w_nk| per output
    # the budget of test_linear_testmode.py: k = K fp32 terms (twice on the tensor cores)
    tol = testing.tol_linear(dtype, x.shape[1], scale, tensor_cores=run.layer.params["tensor_cores"])
    run.check("out", ref.linear(x, w), tol, inputs=(x, w))
    return run


def inputs(dtype, batch, k, n, offset, x_layout=None, w_layout=None, y_layout=None):
    gen = testing.generator(offset=offset)
    x = strided((batch, k), x_layout, dtype, gen)
    w = strided((n, k), w_layout, dtype, gen, scale=k ** -0.5)   # random, not zeros: a skipped row shows
    out = strided((batch, n), y_layout, dtype, gen, zeros=True)
    return x, w, out


@pytest.mark.parametrize("target_cc", TARGETS)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("batch,k,n,grid,coords", SHAPES,
                         ids=lambda c: "x".join(map(str, c)) if isinstance(c, tuple) else str(c))
def test_linear_kernel(dtype, batch, k, n, grid, coords, target_cc):
    x, w, out = inputs(dtype, batch, k, n, offset=batch * 100003 + k * 1009 + n)
    run = run_kernel(dtype, x, w, out, grid, coords, target_cc)
    check_split_and_block_invariance(dtype, run, x, w, out, target_cc)


@pytest.mark.parametrize("target_cc", TARGETS)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("what,batch,k,n,grid,x_layout,w_layout,y_layout", STRIDED,
                         ids=[c[0].replace(" ", "_").replace(",", "") for c in STRIDED])
def test_linear_kernel_strided(dtype, what, batch, k, n, grid, x_layout, w_layout, y_layout, target_cc):
    x, w, out = inputs(dtype, batch, k, n, 7 * k + n, x_layout, w_layout, y_layout)
    assert not (x.is_contiguous() and w.is_contiguous() and out.is_contiguous()), what
    run = run_kernel(dtype, x, w, out, grid, None, target_cc)
    check_split_and_block_invariance(dtype, run, x, w, out, target_cc)



@pytest.mark.quick
def test_linear_kernel_quick():
    """The quick subset's case (pytest -m quick, and the sanitizer runs of
    test_mode/test_kernel_sanitizers.py): x a column block (row stride 3K) at 256 threads, bf16."""
    test_linear_kernel_strided(torch.bfloat16, *STRIDED[0], 90)


if __name__ == "__main__":
    testing.run_pytest_file_as_script(__file__, sys.argv[1:])
