"""paged attention reference: dense causal attention per request, its keys and values gathered by walking
the request's page table one position at a time; float64, torch only (no loop of the kernel's).

Layout facts (layers/paged_attention.py): the packed input row is [Hkv, G + 2, D] (per KV head: its G query
heads, then K, then V); query head h * G + g uses KV head h (GQA as Hugging Face's repeat_kv); the cache is
[pages, page_size, Hkv, D]; request r's new token i sits at absolute position S - T + i.
"""
import math

import torch


def rmsnorm(x: torch.Tensor, w: torch.Tensor | None, eps: float) -> torch.Tensor:
    if w is None:
        return x
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w.double()


def rope(x: torch.Tensor, cos: torch.Tensor | None, sin: torch.Tensor | None, positions: torch.Tensor):
    """Rotate-half RoPE at absolute positions (x [..., tokens, heads, D]); also |a cos| + |b sin|, the scale
    of its error (testing.tol_qk_norm_rope)."""
    if cos is None:
        return x, x.abs()
    c, s = cos.double()[positions][:, None, :], sin.double()[positions][:, None, :]
    half = x.shape[-1] // 2
    rot = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * c + rot * s, (x * c).abs() + (rot * s).abs()


def batch_layout(meta: dict, page_size: int) -> list[tuple[int, int, int, list[int]]]:
    """(request slot, first row, new tokens T, cached + new tokens S, page list) of every slot with tokens."""
    qo, kv = meta["qo_indptr_buffer"].tolist(), meta["paged_kv_indptr_buffer"].tolist()
    out = []
    for r in range(len(qo) - 1):
        t = qo[r + 1] - qo[r]
        if t == 0:
            continue
        pages = meta["paged_kv_indices_buffer"][kv[r]:kv[r + 1]].tolist()
        s = (len(pages) - 1) * page_size + int(meta["paged_kv_last_page_len_buffer"][r])
        out.append((r, qo[r], t, s, pages))
    return out


