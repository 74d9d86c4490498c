"""moe_w13_fp8_layer (MPK's name): moe_w13_linear with e4m3 operands and per-128 block scales.

input_fp8 [batch, K] e4m3, input_scale [batch, K / 128] float32, weight_fp8 [num_experts, N, K] e4m3,
weight_scale [num_experts, N, K / 128] float32, moe_routing_indices [num_experts, batch] int32, moe_mask
[num_experts + 1] int32 -> output [batch, topk, N] (bf16 as MPK; fp16 and fp32 too): for every (e, t)
with routing[e, t] = slot + 1,

    output[t, slot, j] = sum_g 2^E(sx[t, g]) 2^E(sw[e, j, g]) sum_{k in block g} qx[t, k] qw[e, j, k]

where E(s) = ((bits of s) >> 23 & 0xFF) - 127 is the scale's exponent: the kernel reads each float32 scale
as UE8M0, as MPK's fp8_group_gemm_sm100.cuh converts it for the block-scaled MMA ("UE8M0 conversion in
kernel"). A power of two is read exactly; any other scale counts as the power of two below it (so codes
quantized with scale = amax / 448, quantize_fp8_layer(scale_ue8m0=False), dequantize up to 2x small: MPK's
behaviour, which this layer keeps; docs/mpk_differences.md). Kernel: csrc/tasks/moe_w13_fp8.cuh.
Grid, partition, live parts, unclaimed slots and bad routing as moe_w13_linear_layer
(layers/moe_w13_linear.py): grid.x the expert stride, grid.y splits the weight's (and its scales') dim 1
and the output's dim 2; input_fp8 and input_scale are whole (MPK's maps). MPK asserts target_cc == 100;
here the one kernel source runs on every target.
"""
from __future__ import annotations

from . import Layer
from .moe_w13_linear import moe_linear_parts

TASK_TYPE = 248          # MPK's TASK_MOE_W13_FP8_SM100 (runtime_header.h)
# Tensor parallelism (mirage.mpk.testing.TP_KINDS): column-parallel, as moe_w13_linear.
TP = "column"
# Both scales are read as UE8M0 (module doc): the evidence line of an output says when they are not powers of
# two (Layer.ue8m0_scales).
UE8M0_SCALES = ("input_scale", "weight_scale")


def moe_w13_fp8_layer(pk, name: str, input_fp8, input_scale, weight_fp8, weight_scale, moe_routing_indices,
                      moe_mask, output, grid_dim, block_dim) -> Layer:
    parts = moe_linear_parts(name, input_fp8, weight_fp8, moe_routing_indices, moe_mask, output, grid_dim,
                             block_dim, w2=False, input_scale=input_scale, weight_scale=weight_scale,
                             target_cc=pk.target_cc)
    return Layer(name, "moe_w13_fp8", ue8m0_scales=UE8M0_SCALES, **parts)
