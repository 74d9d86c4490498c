"""moe_mul_sum_add_layer: the MoE combine, out[b] = residual[b] + sum_k weight[b, k] * input[b, k].

input [batch, topk, hidden] (each routed expert's output, activation dtype), weight [batch, topk]
(the routing's top-k weights, float32 as in MPK), residual and output [batch, hidden] (activation
dtype). grid.x splits dim 0 (batch) of all four; grid.y splits hidden: input dim 2, residual and
output dim 1 (a task reads its tokens' whole weight rows). fp32 accumulation, residual first, then
k ascending. Kernel: csrc/tasks/moe_mul_sum_add.cuh.
MPK: persistent_kernel.py moe_mul_sum_add_layer (partition maps), task_register.cc
register_moe_mul_sum_add_sm100_task, tasks/blackwell/mul_sum_add_sm100.cuh (weights read as float).
"""
from __future__ import annotations

from ..dtypes import FLOATS, float32
from . import NOT_SPLIT, Access, Layer, check_grid, check_splits, check_tensor

TASK_TYPE = 261          # MPK's TASK_MOE_MUL_SUM_ADD_SM100
# Tensor parallelism (mirage.mpk.testing.TP_KINDS): replicated, every rank the same full tensors. No
# other kind fits: "column" / "row" would cut the weight's last dim (topk, here not an output feature)
# and leave input and residual, which share output's hidden dim, whole. (Combining per-rank partial
# expert outputs would add the residual once per rank: not a sharding this layer offers.)
TP = "replicated"


def moe_mul_sum_add_layer(pk, name: str, input, weight, residual, output, grid_dim, block_dim) -> Layer:
    grid = check_grid(name, grid_dim, block_dim)
    x = check_tensor(name, "input", input, ndim=3, dtype=FLOATS)
    batch, topk, hidden = x.dims
    w = check_tensor(name, "weight", weight, ndim=2, dims=(batch, topk), dtype=float32)
    r = check_tensor(name, "residual", residual, ndim=2, dims=(batch, hidden), dtype=x.dtype)
    y = check_tensor(name, "output", output, ndim=2, dims=(batch, hidden), dtype=x.dtype)
    if grid[2] != 1:
        raise ValueError(f"layer '{name}': grid_dim.z must be 1 (grid.x splits batch, grid.y hidden), "
                         f"got {grid}")
    rows_cols = (0, 1, NOT_SPLIT)        # residual, output: grid.x splits batch, grid.y hidden
    inputs = [Access("input", x, (0, 2, NOT_SPLIT)), Access("weight", w, (0, NOT_SPLIT, NOT_SPLIT)),
              Access("residual", r, rows_cols)]
    outputs = [Access("output", y, rows_cols)]
    check_splits(name, grid, inputs, outputs)
    return Layer(name, "moe_mul_sum_add", grid, inputs, outputs, (x.dtype,))
