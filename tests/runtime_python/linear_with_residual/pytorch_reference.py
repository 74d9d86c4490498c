"""linear_with_residual reference: y = x @ W^T + residual, in float64, unrounded.

x [B, K], W [N, K], residual [B, N] -> y [B, N]. With world_size > 1 only rank 0 adds the
residual (add_residual=False on the others, so the allreduce counts it once).
"""
import torch


def linear_with_residual(x: torch.Tensor, w: torch.Tensor, residual: torch.Tensor,
                         add_residual: bool = True) -> torch.Tensor:
    y = x.double() @ w.double().T
    return y + residual.double() if add_residual else y
