"""linear_layer: y = x @ W^T with fp32 accumulation; grid.x splits N, grid.y splits rows.

input [B, K], weight [N, K] -> output [B, N]. Kernel: csrc/tasks/linear.cuh.
"""
from __future__ import annotations

from ..dtypes import FLOATS, bfloat16, float16, to_dtype
from . import NOT_SPLIT, Access, Layer, check_grid, check_splits, check_tensor, dim3, storage

TASK_TYPE = 120          # MPK's TASK_LINEAR
# Tensor parallelism, how the layer is split across ranks (mirage.mpk.testing.TP_KINDS): column-parallel, as
# MPK's qkv and gate/up projections: rank r holds rows [r*N/W, (r+1)*N/W) of W and computes those columns of
# the output; the input is whole.
TP = "column"


# The tensor-core path (csrc/tasks/mma_linear.cuh: mma.sync, ldmatrix, cp.async) for bf16 / fp16 layers of
# at least this many rows: there a GPU's GEMM is bound by its arithmetic, which the tensor cores multiply.
# Below it (decode) a GEMM streams its weight once for few rows, bound by memory bandwidth, where the SIMT
# GEMV is as fast; and the CPU emulation runs a tensor-core kernel about 6x slower than the SIMT one (each
# warp instruction is a rendezvous of 32 fibers: benchmarks/README.md), so decode-size tests stay fast.
# The choice is the layer's, one for all its tasks, so the bits do not depend on how the rows are split.
TENSOR_CORE_MIN_ROWS = 16


def uses_tensor_cores(dtype, rows: int) -> bool:
    """Whether a linear layer of this dtype (mirage or torch) and batch takes the tensor-core path."""
    return to_dtype(dtype) in (bfloat16, float16) and rows >= TENSOR_CORE_MIN_ROWS


def mma_tensor_cores(x) -> int:
    """The tensor_cores iparam of a layer that takes linear's mma.sync path but not its Hopper one (x
    computed by the kernel, or accumulated: rmsnorm_linear, silu_mul_linear_with_residual, splitk_linear),
    for its input x (checked, [B, K]): 1 or 0."""
    return int(uses_tensor_cores(x.dtype, x.dims[0]))


# The Hopper path (csrc/tasks/wgmma_linear.cuh: TMA into a ring of stages, wgmma) where the kernel is built
# for sm_90a: wgmma exists there only (Blackwell's tensor cores take tcgen05, which is not emulated: an
# sm_100 kernel keeps the mma.sync path). Its tensor maps, built by the runtime over each task's tiles:
# (box rows, box columns, swizzle bytes), the kernel's BN / BM x BK with the 128-byte swizzle.
WGMMA_CC = 90
WGMMA_BOXES = {"input": (16, 64, 128), "weight": (64, 64, 128)}


def tensor_cores(pk, name: str, block_dim, inputs: list[Access]) -> int:
    """The layer's tensor_cores iparam, for inputs [x, W, ...] (checked): 0 the SIMT GEMV, 1 mma.sync
    (csrc/tasks/mma_linear.cuh), 2 TMA + wgmma (csrc/tasks/wgmma_linear.cuh), which also asks the runtime
    for the tensor maps of x's and W's tiles (Access.tma). 2 needs a kernel for sm_90a: target_cc 90, or on
    the CPU backend without one, a 256-thread block (PersistentKernel.target_cc), and x's and W's rows
    contiguous, a multiple of 16 bytes apart. One choice per layer, so the bits do not depend on the split."""
    x, w = inputs[0].tensor, inputs[1].tensor
    if not uses_tensor_cores(x.dtype, x.dims[0]):
        return 0
    bx, by, bz = dim3(name, "block_dim", block_dim)
    cc = max(pk.target_cc, 90 if bx * by * bz > 128 else 0)
    rows_ok = all(t.strides[-1] == 1 and t.strides[0] * t.dtype.itemsize % 16 == 0 for t in (x, w))
    if cc != WGMMA_CC or not rows_ok:
        return 1
    for a in inputs[:2]:
        a.tma = WGMMA_BOXES[a.role]
    return 2


def linear_tensors(name: str, grid, input, weight, output, why: str):
    """(x, w, y) checked: x [B, K], w [N, K], y [B, N] of x's dtype, y apart from x and w (`why`: why the
    kernel cannot run in place), grid.z 1. Shared with linear_with_residual and splitk_linear."""
    x = check_tensor(name, "input", input, ndim=2, dtype=FLOATS)
    batch, k = x.dims
    w = check_tensor(name, "weight", weight, ndim=2, dtype=x.dtype)
    if w.dims[1] != k:
        raise ValueError(f"layer '{name}': weight '{w.name}' is {w.dims} but input '{x.name}' is "
                         f"{x.dims}: weight must be [out_features, {k}]")
    n = w.dims[0]
    y = check_tensor(name, "output", output, dims=(batch, n), dtype=x.dtype)
    for role, t in (("input", x), ("weight", w)):
        if storage(t) & storage(y):
            raise ValueError(f"layer '{name}': output '{y.name}' shares storage with the {role} '{t.name}': "
                             f"{why.format(role=role)}; write to another tensor")
    if grid[2] != 1:
        raise ValueError(f"layer '{name}': grid_dim.z must be 1, got {grid}")
    return x, w, y


def linear_accesses(name: str, grid, input, weight, output, extra=()) -> tuple[list, list]:
    """Shape rules shared with linear_with_residual_layer."""
    x, w, y = linear_tensors(name, grid, input, weight, output, "a linear cannot run in place (its kernel "
                             "reads whole {role} rows while other threads store outputs)")
    batch, n = y.dims
    inputs = [Access("input", x, (NOT_SPLIT, 0, NOT_SPLIT)), Access("weight", w, (0, NOT_SPLIT, NOT_SPLIT))]
    for role, t in extra:
        check_tensor(name, role, t, dims=(batch, n), dtype=x.dtype)
        inputs.append(Access(role, t, (1, 0, NOT_SPLIT)))
    outputs = [Access("output", y, (1, 0, NOT_SPLIT))]
    check_splits(name, grid, inputs, outputs)
    return inputs, outputs


def linear_layer(pk, name: str, input, weight, output, grid_dim, block_dim) -> Layer:
    grid = check_grid(name, grid_dim, block_dim)
    inputs, outputs = linear_accesses(name, grid, input, weight, output)
    tc = tensor_cores(pk, name, block_dim, inputs)
    return Layer(name, "linear", grid, inputs, outputs, (inputs[0].tensor.dtype,), iparams=(tc,),
                 params={"tensor_cores": bool(tc), "path": ("simt", "mma.sync", "tma+wgmma")[tc]})
