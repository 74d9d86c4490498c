"""argmax_partial reference: each task's first maximum (torch.argmax's rule) over its vocabulary range,
as (value, global index); torch only."""
import torch


def argmax_partial(x: torch.Tensor, tasks: int) -> tuple[torch.Tensor, torch.Tensor]:
    """x [batch, vocab] -> (value [batch, tasks] in x's dtype, index [batch, tasks] int64, global)."""
    batch, vocab = x.shape
    chunk = vocab // tasks
    local = torch.argmax(x.double().reshape(batch, tasks, chunk), dim=-1)
    index = local + torch.arange(tasks) * chunk
    return x[torch.arange(batch)[:, None], index], index     # indexing keeps a NaN's bits (gather: not)
