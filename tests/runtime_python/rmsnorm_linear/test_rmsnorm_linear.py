"""rmsnorm_linear_layer's kernel alone (csrc/tasks/rmsnorm_linear.cuh; testing.run_tasks,
docs/kernel_tests.md).

Each task runs by itself on one emulated worker block, everything outside its declared tiles poisoned: a
task that writes outside its output columns, reads outside its W rows, races with itself or leaves an output
element unwritten is a testing.MPKFootprintError. Covers bf16, fp16, fp32 at 128 threads (target_cc 80) and
256 (target_cc 90): every task of a non-power-of-two split of N, the edge tasks of a split, a single-row
batch (decode), more rows than warps, odd K (no multiple of 32 lanes), one-column tiles, and strided views
(x a column block of a wider matrix, W every other column, y a column block).

Run: python tests/runtime_python/rmsnorm_linear/test_rmsnorm_linear.py   (or pytest it; -k to pick cases)
"""
import sys

import pytest
import torch

from mirage.mpk import testing

ref = testing.load_reference(__file__)

DTYPES = [torch.bfloat16, torch.float16, torch.float32]
TARGETS = [80, 90]       # the worker block: 128 threads (sm_80), 256 (sm_90a / sm_100a)
# (batch, K, N, grid.x, coords): grid.x splits N (W rows, y columns)
SHAPES = [
    (8, 512, 48, 3, None),       # every task of a non-power-of-two split: 3 tiles of 16 columns
    (1, 384, 20, 5, None),       # decode: a single-row batch, 4-column tiles
    (13, 96, 10, 5, "edges"),    # more rows than warps; the first and last task
    (5, 37, 7, 7, None),         # odd K, one-column tiles
]
# (what, batch, K, N, grid.x, x layout, W layout, y layout): (row stride, column stride), None = contiguous
STRIDED = [
    ("x column block", 6, 128, 12, 3, (384, 1), None, None),
    ("W column stride 2, y column block", 4, 64, 9, 3, None, (128, 2), (27, 1)),
]

block_dim = testing.worker_block_dim
strided = testing.strided_view


def inputs(dtype, batch, k, n, offset, x_layout=None, w_layout=None, y_layout=None):
    gen = testing.generator(offset=offset)
    x = strided((batch, k), x_layout, dtype, gen)
    wn = testing.randn((k,), dtype, gen)
    w = strided((n, k), w_layout, dtype, gen, scale=k ** -0.5)   # random, not zeros: a skipped row shows
    out = strided((batch, n), y_layout, dtype, gen, zeros=True)
    return x, wn, w, out


def run_kernel(dtype, x, wn, w, out, grid, coords, target_cc):
    """run_tasks over the layer's tasks, then the evidence over the tiles of the tasks that ran."""
    def layer_call(pk, t):
        pk.rmsnorm_linear_layer(input=t["x"], weight_norm=t["wn"], weight_linear=t["w"], output=t["out"],
                                grid_dim=(grid, 1, 1), block_dim=block_dim(target_cc))

    run = testing.run_tasks(layer_call, {"x": x, "wn": wn, "w": w, "out": out}, coords, target_cc=target_cc)
    tol = testing.tol_rmsnorm_linear(dtype, x.shape[1], ref.normed_scale(x, wn, w))
    run.check("out", ref.rmsnorm_linear(x, wn, w), tol, inputs=(x, wn, w))
    return run


@pytest.mark.parametrize("target_cc", TARGETS)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("batch,k,n,grid,coords", SHAPES, ids=lambda c: str(c))
def test_kernel(dtype, batch, k, n, grid, coords, target_cc):
    x, wn, w, out = inputs(dtype, batch, k, n, offset=batch * 100003 + k * 1009 + n)
    run_kernel(dtype, x, wn, w, out, grid, coords, target_cc)


@pytest.mark.parametrize("target_cc", TARGETS)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("what,batch,k,n,grid,x_layout,w_layout,y_layout", STRIDED,
                         ids=[c[0].replace(" ", "_").replace(",", "") for c in STRIDED])
def test_kernel_strided(dtype, what, batch, k, n, grid, x_layout, w_layout, y_layout, target_cc):
    x, wn, w, out = inputs(dtype, batch, k, n, 7 * k + n, x_layout, w_layout, y_layout)
    assert not (x.is_contiguous() and w.is_contiguous() and out.is_contiguous()), what
    run_kernel(dtype, x, wn, w, out, grid, None, target_cc)


@pytest.mark.quick
def test_kernel_quick():
    """The quick subset's case (pytest -m quick): x a column block at 256 threads, bf16."""
    test_kernel_strided(torch.bfloat16, *STRIDED[0], 90)


if __name__ == "__main__":
    testing.run_pytest_file_as_script(__file__, sys.argv[1:])
