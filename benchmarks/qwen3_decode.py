"""The 2-layer test Qwen3 (tests/runtime_python/test_mode/test_qwen3_decoder.py's hf_model) under the CPU
emulation beside Hugging Face eager on the same machine, in one run:
  1. prefill: one test-mode pass of qwen3.build over 3 requests of 5, 3 and 8 tokens (16 rows, 3 slots,
     8 pages of 4; fp32 and bf16), pk() timed apart from compile (and whether compile was a cache hit),
     its logits checked against HF's on the same tokens; beside it HF forward of each request alone and
     of the 3 as one right-padded batch.
  2. decode (fp32): qwen3.decode_kernel (test_mode False, one pk() runs the offline loop) with
     max_new_tokens 1 and NEW; (pk() time difference) / (extra passes) is the cost of a decode pass, its
     tokens first checked equal to HF generate's; beside it HF one decode step with a KV cache for the 3
     requests (one at a time; transformers 5's `cache=`, cropped back after each) and hf_model.generate's
     time per new token (3 requests, one at a time).
Prints min-of-N wall times with ratios; not a timed test. Run: python benchmarks/qwen3_decode.py [--repeat 3]
"""
import argparse
import os
import sys
import time

import torch

os.environ.setdefault("MPK_LOG_LEVEL", "WARNING")

from pertask_overhead import best  # noqa: E402  (this folder: min wall time of N calls)

from mirage.mpk import testing  # noqa: E402
from mirage.mpk.models import qwen3  # noqa: E402
from mirage.mpk.persistent_kernel import PersistentKernel  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "tests", "runtime_python", "test_mode"))
from test_qwen3_decoder import hf_model, tokens  # noqa: E402  (the same seeded model and prompts)
from test_qwen3_generate import hf_stream, prompts  # noqa: E402

PROMPTS, NEW = (5, 3, 8), 6


def hf_logits(model, toks: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return torch.cat([model(input_ids=toks[r:r + 1, :n], use_cache=False).logits[0]
                          for r, n in enumerate(PROMPTS)])


def hf_padded(model, toks: torch.Tensor) -> torch.Tensor:
    """The 3 requests as one right-padded batch (attention mask): the valid rows' logits, in batch order."""
    width = max(PROMPTS)
    mask = (torch.arange(width)[None] < torch.tensor(PROMPTS)[:, None]).long()
    with torch.no_grad():
        out = model(input_ids=toks[:, :width], attention_mask=mask, use_cache=False).logits
    return torch.cat([out[r, :n] for r, n in enumerate(PROMPTS)])


def prefill(dtype: torch.dtype, repeat: int) -> None:
    model, toks = hf_model(dtype), tokens(PROMPTS)
    meta = {"tokens": toks.clone(), "prompt_lengths": torch.tensor(PROMPTS, dtype=torch.int32),
            "step": torch.zeros(len(PROMPTS), dtype=torch.int32)}
    pk = PersistentKernel(**testing.cpu_config(
        jitter_seed=None, max_seq_length=16, max_num_batched_tokens=16, max_num_batched_requests=3,
        max_num_pages=8, page_size=4, meta_tensors=meta))
    t = qwen3.build(pk, model)
    t0 = time.perf_counter()
    pk.compile()
    compile_s, hit = time.perf_counter() - t0, pk.build.hit
    pass_s = best(pk, repeat)
    n, ref = sum(PROMPTS), hf_logits(model, toks)
    diff = float((t["logits"][:n].double() - ref.double()).abs().max())
    same = int((t["logits"][:n].argmax(-1) == ref.argmax(-1)).sum())
    pad_diff = float((hf_padded(model, toks).double() - ref.double()).abs().max())
    pk.finalize()
    if dtype == torch.float32:
        assert same == n and diff < 1e-4, (same, diff)
    hf_s, pad_s = best(lambda: hf_logits(model, toks), repeat), best(lambda: hf_padded(model, toks), repeat)
    print(f"  {str(dtype)[6:]:8s} pk() {pass_s * 1e3:7.1f} ms   HF per request {hf_s * 1e3:6.1f} ms "
          f"(pk / HF {pass_s / hf_s:5.1f}x)   HF padded batch {pad_s * 1e3:6.1f} ms "
          f"(pk / HF {pass_s / pad_s:5.1f}x)")
    print(f"           compile {compile_s:.2f} s (cache {'hit' if hit else 'miss'})   max |logits - HF| "
          f"{diff:.2e} (|HF| <= {float(ref.abs().max()):.2f}), argmax equal {same}/{n}; "
          f"HF padded vs alone {pad_diff:.1e}")


def decode_run(model, ps: list, new: int, repeat: int) -> tuple[float, int]:
    """(min pk() seconds, passes) of decode_kernel(max_new_tokens=new), tokens checked against HF generate."""
    pk = qwen3.decode_kernel(model, ps, new, page_size=4)
    start = {k: pk.get_tensor(k).clone() for k in ("tokens", "step")}
    want = [hf_stream(model, p, new) for p in ps]

    def once() -> None:
        for k, v in start.items():          # the offline loop advances step and appends to tokens
            pk.get_tensor(k).copy_(v)
        pk()
        got = qwen3.generated(pk, ps, new)
        assert got == want, (new, got, want)
    seconds = best(once, repeat)
    passes = pk.passes
    pk.finalize()
    return seconds, passes


def decode(repeat: int) -> None:
    model, ps = hf_model(torch.float32), prompts()
    (t1, p1), (tn, pn) = decode_run(model, ps, 1, repeat), decode_run(model, ps, NEW, repeat)
    per_pass = (tn - t1) / (pn - p1)
    caches = []
    with torch.no_grad():
        for p in ps:
            out = model(input_ids=torch.tensor([p]), use_cache=True)
            caches.append((out.cache, out.logits[0, -1].argmax().view(1, 1)))

    def step() -> None:                     # one decode token per request, the cache cut back after it
        with torch.no_grad():
            for cache, last in caches:
                model(input_ids=last, cache=cache, use_cache=True)
                cache.crop(-1)
    step_s = best(step, repeat)
    gen_s = best(lambda: [hf_stream(model, p, NEW) for p in ps], repeat) / NEW
    print(f"  float32  pk() {t1 * 1e3:7.1f} ms ({p1} passes, max_new_tokens 1)  {tn * 1e3:7.1f} ms "
          f"({pn} passes, max_new_tokens {NEW}); tokens equal HF generate's")
    print(f"           per decode pass {per_pass * 1e3:6.2f} ms   HF decode step (3 requests, KV cache) "
          f"{step_s * 1e3:6.2f} ms (pk / HF {per_pass / step_s:5.1f}x)   HF generate per token "
          f"(3 requests) {gen_s * 1e3:6.2f} ms (pk / HF {per_pass / gen_s:5.1f}x)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    workers = testing.cpu_config()["num_workers"]
    print(f"2-layer test Qwen3 (hidden 128, vocab 256), prompts {list(PROMPTS)}, {workers} workers on "
          f"{os.cpu_count()} cores, torch {torch.get_num_threads()} threads, min of {args.repeat}")
    print("prefill: one test-mode pass (16 rows, 3 slots, pages of 4) vs HF eager forward")
    for dtype in (torch.float32, torch.bfloat16):
        prefill(dtype, args.repeat)
    print(f"decode: decode_kernel offline loop, max_new_tokens 1 vs {NEW} (difference / extra passes)")
    decode(args.repeat)


if __name__ == "__main__":
    main()
