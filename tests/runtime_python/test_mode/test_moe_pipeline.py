"""A whole MoE block in test mode, every layer in one graph, against a vLLM-style torch_moe reference.

    logits = x @ W_gate^T                       linear_layer                     [B, E]
    (w, ids, mask) = route(logits)              moe_topk_softmax_routing_layer   (Qwen3-MoE)
                                                or moe_topk_sigmoid_routing_layer (DeepSeek-V3: bias,
                                                groups, routed_scaling_factor)
    h   = x @ W13[e]^T per routed (token, slot) moe_w13_linear_layer             [B, topk, 2I]
    a   = silu(h_gate) * h_up                   moe_silu_mul_layer               [B, topk, I]
    y   = a @ W2[e]^T                           moe_w2_linear_layer              [B, topk, H]
    out = sum_k w[:, k] y[:, k] + residual      moe_mul_sum_add_layer            [B, H]

Configurations (scaled down to seconds under the emulation; batch 5, a non-power-of-two number of tokens):
  qwen3_moe:   64 experts, topk 8, hidden 128, moe intermediate 64 (Qwen3-30B-A3B: 128, 8, 2048, 768);
  deepseek_v3: 64 experts in 8 groups, 4 groups kept, topk 8, routed_scaling_factor 2.5, a bias
               (DeepSeek-V3: 256 experts in 8 groups, 4 kept, topk 8, 2.5), hidden 128, intermediate 64;
bf16 and fp32, several workers and schedule jitter, expert strides of 3 (w13) and 5 (w2) over 2 and 4
column tiles. Checks:
  1. every layer against its folder's reference (tests/runtime_python/<layer>/pytorch_reference.py) on the
     kernel's own inputs, under that layer's budget; the routing indices and masks exactly;
  2. the block's output against torch_moe below (float64 from the graph inputs, the routing the kernel
     chose: a per-expert loop with masks, as vLLM's tests/kernels/moe torch_moe, independent of the
     kernels' scheme), within testing.tol_peer: the last layer's own budget plus twice the error of the
     same torch_moe computed in the kernel's dtype; in fp32 the routing from the float64 logits is the
     kernel's too;
  3. negative control: the reference with two experts' W2 swapped fails the block's output.
And MPK's fp8 path of the DeepSeek-V3 block (test_fp8_moe_block_matches_torch_moe_fp8): the experts' weights
e4m3 with power-of-two block scales, each expert GEMM's input quantized in the graph,

    (qx, sx) = quantize(x)                      quantize_fp8_layer(scale_ue8m0=False), blocks of 128
    h   = moe_w13_fp8(qx, sx, qW13, sW13)       moe_w13_fp8_layer                [B, topk, 2I]
    a   = silu(h_gate) * h_up                   moe_silu_mul_layer
    (qa, sa) = quantize(a)                      quantize_fp8_layer, blocks of 64 (K = I = 64)
    y   = moe_w2_fp8(qa, sa, qW2, sW2)          moe_w2_fp8_layer                 [B, topk, H]
    out = sum_k w[:, k] y[:, k] + residual      moe_mul_sum_add_layer

checked per layer on the kernel's own inputs (the codes bit for bit, the GEMMs against their dequantized
references), and the block against torch_moe_fp8 (float64 from the graph inputs, the activations quantized
as quantize_fp8 does, every scale read as UE8M0) within tol_peer; negative control: that reference with the
float32 scales read as they are fails. The activations' scales are not powers of two: the evidence line of
every output computed from an fp8 GEMM carries the UE8M0 note (layer, count, worst factor), the earlier
outputs none.

Run: python tests/runtime_python/test_mode/test_moe_pipeline.py   (or pytest this file)
"""
import os
import sys

import pytest
import torch

from mirage.mpk import testing
from mirage.mpk.layers.moe_w13_linear import moe_grid
from mirage.mpk.persistent_kernel import PersistentKernel

