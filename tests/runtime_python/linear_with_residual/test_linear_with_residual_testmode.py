"""linear_with_residual_layer in test mode: y = x @ W^T + residual, several workers, schedule jitter.

Run: python tests/runtime_python/linear_with_residual/test_linear_with_residual_testmode.py
     (or pytest this file)
"""

import pytest
import torch

from mirage.mpk import testing
from mirage.mpk.persistent_kernel import PersistentKernel

ref = testing.load_reference(__file__)

DTYPES = [torch.bfloat16, torch.float16, torch.float32]
# (batch, in_features K, out_features N, (grid.x, grid.y)): grid.x splits N, grid.y splits rows
CASES = [
    (8, 256, 96, (6, 1)),       # non-power-of-two column split: 6 tiles of 16 columns
    (6, 200, 64, (4, 3)),       # 2-D grid, 3 row tiles of 2 rows; K not a multiple of 8
    (1, 64, 7, (7, 1)),         # one-row, one-column tiles
    (4, 37, 12, (12, 4)),       # 1x1 output tiles, odd K
    (8, 4096, 128, (8, 2)),     # a real hidden size as the reduction length
]


def run_case(dtype, batch, k, n, grid, jitter, output_dir=None):
    gen = testing.generator(offset=batch * 100003 + k * 1009 + n + 7)
    pk = PersistentKernel(**testing.cpu_config(jitter_seed=jitter))
    x = testing.randn((batch, k), dtype, gen)
    w = testing.randn((n, k), dtype, gen, scale=k ** -0.5)    # random, not zeros: y == residual shows
    residual = testing.randn((batch, n), dtype, gen)
    out = torch.zeros(batch, n, dtype=dtype)
    x_dt, w_dt = pk.attach_input(x, name="x"), pk.attach_input(w, name="w")
    r_dt, out_dt = pk.attach_input(residual, name="residual"), pk.attach_input(out, name="out")
    pk.linear_with_residual_layer(input=x_dt, weight=w_dt, residual=r_dt, output=out_dt,
                                  grid_dim=(grid[0], grid[1], 1), block_dim=(128, 1, 1))
    pk.compile(output_dir=output_dir)
    pk()
    expected = ref.linear_with_residual(x, w, residual)
    scale = x.double().abs() @ w.double().abs().T + residual.double().abs()
    name = f"linear_with_residual[{str(dtype)[6:]},{batch}x{k}->{n},grid={grid},jitter={jitter}]"
    testing.check_output(name, out, expected, testing.tol_linear(dtype, k + 1, scale), pk.layers[0].checks,
                         (x, w, residual), pk=pk)
    pk.finalize()
    return pk


def _jitter(dtype, case) -> int:
    return 2 + 10 * CASES.index(case) + DTYPES.index(dtype)    # a different schedule per case


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}x{c[1]}->{c[2]}-grid{c[3][0]}x{c[3][1]}")
def test_linear_with_residual(dtype, case, tmp_path):
    run_case(dtype, *case, jitter=_jitter(dtype, case), output_dir=str(tmp_path))


if __name__ == "__main__":
    testing.run_cases_as_script("linear_with_residual", run_case, DTYPES, CASES, _jitter)
