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
