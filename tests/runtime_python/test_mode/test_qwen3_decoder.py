"""A whole Qwen3 decoder in test mode (mirage.mpk.models.qwen3.build) against Hugging Face transformers.

The model: transformers.Qwen3ForCausalLM from a small Qwen3Config (2 layers, 4 query heads over 2 KV heads,
head_dim 64, q/k norm, RoPE, untied LM head, vocab 256, hidden 128, intermediate 256), seeded random weights
(norm weights perturbed away from 1 so a skipped norm weight shows), no hub download. One test-mode pass of
a prefill batch laid out by init_kernel + prepare_next_batch from the tokens / prompt_lengths / step meta
tensors, pages of 4 (requests span pages): 3 requests of 5, 3 and 8 tokens filling the 16 rows (fp32 and
bf16), and, with tied embeddings, 2 requests of 7 and 2 tokens in 16 rows and 3 slots (fp32: the rows past
the batch keep attention's NaN poison, an empty slot's attention tasks do nothing). Checks:
  1. input_tokens is the batch's prompts in slot order (the admission rule, test_meta_tensors.py);
  2. per layer, the tight check: each layer's output against its reference applied to the kernel's own
     inputs, the reference being the HF model's own submodule in float64 (input_layernorm, o_proj, act_fn,
     ...) or, for attention, the paged-attention reference of tests/runtime_python/paged_attention (which
     gives tol_attention's scales); each with its mirage.mpk.testing budget. The QKV and gate/up references
     pack the HF weights by hand (torch.cat per KV head, per silu_mul group), so the builder's shuffles are
     checked independently; each layer's KV caches after the pass (the new K within tol_qk_norm_rope, V bit
     for bit, every other slot still zero); output_tokens is torch.argmax of the kernel's logits, exactly;
  3. against the HF model run on the same tokens (each request alone; forward hooks capture every
     intermediate): each intermediate against HF in float64 within testing.tol_peer (the layer's own budget
     plus twice the error HF itself makes in the kernel's dtype: FlashAttention's criterion for what a
     chain inherits), a DRIFT line beside HF in the kernel's dtype, and in fp32 the argmax token ids equal
     HF's exactly for every row;
  4. negative controls (fp32): a broken silu_mul kernel (testing.mutated_kernel), a runtime fault (one
     element of layer 1's o_proj output nudged by 1e-3, mirage.mpk.faults), and the builder's RoPE
     tables shifted by one position (the attention reference takes HF's own tables), each named by
     first_divergence as the first bad layer; HF's layer-1 q_norm 1% off fails the HF comparison there.

Run: python tests/runtime_python/test_mode/test_qwen3_decoder.py   (or pytest this file)
"""
import copy
import os
import sys
import time

import pytest
import torch

from mirage.mpk import testing
from mirage.mpk.faults import Fault
from mirage.mpk.layers import FINITE
from mirage.mpk.layers.linear import uses_tensor_cores
from mirage.mpk.layers.paged_attention import tensor_core_rows
from mirage.mpk.models import qwen3
from mirage.mpk.persistent_kernel import PersistentKernel

transformers = pytest.importorskip("transformers")
# tests/runtime_python/paged_attention/pytorch_reference.py (load_reference takes a file in its folder)
attn_ref = testing.load_reference(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                               "paged_attention", "test_paged_attention.py"))

PAGE, MAX_SEQ, SLOTS, PAGES, ROWS = 4, 16, 3, 8, 16       # ROWS = max_num_batched_tokens
# (prompt lengths, tied embeddings): 16 of 16 rows in 3 slots; 9 rows of 16 in 2 of the 3 slots (the rows
# past the batch keep attention's NaN poison, and the NaN rows that follow from it, on both sides)
CASES = {"untied": ((5, 3, 8), False), "tied_slack": ((7, 2), True)}
EXACT = testing.Tolerance(0.0, 0.0, "a copy: bit-exact")
CONFIG = dict(vocab_size=256, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, head_dim=64, rms_norm_eps=1e-6,
              max_position_embeddings=64, tie_word_embeddings=False, attn_implementation="eager")


def hf_model(dtype, tied=False, **config):
    """The seeded model of CONFIG (with `config`'s overrides): the same weights in every process."""
    gen = testing.generator(offset=2100)
    with torch.random.fork_rng():
        torch.manual_seed(testing.seed() + 2100)
        model = transformers.Qwen3ForCausalLM(transformers.Qwen3Config(**{**CONFIG,
                                                                           "tie_word_embeddings": tied,
                                                                           **config}))
    with torch.no_grad():
        for name, prm in model.named_parameters():
            if "norm" in name:
                prm.copy_(1.0 + 0.2 * torch.randn(prm.shape, generator=gen))
    return model.to(dtype).eval()


