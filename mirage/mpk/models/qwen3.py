"""build(pk, hf_model): one prefill/decode pass of a Hugging Face Qwen3ForCausalLM declared on `pk`.

The graph, per MPK's Qwen3 builder (semantics only): embed (token ids from the `input_tokens` meta tensor)
-> per layer [rmsnorm -> QKV linear -> paged attention (q/k RMSNorm, RoPE, the layer's KV cache) -> o_proj
linear with residual -> rmsnorm -> gate/up linear -> silu_mul -> down linear with residual] -> final rmsnorm
-> LM head linear -> argmax (or, given sampling_seed, sampling_sm100) into the `output_tokens` meta tensor.
`pk` is the caller's (its kernel params and meta tensors); rows are max_num_batched_tokens, the batch
prepare_next_batch lays out. On world_size > 1 ranks (tensor parallelism, `shard`): each rank holds its KV
heads' QKV rows, cache heads and attention, its gate/up rows, and the matching o_proj / down_proj columns,
whose partial sums (the residual on rank 0 only) an allreduce_layer adds into the same activation names;
the embedding, norms, LM head and the draw are replicated, so every rank emits the same tokens.

Weights come from hf_model's state dict, cast to `dtype` (default: the model's) and attached; the layouts the
kernels need are built here: the fused QKV weight per KV head [its G query heads | K | V] (paged_attention's
packing) and the gate/up weight interleaved per silu_mul task, both with pk.shuffle_tensors; cos/sin tables
[max_seq_length, head_dim] from hf_model's own rotary embedding; tied embeddings reuse the embedding table as
the LM head. The KV caches [max_num_pages, page_size, Hkv, head_dim] per layer are allocated (zeros) here.
paged_attention's q/k norm eps is fixed at 1e-6 (layers/paged_attention.py EPS): a config with another
rms_norm_eps is refused. Every tensor is on the model's device. Returns {name: torch tensor} of every
weight (its state dict key, '_' for '.'), cache and activation (also pk.get_tensor(name)): embed_out, then
per layer i `layers_{i}_` + input_norm, qkv, attn, k_cache, v_cache, attn_residual (the hidden state after
attention), post_norm, gate_up, silu_mul, out (the layer's output), then final_norm, logits, rope_cos,
rope_sin, input_tokens and output_tokens (the meta tensors; output_tokens as its [batch, 1] view); on several
ranks the weights are this rank's shards and each row-parallel output X has its partial sum X_partial.

generate(hf_model, prompts, max_new_tokens, **kernel_params): decode outside test mode (the runtime's offline
loop: one pk() runs passes until every request ends; decode_kernel and generated are its two halves), greedy
unless sampling_seed is given; world_size / mpi_rank (under mpirun) shard it as above.
"""
from __future__ import annotations

import torch

from ..layers.paged_attention import EPS as ATTN_EPS


def _grid(n: int, want: int) -> int:
    """The largest divisor of n that is at most want (a split the layers accept)."""
    return max(d for d in range(1, min(n, want) + 1) if n % d == 0)


def shard(state_dict: dict, cfg, rank: int, world_size: int) -> dict[str, torch.Tensor]:
    """Rank `rank`'s slice of every weight for tensor parallelism over world_size ranks, as MPK's models:
    q/k/v_proj rows of its KV heads [rank*Hkv/W, (rank+1)*Hkv/W) and their query heads, gate/up_proj rows
    [rank*I/W, (rank+1)*I/W) (column-parallel), o_proj and down_proj the matching columns (row-parallel);
    everything else (embedding, norms, LM head) whole. A layout the split cannot give is refused by name."""
    hq, hkv, inter = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.intermediate_size
    if hkv % world_size or inter % world_size:
        raise ValueError(f"qwen3.build: world_size={world_size} must divide num_key_value_heads={hkv} and "
                         f"intermediate_size={inter} (each rank holds whole KV heads and their query groups)")
    d = getattr(cfg, "head_dim", None) or cfg.hidden_size // hq

    def part(n: int, unit: int) -> slice:          # rank's block of n rows in units of `unit` rows
        per = n // world_size * unit
        return slice(rank * per, (rank + 1) * per)
    rows = {"q_proj": part(hq, d), "k_proj": part(hkv, d), "v_proj": part(hkv, d),
            "gate_proj": part(inter, 1), "up_proj": part(inter, 1)}
    cols = {"o_proj": part(hq, d), "down_proj": part(inter, 1)}
    out = {}
    for key, w in state_dict.items():
        proj = key.split(".")[-2] if key.startswith("model.layers.") else ""
        w = w[rows[proj]] if proj in rows else w[:, cols[proj]] if proj in cols else w
        out[key] = w.contiguous()
    return out


