"""Poisons and red-zone fills that differ per tensor and per run (docs/kernel_tests.md, docs/runtime.md).

With one poison for every tensor, a kernel that copies a never-written element of `x` into the slot of
`y` that nothing should touch changes nothing, and a copy from one red zone into another neither: the
checks cannot see it. Here tensor number `index` (DTensor.id) of run `run` gets its own bit patterns:

  poison(dtype, index, run, 0): "never written". A float gets a signalling NaN (arithmetic quiets it,
      so the exact bits mean stored by no one, or bit-copied from such an element): fp32 0x7FA5xxxx
      (0x7FA5 marks it, xxxx the tensor), bf16 / fp16 any signalling NaN (their payloads are 6 and 9
      bits). e4m3 has one NaN that no conversion writes (0xFF) and so no room to vary: its second
      poison varies. Integers: 0x7FA5..xxxx, an index no layout reaches.
  poison(dtype, index, run, 1): finite (12.1 in fp32, 8..16 in bf16, 2.5..3 in fp16, 1..15 in e4m3):
      testing/kernel.py's second image, so that a value read from outside a tile changes the result
      whatever the kernel's arithmetic does with a NaN.
  red_fill(index, run, k): the byte of the tensor's red zones, none that makes a NaN or an inf in any
      float type when repeated (so a red-zone byte read as a value is finite and not a poison).

Within one run, different indices get different patterns (up to SPACE[dtype] tensors of a dtype, 247
red fills); the run shifts them all. Values are returned as the signed integer of the dtype's width,
ready for a fill through an integer view of the same width.
"""
from __future__ import annotations

import torch

# (first pattern, number of patterns) per element width and poison: pattern i is base + i, except the
# 2-byte NaNs, which run over the signalling NaNs of the dtype (both signs)
_FINITE = {1: (0x38, 32), 2: (0x4100, 128), 4: (0x41410000, 1 << 16), 8: (0x4141414141410000, 1 << 16)}
_INT_NAN = {4: (0x7FA50001, 0xFFFF), 8: (0x7FA5A5A5A5A50001, 0xFFFF)}
_HALF_NAN = {torch.bfloat16: (0x7F80, 7), torch.float16: (0x7C00, 10)}   # exponent all ones, mantissa bits
# red-zone bytes: b repeated is no NaN / inf as bf16, fp16, fp32 or e4m3 (0x7C..0x7F, 0xFC..0xFF), nor 0
RED_FILLS = tuple(b for b in range(1, 256) if b & 0x7F < 0x7C)
QUIET = {torch.float32: 0x00400000, torch.float16: 0x0200, torch.bfloat16: 0x0040}


def _shift(run: int, space: int) -> int:
    """Where run `run` starts in a space of `space` patterns (a fixed odd multiplier: runs spread)."""
    return (run * 0x9E3779B97F4A7C15 >> 17) % space


def _signed(bits: int, width: int) -> int:
    return bits - (1 << 8 * width) if bits >= 1 << (8 * width - 1) else bits


def space(dtype: torch.dtype, k: int) -> int:
    """How many tensors of this dtype get distinct patterns of poison k in one run."""
    width = dtype.itemsize
    if k == 1:
        return _FINITE[width][1]
    if dtype in _HALF_NAN:
        return 2 * ((1 << _HALF_NAN[dtype][1] - 1) - 1)
    return 1 if width == 1 else _INT_NAN[width][1]


def poison(dtype: torch.dtype, index: int, run: int, k: int = 0) -> int:
    """The bit pattern (a signed integer of the dtype's width) of tensor `index`'s poison k in run `run`."""
    width = dtype.itemsize
    n = space(dtype, k)
    i = (_shift(run + 7919 * k, n) + index) % n
    if k == 1:
        return _signed(_FINITE[width][0] + i, width)
    if width == 1:
        return 0xFF                  # e4m3's NaN (0xFF in a uint8 view)
    if dtype in _HALF_NAN:
        exp, bits = _HALF_NAN[dtype]
        per_sign = (1 << bits - 1) - 1           # payloads 1 .. 2^(bits-1) - 1: the quiet bit clear
        sign = 1 << 15 if i >= per_sign else 0
        return _signed(sign | exp | (i % per_sign + 1), 2)
    return _signed(_INT_NAN[width][0] + i, width)


def red_fill(index: int, run: int, k: int = 0) -> int:
    """The red-zone byte of tensor `index` in run `run` (k: kernel.py's image; k = 1 never equals k = 0)."""
    n = len(RED_FILLS)
    return RED_FILLS[(_shift(run, n) + index + k * (n // 2)) % n]


def is_poison(bits: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Which of these bit patterns (an integer view) are a first poison of some tensor of `dtype`, of any
    run: bf16 / fp16 every signalling NaN (no arithmetic makes one); e4m3 0xFF; wider types 0x7FA5..
    marked (fp32: a signalling NaN)."""
    width = dtype.itemsize
    b = bits.long() & ((1 << 8 * width) - 1) if width < 8 else bits.long()
    if dtype in _HALF_NAN:
        exp, m = _HALF_NAN[dtype]
        quiet = 1 << m - 1
        return (b & exp == exp) & (b & quiet == 0) & (b & (quiet - 1) != 0)
    if width == 1:
        return b == 0xFF
    mark = _INT_NAN[width][0] - 1
    return (b & ~0xFFFF == mark) & (b & 0xFFFF != 0)
