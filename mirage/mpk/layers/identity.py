"""identity_layer: output = input (a bit copy); grid.x splits the last dim, grid.y the first.

input, output: same shape, 2-D [B, H] or 3-D [B, S, H]. As in MPK, grid.x splits the last dim
(MPK's partition map (last_dim, -1, -1)); grid.y splitting dim 0 is this project's extension.
grid.z must be 1: a 3-D tile then keeps its middle dim whole, so its leading dims stay packed
for the kernel (csrc/tasks/identity.cuh). `dependent_tensor` (MPK's keyword, unused there) is
read for ordering only: every task waits for all writers of it and copies nothing from it.
The output equals its input by design, so the 'differs from input' check does not apply.
"""
from __future__ import annotations

from ..dtypes import FLOATS
from . import FINITE, NONZERO, NOT_SPLIT, Access, Layer, check_grid, check_splits, check_tensor

TASK_TYPE = 121          # MPK's TASK_IDENTITY
# Tensor parallelism, how the layer is split across ranks (mirage.mpk.testing.TP_KINDS): every rank copies
# the whole tensor.
TP = "replicated"


def identity_layer(pk, name: str, input, output, grid_dim, block_dim, dependent_tensor=None) -> Layer:
    grid = check_grid(name, grid_dim, block_dim)
    x = check_tensor(name, "input", input, dtype=FLOATS)
    if len(x.dims) not in (2, 3):
        raise ValueError(f"layer '{name}': tensor '{x.name}' (input) must be 2-D or 3-D, got shape {x.dims}")
    y = check_tensor(name, "output", output, dims=x.dims, dtype=x.dtype)
    if grid[2] != 1:
        raise ValueError(f"layer '{name}': grid_dim.z must be 1 (grid.x splits the last dim, grid.y the "
                         f"first); got {grid}")
    pmap = (len(x.dims) - 1, 0, NOT_SPLIT)
    inputs, outputs = [Access("input", x, pmap)], [Access("output", y, pmap)]
    if dependent_tensor is not None:
        inputs.append(Access("dependent_tensor", check_tensor(name, "dependent_tensor", dependent_tensor)))
    check_splits(name, grid, inputs, outputs)
    return Layer(name, "identity", grid, inputs, outputs, (x.dtype,), checks=(FINITE, NONZERO),
                 inplace={"output": ("input",)})
