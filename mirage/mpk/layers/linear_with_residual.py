"""linear_with_residual_layer: y = x @ W^T + residual (residual on rank 0 only if world_size > 1).

input [B, K], weight [N, K], residual [B, N] -> output [B, N]; grid.x splits N.
Kernel: csrc/tasks/linear_with_residual.cuh.
"""
from __future__ import annotations

from . import Layer, check_grid
from .linear import linear_accesses

TASK_TYPE = 108          # MPK's TASK_LINEAR_WITH_RESIDUAL


def linear_with_residual_layer(pk, name: str, input, weight, residual, output, grid_dim,
                               block_dim) -> Layer:
    grid = check_grid(name, grid_dim, block_dim)
    inputs, outputs = linear_accesses(name, grid, input, weight, output, extra=[("residual", residual)])
    add_residual = int(pk.world_size == 1 or pk.mpi_rank == 0)
    return Layer(name, "linear_with_residual", grid, inputs, outputs, (inputs[0].tensor.dtype,),
                 iparams=(add_residual,), params={"add_residual": bool(add_residual)})
