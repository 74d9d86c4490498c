"""moe_topk_softmax_routing_layer (MPK's name and arguments): the MoE router's top-k of a softmax.

input [batch, num_experts] router logits (bf16, fp16, fp32) -> output = (topk_weight [batch, topk]
float32, routing_indices [num_experts, batch] int32, masks [num_experts + 1] int32), as MPK's
topk_softmax_sm100 task (renormalize = true; the math: csrc/tasks/moe_topk_softmax_routing.cuh):
topk_weight[b] are the softmax probabilities of row b's topk largest logits, in descending order (equal
logits: the lower expert first), divided by their sum; routing_indices[e, b] = slot + 1 where token b
routes to expert e in top-k slot `slot`, 0 where it does not; masks[0..n-1] the n experts receiving at
least one token, ascending, masks[n..num_experts-1] = -1 and masks[num_experts] = n.
Partition map: MPK's, input and topk_weight by grid.x on dim 0, routing_indices and masks whole. MPK's
kernel routes the whole batch in one task (each task zeroes all of routing_indices and masks, and its
row count is the whole batch) and every MPK caller passes grid_dim (1, 1, 1): so one task, grid.x > 1
is refused (the masks list the experts of the whole batch; no cross-task order exists in a layer).
MPK also orders masks by atomics and zeroes the logits it read (docs/mpk_differences.md).
"""
from __future__ import annotations

from ..dtypes import FLOATS, float32, int32
from . import FINITE, NONZERO, NOT_SPLIT, Access, Layer, check_grid, check_splits, check_tensor

TASK_TYPE = 260          # MPK's TASK_MOE_TOPK_SOFTMAX_SM100
# Tensor parallelism (mirage.mpk.testing.TP_KINDS): every rank routes the same full (replicated) logits.
TP = "replicated"
MAX_EXPERTS = 4096       # the kernel keeps one int32 flag per expert in shared memory (16 KiB)


def check_routing(name: str, kind: str, input, output, grid_dim, block_dim):
    """The logits, the three outputs and the one-task grid; returns (grid, x, weight, indices, masks)."""
    grid = check_grid(name, grid_dim, block_dim)
    x = check_tensor(name, "input", input, ndim=2, dtype=FLOATS)
    batch, experts = x.dims
    if not isinstance(output, (tuple, list)) or len(output) != 3:
        raise ValueError(f"layer '{name}': output must be (topk_weight, routing_indices, masks), "
                         f"got {output!r}")
    w = check_tensor(name, "topk_weight", output[0], ndim=2, dims=(batch, None), dtype=float32)
    ri = check_tensor(name, "routing_indices", output[1], ndim=2, dims=(experts, batch), dtype=int32)
    m = check_tensor(name, "masks", output[2], ndim=1, dims=(experts + 1,), dtype=int32)
    topk = w.dims[1]
    if not 1 <= topk <= experts:
        raise ValueError(f"layer '{name}': tensor '{w.name}' (topk_weight) has topk={topk} columns; it "
                         f"must be 1 to num_experts={experts} (input '{x.name}' is {x.dims})")
    if experts > MAX_EXPERTS:
        raise ValueError(f"layer '{name}': tensor '{x.name}' (input) has {experts} experts; at most "
                         f"{MAX_EXPERTS} (one shared-memory flag each)")
    if grid != (1, 1, 1):
        raise ValueError(f"layer '{name}': {kind} routes the whole batch in one task (the masks list the "
                         f"experts of every token, as MPK's kernel does), so grid_dim must be (1, 1, 1); "
                         f"got {grid}")
    return grid, x, w, ri, m


def outputs_of(w, ri, m) -> list[Access]:
    rows = (0, NOT_SPLIT, NOT_SPLIT)
    whole = (NOT_SPLIT, NOT_SPLIT, NOT_SPLIT)
    return [Access("topk_weight", w, rows), Access("routing_indices", ri, whole), Access("masks", m, whole)]


def moe_topk_softmax_routing_layer(pk, name: str, input, output, grid_dim, block_dim) -> Layer:
    grid, x, w, ri, m = check_routing(name, "moe_topk_softmax_routing", input, output, grid_dim, block_dim)
    inputs = [Access("input", x, (0, NOT_SPLIT, NOT_SPLIT))]
    outputs = outputs_of(w, ri, m)
    check_splits(name, grid, inputs, outputs)
    return Layer(name, "moe_topk_softmax_routing", grid, inputs, outputs, (x.dtype,),
                 checks=(FINITE, NONZERO), params={"topk": w.dims[1]})
