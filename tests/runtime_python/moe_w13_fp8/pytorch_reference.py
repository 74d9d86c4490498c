"""moe_w13_fp8 reference, in float64, unrounded: the codes dequantized with their scales read as UE8M0,
then a loop over the experts with masks (as vLLM's torch_moe).

qx [B, K] e4m3, sx [B, K / G] float32, qw [E, N, K] e4m3, sw [E, N, K / G] float32, routing [E, B]
(slot + 1 where token t routes to expert e, 0: not) -> (y [B, topk, N], claimed [B, topk]): y[t, slot] =
x~[t] @ w~[e]^T with x~ = qx * pow2_floor(sx) per block of G = K / (sx's last dim) codes (the kernel's and
MPK's reading of a float32 scale: its exponent; from torch.frexp here, not from the bits). Also: quantize(),
the inputs the tests feed (e4m3 codes of random data and their block scales, power-of-two or amax / 448).
torch only.
"""
import importlib.util
import os

import torch

_path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "moe_w13_linear",
                     "pytorch_reference.py")
_spec = importlib.util.spec_from_file_location("_moe_linear_reference_for_fp8", _path)
_experts = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_experts)


def pow2_floor(s: torch.Tensor) -> torch.Tensor:
    """The largest power of two <= s (s > 0 normal), in float64: s = m 2^e with m in [0.5, 1)."""
    return torch.ldexp(torch.ones_like(s, dtype=torch.float64), torch.frexp(s.double()).exponent - 1)


def block_scales(s: torch.Tensor, k: int) -> torch.Tensor:
    """[..., k] float64: each code's scale as the kernel reads it, pow2_floor of its block's s [..., k/G]."""
    return pow2_floor(s).repeat_interleave(k // s.shape[-1], dim=-1)


def dequantize(q: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """q [..., K] e4m3 with s [..., K / G]: q * pow2_floor(s) per block of G codes, float64 (exact)."""
    return q.double() * block_scales(s, q.shape[-1])


def quantize(x: torch.Tensor, group: int, pow2: bool):
    """(codes e4m3, scales float32 [..., K / group]) of x per block of `group` along its last dim: scale =
    amax / 448 (pow2: rounded up to a power of two, so x = code * scale up to e4m3's rounding)."""
    blocks = x.double().unflatten(-1, (-1, group))
    s = (blocks.abs().amax(-1) / 448.0).clamp(min=2.0**-40)
    if pow2:
        s = torch.ldexp(torch.ones_like(s), torch.ceil(torch.log2(s)).long())
    s = s.float()
    q = (blocks / s.double()[..., None]).clamp(-448, 448).flatten(-2).to(torch.float8_e4m3fn)
    return q, s


def moe_linear(x: torch.Tensor, w: torch.Tensor, routing: torch.Tensor, topk: int):
    """y [B, topk, N] float64 and claimed [B, topk]: y[t, slot] = x[t] @ w[e]^T (x [B, K]) or x[t, slot] @
    w[e]^T (x [B, topk, K]) for every routing[e, t] = slot + 1: the bf16/fp32 expert linears' reference
    (tests/runtime_python/moe_w13_linear/pytorch_reference.py, a loop over the experts with masks) on the
    dequantized operands."""
    return _experts.moe_w13_linear(x, w, routing, topk) if x.dim() == 2 else _experts.per_slot(x, w, routing)


def moe_w13_fp8(qx, sx, qw, sw, routing, topk: int):
    return moe_linear(dequantize(qx, sx), dequantize(qw, sw), routing, topk)
