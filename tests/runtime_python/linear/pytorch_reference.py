"""linear reference: y = x @ W^T, in float64, unrounded.

x [B, K], W [N, K] (out_features, in_features) -> y [B, N].
"""
import torch


def linear(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x.double() @ w.double().T