def build(pk, hf_model, dtype: torch.dtype | None = None, block_dim=(128, 1, 1), linear_tasks: int = 8,
          silu_mul_tasks: int = 4, rows_tasks: int = 4, sampling_seed=None) -> dict[str, torch.Tensor]:
    """Declare one pass of hf_model (a transformers Qwen3ForCausalLM) on pk; see the module docstring.
    linear_tasks / silu_mul_tasks / rows_tasks: the most tasks per linear (columns), per silu_mul (its
    gate/up groups) and per rmsnorm or embedding (rows), each lowered to a divisor of its dim.
    sampling_seed: None draws the argmax; an int (or an attached one-element int64 tensor) draws with
    sampling_sm100_layer from softmax(logits) under that seed."""
    cfg = hf_model.config
    if abs(cfg.rms_norm_eps - ATTN_EPS) > 1e-12:
        raise ValueError(f"qwen3.build: rms_norm_eps={cfg.rms_norm_eps}; paged attention's q/k norm uses "
                         f"eps {ATTN_EPS} (fixed, as in MPK): build the config with rms_norm_eps={ATTN_EPS}")
    dtype = dtype or next(hf_model.parameters()).dtype
    p, world = pk.params, pk.world_size
    rows, hidden, inter = p["max_num_batched_tokens"], cfg.hidden_size, cfg.intermediate_size // world
    hq, hkv = cfg.num_attention_heads // world, cfg.num_key_value_heads // world      # this rank's
    d = getattr(cfg, "head_dim", None) or hidden // cfg.num_attention_heads
    dev = next(hf_model.parameters()).device
    sd = shard({k: v.detach().to(dev, dtype) for k, v in hf_model.state_dict().items()}, cfg, pk.mpi_rank,
               world)
    out: dict[str, torch.Tensor] = {}
    # a row-parallel projection's partial sums meet in one allreduce buffer shared by all of them, as MPK's
    buf = pk.new_tensor((world, rows, hidden), dtype=dtype, name="allreduce_buf",
                        io_category="nvshmem_tensor") if world > 1 else None

    def row_parallel(x, w, residual, name: str):
        """x @ w^T + residual into activation `name`: on several ranks each one's partial sum (the residual
        on rank 0 only), then their allreduce."""
        y = act(name if world == 1 else name + "_partial", hidden)
        pk.linear_with_residual_layer(input=x, weight=w, residual=residual, output=y,
                                      grid_dim=(_grid(hidden, linear_tasks), 1, 1), block_dim=blk)
        if world == 1:
            return y
        total = act(name, hidden)
        pk.allreduce_layer(input=y, buffer=buf, output=total, grid_dim=(_grid(hidden, linear_tasks), 1, 1),
                           block_dim=blk)
        return total

    def tensor(name: str, t: torch.Tensor):
        name = name.replace(".", "_")          # tensor names are C identifiers
        out[name] = t
        return pk.attach_input(t, name=name)

    def act(name: str, cols: int):
        return tensor(name, torch.zeros(rows, cols, dtype=dtype, device=dev))

    def weight(key: str):
        return tensor(key, sd[key])

    blk = block_dim
    row_grid = (_grid(rows, rows_tasks), 1, 1)
    # meta tensors are made at compile() from the caller's overrides (meta.build_meta): the two this graph
    # reads and writes are made here when the caller did not give them, so they can be attached as views
    ids = {k: pk._given_meta.setdefault(k, torch.zeros(rows, dtype=torch.int64, device=dev))
           for k in ("input_tokens", "output_tokens")}
    x = pk.attach_input(ids["input_tokens"].view(rows, 1), name="input_tokens_view")
    embed = weight("model.embed_tokens.weight")
    h = act("embed_out", hidden)
    pk.embed_layer(input=x, weight=embed, output=h, grid_dim=(_grid(hidden, linear_tasks), row_grid[0], 1),
                   block_dim=blk, input_source=1)
    positions = torch.arange(p["max_seq_length"], device=dev)[None]
    cos, sin = hf_model.model.rotary_emb(torch.zeros(1, dtype=torch.float32, device=dev), positions)
    cos_dt, sin_dt = (tensor(f"rope_{k}", t[0].to(dtype).contiguous()) for k, t in (("cos", cos),
                                                                                       ("sin", sin)))
    qkv_cols, g = (hq + 2 * hkv) * d, _grid(inter, silu_mul_tasks)
    for i in range(len(hf_model.model.layers)):
        pre = f"model.layers.{i}."
        n = f"layers_{i}_"
        normed = act(n + "input_norm", hidden)
        pk.rmsnorm_layer(input=h, weight=weight(pre + "input_layernorm.weight"), output=normed,
                         grid_dim=row_grid, block_dim=blk, eps=cfg.rms_norm_eps)
        wqkv = pk.shuffle_tensors(inputs=[weight(pre + f"self_attn.{w}_proj.weight") for w in "qkv"],
                                  shuffled_dim=0, num_groups=hkv, name=n + "w_qkv")
        qkv = act(n + "qkv", qkv_cols)
        pk.linear_layer(input=normed, weight=wqkv, output=qkv, grid_dim=(_grid(qkv_cols, linear_tasks), 1, 1),
                        block_dim=blk)
        caches = [tensor(n + c, torch.zeros(p["max_num_pages"], p["page_size"], hkv, d, dtype=dtype,
                                                    device=dev))
                  for c in ("k_cache", "v_cache")]
        attn = act(n + "attn", hq * d)
        pk.paged_attention_layer(input=qkv, k_cache=caches[0], v_cache=caches[1],
                                 q_norm=weight(pre + "self_attn.q_norm.weight"),
                                 k_norm=weight(pre + "self_attn.k_norm.weight"), cos_pos_embed=cos_dt,
                                 sin_pos_embed=sin_dt, output=attn,
                                 grid_dim=(p["max_num_batched_requests"], hkv, 1), block_dim=blk)
        resid = row_parallel(attn, weight(pre + "self_attn.o_proj.weight"), h, n + "attn_residual")
        post = act(n + "post_norm", hidden)
        pk.rmsnorm_layer(input=resid, weight=weight(pre + "post_attention_layernorm.weight"), output=post,
                         grid_dim=row_grid, block_dim=blk, eps=cfg.rms_norm_eps)
        wgu = pk.shuffle_tensors(inputs=[weight(pre + f"mlp.{w}_proj.weight") for w in ("gate", "up")],
                                 shuffled_dim=0, num_groups=g, name=n + "w_gate_up")
        gate_up, silu = act(n + "gate_up", 2 * inter), act(n + "silu_mul", inter)
        pk.linear_layer(input=post, weight=wgu, output=gate_up, grid_dim=(2 * g, 1, 1),
                        block_dim=blk)
        pk.silu_mul_layer(input=gate_up, output=silu, grid_dim=(g, 1, 1), block_dim=blk)
        h = row_parallel(silu, weight(pre + "mlp.down_proj.weight"), resid, n + "out")
    final = act("final_norm", hidden)
    pk.rmsnorm_layer(input=h, weight=weight("model.norm.weight"), output=final, grid_dim=row_grid,
                     block_dim=blk, eps=cfg.rms_norm_eps)
    tied = getattr(cfg, "tie_word_embeddings", False) or "lm_head.weight" not in sd
    head = embed if tied else weight("lm_head.weight")
    logits = act("logits", cfg.vocab_size)
    pk.linear_layer(input=final, weight=head, output=logits,
                    grid_dim=(_grid(cfg.vocab_size, linear_tasks), 1, 1), block_dim=blk)
    drawn = tensor("output_tokens", ids["output_tokens"].view(rows, 1))
    if sampling_seed is None:
        pk.argmax_layer(input=logits, output=drawn, grid_dim=(1, 1, 1), block_dim=blk)
    else:
        pk.sampling_sm100_layer(logits=logits, output=drawn, grid_dim=row_grid, block_dim=blk,
                                seed=sampling_seed)
    out["input_tokens"] = ids["input_tokens"]
    return out


