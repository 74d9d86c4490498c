"""moe_silu_mul_layer in test mode: per (token, slot) row [gate | up] -> silu(gate) * up, real generated
code, several workers, schedule jitter.

Run: python tests/runtime_python/moe_silu_mul/test_moe_silu_mul_testmode.py   (or pytest this file)
     mpirun -n 4 python tests/runtime_python/moe_silu_mul/test_moe_silu_mul_testmode.py
     (one 4-rank job: the layer is replicated (layers/moe_silu_mul.py TP), so every rank runs every
     case on the same full inputs and its outputs must be bit-identical across ranks;
     testing.run_cases_as_script)
"""

import os

import pytest
import torch

from mirage.mpk import testing

ref = testing.load_reference(__file__)
moe = testing.load_reference(os.path.join(os.path.dirname(__file__), "../test_mode/x.py"), name="moe_inputs")

DTYPES = [torch.bfloat16, torch.float16, torch.float32]
# (batch, topk, intermediate I, (grid.x, grid.y)): input [batch, topk, 2I]; grid.x splits batch, grid.y topk
CASES = [
    (1, 1, 64, (1, 1)),          # one token, one slot: one task
    (6, 2, 96, (3, 2)),          # non-power-of-two split of batch (3 tiles of 2 tokens)
    (2, 6, 32, (2, 3)),          # non-power-of-two split of topk (3 tiles of 2 slots)
    (4, 8, 24, (4, 8)),          # topk 8, one-row tiles (32 tasks)
]


def run_case(dtype, batch, topk, inter, grid, jitter, output_dir=None, world=testing.ONE_RANK):
    gen = testing.generator(offset=batch * 1009 + topk * 101 + inter)
    x = testing.randn((batch, topk, 2 * inter), dtype, gen, scale=2.0)   # gates into silu's curved part
    out = torch.zeros(batch, topk, inter, dtype=dtype)
    pk = moe.graph(testing.cpu_config(jitter_seed=jitter, **world.params),
                   lambda pk, t: pk.moe_silu_mul_layer(input=t["x"], output=t["out"],
                                                       grid_dim=(grid[0], grid[1], 1), block_dim=(128, 1, 1)),
                   {"x": x, "out": out}, output_dir)
    pk()
    name = (f"moe_silu_mul[{str(dtype)[6:]},{batch}x{topk}x{2 * inter}->{inter},grid={grid},"
            f"jitter={jitter}{world.tag}]")
    testing.check_output(name, out, ref.moe_silu_mul(x), testing.tol_elementwise(dtype), pk.layers[0].checks,
                         (x,), pk=pk)
    pk.finalize()
    return pk


def _jitter(dtype, case) -> int:
    return 5 + 10 * CASES.index(case) + DTYPES.index(dtype)    # a different schedule per case


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}x{c[1]}x{2 * c[2]}-grid{c[3][0]}x{c[3][1]}")
def test_moe_silu_mul(dtype, case, tmp_path):
    run_case(dtype, *case, jitter=_jitter(dtype, case), output_dir=str(tmp_path))


def test_reference_pairs_each_rows_halves():
    """The reference's layout is MPK's: per row, gate the first half, up the second."""
    x = testing.randn((2, 3, 8), torch.float32, testing.generator(offset=9))
    gate, up = x.double()[..., :4], x.double()[..., 4:]
    assert torch.allclose(ref.moe_silu_mul(x), gate / (1 + torch.exp(-gate)) * up, rtol=1e-14, atol=0)


if __name__ == "__main__":
    testing.run_cases_as_script("moe_silu_mul", run_case, DTYPES, CASES, _jitter,
                                extra=[test_reference_pairs_each_rows_halves])
