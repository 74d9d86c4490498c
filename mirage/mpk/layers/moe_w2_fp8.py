"""moe_w2_fp8_layer (MPK's name): moe_w2_linear with e4m3 operands and per-128 block scales.

input_fp8 [batch, topk, K] e4m3, input_scale [batch, topk, K / 128] float32, weight_fp8 [num_experts, N, K]
e4m3, weight_scale [num_experts, N, K / 128] float32, moe_routing_indices [num_experts, batch] int32,
moe_mask [num_experts + 1] int32 -> output [batch, topk, N]: output[t, slot, :] from the input row (t, slot)
and expert e's weight, with the scales read as UE8M0 (their exponents), exactly as moe_w13_fp8_layer
(layers/moe_w13_fp8.py, which states the math). Kernel: csrc/tasks/moe_w2_fp8.cuh (moe_w13_fp8.cuh's
kernel with the input row chosen by the slot). Grid and partition as moe_w2_linear_layer.
"""
from __future__ import annotations

from . import Layer
from .moe_w13_fp8 import UE8M0_SCALES
from .moe_w13_linear import moe_linear_parts

TASK_TYPE = 249          # MPK's TASK_MOE_W2_FP8_SM100 (runtime_header.h)
# Tensor parallelism (mirage.mpk.testing.TP_KINDS): row-parallel, as moe_w2_linear (an allreduce adds the
# ranks' partial sums).
TP = "row"


def moe_w2_fp8_layer(pk, name: str, input_fp8, input_scale, weight_fp8, weight_scale, moe_routing_indices,
                     moe_mask, output, grid_dim, block_dim) -> Layer:
    parts = moe_linear_parts(name, input_fp8, weight_fp8, moe_routing_indices, moe_mask, output, grid_dim,
                             block_dim, w2=True, input_scale=input_scale, weight_scale=weight_scale,
                             target_cc=pk.target_cc)
    return Layer(name, "moe_w2_fp8", ue8m0_scales=UE8M0_SCALES, **parts)
