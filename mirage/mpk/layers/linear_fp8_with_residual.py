"""linear_fp8_with_residual_layer (MPK's name): y = x~ @ w~^T + residual on e4m3 codes with UE8M0 scales.

linear_fp8_layer's tensors and math (layers/linear_fp8.py) plus residual [B, N] in the output's dtype, added
in fp32 before the one rounding (MPK's params [1]: on every rank); grid.x splits the residual's columns as
the output's. The output may be the residual itself (in place).
Kernel: csrc/tasks/linear_fp8_with_residual.cuh.
"""
from __future__ import annotations

from . import Layer
from .linear_fp8 import linear_fp8_parts

TASK_TYPE = 277          # MPK's TASK_LINEAR_FP8_WITH_RESIDUAL_SM100 (runtime_header.h)
# Tensor parallelism (mirage.mpk.testing.TP_KINDS): column-parallel, as linear_fp8_layer, each rank adding
# its columns of the residual.
TP = "column"


def linear_fp8_with_residual_layer(pk, name: str, input_fp8, input_scale, weight_fp8, weight_scale, residual,
                                   output, grid_dim, block_dim) -> Layer:
    parts = linear_fp8_parts(name, grid_dim, block_dim, input_fp8, input_scale, weight_fp8, weight_scale,
                             output, residual=residual, target_cc=pk.target_cc)
    return Layer(name, "linear_fp8_with_residual", **parts)
