"""testing.tol_normalization, the budget for a row normalization (docs/tolerances.md, "Deriving a
budget for a new reduction"), checked on a layernorm computed in plain torch: a two-pass fp32
layernorm (mean, then the variance of x - mean, rsqrt, times w) against float64 passes inside the
budget with an rms ratio well below 1; the same layernorm accumulating its two reductions in bf16
(the degraded kernel a budget must reject) fails it. tol_rmsnorm is tol_normalization with
rmsnorm's numbers. No kernel is built.
"""
import pytest
import torch

from mirage.mpk import testing

ROWS, LENGTH, EPS = 16, 4096, 1e-5


def inputs():
    gen = testing.generator(offset=4242)
    # a mean of 3 against a spread of 2: the subtracted mean's error matters (the centered term)
    x = torch.randn(ROWS, LENGTH, generator=gen, dtype=torch.float32) * 2 + 3
    w = torch.randn(LENGTH, generator=gen, dtype=torch.float32)
    return x, w


def layernorm64(x, w):
    x64 = x.double()
    d = x64 - x64.mean(-1, keepdim=True)
    return d * torch.rsqrt(d.pow(2).mean(-1, keepdim=True) + EPS) * w.double()


def layernorm32(x, w):
    """Two passes in fp32: mean, then the mean of (x - mean)^2; every op rounded to fp32."""
    mu = x.sum(-1, keepdim=True) / LENGTH
    d = x - mu
    rstd = torch.rsqrt((d * d).sum(-1, keepdim=True) / LENGTH + EPS)
    return d * rstd * w


def bf16_sum(t):
    """A sum accumulated in bf16, term by term (torch's own bf16 sum accumulates in fp32)."""
    acc = torch.zeros(t.shape[0], dtype=torch.bfloat16)
    for j in range(t.shape[1]):
        acc = acc + t[:, j].bfloat16()
    return acc.float().unsqueeze(-1)


def layernorm_bf16_accumulation(x, w):
    mu = bf16_sum(x) / LENGTH
    d = x - mu
    rstd = torch.rsqrt(bf16_sum(d * d) / LENGTH + EPS)
    return d * rstd * w


def budget(x, w):
    x64 = x.double()
    rstd = torch.rsqrt((x64 - x64.mean(-1, keepdim=True)).pow(2).mean(-1, keepdim=True) + EPS)
    centered = x64.abs().mean(-1, keepdim=True) * rstd * w.double().abs()
    return testing.tol_normalization(torch.float32, LENGTH, ops=7, centered=centered)


def test_fp32_layernorm_passes_inside_the_budget_with_rms_ratio_below_one():
    x, w = inputs()
    ref, tol = layernorm64(x, w), budget(x, w)
    c = testing.compare(layernorm32(x, w), ref, tol)
    testing.evidence("layernorm.fp32_two_pass", layernorm32(x, w), ref, tol, c)
    assert c.passed and c.rms_checked and c.rms_ratio < 1, c.rms_field()


def test_bf16_accumulating_layernorm_fails_the_budget():
    """Negative control: the budget is not so wide that a kernel summing in bf16 passes."""
    x, w = inputs()
    ref, tol = layernorm64(x, w), budget(x, w)
    bad = layernorm_bf16_accumulation(x, w)
    c = testing.compare(bad, ref, tol)
    testing.evidence("layernorm.bf16_accumulation", bad, ref, tol, c)
    assert not c.passed and c.n_bad > 0, c.rms_field()
    with pytest.raises(AssertionError, match="is not close"):
        testing.assert_close("layernorm.bf16_accumulation", bad, ref, tol)


def test_without_the_centered_term_the_fp32_layernorm_would_fail():
    """The centered term is needed, not decoration: the mean's error is absolute, so elements near
    the mean leave a budget that is relative to the result only."""
    x, w = inputs()
    c = testing.compare(layernorm32(x, w), layernorm64(x, w),
                        testing.tol_normalization(torch.float32, LENGTH, ops=7))
    print(f"without centered: {c.n_bad} elements outside, {c.rms_field()}")
    assert c.n_bad > 0


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
def test_tol_rmsnorm_is_tol_normalization_with_the_same_numbers(dtype):
    for hidden in (7, 96, 4096):
        a, b = testing.tol_rmsnorm(dtype, hidden), testing.tolerance(dtype, ops=hidden / 2 + 6)
        assert (a.atol, a.rtol, a.why, a.var_abs, a.var_rel) == (b.atol, b.rtol, b.why, b.var_abs, b.var_rel)
