"""moe_w13_linear_layer in test mode: real generated code, several workers, schedule jitter.

Cases: one token; experts that receive no token (64 and 128 experts, few tokens); every token to one
expert (the other slots unclaimed); topk 1, 2 and 8; 8, 64 and 128 experts; an expert stride (grid.x) of
1 and of 3 and 5 with more activated experts than the stride; non-power-of-two column splits (grid.y 3,
5) and one-column tiles; a slot no expert claims. Every output (token, slot) the routing assigns is
compared with the float64 reference under testing.tol_linear (K fp32 terms); one that no expert claims
must still hold test mode's poison (nothing writes it; the unwritten-element check requires only the
claimed ones: Layer.live).

Run: python tests/runtime_python/moe_w13_linear/test_moe_w13_linear_testmode.py   (or pytest this file)
     mpirun -n 4 python tests/runtime_python/moe_w13_linear/test_moe_w13_linear_testmode.py
     (one 4-rank job: the layer is column-parallel (layers/moe_w13_linear.py TP): every rank draws the
     same unsharded tensors, keeps rows [r*N/W, (r+1)*N/W) of every expert's weight and computes those
     columns of the output; the routing is whole on every rank; testing.run_cases_as_script)
"""

import os

import pytest
import torch

from mirage.mpk import testing
from mirage.mpk.layers.moe_w13_linear import moe_grid

ref = testing.load_reference(__file__)
moe = testing.load_reference(os.path.join(os.path.dirname(__file__), "../test_mode/x.py"), name="moe_inputs")

DTYPES = [torch.bfloat16, torch.float16, torch.float32]
# (batch, K, N, experts, topk, routing kind, (column tiles = grid.y, expert stride = grid.x))
CASES = [
    (1, 64, 48, 8, 2, "topk", (3, 1)),        # one token, 6 of 8 experts without one; stride 1
    (6, 96, 40, 8, 8, "topk", (5, 3)),        # topk 8 of 8 experts: 8 activated over a stride of 3
    (5, 128, 12, 64, 1, "one", (12, 2)),      # every token to one expert, topk 1; one-column tiles
    (8, 72, 24, 128, 8, "topk", (3, 5)),      # 128 experts, ~50 activated over a stride of 5
    (3, 40, 16, 8, 2, "hole", (2, 3)),        # token 0's second slot claimed by no expert
    (16, 64, 32, 8, 2, "topk", (4, 3)),       # 16 tokens: bf16 / fp16 on the tensor cores
]


def run_case(dtype, batch, k, n, experts, topk, kind, grid, jitter=0, output_dir=None,
             world=testing.ONE_RANK):
    x, w_full, routing, mask = moe.routed_inputs(dtype, (batch,), k, n, experts, topk, kind)
    w = world.shard("weight", w_full)
    cols = max(g for g in range(1, grid[0] + 1) if w.shape[1] % g == 0)       # divides the local N
    out = torch.zeros(batch, topk, w.shape[1], dtype=dtype)
    pk = moe.graph(testing.cpu_config(jitter_seed=jitter, **world.params),
                   moe.expert_linear("moe_w13_linear", moe_grid(cols, grid[1])),
                   {"x": x, "w": w, "routing": routing, "mask": mask, "out": out}, output_dir)
    pk()
    pk.finalize()
    full, claimed = ref.moe_w13_linear(x, w_full, routing, topk)
    expected = world.shard("output", full)
    scale = ref.moe_w13_linear(x.abs(), w.abs(), routing, topk)[0]        # sum_k |x w| per output
    name = (f"moe_w13_linear[{str(dtype)[6:]},{batch}x{k}->{n},E={experts},topk={topk},{kind},"
            f"grid={moe_grid(cols, grid[1])},jitter={jitter}{world.tag}]")
    tol = testing.tol_linear(dtype, k, scale, tensor_cores=pk.layers[0].params["tensor_cores"])
    moe.check_claimed(name, pk, out, expected, claimed, tol, (x, w))
    return pk


def _jitter(dtype, case) -> int:
    return 1 + 10 * CASES.index(case) + DTYPES.index(dtype)    # a different schedule per case


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}x{c[1]}->{c[2]}-E{c[3]}-top{c[4]}-{c[5]}-"
                                                      f"cols{c[6][0]}-stride{c[6][1]}")
def test_moe_w13_linear(dtype, case, tmp_path):
    run_case(dtype, *case, jitter=_jitter(dtype, case), output_dir=str(tmp_path))


@pytest.mark.parametrize("spoil,message", moe.BAD_ROUTING, ids=[b[0] for b in moe.BAD_ROUTING])
def test_moe_w13_linear_bad_routing(spoil, message, tmp_path):
    """Routing the kernel cannot follow (a mask count above num_experts, an expert id num_experts, a slot
    above topk) fails the task by name, and no access leaves a tensor (moe.bad_routing_fails)."""
    moe.bad_routing_fails("moe_w13_linear", (3, 64), spoil, message, str(tmp_path))


if __name__ == "__main__":
    testing.run_cases_as_script("moe_w13_linear", run_case, DTYPES, CASES, _jitter)
