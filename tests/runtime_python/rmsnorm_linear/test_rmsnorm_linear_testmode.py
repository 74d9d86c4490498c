"""rmsnorm_linear_layer in test mode: y = rmsnorm(x, w_norm) @ W^T on real generated code, several workers,
schedule jitter.

Run: python tests/runtime_python/rmsnorm_linear/test_rmsnorm_linear_testmode.py   (or pytest this file)
     mpirun -n 4 python tests/runtime_python/rmsnorm_linear/test_rmsnorm_linear_testmode.py   (one 4-rank
     job: the layer is column-parallel (layers/rmsnorm_linear.py TP): every rank draws the same unsharded
     x, w_norm and W, keeps rows [r*N/W, (r+1)*N/W) of W, computes those columns of y and compares them
     with the same columns of the unsharded float64 reference; grid.x becomes the largest divisor of the
     local N not above the case's; testing.run_cases_as_script)
"""

import pytest
import torch

from mirage.mpk import testing
from mirage.mpk.persistent_kernel import PersistentKernel

ref = testing.load_reference(__file__)

DTYPES = [torch.bfloat16, torch.float16, torch.float32]
# (batch, hidden K, out_features N, grid.x): grid.x splits N
CASES = [
    (8, 256, 96, 6),       # non-power-of-two split: 6 tiles of 16 columns
    (1, 1024, 64, 8),      # decode: one row, a longer reduction
    (6, 200, 12, 12),      # one-column tiles, K not a multiple of 32
    (13, 64, 28, 7),       # more rows than warps
    (16, 128, 40, 5),      # bf16 / fp16 on the tensor cores (from 16 rows), 8-column tiles
]
# (dtype, case, scalar parameters): eps large enough to move the result beyond the budget, so a kernel
# that ignored it fails (testing.check_scalars, required); at eps=1e-6 and rows of rms ~1 it moves the
# result by ~5e-7 relative, inside every budget above.
SCALAR_CASES = [
    (torch.bfloat16, (8, 256, 96, 6), {"eps": 0.1}),
    (torch.float32, (6, 200, 12, 12), {"eps": 1e-3}),
]


def run_case(dtype, batch, k, n, grid, eps=1e-6, jitter=0, output_dir=None, scalars_required=False,
             world=testing.ONE_RANK):
    gen = testing.generator(offset=batch * 100003 + k * 1009 + n)      # the same on every rank
    x = testing.randn((batch, k), dtype, gen)
    wn = testing.randn((k,), dtype, gen)                         # random, not ones: a missing multiply shows
    w_full = testing.randn((n, k), dtype, gen, scale=k ** -0.5)  # random, not zeros: a skipped row shows
    w = world.shard("weight", w_full)
    grid = max(g for g in range(1, grid + 1) if w.shape[0] % g == 0)   # divides the local N
    pk = PersistentKernel(**testing.cpu_config(jitter_seed=jitter, **world.params))
    out = torch.zeros(batch, w.shape[0], dtype=dtype)
    x_dt, wn_dt = pk.attach_input(x, name="x"), pk.attach_input(wn, name="wn")
    w_dt = pk.attach_input(w, name="w")
    out_dt = pk.attach_input(out, name="out")
    pk.rmsnorm_linear_layer(input=x_dt, weight_norm=wn_dt, weight_linear=w_dt, output=out_dt,
                            grid_dim=(grid, 1, 1), block_dim=(128, 1, 1), eps=eps)
    pk.compile(output_dir=output_dir)
    pk()
    pk.finalize()
    expected = world.shard("output", ref.rmsnorm_linear(x, wn, w_full, eps))
    lo, hi = world.part(n) if world.size > 1 else (0, n)      # this rank's columns, as shard("output") took
    name = (f"rmsnorm_linear[{str(dtype)[6:]},{batch}x{k}->{n},grid={grid},eps={eps:g},jitter={jitter}"
            f"{world.tag}]")
    tol = testing.tol_rmsnorm_linear(dtype, k, ref.normed_scale(x, wn, w, eps),
                                     tensor_cores=pk.layers[0].params["tensor_cores"])
    reference = lambda **p: ref.rmsnorm_linear(x, wn, w_full, **p)[:, lo:hi]  # noqa: E731 (eps's reference)
    testing.check_output(name, out, expected, tol, pk.layers[0].checks, (x, wn, w), pk=pk,
                         reference_fn=reference)
    testing.check_scalars(name, pk.layers[0], reference, expected, tol, required=scalars_required)
    return pk


def _jitter(dtype, case) -> int:
    return 1 + 10 * CASES.index(case) + DTYPES.index(dtype)    # a different schedule per case


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}x{c[1]}->{c[2]}-grid{c[3]}")
def test_rmsnorm_linear(dtype, case, tmp_path):
    run_case(dtype, *case, jitter=_jitter(dtype, case), output_dir=str(tmp_path))


@pytest.mark.parametrize("dtype,case,params", SCALAR_CASES,
                         ids=[f"{str(d)[6:]}-{c[0]}x{c[1]}-eps{p['eps']:g}" for d, c, p in SCALAR_CASES])
def test_rmsnorm_linear_scalar_parameters(dtype, case, params, tmp_path):
    run_case(dtype, *case, jitter=case[0], scalars_required=True, output_dir=str(tmp_path), **params)


if __name__ == "__main__":
    testing.run_cases_as_script("rmsnorm_linear", run_case, DTYPES, CASES, _jitter, scalar_cases=SCALAR_CASES)