def decode_kernel(hf_model, prompts, max_new_tokens: int, output_dir: str | None = None, **kernel_params):
    """A compiled PersistentKernel (test_mode=False) of build(pk, hf_model) over these prompts (token-id
    lists), not yet run. Defaults, each overridable by kernel_params (PersistentKernel's parameters, and
    build's dtype, block_dim, *_tasks): max_seq_length = the longest prompt + max_new_tokens (a request ends
    at step + 1 >= max_seq_length, so every request can make max_new_tokens), one slot per request, a batch
    of every prompt's tokens, pages of 16, enough pages for every slot at max_seq_length, eos_token_id the
    model's generation_config's (-1: none). Meta tensors: tokens (the prompts, zero-padded), prompt_lengths,
    step (zeros)."""
    import mirage

    from ..persistent_kernel import PersistentKernel
    if not prompts or min(map(len, prompts)) < 1 or max_new_tokens < 1:
        raise ValueError(f"qwen3.generate: needs prompts of at least 1 token and max_new_tokens >= 1, got "
                         f"lengths {[len(x) for x in prompts]}, max_new_tokens={max_new_tokens}")
    eos = hf_model.generation_config.eos_token_id
    eos = eos[0] if isinstance(eos, (list, tuple)) and len(eos) == 1 else eos
    if eos is not None and not isinstance(eos, int) and "eos_token_id" not in kernel_params:
        raise ValueError(f"qwen3.generate: the model's eos_token_id {eos} is not one id; pass eos_token_id=")
    lens, dev = [len(x) for x in prompts], next(hf_model.parameters()).device
    p = PersistentKernel.get_default_init_parameters()
    workers, schedulers = mirage.get_configurations_from_gpu(0)
    p.update(num_workers=workers, num_local_schedulers=schedulers, max_seq_length=max(lens) + max_new_tokens,
             max_num_batched_requests=len(lens), max_num_batched_tokens=sum(lens), page_size=16,
             eos_token_id=-1 if eos is None else eos)
    build_kw = {k: kernel_params.pop(k) for k in list(kernel_params) if k in _BUILD_KEYS}
    p.update(kernel_params, test_mode=False)
    if "max_num_pages" not in kernel_params:
        p["max_num_pages"] = p["max_num_batched_requests"] * -(-p["max_seq_length"] // p["page_size"])
    tokens = torch.zeros(len(lens), p["max_seq_length"], dtype=torch.int64, device=dev)
    for r, x in enumerate(prompts):
        tokens[r, :len(x)] = torch.as_tensor(x, dtype=torch.int64, device=dev)
    p["meta_tensors"] = dict(p["meta_tensors"], tokens=tokens, step=torch.zeros(len(lens), dtype=torch.int32,
                             device=dev), prompt_lengths=torch.tensor(lens, dtype=torch.int32, device=dev))
    pk = PersistentKernel(**p)
    build(pk, hf_model, **build_kw)
    pk.compile(output_dir=output_dir)
    return pk


def generated(pk, prompts, max_new_tokens: int) -> list[list[int]]:
    """Each request's new tokens after decode_kernel's pk() ran: tokens[r, len(prompt) : step[r] + 1] (the
    runtime appends each emitted token at its step; the last is the EOS or the one at max_seq_length - 1),
    at most max_new_tokens."""
    if pk.device.type == "cuda":
        torch.cuda.synchronize(pk.device)
    tokens, step = pk.get_tensor("tokens").cpu(), pk.get_tensor("step").cpu()
    return [tokens[r, len(x):int(step[r]) + 1][:max_new_tokens].tolist() for r, x in enumerate(prompts)]


def generate(hf_model, prompts, max_new_tokens: int, **kernel_params) -> list[list[int]]:
    """Greedy (argmax) decode of every prompt, in the role of hf_model.generate(do_sample=False) per prompt:
    decode_kernel's kernel run once (every request to its end), its tokens read back, the kernel finalized."""
    pk = decode_kernel(hf_model, prompts, max_new_tokens, **kernel_params)
    try:
        pk()
        return generated(pk, prompts, max_new_tokens)
    finally:
        pk.finalize()


_BUILD_KEYS = ("dtype", "block_dim", "linear_tasks", "silu_mul_tasks", "rows_tasks", "sampling_seed")
