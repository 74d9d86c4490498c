"""rmsnorm_layer's kernel alone (csrc/tasks/rmsnorm.cuh): each task on one block, nothing else running,
every byte around its tiles poisoned (testing.run_tasks: writes only its output tiles, reads only its
input tiles, independent of its threads' order, every output element written).

Run: python tests/runtime_python/rmsnorm/test_rmsnorm.py   (or pytest this file; -k to pick cases)
The integration test is test_rmsnorm_testmode.py beside it; both use pytorch_reference.py.
"""
import sys

import pytest
import torch

from mirage.mpk import testing

ref = testing.load_reference(__file__)

DTYPES = [torch.bfloat16, torch.float16, torch.float32]
TARGETS = [80, 90]       # the worker block: 128 threads (sm_80), 256 (sm_90a / sm_100a)
# (batch, hidden, grid.x, coords): every task of an even split; the edge tasks of a non-power-of-two
# split (3 tiles of 2 rows); one-row tiles; a hidden size that is no multiple of the 16-byte pack
# (the scalar path) and narrower than a warp.
SHAPES = [(16, 4096, 16, None), (6, 384, 3, "edges"), (5, 96, 5, None), (3, 7, 3, None)]
# Strided inputs the kernel accepts: x a column block of a wider matrix (row stride 3 * hidden, so the
# packed path needs the row stride, not the width) and w every other element of a longer vector.
STRIDED = [(torch.bfloat16, 4, 256, 2), (torch.float32, 6, 160, 3)]


block_dim = testing.worker_block_dim


def run_kernel(dtype, x, w, grid, coords, target_cc, eps=1e-6):
    """run_tasks over rmsnorm's tasks, then the evidence over the tiles of the tasks that ran."""
    out = torch.zeros(x.shape, dtype=dtype)
    run = testing.run_tasks(
        lambda pk, t: pk.rmsnorm_layer(input=t["x"], weight=t["w"], output=t["out"], grid_dim=(grid, 1, 1),
                                       block_dim=block_dim(target_cc), eps=eps),
        {"x": x, "w": w, "out": out}, coords=coords, target_cc=target_cc)
    run.check("out", ref.rmsnorm(x, w, eps), testing.tol_rmsnorm(dtype, x.shape[1]), inputs=(x,))
    return run


@pytest.mark.parametrize("target_cc", TARGETS)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("batch,hidden,grid,coords", SHAPES)
def test_rmsnorm_kernel(dtype, batch, hidden, grid, coords, target_cc):
    gen = testing.generator(offset=batch * 1000 + hidden)
    x = testing.randn((batch, hidden), dtype, gen)
    w = testing.randn((hidden,), dtype, gen)
    run_kernel(dtype, x, w, grid, coords, target_cc)


# The quick iteration subset (pytest -m quick, and the sanitizer runs of
# test_mode/test_kernel_sanitizers.py): one case, the strided bf16 one at 256 threads (block_sum's
# barriers and shared memory, the packed path with a row stride that is not the width).
QUICK = (torch.bfloat16, 4, 256, 2, 90)


@pytest.mark.parametrize("dtype,batch,hidden,grid,target_cc", [
    pytest.param(*s, cc, id=f"{str(s[0])[6:]}-{s[1]}x{s[2]}-grid{s[3]}-cc{cc}",
                 marks=[pytest.mark.quick] if (*s, cc) == QUICK else []) for s in STRIDED for cc in TARGETS])
def test_rmsnorm_kernel_strided(dtype, batch, hidden, grid, target_cc):
    gen = testing.generator(offset=7 * hidden)
    wide = testing.randn((batch, 3 * hidden), dtype, gen)
    x = wide[:, hidden:2 * hidden]                      # row stride 3 * hidden, unit column stride
    w = testing.randn((2 * hidden,), dtype, gen)[::2]   # column stride 2
    assert not x.is_contiguous() and w.stride() == (2,)
    run_kernel(dtype, x, w, grid, None, target_cc)


if __name__ == "__main__":
    testing.run_pytest_file_as_script(__file__, sys.argv[1:])