def tokens(prompts):
    gen = testing.generator(offset=2101)
    t = torch.zeros(len(prompts), MAX_SEQ, dtype=torch.int64)
    for r, n in enumerate(prompts):
        t[r, :n] = torch.randint(0, CONFIG["vocab_size"], (n,), generator=gen)
    return t


def run(dtype, case="untied", mutate=None, output_dir=None, fault=None):
    prompts, tied = CASES[case]
    model, toks = hf_model(dtype, tied), tokens(prompts)
    meta = {"tokens": toks.clone(), "prompt_lengths": torch.tensor(prompts, dtype=torch.int32),
            "step": torch.zeros(len(prompts), dtype=torch.int32)}
    pk = PersistentKernel(**testing.cpu_config(
        jitter_seed=21, max_seq_length=MAX_SEQ, max_num_batched_tokens=ROWS, max_num_batched_requests=SLOTS,
        max_num_pages=PAGES, page_size=PAGE, meta_tensors=meta, fault=fault))
    t = qwen3.build(pk, model)
    if mutate is not None:
        mutate(t)
    pk.compile(output_dir=output_dir)
    caches_before = {k: v.clone() for k, v in t.items() if k.endswith("_cache")}
    pk()
    return pk, model, toks, t, caches_before


def abs_product(x, w):
    return x.double().abs() @ w.double().abs().T


