"""rmsnorm_linear_layer: y = rmsnorm(x, w_norm) @ W^T, fused; fp32 math; grid.x splits N (W rows, y columns);
bf16 / fp16 from 16 rows on the tensor cores (linear.py's TENSOR_CORE_MIN_ROWS).

input [B, K], weight_norm [K], weight_linear [N, K] -> output [B, N]. Kernel: csrc/tasks/rmsnorm_linear.cuh.
"""
from __future__ import annotations

from ..dtypes import FLOATS
from . import NOT_SPLIT, Access, Layer, check_grid, check_splits, check_tensor, storage
from .linear import mma_tensor_cores

TASK_TYPE = 102          # MPK's TASK_RMS_NORM_LINEAR
# Tensor parallelism (mirage.mpk.testing.TP_KINDS): column-parallel, as MPK's fused qkv projection: rank r
# holds rows [r*N/W, (r+1)*N/W) of weight_linear and computes those columns of the output; every rank
# normalizes the whole input with the whole weight_norm.
TP = "column"
# eps -> the value a kernel that ignored it would in effect use (Layer.scalars), as rmsnorm_layer.
SCALARS = {"eps": 0.0}
MAX_BATCH = 1024         # the kernel keeps one fp32 1/rms per row in shared memory (4 KiB after the linear's)


def rmsnorm_linear_layer(pk, name: str, input, weight_norm, weight_linear, output, grid_dim, block_dim,
                         eps: float = 1e-6) -> Layer:
    grid = check_grid(name, grid_dim, block_dim)
    x = check_tensor(name, "input", input, ndim=2, dtype=FLOATS)
    batch, hidden = x.dims
    wn = check_tensor(name, "weight_norm", weight_norm, dims=(hidden,), dtype=x.dtype)
    w = check_tensor(name, "weight_linear", weight_linear, ndim=2, dtype=x.dtype)
    if w.dims[1] != hidden:
        raise ValueError(f"layer '{name}': weight_linear '{w.name}' is {w.dims} but input '{x.name}' is "
                         f"{x.dims}: weight_linear must be [out_features, {hidden}]")
    y = check_tensor(name, "output", output, dims=(batch, w.dims[0]), dtype=x.dtype)
    for role, t in (("input", x), ("weight_norm", wn), ("weight_linear", w)):
        if storage(t) & storage(y):
            raise ValueError(f"layer '{name}': output '{y.name}' shares storage with the {role} '{t.name}': "
                             f"the fused kernel reads whole {role} rows while other tasks store outputs; "
                             f"write to another tensor")
    if grid[1] != 1 or grid[2] != 1:
        raise ValueError(f"layer '{name}': rmsnorm_linear splits only the output features, so grid_dim "
                         f"must be (n_split, 1, 1); got {grid}")
    if batch > MAX_BATCH:
        raise ValueError(f"layer '{name}': batch {batch} is over {MAX_BATCH}, the rows whose 1/rms the "
                         f"kernel keeps in shared memory")
    if not (isinstance(eps, (int, float)) and not isinstance(eps, bool) and eps > 0):
        raise ValueError(f"layer '{name}': eps must be a positive number, got {eps!r}")
    inputs = [Access("input", x), Access("weight_norm", wn),
              Access("weight_linear", w, (0, NOT_SPLIT, NOT_SPLIT))]
    outputs = [Access("output", y, (1, NOT_SPLIT, NOT_SPLIT))]
    check_splits(name, grid, inputs, outputs)
    tc = mma_tensor_cores(x)      # linear's rule (bf16 / fp16 from 16 rows), one choice for every task
    return Layer(name, "rmsnorm_linear", grid, inputs, outputs, (x.dtype,), iparams=(tc,),
                 fparams=(float(eps),), params={"eps": float(eps), "tensor_cores": bool(tc)},
                 scalars=dict(SCALARS))
