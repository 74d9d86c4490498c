"""moe_topk_softmax_routing_layer's kernel alone (csrc/tasks/moe_topk_softmax_routing.cuh;
testing.run_tasks, docs/kernel_tests.md): the one task on one emulated block, everything outside its
tiles poisoned (it writes only its outputs, reads only the logits, independently of its threads' order,
and writes every element of all three outputs).

routing_indices (which expert, which slot: the weights' order) and masks are compared exactly with the
reference (torch.softmax + a stable torch.sort), the weights within tol_normalization (WEIGHT_TOL's
derivation). Cases: one token; topk 1, 2 and 8; 8, 64 and 128 experts; more rows than warps; ties on
two lanes, within one lane's scan and an all-equal row (the lower expert first); every token to one
expert (the others receive none); strided views of all four tensors; both worker blocks. A negative
control: the kernel with ties to the higher expert fails the tie rows.
Run: python tests/runtime_python/moe_topk_softmax_routing/test_moe_topk_softmax_routing.py   (or pytest)
"""
import os
import sys

import pytest
import torch

from mirage.mpk import testing

ref = testing.load_reference(__file__)
moe = testing.load_reference(os.path.join(os.path.dirname(__file__), "../test_mode/x.py"), name="moe_inputs")

TARGETS = [80, 90]       # the worker block: 128 threads (sm_80), 256 (sm_90a / sm_100a)
# (batch, experts, topk, planted kinds)
SHAPES = [
    (1, 8, 1, ("random",)),                                  # one token, topk 1
    (6, 8, 1, ("favour",)),                                  # every token to expert 2, the rest none
    (9, 64, 8, ("tie", "tie_lane", "all_equal", "random")),  # topk 8; 9 rows > the warps
    (5, 128, 2, ("tie", "random")),                          # 128 experts, most receive no token
]
CASES = [(torch.bfloat16, *s, 90) for s in SHAPES] + [(torch.float32, *s, 80) for s in SHAPES] + \
    [(torch.float16, *SHAPES[2], 80)]
QUICK = CASES[2]
TIES_TO_HIGHER = ("(oa == ob && static_cast<uint32_t>(a) < static_cast<uint32_t>(b))",
                  "(oa == ob && static_cast<uint32_t>(a) > static_cast<uint32_t>(b))")

block_dim = testing.worker_block_dim


def weight_tol(topk: int):
    """The weights are fp32 whatever the logits: K exps of (x - x_top) (at most 2 ulps each, and up
    to |x - x_top| <= 8 more where an fp32 difference rounds), a K-term sum under a division (power 1),
    one reciprocal and one product: tol_normalization(float32, K, power=1, ops=16)."""
    return testing.tol_normalization(torch.float32, topk, power=1, ops=16)


def outputs(batch, experts, topk):
    return dict(zip(("w", "ri", "m"), moe.routing_outputs(batch, experts, topk)))


def run_kernel(x, topk, target_cc, out=None, label=""):
    batch, experts = x.shape
    out = outputs(batch, experts, topk) if out is None else out
    run = testing.run_tasks(
        lambda pk, t: pk.moe_topk_softmax_routing_layer(input=t["x"], output=(t["w"], t["ri"], t["m"]),
                                                        grid_dim=(1, 1, 1), block_dim=block_dim(target_cc)),
        {"x": x, **out}, target_cc=target_cc)
    w, ri, m = ref.moe_topk_softmax_routing(x, topk)
    name = f"{run.layer.name}[kernel,{str(x.dtype)[6:]},{batch}x{experts},topk={topk},cc={target_cc}{label}]"
    testing.assert_equal(f"{name}.routing_indices", out["ri"], ri)
    testing.assert_equal(f"{name}.masks", out["m"], m)
    run.check("w", w, weight_tol(topk))
    return out


