"""moe_w2_fp8: the kernel alone (testing.run_tasks; docs/kernel_tests.md), on moe_w13_fp8.cuh's kernel with
the input row and its scales chosen by the slot (x [B, topk, K]).

The cases, checks and negative controls are moe_w13_fp8's (tests/runtime_python/moe_w13_fp8/
test_moe_w13_fp8.py, which states them), run here with w2=True against this folder's pytorch_reference:
every (token, slot) its own input row, so a kernel that takes the token's row for every slot, or its
scales from the wrong slot, fails; bf16, fp16 and fp32 outputs at 128 and 256 threads, blocks of 64 and
128, the power-of-two scales against the unquantized product, the codes a column block of a wider tensor,
the three negative controls, bad routing and bad shapes.

Run: python tests/runtime_python/moe_w2_fp8/test_moe_w2_fp8.py   (or pytest this file; -k to pick cases)
"""
import os
import sys

import pytest
import torch

from mirage.mpk import testing

ref = testing.load_reference(__file__)
w13 = testing.load_reference(os.path.join(os.path.dirname(__file__), "..", "moe_w13_fp8", "_"),
                             "test_moe_w13_fp8")


@pytest.mark.parametrize("target_cc", w13.TARGETS)
@pytest.mark.parametrize("dtype", w13.DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("batch,k,n,experts,topk,kind,grid,coords,group", w13.SHAPES,
                         ids=lambda c: "x".join(map(str, c)) if isinstance(c, tuple) else str(c))
def test_moe_w2_fp8_kernel(dtype, batch, k, n, experts, topk, kind, grid, coords, group, target_cc):
    d = w13.inputs(batch, k, n, experts, topk, kind, group, w2=True, reference=ref)
    w13.run_kernel(dtype, d, topk, grid, coords, target_cc, w2=True, exact=False, reference=ref)


@pytest.mark.parametrize("group", [64, 128])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=lambda d: str(d)[6:])
def test_moe_w2_fp8_power_of_two_scales_match_the_unquantized_product(dtype, group, capsys):
    d = w13.inputs(6, 256, 40, 8, 2, "topk", group, w2=True, pow2_input=True, reference=ref)
    w13.run_kernel(dtype, d, 2, (5, 3), None, 90, w2=True, exact=True, reference=ref)
    w13.check_note(capsys.readouterr().out, {"moe_w2_fp8_0": {"sx": d["sx"], "sw": d["sw"]}})    # no note


@pytest.mark.quick     # the layer's case in the quick subset and the kernel sanitizer runs
@pytest.mark.parametrize("target_cc", w13.TARGETS)
def test_moe_w2_fp8_kernel_strided(target_cc, capsys):
    # the codes [B, topk, K] a column block of a wider tensor: row stride 3K, not K
    d = w13.inputs(4, 128, 24, 8, 2, "topk", 64, w2=True, x_stride=384, reference=ref)
    w13.run_kernel(torch.bfloat16, d, 2, (3, 3), None, target_cc, w2=True, exact=False, reference=ref)
    # the input scales amax / 448: the evidence line says so (moe_w13_fp8's check_note)
    w13.check_note(capsys.readouterr().out, {"moe_w2_fp8_0": {"sx": d["sx"], "sw": d["sw"]}})


def test_moe_w2_fp8_a_kernel_reading_the_tokens_row_for_every_slot_fails(tmp_path):
    """Negative control of the w2 entry point: the input row (and its scales) of slot 0 for every slot."""
    w13.negative_control(tmp_path, "moe_w13_fp8.cuh", "x_slot = W2 ? xt.strides[1] : 0, xs_slot = W2 ? "
                         "xst.strides[1] : 0;", "x_slot = 0, xs_slot = 0;", AssertionError, w2=True,
                         reference=ref)


@pytest.mark.parametrize("kernel,old,new,error,what", w13.CONTROLS,
                         ids=[c[4].replace(" ", "_") for c in w13.CONTROLS])
def test_moe_w2_fp8_negative_controls(kernel, old, new, error, what, tmp_path):
    w13.negative_control(tmp_path, kernel, old, new, error, w2=True, reference=ref)


@pytest.mark.parametrize("which,message", w13.moe.BAD_ROUTING, ids=[b[0] for b in w13.moe.BAD_ROUTING])
def test_moe_w2_fp8_bad_routing_fails_the_task(which, message):
    w13.bad_routing_fails(which, message, w2=True, reference=ref)


BAD_SHAPES = [
    ({"sx": (3, 2, 3)}, "input_scale 'sx' has 3 scales per row of input_fp8 'qx' \\(3, 2, 256\\)"),
    ({"sx": (3, 1, 2)}, "input_scale 'sx' is \\(3, 1, 2\\), expected \\(3, 2, 2\\)"),
    ({"qx": (3, 256)}, "tensor 'qx' \\(input_fp8\\) must be 3-D"),
    ({"out": (3, 1, 16)}, "output 'out' is \\(3, 1, 16\\), expected \\[batch, topk, out_features\\]"),
]


@pytest.mark.parametrize("change,message", BAD_SHAPES, ids=[str(b[0]) for b in BAD_SHAPES])
def test_moe_w2_fp8_bad_shapes(change, message):
    w13.bad_shape_is_refused(change, message, w2=True)


if __name__ == "__main__":
    testing.run_pytest_file_as_script(__file__, sys.argv[1:])
