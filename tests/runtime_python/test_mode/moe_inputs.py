"""Shared by the MoE layers' tests (tests/runtime_python/moe_*/): their inputs, the expert routing in
MPK's layout, and the steps of a test that repeat from layer to layer. Functions and the expert linears'
shared controls only: every folder keeps its own cases, budgets and checks, and a new layer edits nothing
here.

  route, routed_inputs   routing [E, B] (slot + 1, 0: not routed) and mask [E + 1]; the expert linears'
                         x, W and routing on one generator seeded from the shape
  spoil, BAD_ROUTING     routing the kernel cannot follow, and the message that must name it
  expert_linear          moe_w13_linear_layer / moe_w2_linear_layer (one kernel) on named tensors, and
                         what the two layers' tests share: run_expert_kernel, CONTROLS, refuses,
                         bad_routing_fails, check_claimed (test mode: unclaimed rows still poisoned)
  slot_weights           the combine's routing weights (softmax, some slots 0)
  routing_outputs        the routing layers' three outputs (topk_weight, routing_indices, masks)
  graph                  one layer in test mode, built and compiled (the test's cpu_config)

Loaded by path: `moe = testing.load_reference(os.path.join(os.path.dirname(__file__), "../test_mode/x.py"),
name="moe_inputs")`.
"""
import pytest
import torch

from mirage.mpk import testing
from mirage.mpk.layers.moe_w13_linear import moe_grid
from mirage.mpk.persistent_kernel import PersistentKernel
from mirage.mpk.poisons import is_poison

# ---- routing ---------------------------------------------------------------------------------


