"""tensor_init_layer: zeroes `input` (MPK's naming); dummy_input/dummy_output only order it.

input [B, H] (written: every element becomes 0); grid.x splits rows (as in MPK), grid.y
splits columns (this project's extension). dummy_input is read so the layer runs after its
producer: as in MPK, grid.x splits its rows when it is 2-D with a row count grid.x divides
(task i waits for the writers of its rows only); otherwise each task waits for all of it,
which orders more than needed and never less. dummy_output is declared but never written.
Kernel: csrc/tasks/tensor_init.cuh. Zero is the intended result, so only the 'finite'
check applies.
"""
from __future__ import annotations

from ..dtypes import FLOATS
from . import FINITE, NOT_SPLIT, Access, Layer, check_grid, check_splits, check_tensor
from ._elementwise import tiled_2d

TASK_TYPE = 262          # MPK's TASK_TENSOR_INIT
# Tensor parallelism, how the layer is split across ranks (mirage.mpk.testing.TP_KINDS): every rank zeroes
# its whole tensor.
TP = "replicated"


def tensor_init_layer(pk, name: str, input, dummy_input, dummy_output, grid_dim, block_dim) -> Layer:
    grid = check_grid(name, grid_dim, block_dim)
    x = check_tensor(name, "input", input, ndim=2, dtype=FLOATS)
    dummy_in = check_tensor(name, "dummy_input", dummy_input)
    dummy_out = check_tensor(name, "dummy_output", dummy_output)
    rows_split = len(dummy_in.dims) == 2 and dummy_in.dims[0] % grid[0] == 0
    inputs = [Access("dummy_input", dummy_in, (0, NOT_SPLIT, NOT_SPLIT) if rows_split else (NOT_SPLIT,) * 3)]
    outputs = [tiled_2d("input", x), Access("dummy_output", dummy_out, (NOT_SPLIT,) * 3, written=False)]
    check_splits(name, grid, inputs, outputs)
    return Layer(name, "tensor_init", grid, inputs, outputs, (x.dtype,), checks=(FINITE,))
