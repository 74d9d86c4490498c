"""moe_w13_linear_layer (MPK's name): the MoE gate/up projection, per routed (token, slot) one x @ W[e]^T.

input [batch, K], weight [num_experts, N, K] (N = 2 * intermediate, gate | up fused), moe_routing_indices
[num_experts, batch] int32 (slot + 1 where token t routes to expert e as its top-k choice `slot`, 0: not
routed), moe_mask [num_experts + 1] int32 (mask[0..n) the activated experts, mask[num_experts] = n)
-> output [batch, topk, N]: output[t, slot, :] = input[t] @ weight[e]^T for every (e, t) with
routing[e, t] = slot + 1; bf16, fp16, fp32, fp32 accumulation. Kernel: csrc/tasks/moe_w13_linear.cuh.
Grid, as MPK (src/kernel/runtime.cc: expert_offset = bid.x; task_register.cc: "X CTAs handle expert
distribution, Y CTAs split the N dimension"; persistent_kernel.py: weight map (-1, 1, -1), output
(-1, 2, -1)): grid.x is the expert stride, task x handling the activated experts mask[x], mask[x +
grid.x], ... (< mask[num_experts]; the stride is grid.x, iparams (x, grid.x)); grid.y splits the
weight's dim 1 and the output's dim 2 (columns). The grid.x tasks of a column tile share its output
tile (BY_REQUEST), each writing the rows of its experts' (token, slot) pairs (Layer.live, from the
routing tensors' data). (MPK's demo_30B_A3B.py grid (10, 12, 1) splits N = 2 x 768 = 1536 on one rank
into 12 tiles of 128; its test_mode/test_moe_w13_linear_testmode.py uses that grid with N = 5120, which
12 does not divide: refused here, as any split that does not divide its dim.) A (token, slot) that no
expert claims is written by no task and keeps what it held (test mode: its poison; the unwritten-element
check requires only the claimed ones). Routing the kernel cannot follow (mask count outside [0, E], an
expert id outside [0, E), an entry outside [0, topk]) fails the task (task_fail) before any access
outside the tensors.
"""
from __future__ import annotations

import torch

from ..dtypes import FLOATS, float8_e4m3, float32, int32
from . import BY_REQUEST, NOT_SPLIT, Access, Layer, check_grid, check_splits, check_tensor, storage
from .linear import uses_tensor_cores
from .linear_fp8 import tensor_cores as fp8_tensor_cores

TASK_TYPE = 254          # MPK's TASK_MOE_W13_LINEAR_SM100 (runtime_header.h)
# Tensor parallelism (mirage.mpk.testing.TP_KINDS): column-parallel, as MPK's MoE gate/up: rank r holds
# rows [r*N/W, (r+1)*N/W) of every expert's weight (dim -2 of [E, N, K]) and computes those output columns.
TP = "column"
EXPERT_AXIS, COLUMN_AXIS = 0, 1      # MPK: grid.x the expert stride, grid.y the column split
FP8_GROUPS = (64, 128)     # codes per float32 scale in the fp8 variants (MPK fixes 128; 64 as quantize_fp8's)
MAX_BATCH = 1024           # the kernels list an expert's (token, slot) pairs in shared memory


def moe_grid(column_tiles: int, expert_stride: int) -> tuple[int, int, int]:
    """The grid_dim of `column_tiles` column tiles and an expert stride of `expert_stride` tasks."""
    g = [1, 1, 1]
    g[COLUMN_AXIS], g[EXPERT_AXIS] = column_tiles, expert_stride
    return tuple(g)


def experts_of(mask: torch.Tensor, num_experts: int, first: int, stride: int) -> list[int]:
    """The experts a task handles: mask[first], mask[first + stride], ... below mask[num_experts], those
    inside [0, num_experts) (the kernel fails the task on any other)."""
    m = mask.cpu().long()
    count = min(max(int(m[num_experts]), 0), num_experts)
    return [e for e in m[first:count:stride].tolist() if 0 <= e < num_experts]