def walk(cache: torch.Tensor, pages: list[int], length: int) -> torch.Tensor:
    """Positions 0 .. length - 1 of a request, one by one through its page table: [length, Hkv, D]."""
    page_size = cache.shape[1]
    rows = [cache[pages[p // page_size], p % page_size] for p in range(length)]
    return torch.stack(rows).double() if rows else cache.new_zeros((0, *cache.shape[2:])).double()


def attention(qkv, k_cache, v_cache, meta, q_heads, q_norm=None, k_norm=None, cos=None, sin=None, eps=1e-6,
              key_range=None):
    """The layer's outputs in float64 from the caches as given (before the layer wrote them):
    {"out": [rows, Hq D] (rows outside every request: 0), "rows": bool [rows], "new": per request (r,
    positions, k, v, k_scale) of what goes into its slots ([T, Hkv, D]; k_scale: tol_qk_norm_rope's scale),
    "value_scale" / "score_scale" / "score_var": tol_attention's scales per output element, "keys": the most
    keys a row attends, "lse": [rows, Hq] log2-sum-exp}. key_range: (lo, hi) restricts the keys to
    positions [lo, hi) (one split-KV chunk); a row with no key then
    gets out 0 and lse -inf."""
    rows, width = qkv.shape
    hkv, d = k_cache.shape[2], k_cache.shape[3]
    g = q_heads // hkv
    out = torch.zeros(rows, q_heads * d, dtype=torch.float64)
    lse = torch.full((rows, q_heads), -math.inf, dtype=torch.float64)
    value_scale, score_scale, score_var = torch.zeros_like(out), torch.zeros_like(out), torch.zeros_like(out)
    active = torch.zeros(rows, dtype=torch.bool)
    new, most = [], 0
    for r, first, t, s, pages in batch_layout(meta, k_cache.shape[1]):
        x = qkv[first:first + t].double().view(t, hkv, g + 2, d)
        positions = torch.arange(s - t, s)
        q, _ = rope(rmsnorm(x[:, :, :g], q_norm, eps).reshape(t, hkv * g, d), cos, sin, positions)
        k, k_scale = rope(rmsnorm(x[:, :, g], k_norm, eps), cos, sin, positions)
        v = x[:, :, g + 1]
        new.append((r, positions, k, v, k_scale))
        keys = torch.cat([walk(k_cache, pages, s - t), k])          # [S, Hkv, D]
        values = torch.cat([walk(v_cache, pages, s - t), v])
        keys, values = keys.repeat_interleave(g, dim=1), values.repeat_interleave(g, dim=1)   # [S, Hq, D]
        scores = torch.einsum("thd,shd->hts", q, keys) / math.sqrt(d)                        # [Hq, T, S]
        j = torch.arange(s)
        allowed = j[None, :] <= positions[:, None]
        if key_range is not None:
            allowed &= (j[None, :] >= key_range[0]) & (j[None, :] < key_range[1])
        scores = scores.masked_fill(~allowed, -math.inf)
        m = scores.amax(-1, keepdim=True)
        has = torch.isfinite(m)
        p = torch.where(has, torch.exp(scores - torch.where(has, m, 0.0)), 0.0)
        total = p.sum(-1, keepdim=True)
        prob = torch.where(has, p / torch.where(has, total, 1.0), 0.0)
        o = torch.einsum("hts,shd->thd", prob, values)                                     # [T, Hq, D]
        sigma = 2 * q.norm(dim=-1).T[:, :, None] * keys.norm(dim=-1).T[:, None, :] / math.sqrt(d)  # Hq,T,S
        sig_max = torch.where(allowed, sigma, 0.0).amax(-1)                                # [Hq, T]
        vs = torch.einsum("hts,shd->thd", prob, values.abs())
        spread = (values.permute(1, 0, 2)[:, None] - o.permute(1, 0, 2)[:, :, None]).abs()     # [Hq, T, S, D]
        ss = torch.einsum("hts,htsd->thd", prob, spread)
        # independent roundings of the keys: var(ds_j) <= sum_d (q_d k_jd)^2 / D * u^2 / 3, reaching o times
        # p_j (v_j - o): tolerance's scale2 for the scores' rounding term
        qk2 = torch.einsum("thd,shd->hts", q * q, keys * keys) / d
        sv2 = torch.einsum("hts,htsd->thd", prob * prob * torch.where(allowed, qk2, 0.0), spread * spread)
        out[first:first + t] = o.reshape(t, -1)
        value_scale[first:first + t] = vs.reshape(t, -1)
        score_scale[first:first + t] = (ss * sig_max.T[:, :, None]).reshape(t, -1)
        score_var[first:first + t] = sv2.reshape(t, -1)
        log_total = torch.log(total[..., 0].clamp_min(1e-300))
        lse[first:first + t] = torch.where(has[..., 0], (m[..., 0] + log_total) / math.log(2), -math.inf).T
        active[first:first + t] = True
        most = max(most, int(allowed.sum(-1).max()))
    return {"out": out, "rows": active, "new": new, "value_scale": value_scale, "score_scale": score_scale,
            "score_var": score_var, "keys": most, "lse": lse}


def write_cache(k_cache, v_cache, meta, new):
    """The caches after the layer: each request's new K and V (float64, unrounded) in its slots."""
    kc, vc = k_cache.double().clone(), v_cache.double().clone()
    ks = torch.zeros_like(kc)
    written = torch.zeros(kc.shape[:2], dtype=torch.bool)
    layout = {r: pages for r, _, _, _, pages in batch_layout(meta, kc.shape[1])}
    for r, positions, k, v, k_scale in new:
        for i, p in enumerate(positions.tolist()):
            page, slot = layout[r][p // kc.shape[1]], p % kc.shape[1]
            kc[page, slot], vc[page, slot], ks[page, slot] = k[i], v[i], k_scale[i]
            written[page, slot] = True
    return kc, vc, ks, written


# ---- test inputs (not maths: the batches and tables the tests feed the layer)

def rope_tables(positions: int, head_dim: int, dtype: torch.dtype, base: float = 10000.0):
    """Hugging Face's default RoPE tables [positions, head_dim] (cos, sin), halves repeated, in dtype."""
    inv = 1.0 / base ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    angles = torch.arange(positions, dtype=torch.float64)[:, None] * inv[None, :]
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def batch_meta(new: list[int], cached: list[int], page_size: int, num_pages: int, slots: int,
               gen: torch.Generator, permute: bool = True) -> dict:
    """A batch layout as prepare_next_batch writes it, by hand: request slot s has new[s] tokens after
    cached[s] ones, in ceil((cached + new) / page_size) pages drawn from a random permutation of the pages
    (vLLM's tests use random block tables), so a kernel assuming contiguous pages fails; slots past
    len(new) are empty. Raises when the pages do not suffice."""
    order = torch.randperm(num_pages, generator=gen).tolist() if permute else list(range(num_pages))
    qo, kv, indices, last = [0], [0], [], []
    for t, c in zip(new, cached):
        n = -(-(t + c) // page_size)
        if n > len(order):
            raise ValueError(f"batch_meta: {t + c} tokens need {n} pages of {page_size}; {len(order)} left")
        indices += [order.pop(0) for _ in range(n)]
        qo.append(qo[-1] + t)
        kv.append(kv[-1] + n)
        last.append(t + c - (n - 1) * page_size)
    for _ in range(slots - len(new)):
        qo.append(qo[-1])
        kv.append(kv[-1])
        last.append(0)
    i32 = dict(dtype=torch.int32)
    return {"qo_indptr_buffer": torch.tensor(qo, **i32), "paged_kv_indptr_buffer": torch.tensor(kv, **i32),
            "paged_kv_indices_buffer": torch.tensor(indices + [0] * (num_pages - len(indices)), **i32),
            "paged_kv_last_page_len_buffer": torch.tensor(last, **i32)}


def poison_outside(cache: torch.Tensor, meta: dict, gen: torch.Generator, nan: bool = True) -> torch.Tensor:
    """The cache with every slot that holds no cached token of a request (unowned pages, a last page's tail,
    the new tokens' slots the layer writes) set to NaN (nan) or noise of std 100: any read outside a request's
    cached range shows in its output."""
    keep = torch.zeros(cache.shape[:2], dtype=torch.bool)
    for _, _, t, s, pages in batch_layout(meta, cache.shape[1]):
        for p in range(s - t):
            keep[pages[p // cache.shape[1]], p % cache.shape[1]] = True
    bad = torch.full_like(cache, float("nan")) if nan else (
        torch.randn(cache.shape, generator=gen, dtype=torch.float64) * 100).to(cache.dtype)
    return torch.where(keep[:, :, None, None], cache, bad)
