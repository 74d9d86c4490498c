"""splitk_linear reference: y = y_0 + x @ W^T, in float64, unrounded, and what the budget needs.

x [B, K], W [N, K], y_0 [B, N] (the output's value before the layer). partials(x, W, splits): the
s = splits K-slice partial sums x[:, j K/s:(j+1) K/s] @ W[:, same]^T, each one task column's share.
"""
import torch


def splitk_linear(x: torch.Tensor, w: torch.Tensor, y0: torch.Tensor) -> torch.Tensor:
    return y0.double() + x.double() @ w.double().T


def partials(x: torch.Tensor, w: torch.Tensor, splits: int) -> list[torch.Tensor]:
    return [xs.double() @ ws.double().T for xs, ws in zip(x.chunk(splits, dim=1), w.chunk(splits, dim=1))]
