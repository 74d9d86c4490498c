"""elementwise_add_layer in test mode: y = a + b (fp32 math), several workers, schedule jitter.

Run: python tests/runtime_python/elementwise_add/test_elementwise_add_testmode.py   (or pytest this file)
     mpirun -n 4 python tests/runtime_python/elementwise_add/test_elementwise_add_testmode.py
     (one 4-rank job: elementwise_add is replicated (layers/elementwise_add.py TP), so every rank runs every
     case on the same full inputs and its outputs must be bit-identical across ranks;
     testing.run_cases_as_script)
"""

import pytest
import torch

from mirage.mpk import testing
from mirage.mpk.persistent_kernel import PersistentKernel

ref = testing.load_reference(__file__)

DTYPES = [torch.bfloat16, torch.float16, torch.float32]
# (batch, hidden, (grid.x, grid.y)): grid.x splits rows, grid.y splits columns
CASES = [
    (8, 96, (8, 1)),            # one-row tiles
    (6, 64, (3, 4)),            # 2-D grid, non-power-of-two row split
    (1, 7, (1, 7)),             # one-column tiles
    (5, 3, (5, 3)),             # 1x1 tiles
    (12, 4096, (6, 2)),         # a real hidden size
]


def run_case(dtype, batch, hidden, grid, jitter, output_dir=None, world=testing.ONE_RANK):
    gen = testing.generator(offset=batch * 100003 + hidden * 31 + grid[1])
    pk = PersistentKernel(**testing.cpu_config(jitter_seed=jitter, **world.params))
    a = testing.randn((batch, hidden), dtype, gen)
    b = testing.randn((batch, hidden), dtype, gen)
    out = torch.zeros(batch, hidden, dtype=dtype)
    a_dt, b_dt = pk.attach_input(a, name="a"), pk.attach_input(b, name="b")
    out_dt = pk.attach_input(out, name="out")
    pk.elementwise_add_layer(input_a=a_dt, input_b=b_dt, output=out_dt, grid_dim=(grid[0], grid[1], 1),
                             block_dim=(128, 1, 1))
    pk.compile(output_dir=output_dir)
    pk()
    expected = ref.elementwise_add(a, b)
    scale = a.double().abs() + b.double().abs()
    name = f"elementwise_add[{str(dtype)[6:]},{batch}x{hidden},grid={grid},jitter={jitter}{world.tag}]"
    testing.check_output(name, out, expected, testing.tol_elementwise(dtype, scale), pk.layers[0].checks,
                         (a, b), pk=pk)
    pk.finalize()
    return pk


def _jitter(dtype, case) -> int:
    return 4 + 10 * CASES.index(case) + DTYPES.index(dtype)    # a different schedule per case


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}x{c[1]}-grid{c[2][0]}x{c[2][1]}")
def test_elementwise_add(dtype, case, tmp_path):
    run_case(dtype, *case, jitter=_jitter(dtype, case), output_dir=str(tmp_path))


if __name__ == "__main__":
    testing.run_cases_as_script("elementwise_add", run_case, DTYPES, CASES, _jitter)
