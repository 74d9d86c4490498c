"""paged_attention_layer (MPK's name): causal attention of each request's new tokens over its paged KV cache.

input [tokens, (Hq + 2 Hkv) D] packed per KV head as [its G = Hq / Hkv query heads, K, V]; k_cache, v_cache
[max_num_pages, page_size, Hkv, D]; q_norm, k_norm [D] or None; cos_pos_embed, sin_pos_embed [positions, D]
or None -> output [tokens, Hq D]; bf16, fp16, fp32. Kernel: csrc/tasks/paged_attention.cuh.
Per request r of the batch (meta tensors: rows qo_indptr_buffer[r]..[r+1], pages paged_kv_indices_buffer
[paged_kv_indptr_buffer[r]..[r+1]], S = (pages - 1) page_size + paged_kv_last_page_len_buffer[r] tokens):
q and the new k get RMSNorm over D (eps 1e-6, as MPK) when q_norm/k_norm are given, then rotate-half
RoPE at their absolute positions S - T + i when cos/sin are given (None turns each off, as in MPK); the
new K (normed, roped) and V go into the request's slots; causal softmax(q k^T / sqrt(D)) v over the
cached and new tokens. Grid (max_num_batched_requests, Hkv, 1), as MPK: grid.x is the request (its tasks
share the output and cache tiles, each writing its request's rows and slots: BY_REQUEST, `live`),
grid.y the KV head (input dim 1, cache dim 2, output dim 1). A request slot without tokens does nothing.
A bf16 / fp16 request of 16+ (token, query head) pairs scores and sums on the tensor cores (q and the
probabilities rounded to the dtype: tensor_core_rows, testing.tol_attention(tensor_cores=)).
"""
from __future__ import annotations

import torch

from ..dtypes import FLOATS
from . import BY_REQUEST, FINITE, NONZERO, NOT_SPLIT, Access, Layer, check_grid, check_splits, check_tensor
from .linear import uses_tensor_cores

TASK_TYPE = 116          # MPK's TASK_PAGED_ATTENTION_1
# Tensor parallelism (mirage.mpk.testing.TP_KINDS): by heads, as MPK's models: rank r holds KV heads
# [r*Hkv/W, (r+1)*Hkv/W) with their query groups (the packed input's columns), their cache heads and
# their output columns; norms and RoPE tables whole.
TP = "heads"
# The kernel's lane layout (D / 32 elements per lane, RoPE pairs in one lane) works for any multiple of 64;
# these are the ones instantiated and tested (each one more kernel per dtype in every module's dispatcher).
HEAD_DIMS = (64, 128)
EPS = 1e-6                   # MPK's q/k norm epsilon, fixed in its kernels and in ours (ATTN_EPS)
QK_NORM, ROPE = 1, 2         # iparam(1) flags


def tensor_core_rows(dtype, qo_indptr, group: int, rows: int) -> torch.Tensor:
    """[rows] bool: the output rows whose step 3 runs on the tensor cores (the kernel's attn_tensor_cores,
    csrc/tasks/paged_attention.cuh): a bf16 / fp16 layer's requests of at least 16 (token, query head)
    pairs, tokens x group >= TENSOR_CORE_MIN_ROWS; qo_indptr: the batch's row offsets per request."""
    mask = torch.zeros(rows, dtype=torch.bool, device=getattr(qo_indptr, "device", "cpu"))
    qo = [int(x) for x in qo_indptr]
    for lo, hi in zip(qo, qo[1:]):
        mask[lo:hi] = uses_tensor_cores(dtype, (hi - lo) * group)
    return mask


def check_attention(pk, name: str, input, k_cache, v_cache, q_norm, k_norm, cos_pos_embed, sin_pos_embed,
                    grid_dim, block_dim, q_heads: int | None = None):
    """The checks paged_attention_layer and its split-KV form share; returns (grid, inputs, flags, G, D, Hkv).
    q_heads: the number of query heads (else the caller derives it from its output)."""
    grid = check_grid(name, grid_dim, block_dim)
    p = pk.params
    x = check_tensor(name, "input", input, ndim=2, dtype=FLOATS)
    kc = check_tensor(name, "k_cache", k_cache, ndim=4, dims=(p["max_num_pages"], p["page_size"], None, None),
                      dtype=x.dtype)
    vc = check_tensor(name, "v_cache", v_cache, dims=kc.dims, dtype=x.dtype)
    hkv, d = kc.dims[2], kc.dims[3]
    if d not in HEAD_DIMS:
        raise ValueError(f"layer '{name}': head_dim {d} (k_cache '{kc.name}' dim 3) is not supported; the "
                         f"kernel takes head_dim {', '.join(map(str, HEAD_DIMS))}")
    if x.dims[0] < p["max_num_batched_tokens"]:
        raise ValueError(f"layer '{name}': input '{x.name}' has {x.dims[0]} rows, fewer than "
                         f"max_num_batched_tokens={p['max_num_batched_tokens']} (a batch's tokens)")
    if q_heads is None or q_heads < hkv or q_heads % hkv:
        raise ValueError(f"layer '{name}': {q_heads} query heads for {hkv} KV heads (k_cache '{kc.name}' "
                         f"dim 2): the query heads must be a positive multiple of the KV heads (GQA ratio 1, "
                         f"2, ...)")
    g = q_heads // hkv
    if x.dims[1] != (q_heads + 2 * hkv) * d:
        raise ValueError(f"layer '{name}': input '{x.name}' is {x.dims}; {q_heads} query heads, {hkv} KV "
                         f"heads of head_dim {d} pack into [tokens, {(q_heads + 2 * hkv) * d}]")
    if grid != (p["max_num_batched_requests"], hkv, grid[2]):
        raise ValueError(f"layer '{name}': grid_dim must be (max_num_batched_requests, num_kv_heads, ...) = "
                         f"({p['max_num_batched_requests']}, {hkv}, ...), got {grid}")
    inputs = [Access("input", x, (NOT_SPLIT, 1, NOT_SPLIT)), Access("k_cache", kc, (NOT_SPLIT, 2, NOT_SPLIT)),
              Access("v_cache", vc, (NOT_SPLIT, 2, NOT_SPLIT))]
    flags = 0
    options = ((QK_NORM, ("q_norm", q_norm), ("k_norm", k_norm), (d,)),
               (ROPE, ("cos_pos_embed", cos_pos_embed), ("sin_pos_embed", sin_pos_embed), (None, d)))
    for flag, (ra, a), (rb, b), dims in options:
        if (a is None) != (b is None):
            raise ValueError(f"layer '{name}': {ra} and {rb} are given together or both None (turned off)")
        if a is None:
            continue
        for role, t in ((ra, a), (rb, b)):
            t = check_tensor(name, role, t, ndim=len(dims), dims=dims, dtype=x.dtype)
            if flag == ROPE and t.dims[0] < p["max_seq_length"]:
                raise ValueError(f"layer '{name}': {role} '{t.name}' has {t.dims[0]} positions, fewer than "
                                 f"max_seq_length={p['max_seq_length']}")
            inputs.append(Access(role, t))
        flags |= flag
    return grid, inputs, flags, g, d, hkv


