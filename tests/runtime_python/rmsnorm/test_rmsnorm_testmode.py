"""rmsnorm_layer in test mode: real generated code, several workers, schedule jitter.

Run: python tests/runtime_python/rmsnorm/test_rmsnorm_testmode.py   (or pytest this file)
     mpirun -n 4 python tests/runtime_python/rmsnorm/test_rmsnorm_testmode.py   (one 4-rank job: rmsnorm
     is replicated (layers/rmsnorm.py TP), so every rank runs every case on the same full inputs and
     the outputs must be bit-identical across ranks; testing.run_cases_as_script)
"""

import pytest
import torch

from mirage.mpk import testing
from mirage.mpk.persistent_kernel import PersistentKernel

ref = testing.load_reference(__file__)

DTYPES = [torch.bfloat16, torch.float16, torch.float32]
# (batch, hidden, grid.x): even split, non-power-of-two split (3 tiles of 2 rows), one-row tiles
SHAPES = [(16, 4096, 16), (6, 384, 3), (5, 96, 5), (1, 7, 1)]
# (dtype, shape, scalar parameters): cases where eps moves the result beyond the budget, so a
# kernel that ignored it fails (testing.check_scalars, required); at eps=1e-6 and inputs of rms ~1
# it moves the result by ~5e-7 relative, inside every budget above.
SCALAR_CASES = [
    (torch.bfloat16, (16, 4096, 16), {"eps": 0.1}),
    (torch.float16, (5, 96, 5), {"eps": 0.01}),
    (torch.float32, (6, 384, 3), {"eps": 1e-3}),
]


def run(dtype, batch, hidden, grid, eps=1e-6, jitter=0, output_dir=None, world=testing.ONE_RANK):
    """Build, compile and run one case: (pk, name, out, expected, tol, inputs, reference of eps)."""
    gen = testing.generator(offset=batch * 1000 + hidden)
    pk = PersistentKernel(**testing.cpu_config(jitter_seed=jitter, **world.params))
    x = testing.randn((batch, hidden), dtype, gen)
    w = testing.randn((hidden,), dtype, gen)        # random, not ones: a missing multiply shows
    out = torch.zeros(batch, hidden, dtype=dtype)
    x_dt, w_dt = pk.attach_input(x, name="x"), pk.attach_input(w, name="w")
    out_dt = pk.attach_input(out, name="out")
    pk.rmsnorm_layer(input=x_dt, weight=w_dt, output=out_dt, grid_dim=(grid, 1, 1), block_dim=(128, 1, 1),
                     eps=eps)
    pk.compile(output_dir=output_dir)
    pk()
    pk.finalize()
    expected = ref.rmsnorm(x, w, eps)
    name = f"rmsnorm[{str(dtype)[6:]},{batch}x{hidden},grid={grid},eps={eps:g}{world.tag}]"
    tol = testing.tol_rmsnorm(dtype, hidden)
    return pk, name, out, expected, tol, (x,), lambda **p: ref.rmsnorm(x, w, **p)


def run_case(dtype, batch, hidden, grid, eps=1e-6, jitter=0, output_dir=None, scalars_required=False,
             world=testing.ONE_RANK):
    pk, name, out, expected, tol, inputs, reference = run(dtype, batch, hidden, grid, eps, jitter, output_dir,
                                                          world)
    testing.check_output(name, out, expected, tol, pk.layers[0].checks, inputs, pk=pk, reference_fn=reference)
    testing.check_scalars(name, pk.layers[0], reference, expected, tol, required=scalars_required)
    return pk


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("batch,hidden,grid", SHAPES)
def test_rmsnorm(dtype, batch, hidden, grid):
    run_case(dtype, batch, hidden, grid, jitter=batch)


@pytest.mark.parametrize("dtype,case,params", SCALAR_CASES,
                         ids=[f"{str(d)[6:]}-{c[0]}x{c[1]}-eps{p['eps']:g}" for d, c, p in SCALAR_CASES])
def test_rmsnorm_scalar_parameters(dtype, case, params):
    run_case(dtype, *case, jitter=case[0], scalars_required=True, **params)


if __name__ == "__main__":
    testing.run_cases_as_script("rmsnorm", run_case, DTYPES, SHAPES, scalar_cases=SCALAR_CASES)
