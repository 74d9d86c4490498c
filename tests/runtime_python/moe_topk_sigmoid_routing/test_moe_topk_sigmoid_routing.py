"""moe_topk_sigmoid_routing_layer's kernel alone (csrc/tasks/moe_topk_sigmoid_routing.cuh;
testing.run_tasks, docs/kernel_tests.md): the one task on one emulated block, everything outside its
tiles poisoned (it writes only its outputs, reads only the logits and the bias, independently of its
threads' order, and writes every element of all three outputs).

routing_indices (which expert, which slot: the weights' order) and masks are compared exactly with the
reference (fp32 scores, stable sorts for the groups and the experts), the weights within WEIGHT_TOL's
budget. Cases: one token; topk 1, 2 and 8; 8, 64, 128 and 256 experts (DeepSeek-V3's 8 groups, 4
kept); ties (zero bias: equal logits, within a lane's scan, all equal: the lower group and expert
first); every token to one expert (a favoured bias); a case where the groups change the choice; strided
views of all five tensors; both worker blocks. Negative controls: ties to the higher expert, and the
group restriction dropped, fail.
Run: python tests/runtime_python/moe_topk_sigmoid_routing/test_moe_topk_sigmoid_routing.py   (or pytest)
"""
import os
import sys

import pytest
import torch

from mirage.mpk import testing

ref = testing.load_reference(__file__)
moe = testing.load_reference(os.path.join(os.path.dirname(__file__), "../test_mode/x.py"), name="moe_inputs")

TARGETS = [80, 90]       # the worker block: 128 threads (sm_80), 256 (sm_90a / sm_100a)
# (batch, experts, topk, num_groups, topk_group, planted kinds, bias kind)
SHAPES = [
    (1, 8, 1, 4, 2, ("random",), "random"),                              # one token, topk 1
    (6, 8, 2, 2, 1, ("favour",), "favour"),                              # every token's first: expert 2
    (9, 64, 8, 8, 4, ("tie", "tie_lane", "all_equal", "random"), "zero"),  # ties; 9 rows > the warps
    (5, 256, 8, 8, 4, ("random",), "random"),                            # DeepSeek-V3's shape
]
# fp16 logits: the softmax router's kernel test (the same to_float loads; each dtype costs a build)
CASES = [(torch.bfloat16, *s, 90) for s in SHAPES] + [(torch.float32, *s, 80) for s in SHAPES]
QUICK = CASES[2]
TIES_TO_HIGHER = ("(oa == ob && static_cast<uint32_t>(a) < static_cast<uint32_t>(b))",
                  "(oa == ob && static_cast<uint32_t>(a) > static_cast<uint32_t>(b))")
NO_GROUPS = ("return ((kept >> (c / per_group)) & 1u) != 0;", "return kept != 0 || true;")

block_dim = testing.worker_block_dim


def weight_tol(topk: int):
    """The weights are fp32 whatever the logits. Each s = 1 / (1 + exp(-x)) from an exact fp32 x: the
    exp's relative error (2 ulps) enters s multiplied by 1 - s <= 1, plus the add and the division
    (2 more); the K-term sum of positive s enters under a division (power 1, K ops); then the
    reciprocal, the product by the scale and the product by s (3): tol_normalization(float32, K,
    power=1, ops=8), relative to the weight, so the same for every routed_scaling_factor."""
    return testing.tol_normalization(torch.float32, topk, power=1, ops=8)


def outputs(batch, experts, topk):
    return dict(zip(("w", "ri", "m"), moe.routing_outputs(batch, experts, topk)))


def run_kernel(x, bias, topk, groups, target_cc, out=None, label="", scale=2.5):
    batch, experts = x.shape
    out = outputs(batch, experts, topk) if out is None else out
    run = testing.run_tasks(
        lambda pk, t: pk.moe_topk_sigmoid_routing_layer(
            input=t["x"], bias=t["bias"], output=(t["w"], t["ri"], t["m"]), grid_dim=(1, 1, 1),
            block_dim=block_dim(target_cc), num_groups=groups[0], topk_group=groups[1],
            routed_scaling_factor=scale),
        {"x": x, "bias": bias, **out}, target_cc=target_cc)
    w, ri, m = ref.moe_topk_sigmoid_routing(x, bias, topk, *groups, routed_scaling_factor=scale)
    name = (f"{run.layer.name}[kernel,{str(x.dtype)[6:]},{batch}x{experts},topk={topk},groups={groups},"
            f"cc={target_cc}{label}]")
    testing.assert_equal(f"{name}.routing_indices", out["ri"], ri)
    testing.assert_equal(f"{name}.masks", out["m"], m)
    run.check("w", w, weight_tol(topk))
    return out


def case_inputs(dtype, batch, experts, kinds, bias_kind):
    gen = testing.generator(offset=batch * 100 + experts)
    return ref.logits(batch, experts, dtype, gen, kinds), ref.make_bias(experts, bias_kind, gen)


@pytest.mark.parametrize("dtype,batch,experts,topk,num_groups,topk_group,kinds,bias_kind,target_cc",
                         testing.case_params(CASES, quick=QUICK))
