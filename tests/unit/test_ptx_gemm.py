"""A GEMM assembled from the tensor-core instructions of csrc/runtime/ptx.h (ldmatrix, mma.sync, cp.async;
tests/csrc/ptx_gemm.cpp), run by the CPU emulation, against torch.matmul in float64; and the negative
controls of issue 32: each planted defect is caught, by a named error or by the budget.

The budget (docs/simt.md, "Tensor cores and asynchronous copies"): the products of 16-bit inputs are exact
in fp32, and a tensor core adds them in an order and with a rounding the PTX ISA does not specify (some
truncate: a unit roundoff of 2^-23, twice round-to-nearest's). testing.tolerance's k-term bound
(k + 1) u32 sum |a b| holds for any order with round-to-nearest, so k = 2 K covers truncation as well.
The emulation itself adds in increasing k, rounding to nearest, well inside.
"""
import ctypes

import pytest
import torch

from mirage.mpk import testing

csrc_library = testing.load_reference(__file__, name="csrc_library")

SEEDS = range(4)
# (M, N, K): a one-row tile, a non-power-of-two shape with partial tiles in M, N and K, a square one.
SHAPES = [pytest.param((1, 8, 8), id="1x8x8"),
          pytest.param((48, 40, 72), marks=pytest.mark.quick, id="48x40x72"),
          pytest.param((64, 64, 64), id="64x64x64")]
# defect -> the words its failure must show: a named error, or None for a wrong result (the budget)
CONTROLS = {
    1: None,                                                   # A's registers 0 and 1 swapped (rows g, g + 8)
    2: None,                                                   # .trans forgotten ("kn" only)
    3: "will still write: its group has not been waited for",  # no cp.async.wait_group
    4: "cp.async",                                             # every wait one group short
    5: "is not 16-byte aligned",                               # an ldmatrix row address 8 bytes off
    6: "mma.sync.aligned.m16n8k16",                            # the mma in a branch half the warp takes
    7: "with 2 cp.async copies in flight",                     # a slice prefetched past the end, never waited
}


@pytest.fixture(scope="module")
def gemm(tmp_path_factory):
    args = [ctypes.c_void_p] * 3 + [ctypes.c_int] * 6 + [ctypes.c_uint64, ctypes.c_char_p, ctypes.c_int]
    fn = csrc_library.entry_point(tmp_path_factory.mktemp("ptx"), "ptx_gemm.cpp", "ptx_gemm", args)

    def run(a: torch.Tensor, b: torch.Tensor, kn: bool, bug: int = 0, seed: int = 0):
        m, k = a.shape
        n = b.shape[0]
        stored = b.t().contiguous() if kn else b.contiguous()
        d = torch.full((m, n), float("nan"))                  # poisoned: every element must be written
        err = ctypes.create_string_buffer(4096)
        f16 = int(a.dtype == torch.float16)
        rc = fn(a.data_ptr(), stored.data_ptr(), d.data_ptr(), m, n, k, int(kn), f16, bug, seed, err,
                len(err))
        assert rc in (0, 1), err.value.decode()
        return d, err.value.decode()
    return run


def _inputs(m, n, k, dtype, seed):
    g = torch.Generator().manual_seed(1000 + seed)
    return torch.randn(m, k, generator=g).to(dtype), torch.randn(n, k, generator=g).to(dtype)


def _budget(a, b):
    k = a.shape[1]
    return testing.tolerance(torch.float32, k=2 * k, scale=a.double().abs() @ b.double().abs().t(), ops=0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("kn", [False, True], ids=["nk", "kn-trans"])
@pytest.mark.parametrize("shape", SHAPES)
def test_gemm_equals_torch_matmul(gemm, shape, kn, dtype):
    m, n, k = shape
    for seed in SEEDS:
        a, b = _inputs(m, n, k, dtype, seed)
        d, err = gemm(a, b, kn, seed=seed)
        assert not err, err
        testing.assert_close(f"ptx_gemm {m}x{n}x{k} {'kn' if kn else 'nk'} seed {seed}", d,
                             torch.matmul(a.double(), b.double().t()), _budget(a, b))


@pytest.mark.parametrize("bug", sorted(CONTROLS))
def test_negative_control_is_caught(gemm, bug):
    """Over the seeds the defect fails at least once (a copy-order bug only on the seeds whose copies
    land late), every failure is the expected kind, and the evidence is printed."""
    m, n, k = 48, 40, 72

    def run(seed):
        a, b = _inputs(m, n, k, torch.bfloat16, seed)
        return (*gemm(a, b, kn=bug == 2, bug=bug, seed=seed), a, b)
    csrc_library.gemm_control_is_caught(f"ptx_gemm control {bug}", SEEDS, run, _budget, (CONTROLS[bug],))
