"""rmsnorm reference: y = x * rsqrt(mean(x^2) + eps) * w, in float64, unrounded."""
import torch


def rmsnorm(x: torch.Tensor, w: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    x64 = x.double()
    return x64 * torch.rsqrt(x64.pow(2).mean(dim=-1, keepdim=True) + eps) * w.double()
