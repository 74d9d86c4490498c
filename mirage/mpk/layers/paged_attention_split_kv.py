"""paged_attention_split_kv_layer (MPK's name): paged attention over one chunk of the keys per task.

The same inputs and maths as paged_attention_layer (layers/paged_attention.py: packed input, paged caches,
optional q/k norm and RoPE, causal), with the keys split into num_kv_chunks chunks of
L = ceil(max_seq_length / num_kv_chunks) positions (MPK hardcodes L = 256 with num_kv_chunks =
max_seq_length // 256: the same rule at its sizes). attention_params = (num_q_heads, num_kv_chunks).
Grid (max_num_batched_requests, Hkv, num_kv_chunks): task (r, h, c) attends request r's new tokens
(KV head h, its G = Hq / Hkv query heads) over keys [c L, (c + 1) L) and key j <= the token's position;
it stores into the cache only the new tokens whose positions fall in its chunk (each slot once), then
writes the normalized partial o and lse = log2 sum_j exp(s_j) (scores s_j = q . k_j / sqrt(D)):
output [tokens, num_kv_chunks G D, Hkv] in the input's dtype, element (t, (c G + g) D + d, h); lse
[tokens, num_kv_chunks G, Hkv] float32, element (t, c G + g, h). A chunk with no key for a row writes
o = 0, lse = -inf. MPK's partition maps: lse and output (-1, 2, 1) (grid.y splits dim 2, grid.z dim 1).
paged_attention_split_kv_merge_layer combines the chunks. Kernel: csrc/tasks/paged_attention_split_kv.cuh.
"""
from __future__ import annotations

from ..dtypes import float32
from . import BY_REQUEST, NONZERO, NOT_SPLIT, Access, Layer, check_splits, check_tensor
from .paged_attention import EPS, QK_NORM, ROPE, check_attention, live_parts

TASK_TYPE = 263          # MPK's TASK_PAGED_ATTENTION_SPLIT_KV_SM100
# Tensor parallelism (testing.TP_KINDS): by heads, as paged_attention: rank r holds its KV heads, their
# query groups (the packed input's columns), cache heads and partials / lse (dim 2, heads last).
TP = "heads"


def chunk_length(max_seq_length: int, num_kv_chunks: int) -> int:
    """L = ceil(max_seq_length / num_kv_chunks): chunk c holds key positions [c L, (c + 1) L)."""
    return -(-max_seq_length // num_kv_chunks)


def check_params(name: str, attention_params, n: int, what: str) -> tuple[int, int]:
    """attention_params: two positive ints (what: their names)."""
    p = tuple(attention_params) if isinstance(attention_params, (tuple, list)) else (attention_params,)
    if len(p) != n or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in p):
        raise ValueError(f"layer '{name}': attention_params must be ({what}), {n} positive ints; got "
                         f"{attention_params!r}")
    return p


def paged_attention_split_kv_layer(pk, name: str, input, k_cache, v_cache, q_norm, k_norm, cos_pos_embed,
                                   sin_pos_embed, lse, output, attention_params, grid_dim,
                                   block_dim) -> Layer:
    q_heads, chunks = check_params(name, attention_params, 2, "num_q_heads, num_kv_chunks")
    grid, inputs, flags, g, d, hkv = check_attention(
        pk, name, input, k_cache, v_cache, q_norm, k_norm, cos_pos_embed, sin_pos_embed, grid_dim, block_dim,
        q_heads)
    max_seq, page_size = pk.params["max_seq_length"], pk.params["page_size"]
    length = chunk_length(max_seq, chunks)
    if (chunks - 1) * length >= max_seq:
        ok = [c for c in range(1, max_seq + 1) if (c - 1) * chunk_length(max_seq, c) < max_seq]
        raise ValueError(f"layer '{name}': num_kv_chunks={chunks} leaves chunk {chunks - 1} beyond "
                         f"max_seq_length={max_seq} (chunks of {length} positions); counts whose every chunk "
                         f"holds a position: {', '.join(map(str, ok[:16]))}{', ...' if len(ok) > 16 else ''}")
    if grid[2] != chunks:
        raise ValueError(f"layer '{name}': grid_dim must be (max_num_batched_requests, num_kv_heads, "
                         f"num_kv_chunks) = ({grid[0]}, {hkv}, {chunks}), got {grid}")
    x, kc, vc = (a.tensor for a in inputs[:3])
    rows = x.dims[0]
    y = check_tensor(name, "output", output, ndim=3, dims=(rows, chunks * g * d, hkv), dtype=x.dtype)
    s = check_tensor(name, "lse", lse, ndim=3, dims=(rows, chunks * g, hkv), dtype=float32)
    split = (NOT_SPLIT, 2, 1)
    outputs = [Access("output", y, split, shared=BY_REQUEST),
               Access("k_cache_out", kc, (NOT_SPLIT, 2, NOT_SPLIT), shared=BY_REQUEST),
               Access("v_cache_out", vc, (NOT_SPLIT, 2, NOT_SPLIT), shared=BY_REQUEST),
               Access("lse", s, split, shared=BY_REQUEST)]
    check_splits(name, grid, inputs, outputs)

    def live(meta: dict, coord) -> dict:
        keys = (coord[2] * length, (coord[2] + 1) * length)
        row, read, wrote = live_parts(meta, coord[0], page_size, kc.dims, rows, keys)
        return {"input": row[:, None], "output": row[:, None, None], "lse": row[:, None, None],
                "k_cache": read, "v_cache": read, "k_cache_out": wrote, "v_cache_out": wrote}

    def iparams(c) -> tuple[int, ...]:
        lo = c[2] * length             # the chunk's key range [lo, hi), packed as lo << 32 | hi
        return (c[0], flags, max_seq, (lo << 32) | min(lo + length, max_seq))
    # no FINITE check: lse is -inf where a chunk holds no key for a row
    return Layer(name, "paged_attention_split_kv", grid, inputs, outputs, (x.dtype,), checks=(NONZERO,),
                 task_iparams=iparams, live=live,
                 inplace={"k_cache_out": ("k_cache",), "v_cache_out": ("v_cache",)},
                 params={"q_heads": q_heads, "kv_heads": hkv, "head_dim": d, "num_kv_chunks": chunks,
                         "chunk_length": length, "qk_norm": bool(flags & QK_NORM), "rope": bool(flags & ROPE),
                         "eps": EPS})
