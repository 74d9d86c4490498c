"""Meta tensors: test-mode defaults (docs/runtime.md, Meta tensors) and validation of caller overrides."""
from __future__ import annotations

import torch


def meta_specs(p: dict, total_requests: int) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
    """Expected shape and dtype of every meta tensor for these kernel parameters."""
    reqs, toks = p["max_num_batched_requests"], p["max_num_batched_tokens"]
    return {
        "tokens": ((total_requests, p["max_seq_length"]), torch.int64),
        "step": ((total_requests,), torch.int32),
        "prompt_lengths": ((total_requests,), torch.int32),
        "input_tokens": ((toks,), torch.int64),
        "output_tokens": ((toks,), torch.int64),
        "num_new_tokens": ((1,), torch.int32),
        "qo_indptr_buffer": ((reqs + 1,), torch.int32),
        "paged_kv_indptr_buffer": ((reqs + 1,), torch.int32),
        "paged_kv_indices_buffer": ((p["max_num_pages"],), torch.int32),
        "paged_kv_last_page_len_buffer": ((reqs,), torch.int32),
        "request_ids": ((reqs,), torch.int32),
        # MPK's scratch copy of the page list for in-place compaction; MPK files may pass it. The
        # runtime here compacts without it, so it is validated and kept, never handed to the module.
        "paged_kv_indices_snapshot": ((p["max_num_pages"],), torch.int32),
    }


def total_requests(given: dict, max_seq_length: int) -> int:
    """tokens.shape[0]; else a prompt_lengths (or step) override's length; else 1."""
    if "tokens" in given:
        t = given["tokens"]
        if not isinstance(t, torch.Tensor) or t.dim() != 2:
            raise ValueError(f"meta tensor 'tokens' must be a 2-D torch tensor (requests, max_seq_length), "
                             f"got {getattr(t, 'shape', type(t).__name__)}")
        if t.shape[1] != max_seq_length:
            raise ValueError(f"meta tensor 'tokens' has shape {tuple(t.shape)} but max_seq_length is "
                             f"{max_seq_length}: tokens.shape[1] must equal max_seq_length")
        return t.shape[0]
    for key in ("prompt_lengths", "step"):
        if key in given and isinstance(given[key], torch.Tensor) and given[key].dim() == 1:
            return given[key].shape[0]
    return 1


def build_meta(p: dict, given: dict, device: torch.device) -> dict[str, torch.Tensor]:
    """Validate overrides; allocate every missing meta tensor with its MPK default."""
    n = total_requests(given, p["max_seq_length"])
    specs = meta_specs(p, n)
    unknown = sorted(set(given) - set(specs))
    if unknown:
        raise ValueError(f"unknown meta tensor(s) {unknown}; known: {list(specs)}")
    meta = {}
    for key, (shape, dtype) in specs.items():
        if key in given:
            t = given[key]
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"meta tensor '{key}' must be a torch.Tensor, got {type(t).__name__}")
            if t.dtype != dtype:
                raise ValueError(f"meta tensor '{key}' has dtype {t.dtype}, expected {dtype}")
            if tuple(t.shape) != shape:
                raise ValueError(f"meta tensor '{key}' has shape {tuple(t.shape)}, expected {shape} "
                                 f"(total_num_requests={n}, max_seq_length={p['max_seq_length']}, "
                                 f"max_num_batched_tokens={p['max_num_batched_tokens']}, "
                                 f"max_num_batched_requests={p['max_num_batched_requests']}, "
                                 f"max_num_pages={p['max_num_pages']})")
            if t.device != device:
                raise ValueError(f"meta tensor '{key}' is on {t.device} but the kernel runs on {device}")
            if not t.is_contiguous():
                raise ValueError(f"meta tensor '{key}' must be contiguous")
            meta[key] = t
        else:
            # MPK fills these in test mode; the same defaults serve an offline run. A prompt can
            # not exceed max_seq_length (init_kernel rejects it), and MPK's test-mode files set
            # max_num_batched_tokens = batch with max_seq_length left at 1: clamp the default.
            fill = min(p["max_num_batched_tokens"], p["max_seq_length"]) if key == "prompt_lengths" else 0
            meta[key] = torch.full(shape, fill, dtype=dtype, device=device)
    return meta