def live_parts(meta: dict, r: int, page_size: int, cache_dims, rows: int,
               keys: tuple[int, int] | None = None):
    """Masks of request slot r's rows (of `rows`) and of its cache slots: those it reads (positions before
    its new tokens) and those it writes (its new tokens'), both within the key range `keys` = [lo, hi)
    when given (a split-KV chunk), else every position of the request."""
    qo, kv = meta["qo_indptr_buffer"].tolist(), meta["paged_kv_indptr_buffer"].tolist()
    first, t = qo[r], qo[r + 1] - qo[r]
    pages = meta["paged_kv_indices_buffer"][kv[r]:kv[r + 1]].long().cpu()
    last = int(meta["paged_kv_last_page_len_buffer"][r])
    s = (len(pages) - 1) * page_size + last if len(pages) and t > 0 else 0
    row = torch.zeros(rows, dtype=torch.bool, device="cpu")
    row[max(first, 0):max(first + t, 0)] = True
    pos = torch.arange(max(min(s, len(pages) * page_size), 0), device="cpu")
    if keys is not None:
        pos = pos[(pos >= keys[0]) & (pos < keys[1])]
    page = pages[pos // page_size]
    ok = (page >= 0) & (page < cache_dims[0])
    new = pos >= s - t
    # per (page, slot), broadcast over heads and head_dim: a view, not a cache-sized mask per task
    read = torch.zeros(cache_dims[:2], dtype=torch.bool, device="cpu")
    wrote = torch.zeros(cache_dims[:2], dtype=torch.bool, device="cpu")
    read[page[ok & ~new], (pos % page_size)[ok & ~new]] = True
    wrote[page[ok & new], (pos % page_size)[ok & new]] = True
    return row, read[:, :, None, None].expand(cache_dims), wrote[:, :, None, None].expand(cache_dims)


def paged_attention_layer(pk, name: str, input, k_cache, v_cache, q_norm, k_norm, cos_pos_embed,
                          sin_pos_embed, output, grid_dim, block_dim) -> Layer:
    x = check_tensor(name, "input", input, ndim=2, dtype=FLOATS)
    k = check_tensor(name, "k_cache", k_cache, ndim=4)
    y = check_tensor(name, "output", output, ndim=2, dims=(x.dims[0], None), dtype=x.dtype)
    d = k.dims[3]
    q_heads = y.dims[1] // d if y.dims[1] % d == 0 else None
    grid, inputs, flags, g, d, hkv = check_attention(
        pk, name, x, k_cache, v_cache, q_norm, k_norm, cos_pos_embed, sin_pos_embed, grid_dim, block_dim,
        q_heads)
    if grid[2] != 1:
        raise ValueError(f"layer '{name}': grid_dim.z must be 1 (the split-KV form is "
                         f"paged_attention_split_kv_layer); got {grid}")
    kc, vc = inputs[1].tensor, inputs[2].tensor
    outputs = [Access("output", y, (NOT_SPLIT, 1, NOT_SPLIT), shared=BY_REQUEST),
               Access("k_cache_out", kc, (NOT_SPLIT, 2, NOT_SPLIT), shared=BY_REQUEST),
               Access("v_cache_out", vc, (NOT_SPLIT, 2, NOT_SPLIT), shared=BY_REQUEST)]
    check_splits(name, grid, inputs, outputs)
    page_size, max_seq = pk.params["page_size"], pk.params["max_seq_length"]

    def live(meta: dict, coord) -> dict:
        row, read, wrote = live_parts(meta, coord[0], page_size, kc.dims, x.dims[0])
        return {"input": row[:, None], "output": row[:, None], "k_cache": read, "v_cache": read,
                "k_cache_out": wrote, "v_cache_out": wrote}
    return Layer(name, "paged_attention", grid, inputs, outputs, (x.dtype,),
                 checks=(FINITE, NONZERO), task_iparams=lambda c: (c[0], flags, max_seq, 0), live=live,
                 inplace={"k_cache_out": ("k_cache",), "v_cache_out": ("v_cache",)},
                 params={"q_heads": g * hkv, "kv_heads": hkv, "head_dim": d, "qk_norm": bool(flags & QK_NORM),
                         "rope": bool(flags & ROPE), "eps": EPS})
