"""silu_mul reference: SwiGLU over g groups, in float64, unrounded.

x [B, 2I] is g tiles of width 2m (m = I / g), each [gate (m) | up (m)], the layout that
shuffle_tensors([w_gate, w_up], shuffled_dim=0, num_groups=g) gives a linear's output.
y [B, I]: y[:, j*m + t] = silu(gate_j[:, t]) * up_j[:, t], silu(v) = v / (1 + exp(-v)).
The result depends on g (g = 1 means [all gate | all up]), so the caller passes the grid's g.
"""
import torch


def silu_mul(x: torch.Tensor, groups: int) -> torch.Tensor:
    batch, width = x.shape
    assert width % (2 * groups) == 0, f"width {width} is not 2 * m * groups (groups={groups})"
    m = width // (2 * groups)
    tiles = x.double().reshape(batch, groups, 2, m)
    gate, up = tiles[:, :, 0, :], tiles[:, :, 1, :]
    return (gate / (1.0 + torch.exp(-gate)) * up).reshape(batch, groups * m)
