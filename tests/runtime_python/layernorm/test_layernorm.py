"""layernorm_layer's kernel alone (csrc/tasks/layernorm.cuh; testing.run_tasks, docs/kernel_tests.md):
each task on one block, nothing else running, every byte around its tiles poisoned (writes only its
output tiles, reads only its input tiles, independent of its threads' order, every output written).

Run: python tests/runtime_python/layernorm/test_layernorm.py   (or pytest this file; -k to pick cases)
The integration test is test_layernorm_testmode.py beside it; both use pytorch_reference.py.
"""
import sys

import pytest
import torch

from mirage.mpk import testing

ref = testing.load_reference(__file__)
# the budget of the kernel's arithmetic, one definition for both tests
tol_layernorm = testing.load_reference(__file__, "test_layernorm_testmode").tol_layernorm

DTYPES = [torch.bfloat16, torch.float16, torch.float32]
TARGETS = [80, 90]       # the worker block: 128 threads (sm_80), 256 (sm_90a / sm_100a)
EPS = 1e-5
# (batch, hidden, grid.x, coords): 4 rows a task, more columns than threads; the edge tasks of a
# non-power-of-two split (3 tiles of 2 rows); one-row tiles narrower than a warp.
SHAPES = [(16, 4096, 4, None), (6, 384, 3, "edges"), (5, 7, 5, None)]


block_dim = testing.worker_block_dim


def inputs(dtype, batch, hidden, offset):
    gen = testing.generator(offset=offset)
    x = (testing.randn((batch, hidden), torch.float32, gen) + 2.0).to(dtype)   # a mean to subtract
    return x, testing.randn((hidden,), dtype, gen), testing.randn((hidden,), dtype, gen)


def run_kernel(dtype, x, w, b, grid, coords, target_cc):
    """run_tasks over layernorm's tasks, then the evidence over the tiles of the tasks that ran."""
    def layer_call(pk, t):
        pk.layernorm_layer(input=t["x"], weight=t["w"], bias=t["b"], output=t["out"], grid_dim=(grid, 1, 1),
                           block_dim=block_dim(target_cc), eps=EPS)

    tensors = {"x": x, "w": w, "b": b, "out": torch.zeros(x.shape, dtype=dtype)}
    run = testing.run_tasks(layer_call, tensors, coords, target_cc=target_cc)
    run.check("out", ref.layernorm(x, w, b, EPS), tol_layernorm(dtype, x, w, b, EPS), inputs=(x,))
    return run


@pytest.mark.parametrize("target_cc", TARGETS)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("batch,hidden,grid,coords", SHAPES)
def test_layernorm_kernel(dtype, batch, hidden, grid, coords, target_cc):
    x, w, b = inputs(dtype, batch, hidden, batch * 1000 + hidden)
    run_kernel(dtype, x, w, b, grid, coords, target_cc)


@pytest.mark.parametrize("target_cc", TARGETS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=lambda d: str(d)[6:])
def test_layernorm_kernel_strided(dtype, target_cc):
    """x a column block of a wider matrix (row stride 3 * hidden), w and b every other element of a
    longer vector: a kernel taking one tensor's strides for another's fails."""
    x, w, b = inputs(dtype, 6, 3 * 160, 11)
    w2, b2 = inputs(dtype, 1, 320, 12)[1:]
    run_kernel(dtype, x[:, 160:320], w2[::2], b2[::2], 3, None, target_cc)



@pytest.mark.quick
def test_layernorm_kernel_quick():
    """The quick subset's case (pytest -m quick, and the sanitizer runs of
    test_mode/test_kernel_sanitizers.py): the strided views at 256 threads, bf16."""
    test_layernorm_kernel_strided(torch.bfloat16, 90)


if __name__ == "__main__":
    testing.run_pytest_file_as_script(__file__, sys.argv[1:])
