"""quantize_fp8 reference: per-token group quantization to e4m3, in float64, unrounded.

torch only: a reference that shared code with the layer would share its bugs. The codes are the
quotients x / scale before their rounding to e4m3 (the layer's tolerance is that rounding: half an e4m3
ulp, tol_elementwise(float8_e4m3)); the scales are amax / 448 before their rounding to fp32.
"""
import torch

FP8_MAX = 448.0          # torch.finfo(torch.float8_e4m3fn).max
AMAX_FLOOR = 1e-10       # MPK's: a group of zeros gets scale 1e-10 / 448, codes 0


def quantize_fp8(x: torch.Tensor, group_size: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    """(codes [..., K] unrounded, scales [..., K / group_size]), float64."""
    groups = x.double().unflatten(-1, (-1, group_size))
    scale = groups.abs().amax(-1).clamp_min(AMAX_FLOOR) / FP8_MAX
    codes = (groups / scale.unsqueeze(-1)).clamp(-FP8_MAX, FP8_MAX).flatten(-2)
    return codes, scale


def dequantize_fp8(q: torch.Tensor, scale: torch.Tensor, group_size: int = 128) -> torch.Tensor:
    """q * scale per group, float64 (what a consumer of the codes computes with)."""
    return (q.double().unflatten(-1, (-1, group_size)) * scale.double().unsqueeze(-1)).flatten(-2)