def moe_linear_parts(name: str, input, weight, moe_routing_indices, moe_mask, output, grid_dim, block_dim,
                     *, w2: bool, input_scale=None, weight_scale=None, target_cc: int = 0) -> dict:
    """The checks, partition map and live parts of the four MoE expert linears (moe_w13_linear, moe_w2_linear
    and their fp8 variants, layers/moe_w13_fp8.py), as the Layer's arguments after its name and kind; w2:
    input [batch, topk, K], one row per (token, slot). With input_scale and weight_scale (fp8): input and
    weight are e4m3 codes, the scales float32 [..., K / G] beside them (G in FP8_GROUPS), split as their
    codes are, and the output any float dtype; the roles take MPK's fp8 keywords (input_fp8, ...). target_cc:
    the kernel's (the fp8 variants' tensor cores need sm_89)."""
    fp8 = input_scale is not None
    x_role, w_role = ("input_fp8", "weight_fp8") if fp8 else ("input", "weight")
    grid = check_grid(name, grid_dim, block_dim)
    x = check_tensor(name, x_role, input, ndim=3 if w2 else 2, dtype=float8_e4m3 if fp8 else FLOATS)
    batch, k = x.dims[0], x.dims[-1]
    w = check_tensor(name, w_role, weight, ndim=3, dtype=x.dtype)
    experts, n = w.dims[0], w.dims[1]
    if w.dims[2] != k:
        raise ValueError(f"layer '{name}': {w_role} '{w.name}' is {w.dims} but {x_role} '{x.name}' is "
                         f"{x.dims}: {w_role} must be [num_experts, out_features, {k}]")
    scales = []
    if fp8:
        blocks = check_tensor(name, "input_scale", input_scale, ndim=len(x.dims), dtype=float32).dims[-1]
        group = k // blocks if blocks and k % blocks == 0 else None
        if group not in FP8_GROUPS:
            raise ValueError(f"layer '{name}': input_scale '{input_scale.name}' has {blocks} scales per row "
                             f"of {x_role} '{x.name}' {x.dims}: one float32 scale per block of "
                             f"{' or '.join(map(str, FP8_GROUPS))} codes, so K / {FP8_GROUPS[-1]} = "
                             f"{k / FP8_GROUPS[-1]:g} or K / {FP8_GROUPS[0]} = {k / FP8_GROUPS[0]:g}")
        for role, t, of in (("input_scale", input_scale, x), ("weight_scale", weight_scale, w)):
            want = (*of.dims[:-1], k // group)
            s = check_tensor(name, role, t, ndim=len(want), dtype=float32)
            if s.dims != want:
                raise ValueError(f"layer '{name}': {role} '{s.name}' is {s.dims}, expected {want} (one scale "
                                 f"per {group} codes of '{of.name}' {of.dims}, as input_scale)")
            scales.append(s)
    r = check_tensor(name, "moe_routing_indices", moe_routing_indices, ndim=2, dtype=int32)
    if r.dims != (experts, batch):
        raise ValueError(f"layer '{name}': moe_routing_indices '{r.name}' is {r.dims}, expected "
                         f"[num_experts, batch] = ({experts}, {batch}) ({w_role} '{w.name}' has {experts} "
                         f"experts, {x_role} '{x.name}' {batch} tokens)")
    m = check_tensor(name, "moe_mask", moe_mask, ndim=1, dtype=int32)
    if m.dims != (experts + 1,):
        raise ValueError(f"layer '{name}': moe_mask '{m.name}' has {m.dims[0]} entries, expected "
                         f"num_experts + 1 = {experts + 1} (the activated experts, then their count)")
    y = check_tensor(name, "output", output, ndim=3, dtype=FLOATS if fp8 else x.dtype)
    topk = y.dims[1]
    want = (batch, x.dims[1] if w2 else None, n)
    if y.dims[0] != batch or y.dims[2] != n or (w2 and topk != x.dims[1]):
        raise ValueError(f"layer '{name}': output '{y.name}' is {y.dims}, expected [batch, topk, "
                         f"out_features] = {tuple('topk' if d is None else d for d in want)} ({x_role} "
                         f"'{x.name}' {x.dims}, {w_role} '{w.name}' {w.dims})")
    reads = [(x_role, x), (w_role, w), *zip(("input_scale", "weight_scale"), scales),
             ("moe_routing_indices", r), ("moe_mask", m)]
    for role, t in reads:
        if storage(t) & storage(y):
            raise ValueError(f"layer '{name}': output '{y.name}' shares storage with the {role} '{t.name}'; "
                             f"write to another tensor")
    if grid[2] != 1:
        raise ValueError(f"layer '{name}': grid_dim.z must be 1, got {grid}")
    if batch > MAX_BATCH:
        raise ValueError(f"layer '{name}': batch {batch} is over {MAX_BATCH}, the tokens whose (token, slot) "
                         f"list the kernel keeps in shared memory per expert")
    # linear's rule (bf16 / fp16 from 16 tokens, csrc/tasks/mma_linear.cuh; fp8 from 16 tokens on an sm_89+
    # target, mma_fp8.cuh), one choice for every task
    tc = fp8_tensor_cores(name, batch, block_dim, target_cc) if fp8 else \
        int(uses_tensor_cores(x.dtype, batch))
    cols = [NOT_SPLIT] * 3
    cols[COLUMN_AXIS] = 1
    inputs = [Access(x_role, x), Access(w_role, w, tuple(cols))]
    if fp8:     # MPK's order: input_fp8, input_scale, weight_fp8, weight_scale, routing, mask
        inputs = [inputs[0], Access("input_scale", scales[0]), inputs[1],
                  Access("weight_scale", scales[1], tuple(cols))]
    inputs += [Access("moe_routing_indices", r), Access("moe_mask", m)]
    cols[COLUMN_AXIS] = 2
    outputs = [Access("output", y, tuple(cols), shared=BY_REQUEST)]
    check_splits(name, grid, inputs, outputs)
    stride = grid[EXPERT_AXIS]

    def live(meta: dict, coord) -> dict:
        """The (token, slot) rows task `coord` writes, the weights and input rows it reads, from the routing
        tensors' data (an entry outside [1, topk] claims nothing: the kernel fails the task on it)."""
        ids = experts_of(m.data, experts, coord[EXPERT_AXIS], stride)
        routing = r.data.cpu().long()
        rows = torch.zeros(batch, topk, dtype=torch.bool, device="cpu")
        for e in ids:
            tok = ((routing[e] >= 1) & (routing[e] <= topk)).nonzero().flatten()
            rows[tok, routing[e, tok] - 1] = True
        used = torch.zeros(experts, dtype=torch.bool, device="cpu")
        used[ids] = True
        read = rows[:, :, None] if w2 else rows.any(1)[:, None]
        parts = {"output": rows[:, :, None].expand(y.dims), x_role: read.expand(x.dims),
                 w_role: used[:, None, None].expand(w.dims)}
        if fp8:
            parts["input_scale"] = read.expand(scales[0].dims)
            parts["weight_scale"] = used[:, None, None].expand(scales[1].dims)
        return parts

    return dict(grid=grid, inputs=inputs, outputs=outputs, template=(y.dtype,), live=live,
                task_iparams=lambda c: (c[EXPERT_AXIS], stride, tc),
                params={"num_experts": experts, "topk": topk, "expert_stride": stride,
                        "tensor_cores": bool(tc), **({"group_size": k // scales[0].dims[-1]} if fp8 else {})})


def moe_w13_linear_layer(pk, name: str, input, weight, moe_routing_indices, moe_mask, output, grid_dim,
                         block_dim) -> Layer:
    parts = moe_linear_parts(name, input, weight, moe_routing_indices, moe_mask, output, grid_dim, block_dim,
                             w2=False)
    return Layer(name, "moe_w13_linear", **parts)
