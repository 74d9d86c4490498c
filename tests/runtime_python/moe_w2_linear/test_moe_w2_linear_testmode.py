"""moe_w2_linear_layer in test mode: real generated code, several workers, schedule jitter.

Run: python tests/runtime_python/moe_w2_linear/test_moe_w2_linear_testmode.py
     python -m pytest tests/runtime_python/moe_w2_linear/test_moe_w2_linear_testmode.py
     mpirun -n 4 python tests/runtime_python/moe_w2_linear/test_moe_w2_linear_testmode.py
     (one 4-rank job: the layer is replicated (its module's TP), so every rank runs every case on
     the same full inputs and the outputs must be bit-identical across ranks; run_cases_as_script)
"""

import pytest
import torch

from mirage.mpk import testing
from mirage.mpk.persistent_kernel import PersistentKernel

ref = testing.load_reference(__file__)

DTYPES = [torch.bfloat16, torch.float16, torch.float32]
# (rows, cols, grid.x): even split, non-power-of-two split (3 tiles of 2 rows), one-row tiles, one task
SHAPES = [(16, 4096, 16), (6, 384, 3), (5, 96, 5), (1, 7, 1)]
# (dtype, shape, scalar parameters): cases where each parameter moves the result beyond the budget, so a
# kernel that ignored it fails (testing.check_scalars, required).
SCALAR_CASES = [
    (torch.bfloat16, (6, 384, 3), {"scale": 3.0}),
    (torch.float32, (5, 96, 5), {"scale": -0.5}),
]


def run_case(dtype, rows, cols, grid, scale=2.0, jitter=0, output_dir=None, scalars_required=False,
             world=testing.ONE_RANK):
    gen = testing.generator(offset=rows * 1000 + cols)
    pk = PersistentKernel(**testing.cpu_config(jitter_seed=jitter, **world.params))
    x = testing.randn((rows, cols), dtype, gen)
    out = torch.zeros(rows, cols, dtype=dtype)
    x_dt, out_dt = pk.attach_input(x, name="x"), pk.attach_input(out, name="out")
    pk.moe_w2_linear_layer(input=x_dt, output=out_dt, grid_dim=(grid, 1, 1), block_dim=(128, 1, 1),
        scale=scale)
    pk.compile(output_dir=output_dir)
    pk()
    pk.finalize()
    expected = ref.moe_w2_linear(x, scale)
    name = f"moe_w2_linear[{str(dtype)[6:]},{rows}x{cols},grid={grid},scale={scale:g}{world.tag}]"
    # PLACEHOLDER: a reduction derives its own budget (docs/tolerances.md)
    tol = testing.tol_elementwise(dtype)
    reference = lambda **p: ref.moe_w2_linear(x, **p)      # noqa: E731 (the reference of the scalars)
    testing.check_output(name, out, expected, tol, pk.layers[0].checks, (x,), pk=pk, reference_fn=reference)
    testing.check_scalars(name, pk.layers[0], reference, expected, tol, required=scalars_required)
    return pk


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("rows,cols,grid", SHAPES)
def test_moe_w2_linear(dtype, rows, cols, grid):
    run_case(dtype, rows, cols, grid, jitter=rows)


@pytest.mark.parametrize("dtype,case,params", SCALAR_CASES,
                         ids=[f"{str(d)[6:]}-{c[0]}x{c[1]}-{p}" for d, c, p in SCALAR_CASES])
def test_moe_w2_linear_scalar_parameters(dtype, case, params):
    run_case(dtype, *case, jitter=case[0], scalars_required=True, **params)


if __name__ == "__main__":
    testing.run_cases_as_script("moe_w2_linear", run_case, DTYPES, SHAPES,
                                scalar_cases=SCALAR_CASES)
