"""moe_silu_mul_layer: per (token, slot) row of width 2I, out = silu(first I) * (last I), fp32 math.

input [batch, topk, 2I] (each routed expert's w13 output) -> output [batch, topk, I]; grid.x splits
dim 0 (batch), grid.y splits dim 1 (topk) of both; each task keeps whole rows, so unlike the dense
silu_mul the result does not depend on the grid. Kernel: csrc/tasks/moe_silu_mul.cuh.
MPK: persistent_kernel.py moe_silu_mul_layer (partition maps (0, 1, -1)), task_register.cc
register_moe_silu_mul_task (tasks/ampere/silu_mul.cuh on each row: gate = input[..., :I],
up = input[..., I:]).
"""
from __future__ import annotations

from ..dtypes import FLOATS
from . import NOT_SPLIT, Access, Layer, check_grid, check_splits, check_tensor

# MPK runs this layer as a variant of TASK_SILU_MUL (118), which layers/silu_mul.py already declares;
# task types are unique per layer kind here, so it takes a mirage-mpk extension number.
TASK_TYPE = 1001
# Tensor parallelism (mirage.mpk.testing.TP_KINDS): every rank the same routed activations (under expert
# parallelism each rank would run it on its own slots' rows, the same maths).
TP = "replicated"


def moe_silu_mul_layer(pk, name: str, input, output, grid_dim, block_dim) -> Layer:
    grid = check_grid(name, grid_dim, block_dim)
    x = check_tensor(name, "input", input, ndim=3, dtype=FLOATS)
    batch, topk, width = x.dims
    if width % 2:
        raise ValueError(f"layer '{name}': input '{x.name}' dim 2 is {width} (shape {x.dims}); it must be "
                         f"even, 2 * intermediate ([gate | up] per row)")
    y = check_tensor(name, "output", output, ndim=3, dims=(batch, topk, width // 2), dtype=x.dtype)
    if grid[2] != 1:
        raise ValueError(f"layer '{name}': grid_dim.z must be 1 (grid.x splits batch, grid.y topk), "
                         f"got {grid}")
    batch_topk = (0, 1, NOT_SPLIT)       # grid.x splits dim 0, grid.y dim 1 of input and output
    inputs = [Access("input", x, batch_topk)]
    outputs = [Access("output", y, batch_topk)]
    check_splits(name, grid, inputs, outputs)
    return Layer(name, "moe_silu_mul", grid, inputs, outputs, (x.dtype,))
