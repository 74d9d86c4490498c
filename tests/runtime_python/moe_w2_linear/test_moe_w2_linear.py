"""moe_w2_linear: the kernel alone (testing.run_tasks; docs/kernel_tests.md).

Each task runs by itself on one emulated worker block, with no scheduler and everything outside its
declared tiles poisoned: a task that writes outside its output tiles, reads outside its input tiles,
races with itself or leaves an output element unwritten is a testing.MPKFootprintError naming its grid
coordinate, the tensor and the elements. Iterate on the kernel here; test_moe_w2_linear_testmode.py runs it in
a graph. Both use pytorch_reference.py.

Run: python tests/runtime_python/moe_w2_linear/test_moe_w2_linear.py   (or pytest this file; -k to pick cases)
"""
import sys

import pytest
import torch

from mirage.mpk import testing

ref = testing.load_reference(__file__)

DTYPES = [torch.bfloat16, torch.float16, torch.float32]
TARGETS = [80, 90]       # the worker block: 128 threads (sm_80), 256 (sm_90a / sm_100a)
SCALE = 2.0
# (rows, cols, grid.x, coords): every task of an even split; the edge tasks of a non-power-of-two split
# (3 tiles of 2 rows); one-row tiles narrower than a warp.
SHAPES = [(16, 384, 4, None), (6, 96, 3, "edges"), (5, 7, 5, None)]


block_dim = testing.worker_block_dim     # 128 threads (sm_80), 256 from Hopper on


def run_kernel(dtype, x, grid, coords, target_cc):
    """run_tasks over the layer's tasks, then the evidence over the tiles of the tasks that ran."""
    def layer_call(pk, t):
        pk.moe_w2_linear_layer(input=t["x"], output=t["out"], grid_dim=(grid, 1, 1),
            block_dim=block_dim(target_cc), scale=SCALE)

    run = testing.run_tasks(layer_call, {"x": x, "out": torch.zeros(x.shape, dtype=dtype)}, coords,
                            target_cc=target_cc)
    run.check("out", ref.moe_w2_linear(x, SCALE), testing.tol_elementwise(dtype), inputs=(x,))
    return run


@pytest.mark.parametrize("target_cc", TARGETS)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("rows,cols,grid,coords", SHAPES)
def test_kernel(dtype, rows, cols, grid, coords, target_cc):
    x = testing.randn((rows, cols), dtype, testing.generator(offset=rows * 1000 + cols))
    run_kernel(dtype, x, grid, coords, target_cc)


@pytest.mark.parametrize("target_cc", TARGETS)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
def test_kernel_strided(dtype, target_cc):
    # x a column block of a wider matrix: its row stride (3 * cols) is not its width, so a kernel that
    # takes one tensor's strides for another's fails here
    wide = testing.randn((6, 3 * 96), dtype, testing.generator(offset=7))
    run_kernel(dtype, wide[:, 96:192], 3, None, target_cc)


if __name__ == "__main__":
    testing.run_pytest_file_as_script(__file__, sys.argv[1:])
