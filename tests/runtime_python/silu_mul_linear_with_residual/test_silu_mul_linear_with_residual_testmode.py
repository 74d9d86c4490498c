"""silu_mul_linear_with_residual_layer in test mode: y = (silu(gate) * up) @ W^T + residual, several workers,
schedule jitter.

Run: python tests/runtime_python/silu_mul_linear_with_residual/test_silu_mul_linear_with_residual_testmode.py
     (or pytest this file)
     mpirun -n 4 python \
         tests/runtime_python/silu_mul_linear_with_residual/test_silu_mul_linear_with_residual_testmode.py
     (one 4-rank job: the layer is row-parallel (its module's TP), as MPK's down projection: every rank
     draws the same unsharded gate, up, W and residual (a contained generator), keeps columns
     [r*I/W, (r+1)*I/W) of gate, of up and of W (its input is its own [gate_r | up_r]), computes its
     partial sum (the residual on rank 0 only), and an allreduce layer sums the partials. Checks per rank:
     the partial against its float64 reference, the sum against the gathered partials, the sum against the
     unsharded reference (the composed budget), and the sum bit-identical across ranks)
"""
import os

import pytest
import torch

from mirage.mpk import testing
from mirage.mpk.persistent_kernel import PersistentKernel

ref = testing.load_reference(__file__)
ALLREDUCE = testing.load_reference(os.path.join(os.path.dirname(__file__), "..", "allreduce", "x.py"))

DTYPES = [torch.bfloat16, torch.float16, torch.float32]
SILU_OPS = 8             # tol_elementwise's fp32 ops for silu_mul (docs/tolerances.md)
# (batch, intermediate I, hidden N, grid.x): grid.x splits N
CASES = [
    (8, 256, 96, 6),         # non-power-of-two hidden split: 6 tiles of 16 columns
    (1, 128, 20, 5),         # decode: one row
    (6, 36, 12, 12),         # one-column tiles; I = 36 (9 per rank on 4 ranks: the scalar path)
    (4, 1024, 64, 4),        # a longer reduction
    (16, 256, 32, 2),        # 16-bit: the tensor cores
]


def run_case(dtype, batch, i, n, grid, jitter, output_dir=None, world=testing.ONE_RANK):
    gen = testing.generator(offset=batch * 100003 + i * 1009 + n + 3)     # the same on every rank
    gate_full, up_full = testing.randn((batch, i), dtype, gen), testing.randn((batch, i), dtype, gen)
    w_full = testing.randn((n, i), dtype, gen, scale=i ** -0.5)
    residual = testing.randn((batch, n), dtype, gen)
    x = torch.cat([world.shard("input", gate_full), world.shard("input", up_full)], dim=1)
    w = world.shard("weight", w_full)
    pk = PersistentKernel(**testing.cpu_config(jitter_seed=jitter, **world.params))
    out = torch.zeros(batch, n, dtype=dtype)             # one rank: y; several: this rank's partial sum
    x_dt, w_dt = pk.attach_input(x, name="x"), pk.attach_input(w, name="w")
    r_dt, out_dt = pk.attach_input(residual, name="residual"), pk.attach_input(out, name="out")
    pk.silu_mul_linear_with_residual_layer(input=x_dt, weight=w_dt, residual=r_dt, output=out_dt,
                                           grid_dim=(grid, 1, 1), block_dim=(128, 1, 1))
    summed = None
    if world.size > 1:
        summed = torch.zeros(batch, n, dtype=dtype)
        buf = pk.new_tensor((world.size, batch, n), dtype=dtype, name="buf", io_category="nvshmem_tensor")
        pk.allreduce_layer(input=out_dt, buffer=buf, output=pk.attach_input(summed, name="summed"),
                           grid_dim=(grid, 1, 1), block_dim=(128, 1, 1))
    pk.compile(output_dir=output_dir)
    pk()
    pk.finalize()
    add = world.rank == 0
    assert pk.layers[0].params["add_residual"] == add, "MPK: the residual on rank 0 only"
    expected = ref.silu_mul_linear_with_residual(x, w, residual, add_residual=add)
    scale = ref.hidden(x) @ w.double().abs().T + residual.double().abs() * add
    name = (f"silu_mul_linear_with_residual[{str(dtype)[6:]},{batch}x{i}->{n},grid={grid},jitter={jitter}"
            f"{world.tag}]")
    tol = testing.tol_linear(dtype, x.shape[1] // 2 + 1 + SILU_OPS, scale, input_rounding=dtype,
                             tensor_cores=pk.layers[0].params["tensor_cores"])
    testing.check_output(name, out, expected, tol, pk.layers[0].checks, (x, w, residual), pk=pk)
    if summed is not None:
        parts = world.gather(out.clone())
        tol = testing.tolerance(dtype, k=world.size, scale=sum(p.double().abs() for p in parts))
        testing.check_output(f"{name}.allreduce", summed, ALLREDUCE.allreduce(parts), tol,
                             pk.layers[1].checks, (out,), pk=pk)
        # end to end: per partial I/W + 1 + 8 fp32 terms, W in the sum; two roundings to the dtype (u_in):
        # h's, within u_in |h| @ |W|^T, and each partial's, within u_in sum_r |p_r|: so u_in times
        # their sum as the scale (which also bounds the fp32 terms from above)
        x_full = torch.cat([gate_full, up_full], dim=1)
        expected = world.shard("output", ref.silu_mul_linear_with_residual(x_full, w_full, residual))
        scale = ref.hidden(x_full) @ w_full.double().abs().T + residual.double().abs()
        scale = scale + sum(p.double().abs() for p in parts)
        tol = testing.tolerance(dtype, k=i + 1 + SILU_OPS + world.size, scale=scale, ops=2,
                                input_rounding=dtype)
        testing.check_output(f"{name}.unsharded", summed, expected, tol, pk.layers[1].checks, (out, residual),
                             pk=pk)
    return pk


def _jitter(dtype, case) -> int:
    return 3 + 10 * CASES.index(case) + DTYPES.index(dtype)    # a different schedule per case


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}x{c[1]}->{c[2]}-grid{c[3]}")
def test_silu_mul_linear_with_residual(dtype, case, tmp_path):
    run_case(dtype, *case, jitter=_jitter(dtype, case), output_dir=str(tmp_path))


if __name__ == "__main__":
    testing.run_cases_as_script("silu_mul_linear_with_residual", run_case, DTYPES, CASES, _jitter)
