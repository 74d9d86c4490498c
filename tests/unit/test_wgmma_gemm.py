"""A Hopper GEMM assembled from TMA, mbarrier and wgmma (csrc/runtime/ptx.h; tests/csrc/wgmma_gemm.cpp: a
producer thread filling a ring of stages, a consumer warpgroup issuing wgmma), run by the CPU emulation,
against torch.matmul in float64 for every swizzle mode; and issue 33's negative controls: each planted
defect is caught, by a named error or by the budget.

The budget is test_ptx_gemm.py's (docs/simt.md, "Tensor cores and asynchronous copies"): the products of
16-bit inputs are exact in fp32 and the tensor core's order and rounding of the sum are unspecified, so
testing.tolerance's k-term bound with k = 2 K.
"""
import ctypes

import pytest
import torch

from mirage.mpk import testing

csrc_library = testing.load_reference(__file__, name="csrc_library")

SEEDS = range(4)
SWIZZLES = [0, 32, 64, 128]
# (M, N, K): one tile; a non-power-of-two shape with partial tiles in M, N and K (a one-row last tile in M)
SHAPES = [pytest.param((64, 64, 64), marks=pytest.mark.quick, id="64x64x64"),
          pytest.param((129, 72, 200), id="129x72x200")]   # (N = 72: a multiple of 8, as "kn" needs)
# defect -> the words its failure must show: named errors (any of them), or None: a wrong result (the budget)
CONTROLS = {
    # 1: the consumers wait on the wrong parity of the full barrier
    1: ("that nothing wrote in this task", "will still write: its mbarrier has not been waited on",
        "mbarrier wait that can never complete"),
    # 2: expect_tx short by one box
    2: ("more bytes completed on it than expect_tx announced", "will still write: its mbarrier",
        "transaction bytes outstanding"),
    # 3: the descriptors' swizzle unlike the tensor maps' (None: a wrong result, caught by the budget)
    3: ("that nothing wrote in this task", None),
    # 4: a consumer releases its stage before the wgmma reading it is waited for
    4: ("is read by wgmma.mma_async",),
    # 6: the producer refills a stage without waiting on its empty barrier
    6: ("is read by wgmma.mma_async", "overlaps bytes still in flight", "more bytes completed",
        "was written while", "one arrival more than the count", "mbarrier wait that can never complete"),
    # 7: "kn", imm-trans-b forgotten: B's MN-major tile read as K-major (a wrong result, or bytes of another
    # stage, still in flight, never written or past the shared memory)
    7: (None, "will still write: its mbarrier has not been waited on", "that nothing wrote in this task",
        "outside the block's"),
}


@pytest.fixture(scope="module")
def gemm(tmp_path_factory):
    args = [ctypes.c_void_p] * 3 + [ctypes.c_int] * 7 + [ctypes.c_uint64, ctypes.c_char_p, ctypes.c_int]
    fn = csrc_library.entry_point(tmp_path_factory.mktemp("wgmma"), "wgmma_gemm.cpp", "wgmma_gemm", args)

    def run(a: torch.Tensor, b: torch.Tensor, swizzle: int, bug: int = 0, seed: int = 0, kn: bool = False):
        m, k = a.shape
        n = b.shape[0]
        stored = b.t().contiguous() if kn else b.contiguous()  # "kn": B as [K, N], read MN-major
        d = torch.full((m, n), float("nan"))                  # poisoned: every element must be written
        err = ctypes.create_string_buffer(8192)
        f16 = int(a.dtype == torch.float16)
        rc = fn(a.data_ptr(), stored.data_ptr(), d.data_ptr(), m, n, k, f16, swizzle, int(kn), bug, seed, err,
                len(err))
        assert rc in (0, 1), err.value.decode()
        return d, err.value.decode()
    return run


def _inputs(m, n, k, dtype, seed):
    g = torch.Generator().manual_seed(2000 + seed)
    return torch.randn(m, k, generator=g).to(dtype), torch.randn(n, k, generator=g).to(dtype)


def _budget(a, b):
    scale = a.double().abs() @ b.double().abs().t()
    return testing.tolerance(torch.float32, k=2 * a.shape[1], scale=scale, ops=0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("kn", [False, True], ids=["nk", "kn-mn-major"])
@pytest.mark.parametrize("swizzle", SWIZZLES, ids=[f"swizzle{s}" for s in SWIZZLES])
@pytest.mark.parametrize("shape", SHAPES)
def test_gemm_equals_torch_matmul(gemm, shape, swizzle, kn, dtype):
    m, n, k = shape
    for seed in SEEDS[:2]:
        a, b = _inputs(m, n, k, dtype, seed)
        d, err = gemm(a, b, swizzle, seed=seed, kn=kn)
        assert not err, err
        label = f"wgmma_gemm {m}x{n}x{k} {'kn' if kn else 'nk'} swizzle {swizzle} seed {seed}"
        testing.assert_close(label, d,
                             torch.matmul(a.double(), b.double().t()), _budget(a, b))


@pytest.mark.parametrize("bug", sorted(CONTROLS))
def test_negative_control_is_caught(gemm, bug):
    """Over the seeds the defect fails at least once (a race only on the seeds whose schedule shows it),
    every failure is the expected kind, and the evidence is printed."""
    m, n, k = 64, 64, 448   # 7 stages of K: the ring turns over twice

    def run(seed):
        a, b = _inputs(m, n, k, torch.bfloat16, seed)
        return (*gemm(a, b, 128, bug=bug, seed=seed, kn=bug == 7), a, b)
    csrc_library.gemm_control_is_caught(f"wgmma_gemm control {bug}", SEEDS, run, _budget, CONTROLS[bug])
