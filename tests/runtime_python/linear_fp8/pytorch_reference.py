"""linear_fp8 reference, in float64, unrounded: the codes dequantized with their packed UE8M0 scales, then
x~ @ w~^T (+ residual).

qx [B, K] e4m3 with sx [packed_k, >= B] words (row b's in column b), qw [N, K] with sw [packed_k, N]; code
c of block g = byte g % 4 of word g / 4 (shifts and masks here), its scale 2^(c - 127) (ldexp); blocks of
128. torch only.
"""
import torch

BLOCK = 128


def block_scales(words: torch.Tensor, rows: int, k: int) -> torch.Tensor:
    """[rows, k] float64: each code's scale 2^(c - 127) from the packed words [packed_k, >= rows]."""
    w = words.view(torch.int32).long() & 0xFFFFFFFF
    codes = torch.stack([(w >> (8 * i)) & 0xFF for i in range(4)], dim=1)     # [packed_k, 4, cols]
    codes = codes.flatten(0, 1)[: k // BLOCK, :rows].T                         # [rows, groups]
    return torch.ldexp(torch.ones(codes.shape, dtype=torch.float64), codes - 127).repeat_interleave(BLOCK, -1)


def dequantize(q: torch.Tensor, words: torch.Tensor) -> torch.Tensor:
    return q.double() * block_scales(words, q.shape[0], q.shape[1])


def linear_fp8(qx, sx, qw, sw, residual=None) -> torch.Tensor:
    y = dequantize(qx, sx) @ dequantize(qw, sw).T
    return y if residual is None else y + residual.double()