# ---- values (docs/runtime.md, "Meta tensors: the values they may hold")

HINT = "docs/runtime.md, 'Meta tensors', lists the values each may hold"


def _first_bad(name: str, t: torch.Tensor, lo: tuple[int, str], hi: tuple[int, str], why: str = "",
               where: torch.Tensor | None = None) -> None:
    """ValueError at the first entry of 1-D `t` (where `where` holds, if given) outside [lo, hi], naming
    the meta tensor, the index, the value and the bound it crosses (lo, hi: (value, how to name it))."""
    v = t.detach().to("cpu", torch.int64)
    bad = (v < lo[0]) | (v > hi[0])
    if where is not None:
        bad &= where
    if bool(bad.any()):
        i = int(bad.nonzero()[0])
        x = int(v[i])
        bound = f"< {lo[1]}" if x < lo[0] else f"> {hi[1]}"
        raise ValueError(f"meta tensor '{name}'[{i}] = {x} {bound}{f' ({why})' if why else ''}; {HINT}")


def _indptr(name: str, t: torch.Tensor, end: tuple[int, str]) -> torch.Tensor:
    """An indptr: starts at 0, never decreases, stays within `end`; returned as int64 on the CPU."""
    v = t.detach().to("cpu", torch.int64)
    if int(v[0]) != 0:
        raise ValueError(f"meta tensor '{name}'[0] = {int(v[0])}, expected 0 (an indptr starts at 0); {HINT}")
    down = (v[1:] < v[:-1]).nonzero()
    if len(down):
        i = int(down[0]) + 1
        raise ValueError(f"meta tensor '{name}'[{i}] = {int(v[i])} < [{i - 1}] = {int(v[i - 1])} (an indptr "
                         f"never decreases); {HINT}")
    _first_bad(name, v, (0, "0"), end)
    return v


def check_requests(p: dict, meta: dict[str, torch.Tensor]) -> None:
    """The request tensors prepare_next_batch computes from: step in [0, max_seq_length] (step tokens are
    cached), prompt_lengths in [1, max_seq_length]. init_kernel refuses the same, after the launch."""
    seq = (p["max_seq_length"], f"max_seq_length ({p['max_seq_length']})")
    _first_bad("step", meta["step"], (0, "0"), seq, "the tokens of the request already in the KV cache")
    _first_bad("prompt_lengths", meta["prompt_lengths"], (1, "1"), seq, "a prompt has at least one token")


def check_batch(p: dict, meta: dict[str, torch.Tensor]) -> None:
    """A batch layout given as it is (a kernel-level run has no meta pass): the request tensors, then the
    indptrs (from 0, never decreasing, within the batch's rows and max_num_pages), the pages of the used
    slots (in the cache), last_page_len in [1, page_size] for a slot with pages, the request ids of slots
    with tokens, num_new_tokens."""
    check_requests(p, meta)
    rows, pages, ps = p["max_num_batched_tokens"], p["max_num_pages"], p["page_size"]
    qo = _indptr("qo_indptr_buffer", meta["qo_indptr_buffer"],
                 (rows, f"max_num_batched_tokens ({rows}), the batch's rows"))
    kv = _indptr("paged_kv_indptr_buffer", meta["paged_kv_indptr_buffer"],
                 (pages, f"max_num_pages ({pages})"))
    used = torch.arange(pages, device=kv.device) < int(kv[-1])
    _first_bad("paged_kv_indices_buffer", meta["paged_kv_indices_buffer"], (0, "0"),
               (pages - 1, f"max_num_pages - 1 ({pages - 1}), the cache's last page"),
               f"entries [0, {int(kv[-1])}) are the slots' pages", used)
    _first_bad("paged_kv_last_page_len_buffer", meta["paged_kv_last_page_len_buffer"], (1, "1"),
               (ps, f"page_size ({ps})"), "the tokens in the last page of a slot with pages",
               kv[1:] > kv[:-1])
    n = meta["step"].shape[0]
    _first_bad("request_ids", meta["request_ids"], (0, "0"), (n - 1, f"total_num_requests - 1 ({n - 1})"),
               "the request of a slot with tokens", qo[1:] > qo[:-1])
    _first_bad("num_new_tokens", meta["num_new_tokens"], (0, "0"), (rows, f"max_num_batched_tokens ({rows})"))
