"""allreduce_layer: output = sum over the ranks of input, in fp32 and rank order; grid.x splits H.

input [B, H], buffer [W, B, H] (symmetric: new_tensor(..., io_category="nvshmem_tensor")),
output [B, H]; W = world_size. Kernel: csrc/tasks/allreduce.cuh (the put/signal/wait
protocol and why a fast rank never overwrites a slot a slow one still reads).

Every rank writes the buffer, so it is an output the layer does not declare written: it
orders this rank's tasks like a write (a later layer reusing the buffer waits), but it is
never poisoned or checked for unwritten elements, since peers write it when they get there.
"""
from __future__ import annotations

from ..dtypes import FLOATS
from ..tensor import SYMMETRIC
from . import (
    DEFAULT_CHECKS,
    FINITE,
    NONZERO,
    NOT_SPLIT,
    Access,
    Layer,
    check_grid,
    check_splits,
    check_tensor,
)

TASK_TYPE = 302          # MPK's TASK_NVSHMEM_TILE_ALLREDUCE
# Tensor parallelism, how the layer is split across ranks (mirage.mpk.testing.TP_KINDS): completes a
# row-parallel layer: each rank's input is its partial sum; the output, their sum in rank order, is
# bit-identical on every rank.
TP = "reduce"



def allreduce_layer(pk, name: str, input, buffer, output, grid_dim, block_dim) -> Layer:
    grid = check_grid(name, grid_dim, block_dim)
    x = check_tensor(name, "input", input, ndim=2, dtype=FLOATS)
    batch, hidden = x.dims
    buf = check_tensor(name, "buffer", buffer, ndim=3, dtype=x.dtype)
    if buf.dims != (pk.world_size, batch, hidden):
        raise ValueError(f"layer '{name}': buffer '{buf.name}' is {buf.dims}, expected (world_size, batch, "
                         f"hidden) = {(pk.world_size, batch, hidden)}")
    if buf.kind != SYMMETRIC:
        raise ValueError(f"layer '{name}': buffer '{buf.name}' is a {buf.kind} tensor; every rank writes "
                         f"it, so allocate it with new_tensor(..., io_category='nvshmem_tensor')")
    y = check_tensor(name, "output", output, dims=(batch, hidden), dtype=x.dtype)
    if grid[1] != 1 or grid[2] != 1:
        raise ValueError(f"layer '{name}': allreduce splits the hidden dim only, so grid_dim must be "
                         f"(hidden_split, 1, 1); got {grid}")
    cols = (1, NOT_SPLIT, NOT_SPLIT)
    inputs = [Access("input", x, cols)]
    outputs = [Access("output", y, cols), Access("buffer", buf, (2, NOT_SPLIT, NOT_SPLIT), written=False)]
    check_splits(name, grid, inputs, outputs)
    # one rank: the sum of one term is the input itself
    checks = DEFAULT_CHECKS if pk.world_size > 1 else (FINITE, NONZERO)
    return Layer(name, "allreduce", grid, inputs, outputs, (x.dtype,), checks=checks, signal_role="buffer",
                 params={"world_size": pk.world_size})
