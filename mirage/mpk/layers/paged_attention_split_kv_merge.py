"""paged_attention_split_kv_merge_layer (MPK's name): the split-KV chunks' partial attentions combined.

lse [tokens, C G, Hkv] float32 and output_tmp [tokens, C G D, Hkv] (paged_attention_split_kv_layer's lse
and output: element (t, c G + g, h), (t, (c G + g) D + d, h)) -> output [tokens, Hq D] in output_tmp's
dtype, query head h G + g at columns (h G + g) D. attention_params = (num_q_heads, head_dim); G = Hq / Hkv
(Hkv = lse dim 2) and the chunk count C = lse dim 1 / G. Per row of each request and query head:
o = sum_c w_c o_c / sum_c w_c, w_c = exp2(lse_c - max_c lse_c) (lse in log2 units), a chunk with
lse = -inf skipped (weight 0; a row whose every chunk is -inf gives 0). Grid (max_num_batched_requests,
Hkv, 1), MPK's maps lse and output_tmp (-1, 2, -1), output (-1, 1, -1): grid.x is the request (its tasks
share the tiles, each its rows: BY_REQUEST, `live`), grid.y the KV head. Kernel:
csrc/tasks/paged_attention_split_kv_merge.cuh.
"""
from __future__ import annotations

from ..dtypes import FLOATS, float32
from . import BY_REQUEST, NOT_SPLIT, Access, Layer, check_grid, check_splits, check_tensor
from .paged_attention import HEAD_DIMS
from .paged_attention_split_kv import check_params

TASK_TYPE = 264          # MPK's TASK_PAGED_ATTENTION_SPLIT_KV_MERGE_SM100
# Tensor parallelism (testing.TP_KINDS): by heads: rank r merges its KV heads' partials (lse and output_tmp
# dim 2) into its query heads' output columns.
TP = "heads"


def paged_attention_split_kv_merge_layer(pk, name: str, lse, output_tmp, output, attention_params, grid_dim,
                                         block_dim) -> Layer:
    q_heads, d = check_params(name, attention_params, 2, "num_q_heads, head_dim")
    grid = check_grid(name, grid_dim, block_dim)
    s = check_tensor(name, "lse", lse, ndim=3, dtype=float32)
    rows, hkv = s.dims[0], s.dims[2]
    p = pk.params
    if rows < p["max_num_batched_tokens"]:
        raise ValueError(f"layer '{name}': lse '{s.name}' has {rows} rows, fewer than max_num_batched_tokens="
                         f"{p['max_num_batched_tokens']} (a batch's tokens)")
    if d not in HEAD_DIMS:
        raise ValueError(f"layer '{name}': head_dim {d} (attention_params[1]) is not supported; the kernel "
                         f"takes head_dim {', '.join(map(str, HEAD_DIMS))}")
    if q_heads % hkv:
        raise ValueError(f"layer '{name}': {q_heads} query heads for {hkv} KV heads (lse '{s.name}' dim 2): "
                         f"the query heads must be a positive multiple of the KV heads")
    g = q_heads // hkv
    if s.dims[1] % g:
        raise ValueError(f"layer '{name}': lse '{s.name}' dim 1 is {s.dims[1]}, not num_kv_chunks * {g} "
                         f"(the query heads per KV head); shape {s.dims}")
    chunks = s.dims[1] // g
    x = check_tensor(name, "output_tmp", output_tmp, ndim=3, dims=(rows, chunks * g * d, hkv), dtype=FLOATS)
    y = check_tensor(name, "output", output, ndim=2, dims=(rows, q_heads * d), dtype=x.dtype)
    if grid != (p["max_num_batched_requests"], hkv, 1):
        raise ValueError(f"layer '{name}': grid_dim must be (max_num_batched_requests, num_kv_heads, 1) = "
                         f"({p['max_num_batched_requests']}, {hkv}, 1), got {grid}")
    inputs = [Access("lse", s, (NOT_SPLIT, 2, NOT_SPLIT)), Access("output_tmp", x, (NOT_SPLIT, 2, NOT_SPLIT))]
    outputs = [Access("output", y, (NOT_SPLIT, 1, NOT_SPLIT), shared=BY_REQUEST)]
    check_splits(name, grid, inputs, outputs)

    def live(meta: dict, coord) -> dict:
        import torch
        qo = meta["qo_indptr_buffer"].tolist()
        row = torch.zeros(rows, dtype=torch.bool, device="cpu")
        row[max(qo[coord[0]], 0):max(qo[coord[0] + 1], 0)] = True
        return {"lse": row[:, None, None], "output_tmp": row[:, None, None], "output": row[:, None]}
    return Layer(name, "paged_attention_split_kv_merge", grid, inputs, outputs, (x.dtype,),
                 task_iparams=lambda c: (c[0], d, 0, 0), live=live,
                 params={"q_heads": q_heads, "kv_heads": hkv, "head_dim": d, "num_kv_chunks": chunks})