@pytest.mark.parametrize("dtype,batch,experts,topk,kinds,target_cc", testing.case_params(CASES, quick=QUICK))
def test_kernel(dtype, batch, experts, topk, kinds, target_cc):
    x = ref.logits(batch, experts, dtype, testing.generator(offset=batch * 100 + experts), kinds)
    out = run_kernel(x, topk, target_cc)
    if "favour" in kinds:       # all tokens to one expert: one activated expert
        assert out["m"].tolist() == [experts // 3] + [-1] * (experts - 1) + [1]


@pytest.mark.parametrize("target_cc", TARGETS)
def test_kernel_strided(target_cc):
    """Every tensor a view with strides of its own (x a column block of a wider matrix, w a column
    block, routing_indices columns of a wider matrix, masks every other element): a kernel taking one
    tensor's strides for another's fails; the elements between are left alone."""
    gen = testing.generator(offset=3)
    wide = testing.randn((7, 3 * 64), torch.float32, gen)
    x = wide[:, 64:128]
    for b in range(7):
        ref.plant(x[b], ("tie", "tie_lane", "random")[b % 3])
    w, ri, m = torch.zeros(7, 12), torch.zeros(64, 14, dtype=torch.int32), torch.zeros(130, dtype=torch.int32)
    run_kernel(x, 4, target_cc, {"w": w[:, 4:8], "ri": ri[:, 7:], "m": m[::2]}, label=",strided")
    assert bool((w[:, :4] == 0).all() and (w[:, 8:] == 0).all() and (ri[:, :7] == 0).all()
                and (m[1::2] == 0).all())


def test_ties_to_the_higher_expert_fail(tmp_path):
    """Negative control: routing_beats preferring the higher expert on equal scores fails the tie rows."""
    x = ref.logits(3, 64, torch.bfloat16, testing.generator(offset=4), ("tie", "tie_lane", "all_equal"))
    with testing.mutated_kernel(tmp_path, "moe_topk_softmax_routing.cuh", *TIES_TO_HIGHER):
        with pytest.raises(AssertionError, match=r"routing_indices' is not equal"):
            run_kernel(x, 4, 80)
    testing.say("CONTROL moe_topk_softmax_routing: ties to the higher expert fail the tie rows PASS")


def test_refuses_bad_arguments():
    """Shapes, dtypes, topk and grids are checked in Python, naming layer, tensor and sizes."""
    from mirage.mpk.persistent_kernel import PersistentKernel

    pk = PersistentKernel(test_mode=True)
    a = lambda t, n: pk.attach_input(t, name=n)     # noqa: E731
    x, w, ri, m = a(torch.zeros(4, 8), "x"), a(torch.zeros(4, 2), "w"), \
        a(torch.zeros(8, 4, dtype=torch.int32), "ri"), a(torch.zeros(9, dtype=torch.int32), "m")
    cases = [
        (dict(input=a(torch.zeros(4, 8, 1), "x3")),
         r"tensor 'x3' \(input\) must be 2-D, got shape \(4, 8, 1\)"),
        (dict(input=a(torch.zeros(4, 8, dtype=torch.int32), "xi")), r"tensor 'xi' \(input\) has dtype int32"),
        (dict(output=(a(torch.zeros(4, 9), "w9"), ri, m)),
         r"tensor 'w9' \(topk_weight\) has topk=9 columns; it must be 1 to num_experts=8"),
        (dict(output=(a(torch.zeros(4, 2, dtype=torch.bfloat16), "wb"), ri, m)),
         r"tensor 'wb' \(topk_weight\) has dtype bfloat16, expected float32"),
        (dict(output=(w, a(torch.zeros(4, 8, dtype=torch.int32), "rit"), m)),
         r"tensor 'rit' \(routing_indices\) dim 0 is 4, expected 8"),
        (dict(output=(w, ri, a(torch.zeros(8, dtype=torch.int32), "m8"))),
         r"tensor 'm8' \(masks\) dim 0 is 8"),
        (dict(output=(w, ri)), r"output must be \(topk_weight, routing_indices, masks\)"),
        (dict(grid_dim=(2, 1, 1)),
         r"moe_topk_softmax_routing routes the whole batch in one task .*grid_dim must be \(1, 1, 1\); "
         r"got \(2, 1, 1\)"),
    ]
    for change, message in cases:
        kw = {**dict(input=x, output=(w, ri, m), grid_dim=(1, 1, 1), block_dim=(128, 1, 1)), **change}
        with pytest.raises(ValueError, match=f"layer 'moe_topk_softmax_routing_0': {message}"):
            pk.moe_topk_softmax_routing_layer(**kw)
    testing.say(f"BAD_INPUT moe_topk_softmax_routing_layer: {len(cases)} bad calls refused, each naming "
                f"layer, tensor and sizes PASS")
    pk.finalize()


if __name__ == "__main__":
    testing.run_pytest_file_as_script(__file__, sys.argv[1:])
