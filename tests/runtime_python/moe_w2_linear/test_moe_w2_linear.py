"""moe_w2_linear: the kernel alone (testing.run_tasks; docs/kernel_tests.md).

Each task runs by itself on one emulated worker block, everything outside its declared tiles poisoned,
and, the layer's tasks sharing output tiles (Layer.live), outside its live parts: the input rows of its
experts' tokens, its experts' weights, the (token, slot) rows of its experts' tokens. So a task that
handles an expert not its own (ignoring the expert stride), writes the wrong slot or leaves a claimed
element unwritten is a testing.MPKFootprintError naming its grid coordinate. The routing tensors are
whole inputs of every task, loaded as given. Covers, for bf16, fp16 and fp32 at 128 threads (target_cc
80) and 256 (90): every task of expert strides 1, 3 and 5 (more activated experts than the stride)
with non-power-of-two column splits, one-column tiles, topk 1, 2 and 8, 8, 64 and 128 experts, one
token, every token to one expert, a slot no expert claims; the edge tasks of a larger grid; x [B, topk, K]
a column block of a wider tensor (its row stride is not K) and odd K (the scalar path).
Negative controls (on the shared kernel, moe_w13_linear.cuh): a kernel ignoring the expert stride, one
writing slot + 1 instead of the slot; routing the kernel cannot follow (mask count > E, an expert id >= E,
an entry > topk) fails the task by name.

Run: python tests/runtime_python/moe_w2_linear/test_moe_w2_linear.py
     (or pytest this file; -k to pick cases)
"""
import os
import sys

import pytest
import torch

from mirage.mpk import testing

ref = testing.load_reference(__file__)
moe = testing.load_reference(os.path.join(os.path.dirname(__file__), "../test_mode/x.py"), name="moe_inputs")

DTYPES = [torch.bfloat16, torch.float16, torch.float32]
TARGETS = [80, 90]       # the worker block: 128 threads (sm_80), 256 (sm_90a / sm_100a)
# (batch, K, N, experts, topk, routing kind, (column tiles = grid.y, expert stride = grid.x), coords)
SHAPES = [
    (1, 64, 48, 8, 2, "topk", (3, 1), None),        # one token; stride 1
    (6, 96, 40, 8, 8, "topk", (5, 3), None),        # topk 8 of 8: 8 experts over a stride of 3
    (5, 128, 12, 64, 1, "one", (12, 2), None),      # every token to one expert; one-column tiles
    (8, 72, 24, 128, 8, "topk", (3, 5), "edges"),   # 128 experts over a stride of 5: first and last task
    (3, 37, 16, 8, 2, "hole", (2, 3), None),        # odd K (scalar path); a slot no expert claims
    (19, 64, 24, 8, 2, "topk", (3, 3), None),       # 19 tokens: bf16 / fp16 on the tensor cores
]


def inputs(dtype, batch, k, n, experts, topk, kind, x_stride=None):
    return moe.routed_inputs(dtype, (batch, topk), k, n, experts, topk, kind, x_stride)


def run_kernel(dtype, x, w, routing, mask, topk, grid, coords, target_cc):
    return moe.run_expert_kernel("moe_w2_linear", ref.moe_w2_linear, dtype, x, w, routing, mask, topk, grid,
                                 coords, target_cc)


@pytest.mark.parametrize("target_cc", TARGETS)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("batch,k,n,experts,topk,kind,grid,coords", SHAPES,
                         ids=lambda c: "x".join(map(str, c)) if isinstance(c, tuple) else str(c))
def test_moe_w2_linear_kernel(dtype, batch, k, n, experts, topk, kind, grid, coords, target_cc):
    x, w, routing, mask = inputs(dtype, batch, k, n, experts, topk, kind)
    run_kernel(dtype, x, w, routing, mask, topk, grid, coords, target_cc)


@pytest.mark.parametrize("target_cc", TARGETS)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
def test_moe_w2_linear_kernel_strided(dtype, target_cc):
    # x [B, topk, K] a column block of a wider tensor: row stride 3K, not K (a kernel using W's row
    # stride fails)
    x, w, routing, mask = inputs(dtype, 4, 64, 24, 8, 2, "topk", x_stride=192)
    run_kernel(dtype, x, w, routing, mask, 2, (3, 3), None, 90)


@pytest.mark.parametrize("old,new,what", moe.CONTROLS, ids=[c[2].replace(" ", "_") for c in moe.CONTROLS])
def test_moe_w2_linear_negative_controls(old, new, what, tmp_path):
    x, w, routing, mask = inputs(torch.float32, 6, 96, 40, 8, 8, "topk")
    with testing.mutated_kernel(tmp_path, "moe_w13_linear.cuh", old, new):
        with pytest.raises(testing.MPKFootprintError, match="writes outside its declared output tiles"):
            run_kernel(torch.float32, x, w, routing, mask, 8, (5, 3), None, 80)


@pytest.mark.parametrize("spoil,message", moe.BAD_ROUTING, ids=[f"_bad_{b[0]}" for b in moe.BAD_ROUTING])
def test_moe_w2_linear_bad_routing_fails_the_task(spoil, message):
    """Routing the kernel cannot follow fails the task (task_fail) by name, and no access leaves the
    tensors (the footprint checks run first and would name one)."""
    x, w, routing, mask = inputs(torch.bfloat16, 3, 64, 8, 8, 2, "topk")
    moe.spoil(routing, mask, spoil)
    with pytest.raises(Exception, match=message):
        run_kernel(torch.bfloat16, x, w, routing, mask, 2, (2, 1), None, 80)


BAD_SHAPES = [
    ({"routing": (7, 3)}, "moe_routing_indices 'routing' is \\(7, 3\\), expected \\[num_experts, batch\\] = "
                          "\\(8, 3\\)"),
    ({"mask": (8,)}, "moe_mask 'mask' has 8 entries, expected num_experts \\+ 1 = 9"),
    ({"out": (3, 2, 15)}, "output 'out' is \\(3, 2, 15\\), expected \\[batch, topk, out_features\\]"),
    ({"out": (4, 2, 16)}, "output 'out' is \\(4, 2, 16\\)"),
    ({"w": (8, 16, 63)}, "weight 'w' is \\(8, 16, 63\\) but input 'x' is \\(3, 2, 64\\)"),
    ({"x": (3, 64)}, "tensor 'x' \\(input\\) must be 3-D"),
    ({"x": (3, 4, 64)}, "output 'out' is \\(3, 2, 16\\), expected \\[batch, topk, out_features\\] = "
                         "\\(3, 4, 16\\)"),
    ({"grid": (1, 3, 1)}, "dim 1 \\(16\\) is not divisible by grid_dim.y=3"),
    ({"index": torch.int64}, "'routing' \\(moe_routing_indices\\) has dtype int64, expected int32"),
    ({"grid": (2, 2, 2)}, "grid_dim.z must be 1"),
    ({"x": (1025, 2, 64), "routing": (8, 1025), "out": (1025, 2, 16)}, "batch 1025 is over 1024"),
]


@pytest.mark.parametrize("change,message", BAD_SHAPES, ids=[str(b[0]) for b in BAD_SHAPES])
def test_moe_w2_linear_bad_shapes(change, message):
    moe.refuses("moe_w2_linear", change, message, x=(3, 2, 64))


if __name__ == "__main__":
    testing.run_pytest_file_as_script(__file__, sys.argv[1:])
