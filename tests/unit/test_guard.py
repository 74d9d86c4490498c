"""mirage.mpk.guard: a guarded copy holds the tensor's span (any strides) 256-byte aligned between red
zones and guard pages; damage in either red zone is found with its byte range; close is idempotent.
(Touching a guard page from Python would end the process: csrc/runtime/guard.h's handler is what
makes such an access a report, tests/runtime_python/test_mode/test_memory_safety.py.)"""
import ctypes
import mmap

import pytest
import torch

from mirage.mpk import guard


def test_copy_keeps_shape_dtype_strides_values_and_alignment():
    t = torch.randn(5, 7, dtype=torch.bfloat16)
    g = guard.guarded_copy(t)
    assert g.tensor.shape == t.shape and g.tensor.dtype == t.dtype and g.tensor.stride() == t.stride()
    assert torch.equal(g.tensor, t) and g.tensor.data_ptr() != t.data_ptr()
    assert g.tensor.data_ptr() % 256 == 0 and g.tensor.data_ptr() == g.base
    assert g.nbytes == 5 * 7 * 2 and g.red_damage() == []
    g.tensor.fill_(1)                                  # writing inside the span damages nothing
    assert g.red_damage() == [] and not torch.equal(g.tensor, t)
    g.close()


def test_strided_source_copies_its_span_with_the_gaps():
    base = torch.arange(60, dtype=torch.float32).reshape(6, 10)
    t = base[1:, 2:9:2]                               # storage offset 12, strides (10, 2)
    g = guard.guarded_copy(t)
    assert g.tensor.stride() == (10, 2) and torch.equal(g.tensor, t)
    assert g.nbytes == guard.span_bytes(t) == (1 + 4 * 10 + 3 * 2) * 4
    flat = g.tensor.as_strided((g.nbytes // 4,), (1,))
    assert torch.equal(flat, base.flatten()[12:12 + g.nbytes // 4])     # the gaps are copied too
    g.close()


def test_red_damage_at_both_ends_as_byte_ranges_relative_to_the_tensor():
    t = torch.zeros(64, dtype=torch.float32)          # 256 bytes
    g = guard.guarded_copy(t, red_bytes=300)
    assert g.red_lo == 512 and (g.nbytes + g.red_lo + g.red_hi) % mmap.PAGESIZE == 0 and g.red_hi >= 300
    past = g.tensor.as_strided((66,), (1,))           # one and two elements past the end
    past[64:] = 7.0
    ctypes.memset(g.base - 3, 0, 2)                   # bytes -3 and -2
    assert g.red_damage() == [(-3, -1), (256, 264)]
    g.fill_red()
    assert g.red_damage() == []
    g.close()


def test_guard_pages_surround_the_red_zones_and_close_is_idempotent():
    t = torch.ones(3000, dtype=torch.float16)
    g = guard.guarded_copy(t)
    (lo0, hi0), (lo1, hi1) = g.guard_pages
    assert hi0 == g.base - g.red_lo and lo1 == g.base + g.nbytes + g.red_hi
    assert all((b - a) >= max(1 << 20, g.nbytes) and a % mmap.PAGESIZE == 0 for a, b in g.guard_pages)
    g.close()
    g.close()


def test_flat_variant_has_red_zones_but_no_pages():
    t = torch.arange(10, dtype=torch.int32)
    g = guard.guarded_copy(t, red_bytes=64, pages=False)   # what a CUDA tensor gets
    assert g.guard_pages == [] and torch.equal(g.tensor, t) and g.red_damage() == []
    g.tensor.as_strided((11,), (1,))[10] = 5
    assert g.red_damage() == [(40, 44)]                     # the 4 bytes of element 10
    g.close()


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="red_bytes=0"):
        guard.guarded_copy(torch.zeros(2), red_bytes=0)
    g = guard.guarded_copy(torch.zeros(0))
    assert g.nbytes == 0 and g.tensor.numel() == 0 and g.red_damage() == []
    g.close()
