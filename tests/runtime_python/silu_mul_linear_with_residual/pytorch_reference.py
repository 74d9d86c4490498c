"""silu_mul_linear_with_residual reference: y = (silu(gate) * up) @ W^T + residual, in float64, unrounded.

x [B, 2I] = [gate | up] (whole halves), W [N, I], residual [B, N] -> y [B, N]. With world_size > 1 only
rank 0 adds the residual. round_h: h = silu(gate) * up rounded to that dtype first (what the kernel and the
unfused chain compute), for the bit-level structure checks only; the budget is against the unrounded one.
torch only: a reference that shared code with the layer would share its bugs.
"""
import torch
import torch.nn.functional as F


def silu_mul_linear_with_residual(x: torch.Tensor, w: torch.Tensor, residual: torch.Tensor,
                                  add_residual: bool = True) -> torch.Tensor:
    gate, up = x.double().chunk(2, dim=-1)
    y = (F.silu(gate) * up) @ w.double().T
    return y + residual.double() if add_residual else y


def hidden(x: torch.Tensor) -> torch.Tensor:
    """|silu(gate) * up| in float64: the GEMM operand's magnitude, for the budget's scale."""
    gate, up = x.double().chunk(2, dim=-1)
    return (F.silu(gate) * up).abs()
