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


def quantize_fp8_ue8m0(x: torch.Tensor, group_size: int = 128):
    """scale_ue8m0=True: (codes [..., K] unrounded float64, words [packed_k, aligned_rows] int64 holding
    the uint32 values, scales [..., K / group_size] float64 powers of two). Per group, s = amax / 448 in
    fp32 (the float32 number the kernel rounds up), its power of two 2^ceil(log2 s) from torch.frexp (s = m
    2^e, m in [0.5, 1): e - 1 for m = 0.5, else e), the UE8M0 code ceil(log2 s) + 127; four codes per word,
    group 4p + i in byte i of word p; flattened row r's words in column r; the padding 0."""
    groups = x.double().unflatten(-1, (-1, group_size))
    s = (groups.abs().amax(-1).clamp_min(AMAX_FLOOR).float() / FP8_MAX).double()
    m, e = torch.frexp(s)
    up = torch.where(m == 0.5, e - 1, e).long()
    pow2 = torch.ldexp(torch.ones_like(s), up)
    codes = (groups / pow2.unsqueeze(-1)).clamp(-FP8_MAX, FP8_MAX).flatten(-2)
    per_row = (up + 127).clamp(0, 255).reshape(-1, up.shape[-1])       # [rows, groups]
    rows, n = per_row.shape
    words_k = -(-n // 4)
    padded = torch.zeros(rows, 4 * words_k, dtype=torch.int64)
    padded[:, :n] = per_row
    words = sum(padded[:, i::4] << (8 * i) for i in range(4))            # [rows, packed_k]
    out = torch.zeros(words_k, -(-rows // 4) * 4, dtype=torch.int64)
    out[:, :rows] = words.T
    return codes, out, pow2
