"""moe_topk_sigmoid_routing_layer (MPK's name and arguments): DeepSeek-V3's grouped sigmoid router.

input [batch, num_experts] router logits (bf16, fp16, fp32), bias [num_experts] float32 (the
e_score_correction_bias) -> output = (topk_weight [batch, topk] float32, routing_indices [num_experts,
batch] int32, masks [num_experts + 1] int32), as MPK's topk_sigmoid_sm100 task (the math:
csrc/tasks/moe_topk_sigmoid_routing.cuh): s = sigmoid(x) and the fp32 selection score s + bias; each
of num_groups groups of consecutive experts scores the sum of its two best selection scores; the
topk_group best groups are kept; the topk best experts of those (descending, equal scores: the lower
expert, as for groups) get topk_weight = s / (sum of their s + 1e-20) * routed_scaling_factor.
routing_indices and masks as moe_topk_softmax_routing's (1-indexed slots; the activated experts
ascending, -1 after them, their count last).
Partition map: MPK's, input and topk_weight by grid.x on dim 0, bias, routing_indices and masks whole;
one task, grid.x > 1 refused, as moe_topk_softmax_routing (its module says why).
"""
from __future__ import annotations

import math

from ..dtypes import float32
from . import FINITE, NONZERO, NOT_SPLIT, Access, Layer, check_splits, check_tensor
from .moe_topk_softmax_routing import check_routing, outputs_of

TASK_TYPE = 280          # MPK's TASK_MOE_TOPK_SIGMOID_SM100
# Tensor parallelism (mirage.mpk.testing.TP_KINDS): every rank routes the same full (replicated) logits.
TP = "replicated"
# A kernel that ignored routed_scaling_factor would scale by 1.
SCALARS = {"routed_scaling_factor": 1.0}
MAX_GROUPS = 32          # one lane per group (the kernel's group choice is a warp ballot)


def moe_topk_sigmoid_routing_layer(pk, name: str, input, bias, output, grid_dim, block_dim,
                                   num_groups: int = 8, topk_group: int = 4,
                                   routed_scaling_factor: float = 2.5) -> Layer:
    grid, x, w, ri, m = check_routing(name, "moe_topk_sigmoid_routing", input, output, grid_dim, block_dim)
    experts, topk = x.dims[1], w.dims[1]
    b = check_tensor(name, "bias", bias, ndim=1, dims=(experts,), dtype=float32)
    for what, v in (("num_groups", num_groups), ("topk_group", topk_group)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"layer '{name}': {what} must be a positive int, got {v!r}")
    if experts % num_groups or num_groups > MAX_GROUPS or experts // num_groups < 2:
        raise ValueError(f"layer '{name}': num_groups={num_groups} must divide num_experts={experts} (input "
                         f"'{x.name}' {x.dims}) into groups of at least 2 experts (a group scores its best "
                         f"two), and be at most {MAX_GROUPS}")
    if topk_group > num_groups:
        raise ValueError(f"layer '{name}': topk_group={topk_group} is more than num_groups={num_groups}")
    per_group = experts // num_groups
    if topk > topk_group * per_group:
        raise ValueError(f"layer '{name}': tensor '{w.name}' (topk_weight) has topk={topk} columns, more "
                         f"than the {topk_group * per_group} experts of topk_group={topk_group} groups of "
                         f"{per_group}")
    if not isinstance(routed_scaling_factor, (int, float)) or isinstance(routed_scaling_factor, bool) \
            or not math.isfinite(routed_scaling_factor):
        raise ValueError(f"layer '{name}': routed_scaling_factor must be a finite number, got "
                         f"{routed_scaling_factor!r}")
    inputs = [Access("input", x, (0, NOT_SPLIT, NOT_SPLIT)), Access("bias", b)]
    outputs = outputs_of(w, ri, m)
    check_splits(name, grid, inputs, outputs)
    scale = float(routed_scaling_factor)
    return Layer(name, "moe_topk_sigmoid_routing", grid, inputs, outputs, (x.dtype,), fparams=(scale,),
                 iparams=(num_groups, topk_group), checks=(FINITE, NONZERO), scalars=dict(SCALARS),
                 params={"topk": topk, "num_groups": num_groups, "topk_group": topk_group,
                         "routed_scaling_factor": scale})