HERE = os.path.dirname(os.path.abspath(__file__))
REF = {k: testing.load_reference(os.path.join(HERE, "..", k, "x.py"))
       for k in ("linear", "moe_topk_softmax_routing", "moe_topk_sigmoid_routing", "moe_w13_linear",
                 "moe_silu_mul", "moe_w2_linear", "moe_mul_sum_add", "quantize_fp8", "moe_w13_fp8",
                 "moe_w2_fp8")}
# the evidence line's UE8M0 note as moe_w13_fp8's kernel tests check it (check_note)
W13_TEST = testing.load_reference(os.path.join(HERE, "..", "moe_w13_fp8", "_"), "test_moe_w13_fp8")
BLOCK = (128, 1, 1)
BATCH, HIDDEN, INTER, EXPERTS, TOPK = 5, 128, 64, 64, 8
SIGMOID = dict(num_groups=8, topk_group=4, routed_scaling_factor=2.5)
CONFIGS = ["qwen3_moe", "deepseek_v3"]
FP8_BLOCKS = (128, 64)      # the fp8 block's scale blocks: w13's K = HIDDEN, w2's K = INTER
DTYPES = [torch.bfloat16, torch.float32]


def weights(config: str, dtype):
    gen = testing.generator(offset=2200 + CONFIGS.index(config))
    t = dict(x=testing.randn((BATCH, HIDDEN), dtype, gen),
             w_gate=testing.randn((EXPERTS, HIDDEN), dtype, gen, scale=2 * HIDDEN ** -0.5),
             w13=testing.randn((EXPERTS, 2 * INTER, HIDDEN), dtype, gen, scale=HIDDEN ** -0.5),
             w2=testing.randn((EXPERTS, HIDDEN, INTER), dtype, gen, scale=INTER ** -0.5),
             residual=testing.randn((BATCH, HIDDEN), dtype, gen))
    if config == "deepseek_v3":
        t["bias"] = 0.1 * torch.randn(EXPERTS, generator=gen)
    return t


def torch_moe(x, w13, w2, topk_weight, topk_ids, residual, dtype=torch.float64):
    """The block from its inputs in `dtype` (float64: the reference; the kernel's dtype: the peer): for
    each expert, its tokens' gate/up, silu(gate) * up and down projection, scaled by the routing weight
    and added to the residual (fp32 weights, as the routing layers emit them)."""
    x, w13, w2 = x.to(dtype), w13.to(dtype), w2.to(dtype)
    out = residual.to(torch.float64).clone()
    for e in range(w13.shape[0]):
        tok, slot = (topk_ids == e).nonzero(as_tuple=True)
        if tok.numel() == 0:
            continue
        gate, up = (x[tok] @ w13[e].T).chunk(2, dim=-1)
        y = (torch.nn.functional.silu(gate) * up) @ w2[e].T
        out.index_add_(0, tok, y.double() * topk_weight[tok, slot, None].double())
    return out


def selection(ids: torch.Tensor) -> torch.Tensor:
    """routing_indices [E, B] (slot + 1) -> topk_ids [B, topk]."""
    e, b = ids.nonzero(as_tuple=True)
    out = torch.full((BATCH, TOPK), -1, dtype=torch.long)
    out[b, ids[e, b].long() - 1] = e
    return out