def route(batch: int, experts: int, topk: int, gen: torch.Generator, kind: str = "topk"):
    """(routing [E, B], mask [E + 1]) int32 in MPK's layout: kind "topk": each token's topk distinct
    experts drawn at random; "one": every token to expert experts // 2 + 1 in slot 0 (the other slots
    unclaimed); "hole": topk, then token 0's last slot unclaimed. mask: the experts with tokens in
    increasing order, then zeros, their count last."""
    routing = torch.zeros(experts, batch, dtype=torch.int32)
    for t in range(batch):
        if kind == "one":
            routing[experts // 2 + 1, t] = 1
            continue
        chosen = torch.randperm(experts, generator=gen)[:topk]
        routing[chosen, t] = torch.arange(1, topk + 1, dtype=torch.int32)
    if kind == "hole":
        routing[routing[:, 0] == topk, 0] = 0
    active = (routing > 0).any(1).nonzero().flatten()
    mask = torch.zeros(experts + 1, dtype=torch.int32)
    mask[:active.numel()] = active.int()
    mask[experts] = active.numel()
    return routing, mask


def routed_inputs(dtype, rows: tuple, k: int, n: int, experts: int, topk: int, kind: str, x_stride=None,
                  offset: int = 0):
    """(x [*rows, K], W [E, N, K], routing, mask) for an expert linear (rows: (B,) for w13, (B, topk) for
    w2), drawn in that order from one generator seeded from the shape (+ offset): the same on every
    rank. x_stride: x the column block [K, 2K) of rows x_stride wide (its row stride is not K)."""
    gen = testing.generator(offset=rows[0] * 100003 + k * 1009 + n * 7 + experts + offset)
    x = testing.randn((*rows, x_stride or k), dtype, gen)
    x = x if x_stride is None else x[..., k:2 * k]
    w = testing.randn((experts, n, k), dtype, gen, scale=k ** -0.5)
    return (x, w, *route(rows[0], experts, topk, gen, kind))


BAD_ROUTING = [("count", "moe_mask\\[num_experts\\]"), ("expert", "names an expert outside"),
               ("slot", "moe_routing_indices entry is outside")]


def spoil(routing: torch.Tensor, mask: torch.Tensor, what: str, entry: int = 0) -> None:
    """Routing the kernel cannot follow, in place (topk 2): "count" E + 1 activated experts, one more
    than there are; "expert" the activated expert at mask[entry] (-1: the last one) made expert id E;
    "slot" the first activated expert's largest entry made 3 (slot 3 of topk 2)."""
    experts = mask.numel() - 1
    if what == "count":
        mask[experts] = experts + 1
    elif what == "expert":
        mask[entry if entry >= 0 else int(mask[experts]) + entry] = experts
    else:
        routing[int(mask[0]), routing[int(mask[0])].argmax()] = 3


# ---- the expert linears: moe_w13_linear and moe_w2_linear, one kernel (csrc/tasks/moe_w13_linear.cuh)


def expert_linear(layer: str, grid_dim, block_dim=(128, 1, 1)):
    """layer_call(pk, t) adding `layer` ("moe_w13_linear" / "moe_w2_linear") on tensors named x, w,
    routing, mask and out (testing.run_tasks' form; graph's too)."""
    return lambda pk, t: getattr(pk, f"{layer}_layer")(
        input=t["x"], weight=t["w"], moe_routing_indices=t["routing"], moe_mask=t["mask"], output=t["out"],
        grid_dim=grid_dim, block_dim=block_dim)


# the kernel's own mutations (both layers' negative controls): each task then writes outside its tiles
CONTROLS = [
    ("for (int64_t a = first; a < count; a += stride)", "for (int64_t a = first; a < count; a += 1)",
     "ignores the expert stride"),
    ("f(t, s - 1);", "f(t, s < topk ? s : 0);", "writes slot + 1"),
]


def run_expert_kernel(layer: str, reference, dtype, x, w, routing, mask, topk: int, grid, coords,
                      target_cc: int):
    """testing.run_tasks over the layer's tasks (grid: (column tiles, expert stride)), then the evidence
    against reference(x, w, routing) -> (y, claimed) under tol_linear (K fp32 terms, relative to
    sum_k |x w|; 2K on the tensor cores). The unclaimed rows are no task's live part, so never compared
    (run.check covers the tasks' live tiles)."""
    out = torch.zeros(x.shape[0], topk, w.shape[1], dtype=dtype)
    run = testing.run_tasks(expert_linear(layer, moe_grid(*grid), testing.worker_block_dim(target_cc)),
                            {"x": x, "w": w, "routing": routing, "mask": mask, "out": out}, coords=coords,
                            target_cc=target_cc)
    expected, scale = reference(x, w, routing)[0], reference(x.abs(), w.abs(), routing)[0]
    tol = testing.tol_linear(dtype, x.shape[-1], scale, tensor_cores=run.layer.params["tensor_cores"])
    run.check("out", expected, tol, inputs=(x, w))
    return run


def refuses(layer: str, change: dict, message: str, x=(3, 64), w=(8, 16, 64), routing=(8, 3), mask=(9,),
            out=(3, 2, 16), grid=(1, 2, 1), dtype=torch.bfloat16, index=torch.int32) -> None:
    """The layer on zero tensors of these shapes, `change` applied, raises a ValueError naming it and
    `message`."""
    s = {**dict(x=x, w=w, routing=routing, mask=mask, out=out, grid=grid, dtype=dtype, index=index), **change}
    dtypes = {"x": s["dtype"], "w": s["dtype"], "routing": s["index"], "mask": s["index"], "out": s["dtype"]}
    pk = PersistentKernel(**testing.cpu_config())
    with pytest.raises(ValueError, match=f"layer '{layer}_0': .*" + message):
        expert_linear(layer, s["grid"])(pk, {name: pk.attach_input(torch.zeros(s[name], dtype=d), name=name)
                                             for name, d in dtypes.items()})
    pk.finalize()


def poisoned(out: torch.Tensor) -> torch.Tensor:
    """[B, topk]: the (token, slot) rows still wholly holding test mode's poison."""
    bits = out.view({2: torch.int16, 4: torch.int32}[out.element_size()])
    return is_poison(bits, out.dtype).all(-1)


def check_claimed(name: str, pk, out, expected, claimed, tol, inputs) -> None:
    """Test mode: the unclaimed (token, slot) rows must hold the poison (no task wrote them), then are set
    to the reference's zeros (in the attached tensor, after the run); then the evidence of every row."""
    assert bool(poisoned(out)[~claimed].all()), f"{name}: a (token, slot) no expert claims was written"
    out[~claimed] = 0
    testing.check_output(name, out, expected, tol, pk.layers[0].checks, inputs, pk=pk)


def bad_routing_fails(layer: str, x_shape: tuple, what: str, message: str, output_dir: str) -> None:
    """spoil(..., what, entry=-1) on 3 tokens, 8 experts, topk 2: the generated code fails the task by
    name, and the memory-safe test mode (guarded copies: red zones, guard pages) finds no access outside
    a tensor: an MPKRuntimeError, no MPKMemoryError."""
    from mirage.mpk.errors import MPKMemoryError, MPKRuntimeError
    gen = testing.generator(offset=5)
    routing, mask = route(3, 8, 2, gen)
    spoil(routing, mask, what, entry=-1)
    x = testing.randn(x_shape, torch.bfloat16, gen)
    tensors = {"x": x, "w": testing.randn((8, 16, 64), torch.bfloat16, gen), "routing": routing, "mask": mask,
               "out": torch.zeros(3, 2, 16, dtype=torch.bfloat16)}
    pk = graph(testing.cpu_config(jitter_seed=1), expert_linear(layer, moe_grid(2, 3)), tensors, output_dir)
    with pytest.raises(MPKRuntimeError, match=message) as info:
        pk()
    assert not isinstance(info.value, MPKMemoryError)
    pk.finalize()


# ---- the combine and the routers ---------------------------------------------------------------


def slot_weights(batch: int, topk: int, gen: torch.Generator) -> torch.Tensor:
    """[batch, topk] softmax weights (float32, as the routing gives), the last slot of every other token
    0 (ignored, and no slack in a budget relative to sum_k |w_k x_k|)."""
    w = torch.softmax(testing.randn((batch, topk), torch.float32, gen), dim=1)
    if topk > 1:
        w[::2, -1] = 0.0
    return w


def routing_outputs(batch: int, experts: int, topk: int, fill=0) -> tuple:
    """The routing layers' outputs, each filled with `fill` (test mode: garbage, 77, so an unwritten
    element fails): (topk_weight [batch, topk] fp32, routing_indices [E, batch], masks [E + 1] int32)."""
    return (torch.full((batch, topk), float(fill)), torch.full((experts, batch), fill, dtype=torch.int32),
            torch.full((experts + 1,), fill, dtype=torch.int32))


# ---- test mode -----------------------------------------------------------------------------------


def graph(config: dict, layer_call, tensors: dict, output_dir=None) -> PersistentKernel:
    """One layer in test mode: PersistentKernel(**config) (the test's testing.cpu_config(jitter_seed=...,
    **world.params): several workers, schedule jitter, the rank's world), then layer_call(pk, t) on
    `tensors` attached under their names, in order (testing.run_tasks' form), compiled into output_dir.
    The caller runs it (pk()), checks and finalizes."""
    pk = PersistentKernel(**config)
    layer_call(pk, {name: pk.attach_input(v, name=name) for name, v in tensors.items()})
    pk.compile(output_dir=output_dir)
    return pk
