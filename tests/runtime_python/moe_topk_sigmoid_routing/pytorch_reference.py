"""moe_topk_sigmoid_routing reference: DeepSeek-V3's grouped router in plain torch, independent of the
kernel's loop. The selection is on fp32 scores (torch.sigmoid(x.float()) + bias, group scores the fp32
sum of topk(2), as DeepSeek-V3's router and MPK's test compute them), each choice a stable descending
sort (equal scores: the lower group / expert first); the weights in float64 from the chosen experts.
The planted logits and the routing indices / masks are moe_topk_softmax_routing's reference's."""
import os

import torch

from mirage.mpk import testing

softmax_ref = testing.load_reference(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                                  "moe_topk_softmax_routing", "pytorch_reference.py"))
PEAK, plant, logits, routing, stable_topk = (softmax_ref.PEAK, softmax_ref.plant, softmax_ref.logits,
                                             softmax_ref.routing, softmax_ref.stable_topk)


def selection(x: torch.Tensor, bias: torch.Tensor, topk: int, num_groups: int,
              topk_group: int) -> torch.Tensor:
    """[batch, topk] expert ids."""
    batch, experts = x.shape
    t = torch.sigmoid(x.float()) + bias.float()
    group_scores = t.view(batch, num_groups, experts // num_groups).topk(2, dim=-1).values.sum(dim=-1)
    groups = stable_topk(group_scores, topk_group)
    keep = torch.zeros(batch, num_groups, dtype=torch.bool).scatter_(1, groups, True)
    keep = keep.repeat_interleave(experts // num_groups, dim=1)
    return stable_topk(t.masked_fill(~keep, -float("inf")), topk)


def moe_topk_sigmoid_routing(x: torch.Tensor, bias: torch.Tensor, topk: int, num_groups: int = 8,
                             topk_group: int = 4, routed_scaling_factor: float = 2.5):
    """(topk_weight [batch, topk] float64, routing_indices, masks)."""
    sel = selection(x, bias, topk, num_groups, topk_group)
    s = torch.sigmoid(x.double()).gather(1, sel)
    ri, masks = routing(sel, x.shape[1])
    return s / (s.sum(dim=-1, keepdim=True) + 1e-20) * routed_scaling_factor, ri, masks


def make_bias(experts: int, kind: str, gen) -> torch.Tensor:
    """[experts] float32: "zero" (ties stay ties), "random" (0.1 x unit normal), "favour" (expert
    experts // 3 raised by 1: its group and it first for every row)."""
    b = torch.zeros(experts) if kind == "zero" else 0.1 * testing.randn((experts,), torch.float32, gen)
    if kind == "favour":
        b[experts // 3] = 1.0
    return b