@torch.no_grad()
def references(pk, model, t, caches_before, dtype):
    """{output name: (reference, tolerance)} per layer, each from the kernel's own inputs (float64)."""
    m64 = copy.deepcopy(model).double()
    cfg, hidden = model.config, CONFIG["hidden_size"]
    hq, hkv, d = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    k = {n: v.double() for n, v in t.items() if v.is_floating_point()}
    # the RoPE tables as HF computes them (fp32, then the activations' dtype), not the builder's
    cos, sin = (x[0].to(dtype) for x in model.model.rotary_emb(torch.zeros(1), torch.arange(MAX_SEQ)[None]))
    meta = {n: pk.get_tensor(n) for n in ("qo_indptr_buffer", "paged_kv_indptr_buffer",
                                          "paged_kv_indices_buffer", "paged_kv_last_page_len_buffer")}
    ids, table = t["input_tokens"], m64.model.embed_tokens.weight
    ok = (ids >= 0) & (ids < table.shape[0])              # an id outside the vocabulary: a zero row
    ref = {"embed_out": (torch.where(ok[:, None], table[ids.clamp(0, table.shape[0] - 1)], 0.0), EXACT)}
    batch = int(pk.get_tensor("num_new_tokens")[0])

    def linear(x, w, resid=None):
        y, scale, kk = x @ w.T, abs_product(x, w), x.shape[1]
        if resid is not None:
            y, scale, kk = y + resid, scale + resid.abs(), kk + 1
        # (a batch of 16+ rows takes the tensor cores: layers/linear.py uses_tensor_cores)
        return y, testing.tol_linear(dtype, kk, scale, tensor_cores=uses_tensor_cores(dtype, x.shape[0]))

    h = "embed_out"
    for i, layer in enumerate(m64.model.layers):
        n, at, mlp = f"layers_{i}_", layer.self_attn, layer.mlp
        with torch.no_grad():
            ref[n + "input_norm"] = (layer.input_layernorm(k[h]), testing.tol_rmsnorm(dtype, hidden))
            w = [p.weight.view(hkv, -1, hidden) for p in (at.q_proj, at.k_proj, at.v_proj)]
            w_qkv = torch.cat(w, dim=1).reshape(-1, hidden)         # per KV head [G q heads | K | V]
            ref[n + "qkv"] = linear(k[n + "input_norm"], w_qkv)
            full = attn_ref.attention(t[n + "qkv"], caches_before[n + "k_cache"],
                                      caches_before[n + "v_cache"], meta, hq, at.q_norm.weight,
                                      at.k_norm.weight, cos, sin)
            # rows past the batch: no attention task writes them (test mode's NaN poison stays)
            full["out"][batch:] = float("nan")
            tc = tensor_core_rows(dtype, meta["qo_indptr_buffer"], hq // hkv, full["out"].shape[0])
            ref[n + "attn"] = (full["out"], testing.tol_attention(dtype, d, full["keys"], full["value_scale"],
                                                                  full["score_scale"], full["score_var"],
                                                                  tensor_cores=tc[:, None]))
            # the caches after the layer: each request's new K (normed, roped) and V in its pages, the rest
            # as before (zeros): K within tol_qk_norm_rope (0 where nothing was written), V bit for bit
            kc, vc, k_scale, _ = attn_ref.write_cache(caches_before[n + "k_cache"],
                                                      caches_before[n + "v_cache"], meta, full["new"])
            ref[n + "k_cache"] = (kc, testing.tol_qk_norm_rope(dtype, d, k_scale))
            ref[n + "v_cache"] = (vc, EXACT)
            ref[n + "attn_residual"] = linear(k[n + "attn"], at.o_proj.weight, k[h])
            ref[n + "post_norm"] = (layer.post_attention_layernorm(k[n + "attn_residual"]),
                                    testing.tol_rmsnorm(dtype, hidden))
            g = groups(pk, n)
            wg, wu = (p.weight.view(g, -1, hidden) for p in (mlp.gate_proj, mlp.up_proj))
            ref[n + "gate_up"] = linear(k[n + "post_norm"], torch.cat([wg, wu], dim=1).reshape(-1, hidden))
            gu = k[n + "gate_up"].view(ROWS, g, 2, -1)
            gate, up = gu[:, :, 0].reshape(ROWS, -1), gu[:, :, 1].reshape(ROWS, -1)
            ref[n + "silu_mul"] = (mlp.act_fn(gate) * up, testing.tol_elementwise(dtype))
            ref[n + "out"] = linear(k[n + "silu_mul"], mlp.down_proj.weight, k[n + "attn_residual"])
        h = n + "out"
    with torch.no_grad():
        ref["final_norm"] = (m64.model.norm(k[h]), testing.tol_rmsnorm(dtype, hidden))
        ref["logits"] = linear(k["final_norm"], m64.lm_head.weight)
    ref["output_tokens"] = (t["logits"].double().argmax(-1, keepdim=True).double(), EXACT)
    return ref


def groups(pk, prefix):
    """The silu_mul tasks of the layer (the gate/up shuffle's num_groups)."""
    return next(lay.grid[0] for lay in pk.layers
                if lay.kind == "silu_mul" and any(a.tensor.name == prefix + "silu_mul" for a in lay.outputs))


def hf_activations(model, toks, prompts):
    """The HF model on each request's prompt alone (same dtype), forward hooks on every module we compare:
    {our name: [rows, ...]} concatenated in the batch's row order."""
    acts: dict[str, list] = {}

    def keep(name, what="out"):
        def hook(mod, args, out):
            acts.setdefault(name, []).append((args[0] if what == "in" else
                                              out[0] if isinstance(out, tuple) else out)[0].detach())
        return hook
    hooks = [model.model.embed_tokens.register_forward_hook(keep("embed_out")),
             model.model.norm.register_forward_hook(keep("final_norm")),
             model.lm_head.register_forward_hook(keep("logits"))]
    for i, layer in enumerate(model.model.layers):
        n = f"layers_{i}_"
        hooks += [layer.input_layernorm.register_forward_hook(keep(n + "input_norm")),
                  layer.self_attn.o_proj.register_forward_hook(keep(n + "o_proj")),
                  layer.self_attn.o_proj.register_forward_hook(keep(n + "attn", "in")),
                  layer.post_attention_layernorm.register_forward_hook(keep(n + "post_norm")),
                  layer.post_attention_layernorm.register_forward_hook(keep(n + "attn_residual", "in")),
                  layer.mlp.down_proj.register_forward_hook(keep(n + "silu_mul", "in")),
                  layer.register_forward_hook(keep(n + "out"))]
    try:
        with torch.no_grad():
            for r, n in enumerate(prompts):
                model(input_ids=toks[r:r + 1, :n], use_cache=False)
    finally:
        for hk in hooks:
            hk.remove()
    return {k: torch.cat(v) for k, v in acts.items()}


def check_against_hf(label, t, ref, model, toks, prompts):
    """Every intermediate HF's hooks give, against HF run in float64 on the same tokens (each request alone):
    within the layer's own budget plus twice the upstream error HF itself makes in the kernel's dtype
    (testing.tol_peer); a DRIFT line beside HF in that dtype. Returns HF's activations in that dtype."""
    n, dtype = sum(prompts), next(model.parameters()).dtype
    hf = hf_activations(model, toks, prompts)
    hf64 = hf_activations(copy.deepcopy(model).double(), toks, prompts)
    for name in (k for k in hf if k in t):
        local = ref[name][1]
        local = testing.Tolerance(local.atol[:n] if isinstance(local.atol, torch.Tensor) else local.atol,
                                  local.rtol, local.why)
        testing.assert_close(f"{label}.{name} vs HF float64 run", t[name][:n], hf64[name],
                             testing.tol_peer(hf[name], hf64[name], local))
        diff = (t[name][:n].double() - hf[name].double()).abs().max()
        testing.say(f"DRIFT {label}.{name} vs HF {str(dtype)[6:]} run: max_abs={float(diff):.3e} "
                    f"(max |HF| {float(hf[name].double().abs().max()):.3e}; vs HF float64: kernel "
                    f"{float((t[name][:n].double() - hf64[name]).abs().max()):.3e}, HF "
                    f"{float((hf[name].double() - hf64[name]).abs().max()):.3e})")
    return hf


def check_pass(dtype, case="untied", output_dir=None):
    t0 = time.perf_counter()
    prompts, tied = CASES[case]
    pk, model, toks, t, before = run(dtype, case, output_dir=output_dir)
    t1 = time.perf_counter()
    label = f"qwen3_decoder[{str(dtype)[6:]},2 layers,{CONFIG['num_attention_heads']}q" \
            f"{CONFIG['num_key_value_heads']}kv,prompts={list(prompts)},{'tied' if tied else 'untied'}]"
    n = sum(prompts)
    # tied: the LM head is the embedding table itself (no second copy attached)
    assert ("lm_head_weight" in t) != tied and ("model_embed_tokens_weight" in t), sorted(t)
    laid_out = torch.cat([toks[r, :k] for r, k in enumerate(prompts)])
    testing.assert_equal(f"{label}.input_tokens[:{n}]", t["input_tokens"][:n], laid_out)
    testing.assert_equal(f"{label}.num_new_tokens", pk.get_tensor("num_new_tokens"), [n])
    ref = references(pk, model, t, before, dtype)
    for name, (expected, tol) in ref.items():
        actual = t[name]
        if name == "output_tokens":
            testing.assert_equal(f"{label}.{name}", actual.view(-1), expected.long().view(-1))
            continue
        # every row (past the batch: NaN on both sides, or the zero / stale rows before attention), then
        # the batch's rows finite and nontrivial
        testing.assert_close(f"{label}.{name}", actual, expected, tol, pk=pk)
        rows = (slice(None) if name.endswith("_cache") else slice(0, n))
        testing.check_nonvacuous(f"{label}.{name}[batch]", actual[rows], (FINITE,),
                                 reference=expected[rows])
    hf = check_against_hf(label, t, ref, model, toks, prompts)
    hf_ids, ids = hf["logits"].argmax(-1), t["output_tokens"].view(-1)[:n]
    same = int((hf_ids == ids).sum())
    testing.say(f"TOKENS {label}: {same}/{n} argmax ids equal HF's")
    if dtype == torch.float32:
        testing.assert_equal(f"{label}.output_tokens[:{n}] vs HF argmax", ids, hf_ids)
    pk.finalize()
    testing.say(f"TIMING {label}: build+compile+run {t1 - t0:.1f} s, checks {time.perf_counter() - t1:.1f} s")
    return pk


PASSES = [(torch.float32, "untied"), (torch.bfloat16, "untied"), (torch.float32, "tied_slack")]


@pytest.mark.parametrize("dtype,case", PASSES, ids=[f"{str(d)[6:]}-{c}" for d, c in PASSES])
def test_qwen3_decoder_matches_hf(dtype, case, tmp_path):
    check_pass(dtype, case, output_dir=str(tmp_path))


def first_bad(mutate=None, fault=None):
    pk, model, _, t, before = run(torch.float32, mutate=mutate, fault=fault)
    ref = references(pk, model, t, before, torch.float32)
    ref.pop("output_tokens")
    report = testing.first_divergence(pk, {n: r for n, (r, _) in ref.items()},
                                      {n: tol for n, (_, tol) in ref.items()})
    pk.finalize()
    testing.say(f"DIVERGENCE {report}")
    assert report is not None
    return report.splitlines()


def test_broken_silu_mul_kernel_names_its_layer(tmp_path):
    """silu_mul's kernel with its denominator 1 + e made 1 + 1.001 e (a relative error of about 2.5e-4 for
    negative gates, far outside fp32's budget): the report names layer 0's silu_mul, the layers before it
    agree (both layers' silu_mul run the broken kernel; the first in program order is named)."""
    with testing.mutated_kernel(tmp_path, "silu_mul.cuh", "(tail ? 1.0f : 1.0f + e)",
                                "(tail ? 1.0f : 1.0f + 1.001f * e)"):
        lines = first_bad()
    assert "'silu_mul_7' (the 9 compared output(s) before it agree)" in lines[0], lines
    assert "output 'layers_0_silu_mul'" in lines[1], lines


def test_injected_fault_names_its_layer():
    """A runtime fault (mirage.mpk.faults: one element of one task's output tile of layer 1's o_proj
    linear_with_residual nudged by 1e-3 after its kernel ran): the report names that layer, everything
    before it agrees."""
    lines = first_bad(fault=Fault("perturb", "linear_with_residual_12", (1, 0, 0), amount=1e-3))
    assert "'linear_with_residual_12' (the 16 compared output(s) before it agree)" in lines[0], lines
    assert "output 'layers_1_attn_residual'" in lines[1], lines


def test_drift_check_catches_a_model_the_kernel_does_not_run():
    """Negative control of the HF comparison: the kernel's pass against HF with layer 1's q_norm weight
    1% larger (a change the per-layer references, built from the kernel's own inputs, never see): the first
    intermediate it moves, layer 1's attention, is outside testing.tol_peer's budget."""
    pk, model, toks, t, before = run(torch.float32)
    ref = references(pk, model, t, before, torch.float32)
    other = copy.deepcopy(model)
    with torch.no_grad():
        other.model.layers[1].self_attn.q_norm.weight.mul_(1.01)
    with pytest.raises(AssertionError, match=r"layers_1_attn vs HF float64 run' is not close"):
        check_against_hf("qwen3_decoder[control: HF's q_norm x1.01]", t, ref, other, toks, CASES["untied"][0])
    pk.finalize()
    testing.say("CAUGHT HF's layer-1 q_norm x1.01: layers_1_attn outside tol_peer, the intermediates before "
                "it within")


def test_builder_refuses_another_norm_eps():
    """paged attention's q/k norm eps is fixed at 1e-6: a model with another rms_norm_eps is refused by name
    at build time, not run with a silently different q/k norm."""
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = transformers.Qwen3ForCausalLM(transformers.Qwen3Config(**{**CONFIG, "rms_norm_eps": 1e-5}))
    pk = PersistentKernel(**testing.cpu_config(max_seq_length=MAX_SEQ, max_num_batched_tokens=ROWS,
                                               max_num_batched_requests=SLOTS, max_num_pages=PAGES,
                                               page_size=PAGE))
    with pytest.raises(ValueError, match=r"rms_norm_eps=1e-05; paged attention's q/k norm uses eps 1e-06"):
        qwen3.build(pk, model)
    pk.finalize()
    testing.say("REFUSED qwen3.build with rms_norm_eps=1e-5: named, before any layer PASS")


WRONG_ROPE = {          # name: (the mutation, the outputs before the first bad one, that output)
    # the table of position p + 1 at p: attention's output cannot see it in a prefill (RoPE is relative:
    # every q . k keeps its angle), the keys stored in the cache do
    "shifted": (lambda t: [t[k].copy_(torch.roll(t[k], -1, dims=0)) for k in ("rope_cos", "rope_sin")],
                4, "layers_0_k_cache"),
    # tables of another rope_theta (1e6, Qwen3-8B's, for this config's 1e4): the output moves
    "theta": (lambda t: [t[k].copy_(x) for k, x in zip(
        ("rope_cos", "rope_sin"), attn_ref.rope_tables(MAX_SEQ, CONFIG["head_dim"], torch.float32, 1e6))],
              3, "layers_0_attn"),
}


@pytest.mark.parametrize("wrong", list(WRONG_ROPE))
def test_wrong_rope_table_names_the_first_attention(wrong):
    """The builder's RoPE tables replaced after build (the attention reference takes HF's own tables): the
    first paged attention is the first bad layer (the outputs before it agree: embed, norm, qkv; the shifted
    table's attention output too)."""
    mutate, before, output = WRONG_ROPE[wrong]
    lines = first_bad(mutate=mutate)
    assert f"'paged_attention_3' (the {before} compared output(s) before it agree)" in lines[0], lines
    assert f"output '{output}'" in lines[1], lines


if __name__ == "__main__":
    for dt, c in PASSES:
        check_pass(dt, c)
    print("All Qwen3 decoder cases PASS")
    sys.exit(0)
