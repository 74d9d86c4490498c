"""One test-mode pass of a Qwen3-8B-shaped decode attention: the CUDA kernel under the CPU emulation beside
the same attention in eager PyTorch, as a ratio in one run.

The layer: paged_attention_layer with 32 query heads, 8 KV heads, head_dim 128, q/k RMSNorm and RoPE, a
batch of 4 requests each decoding one token after a 1,024-token cache (step 1024, pages of 64), laid out
by prepare_next_batch as in production; grid (4, 8): 32 tasks, one per (request, KV head).
"eager PyTorch": the same math on the same tensors in the kernel's dtype (norms, RoPE, the cached keys and
values gathered through the page table, torch's scaled_dot_product_attention with GQA), what a user would
write; it excludes the kernel's K/V store into the cache. Prints min-of-N times; not a timed test.
Run: python benchmarks/decode_attention_pass.py [--repeat 3]
"""
import argparse
import os
import sys

import torch
import torch.nn.functional as F

os.environ.setdefault("MPK_LOG_LEVEL", "WARNING")

from pertask_overhead import best  # noqa: E402  (this folder: min wall time of N calls)

from mirage.mpk import testing  # noqa: E402
from mirage.mpk.persistent_kernel import PersistentKernel  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ref = testing.load_reference(os.path.join(HERE, "..", "tests", "runtime_python", "paged_attention", "x.py"))

HQ, HKV, D, CACHED, BATCH, PAGE = 32, 8, 128, 1024, 4, 64


def layer(dtype) -> tuple[PersistentKernel, dict]:
    gen = testing.generator(offset=1024)
    max_seq = CACHED + 64
    pages = BATCH * -(-(CACHED + 1) // PAGE)
    t = {"qkv": testing.randn((BATCH, (HQ + 2 * HKV) * D), dtype, gen),
         "k_cache": testing.randn((pages, PAGE, HKV, D), dtype, gen),
         "v_cache": testing.randn((pages, PAGE, HKV, D), dtype, gen),
         "q_norm": testing.randn((D,), dtype, gen, scale=0.5) + 1.0,
         "k_norm": testing.randn((D,), dtype, gen, scale=0.5) + 1.0,
         "out": torch.zeros(BATCH, HQ * D, dtype=dtype)}
    t["cos"], t["sin"] = ref.rope_tables(max_seq, D, dtype)
    i32 = dict(dtype=torch.int32)
    meta = {"prompt_lengths": torch.full((BATCH,), CACHED + 1, **i32),
            "step": torch.full((BATCH,), CACHED, **i32)}
    pk = PersistentKernel(**testing.cpu_config(
        jitter_seed=None, max_seq_length=max_seq, max_num_batched_tokens=BATCH,
        max_num_batched_requests=BATCH, max_num_pages=pages, page_size=PAGE, meta_tensors=meta))
    dt = {n: pk.attach_input(v, name=n) for n, v in t.items()}
    pk.paged_attention_layer(dt["qkv"], dt["k_cache"], dt["v_cache"], dt["q_norm"], dt["k_norm"], dt["cos"],
                             dt["sin"], dt["out"], (BATCH, HKV, 1), (128, 1, 1))
    return pk, t


def eager(pk: PersistentKernel, t: dict) -> torch.Tensor:
    """The same decode attention in eager PyTorch, in the kernel's dtype, on the pages the pass saw."""
    meta = {k: pk.get_tensor(k) for k in ("paged_kv_indptr_buffer", "paged_kv_indices_buffer")}
    x = t["qkv"].view(BATCH, HKV, HQ // HKV + 2, D)
    q = x[:, :, :-2].reshape(BATCH, HQ, D)
    k_new, v_new = x[:, :, -2], x[:, :, -1]
    eps, pos = 1e-6, torch.full((BATCH,), CACHED)

    def norm_rope(h, w):
        h = h * torch.rsqrt(h.float().pow(2).mean(-1, keepdim=True) + eps).to(h.dtype) * w
        c, s = t["cos"][pos][:, None], t["sin"][pos][:, None]
        return h * c + torch.cat([-h[..., D // 2:], h[..., :D // 2]], -1) * s
    q, k_new = norm_rope(q, t["q_norm"]), norm_rope(k_new, t["k_norm"])
    kv = meta["paged_kv_indptr_buffer"].tolist()
    out = torch.empty(BATCH, HQ, D, dtype=q.dtype)
    for r in range(BATCH):
        pages = meta["paged_kv_indices_buffer"][kv[r]:kv[r + 1]].long()
        keys = torch.cat([t["k_cache"][pages].flatten(0, 1)[:CACHED], k_new[r:r + 1]])     # [S, Hkv, D]
        values = torch.cat([t["v_cache"][pages].flatten(0, 1)[:CACHED], v_new[r:r + 1]])
        out[r] = F.scaled_dot_product_attention(q[r][:, None], keys.transpose(0, 1), values.transpose(0, 1),
                                                enable_gqa=True)[:, 0]
    return out.reshape(BATCH, HQ * D)


def timed(dtype, repeat: int) -> tuple[float, float, float]:
    """(min pass seconds, min eager seconds, max |pass - eager|)."""
    pk, t = layer(dtype)
    before = {k: t[k].clone() for k in ("k_cache", "v_cache")}
    pk.compile()
    seconds = best(pk, repeat)
    for k, v in before.items():          # eager reads the cache as the pass found it
        t[k].copy_(v)
    pk()
    out = t["out"].clone()
    for k, v in before.items():
        t[k].copy_(v)
    torch_seconds = best(lambda: eager(pk, t), repeat)
    diff = float((out.double() - eager(pk, t).double()).abs().max())
    pk.finalize()
    return seconds, torch_seconds, diff


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    workers = testing.cpu_config()["num_workers"]
    print(f"Qwen3-8B decode attention ({HQ} q / {HKV} KV heads, head_dim {D}, {CACHED}-token cache, batch "
          f"{BATCH}), one test-mode pass, {workers} workers on {os.cpu_count()} cores, min of {args.repeat}")
    for dtype in (torch.bfloat16, torch.float32):
        emulated, eager_s, diff = timed(dtype, args.repeat)
        print(f"  {str(dtype)[6:]:9s} emulated {emulated * 1e3:8.1f} ms   eager PyTorch {eager_s * 1e3:6.1f} "
              f"ms (emulated / eager {emulated / eager_s:5.1f}x)   max |emulated - eager| {diff:.2e}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
