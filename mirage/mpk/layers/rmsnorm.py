"""rmsnorm_layer: y = x * rsqrt(mean(x^2) + eps) * w, fp32 math; grid.x splits rows.

input [B, H], weight [H] -> output [B, H]. Kernel: csrc/tasks/rmsnorm.cuh.
"""
from __future__ import annotations

from ..dtypes import FLOATS
from . import NOT_SPLIT, Access, Layer, check_grid, check_splits, check_tensor

TASK_TYPE = 119          # MPK's TASK_RMS_NORM
# Tensor parallelism, how the layer is split across ranks (mirage.mpk.testing.TP_KINDS): every rank
# normalizes the whole activation, as MPK's models run it.
TP = "replicated"

# Scalar parameters -> the value a kernel that ignored them would in effect use (Layer.scalars);
# module-level so that tests/unit/test_layer_recipe.py finds the layers whose tests need SCALAR_CASES.
SCALARS = {"eps": 0.0}


def rmsnorm_layer(pk, name: str, input, weight, output, grid_dim, block_dim, eps: float = 1e-6) -> Layer:
    grid = check_grid(name, grid_dim, block_dim)
    x = check_tensor(name, "input", input, ndim=2, dtype=FLOATS)
    batch, hidden = x.dims
    w = check_tensor(name, "weight", weight, dims=(hidden,), dtype=x.dtype)
    y = check_tensor(name, "output", output, dims=(batch, hidden), dtype=x.dtype)
    if grid[1] != 1 or grid[2] != 1:
        raise ValueError(f"layer '{name}': rmsnorm reduces over the hidden dim, so grid_dim must be "
                         f"(rows_split, 1, 1); got {grid}")
    if not (isinstance(eps, (int, float)) and eps > 0):
        raise ValueError(f"layer '{name}': eps must be a positive number, got {eps!r}")
    rows = (0, NOT_SPLIT, NOT_SPLIT)
    inputs = [Access("input", x, rows), Access("weight", w)]
    outputs = [Access("output", y, rows)]
    check_splits(name, grid, inputs, outputs)
    return Layer(name, "rmsnorm", grid, inputs, outputs, (x.dtype,), fparams=(float(eps),),
                 params={"eps": float(eps)}, scalars=dict(SCALARS), inplace={"output": ("input",)})
