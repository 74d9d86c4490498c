"""silu_mul_layer in test mode: per tile [gate | up] -> silu(gate) * up, several workers, jitter.

Run: python tests/runtime_python/silu_mul/test_silu_mul_testmode.py   (or pytest this file)
     mpirun -n 4 python tests/runtime_python/silu_mul/test_silu_mul_testmode.py
     (one 4-rank job: silu_mul on a whole activation is replicated (layers/silu_mul.py TP), so
     every rank runs every case on the same full inputs and its outputs must be bit-identical
     across ranks; testing.run_cases_as_script)
"""

import pytest
import torch

from mirage.mpk import testing
from mirage.mpk.persistent_kernel import PersistentKernel

ref = testing.load_reference(__file__)

DTYPES = [torch.bfloat16, torch.float16, torch.float32]
# (batch, intermediate I, (g = grid.x, grid.y)): input [batch, 2I]; grid.x = g splits the columns
# into g tiles [gate (I/g) | up (I/g)], grid.y splits rows
CASES = [
    (8, 96, (6, 1)),            # non-power-of-two g: 6 tiles of width 2 x 16
    (6, 64, (4, 3)),            # 2-D grid, 3 row tiles of 2 rows
    (1, 5, (5, 1)),             # one-row tiles of one output column ([gate | up] = 2 columns)
    (4, 12, (3, 4)),            # one-row tiles, odd g
    (8, 4096, (32, 2)),         # MPK-like tile width (m = 128)
]


def run_case(dtype, batch, inter, grid, jitter, output_dir=None, world=testing.ONE_RANK):
    gen = testing.generator(offset=batch * 100003 + inter * 17 + grid[0])
    pk = PersistentKernel(**testing.cpu_config(jitter_seed=jitter, **world.params))
    x = testing.randn((batch, 2 * inter), dtype, gen, scale=2.0)   # gate values well into silu's tails
    out = torch.zeros(batch, inter, dtype=dtype)
    x_dt, out_dt = pk.attach_input(x, name="x"), pk.attach_input(out, name="out")
    pk.silu_mul_layer(input=x_dt, output=out_dt, grid_dim=(grid[0], grid[1], 1), block_dim=(128, 1, 1))
    pk.compile(output_dir=output_dir)
    pk()
    expected = ref.silu_mul(x, groups=pk.layers[0].grid[0])
    name = f"silu_mul[{str(dtype)[6:]},{batch}x{2 * inter}->{inter},grid={grid},jitter={jitter}{world.tag}]"
    testing.check_output(name, out, expected, testing.tol_elementwise(dtype), pk.layers[0].checks, (x,),
                         pk=pk)
    pk.finalize()
    return pk


def _jitter(dtype, case) -> int:
    return 3 + 10 * CASES.index(case) + DTYPES.index(dtype)    # a different schedule per case


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}x{2 * c[1]}-grid{c[2][0]}x{c[2][1]}")
def test_silu_mul(dtype, case, tmp_path):
    run_case(dtype, *case, jitter=_jitter(dtype, case), output_dir=str(tmp_path))


def test_reference_depends_on_groups():
    """The grid's g is part of the maths: g = 1 pairs different columns than g = 4."""
    x = testing.randn((2, 16), torch.float32, testing.generator(offset=5))
    assert not torch.allclose(ref.silu_mul(x, 4), ref.silu_mul(x, 1))
    gate, up = x.double()[:, :8], x.double()[:, 8:]
    assert torch.equal(ref.silu_mul(x, 1), gate / (1 + torch.exp(-gate)) * up)


if __name__ == "__main__":
    testing.run_cases_as_script("silu_mul", run_case, DTYPES, CASES, _jitter,
                                extra=[test_reference_depends_on_groups])
