"""layernorm_layer in test mode: real generated code, several workers, schedule jitter.

Run: python tests/runtime_python/layernorm/test_layernorm_testmode.py
     python -m pytest tests/runtime_python/layernorm/test_layernorm_testmode.py
     mpirun -n 4 python tests/runtime_python/layernorm/test_layernorm_testmode.py
     (one 4-rank job: the layer is replicated (its module's TP), so every rank runs every case on
     the same full inputs and the outputs must be bit-identical across ranks; run_cases_as_script)
"""

import pytest
import torch

from mirage.mpk import testing
from mirage.mpk.persistent_kernel import PersistentKernel

ref = testing.load_reference(__file__)

DTYPES = [torch.bfloat16, torch.float16, torch.float32]
# (batch, hidden, grid.x): even split, non-power-of-two split (3 tiles of 2 rows), one-row tiles, one task
SHAPES = [(16, 4096, 16), (6, 384, 3), (5, 96, 5), (1, 7, 1)]
# Rows of mean OFFSET and std 1: a kernel that skipped the mean, or took the variance as
# mean(x^2) - mean^2 in bf16/fp16-sized precision, is far outside the budget.
OFFSET = 2.0
# (dtype, shape, scalar parameters): cases where eps moves the result beyond the budget, so a kernel
# that ignored it fails (testing.check_scalars, required); at eps=1e-5 and var ~1 it moves the result
# by ~5e-6 relative, inside the bf16/fp16 budgets.
SCALAR_CASES = [
    (torch.bfloat16, (16, 4096, 16), {"eps": 0.1}),
    (torch.float16, (5, 96, 5), {"eps": 0.01}),
    (torch.float32, (6, 384, 3), {"eps": 1e-3}),
]


def tol_layernorm(dtype, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, eps: float) -> testing.Tolerance:
    """The kernel's error budget (csrc/tasks/layernorm.cuh), in testing.tolerance's terms.

    With z = (x - mean) * inv_std and u = fp32's unit roundoff, per element:
    - the mean, an fp32 sum of `hidden` terms in any order, errs by at most hidden * u * mean|x|; every
      output carries that error times inv_std * |w|;
    - the sum of squared deviations (positive terms) is within (hidden + 3) u relative, so inv_std
      (sqrt and division correctly rounded) within hidden / 2 + 4 u: times |z w|;
    - the subtraction, two multiplies and the add of b: a few u of |z w| + |b|;
    - the output rounds once: u_out * |y| (rtol).
    tolerance's atol = (k + 1) u * scale with scale = |z w| + |b| + mean|x| inv_std |w| and k = hidden + 8
    covers the three fp32 terms for every hidden >= 1."""
    x64, w64, b64 = x.double(), w.double(), b.double()
    mean = x64.mean(dim=-1, keepdim=True)
    inv_std = torch.rsqrt((x64 - mean).pow(2).mean(dim=-1, keepdim=True) + eps)
    mean_abs = x64.abs().mean(dim=-1, keepdim=True)
    scale = ((x64 - mean) * inv_std * w64).abs() + b64.abs() + mean_abs * inv_std * w64.abs()
    return testing.tolerance(dtype, k=x.shape[-1] + 8, scale=scale, ops=4)


def run_case(dtype, batch, hidden, grid, eps=1e-5, jitter=0, output_dir=None, scalars_required=False,
             world=testing.ONE_RANK):
    gen = testing.generator(offset=batch * 1000 + hidden)
    pk = PersistentKernel(**testing.cpu_config(jitter_seed=jitter, **world.params))
    x = (testing.randn((batch, hidden), torch.float32, gen) + OFFSET).to(dtype)
    w = testing.randn((hidden,), dtype, gen)        # random, not ones: a missing multiply shows
    b = testing.randn((hidden,), dtype, gen)        # random, not zeros: a missing add shows
    out = torch.zeros(batch, hidden, dtype=dtype)
    x_dt, w_dt = pk.attach_input(x, name="x"), pk.attach_input(w, name="w")
    b_dt = pk.attach_input(b, name="b")
    out_dt = pk.attach_input(out, name="out")
    pk.layernorm_layer(input=x_dt, weight=w_dt, bias=b_dt, output=out_dt, grid_dim=(grid, 1, 1),
                       block_dim=(128, 1, 1), eps=eps)
    pk.compile(output_dir=output_dir)
    pk()
    pk.finalize()
    expected = ref.layernorm(x, w, b, eps)
    name = f"layernorm[{str(dtype)[6:]},{batch}x{hidden},grid={grid},eps={eps:g}{world.tag}]"
    tol = tol_layernorm(dtype, x, w, b, eps)
    reference = lambda **p: ref.layernorm(x, w, b, **p)      # noqa: E731 (the reference of eps)
    testing.check_output(name, out, expected, tol, pk.layers[0].checks, (x,), pk=pk, reference_fn=reference)
    testing.check_scalars(name, pk.layers[0], reference, expected, tol, required=scalars_required)
    return pk


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("batch,hidden,grid", SHAPES)
def test_layernorm(dtype, batch, hidden, grid):
    run_case(dtype, batch, hidden, grid, jitter=batch)


@pytest.mark.parametrize("dtype,case,params", SCALAR_CASES,
                         ids=[f"{str(d)[6:]}-{c[0]}x{c[1]}-eps{p['eps']:g}" for d, c, p in SCALAR_CASES])
def test_layernorm_scalar_parameters(dtype, case, params):
    run_case(dtype, *case, jitter=case[0], scalars_required=True, **params)


def test_budget_is_tight_enough_to_catch_a_one_pass_variance():
    """Negative control of tol_layernorm: the textbook one-pass variance, mean(x^2) - mean^2, rounded
    through bf16 storage of its inputs' squares, must fail the budget for rows with a large mean."""
    x = (testing.randn((4, 4096), torch.float32, testing.generator(offset=7)) + 8.0).to(torch.bfloat16)
    w = testing.randn((4096,), torch.bfloat16, testing.generator(offset=8))
    b = torch.zeros(4096, dtype=torch.bfloat16)
    x32 = x.float()
    var = (x32 * x32).to(torch.bfloat16).float().mean(-1, keepdim=True) - x32.mean(-1, keepdim=True) ** 2
    wrong = ((x32 - x32.mean(-1, keepdim=True)) * torch.rsqrt(var + 1e-5) * w.float()).to(torch.bfloat16)
    # compare, not assert_close: no EVIDENCE ... FAIL line (multi-rank runs require every one to PASS)
    verdict = testing.compare(wrong, ref.layernorm(x, w, b), tol_layernorm(torch.bfloat16, x, w, b, 1e-5))
    assert not verdict.passed, "tol_layernorm lets a one-pass bf16 variance through: it is too loose"


if __name__ == "__main__":
    testing.run_cases_as_script("layernorm", run_case, DTYPES, SHAPES, scalar_cases=SCALAR_CASES,
                                extra=[test_budget_is_tight_enough_to_catch_a_one_pass_variance])
