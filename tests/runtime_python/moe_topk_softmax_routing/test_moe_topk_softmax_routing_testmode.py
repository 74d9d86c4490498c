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

import pytest
import torch

from mirage.mpk import testing
from mirage.mpk.persistent_kernel import PersistentKernel

ref = testing.load_reference(__file__)
kernel_test = testing.load_reference(__file__, "test_moe_topk_softmax_routing")

DTYPES = [torch.bfloat16, torch.float32]
# (batch, experts, topk, planted kinds)
CASES = [
    (1, 8, 1, ("tie",)),
    (7, 64, 8, ("tie", "tie_lane", "all_equal", "random")),
    (12, 128, 2, ("favour", "random")),
]


def run_case(dtype, batch, experts, topk, kinds, jitter=0, output_dir=None, world=testing.ONE_RANK):
    gen = testing.generator(offset=batch * 100 + experts)
    pk = PersistentKernel(**testing.cpu_config(jitter_seed=jitter, **world.params))
    x = ref.logits(batch, experts, dtype, gen, kinds)
    w = torch.full((batch, topk), 77.0)
    ri = torch.full((experts, batch), 77, dtype=torch.int32)
    m = torch.full((experts + 1,), 77, dtype=torch.int32)
    dts = [pk.attach_input(t, name=n) for t, n in ((x, "logits"), (w, "topk_weight"), (ri, "routing_indices"),
                                                      (m, "masks"))]
    pk.moe_topk_softmax_routing_layer(input=dts[0], output=tuple(dts[1:]), grid_dim=(1, 1, 1),
                                      block_dim=(128, 1, 1))
    pk.compile(output_dir=output_dir)
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
