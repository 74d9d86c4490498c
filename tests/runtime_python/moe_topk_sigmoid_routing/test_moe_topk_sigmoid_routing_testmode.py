"""moe_topk_sigmoid_routing_layer in test mode: real generated code, several workers, schedule jitter.

The layer's one task (grid (1, 1, 1): it routes the whole batch, as MPK's kernel) on several workers
with jittered schedules; its three outputs start as garbage (77), so an unwritten element fails.
routing_indices and masks are compared exactly with the reference (fp32 scores, stable sorts), the
fp32 weights within the kernel test's budget (weight_tol). Cases: one token (a one-row tile) with 4
groups of 2; a non-power-of-two batch of 7 with ties (zero bias) and topk 8 of 64; a batch of 12 over
DeepSeek-V3's 256 experts in 8 groups, 4 kept, where a favoured expert takes every token's first slot.
SCALAR_CASES: routed_scaling_factor moves every weight (a kernel that ignored it would scale by 1).

Run: python tests/runtime_python/moe_topk_sigmoid_routing/test_moe_topk_sigmoid_routing_testmode.py
     python -m pytest tests/runtime_python/moe_topk_sigmoid_routing/
     mpirun -n 4 python \\
         tests/runtime_python/moe_topk_sigmoid_routing/test_moe_topk_sigmoid_routing_testmode.py
     (one 4-rank job: the layer is replicated (its module's TP), so every rank runs every case on
     the same full logits and the outputs must be bit-identical across ranks; run_cases_as_script)
"""

import os

import pytest
import torch

from mirage.mpk import testing

ref = testing.load_reference(__file__)
moe = testing.load_reference(os.path.join(os.path.dirname(__file__), "../test_mode/x.py"), name="moe_inputs")
kernel_test = testing.load_reference(__file__, "test_moe_topk_sigmoid_routing")

DTYPES = [torch.bfloat16, torch.float32]
# (batch, experts, topk, num_groups, topk_group, planted kinds, bias kind)
CASES = [
    (1, 8, 2, 4, 2, ("tie",), "zero"),
    (7, 64, 8, 8, 4, ("tie", "tie_lane", "all_equal", "random"), "zero"),
    (12, 256, 8, 8, 4, ("favour", "random"), "favour"),
]
SCALAR_CASES = [
    (torch.bfloat16, CASES[1], {"routed_scaling_factor": 1.7}),
    (torch.float32, CASES[0], {"routed_scaling_factor": 0.5}),
]


def run_case(dtype, batch, experts, topk, num_groups, topk_group, kinds, bias_kind, routed_scaling_factor=2.5,
             jitter=0, output_dir=None, scalars_required=False, world=testing.ONE_RANK):
    gen = testing.generator(offset=batch * 100 + experts)
    x = ref.logits(batch, experts, dtype, gen, kinds)
    bias = ref.make_bias(experts, bias_kind, gen)
    w, ri, m = moe.routing_outputs(batch, experts, topk, fill=77)

    def layer(pk, t):
        pk.moe_topk_sigmoid_routing_layer(input=t["logits"], bias=t["bias"],
                                          output=(t["topk_weight"], t["routing_indices"], t["masks"]),
                                          grid_dim=(1, 1, 1), block_dim=(128, 1, 1), num_groups=num_groups,
                                          topk_group=topk_group, routed_scaling_factor=routed_scaling_factor)

    pk = moe.graph(testing.cpu_config(jitter_seed=jitter, **world.params), layer,
                   {"logits": x, "bias": bias, "topk_weight": w, "routing_indices": ri, "masks": m},
                   output_dir)
    pk()
    pk.finalize()
    name = (f"moe_topk_sigmoid_routing[{str(dtype)[6:]},{batch}x{experts},topk={topk},groups={num_groups}/"
            f"{topk_group},scale={routed_scaling_factor:g}{world.tag}]")
    groups = (num_groups, topk_group)
    want_w, want_ri, want_m = ref.moe_topk_sigmoid_routing(x, bias, topk, *groups, routed_scaling_factor)
    testing.assert_equal(f"{name}.routing_indices", ri, want_ri)
    testing.assert_equal(f"{name}.masks", m, want_m)
    tol = kernel_test.weight_tol(topk)
    reference = lambda **p: ref.moe_topk_sigmoid_routing(x, bias, topk, *groups, **p)[0]   # noqa: E731
    testing.check_output(f"{name}.topk_weight", w, want_w, tol, pk.layers[0].checks, pk=pk,
                         reference_fn=reference)
    testing.check_scalars(name, pk.layers[0], reference, want_w, tol, required=scalars_required)
    return pk


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}x{c[1]}-top{c[2]}" for c in CASES])
def test_moe_topk_sigmoid_routing(dtype, case):
    run_case(dtype, *case, jitter=case[0])


@pytest.mark.parametrize("dtype,case,params", SCALAR_CASES,
                         ids=[f"{str(d)[6:]}-{c[0]}x{c[1]}-{p}" for d, c, p in SCALAR_CASES])
def test_moe_topk_sigmoid_routing_scalar_parameters(dtype, case, params):
    run_case(dtype, *case, jitter=case[0], scalars_required=True, **params)


if __name__ == "__main__":
    testing.run_cases_as_script("moe_topk_sigmoid_routing", run_case, DTYPES, CASES,
                                scalar_cases=SCALAR_CASES)
