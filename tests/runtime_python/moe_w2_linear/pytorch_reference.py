"""moe_w2_linear reference, in float64, unrounded: a loop over the experts with masks (as vLLM's torch_moe).

x [B, topk, K], W [E, N, K], routing [E, B] (slot + 1 where token t routes to expert e, 0: not) ->
y [B, topk, N]: y[t, slot] = x[t, slot] @ W[e]^T. Also returns claimed [B, topk] (the (token, slot) pairs
some expert writes). The moe_mask is not read. torch only.
"""
import torch


def moe_w2_linear(x: torch.Tensor, w: torch.Tensor, routing: torch.Tensor):
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


def route(batch: int, experts: int, topk: int, gen: torch.Generator, kind: str = "topk"):
    """(routing [E, B], mask [E + 1]) int32 in MPK's layout: kind "topk": each token's topk distinct experts
    at random; "one": every token to expert experts // 2 + 1 in slot 0 (the other slots unclaimed);
    "hole": topk, then token 0's last slot unclaimed. mask: the experts with tokens in increasing order,
    then their count."""
    routing = torch.zeros(experts, batch, dtype=torch.int32)
    for t in range(batch):
        if kind == "one":
            routing[experts // 2 + 1, t] = 1
            continue
        chosen = torch.randperm(experts, generator=gen)[:topk]
        routing[chosen, t] = torch.arange(1, topk + 1, dtype=torch.int32)
    if kind == "hole":
        routing[routing[:, 0] == topk, 0] = 0
    active = (routing > 0).any(1).nonzero().flatten()
    mask = torch.zeros(experts + 1, dtype=torch.int32)
    mask[:active.numel()] = active.int()
    mask[experts] = active.numel()
    return routing, mask
