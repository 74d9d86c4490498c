"""identity_layer in test mode: y = x (a bit copy), several workers, schedule jitter.

Run: python tests/runtime_python/identity/test_identity_testmode.py   (or pytest this file)
     mpirun -n 4 python tests/runtime_python/identity/test_identity_testmode.py   (one 4-rank job: identity
     is replicated (layers/identity.py TP), so every rank runs every case on the same full inputs and
     its outputs must be bit-identical across ranks; testing.run_cases_as_script)
"""

import pytest
import torch

from mirage.mpk import testing
from mirage.mpk.persistent_kernel import PersistentKernel

ref = testing.load_reference(__file__)

DTYPES = [torch.bfloat16, torch.float16, torch.float32]
# (shape, (grid.x, grid.y)): as in MPK, grid.x splits the last dim; grid.y splits the first
CASES = [
    ((8, 96), (1, 8)),          # one-row tiles
    ((6, 64), (4, 3)),          # 2-D grid, non-power-of-two row split
    ((1, 7), (7, 1)),           # one-column tiles
    ((5, 3), (3, 5)),           # 1x1 tiles
    ((12, 4096), (2, 6)),       # a real hidden size
    ((4, 6, 8), (4, 2)),        # 3-D: grid.x splits the last dim, the middle dim stays whole
]


def run_case(dtype, shape, grid, jitter, output_dir=None, world=testing.ONE_RANK):
    gen = testing.generator(offset=shape[0] * 100003 + shape[-1] * 37 + grid[1])
    pk = PersistentKernel(**testing.cpu_config(jitter_seed=jitter, **world.params))
    x = testing.randn(shape, dtype, gen)
    out = torch.zeros(shape, dtype=dtype)
    x_dt, out_dt = pk.attach_input(x, name="x"), pk.attach_input(out, name="out")
    pk.identity_layer(input=x_dt, output=out_dt, grid_dim=(grid[0], grid[1], 1), block_dim=(128, 1, 1))
    pk.compile(output_dir=output_dir)
    pk()
    expected = ref.identity(x)
    name = f"identity[{str(dtype)[6:]},{'x'.join(map(str, shape))},grid={grid},jitter={jitter}{world.tag}]"
    testing.assert_close(name, out, expected, testing.tol_elementwise(dtype), pk=pk)
    # identity.h is a bit copy: the budget above is already below half an ulp; this says it exactly.
    assert torch.equal(out.view(torch.uint8), x.view(torch.uint8)), f"{name}: output is not a bit copy"
    testing.check_nonvacuous(name, out, pk.layers[0].checks, inputs=(x,), reference=expected)
    pk.finalize()
    return pk


def _jitter(dtype, case) -> int:
    return 5 + 10 * CASES.index(case) + DTYPES.index(dtype)    # a different schedule per case


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{'x'.join(map(str, c[0]))}-grid{c[1][0]}x{c[1][1]}")
def test_identity(dtype, case, tmp_path):
    run_case(dtype, *case, jitter=_jitter(dtype, case), output_dir=str(tmp_path))


if __name__ == "__main__":
    testing.run_cases_as_script("identity", run_case, DTYPES, CASES, _jitter)
