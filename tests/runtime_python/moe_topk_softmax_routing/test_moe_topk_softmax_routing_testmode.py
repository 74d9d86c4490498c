"""moe_topk_softmax_routing_layer in test mode: real generated code, several workers, schedule jitter.

The layer's one task (grid (1, 1, 1): it routes the whole batch, as MPK's kernel) on several workers
with jittered schedules; its three outputs start as garbage (77), so an unwritten element fails.
routing_indices and masks are compared exactly with the reference (torch.softmax + a stable sort), the
fp32 weights within the kernel test's tol_normalization budget (weight_tol). Cases: one token (a
one-row tile), a non-power-of-two batch of 7 with ties and topk 8 of 64, a batch of 12 over 128
experts with topk 2 where every other token favours one expert and most experts receive none.

Run: python tests/runtime_python/moe_topk_softmax_routing/test_moe_topk_softmax_routing_testmode.py
     python -m pytest tests/runtime_python/moe_topk_softmax_routing/
     mpirun -n 4 python \
         tests/runtime_python/moe_topk_softmax_routing/test_moe_topk_softmax_routing_testmode.py
     (one 4-rank job: the layer is replicated (its module's TP), so every rank runs every case on
     the same full logits and the outputs must be bit-identical across ranks; run_cases_as_script)
"""

import os

import pytest
import torch

from mirage.mpk import testing

ref = testing.load_reference(__file__)
moe = testing.load_reference(os.path.join(os.path.dirname(__file__), "../test_mode/x.py"), name="moe_inputs")
kernel_test = testing.load_reference(__file__, "test_moe_topk_softmax_routing")

DTYPES = [torch.bfloat16, torch.float32]
# (batch, experts, topk, planted kinds)
CASES = [
    (1, 8, 1, ("tie",)),
    (7, 64, 8, ("tie", "tie_lane", "all_equal", "random")),
    (12, 128, 2, ("favour", "random")),
]


def run_case(dtype, batch, experts, topk, kinds, jitter=0, output_dir=None, world=testing.ONE_RANK):
    x = ref.logits(batch, experts, dtype, testing.generator(offset=batch * 100 + experts), kinds)
    w, ri, m = moe.routing_outputs(batch, experts, topk, fill=77)
    pk = moe.graph(testing.cpu_config(jitter_seed=jitter, **world.params),
                   lambda pk, t: pk.moe_topk_softmax_routing_layer(
                       input=t["logits"], output=(t["topk_weight"], t["routing_indices"], t["masks"]),
                       grid_dim=(1, 1, 1), block_dim=(128, 1, 1)),
                   {"logits": x, "topk_weight": w, "routing_indices": ri, "masks": m}, output_dir)
    pk()
    pk.finalize()
    name = f"moe_topk_softmax_routing[{str(dtype)[6:]},{batch}x{experts},topk={topk}{world.tag}]"
    want_w, want_ri, want_m = ref.moe_topk_softmax_routing(x, topk)
    testing.assert_equal(f"{name}.routing_indices", ri, want_ri)
    testing.assert_equal(f"{name}.masks", m, want_m)
    testing.check_output(f"{name}.topk_weight", w, want_w, kernel_test.weight_tol(topk), pk.layers[0].checks,
                         pk=pk)
    return pk


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}x{c[1]}-top{c[2]}" for c in CASES])
def test_moe_topk_softmax_routing(dtype, case):
    run_case(dtype, *case, jitter=case[0])


if __name__ == "__main__":
    testing.run_cases_as_script("moe_topk_softmax_routing", run_case, DTYPES, CASES)
