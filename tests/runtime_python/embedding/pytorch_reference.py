"""embedding reference: output[b] = weight[ids[b]], a zero row for an id outside [0, vocab); torch only."""
import torch
import torch.nn.functional as F


def embedding(ids: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """ids [batch] or [batch, 1] int64, weight [vocab, hidden] -> [batch, hidden] in weight's dtype (the
    rows themselves, not rounded: the layer copies them)."""
    ids = ids.reshape(-1)
    valid = (ids >= 0) & (ids < weight.shape[0])
    rows = F.embedding(torch.where(valid, ids, torch.zeros_like(ids)), weight)
    return torch.where(valid[:, None], rows, torch.zeros((), dtype=weight.dtype))


def source_ids(input_source: int, input_ids: torch.Tensor, tokens: torch.Tensor, step: int,
               batch: int) -> torch.Tensor:
    """The ids the layer looks up: input_source 1, input[b, 0]; 0, tokens[0, step + b] (request 0 from
    position step), -1 (outside the vocabulary) for a position past the tokens row."""
    if input_source == 1:
        return input_ids.reshape(-1)
    pos = torch.arange(batch) + step
    row = tokens[0]
    inside = (pos >= 0) & (pos < row.shape[0])
    return torch.where(inside, row[pos.clamp(0, row.shape[0] - 1)], torch.full_like(pos, -1))
