"""paged_attention_split_kv reference: paged attention's float64 reference
(paged_attention/pytorch_reference.py,
its page-table walk) run once per key chunk, laid out as the split layer writes it; the merge of the chunks;
the scale of each row's lse error. Torch only, float64.

Layout facts (layers/paged_attention_split_kv.py): chunk c holds key positions [c L, (c + 1) L), L =
ceil(max_seq_length / num_kv_chunks); output [rows, C G D, Hkv] element (t, (c G + g) D + d, h) and lse
[rows, C G, Hkv] element (t, c G + g, h) are query head h G + g's partial output and log2-sum-exp.
"""

import math
import os

import torch

from mirage.mpk import testing

pa = testing.load_reference(
    os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "paged_attention", "test_paged_attention.py"
    )
)
attention, write_cache, batch_layout = pa.attention, pa.write_cache, pa.batch_layout  # noqa: F401


def chunk_length(max_seq: int, chunks: int) -> int:
    return -(-max_seq // chunks)


def to_split(x: torch.Tensor, hkv: int) -> torch.Tensor:
    """[rows, Hq * D] of one chunk (query head h G + g at (h G + g) D) -> [rows, G * D, Hkv]."""
    rows = x.shape[0]
    return x.reshape(rows, hkv, -1).permute(0, 2, 1)


def from_split(x: torch.Tensor, chunks: int) -> list[torch.Tensor]:
    """[rows, C * W, Hkv] -> the C chunks as [rows, Hkv * W] (the inverse of to_split, per chunk)."""
    rows, _, hkv = x.shape
    return [p.permute(0, 2, 1).reshape(rows, -1) for p in x.chunk(chunks, dim=1)]


def lse_sigma(
    qkv,
    k_cache,
    meta,
    q_heads,
    q_norm=None,
    k_norm=None,
    cos=None,
    sin=None,
    eps=1e-6,
    key_range=(0, 1 << 62),
):
    """[rows, Hq]: max_j sigma_j over each row's keys in key_range (causal),
    sigma_j = 2 |q|_2 |k_j|_2 / sqrt(D)
    (the scale of the score s_j's error, testing.tol_attention), 0 for a row without a key."""
    rows = qkv.shape[0]
    hkv, d = k_cache.shape[2], k_cache.shape[3]
    g = q_heads // hkv
    out = torch.zeros(rows, q_heads, dtype=torch.float64)
    for r, first, t, s, pages in batch_layout(meta, k_cache.shape[1]):
        x = qkv[first : first + t].double().view(t, hkv, g + 2, d)
        positions = torch.arange(s - t, s)
        q, _ = pa.rope(pa.rmsnorm(x[:, :, :g], q_norm, eps).reshape(t, hkv * g, d), cos, sin, positions)
        k, _ = pa.rope(pa.rmsnorm(x[:, :, g], k_norm, eps), cos, sin, positions)
        keys = torch.cat([pa.walk(k_cache, pages, s - t), k]).repeat_interleave(g, dim=1)  # [S, Hq, D]
        j = torch.arange(s)
        allowed = (
            (j[None, :] <= positions[:, None]) & (j[None, :] >= key_range[0]) & (j[None, :] < key_range[1])
        )
        sigma = 2 * q.norm(dim=-1)[:, :, None] * keys.norm(dim=-1).T[None] / math.sqrt(d)  # [T, Hq, S]
        out[first : first + t] = torch.where(allowed[:, None, :], sigma, 0.0).amax(-1)
    return out


def split_attention(qkv, k_cache, v_cache, meta, q_heads, chunks, max_seq, **options):
    """The split layer's outputs: {"output" [rows, C G D, Hkv], "lse" [rows, C G, Hkv], "chunks": per chunk
    attention()'s dict (+ "sigma": lse_sigma), "length": L}."""
    hkv = k_cache.shape[2]
    length = chunk_length(max_seq, chunks)
    parts = []
    for c in range(chunks):
        keys = (c * length, (c + 1) * length)
        p = attention(qkv, k_cache, v_cache, meta, q_heads, key_range=keys, **options)
        p["sigma"] = lse_sigma(qkv, k_cache, meta, q_heads, key_range=keys, **options)
        parts.append(p)
    out = torch.cat([to_split(p["out"], hkv) for p in parts], dim=1)
    lse = torch.cat([to_split(p["lse"], hkv) for p in parts], dim=1)
    return {"output": out, "lse": lse, "chunks": parts, "length": length}


def merge(lse: torch.Tensor, output_tmp: torch.Tensor, q_heads: int, head_dim: int) -> torch.Tensor:
    """The merge layer's output [rows, Hq D] in float64: o = sum_c w_c o_c / sum_c w_c, w_c = 2^(lse_c - max)
    over the chunks with lse_c > -inf; 0 for a row whose every chunk is -inf."""
    rows, cg, hkv = lse.shape
    chunks = cg // (q_heads // hkv)
    ls = [x.double() for x in from_split(lse, chunks)]  # [rows, Hq] each
    os_ = [x.double() for x in from_split(output_tmp, chunks)]  # [rows, Hq D] each
    m = torch.stack(ls).amax(0)
    w = [torch.where(torch.isinf(x), 0.0, torch.exp2(x - torch.where(torch.isinf(m), 0.0, m))) for x in ls]
    total = sum(w)
    wide = [x.repeat_interleave(head_dim, dim=1) for x in w]
    num = sum(a * o for a, o in zip(wide, os_))
    den = total.repeat_interleave(head_dim, dim=1)
    return torch.where(den > 0, num / torch.where(den > 0, den, 1.0), 0.0)


# ---- the batch a test-mode pass lays out, and the inputs around it (paged_attention's helpers)

batch_meta, poison_outside, rope_tables = pa.batch_meta, pa.poison_outside, pa.rope_tables


def expected_layout(prompts, steps, page_size, slots, num_pages) -> dict:
    """The meta tensors the first prepare_next_batch writes when every request fits a slot and the batch
    (tests/runtime_python/test_mode/test_meta_tensors.py states the rule): slot r is request r with
    prompt - step new tokens (1 when the prompt is done), pages in order from a fresh free list."""
    new = [p - s if p > s else 1 for p, s in zip(prompts, steps)]
    meta = batch_meta(new, list(steps), page_size, num_pages, slots, None, permute=False)
    meta["num_new_tokens"] = torch.tensor([sum(new)], dtype=torch.int32)
    return meta


def testmode_inputs(dtype, hq, hkv, d, ps, prompts, steps, norm, max_seq, slots, batch, gen, nan=True):
    """What a split-KV test-mode case attaches (both folders' test-mode tests): the page count (every
    request's pages plus two no request owns), the layout prepare_next_batch will give, the packed input,
    the caches (NaN, or std-100 noise, outside every cached range), the q/k norms and RoPE tables (norm:
    both on, else None) and the meta-tensor overrides a user passes."""
    pages = sum(-(-(max(p - s, 1) + s) // ps) for p, s in zip(prompts, steps)) + 2
    meta = expected_layout(prompts, steps, ps, slots, pages)
    qkv = testing.randn((batch, (hq + 2 * hkv) * d), dtype, gen)
    k_cache, v_cache = (poison_outside(testing.randn((pages, ps, hkv, d), dtype, gen), meta, gen, nan=nan)
                        for _ in range(2))
    options = dict.fromkeys(("q_norm", "k_norm", "cos", "sin"))
    if norm:
        options["q_norm"], options["k_norm"] = (testing.randn((d,), dtype, gen, scale=0.5) + 1.0
                                                for _ in range(2))
        options["cos"], options["sin"] = rope_tables(max_seq, d, dtype)
    overrides = {"prompt_lengths": torch.tensor(prompts, dtype=torch.int32),
                 "step": torch.tensor(steps, dtype=torch.int32)}
    return pages, meta, qkv, k_cache, v_cache, options, overrides

