"""quantize_fp8_layer: per row and group of `group_size` columns, e4m3 codes and their fp32 block scale.

    amax = max(max_j |x_j|, 1e-10),  scale = amax / 448,  q_j = e4m3(clamp(x_j / scale, -448, 448))

so x_j ~= q_j * scale (the scale is the dequantization multiplier, as MPK stores it). input [rows, K] or
[batch, topk, K] -> output_fp8 the same shape (float8_e4m3), output_scale [..., K / group_size] float32;
grid.x splits dim 0 of all three (a task has whole rows). Kernel: csrc/tasks/quantize_fp8.cuh.
MPK: persistent_kernel.py quantize_fp8_layer (TASK_QUANTIZE_FP8_SM100, one task per row, group 128;
scale_ue8m0=False is its quantize_fp8_f32scale_sm100, the scales MPK's MoE fp8 GEMMs take).
group_size=64 is this project's extension (MPK fixes 128). scale_ue8m0=True, MPK's default (scales
rounded up to powers of two, four bytes packed per uint32, column-major), is refused by name: it needs a
uint32 dtype and the packed layout, which are not here yet.
"""
from __future__ import annotations

from ..dtypes import FLOATS, float8_e4m3, float32
from . import FINITE, NONZERO, NOT_SPLIT, Access, Layer, check_grid, check_splits, check_tensor

TASK_TYPE = 275                  # MPK's TASK_QUANTIZE_FP8_SM100
# Tensor parallelism (mirage.mpk.testing.TP_KINDS): every rank quantizes the same activations.
TP = "replicated"
GROUP_SIZES = (64, 128)


def quantize_fp8_layer(pk, name: str, input, output_fp8, output_scale, grid_dim, block_dim,
                       scale_ue8m0: bool = True, group_size: int = 128) -> Layer:
    grid = check_grid(name, grid_dim, block_dim)
    if scale_ue8m0:
        raise NotImplementedError(f"layer '{name}': scale_ue8m0=True (UE8M0 scales packed four per uint32, "
                                  f"column-major) is not implemented here yet; pass scale_ue8m0=False for "
                                  f"float32 scales [..., K / {group_size}]")
    if group_size not in GROUP_SIZES:
        raise ValueError(f"layer '{name}': group_size must be one of {GROUP_SIZES}, got {group_size!r}")
    x = check_tensor(name, "input", input, dtype=FLOATS)
    if len(x.dims) not in (2, 3) or x.dims[-1] % group_size:
        raise ValueError(f"layer '{name}': input '{x.name}' must be [rows, K] or [batch, topk, K] with K a "
                         f"multiple of group_size {group_size}, got shape {x.dims}")
    q = check_tensor(name, "output_fp8", output_fp8, ndim=len(x.dims), dims=x.dims, dtype=float8_e4m3)
    s = check_tensor(name, "output_scale", output_scale, ndim=len(x.dims),
                     dims=(*x.dims[:-1], x.dims[-1] // group_size), dtype=float32)
    if grid[1] != 1 or grid[2] != 1:
        raise ValueError(f"layer '{name}': quantize_fp8 works on whole rows, so grid_dim must be "
                         f"(rows_split, 1, 1); got {grid}")
    split_rows = (0, NOT_SPLIT, NOT_SPLIT)       # grid.x splits dim 0 of every tensor
    inputs = [Access("input", x, split_rows)]
    outputs = [Access("output_fp8", q, split_rows), Access("output_scale", s, split_rows)]
    check_splits(name, grid, inputs, outputs)
    return Layer(name, "quantize_fp8", grid, inputs, outputs, (x.dtype,), iparams=(group_size,),
                 checks=(FINITE, NONZERO), params={"group_size": group_size, "scale_ue8m0": False})
