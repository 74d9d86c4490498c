"""silu_mul_linear_with_residual_layer: y = (silu(gate) * up) @ W^T + residual, MPK's fused down projection.

input [B, 2I] = [gate | up] (whole halves, as MPK's kernel reads them: not silu_mul's per-task shuffle),
weight [N, I], residual [B, N] -> output [B, N]; grid.x splits N, the input is whole in every task.
h = silu(gate) * up is rounded to the dtype before the GEMM, as the unfused silu_mul -> linear chain (and
MPK's shared-memory tile of T) does. Residual on rank 0 only (MPK passes my_gpu_id == 0).
Kernel: csrc/tasks/silu_mul_linear_with_residual.cuh.
"""
from __future__ import annotations

from ..dtypes import FLOATS
from . import NOT_SPLIT, Access, Layer, check_grid, check_splits, check_tensor, storage
from .linear import mma_tensor_cores

TASK_TYPE = 105          # MPK's TASK_SILU_MUL_LINEAR_WITH_RESIDUAL
# Tensor parallelism, how the layer is split across ranks (mirage.mpk.testing.TP_KINDS): row-parallel, as
# MPK's down projection: rank r holds columns [r*I/W, (r+1)*I/W) of gate, of up and of W and computes a
# partial sum, the residual added on rank 0 only; an allreduce_layer after it sums the partials.
TP = "row"


def silu_mul_linear_with_residual_layer(pk, name: str, input, weight, residual, output, grid_dim,
                                        block_dim) -> Layer:
    grid = check_grid(name, grid_dim, block_dim)
    x = check_tensor(name, "input", input, ndim=2, dtype=FLOATS)
    batch, width = x.dims
    if width % 2:
        raise ValueError(f"layer '{name}': input '{x.name}' width {width} must be even ([gate | up])")
    w = check_tensor(name, "weight", weight, ndim=2, dtype=x.dtype)
    if w.dims[1] != width // 2:
        raise ValueError(f"layer '{name}': weight '{w.name}' is {w.dims} but input '{x.name}' is {x.dims}: "
                         f"weight must be [hidden, {width // 2}] (input is [gate | up])")
    n = w.dims[0]
    r = check_tensor(name, "residual", residual, dims=(batch, n), dtype=x.dtype)
    y = check_tensor(name, "output", output, dims=(batch, n), dtype=x.dtype)
    for role, t in (("input", x), ("weight", w)):
        if storage(t) & storage(y):
            raise ValueError(f"layer '{name}': output '{y.name}' shares storage with the {role} '{t.name}': "
                             f"every task reads whole {role} rows while others store outputs")
    if grid[1] != 1 or grid[2] != 1:
        raise ValueError(f"layer '{name}': grid_dim must be (hidden_split, 1, 1) as MPK's partition "
                         f"(grid.x splits hidden only), got {grid}")
    cols = (1, NOT_SPLIT, NOT_SPLIT)
    inputs = [Access("input", x, (NOT_SPLIT, NOT_SPLIT, NOT_SPLIT)),
              Access("weight", w, (0, NOT_SPLIT, NOT_SPLIT)), Access("residual", r, cols)]
    outputs = [Access("output", y, cols)]
    check_splits(name, grid, inputs, outputs)
    add_residual = int(pk.world_size == 1 or pk.mpi_rank == 0)
    tc = mma_tensor_cores(x)               # the GEMM on the tensor cores (linear.py: bf16 / fp16, 16+ rows)
    return Layer(name, "silu_mul_linear_with_residual", grid, inputs, outputs, (x.dtype,),
                 iparams=(add_residual, tc),
                 params={"add_residual": bool(add_residual), "tensor_cores": bool(tc)},
                 inplace={"output": ("residual",)})
