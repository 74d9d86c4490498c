"""linear_fp8_layer (MPK's name): y = x~ @ w~^T on e4m3 codes with packed UE8M0 block scales.

input_fp8 [B, K] e4m3 and input_scale [packed_k, aligned_B] uint32 (quantize_fp8_layer(scale_ue8m0=True)'s
outputs: MPK's storage, layers/quantize_fp8.py), weight_fp8 [N, K] e4m3 and weight_scale [packed_k, N]
uint32 (the same storage for the weight's N rows: word p of row j at [p, j]; MPK attaches the view (N,
packed_k) with strides (1, aligned_N), whose .t() this is when N % 4 == 0), output [B, N] (bf16 as MPK;
fp16 and fp32 too), blocks of 128 codes (MPK's), so packed_k = ceil(K / 512):

    y[b, j] = sum_g 2^(cx[b, g] - 127) 2^(cw[j, g] - 127) sum_{k in block g} qx[b, k] qw[j, k]

cx[b, g] byte g % 4 of word g / 4 of row b. Grid as MPK's maps: grid.x splits N (weight_fp8 dim 0, its
scales' N, output dim 1); input_fp8 and input_scale whole. Kernel: csrc/tasks/linear_fp8.cuh.
"""
from __future__ import annotations

from ..dtypes import FLOATS, float8_e4m3, uint32
from . import NOT_SPLIT, Access, Layer, check_grid, check_splits, check_tensor, dim3, storage
from .linear import TENSOR_CORE_MIN_ROWS

TASK_TYPE = 276          # MPK's TASK_LINEAR_FP8_SM100 (runtime_header.h)
# Tensor parallelism (mirage.mpk.testing.TP_KINDS): column-parallel, as linear_layer: rank r holds rows
# [r*N/W, (r+1)*N/W) of the weight's codes and scales and computes those output columns.
TP = "column"
BLOCK = 128              # codes per UE8M0 scale (MPK fixes it)
E4M3_MMA_CC = 89         # mma.m16n8k32 .e4m3 exists from sm_89 (Ada) on


def tensor_cores(name: str, batch: int, block_dim, target_cc: int) -> int:
    """1 when the layer takes the tensor cores (csrc/tasks/linear_fp8.cuh, mma.m16n8k32 e4m3): linear's
    row threshold (TENSOR_CORE_MIN_ROWS) on a target that has the instruction: target_cc (the kernel's,
    PersistentKernel.target_cc), or, on the CPU backend without one, the target this layer's block implies
    (more than 128 threads: 90, as PersistentKernel.target_cc). One choice per layer."""
    x, y, z = dim3(name, "block_dim", block_dim)
    cc = max(target_cc, 90 if x * y * z > 128 else 0)
    return int(batch >= TENSOR_CORE_MIN_ROWS and cc >= E4M3_MMA_CC)


def linear_fp8_parts(name: str, grid_dim, block_dim, input_fp8, input_scale, weight_fp8, weight_scale, output,
                     residual=None, target_cc: int = 0) -> dict:
    """The checks and partition map of linear_fp8_layer and linear_fp8_with_residual_layer, as the Layer's
    arguments after its name and kind; target_cc: the kernel's (tensor_cores)."""
    grid = check_grid(name, grid_dim, block_dim)
    x = check_tensor(name, "input_fp8", input_fp8, ndim=2, dtype=float8_e4m3)
    batch, k = x.dims
    if k % BLOCK:
        raise ValueError(f"layer '{name}': input_fp8 '{x.name}' is {x.dims}: K = {k} must be a multiple of "
                         f"the scale block {BLOCK}")
    words = -(-(k // BLOCK) // 4)
    w = check_tensor(name, "weight_fp8", weight_fp8, ndim=2, dims=(None, k), dtype=float8_e4m3)
    n = w.dims[0]
    aligned = -(-batch // 4) * 4
    xs = check_tensor(name, "input_scale", input_scale, ndim=2, dims=(words, aligned), dtype=uint32)
    ws = check_tensor(name, "weight_scale", weight_scale, ndim=2, dims=(words, n), dtype=uint32)
    y = check_tensor(name, "output", output, ndim=2, dims=(batch, n), dtype=FLOATS)
    if grid[1] != 1 or grid[2] != 1:
        raise ValueError(f"layer '{name}': grid_dim must be (column_split, 1, 1) (MPK's map), got {grid}")
    rows, cols = (0, NOT_SPLIT, NOT_SPLIT), (1, NOT_SPLIT, NOT_SPLIT)      # grid.x on dim 0, on dim 1
    inputs = [Access("input_fp8", x), Access("input_scale", xs), Access("weight_fp8", w, rows),
              Access("weight_scale", ws, cols)]
    if residual is not None:
        r = check_tensor(name, "residual", residual, ndim=2, dims=(batch, n), dtype=y.dtype)
        inputs.append(Access("residual", r, cols))
    for a in inputs:
        if a.role != "residual" and storage(a.tensor) & storage(y):
            raise ValueError(f"layer '{name}': output '{y.name}' shares storage with the {a.role} "
                             f"'{a.tensor.name}'; write to another tensor")
    outputs = [Access("output", y, cols)]
    check_splits(name, grid, inputs, outputs)
    tc = tensor_cores(name, batch, block_dim, target_cc)
    return dict(grid=grid, inputs=inputs, outputs=outputs, template=(y.dtype,), iparams=(tc,),
                params={"block": BLOCK, "residual": residual is not None, "tensor_cores": bool(tc)},
                inplace={"output": ("residual",)} if residual is not None else {})


def linear_fp8_layer(pk, name: str, input_fp8, input_scale, weight_fp8, weight_scale, output, grid_dim,
                     block_dim) -> Layer:
    parts = linear_fp8_parts(name, grid_dim, block_dim, input_fp8, input_scale, weight_fp8, weight_scale,
                             output, target_cc=pk.target_cc)
    return Layer(name, "linear_fp8", **parts)
