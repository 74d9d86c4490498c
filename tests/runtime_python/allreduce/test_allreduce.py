"""allreduce_layer's kernel alone on one rank (csrc/tasks/allreduce.cuh): each task on one block, nothing
else running, every byte around its tiles poisoned (testing.run_tasks: writes only its output tiles,
reads only its input tiles, independent of its threads' order, every output element written).

On one rank (world_size 1) a task puts its tile of x into slot 0 of its tile of the symmetric buffer
(new_tensor(io_category="nvshmem_tensor"), as test_allreduce_testmode.py builds it), signals, waits for
its own signal, sums the one slot and frees it: mpk_run_task (csrc/runtime/entry.h) hands the kernel's
cross-rank waits and signals to this rank's own counters, so the whole put / signal / wait / sum path
runs. Across ranks (W > 1) a task waits for peers that a kernel-level run does not have: that is
test_allreduce_testmode.py's (mpirun) and tests/csrc/test_kernels_linear.cpp's (ranks on threads).

Covers: bf16, fp16, fp32 at target_cc 80 and 90 (128- and 256-thread worker blocks); every task of a
split of a long row; the edge tasks of a non-power-of-two split; one-row tiles (batch 1); grid 1; and
strided views the kernel accepts (x a column block of a wider matrix, y with a padded row stride, x
with column stride 2), so that a kernel using x's or y's strides for the buffer's (or the reverse)
reads or writes the wrong elements.

Run: python tests/runtime_python/allreduce/test_allreduce.py   (or pytest this file; -k to pick cases;
     -m quick: the one case of the quick iteration subset)
The integration test is test_allreduce_testmode.py beside it; both use pytorch_reference.py.
"""
import os
import sys

import pytest
import torch

from mirage.mpk import testing

ref = testing.load_reference(__file__)

# On the CUDA backend mpk_run_task gives a task no wait / signal (csrc/runtime/entry.h): a kernel-level
# run of allreduce fails there by design, naming the task; the GPU runs it in test mode instead.
# (MPK_TEST_DEVICE, which tests/conftest.py makes the default device, not torch.get_default_device():
# that makes a tensor, so a CPU-only torch would fail collecting the file in gpu_check.sh --dry-run.)
pytestmark = pytest.mark.skipif(os.environ.get("MPK_TEST_DEVICE", "cpu") != "cpu",
                                reason="kernel-level allreduce runs on the CPU backend only (no wait/signal "
                                       "in the CUDA mpk_run_task)")

DTYPES = [torch.bfloat16, torch.float16, torch.float32]
TARGETS = [80, 90]       # the worker block: 128 threads (sm_80), 256 (sm_90a / sm_100a)
# (batch, hidden, grid.x, coords): grid.x splits the hidden dim. Every task of a long row's split (tiles
# 8 x 512); the edge tasks (first and last) of a split in 3 (tiles 4 x 32); one-row tiles of 4 columns
# (batch 1); one task over the whole tensor.
SHAPES = [(8, 2048, 4, None), (4, 96, 3, "edges"), (1, 20, 5, None), (3, 32, 1, None)]
# Strided views, (dtype, batch, hidden, grid, layout): "x_cols": x a column block of a 3x wider matrix
# (row stride 3 * H), y contiguous; "y_rows": y rows padded to H + 8 and x every other column (column
# stride 2). The buffer is contiguous [1, B, H]: its row stride is H, unlike x's or y's.
STRIDED = [(torch.bfloat16, 4, 96, 3, "x_cols"), (torch.float32, 6, 64, 2, "y_rows")]


block_dim = testing.worker_block_dim


params = testing.case_params


def build(pk, t, grid, target_cc):
    """The layer on one rank, its staging buffer symmetric as in test_allreduce_testmode.py."""
    batch, hidden = t["x"].dims
    buf = pk.new_tensor((pk.world_size, batch, hidden), dtype=t["x"].dtype.torch, name="buf",
                        io_category="nvshmem_tensor")
    pk.allreduce_layer(input=t["x"], buffer=buf, output=t["out"], grid_dim=(grid, 1, 1),
                       block_dim=block_dim(target_cc))
    # The buffer is an output the layer does not declare written (peers write it in their own time); on
    # one rank run_tasks holds this task to writing all of its tile of it and nothing outside
    # (kernel.py _Harness.writes).


def run_kernel(dtype, x, out, grid, coords, target_cc):
    """run_tasks over allreduce's tasks (one rank), then the evidence over the tiles of the tasks that ran."""
    run = testing.run_tasks(lambda pk, t: build(pk, t, grid, target_cc), {"x": x, "out": out}, coords=coords,
                            target_cc=target_cc)
    # the test-mode test's budget at W = 1: a sum of one term (tolerance(dtype, k=W, scale=sum_r |x_r|));
    # the layer's checks at one rank: finite, nonzero (the sum of one term is the input itself)
    tol = testing.tolerance(dtype, k=1, scale=x.double().abs())
    run.check("out", ref.allreduce([x]), tol, checks=run.layer.checks, inputs=(x,))
    return run


KERNEL = [(d, *s, cc) for s in SHAPES for d in DTYPES for cc in TARGETS]
STRIDED_CASES = [(*s, cc) for s in STRIDED for cc in TARGETS]
# quick: x a column block at 256 threads (x's row stride differs from the buffer's and y's)
QUICK = (torch.bfloat16, 4, 96, 3, "x_cols", 90)


@pytest.mark.parametrize("dtype,batch,hidden,grid,coords,target_cc", params(KERNEL, None))
def test_allreduce_kernel(dtype, batch, hidden, grid, coords, target_cc):
    x = testing.randn((batch, hidden), dtype, testing.generator(offset=batch * 1000 + hidden))
    run_kernel(dtype, x, torch.zeros(batch, hidden, dtype=dtype), grid, coords, target_cc)


@pytest.mark.parametrize("dtype,batch,hidden,grid,layout,target_cc", params(STRIDED_CASES, QUICK))
def test_allreduce_kernel_strided(dtype, batch, hidden, grid, layout, target_cc):
    gen = testing.generator(offset=29 * hidden + batch)
    if layout == "x_cols":
        x = testing.randn((batch, 3 * hidden), dtype, gen)[:, hidden:2 * hidden]
        out = torch.zeros(batch, hidden, dtype=dtype)
        assert x.stride() == (3 * hidden, 1)
    else:
        x = testing.randn((batch, 2 * hidden), dtype, gen)[:, ::2]
        out = torch.zeros(batch, hidden + 8, dtype=dtype)[:, :hidden]
        assert x.stride() == (2 * hidden, 2) and out.stride() == (hidden + 8, 1)
    run_kernel(dtype, x, out, grid, None, target_cc)


if __name__ == "__main__":
    testing.run_pytest_file_as_script(__file__, sys.argv[1:])
