"""moe_mul_sum_add reference: the MoE combine in float64, unrounded.

x [batch, topk, hidden], w [batch, topk] (float32), residual [batch, hidden]:
y = sum_k w[:, k, None] * x[:, k, :] + residual. torch only, one vectorized sum (not the kernel's loop):
a reference that shared code with the layer would share its bugs.
"""
import torch


def moe_mul_sum_add(x: torch.Tensor, w: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
    return (w.double()[..., None] * x.double()).sum(1) + residual.double()


def scale(x: torch.Tensor, w: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
    """sum_k |w_k x_k| + |residual| per output element: what the fp32 roundings are relative to."""
    return (w.double().abs()[..., None] * x.double().abs()).sum(1) + residual.double().abs()
