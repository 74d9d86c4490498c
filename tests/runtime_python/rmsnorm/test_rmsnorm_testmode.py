"""rmsnorm_layer in test mode: real generated code, several workers, schedule jitter.

Run: python tests/runtime_python/rmsnorm/test_rmsnorm_testmode.py   (or pytest this file)
"""

import pytest
import torch

from mirage.mpk import testing
from mirage.mpk.persistent_kernel import PersistentKernel

ref = testing.load_reference(__file__)

DTYPES = [torch.bfloat16, torch.float16, torch.float32]
# (batch, hidden, grid.x): even split, non-power-of-two split (3 tiles of 2 rows), one-row tiles
SHAPES = [(16, 4096, 16), (6, 384, 3), (5, 96, 5), (1, 7, 1)]


def run_case(dtype, batch, hidden, grid, eps=1e-6, jitter=0, output_dir=None):
    gen = testing.generator(offset=batch * 1000 + hidden)
    pk = PersistentKernel(**testing.cpu_config(jitter_seed=jitter))
    x = testing.randn((batch, hidden), dtype, gen)
    w = testing.randn((hidden,), dtype, gen)        # random, not ones: a missing multiply shows
    out = torch.zeros(batch, hidden, dtype=dtype)
    x_dt, w_dt = pk.attach_input(x, name="x"), pk.attach_input(w, name="w")
    out_dt = pk.attach_input(out, name="out")
    pk.rmsnorm_layer(input=x_dt, weight=w_dt, output=out_dt, grid_dim=(grid, 1, 1), block_dim=(128, 1, 1),
                     eps=eps)
    pk.compile(output_dir=output_dir)
    pk()
    expected = ref.rmsnorm(x, w, eps)
    name = f"rmsnorm[{str(dtype)[6:]},{batch}x{hidden},grid={grid}]"
    testing.check_output(name, out, expected, testing.tol_rmsnorm(dtype, hidden), pk.layers[0].checks, (x,))
    pk.finalize()
    return pk


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("batch,hidden,grid", SHAPES)
def test_rmsnorm(dtype, batch, hidden, grid):
    run_case(dtype, batch, hidden, grid, jitter=batch)


def test_rmsnorm_eps_is_a_parameter():
    run_case(torch.float32, 4, 64, 2, eps=0.5)


if __name__ == "__main__":
    testing.run_cases_as_script("rmsnorm", run_case, DTYPES, SHAPES)
