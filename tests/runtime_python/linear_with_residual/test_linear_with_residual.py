"""linear_with_residual_layer's kernel alone (csrc/tasks/linear_with_residual.cuh, the residual variant of
linear.cuh's linear_tile): each task on one block, nothing else running, every byte around its tiles
poisoned (testing.run_tasks: writes only its output tiles, reads only its input tiles, independent of its
threads' order, every output element written).

Covers, for bf16, fp16 and fp32 at 128 threads (target_cc 80) and 256 (target_cc 90), one rank (the
residual added: add_residual = 1):
  - every task of a non-power-of-two column split with K = 1024 (the vector path), batch 13 (row chunks
    8 + 4 + 1), 2-column and 1-column tiles, odd K and K below one 16-byte load (the scalar path), 8-row
    tiles of a 2 x 2 grid, a single output column at K = 4096 (an MPK hidden size);
  - the edge tasks (first and last) of a 5 x 3 grid, and one-row tiles (grid.y = batch);
  - strided views the kernel accepts (any strides; header of linear_with_residual.cuh: "each with its own
    strides"): a residual with its own row stride (padded rows) while y is contiguous, and y padded while
    the residual is contiguous (a kernel reading the residual with y's row stride, or writing y with the
    residual's, fails), a residual every other column (its column stride, not y's), a residual column
    block (an aligned row stride 3N); and linear's x / W cases (the kernel is linear_tile): x a column
    block of a wider matrix (its row stride, not W's or K), padded rows with a K mod 16-byte tail on the
    vector path, W every other column and x rows padded to K + 3 (the scalar path);
  - the stated summation order: the bits depend on K, the dtype and the path only, not on the grid's
    split nor on the block size: every case's bits at 128 threads equal those of one task over the whole
    output at 256 (as tests/csrc/test_kernels_linear.cpp checks; every tile of a case takes the same path).
Another rank's parameters: the layer declared as rank 1 of 2 (add_residual = 0: only rank 0 adds the
residual, so the allreduce after it counts it once) gives y = x @ W^T, in every dtype (the run itself is
one process; testing.as_rank). A kernel adding the residual whatever its flag says passes every rank-0
case and fails this one (test_mode/test_rank_flag_controls.py). The multi-rank run: the testmode file's
mpirun job;
tests/csrc/test_kernels_linear.cpp also runs add_residual = 0.

Run: python tests/runtime_python/linear_with_residual/test_linear_with_residual.py
     (or pytest this file; -k to pick cases)
The integration test is test_linear_with_residual_testmode.py beside it; both use pytorch_reference.py.
"""
import sys

import pytest
import torch

from mirage.mpk import testing

ref = testing.load_reference(__file__)

DTYPES = [torch.bfloat16, torch.float16, torch.float32]
TARGETS = [80, 90]       # the worker block: 128 threads (sm_80), 256 (sm_90a / sm_100a)
# (batch, K, N, (grid.x, grid.y), coords): grid.x splits N (column tiles of y and of the residual, row
# stride N), grid.y rows.
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
# the vector path needs x and W with unit column stride and 16-byte aligned rows, else the scalar path):
# (what, batch, K, N, grid, x, w, residual, y)
STRIDED = [
    # the residual's rows padded to N + 3, y contiguous: two different row strides on the [B, N] side
    ("residual row stride N+3", 6, 256, 40, (5, 2), None, None, (43, 1), None),
    # the converse: y padded to N + 8 (an aligned stride), the residual contiguous
    ("y row stride N+8", 6, 256, 40, (5, 2), None, None, None, (48, 1)),
    # the residual every other column of [B, 2N]: its column stride, y's is 1
    ("residual column stride 2", 4, 128, 24, (3, 1), None, None, (48, 2), None),
    # x columns [K, 2K) of a [B, 3K] matrix: the vector path with x's row stride 3K, W's K, y's N
    ("x column block", 6, 256, 40, (5, 2), (768, 1), None, None, None),
    # the residual columns [N, 2N) of a [B, 3N] matrix (an aligned row stride, 3N)
    ("residual column block", 6, 256, 40, (5, 2), None, None, (120, 1), None),
    # padded rows, K + 5 (a multiple of the pack in every dtype): the vector path plus a K mod V tail
    ("padded rows K+5", 6, 203, 10, (2, 1), (208, 1), (208, 1), None, None),
    # W every other column of [N, 2K]: the scalar path; y every other column of [B, 2N]
    ("W, y column stride 2", 3, 50, 6, (2, 1), None, (100, 2), None, (12, 2)),
    # linear's x / W cases as tests/csrc/test_kernels_linear.cpp runs them (residual and y contiguous):
    ("W column stride 2", 3, 50, 6, (2, 1), None, (100, 2), None, None),
    ("x row stride K+3", 4, 128, 8, (2, 2), (131, 1), None, None, None),      # the scalar path
    ("padded rows K+3", 9, 37, 8, (4, 1), (40, 1), (40, 1), None, None),      # vector + 1 or 5 tail
]


