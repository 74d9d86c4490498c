"""Guarded buffers: a copy of a tensor between red zones and, on the CPU, inaccessible pages.

    [guard pages][red zone][tensor span][red zone to the end of its page][guard pages]

The span starts 256-byte aligned (as a cudaMalloc'd buffer does) after a red zone of at least
`red_bytes`; the red zone after it runs to the end of the page. Red zones hold one byte (RED_BYTE, or
the caller's: test mode gives each tensor its own, mirage/mpk/poisons.py): an access a little past
either end lands there and shows after the pass as damage (`red_damage`). The guard
pages (PROT_NONE, at least 1 MiB and at least the span on each side, MAP_NORESERVE so they cost
address space only) turn a far access into SIGSEGV, which the runtime's handler
(csrc/runtime/guard.h) records and answers by opening the page (filled with RED_BYTE), so the
access completes inside this mapping; `damage(opened)` then reads what was written there, and
`protect()` closes the pages again. On a CUDA device there are no guard pages (red zones only).

The mapping lives as long as the tensor (torch keeps the mmap object alive); `close()` unmaps at
once, after which the tensor must not be used.
"""
from __future__ import annotations

import ctypes as C
import mmap

import torch

RED_BYTE = 0xA5     # 0xA5A5 is bf16 -2.9e-16, fp32 -2.9e-16: neither a NaN nor the output poison (written.py)
ALIGN = 256
PAGE = mmap.PAGESIZE
_NORESERVE = getattr(mmap, "MAP_NORESERVE", 0x4000)    # Python < 3.12 lacks the constant (Linux's value)
_libc = C.CDLL(None, use_errno=True)
_libc.mprotect.argtypes = [C.c_void_p, C.c_size_t, C.c_int]


def _up(n: int, to: int) -> int:
    return -(-n // to) * to


def span_bytes(t: torch.Tensor) -> int:
    """Bytes from the tensor's first element to just past its last (its storage span)."""
    if t.numel() == 0:
        return 0
    return (1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride()))) * t.element_size()


def _runs(mask: torch.Tensor, base: int) -> list[tuple[int, int]]:
    """[lo, hi) runs of True in a 1-D mask, offset by base."""
    idx = mask.nonzero().flatten().tolist()
    runs: list[tuple[int, int]] = []
    for i in idx:
        if runs and runs[-1][1] == base + i:
            runs[-1] = (runs[-1][0], base + i + 1)
        else:
            runs.append((base + i, base + i + 1))
    return runs


class Guarded:
    """A guarded copy (build it with guarded_copy). Offsets in reports are bytes from the tensor's
    first byte: negative before it, >= nbytes past its end."""

    tensor: torch.Tensor
    guard_pages: list[tuple[int, int]]

    def __init__(self, t: torch.Tensor, red_bytes: int, pages: bool):
        self.nbytes = span_bytes(t)
        self.red_lo = _up(max(red_bytes, 1), ALIGN)                     # before the span
        self.red_hi = _up(self.nbytes + self.red_lo + red_bytes, PAGE) - self.nbytes - self.red_lo \
            if pages else red_bytes                                      # after it
        self._map, self.guard_pages = None, []
        inner = self.red_lo + self.nbytes + self.red_hi
        if pages:
            guard = _up(max(1 << 20, self.nbytes), PAGE)
            flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | _NORESERVE
            self._map = mmap.mmap(-1, 2 * guard + _up(inner, PAGE), flags=flags,
                                  prot=mmap.PROT_READ | mmap.PROT_WRITE)
            anchor = C.c_char.from_buffer(self._map)       # (a buffer export: dropped at once)
            self.base = C.addressof(anchor) + guard + self.red_lo      # the tensor's first byte
            del anchor
            bottom = self.base - self.red_lo
            top = bottom + _up(inner, PAGE)
            self.guard_pages = [(bottom - guard, bottom), (top, top + guard)]
            self.protect()
            self._bytes = torch.frombuffer(self._map, dtype=torch.uint8, count=inner, offset=guard)
        else:
            self._bytes = torch.empty(inner, dtype=torch.uint8, device=t.device)
            self.base = self._bytes.data_ptr() + self.red_lo
        span = self._bytes[self.red_lo:self.red_lo + max(self.nbytes, t.element_size())]
        self.tensor = span.view(t.dtype).as_strided(t.shape, t.stride())
        if self.nbytes:
            flat = t.as_strided((self.nbytes // t.element_size(),), (1,), t.storage_offset())
            span[:self.nbytes].view(t.dtype).copy_(flat)      # the whole span, gaps of strided tensors too
        self.fill_red()

    def fill_red(self, byte: int = RED_BYTE) -> None:
        """(Re)fill both red zones with `byte`."""
        self.red = byte
        self._bytes[:self.red_lo].fill_(byte)
        self._bytes[self.red_lo + self.nbytes:].fill_(byte)

    def red_damage(self) -> list[tuple[int, int]]:
        """[lo, hi) byte ranges (from the tensor's first byte) of red-zone bytes not holding the fill."""
        end = self.red_lo + self.nbytes
        return (_runs(self._bytes[:self.red_lo] != self.red, -self.red_lo)
                + _runs(self._bytes[end:] != self.red, self.nbytes))

    def damage(self, opened: list[int] = ()) -> list[tuple[int, int]]:
        """red_damage plus the bytes not holding RED_BYTE in the guard pages at these addresses (pages
        the fault handler opened; any address inside a page names it)."""
        runs = self.red_damage()
        for page in sorted({a - a % PAGE for a in opened}):
            buf = (C.c_uint8 * PAGE).from_address(page)
            runs += _runs(torch.frombuffer(buf, dtype=torch.uint8) != RED_BYTE, page - self.base)
        return sorted(runs)

    def protect(self) -> None:
        """Make the guard pages inaccessible again (the handler opens the ones a kernel touched)."""
        for lo, hi in self.guard_pages:
            if _libc.mprotect(lo, hi - lo, 0) != 0:     # PROT_NONE
                raise OSError(C.get_errno(), f"mprotect of guard pages [{lo:#x}, {hi:#x}) failed")

    def close(self) -> None:
        """Unmap (idempotent); the tensor must not be used after."""
        if self._map is not None:
            self._map.close()
            self._map = None
        self._bytes = None


def guarded_copy(t: torch.Tensor, red_bytes: int = ALIGN, pages: bool | None = None) -> Guarded:
    """A copy of `t` (any strides: its storage span) between red zones of at least red_bytes and, with
    pages (the default on the CPU), guard pages; on a CUDA device a plain allocation with red zones."""
    if red_bytes < 1:
        raise ValueError(f"guarded_copy: red_bytes={red_bytes}; expected at least 1")
    if any(s < 0 for s in t.stride()):
        raise ValueError(f"guarded_copy: negative strides {t.stride()} are not supported")
    pages = t.device.type == "cpu" if pages is None else pages
    if pages and t.device.type != "cpu":
        raise ValueError(f"guarded_copy: guard pages need a CPU tensor; this one is on {t.device}")
    return Guarded(t, red_bytes, pages)
