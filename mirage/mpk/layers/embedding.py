"""embed_layer (MPK's name): output[b, :] = weight[id_b, :], a bit copy; grid.x splits hidden, grid.y rows.

input [batch, 1] int64 token ids, weight [vocab, hidden] -> output [batch, hidden], weight's dtype
(bf16, fp16, fp32). Kernel: csrc/tasks/embedding.cuh. The token id of output row b:
  input_source=1: input[b, 0] (the `input` tensor; in a model, the `input_tokens` meta tensor that
    prepare_next_batch fills with the batch's tokens, all requests', attached as a [batch, 1] view);
  input_source=0 (MPK's default): tokens[0, step[0] + b], from the `tokens` meta tensor, as MPK's
    `runtime_config.tokens + runtime_config.step[0]`: request 0's tokens from its position step[0] on,
    whatever the number of requests (the others are not read; a batch of several requests takes
    input_source=1). A position outside [0, max_seq_length) counts as an id outside the vocabulary.
    `input` is then read by no task: it only orders the layer after its writers, as in MPK.
An id outside [0, vocab) writes a zero row (MPK writes zeros for a negative id and reads out of
bounds for one >= vocab): defined behaviour, never a read outside `weight`.
Partition maps: grid.x splits hidden (weight dim 1, output dim 1), as MPK; grid.y splits output rows and
the input's rows with them (MPK maps grid.y to input dim 1, the spec-token dim; here that dim is 1).
"""
from __future__ import annotations

from ..dtypes import FLOATS, int64
from . import FINITE, NONZERO, NOT_SPLIT, Access, Layer, check_grid, check_splits, check_tensor

TASK_TYPE = 101          # MPK's TASK_EMBEDDING
# Tensor parallelism (mirage.mpk.testing.TP_KINDS): every rank looks up the whole table, as MPK's
# models run it (the embedding weight is not sharded).
TP = "replicated"
SOURCES = {0: "tokens[0, step[0] + b] (the tokens meta tensor)", 1: "input[b, 0]"}


def embed_layer(pk, name: str, input, weight, output, grid_dim, block_dim, input_source: int = 0) -> Layer:
    grid = check_grid(name, grid_dim, block_dim)
    x = check_tensor(name, "input", input, ndim=2, dtype=int64)
    batch = x.dims[0]
    if x.dims[1] != 1:
        raise ValueError(f"layer '{name}': tensor '{x.name}' (input) must be [batch, 1], one token id per "
                         f"output row, got shape {x.dims}")
    w = check_tensor(name, "weight", weight, ndim=2, dtype=FLOATS)
    hidden = w.dims[1]
    y = check_tensor(name, "output", output, ndim=2, dims=(batch, hidden), dtype=w.dtype)
    if grid[2] != 1:
        raise ValueError(f"layer '{name}': grid_dim.z must be 1 (grid.x splits hidden, grid.y rows); "
                         f"got {grid}")
    if isinstance(input_source, bool) or input_source not in SOURCES:
        raise ValueError(f"layer '{name}': input_source must be 0 ({SOURCES[0]}) or 1 ({SOURCES[1]}), got "
                         f"{input_source!r}")
    inputs = [Access("input", x, (NOT_SPLIT, 0, NOT_SPLIT)), Access("weight", w, (1, NOT_SPLIT, NOT_SPLIT))]
    outputs = [Access("output", y, (1, 0, NOT_SPLIT))]
    check_splits(name, grid, inputs, outputs)
    max_seq_length = int(pk.params["max_seq_length"])
    return Layer(name, "embedding", grid, inputs, outputs, (w.dtype,), iparams=(input_source, max_seq_length),
                 checks=(FINITE, NONZERO), params={"input_source": input_source})