block_dim = testing.worker_block_dim


strided = testing.strided_view


def assert_same_bits(run, other, what: str) -> None:
    testing.same_bits(run, other, "out", what)


def check_split_and_block_invariance(dtype, run, x, w, residual, out, target_cc):
    """Once per case (at 128 threads): the same bits from one task over the whole output at 256 threads
    (linear.cuh: the summation order depends on K, T and the path only)."""
    if target_cc != 80:
        return
    whole = strided(tuple(out.shape), tuple(out.stride()), dtype, None, zeros=True)
    one_task = run_kernel(dtype, x, w, residual, whole, (1, 1), None, 90)
    assert_same_bits(run, one_task, "one task at 256 threads")


def inputs(dtype, batch, k, n, offset, x_layout=None, w_layout=None, r_layout=None, y_layout=None):
    gen = testing.generator(offset=offset)
    x = strided((batch, k), x_layout, dtype, gen)
    w = strided((n, k), w_layout, dtype, gen, scale=k ** -0.5)   # random, not zeros: y == residual shows
    residual = strided((batch, n), r_layout, dtype, gen)
    out = strided((batch, n), y_layout, dtype, gen, zeros=True)
    return x, w, residual, out


def run_kernel(dtype, x, w, residual, out, grid, coords, target_cc, rank=(0, 1)):
    """run_tasks over linear_with_residual's tasks (the layer as rank rank[0] of rank[1] declares it), then
    the evidence over the tiles of the tasks that ran."""
    run = testing.run_tasks(
        testing.as_rank(*rank, lambda pk, t: pk.linear_with_residual_layer(
            input=t["x"], weight=t["w"], residual=t["residual"], output=t["out"],
            grid_dim=(grid[0], grid[1], 1), block_dim=block_dim(target_cc))),
        {"x": x, "w": w, "residual": residual, "out": out}, coords=coords, target_cc=target_cc)
    add = run.layer.params["add_residual"]
    assert add == (rank[0] == 0), f"rank {rank[0]} of {rank[1]}: add_residual = {add}; only rank 0 adds it"
    scale = x.double().abs() @ w.double().abs().T + residual.double().abs() * add
    # the budget of test_linear_with_residual_testmode.py: k = K + 1 fp32 terms (the residual last)
    tol = testing.tol_linear(dtype, x.shape[1] + 1, scale, tensor_cores=run.layer.params["tensor_cores"])
    run.check("out", ref.linear_with_residual(x, w, residual, add), tol, inputs=(x, w, residual))
    return run


@pytest.mark.parametrize("target_cc", TARGETS)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("batch,k,n,grid,coords", SHAPES,
                         ids=lambda c: "x".join(map(str, c)) if isinstance(c, tuple) else str(c))
def test_linear_with_residual_kernel(dtype, batch, k, n, grid, coords, target_cc):
    tensors = inputs(dtype, batch, k, n, offset=batch * 100003 + k * 1009 + n + 7)
    run = run_kernel(dtype, *tensors, grid, coords, target_cc)
    check_split_and_block_invariance(dtype, run, *tensors, target_cc)


@pytest.mark.parametrize("target_cc", TARGETS)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("what,batch,k,n,grid,x_layout,w_layout,r_layout,y_layout", STRIDED,
                         ids=[c[0].replace(" ", "_").replace(",", "") for c in STRIDED])
def test_linear_with_residual_kernel_strided(dtype, what, batch, k, n, grid, x_layout, w_layout, r_layout,
                                             y_layout, target_cc):
    tensors = inputs(dtype, batch, k, n, 13 * k + n, x_layout, w_layout, r_layout, y_layout)
    assert not all(t.is_contiguous() for t in tensors), what
    run = run_kernel(dtype, *tensors, grid, None, target_cc)
    check_split_and_block_invariance(dtype, run, *tensors, target_cc)



@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
def test_linear_with_residual_kernel_other_rank(dtype, rank=(1, 2)):
    """Rank 1 of 2: add_residual = 0, y = x @ W^T (the residual random and non-zero: adding it fails)."""
    batch, k, n, grid, _ = SHAPES[1]       # 13 rows: the row chunks 8 + 4 + 1 each skip the residual
    tensors = inputs(dtype, batch, k, n, offset=batch * 100003 + k * 1009 + n + 7)
    run_kernel(dtype, *tensors, grid, None, 80, rank=rank)   # rank (0, 1): the same at rank 0


@pytest.mark.quick
def test_linear_with_residual_kernel_quick():
    """The quick subset's case (pytest -m quick, and the sanitizer runs of
    test_mode/test_kernel_sanitizers.py): the residual's own row stride at 256 threads, bf16."""
    test_linear_with_residual_kernel_strided(torch.bfloat16, *STRIDED[0], 90)


if __name__ == "__main__":
    testing.run_pytest_file_as_script(__file__, sys.argv[1:])
