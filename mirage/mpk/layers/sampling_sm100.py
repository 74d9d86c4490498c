"""sampling_sm100_layer (MPK's name): output[b, 0] = a token id drawn from softmax(logits[b, :]).

logits [batch, vocab] (bf16, fp16, fp32; vocab below 2^32) -> output [batch, 1] int64 (in a model, the
`output_tokens` meta tensor attached as a [batch, 1] view, as argmax_layer). Gumbel-max with a
counter-based generator (Philox4x32-10): a draw depends only on (seed, request, position, token id),
so it is the same for any number of workers, tiling, task order, rank or batch company, and a fixed seed
reproduces bit for bit. Kernel (the generator, the transform, the keys): csrc/tasks/sampling_sm100.cuh.
Masked tokens (logit -inf) are never drawn unless the whole row is masked (then id 0, as argmax); a NaN
logit wins, as in argmax_layer. Temperature 1 (scale the logits first for another), as MPK.
seed: an int in [0, 2^63) (the layer attaches it as a one-element int64 tensor '<layer name>_seed'), or
an attached one-element int64 tensor. Either way the kernel reads it when the task runs, so a new value
written between launches (`pk.get_tensor("sampling_sm100_0_seed").fill_(7)`) draws anew without
recompiling; MPK compiles its seed into the task (docs/mpk_differences.md).
The keys come from the meta tensors: each row's batch slot (qo_indptr_buffer), its request (request_ids)
and its position (step). Partition map, as MPK's (0, -1, -1): grid.x splits the batch rows.
"""
from __future__ import annotations

import torch

from ..dtypes import int64
from ..meta import total_requests
from ..tensor import DTensor
from . import NONZERO, NOT_SPLIT, Access, Layer, check_grid, check_splits, check_tensor
from .argmax import check_ids, check_logits

TASK_TYPE = 265          # MPK's TASK_SAMPLING_SM100
# Tensor parallelism (mirage.mpk.testing.TP_KINDS): every rank draws from the same full (replicated)
# logits with the same seed and keys, so every rank draws the same ids, as MPK's models run it.
TP = "replicated"


def seed_tensor(pk, name: str, seed, device) -> DTensor:
    """The seed as a one-element int64 tensor: the caller's, or one attached for an int."""
    if isinstance(seed, DTensor):
        return check_tensor(name, "seed", seed, ndim=1, dims=(1,), dtype=int64)
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2 ** 63:
        raise ValueError(f"layer '{name}': seed must be an int in [0, 2^63) or an attached one-element int64 "
                         f"tensor, got {seed!r}")
    return pk.attach_input(torch.tensor([seed], dtype=torch.int64, device=device), name=f"{name}_seed")


def sampling_sm100_layer(pk, name: str, logits, output, grid_dim, block_dim, seed=42) -> Layer:
    grid = check_grid(name, grid_dim, block_dim)
    x, batch, _ = check_logits(name, logits, "logits")
    y = check_ids(name, output, batch)
    inputs = [Access("logits", x, (0, NOT_SPLIT, NOT_SPLIT))]
    outputs = [Access("output", y, (0, NOT_SPLIT, NOT_SPLIT))]
    check_splits(name, grid, inputs, outputs)
    s = seed_tensor(pk, name, seed, x.data.device if x.data is not None else pk.device or "cpu")
    inputs.append(Access("seed", s))      # last: a refused call attaches nothing
    rows = batch // grid[0]
    slots = int(pk.params["max_num_batched_requests"])
    requests = total_requests(pk._given_meta, int(pk.params["max_seq_length"]))
    return Layer(name, "sampling_sm100", grid, inputs, outputs, (x.dtype,), checks=(NONZERO,),
                 task_iparams=lambda c: (c[0] * rows, slots, requests), params={"seed": s.name})
