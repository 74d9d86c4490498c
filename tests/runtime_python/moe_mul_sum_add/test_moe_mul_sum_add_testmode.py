"""moe_mul_sum_add_layer in test mode: out = residual + sum_k w[:, k] * x[:, k], real generated code, several
workers, schedule jitter.

Budget: test_moe_mul_sum_add.py's module doc derives it: testing.tolerance(dtype, k=topk + 1,
scale=sum_k |w_k x_k| + |residual|, ops=2) (topk + 1 fp32 terms, one rounding to the output dtype).
Run: python tests/runtime_python/moe_mul_sum_add/test_moe_mul_sum_add_testmode.py   (or pytest this file)
     mpirun -n 4 python tests/runtime_python/moe_mul_sum_add/test_moe_mul_sum_add_testmode.py
     (one 4-rank job: the layer is replicated (layers/moe_mul_sum_add.py TP), so every rank runs every
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
# (batch, topk, hidden, (grid.x, grid.y)): grid.x splits batch, grid.y hidden
CASES = [
    (1, 1, 64, (1, 1)),          # one token, one slot: one task
    (6, 2, 96, (3, 2)),          # non-power-of-two split of batch (3 tiles of 2 tokens)
    (2, 8, 96, (2, 3)),          # topk 8, non-power-of-two split of hidden (3 tiles of 32)
    (4, 8, 24, (4, 4)),          # one-row tiles (16 tasks)
]


def run_case(dtype, batch, topk, hidden, grid, jitter, output_dir=None, world=testing.ONE_RANK):
    gen = testing.generator(offset=batch * 1009 + topk * 101 + hidden)
    x = testing.randn((batch, topk, hidden), dtype, gen)
    w = moe.slot_weights(batch, topk, gen)            # the routing's weights, some slots 0
    residual = testing.randn((batch, hidden), dtype, gen)
    out = torch.zeros(batch, hidden, dtype=dtype)
    pk = moe.graph(testing.cpu_config(jitter_seed=jitter, **world.params),
                   lambda pk, t: pk.moe_mul_sum_add_layer(input=t["x"], weight=t["w"], residual=t["residual"],
                                                          output=t["out"], grid_dim=(grid[0], grid[1], 1),
                                                          block_dim=(128, 1, 1)),
                   {"x": x, "w": w, "residual": residual, "out": out}, output_dir)
    pk()
    name = f"moe_mul_sum_add[{str(dtype)[6:]},{batch}x{topk}x{hidden},grid={grid},jitter={jitter}{world.tag}]"
    tol = testing.tolerance(dtype, k=topk + 1, scale=ref.scale(x, w, residual), ops=2)
    testing.check_output(name, out, ref.moe_mul_sum_add(x, w, residual), tol, pk.layers[0].checks,
                         (x, w, residual), pk=pk)
    pk.finalize()
    return pk


def _jitter(dtype, case) -> int:
    return 7 + 10 * CASES.index(case) + DTYPES.index(dtype)    # a different schedule per case


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}x{c[1]}x{c[2]}-grid{c[3][0]}x{c[3][1]}")
def test_moe_mul_sum_add(dtype, case, tmp_path):
    run_case(dtype, *case, jitter=_jitter(dtype, case), output_dir=str(tmp_path))


def test_reference_is_the_weighted_sum():
    """The reference against a plain loop over slots (float64)."""
    gen = testing.generator(offset=3)
    x, r = testing.randn((2, 3, 4), torch.float32, gen), testing.randn((2, 4), torch.float32, gen)
    w = torch.rand(2, 3, generator=gen)
    loop = r.double() + sum(w.double()[:, k, None] * x.double()[:, k] for k in range(3))
    assert torch.allclose(ref.moe_mul_sum_add(x, w, r), loop, rtol=1e-14, atol=1e-14)


if __name__ == "__main__":
    testing.run_cases_as_script("moe_mul_sum_add", run_case, DTYPES, CASES, _jitter,
                                extra=[test_reference_is_the_weighted_sum])
