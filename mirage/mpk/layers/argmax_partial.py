"""argmax_partial_layer (MPK's name): each task's maximum and its index over one vocabulary range.

input [batch, vocab] logits (bf16, fp16, fp32) -> output=(value, index), each [batch, num_tasks]:
  value[b, t] = input[b, i] (its bits, in the logits' dtype, as MPK), index[b, t] = i (int64, as MPK),
  i the first maximum (torch.argmax's rule, NaN first: layers/argmax.py) of input[b, t*C:(t+1)*C],
  C = vocab / grid.x. i is the GLOBAL vocabulary index; MPK's is relative to t*C and its reduce adds
  t*C back (docs/mpk_differences.md). argmax_reduce_layer picks the final one.
Kernel: csrc/tasks/argmax_partial.cuh.
Partition maps, as MPK's: input (1, 0, -1), value and index (1, 0, -1): grid.x splits the vocabulary
(num_tasks = grid.x = value's dim 1), grid.y the batch. A grid.x that does not divide vocab is refused,
naming the sizes that do (151,936 = 2^7 * 1187: 1, 2, 4, ..., 128).
"""
from __future__ import annotations

from ..dtypes import int64
from . import NOT_SPLIT, Access, Layer, check_grid, check_splits, check_tensor
from .argmax import check_logits

TASK_TYPE = 110          # MPK's TASK_ARGMAX_PARTIAL
# Tensor parallelism (mirage.mpk.testing.TP_KINDS): every rank reduces the same replicated logits.
TP = "replicated"


def argmax_partial_layer(pk, name: str, input, output, grid_dim, block_dim) -> Layer:
    grid = check_grid(name, grid_dim, block_dim)
    x, batch, vocab = check_logits(name, input)
    if not isinstance(output, (tuple, list)) or len(output) != 2:
        raise ValueError(f"layer '{name}': output must be the pair (value, index), got {output!r}")
    value = check_tensor(name, "value", output[0], ndim=2, dims=(batch, grid[0]), dtype=x.dtype)
    index = check_tensor(name, "index", output[1], ndim=2, dims=(batch, grid[0]), dtype=int64)
    split = (1, 0, NOT_SPLIT)
    inputs = [Access("input", x, split)]
    outputs = [Access("value", value, split), Access("index", index, split)]
    check_splits(name, grid, inputs, outputs)
    chunk = vocab // grid[0]
    return Layer(name, "argmax_partial", grid, inputs, outputs, (x.dtype,), checks=(),
                 task_iparams=lambda c: (c[0] * chunk,), params={"chunk": chunk})
