"""moe_topk_softmax_routing reference: torch.softmax in float64, then a stable top-k (descending
values, equal values in expert order: the lower expert first), renormalized over the top-k; the
expert-major routing indices and the activated-expert masks built from the selection. Also the planted
logits the tests share. torch only, independent of the kernel's loop."""
import torch

PEAK = 8.0     # above every unit-normal logit, exact in bf16 / fp16


def stable_topk(scores: torch.Tensor, k: int) -> torch.Tensor:
    """[batch, E] -> [batch, k] expert ids by (-score, expert): a stable descending sort keeps equal
    scores in expert order."""
    return torch.sort(scores, dim=-1, descending=True, stable=True).indices[:, :k]


def routing(sel: torch.Tensor, experts: int) -> tuple[torch.Tensor, torch.Tensor]:
    """sel [batch, k] -> routing_indices [E, batch] (slot + 1, 0 = not routed), masks [E + 1]
    (the activated experts ascending, -1 after them, their count last)."""
    batch, k = sel.shape
    ri = torch.zeros(experts, batch, dtype=torch.int32)
    for b in range(batch):
        for slot in range(k):
            ri[sel[b, slot], b] = slot + 1
    active = torch.nonzero(ri.ne(0).any(dim=1)).flatten()
    masks = torch.full((experts + 1,), -1, dtype=torch.int32)
    masks[:len(active)] = active.to(torch.int32)
    masks[experts] = len(active)
    return ri, masks


def moe_topk_softmax_routing(x: torch.Tensor, topk: int):
    """(topk_weight [batch, topk] float64, routing_indices, masks)."""
    p = torch.softmax(x.double(), dim=-1)
    sel = stable_topk(p, topk)
    w = p.gather(1, sel)
    ri, masks = routing(sel, x.shape[1])
    return w / w.sum(dim=-1, keepdim=True), ri, masks


def plant(x: torch.Tensor, kind: str) -> torch.Tensor:
    """Row x (in place, returned) made a case."""
    n = x.shape[0]
    if kind == "tie":             # equal maxima on two lanes, then an equal pair one lane apart
        x[[n - 1, 1]] = PEAK
        x[[n // 2 + 1, n // 2]] = PEAK - 1
    elif kind == "tie_lane":      # equal maxima 32 apart (one lane's scan), n >= 64
        x[[min(35, n - 1), 3]] = PEAK
    elif kind == "all_equal":     # every logit equal: experts 0, 1, ... in order
        x[:] = 0.5
    elif kind == "favour":        # expert n // 3 first for every such row
        x[n // 3] = PEAK
    elif kind != "random":
        raise ValueError(kind)
    return x


def logits(batch: int, experts: int, dtype, gen, kinds=("random",)) -> torch.Tensor:
    """[batch, experts] unit-normal logits (testing.randn), row b planted as kinds[b % len(kinds)]."""
    from mirage.mpk import testing

    x = testing.randn((batch, experts), dtype, gen)
    for b in range(batch):
        plant(x[b], kinds[b % len(kinds)])
    return x
