"""quantize_fp8_layer: per row and group of `group_size` columns, e4m3 codes and their fp32 block scale.

    amax = max(max_j |x_j|, 1e-10),  scale = amax / 448,  q_j = e4m3(clamp(x_j / scale, -448, 448))

so x_j ~= q_j * scale (the scale is the dequantization multiplier, as MPK stores it). input [rows, K] or
[batch, topk, K] -> output_fp8 the same shape (float8_e4m3), output_scale [..., K / group_size] float32;
grid.x splits dim 0 of all three (a task has whole rows). Kernel: csrc/tasks/quantize_fp8.cuh.
MPK: persistent_kernel.py quantize_fp8_layer (TASK_QUANTIZE_FP8_SM100, one task per row, group 128;
scale_ue8m0=False is its quantize_fp8_f32scale_sm100, the scales MPK's MoE fp8 GEMMs take).
group_size=64 is this project's extension (MPK fixes 128). scale_ue8m0=True, MPK's default, the scales
linear_fp8 takes: each scale rounded up to a power of two, 2^(c - 127), and stored as its UE8M0 code c =
ceil(log2(amax / 448)) + 127 (exact, from the float's bits; MPK's ceilf(log2f(.)) can land one low just
above a power of two, and its codes then saturate at 448), the codes q_j = e4m3(x_j / 2^(c - 127)); four
codes per uint32 (little-endian: group 4p + i in byte i of word p, the bytes past the last group 0) in
MPK's storage [packed_k, aligned_rows] (packed_scale_shape): word p of flattened row r at [p, r].
"""
from __future__ import annotations

import math

import torch

from ..dtypes import FLOATS, float8_e4m3, float32, uint32
from . import BY_REQUEST, FINITE, NONZERO, NOT_SPLIT, Access, Layer, check_grid, check_splits, check_tensor

TASK_TYPE = 275                  # MPK's TASK_QUANTIZE_FP8_SM100
# Tensor parallelism (mirage.mpk.testing.TP_KINDS): every rank quantizes the same activations.
TP = "replicated"
GROUP_SIZES = (64, 128)


def packed_scale_shape(rows: int, k: int, group_size: int = 128) -> tuple[int, int]:
    """MPK's UE8M0 scale storage of `rows` rows of K: [packed_k, aligned_rows] uint32, packed_k =
    ceil(K / group / 4) words of four one-byte codes, aligned_rows = rows rounded up to 4 (a row's words are
    a column: MPK's column-major [rows, packed_k] with strides (1, aligned_rows), stored transposed)."""
    return (-(-(k // group_size) // 4), -(-rows // 4) * 4)


def quantize_fp8_layer(pk, name: str, input, output_fp8, output_scale, grid_dim, block_dim,
                       scale_ue8m0: bool = True, group_size: int = 128) -> Layer:
    grid = check_grid(name, grid_dim, block_dim)
    if group_size not in GROUP_SIZES:
        raise ValueError(f"layer '{name}': group_size must be one of {GROUP_SIZES}, got {group_size!r}")
    x = check_tensor(name, "input", input, dtype=FLOATS)
    if len(x.dims) not in (2, 3) or x.dims[-1] % group_size:
        raise ValueError(f"layer '{name}': input '{x.name}' must be [rows, K] or [batch, topk, K] with K a "
                         f"multiple of group_size {group_size}, got shape {x.dims}")
    q = check_tensor(name, "output_fp8", output_fp8, ndim=len(x.dims), dims=x.dims, dtype=float8_e4m3)
    rows = math.prod(x.dims[:-1])
    if scale_ue8m0:
        s = check_tensor(name, "output_scale", output_scale, ndim=2,
                         dims=packed_scale_shape(rows, x.dims[-1], group_size), dtype=uint32)
    else:
        s = check_tensor(name, "output_scale", output_scale, ndim=len(x.dims),
                         dims=(*x.dims[:-1], x.dims[-1] // group_size), dtype=float32)
    if grid[1] != 1 or grid[2] != 1:
        raise ValueError(f"layer '{name}': quantize_fp8 works on whole rows, so grid_dim must be "
                         f"(rows_split, 1, 1); got {grid}")
    split_rows = (0, NOT_SPLIT, NOT_SPLIT)       # grid.x splits dim 0 of every tensor (UE8M0: not the scales)
    inputs = [Access("input", x, split_rows)]
    # UE8M0: every task's words are its rows' columns of the one [packed_k, aligned_rows] tensor (the
    # padding columns no task writes); tasks share it, each writing its part (Layer.live)
    scales = Access("output_scale", s, shared=BY_REQUEST) if scale_ue8m0 else \
        Access("output_scale", s, split_rows)
    outputs = [Access("output_fp8", q, split_rows), scales]
    check_splits(name, grid, inputs, outputs)
    per_task = rows // grid[0]                   # flattened rows per task (grid.x divides dim 0)
    if not scale_ue8m0:
        return Layer(name, "quantize_fp8", grid, inputs, outputs, (x.dtype,), iparams=(group_size, 0, 0),
                     checks=(FINITE, NONZERO), params={"group_size": group_size, "scale_ue8m0": False})

    def live(meta: dict, coord) -> dict:
        cols = torch.zeros(s.dims, dtype=torch.bool, device="cpu")
        cols[:, coord[0] * per_task:(coord[0] + 1) * per_task] = True
        return {"output_scale": cols}

    return Layer(name, "quantize_fp8", grid, inputs, outputs, (x.dtype,), checks=(FINITE, NONZERO), live=live,
                 task_iparams=lambda c: (group_size, 1, c[0] * per_task),
                 params={"group_size": group_size, "scale_ue8m0": True})
