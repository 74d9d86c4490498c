"""moe_w2_linear reference, in float64, unrounded: a loop over the experts with masks (as vLLM's torch_moe).

x [B, topk, K], W [E, N, K], routing [E, B] (slot + 1 where token t routes to expert e, 0: not) ->
y [B, topk, N]: y[t, slot] = x[t, slot] @ W[e]^T. Also returns claimed [B, topk] (the (token, slot) pairs
some expert writes). The moe_mask is not read. The loop is moe_w13_linear's reference's per_slot (the
same kernel, csrc/tasks/moe_w13_linear.cuh; moe_w13_linear reads x[t] for every slot). torch only: testing
only loads that file.
"""
import os

import torch

from mirage.mpk import testing

w13_ref = testing.load_reference(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                              "moe_w13_linear", "pytorch_reference.py"))


def moe_w2_linear(x: torch.Tensor, w: torch.Tensor, routing: torch.Tensor):
    return w13_ref.per_slot(x, w, routing)
