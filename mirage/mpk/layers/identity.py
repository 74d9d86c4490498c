"""identity_layer: output = input (a copy); grid.x splits rows, grid.y splits columns.

input, output: same shape [B, H]. Kernel: csrc/tasks/cpu/identity.h.
The output equals its input by design, so the 'differs from input' check does not apply.
"""
from __future__ import annotations

from ..dtypes import bfloat16, float16, float32
from . import FINITE, NONZERO, Layer, check_grid, check_splits, check_tensor
from ._elementwise import tiled_2d

FLOATS = (bfloat16, float16, float32)


def identity_layer(pk, name: str, *, input, output, grid_dim, block_dim) -> Layer:
    grid = check_grid(name, grid_dim, block_dim)
    x = check_tensor(name, "input", input, ndim=2, dtype=FLOATS)
    y = check_tensor(name, "output", output, dims=x.dims, dtype=x.dtype)
    inputs, outputs = [tiled_2d("input", x)], [tiled_2d("output", y)]
    check_splits(name, grid, inputs, outputs)
    return Layer(name, "identity", grid, inputs, outputs, (x.dtype,), checks=(FINITE, NONZERO))
