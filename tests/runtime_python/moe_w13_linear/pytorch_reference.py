"""moe_w13_linear reference, in float64, unrounded: a loop over the experts with masks (as vLLM's torch_moe).

x [B, K], W [E, N, K], routing [E, B] (slot + 1 where token t routes to expert e, 0: not) -> y [B, topk, N]:
y[t, slot] = x[t] @ W[e]^T. Also returns claimed [B, topk] (the (token, slot) pairs some expert writes;
the others are 0 here and unwritten by the kernel). The moe_mask is not read: the experts with tokens are
found from the routing itself. The loop is per_slot, whose x has a row per (token, slot): moe_w2_linear's
reference (the same kernel, csrc/tasks/moe_w13_linear.cuh) is per_slot itself. torch only.
"""
import torch


def moe_w13_linear(x: torch.Tensor, w: torch.Tensor, routing: torch.Tensor, topk: int):
    return per_slot(x[:, None, :].expand(-1, topk, -1), w, routing)     # every slot of token t reads x[t]


def per_slot(x: torch.Tensor, w: torch.Tensor, routing: torch.Tensor):
    """x [B, topk, K] -> (y [B, topk, N] float64, claimed [B, topk]): y[t, slot] = x[t, slot] @ W[e]^T."""
    batch, topk, n = x.shape[0], x.shape[1], w.shape[1]
    y = torch.zeros(batch, topk, n, dtype=torch.float64)
    claimed = torch.zeros(batch, topk, dtype=torch.bool)
    for e in range(w.shape[0]):
        tokens = (routing[e] > 0).nonzero().flatten()
        if tokens.numel() == 0:
            continue
        slots = routing[e, tokens].long() - 1
        y[tokens, slots] = x[tokens, slots].double() @ w[e].double().T
        claimed[tokens, slots] = True
    return y, claimed
