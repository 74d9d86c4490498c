"""silu_mul_linear_with_residual_layer's kernel alone (csrc/tasks/silu_mul_linear_with_residual.cuh:
linear.cuh's linear_rows with x = round_T(silu(gate) * up)): each task on one block, everything around its
tiles poisoned (testing.run_tasks; docs/kernel_tests.md).

Covers bf16, fp16 and fp32 at 128 threads (target_cc 80) and 256 (target_cc 90), one rank (add_residual = 1):
every task of a non-power-of-two hidden split (3 tiles), the vector path (I a multiple of 8) and the scalar
path (odd I: up's rows are not 16-byte aligned), a single-row batch (decode), the edge tasks of a 5-way
split, one task over all of hidden; a strided view (x a column block of a wider matrix, the residual's rows
padded); the bits equal one task over the whole output at 256 threads (linear.cuh's summation order).
Budget: tol_linear over I + 1 fp32 terms plus silu_mul's 8 fp32 ops per h and h's rounding to the dtype
(input_rounding), scale |h| @ |W|^T + |residual| (docs/tolerances.md).
Another rank's parameters: the layer declared as rank 1 of 2 (add_residual = 0: only rank 0 adds the
residual, so the allreduce after it counts it once) gives y = h @ W^T, in every dtype (the run itself is
one process; testing.as_rank). A kernel adding the residual whatever its flag says passes every rank-0
case and fails this one (test_mode/test_rank_flag_controls.py). The multi-rank run: the testmode file's
mpirun job.

Run: python tests/runtime_python/silu_mul_linear_with_residual/test_silu_mul_linear_with_residual.py
"""
import sys

import pytest
import torch

from mirage.mpk import testing

ref = testing.load_reference(__file__)

DTYPES = [torch.bfloat16, torch.float16, torch.float32]
TARGETS = [80, 90]       # the worker block: 128 threads (sm_80), 256 (sm_90a / sm_100a)
SILU_OPS = 8             # tol_elementwise's fp32 ops for silu_mul
# (batch, I, N hidden, grid.x, coords): grid.x splits N
SHAPES = [
    (8, 256, 48, 3, None),       # non-power-of-two hidden split: 3 tiles of 16 columns, vector path
    (1, 128, 20, 5, "edges"),    # single-row batch; the first and last of 5 tiles of 4 columns
    (13, 37, 12, 3, None),       # odd I: up starts at column 37, the scalar path; row chunks 8 + 4 + 1
    (6, 64, 10, 1, None),        # one task over all of hidden; a column group partly past n
    (24, 200, 40, 2, None),      # 16-bit: the tensor cores, h staged slice by slice (passes of 16 + 8 rows)
]


def budget(dtype, x, w, residual, add_residual=True, tensor_cores=False):
    scale = ref.hidden(x) @ w.double().abs().T + residual.double().abs() * add_residual
    return testing.tol_linear(dtype, w.shape[1] + 1 + SILU_OPS, scale, input_rounding=dtype,
                              tensor_cores=tensor_cores)


def inputs(dtype, batch, i, n, offset, x_layout=None, r_layout=None):
    gen = testing.generator(offset=offset)
    x = testing.strided_view((batch, 2 * i), x_layout, dtype, gen)
    w = testing.randn((n, i), dtype, gen, scale=i ** -0.5)
    residual = testing.strided_view((batch, n), r_layout, dtype, gen)
    return x, w, residual, torch.zeros(batch, n, dtype=dtype)


def run_kernel(dtype, x, w, residual, out, grid, coords, target_cc, rank=(0, 1)):
    run = testing.run_tasks(
        testing.as_rank(*rank, lambda pk, t: pk.silu_mul_linear_with_residual_layer(
            input=t["x"], weight=t["w"], residual=t["residual"], output=t["out"], grid_dim=(grid, 1, 1),
            block_dim=testing.worker_block_dim(target_cc))),
        {"x": x, "w": w, "residual": residual, "out": out}, coords=coords, target_cc=target_cc)
    add = run.layer.params["add_residual"]
    assert add == (rank[0] == 0), f"rank {rank[0]} of {rank[1]}: add_residual = {add}; only rank 0 adds it"
    run.check("out", ref.silu_mul_linear_with_residual(x, w, residual, add),
              budget(dtype, x, w, residual, add, run.layer.params["tensor_cores"]), inputs=(x, w, residual))
    return run


def check_invariance(dtype, run, x, w, residual, target_cc):
    if target_cc == 80:
        one_task = run_kernel(dtype, x, w, residual, torch.zeros_like(residual), 1, None, 90)
        testing.same_bits(run, one_task, "out", "one task at 256 threads")


@pytest.mark.parametrize("target_cc", TARGETS)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("batch,i,n,grid,coords", SHAPES, ids=lambda c: str(c))
def test_silu_mul_linear_with_residual_kernel(dtype, batch, i, n, grid, coords, target_cc):
    tensors = inputs(dtype, batch, i, n, offset=batch * 100003 + i * 1009 + n)
    run = run_kernel(dtype, *tensors, grid, coords, target_cc)
    check_invariance(dtype, run, *tensors[:3], target_cc)


@pytest.mark.parametrize("target_cc", TARGETS)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
def test_silu_mul_linear_with_residual_kernel_strided(dtype, target_cc):
    # x columns [2I, 4I) of a [B, 6I] matrix (row stride 6I, not 2I), the residual's rows padded to N + 3:
    # a kernel taking one tensor's strides for another's, or I from the row stride, fails
    tensors = inputs(dtype, 6, 64, 24, 11, x_layout=(384, 1), r_layout=(27, 1))
    assert not tensors[0].is_contiguous() and not tensors[2].is_contiguous()
    run = run_kernel(dtype, *tensors, 3, None, target_cc)
    check_invariance(dtype, run, *tensors[:3], target_cc)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
def test_silu_mul_linear_with_residual_kernel_other_rank(dtype, rank=(1, 2)):
    """Rank 1 of 2: add_residual = 0, y = h @ W^T (the residual random and non-zero: adding it fails)."""
    batch, i, n, grid, _ = SHAPES[0]
    tensors = inputs(dtype, batch, i, n, offset=batch * 100003 + i * 1009 + n)
    run_kernel(dtype, *tensors, grid, None, 80, rank=rank)   # rank (0, 1): the same at rank 0


@pytest.mark.quick
def test_silu_mul_linear_with_residual_kernel_quick():
    """The quick subset's case (pytest -m quick): the strided view at 256 threads, bf16."""
    test_silu_mul_linear_with_residual_kernel_strided(torch.bfloat16, 90)


if __name__ == "__main__":
    testing.run_pytest_file_as_script(__file__, sys.argv[1:])
