"""rmsnorm_linear reference: y = rmsnorm(x) * w_norm @ W^T, in float64, unrounded.

x [B, K], w_norm [K], W [N, K] -> y [B, N]. torch only: a reference that shared code with the layer
would share its bugs.
"""
import torch


def rmsnorm_linear(x: torch.Tensor, w_norm: torch.Tensor, w: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    xd = x.double()
    normed = xd * torch.rsqrt(xd.pow(2).mean(dim=-1, keepdim=True) + eps) * w_norm.double()
    return normed @ w.double().T


def normed_scale(x: torch.Tensor, w_norm: torch.Tensor, w: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """sum_k |n_bk * W_jk| per output, n = the normalized row: the linear's error scale."""
    xd = x.double()
    normed = xd * torch.rsqrt(xd.pow(2).mean(dim=-1, keepdim=True) + eps) * w_norm.double()
    return normed.abs() @ w.double().abs().T
