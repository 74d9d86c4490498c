"""tensor_init_layer's kernel alone (csrc/tasks/tensor_init.cuh): each task on one block, nothing else
running, every byte around its tiles poisoned (testing.run_tasks: writes only its output tile (the
layer's `input`, zeroed), never its dummy_output, reads nothing outside its dummy_input tile,
independent of its threads' order, every element of its tile written).

Covers: bf16, fp16, fp32 at target_cc 80 and 90 (128- and 256-thread worker blocks); every task of an
even 2-D split on the 16-byte packed path; the edge tasks of a non-power-of-two 2-D split; one-row
tiles; one-column tiles (the scalar path); a dummy_input whose rows grid.x splits and one it does not
(read whole); strided views of the zeroed tensor the kernel accepts: a column block of a wider matrix
(row stride 3 * H, packed) and every third column (column stride 3, the scalar path), so that a kernel
assuming packed rows or a unit column stride writes outside its tile or leaves elements unwritten.
Zero is the intended result: the layer's checks (run.layer.checks: finite) apply, and every element
of the tiles must be +0 (all bits clear), as the kernel states.

Run: python tests/runtime_python/tensor_init/test_tensor_init.py   (or pytest this file; -k to pick
     cases; -m quick: the one case of the quick iteration subset)
The integration test is test_tensor_init_testmode.py beside it; both use pytorch_reference.py.
"""
import sys

import pytest
import torch

from mirage.mpk import testing

ref = testing.load_reference(__file__)

DTYPES = [torch.bfloat16, torch.float16, torch.float32]
TARGETS = [80, 90]       # the worker block: 128 threads (sm_80), 256 (sm_90a / sm_100a)
_INT = {2: torch.int16, 4: torch.int32}
# (batch, hidden, (grid.x, grid.y), coords): grid.x splits rows, grid.y columns. Every task of an even
# split (tiles 4 x 2048, packed); the edge tasks (first and last) of a 3 x 3 split (tiles 2 x 32); one-row
# tiles; one-column tiles of an odd width (the scalar path).
SHAPES = [(16, 4096, (4, 2), None), (6, 96, (3, 3), "edges"), (5, 96, (5, 1), None), (3, 7, (1, 7), None)]
# Strided views of the zeroed tensor, (dtype, batch, hidden, grid, layout): "cols": a column block of a
# 3x wider matrix (row stride 3 * H: a multiple of the pack, still packed); "step": every third column
# (column stride 3: the scalar path).
STRIDED = [(torch.bfloat16, 6, 256, (3, 2), "cols"), (torch.float32, 4, 96, (2, 3), "cols"),
           (torch.float16, 6, 64, (3, 2), "step")]


block_dim = testing.worker_block_dim


params = testing.case_params


def run_kernel(dtype, x, grid, coords, target_cc, dummy_rows=None):
    """run_tasks over tensor_init's tasks, then the evidence over the tiles of the tasks that ran.
    dummy_rows: dummy_input's row count (default x's: grid.x splits it; else it is read whole)."""
    gen = testing.generator(offset=3 * x.shape[1] + 1)
    dummy_in = testing.randn((dummy_rows or x.shape[0], 8), dtype, gen)
    dummy_out = testing.randn((2, 3), dtype, gen)         # declared, never written: run_tasks checks it
    run = testing.run_tasks(
        lambda pk, t: pk.tensor_init_layer(input=t["x"], dummy_input=t["dummy_in"],
                                           dummy_output=t["dummy_out"], grid_dim=(grid[0], grid[1], 1),
                                           block_dim=block_dim(target_cc)),
        {"x": x, "dummy_in": dummy_in, "dummy_out": dummy_out}, coords=coords, target_cc=target_cc)
    # the test-mode test's budget (zero up to tiny / 2, i.e. exact) and the layer's checks (no nonzero
    # check: a zeroing layer), over the tiles of the tasks that ran; then every bit clear (not -0.0)
    expected = ref.tensor_init(x)         # float64 zeros
    run.check("x", expected, testing.tol_elementwise(dtype), checks=run.layer.checks)
    got, cover = run.outputs["x"], run.covered["x"]
    nonzero_bits = int((got[cover].view(_INT[x.element_size()]) != 0).sum())
    testing.assert_equal(f"{run.layer.name}.x[kernel].all_bits_clear", nonzero_bits, 0)
    return run


KERNEL = [(d, *s, cc) for s in SHAPES for d in DTYPES for cc in TARGETS]
STRIDED_CASES = [(*s, cc) for s in STRIDED for cc in TARGETS]
# quick: every third column at 256 threads (the scalar path over a strided view, 6 tasks)
QUICK = (torch.float16, 6, 64, (3, 2), "step", 90)


@pytest.mark.parametrize("dtype,batch,hidden,grid,coords,target_cc", params(KERNEL, None))
def test_tensor_init_kernel(dtype, batch, hidden, grid, coords, target_cc):
    x = testing.randn((batch, hidden), dtype, testing.generator(offset=batch * 1000 + hidden))
    run_kernel(dtype, x, grid, coords, target_cc)


@pytest.mark.parametrize("dtype,batch,hidden,grid,layout,target_cc", params(STRIDED_CASES, QUICK))
def test_tensor_init_kernel_strided(dtype, batch, hidden, grid, layout, target_cc):
    gen = testing.generator(offset=19 * hidden + batch)
    if layout == "cols":
        x = testing.randn((batch, 3 * hidden), dtype, gen)[:, hidden:2 * hidden]
        assert x.stride() == (3 * hidden, 1)
    else:
        x = testing.randn((batch, 3 * hidden), dtype, gen)[:, ::3]
        assert x.stride() == (3 * hidden, 3)
    run_kernel(dtype, x, grid, None, target_cc)


@pytest.mark.parametrize("target_cc", TARGETS)
def test_tensor_init_kernel_dummy_read_whole(target_cc):
    """A dummy_input whose rows grid.x does not divide: every task's input tile is all of it (the
    layer's map); the kernel still reads nothing of it and writes only its own tile."""
    x = testing.randn((4, 32), torch.float32, testing.generator(offset=23))
    run_kernel(torch.float32, x, (4, 2), None, target_cc, dummy_rows=5)


if __name__ == "__main__":
    testing.run_pytest_file_as_script(__file__, sys.argv[1:])
