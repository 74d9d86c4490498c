"""silu_mul_layer: per task tile of width 2m, out = silu(first m) * (next m), fp32 math.

input [B, 2I] -> output [B, I]; grid.x = g splits the columns (m = I / g), grid.y splits rows.
The input must be the gate/up shuffle with num_groups = g: the result depends on g.
Kernel: csrc/tasks/silu_mul.cuh.
"""
from __future__ import annotations

from ..dtypes import FLOATS
from . import NOT_SPLIT, Access, Layer, check_grid, check_splits, check_tensor

TASK_TYPE = 118          # MPK's TASK_SILU_MUL
# Tensor parallelism, how the layer is split across ranks (mirage.mpk.testing.TP_KINDS): on a whole
# activation, every rank the same [gate | up] (after a column-parallel linear each rank runs it on its own
# columns).
TP = "replicated"



def silu_mul_layer(pk, name: str, input, output, grid_dim, block_dim) -> Layer:
    grid = check_grid(name, grid_dim, block_dim)
    x = check_tensor(name, "input", input, ndim=2, dtype=FLOATS)
    batch, width = x.dims
    if width % 2:
        raise ValueError(f"layer '{name}': input '{x.name}' width {width} must be even ([gate | up])")
    check_tensor(name, "output", output, dims=(batch, width // 2), dtype=x.dtype)
    if grid[2] != 1:
        raise ValueError(f"layer '{name}': grid_dim.z must be 1, got {grid}")
    cols_rows = (1, 0, NOT_SPLIT)
    inputs = [Access("input", x, cols_rows)]
    outputs = [Access("output", output, cols_rows)]
    check_splits(name, grid, inputs, outputs)
    return Layer(name, "silu_mul", grid, inputs, outputs, (x.dtype,), params={"groups": grid[0]})
