"""layernorm reference: y = (x - mean) / sqrt(var + eps) * w + b per row, in float64, unrounded.

mean and the biased var over the last dim, as torch.nn.functional.layer_norm. torch only: a reference
that shared code with the layer would share its bugs.
"""
import torch


def layernorm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    x64 = x.double()
    mean = x64.mean(dim=-1, keepdim=True)
    var = (x64 - mean).pow(2).mean(dim=-1, keepdim=True)
    return (x64 - mean) / torch.sqrt(var + eps) * w.double() + b.double()
