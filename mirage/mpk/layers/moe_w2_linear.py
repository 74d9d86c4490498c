"""moe_w2_linear_layer (MPK's name): the MoE down projection, per routed (token, slot) x[t, slot] @ W[e]^T.

input [batch, topk, K] (K = intermediate), weight [num_experts, N, K] (N = hidden), moe_routing_indices
[num_experts, batch] int32 (slot + 1 where token t routes to expert e as its choice `slot`, 0: not routed),
moe_mask [num_experts + 1] int32 (the activated experts, then their count) -> output [batch, topk, N]:
output[t, slot, :] = input[t, slot] @ weight[e]^T for every (e, t) with routing[e, t] = slot + 1; bf16,
fp16, fp32, fp32 accumulation. Kernel: csrc/tasks/moe_w2_linear.cuh (moe_w13_linear.cuh's kernel with
the input row chosen by the slot). Grid, live parts, unclaimed slots and bad routing: as
moe_w13_linear_layer (layers/moe_w13_linear.py): grid.x the expert stride, grid.y the column split (MPK).
"""
from __future__ import annotations

from . import Layer
from .moe_w13_linear import moe_linear_parts

TASK_TYPE = 255          # MPK's TASK_MOE_W2_LINEAR_SM100 (runtime_header.h)
# Tensor parallelism (mirage.mpk.testing.TP_KINDS): row-parallel, as MPK's MoE down projection: rank r holds
# columns [r*K/W, (r+1)*K/W) of the input and of every expert's weight and computes a partial sum, which
# an allreduce adds up.
TP = "row"


def moe_w2_linear_layer(pk, name: str, input, weight, moe_routing_indices, moe_mask, output, grid_dim,
                        block_dim) -> Layer:
    parts = moe_linear_parts(name, input, weight, moe_routing_indices, moe_mask, output, grid_dim, block_dim,
                             w2=True)
    return Layer(name, "moe_w2_linear", **parts)
