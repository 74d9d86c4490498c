"""moe_silu_mul reference: SwiGLU per (token, slot) row, in float64, unrounded.

x [batch, topk, 2I]: each row [gate (I) | up (I)] (MPK's layout); y [batch, topk, I] =
silu(gate) * up, with torch's silu. torch only: a reference that shared code with the layer would
share its bugs.
"""
import torch


def moe_silu_mul(x: torch.Tensor) -> torch.Tensor:
    gate, up = x.double().chunk(2, dim=-1)
    return torch.nn.functional.silu(gate) * up
