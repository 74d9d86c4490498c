"""layernorm_layer: y = (x - mean) / sqrt(var + eps) * w + b per row, fp32 math; grid.x splits rows.

input [B, H], weight [H], bias [H] -> output [B, H]; mean and var (biased, as torch's LayerNorm) over
the H columns of each row. Kernel: csrc/tasks/layernorm.cuh.
"""
from __future__ import annotations

from ..dtypes import FLOATS
from . import NOT_SPLIT, Access, Layer, check_grid, check_splits, check_tensor

# The next free number of the mirage-mpk extension range (layers/__init__.py): MPK has no LayerNorm task.
TASK_TYPE = 1000
# Tensor parallelism (mirage.mpk.testing.TP_KINDS): every rank normalizes the whole activation.
TP = "replicated"
# Scalar parameter -> the value a kernel that ignored it would in effect use (Layer.scalars).
SCALARS = {"eps": 0.0}


def layernorm_layer(pk, name: str, input, weight, bias, output, grid_dim, block_dim,
                    eps: float = 1e-5) -> Layer:
    grid = check_grid(name, grid_dim, block_dim)
    x = check_tensor(name, "input", input, ndim=2, dtype=FLOATS)
    batch, hidden = x.dims
    w = check_tensor(name, "weight", weight, dims=(hidden,), dtype=x.dtype)
    b = check_tensor(name, "bias", bias, dims=(hidden,), dtype=x.dtype)
    y = check_tensor(name, "output", output, dims=(batch, hidden), dtype=x.dtype)
    if grid[1] != 1 or grid[2] != 1:
        raise ValueError(f"layer '{name}': layernorm reduces over the hidden dim, so grid_dim must be "
                         f"(rows_split, 1, 1); got {grid}")
    if not (isinstance(eps, (int, float)) and not isinstance(eps, bool) and eps > 0):
        raise ValueError(f"layer '{name}': eps must be a positive number, got {eps!r}")
    rows = (0, NOT_SPLIT, NOT_SPLIT)       # grid.x splits dim 0 of input and output; w and b whole
    inputs = [Access("input", x, rows), Access("weight", w), Access("bias", b)]
    outputs = [Access("output", y, rows)]
    check_splits(name, grid, inputs, outputs)
    return Layer(name, "layernorm", grid, inputs, outputs, (x.dtype,), fparams=(float(eps),),
                 params={"eps": float(eps)}, scalars=dict(SCALARS))
