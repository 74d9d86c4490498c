"""linear_with_residual_layer in test mode: y = x @ W^T + residual, several workers, schedule jitter.

Run: python tests/runtime_python/linear_with_residual/test_linear_with_residual_testmode.py
     (or pytest this file)
     mpirun -n 4 python tests/runtime_python/linear_with_residual/test_linear_with_residual_testmode.py
     (one 4-rank job: linear_with_residual is row-parallel (layers/linear_with_residual.py TP), as
     MPK's o/down projections: every rank draws the same unsharded x, W and residual, keeps columns
     [r*K/W, (r+1)*K/W) of x and W, computes its partial sum (the residual on rank 0 only), and an
     allreduce layer after it sums the partials. Checks per rank: the partial against its own
     float64 reference and the sum against the gathered partials (the tight per-layer budgets),
     the sum against the unsharded reference (the composed budget: K + 1 + W terms, each partial
     rounded once to the dtype), and the sum bit-identical across ranks;
     testing.run_cases_as_script)
"""
import os

import pytest
import torch

from mirage.mpk import testing
from mirage.mpk.persistent_kernel import PersistentKernel

ref = testing.load_reference(__file__)
ALLREDUCE = testing.load_reference(os.path.join(os.path.dirname(__file__), "..", "allreduce", "x.py"))

DTYPES = [torch.bfloat16, torch.float16, torch.float32]
# (batch, in_features K, out_features N, (grid.x, grid.y)): grid.x splits N, grid.y splits rows
CASES = [
    (8, 256, 96, (6, 1)),       # non-power-of-two column split: 6 tiles of 16 columns
    (6, 200, 64, (4, 3)),       # 2-D grid, 3 row tiles of 2 rows; K not a multiple of 8
    (1, 64, 7, (7, 1)),         # one-row, one-column tiles
    (4, 37, 12, (12, 4)),       # 1x1 output tiles, odd K
    (8, 4096, 128, (8, 2)),     # a real hidden size as the reduction length
    (32, 512, 48, (3, 2)),      # 16-bit: the tensor cores, 2 row tiles of 16
]


def run_case(dtype, batch, k, n, grid, jitter, output_dir=None, world=testing.ONE_RANK):
    gen = testing.generator(offset=batch * 100003 + k * 1009 + n + 7)     # the same on every rank
    x_full = testing.randn((batch, k), dtype, gen)
    w_full = testing.randn((n, k), dtype, gen, scale=k ** -0.5)    # random, not zeros: y == residual shows
    residual = testing.randn((batch, n), dtype, gen)
    x, w = world.shard("input", x_full), world.shard("weight", w_full)     # this rank's columns of K
    pk = PersistentKernel(**testing.cpu_config(jitter_seed=jitter, **world.params))
    out = torch.zeros(batch, n, dtype=dtype)             # one rank: y; several: this rank's partial sum
    x_dt, w_dt = pk.attach_input(x, name="x"), pk.attach_input(w, name="w")
    r_dt, out_dt = pk.attach_input(residual, name="residual"), pk.attach_input(out, name="out")
    pk.linear_with_residual_layer(input=x_dt, weight=w_dt, residual=r_dt, output=out_dt,
                                  grid_dim=(grid[0], grid[1], 1), block_dim=(128, 1, 1))
    summed = None
    if world.size > 1:                                   # row-parallel: an allreduce sums the partials
        summed = torch.zeros(batch, n, dtype=dtype)
        buf = pk.new_tensor((world.size, batch, n), dtype=dtype, name="buf", io_category="nvshmem_tensor")
        pk.allreduce_layer(input=out_dt, buffer=buf, output=pk.attach_input(summed, name="summed"),
                           grid_dim=(grid[0], 1, 1), block_dim=(128, 1, 1))
    pk.compile(output_dir=output_dir)
    pk()
    pk.finalize()
    add_residual = world.rank == 0
    expected = ref.linear_with_residual(x, w, residual, add_residual=add_residual)
    scale = x.double().abs() @ w.double().abs().T + residual.double().abs() * add_residual
    name = f"linear_with_residual[{str(dtype)[6:]},{batch}x{k}->{n},grid={grid},jitter={jitter}{world.tag}]"
    tol = testing.tol_linear(dtype, x.shape[1] + 1, scale, tensor_cores=pk.layers[0].params["tensor_cores"])
    testing.check_output(name, out, expected, tol, pk.layers[0].checks, (x, w, residual), pk=pk)
    if summed is not None:
        parts = world.gather(out.clone())
        # the allreduce, on the partial sums the ranks computed: W terms (the tight per-layer check)
        tol = testing.tolerance(dtype, k=world.size, scale=sum(p.double().abs() for p in parts))
        testing.check_output(f"{name}.allreduce", summed, ALLREDUCE.allreduce(parts), tol,
                             pk.layers[1].checks, (out,), pk=pk)
        # end to end: the unsharded layer from the full tensors. The chain composes the budgets: k + 1 fp32
        # terms per partial and W in the sum, relative to the whole scale, plus each partial rounded once
        # to the dtype (u_in; its variance from the squared partials)
        expected = world.shard("output", ref.linear_with_residual(x_full, w_full, residual))
        scale = x_full.double().abs() @ w_full.double().abs().T + residual.double().abs()
        tol = testing.tolerance(dtype, k=k + 1 + world.size, scale=scale, ops=2, input_rounding=dtype,
                                scale2=sum(p.double() ** 2 for p in parts))
        testing.check_output(f"{name}.unsharded", summed, expected, tol, pk.layers[1].checks, (out, residual),
                             pk=pk)
    return pk


def _jitter(dtype, case) -> int:
    return 2 + 10 * CASES.index(case) + DTYPES.index(dtype)    # a different schedule per case


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}x{c[1]}->{c[2]}-grid{c[3][0]}x{c[3][1]}")
def test_linear_with_residual(dtype, case, tmp_path):
    run_case(dtype, *case, jitter=_jitter(dtype, case), output_dir=str(tmp_path))


if __name__ == "__main__":
    testing.run_cases_as_script("linear_with_residual", run_case, DTYPES, CASES, _jitter)
