"""argmax_reduce reference: index[b, t] of the first task t whose value is the row's maximum (torch.argmax
over the values: NaN first); torch only."""
import torch


def argmax_reduce(value: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """value, index [batch, tasks] -> [batch, 1] int64."""
    return torch.gather(index, 1, torch.argmax(value.double(), dim=-1, keepdim=True))     # int64: exact
