"""elementwise_add_layer's kernel alone (csrc/tasks/elementwise_add.cuh): each task on one block, nothing
else running, every byte around its tiles poisoned (testing.run_tasks: writes only its output tiles,
reads only its input tiles, independent of its threads' order, every output element written).

Covers: bf16, fp16, fp32 at target_cc 80 and 90 (128- and 256-thread worker blocks); every task of an
even 2-D split on the 16-byte packed path; the edge tasks of a non-power-of-two 2-D split; one-row
tiles; odd widths (the scalar path, rows narrower than a warp); and strided views the kernel accepts
(each of a, b, y has its own row and column strides): a a column block of a wider matrix, b with a
padded row stride or a column stride of 2, y a column block, so that a kernel using one tensor's
strides for another's reads or writes the wrong elements.

Run: python tests/runtime_python/elementwise_add/test_elementwise_add.py   (or pytest this file; -k to
     pick cases; -m quick: the one case of the quick iteration subset)
The integration test is test_elementwise_add_testmode.py beside it; both use pytorch_reference.py.
"""
import sys

import pytest
import torch

from mirage.mpk import testing

ref = testing.load_reference(__file__)

DTYPES = [torch.bfloat16, torch.float16, torch.float32]
TARGETS = [80, 90]       # the worker block: 128 threads (sm_80), 256 (sm_90a / sm_100a)
# (batch, hidden, (grid.x, grid.y), coords): grid.x splits rows, grid.y columns. Every task of an even
# split on the packed path (tiles 4 x 2048); the edge tasks (first and last) of a 3 x 3 split (tiles
# 2 x 32); one-row tiles; a width that is no multiple of the 16-byte pack and narrower than a warp
# (the scalar path, every thread's chunks wrapping rows).
SHAPES = [(16, 4096, (4, 2), None), (6, 96, (3, 3), "edges"), (5, 96, (5, 1), None), (3, 7, (3, 1), None)]
# Strided views, (dtype, batch, hidden, grid, layout): "rows": a a column block of a 3x wider matrix,
# b rows padded to hidden + 8, y a column block of a 2x wider matrix (every tensor's row stride differs,
# each a multiple of the pack: still the packed path); "cols": b with column stride 2 (the scalar
# path for all three), a and y contiguous.
STRIDED = [(torch.bfloat16, 6, 256, (3, 2), "rows"), (torch.float32, 4, 96, (2, 3), "rows"),
           (torch.float16, 6, 64, (3, 2), "cols")]


block_dim = testing.worker_block_dim


def run_kernel(dtype, a, b, out, grid, coords, target_cc):
    """run_tasks over elementwise_add's tasks, then the evidence over the tiles of the tasks that ran."""
    run = testing.run_tasks(
        lambda pk, t: pk.elementwise_add_layer(input_a=t["a"], input_b=t["b"], output=t["out"],
                                               grid_dim=(grid[0], grid[1], 1),
                                               block_dim=block_dim(target_cc)),
        {"a": a, "b": b, "out": out}, coords=coords, target_cc=target_cc)
    # the budget of the test-mode test: one fp32 add of |a| + |b|, one rounding to dtype
    scale = a.double().abs() + b.double().abs()
    run.check("out", ref.elementwise_add(a, b), testing.tol_elementwise(dtype, scale),
              checks=run.layer.checks, inputs=(a, b))
    return run


params = testing.case_params


KERNEL = [(d, *s, cc) for s in SHAPES for d in DTYPES for cc in TARGETS]
STRIDED_CASES = [(*s, cc) for s in STRIDED for cc in TARGETS]
# quick: the strided case at 256 threads (three different row strides, the packed path, 6 tasks)
QUICK = (torch.bfloat16, 6, 256, (3, 2), "rows", 90)


@pytest.mark.parametrize("dtype,batch,hidden,grid,coords,target_cc", params(KERNEL, None))
def test_elementwise_add_kernel(dtype, batch, hidden, grid, coords, target_cc):
    gen = testing.generator(offset=batch * 1000 + hidden)
    a = testing.randn((batch, hidden), dtype, gen)
    b = testing.randn((batch, hidden), dtype, gen)
    run_kernel(dtype, a, b, torch.zeros(batch, hidden, dtype=dtype), grid, coords, target_cc)


@pytest.mark.parametrize("dtype,batch,hidden,grid,layout,target_cc", params(STRIDED_CASES, QUICK))
def test_elementwise_add_kernel_strided(dtype, batch, hidden, grid, layout, target_cc):
    gen = testing.generator(offset=11 * hidden + batch)
    if layout == "rows":
        a = testing.randn((batch, 3 * hidden), dtype, gen)[:, hidden:2 * hidden]    # row stride 3 * hidden
        b = testing.randn((batch, hidden + 8), dtype, gen)[:, :hidden]               # row stride hidden + 8
        out = torch.zeros(batch, 2 * hidden, dtype=dtype)[:, hidden:]                # row stride 2 * hidden
        assert (a.stride(0), b.stride(0), out.stride(0)) == (3 * hidden, hidden + 8, 2 * hidden)
    else:
        a = testing.randn((batch, hidden), dtype, gen)
        b = testing.randn((batch, 2 * hidden), dtype, gen)[:, ::2]                   # column stride 2
        out = torch.zeros(batch, hidden, dtype=dtype)
        assert b.stride() == (2 * hidden, 2)
    run_kernel(dtype, a, b, out, grid, None, target_cc)


if __name__ == "__main__":
    testing.run_pytest_file_as_script(__file__, sys.argv[1:])
