"""splitk_linear_layer: output += input @ weight^T, K split across grid.y, N across grid.x (MPK's).

input [B, K], weight [N, K], output [B, N] (read and written: it ACCUMULATES, as MPK's TMA reduce-add
does). Task (i, j) computes the fp32 partial sum of K slice j for column tile i and adds it into the
output tile atomically; the grid.y tasks of a tile all add into it (Access.shared = ACCUMULATE), in an
order the schedule decides (csrc/tasks/splitk_linear.cuh states what is deterministic). The output is
also an input of the layer, role "initial" (its value before the layer: the dependencies wait for its
producer, the kernel-level runs load it), declared in place. Kernel: csrc/tasks/splitk_linear.cuh.
"""
from __future__ import annotations

from . import ACCUMULATE, NOT_SPLIT, Access, Layer, check_grid, check_splits
from .linear import linear_tensors, mma_tensor_cores

TASK_TYPE = 163          # MPK's TASK_SPLITK_LINEAR_SWAPAB_HOPPER
# Tensor parallelism (mirage.mpk.testing.TP_KINDS): row-parallel, as MPK's models use it (qwen3 builder:
# o_proj and down_proj with use_splitk, input [B, hidden / world_size], weight [hidden, hidden /
# world_size], output [B, hidden]): rank r holds columns [r*K/W, (r+1)*K/W) of x and W and adds its
# partial sum into its own whole output; an allreduce after it sums the ranks'. The output's initial
# value (the residual) then belongs on one rank only (zeros elsewhere), or the sum counts it W times: the
# layer cannot know, so the caller decides (the test puts it on rank 0, as linear_with_residual does).
TP = "row"


def splitk_linear_layer(pk, name: str, input, weight, output, grid_dim, block_dim) -> Layer:
    grid = check_grid(name, grid_dim, block_dim)
    x, w, y = linear_tensors(name, grid, input, weight, output, "a split-K linear cannot run in place on "
                             "it (its tasks read whole {role} slices while others add into the output)")
    inputs = [Access("input", x, (NOT_SPLIT, 1, NOT_SPLIT)), Access("weight", w, (0, 1, NOT_SPLIT)),
              Access("initial", y, (1, NOT_SPLIT, NOT_SPLIT))]
    outputs = [Access("output", y, (1, NOT_SPLIT, NOT_SPLIT), shared=ACCUMULATE)]
    check_splits(name, grid, inputs, outputs)
    tc = mma_tensor_cores(x)
    return Layer(name, "splitk_linear", grid, inputs, outputs, (x.dtype,), iparams=(tc,),
                 params={"splits": grid[1], "tensor_cores": bool(tc)}, inplace={"output": ("initial",)})
