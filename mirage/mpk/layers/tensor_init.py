"""tensor_init_layer: zeroes `input` (MPK's naming); dummy_input/dummy_output only order it.

input [B, H] (written: every element becomes 0); grid.x splits rows, grid.y splits columns.
dummy_input is read (so the layer runs after its producer); dummy_output is declared but
never written. Kernel: csrc/tasks/cpu/tensor_init.h. Zero is the intended result, so only
the 'finite' check applies.
"""
from __future__ import annotations

from ..dtypes import bfloat16, float16, float32
from . import FINITE, NOT_SPLIT, Access, Layer, check_grid, check_splits, check_tensor
from ._elementwise import tiled_2d

FLOATS = (bfloat16, float16, float32)


def tensor_init_layer(pk, name: str, *, input, dummy_input, dummy_output, grid_dim, block_dim) -> Layer:
    grid = check_grid(name, grid_dim, block_dim)
    x = check_tensor(name, "input", input, ndim=2, dtype=FLOATS)
    dummy_in = check_tensor(name, "dummy_input", dummy_input)
    dummy_out = check_tensor(name, "dummy_output", dummy_output)
    inputs = [Access("dummy_input", dummy_in)]
    outputs = [tiled_2d("input", x), Access("dummy_output", dummy_out, (NOT_SPLIT,) * 3, written=False)]
    check_splits(name, grid, inputs, outputs)
    return Layer(name, "tensor_init", grid, inputs, outputs, (x.dtype,), checks=(FINITE,))
