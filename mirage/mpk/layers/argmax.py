"""argmax_layer (MPK's name): output[b, 0] = torch.argmax(input[b, :]), the greedy token id.

input [batch, vocab] logits (bf16, fp16, fp32; any vocab below 2^32, 151,936 and 153,600 too) ->
output [batch, 1] int64 (in a model, the `output_tokens` meta tensor attached as a [batch, 1] view:
prepare_next_batch copies a finished prompt's last row into `tokens`). Kernel: csrc/tasks/argmax.cuh.
Ties and NaN as torch.argmax, exactly: on equal values the lowest index (+0 and -0 are equal); a row
holding a NaN gives its first NaN's index (a NaN counts above +inf); an all -inf row gives 0. MPK's
kernel breaks ties by its reduction order and skips NaN (docs/mpk_differences.md).
Partition map: none, as MPK's (-1, -1, -1): one task takes every row (grid_dim (1, 1, 1)); the split
form is argmax_partial_layer + argmax_reduce_layer.
"""
from __future__ import annotations

from ..dtypes import FLOATS, int64
from . import NONZERO, NOT_SPLIT, Access, Layer, check_grid, check_splits, check_tensor

TASK_TYPE = 109          # MPK's TASK_ARGMAX
# Tensor parallelism (mirage.mpk.testing.TP_KINDS): every rank takes the argmax of the same full
# (replicated) logits row, as MPK's models run it (the lm_head output is gathered first).
TP = "replicated"
MAX_VOCAB = 2 ** 32      # the kernel packs a column into 32 bits


def check_logits(name: str, input, role: str = "input") -> tuple:
    """The logits [batch, vocab], vocab below MAX_VOCAB; returns (tensor, batch, vocab)."""
    x = check_tensor(name, role, input, ndim=2, dtype=FLOATS)
    if x.dims[1] >= MAX_VOCAB:
        raise ValueError(f"layer '{name}': tensor '{x.name}' ({role}) has {x.dims[1]} columns; at most "
                         f"{MAX_VOCAB - 1} (the kernel packs a column index into 32 bits)")
    return x, x.dims[0], x.dims[1]


def check_ids(name: str, output, batch: int):
    """The [batch, 1] int64 token ids."""
    return check_tensor(name, "output", output, ndim=2, dims=(batch, 1), dtype=int64)


def argmax_layer(pk, name: str, input, output, grid_dim, block_dim) -> Layer:
    grid = check_grid(name, grid_dim, block_dim)
    x, batch, _ = check_logits(name, input)
    y = check_ids(name, output, batch)
    inputs = [Access("input", x, (NOT_SPLIT, NOT_SPLIT, NOT_SPLIT))]
    outputs = [Access("output", y, (NOT_SPLIT, NOT_SPLIT, NOT_SPLIT))]
    check_splits(name, grid, inputs, outputs)
    return Layer(name, "argmax", grid, inputs, outputs, (x.dtype,), checks=(NONZERO,))