def build(config: str, dtype, jitter: int, output_dir=None):
    t = weights(config, dtype)
    pk = PersistentKernel(**testing.cpu_config(jitter_seed=jitter))
    d = {k: pk.attach_input(v, name=k) for k, v in t.items()}
    o = dict(logits=torch.zeros(BATCH, EXPERTS, dtype=dtype), topk_weight=torch.zeros(BATCH, TOPK),
             routing=torch.zeros(EXPERTS, BATCH, dtype=torch.int32),
             mask=torch.zeros(EXPERTS + 1, dtype=torch.int32),
             h=torch.zeros(BATCH, TOPK, 2 * INTER, dtype=dtype),
             a=torch.zeros(BATCH, TOPK, INTER, dtype=dtype),
             y=torch.zeros(BATCH, TOPK, HIDDEN, dtype=dtype), out=torch.zeros(BATCH, HIDDEN, dtype=dtype))
    d.update({k: pk.attach_input(v, name=k) for k, v in o.items()})
    pk.linear_layer(input=d["x"], weight=d["w_gate"], output=d["logits"], grid_dim=(4, 1, 1), block_dim=BLOCK)
    routed = (d["topk_weight"], d["routing"], d["mask"])
    one = dict(grid_dim=(1, 1, 1), block_dim=BLOCK)         # the routing layers run as one task (MPK's)
    if config == "qwen3_moe":
        pk.moe_topk_softmax_routing_layer(input=d["logits"], output=routed, **one)
    else:
        pk.moe_topk_sigmoid_routing_layer(input=d["logits"], bias=d["bias"], output=routed, **one, **SIGMOID)
    pk.moe_w13_linear_layer(input=d["x"], weight=d["w13"], moe_routing_indices=d["routing"],
                            moe_mask=d["mask"], output=d["h"], grid_dim=moe_grid(2, 3), block_dim=BLOCK)
    pk.moe_silu_mul_layer(input=d["h"], output=d["a"], grid_dim=(BATCH, 2, 1), block_dim=BLOCK)
    pk.moe_w2_linear_layer(input=d["a"], weight=d["w2"], moe_routing_indices=d["routing"], moe_mask=d["mask"],
                           output=d["y"], grid_dim=moe_grid(4, 5), block_dim=BLOCK)
    pk.moe_mul_sum_add_layer(input=d["y"], weight=d["topk_weight"], residual=d["residual"], output=d["out"],
                             grid_dim=(BATCH, 2, 1), block_dim=BLOCK)
    pk.compile(output_dir=output_dir)
    pk()
    return pk, t, o


