"""elementwise_add_layer: out = a + b in fp32; grid.x splits rows, grid.y splits columns.

input_a, input_b, output: same shape [B, H]. Kernel: csrc/tasks/elementwise_add.cuh.
"""
from __future__ import annotations

from ..dtypes import FLOATS
from . import Layer, check_grid, check_splits, check_tensor
from ._elementwise import tiled_2d

TASK_TYPE = 281          # MPK's TASK_ELEMENTWISE_ADD_SM100
# Tensor parallelism, how the layer is split across ranks (mirage.mpk.testing.TP_KINDS): every rank adds the
# whole activations (the residual adds of MPK's models).
TP = "replicated"



def elementwise_add_layer(pk, name: str, input_a, input_b, output, grid_dim, block_dim) -> Layer:
    grid = check_grid(name, grid_dim, block_dim)
    a = check_tensor(name, "input_a", input_a, ndim=2, dtype=FLOATS)
    b = check_tensor(name, "input_b", input_b, dims=a.dims, dtype=a.dtype)
    y = check_tensor(name, "output", output, dims=a.dims, dtype=a.dtype)
    inputs = [tiled_2d("input_a", a), tiled_2d("input_b", b)]
    outputs = [tiled_2d("output", y)]
    check_splits(name, grid, inputs, outputs)
    return Layer(name, "elementwise_add", grid, inputs, outputs, (a.dtype,),
                 inplace={"output": ("input_a", "input_b")})