def test_kernel(dtype, batch, experts, topk, num_groups, topk_group, kinds, bias_kind, target_cc):
    x, bias = case_inputs(dtype, batch, experts, kinds, bias_kind)
    out = run_kernel(x, bias, topk, (num_groups, topk_group), target_cc)
    if bias_kind == "favour":        # every token's first choice: one expert, in slot 1
        assert out["ri"][experts // 3].tolist() == [1] * batch


def test_groups_change_the_choice():
    """Non-vacuity of the group rule: on the 256-expert case the grouped choice differs from the plain
    top-k of the biased scores (num_groups = topk_group = 1) for most rows."""
    x, bias = case_inputs(torch.bfloat16, *SHAPES[3][:2], *SHAPES[3][5:])
    grouped = ref.selection(x, bias, 8, 8, 4)
    plain = ref.selection(x, bias, 8, 1, 1)
    differ = int((grouped.sort(dim=1).values != plain.sort(dim=1).values).any(dim=1).sum())
    assert differ >= 3, differ
    testing.say(f"NONVACUOUS moe_topk_sigmoid_routing: the groups change {differ}/5 rows' experts PASS")


@pytest.mark.parametrize("target_cc", TARGETS)
def test_kernel_strided(target_cc):
    """Every tensor a view with strides of its own (x a column block of a wider matrix, bias and masks
    every other element, w a column block, routing_indices columns of a wider matrix): a kernel taking
    one tensor's strides for another's fails; the elements between are left alone."""
    gen = testing.generator(offset=3)
    wide = testing.randn((7, 3 * 64), torch.float32, gen)
    x = wide[:, 64:128]
    for b in range(7):
        ref.plant(x[b], ("tie", "tie_lane", "random")[b % 3])
    bias = torch.zeros(128)
    bias[::2] = ref.make_bias(64, "random", gen)
    w, ri, m = torch.zeros(7, 12), torch.zeros(64, 14, dtype=torch.int32), torch.zeros(130, dtype=torch.int32)
    run_kernel(x, bias[::2], 4, (4, 2), target_cc, {"w": w[:, 4:8], "ri": ri[:, 7:], "m": m[::2]},
               label=",strided")
    assert bool((w[:, :4] == 0).all() and (w[:, 8:] == 0).all() and (ri[:, :7] == 0).all()
                and (m[1::2] == 0).all())


def test_negative_controls(tmp_path):
    """Ties to the higher expert fail the tie rows; the group restriction dropped fails the 256-expert
    case."""
    x, bias = case_inputs(torch.bfloat16, 3, 64, ("tie", "tie_lane", "all_equal"), "zero")
    with testing.mutated_kernel(tmp_path / "ties", "moe_topk_softmax_routing.cuh", *TIES_TO_HIGHER):
        with pytest.raises(AssertionError, match=r"routing_indices' is not equal"):
            run_kernel(x, bias, 4, (8, 4), 80)
    x, bias = case_inputs(torch.bfloat16, *SHAPES[3][:2], *SHAPES[3][5:])
    with testing.mutated_kernel(tmp_path / "groups", "moe_topk_sigmoid_routing.cuh", *NO_GROUPS):
        with pytest.raises(AssertionError, match=r"routing_indices' is not equal"):
            run_kernel(x, bias, 8, (8, 4), 80)
    testing.say("CONTROL moe_topk_sigmoid_routing: ties to the higher expert and no group restriction "
                "fail PASS")


def test_refuses_bad_arguments():
    """Shapes, dtypes, groups, topk and grids are checked in Python, naming layer, tensor and sizes."""
    from mirage.mpk.persistent_kernel import PersistentKernel

    pk = PersistentKernel(test_mode=True)
    a = lambda t, n: pk.attach_input(t, name=n)     # noqa: E731
    x, bias, w, ri, m = a(torch.zeros(4, 16), "x"), a(torch.zeros(16), "bias"), a(torch.zeros(4, 2), "w"), \
        a(torch.zeros(16, 4, dtype=torch.int32), "ri"), a(torch.zeros(17, dtype=torch.int32), "m")
    cases = [
        (dict(input=a(torch.zeros(4, 16, dtype=torch.int32), "xi")),
         r"tensor 'xi' \(input\) has dtype int32"),
        (dict(bias=a(torch.zeros(16, dtype=torch.bfloat16), "bb")),
         r"tensor 'bb' \(bias\) has dtype bfloat16, expected float32"),
        (dict(bias=a(torch.zeros(8), "b8")), r"tensor 'b8' \(bias\) dim 0 is 8, expected 16"),
        (dict(output=(a(torch.zeros(4, 17), "w17"), ri, m)),
         r"tensor 'w17' \(topk_weight\) has topk=17 columns; it must be 1 to num_experts=16"),
        (dict(num_groups=3), r"num_groups=3 must divide num_experts=16"),
        (dict(num_groups=16), r"num_groups=16 must divide num_experts=16 .* groups of at least 2 experts"),
        (dict(topk_group=9), r"topk_group=9 is more than num_groups=8"),
        (dict(output=(a(torch.zeros(4, 3), "w3"), ri, m), topk_group=1),
         r"tensor 'w3' \(topk_weight\) has topk=3 columns, more than the 2 experts of topk_group=1 groups"),
        (dict(routed_scaling_factor=float("nan")), r"routed_scaling_factor must be a finite number"),
        (dict(grid_dim=(3, 1, 1)), r"moe_topk_sigmoid_routing routes the whole batch in one task .*"
                                   r"grid_dim must be \(1, 1, 1\); got \(3, 1, 1\)"),
    ]
    for change, message in cases:
        kw = {**dict(input=x, bias=bias, output=(w, ri, m), grid_dim=(1, 1, 1), block_dim=(128, 1, 1)),
              **change}
        with pytest.raises(ValueError, match=f"layer 'moe_topk_sigmoid_routing_0': {message}"):
            pk.moe_topk_sigmoid_routing_layer(**kw)
    testing.say(f"BAD_INPUT moe_topk_sigmoid_routing_layer: {len(cases)} bad calls refused, each naming "
                f"layer, tensor and sizes PASS")
    pk.finalize()


if __name__ == "__main__":
    testing.run_pytest_file_as_script(__file__, sys.argv[1:])
