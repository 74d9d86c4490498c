"""linear_with_residual_layer: y = x @ W^T + residual (residual on rank 0 only if world_size > 1).

input [B, K], weight [N, K], residual [B, N] -> output [B, N]; grid.x splits N.
Kernel: csrc/tasks/linear_with_residual.cuh.
"""
from __future__ import annotations

from . import Layer, check_grid
from .linear import linear_accesses, tensor_cores

TASK_TYPE = 108          # MPK's TASK_LINEAR_WITH_RESIDUAL
# Tensor parallelism, how the layer is split across ranks (mirage.mpk.testing.TP_KINDS): row-parallel, as
# MPK's o and down projections: rank r holds columns [r*K/W, (r+1)*K/W) of x and W and computes a partial
# sum, the residual added on rank 0 only; an allreduce_layer after it sums the partials.
TP = "row"


def linear_with_residual_layer(pk, name: str, input, weight, residual, output, grid_dim,
                               block_dim) -> Layer:
    grid = check_grid(name, grid_dim, block_dim)
    inputs, outputs = linear_accesses(name, grid, input, weight, output, extra=[("residual", residual)])
    add_residual = int(pk.world_size == 1 or pk.mpi_rank == 0)
    tc = tensor_cores(pk, name, block_dim, inputs)
    return Layer(name, "linear_with_residual", grid, inputs, outputs, (inputs[0].tensor.dtype,),
                 iparams=(add_residual, tc),
                 params={"add_residual": bool(add_residual), "tensor_cores": bool(tc),
                         "path": ("simt", "mma.sync", "tma+wgmma")[tc]},
                 inplace={"output": ("residual",)})
