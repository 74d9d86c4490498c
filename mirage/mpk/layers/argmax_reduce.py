"""argmax_reduce_layer (MPK's name): the final argmax from argmax_partial_layer's (value, index).

input=(value, index), each [batch, num_tasks] (value bf16, fp16 or fp32; index int64 global vocabulary
indices) -> output [batch, 1] int64: index[b, t] of the first task t whose value[b, t] is the row's
maximum (NaN first, +0 == -0: layers/argmax.py). The partial tasks' ranges ascend with t, so on equal
values across a task boundary this is the lower index, torch.argmax's. Kernel: csrc/tasks/argmax_reduce.cuh.
Partition maps: value and index (1, 0, -1) as MPK's, with grid.x = 1 (a row's tasks are reduced by one
task); output (-1, 0, -1): grid.y splits the batch with the inputs' rows (MPK writes (0, 1, -1), which
for grid.y > 1 would split the output's single column; docs/mpk_differences.md).
"""
from __future__ import annotations

from ..dtypes import FLOATS, int64
from . import NONZERO, NOT_SPLIT, Access, Layer, check_grid, check_splits, check_tensor
from .argmax import check_ids

TASK_TYPE = 111          # MPK's TASK_ARGMAX_REDUCE
# Tensor parallelism (mirage.mpk.testing.TP_KINDS): every rank reduces the same replicated partials.
TP = "replicated"


def argmax_reduce_layer(pk, name: str, input, output, grid_dim, block_dim) -> Layer:
    grid = check_grid(name, grid_dim, block_dim)
    if not isinstance(input, (tuple, list)) or len(input) != 2:
        raise ValueError(f"layer '{name}': input must be the pair (value, index), got {input!r}")
    value = check_tensor(name, "value", input[0], ndim=2, dtype=FLOATS)
    index = check_tensor(name, "index", input[1], ndim=2, dims=value.dims, dtype=int64)
    y = check_ids(name, output, value.dims[0])
    if grid[0] != 1:
        raise ValueError(f"layer '{name}': grid_dim.x must be 1 (one task reduces a row's "
                         f"{value.dims[1]} partials; grid.y splits the batch), got {grid}")
    inputs = [Access("value", value, (1, 0, NOT_SPLIT)), Access("index", index, (1, 0, NOT_SPLIT))]
    outputs = [Access("output", y, (NOT_SPLIT, 0, NOT_SPLIT))]
    check_splits(name, grid, inputs, outputs)
    return Layer(name, "argmax_reduce", grid, inputs, outputs, (value.dtype,), checks=(NONZERO,))