def build_fp8(dtype, jitter: int, output_dir=None):
    """The DeepSeek-V3 block on MPK's fp8 path: the experts' weights e4m3 with power-of-two block scales
    (quantized offline, as MPK's DeepSeek builder requantizes them), the activations quantized in the
    graph by quantize_fp8_layer(scale_ue8m0=False) before each expert GEMM (blocks of 128 for w13's K =
    HIDDEN; of 64 for w2's K = INTER = 64, this project's extension)."""
    t = weights("deepseek_v3", dtype)
    fp8 = REF["moe_w13_fp8"]
    t["qw13"], t["sw13"] = fp8.quantize(t.pop("w13").float(), FP8_BLOCKS[0], pow2=True)
    t["qw2"], t["sw2"] = fp8.quantize(t.pop("w2").float(), FP8_BLOCKS[1], pow2=True)
    pk = PersistentKernel(**testing.cpu_config(jitter_seed=jitter))
    d = {k: pk.attach_input(v, name=k) for k, v in t.items()}
    e4m3 = torch.float8_e4m3fn
    o = dict(logits=torch.zeros(BATCH, EXPERTS, dtype=dtype), topk_weight=torch.zeros(BATCH, TOPK),
             routing=torch.zeros(EXPERTS, BATCH, dtype=torch.int32),
             mask=torch.zeros(EXPERTS + 1, dtype=torch.int32),
             qx=torch.zeros(BATCH, HIDDEN, dtype=e4m3), sx=torch.zeros(BATCH, HIDDEN // FP8_BLOCKS[0]),
             h=torch.zeros(BATCH, TOPK, 2 * INTER, dtype=dtype),
             a=torch.zeros(BATCH, TOPK, INTER, dtype=dtype),
             qa=torch.zeros(BATCH, TOPK, INTER, dtype=e4m3),
             sa=torch.zeros(BATCH, TOPK, INTER // FP8_BLOCKS[1]),
             y=torch.zeros(BATCH, TOPK, HIDDEN, dtype=dtype), out=torch.zeros(BATCH, HIDDEN, dtype=dtype))
    d.update({k: pk.attach_input(v, name=k) for k, v in o.items()})
    pk.linear_layer(input=d["x"], weight=d["w_gate"], output=d["logits"], grid_dim=(4, 1, 1), block_dim=BLOCK)
    routed = (d["topk_weight"], d["routing"], d["mask"])
    pk.moe_topk_sigmoid_routing_layer(input=d["logits"], bias=d["bias"], output=routed, grid_dim=(1, 1, 1),
                                      block_dim=BLOCK, **SIGMOID)
    pk.quantize_fp8_layer(input=d["x"], output_fp8=d["qx"], output_scale=d["sx"], grid_dim=(BATCH, 1, 1),
                          block_dim=BLOCK, scale_ue8m0=False, group_size=FP8_BLOCKS[0])
    route = dict(moe_routing_indices=d["routing"], moe_mask=d["mask"])
    pk.moe_w13_fp8_layer(input_fp8=d["qx"], input_scale=d["sx"], weight_fp8=d["qw13"], weight_scale=d["sw13"],
                         output=d["h"], grid_dim=moe_grid(2, 3), block_dim=BLOCK, **route)
    pk.moe_silu_mul_layer(input=d["h"], output=d["a"], grid_dim=(BATCH, 2, 1), block_dim=BLOCK)
    pk.quantize_fp8_layer(input=d["a"], output_fp8=d["qa"], output_scale=d["sa"], grid_dim=(BATCH, 1, 1),
                          block_dim=BLOCK, scale_ue8m0=False, group_size=FP8_BLOCKS[1])
    pk.moe_w2_fp8_layer(input_fp8=d["qa"], input_scale=d["sa"], weight_fp8=d["qw2"], weight_scale=d["sw2"],
                        output=d["y"], grid_dim=moe_grid(4, 5), block_dim=BLOCK, **route)
    pk.moe_mul_sum_add_layer(input=d["y"], weight=d["topk_weight"], residual=d["residual"], output=d["out"],
                             grid_dim=(BATCH, 2, 1), block_dim=BLOCK)
    pk.compile(output_dir=output_dir)
    pk()
    return pk, t, o


def check_quantized(label: str, x, q, s, group: int, pk) -> None:
    """quantize_fp8 on the kernel's own input: the scales within fp32's rounding of amax / 448, the codes
    bit for bit torch's e4m3 of x / s under the kernel's scales (tests/runtime_python/quantize_fp8)."""
    _, scale = REF["quantize_fp8"].quantize_fp8(x, group)
    testing.assert_close(f"{label} scales", s, scale, testing.tol_elementwise(torch.float32), pk=pk)
    exact = (x.float().unflatten(-1, (-1, group)) / s.unsqueeze(-1)).clamp(-448, 448).flatten(-2)
    testing.assert_equal(f"{label} codes (bits)", q.view(torch.uint8),
                         exact.to(torch.float8_e4m3fn).view(torch.uint8))


def check_layers_fp8(label: str, pk, dtype, t: dict, o: dict):
    """1: each layer on the kernel's own inputs, the fp8 GEMMs against their dequantized references."""
    scale = t["x"].double().abs() @ t["w_gate"].double().abs().T
    testing.assert_close(f"{label}.logits", o["logits"], REF["linear"].linear(t["x"], t["w_gate"]),
                         testing.tol_linear(dtype, HIDDEN, scale), pk=pk)
    w, ids, mask = REF["moe_topk_sigmoid_routing"].moe_topk_sigmoid_routing(o["logits"], t["bias"], TOPK,
                                                                            **SIGMOID)
    testing.assert_equal(f"{label}.routing (routing_indices)", o["routing"], ids)
    testing.assert_equal(f"{label}.mask", o["mask"], mask)
    testing.assert_close(f"{label}.topk_weight", o["topk_weight"], w,
                         testing.tol_normalization(torch.float32, TOPK, power=1, ops=8), pk=pk)
    check_quantized(f"{label}.qx (quantize_fp8)", t["x"], o["qx"], o["sx"], FP8_BLOCKS[0], pk)
    gemms = (("h (w13_fp8)", REF["moe_w13_fp8"], "qx", "sx", "qw13", "sw13", HIDDEN),
             ("y (w2_fp8)", REF["moe_w2_fp8"], "qa", "sa", "qw2", "sw2", INTER))
    for name, ref, xq, xs, wq, ws, k in gemms:
        if name.startswith("y"):
            testing.assert_close(f"{label}.a (silu_mul)", o["a"], REF["moe_silu_mul"].moe_silu_mul(o["h"]),
                                 testing.tol_elementwise(dtype), pk=pk)
            check_quantized(f"{label}.qa (quantize_fp8)", o["a"], o["qa"], o["sa"], FP8_BLOCKS[1], pk)
        xd, wd = ref.dequantize(o[xq], o[xs]), ref.dequantize(t[wq], t[ws])
        got, claimed = ref.moe_linear(xd, wd, o["routing"], TOPK)
        assert bool(claimed.all()), f"{label}: a (token, slot) no expert claims"
        bound = ref.moe_linear(xd.abs(), wd.abs(), o["routing"], TOPK)[0]
        testing.assert_close(f"{label}.{name}", o[name[0]], got, testing.tol_linear(dtype, k, bound), pk=pk)
    msa = REF["moe_mul_sum_add"]
    last = testing.tolerance(dtype, k=TOPK + 1, scale=msa.scale(o["y"], o["topk_weight"], t["residual"]),
                             ops=2)
    testing.assert_close(f"{label}.out (mul_sum_add)", o["out"],
                         msa.moe_mul_sum_add(o["y"], o["topk_weight"], t["residual"]), last, pk=pk)
    return last, int(mask[EXPERTS])


def torch_moe_fp8(t: dict, topk_weight, topk_ids, dtype=torch.float64):
    """The fp8 block from the graph inputs in `dtype` (float64: the reference; the kernel's dtype: the peer):
    the activations quantized per block as quantize_fp8 does (scale amax / 448, e4m3 codes), every code
    dequantized with its scale read as UE8M0 (the power of two below: the GEMMs' reading), then torch_moe's
    per-expert loop; the intermediates h and a rounded to `dtype`, as the graph holds them."""
    fp8 = REF["moe_w13_fp8"]

    def quantized(v, group):
        blocks = v.to(dtype).double().unflatten(-1, (-1, group))
        s = (blocks.abs().amax(-1).clamp_min(1e-10) / 448).float()
        q = (blocks / s.double().unsqueeze(-1)).clamp(-448, 448).flatten(-2).to(torch.float8_e4m3fn)
        return fp8.dequantize(q, s)
    x = quantized(t["x"], FP8_BLOCKS[0])
    w13, w2 = fp8.dequantize(t["qw13"], t["sw13"]), fp8.dequantize(t["qw2"], t["sw2"])
    out = t["residual"].to(torch.float64).clone()
    for e in range(w13.shape[0]):
        tok, slot = (topk_ids == e).nonzero(as_tuple=True)
        if tok.numel() == 0:
            continue
        gate, up = (x[tok] @ w13[e].T).to(dtype).double().chunk(2, dim=-1)
        a = (torch.nn.functional.silu(gate) * up).to(dtype)
        y = (quantized(a, FP8_BLOCKS[1]) @ w2[e].T).to(dtype)
        out.index_add_(0, tok, y.double() * topk_weight[tok, slot, None].double())
    return out


def check_block_fp8(dtype, tmp_path=None):
    label = (f"moe_pipeline[deepseek_v3_fp8,{str(dtype)[6:]},B={BATCH},E={EXPERTS},topk={TOPK},H={HIDDEN},"
             f"I={INTER},blocks={FP8_BLOCKS}]")
    pk, t, o = build_fp8(dtype, jitter=11 + DTYPES.index(dtype),
                         output_dir=None if tmp_path is None else str(tmp_path))
    last, active = check_layers_fp8(label, pk, dtype, t, o)
    ids = selection(o["routing"])
    expected, peer = torch_moe_fp8(t, o["topk_weight"], ids), torch_moe_fp8(t, o["topk_weight"], ids, dtype)
    tol = testing.tol_peer(peer, expected, last)
    testing.assert_close(f"{label}.out vs torch_moe_fp8 (float64, from the graph inputs)", o["out"], expected,
                         tol, pk=pk)
    # negative control: the reference reading the scales as they are (not as UE8M0) fails the block
    fp8 = REF["moe_w13_fp8"]
    saved = fp8.pow2_floor
    try:
        fp8.pow2_floor = lambda s: s.double()
        wrong = torch_moe_fp8(t, o["topk_weight"], ids)
    finally:
        fp8.pow2_floor = saved
    with pytest.raises(AssertionError, match="is not close"):
        testing.assert_close(f"{label}.out vs torch_moe_fp8 with the float32 scales as they are (control)",
                             o["out"], wrong, tol)
    testing.say(f"MOE {label}: {active} of {EXPERTS} experts activated, every layer and the block within "
                f"budget; the reference without UE8M0 scales rejected PASS")
    pk.finalize()
    return t, o


def check_layers(label: str, pk, config: str, dtype, t: dict, o: dict):
    """1: each layer on the kernel's own inputs."""
    scale = t["x"].double().abs() @ t["w_gate"].double().abs().T
    testing.assert_close(f"{label}.logits", o["logits"], REF["linear"].linear(t["x"], t["w_gate"]),
                         testing.tol_linear(dtype, HIDDEN, scale), pk=pk)
    if config == "qwen3_moe":
        w, ids, mask = REF["moe_topk_softmax_routing"].moe_topk_softmax_routing(o["logits"], TOPK)
        wtol = testing.tol_normalization(torch.float32, TOPK, power=1, ops=16)
    else:
        w, ids, mask = REF["moe_topk_sigmoid_routing"].moe_topk_sigmoid_routing(o["logits"], t["bias"], TOPK,
                                                                                **SIGMOID)
        wtol = testing.tol_normalization(torch.float32, TOPK, power=1, ops=8)
    testing.assert_equal(f"{label}.routing (routing_indices)", o["routing"], ids)
    testing.assert_equal(f"{label}.mask", o["mask"], mask)
    testing.assert_close(f"{label}.topk_weight", o["topk_weight"], w, wtol, pk=pk)
    active = int(mask[EXPERTS])
    assert 1 < active < EXPERTS, f"{label}: {active} activated experts: the case routes too little"
    w13 = REF["moe_w13_linear"].moe_w13_linear
    h, claimed = w13(t["x"], t["w13"], o["routing"], TOPK)
    assert bool(claimed.all()), f"{label}: a (token, slot) no expert claims"
    testing.assert_close(f"{label}.h (w13)", o["h"], h, testing.tol_linear(
        dtype, HIDDEN, w13(t["x"].abs(), t["w13"].abs(), o["routing"], TOPK)[0]), pk=pk)
    testing.assert_close(f"{label}.a (silu_mul)", o["a"], REF["moe_silu_mul"].moe_silu_mul(o["h"]),
                         testing.tol_elementwise(dtype), pk=pk)
    w2 = REF["moe_w2_linear"].moe_w2_linear
    y, scale = w2(o["a"], t["w2"], o["routing"])[0], w2(o["a"].abs(), t["w2"].abs(), o["routing"])[0]
    testing.assert_close(f"{label}.y (w2)", o["y"], y, testing.tol_linear(dtype, INTER, scale), pk=pk)
    msa = REF["moe_mul_sum_add"]
    scale = msa.scale(o["y"], o["topk_weight"], t["residual"])
    last = testing.tolerance(dtype, k=TOPK + 1, scale=scale, ops=2)
    testing.assert_close(f"{label}.out (mul_sum_add)", o["out"],
                         msa.moe_mul_sum_add(o["y"], o["topk_weight"], t["residual"]), last, pk=pk)
    return last, active


def check_block(config: str, dtype, tmp_path=None):
    label = f"moe_pipeline[{config},{str(dtype)[6:]},B={BATCH},E={EXPERTS},topk={TOPK},H={HIDDEN},I={INTER}]"
    pk, t, o = build(config, dtype, jitter=5 + CONFIGS.index(config) * 2 + DTYPES.index(dtype),
                     output_dir=None if tmp_path is None else str(tmp_path))
    last, active = check_layers(label, pk, config, dtype, t, o)
    ids = selection(o["routing"])
    if dtype == torch.float32:       # the kernel's choice is the float64 logits' choice too
        logits64 = t["x"].double() @ t["w_gate"].double().T
        ref_ids = (REF["moe_topk_softmax_routing"].moe_topk_softmax_routing(logits64, TOPK) if config ==
                   "qwen3_moe" else REF["moe_topk_sigmoid_routing"].moe_topk_sigmoid_routing(
                       logits64, t["bias"], TOPK, **SIGMOID))[1]
        testing.assert_equal(f"{label}.routing vs the float64 logits' routing", o["routing"], ref_ids)
    args = (t["x"], t["w13"], t["w2"], o["topk_weight"], ids, t["residual"])
    expected, peer = torch_moe(*args), torch_moe(*args, dtype=dtype)
    tol = testing.tol_peer(peer, expected, last)         # the last layer's own budget + 2 x the peer's
    testing.assert_close(f"{label}.out vs torch_moe (float64, from the graph inputs)", o["out"], expected,
                         tol)
    # negative control: a reference whose experts differ (two experts' down projections swapped)
    e0, e1 = int(o["mask"][0]), int(o["mask"][1])
    w2_swapped = t["w2"].clone()
    w2_swapped[[e0, e1]] = w2_swapped[[e1, e0]]
    wrong = torch_moe(t["x"], t["w13"], w2_swapped, o["topk_weight"], ids, t["residual"])
    with pytest.raises(AssertionError, match="is not close"):
        testing.assert_close(f"{label}.out vs torch_moe with experts {e0} and {e1}'s W2 swapped (control)",
                             o["out"], wrong, tol)
    testing.say(f"MOE {label}: {active} of {EXPERTS} experts activated, every layer and the block within "
                f"budget; the swapped-expert reference rejected PASS")
    pk.finalize()


@pytest.mark.parametrize("dtype", DTYPES, ids=[str(d)[6:] for d in DTYPES])
@pytest.mark.parametrize("config", CONFIGS)
def test_moe_block_matches_torch_moe(config, dtype, tmp_path):
    check_block(config, dtype, tmp_path)


@pytest.mark.parametrize("dtype", DTYPES, ids=[str(d)[6:] for d in DTYPES])
def test_fp8_moe_block_matches_torch_moe_fp8(dtype, tmp_path, capsys):
    t, o = check_block_fp8(dtype, tmp_path)
    # The activations' scales (amax / 448) are read as UE8M0: every output computed from a GEMM says so in
    # its evidence line, naming the GEMMs upstream of it with the worst factor of their scales; the outputs
    # before the first GEMM carry no note.
    printed = capsys.readouterr().out
    w13 = {"moe_w13_fp8_3": {"sx": o["sx"], "sw13": t["sw13"]}}     # layer names: kind_<index in the graph>
    both = w13 | {"moe_w2_fp8_6": {"sa": o["sa"], "sw2": t["sw2"]}}
    for select, layers in ((".logits", {}), (".qx (quantize_fp8) scales", {}), (".h (w13_fp8)", w13),
                           (".a (silu_mul)", w13), (".y (w2_fp8)", both), (".out (mul_sum_add)", both),
                           (".out vs torch_moe_fp8 (float64", both)):
        W13_TEST.check_note(printed, layers, select)


if __name__ == "__main__":
    for c in CONFIGS:
        for dt in DTYPES:
            check_block(c, dt)
    for dt in DTYPES:
        check_block_fp8(dt)
    print("All MoE pipeline cases PASS")
    sys.exit(0)
