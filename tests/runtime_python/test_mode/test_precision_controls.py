"""Precision negative controls at production shapes: a kernel that loses precision systematically,
or ignores a scalar parameter, fails its layer test; the unmutated kernel passes the same checks.

Each control copies the kernel sources (mirage.mpk.build.csrc_dir()) to a temporary directory,
applies ONE exact string replacement to one kernel (found exactly as often as stated, or the test
fails: a rewritten kernel must update its control rather than make it vacuous) and builds against
the copy through MPK_CSRC_DIR (the compile cache key hashes the headers, so nothing stale is reused):

  (a) linear.cuh's GEMV rounds its fp32 x to bf16 before the products (the load in f32x4.cuh);
      float32, K=4096 (the linear test's production case): every element stays inside the worst-case
      bound, the rms ratio (mirage.mpk.testing module doc) catches it.
  (b) rmsnorm.cuh divides the sum of squares by hidden - 1; float32: the result moves by
      1/(2 hidden) relative. At hidden=4096 that is the worst-case rtol's reduction term itself
      (2048 u32 = 2^-13 of 2055 u32 = 1.225e-4): the bias sits on the bound, and with the
      block-reduction kernel's small own error no element leaves it (the former lane-sequential
      CPU kernel's noise pushed 6.5% of them over, by < 1%); at hidden=8192 (Llama-2-70B) the bias
      is a quarter of the bound. The rms ratio alone catches both by a wide margin.
  (c) rmsnorm.cuh ignores eps (uses 0): every regular case of the rmsnorm test (eps=1e-6) still
      passes, so only SCALAR_CASES (testing.check_scalars) can catch it, and each of them does; the
      failure says the output matches the reference at eps=0 (check_output's reference_fn), which
      (b)'s failure, another bug in the same kernel, does not (the negative control).

The cases are the layer tests' own (their run / run_case), so a control tests what the suite runs.
The first tests check the statistic itself on synthetic roundings (no kernel).

Run: pytest tests/runtime_python/test_mode/test_precision_controls.py -s   (-s: the figures)
"""
import os
import re

import pytest
import torch

from mirage.mpk import testing

HERE = os.path.dirname(os.path.abspath(__file__))
LINEAR = testing.load_reference(os.path.join(HERE, "..", "linear", "x.py"), name="test_linear_testmode")
RMSNORM = testing.load_reference(os.path.join(HERE, "..", "rmsnorm", "x.py"), name="test_rmsnorm_testmode")

LINEAR_CASE = (torch.float32, 16, 4096, 128, (8, 2))    # batch, K, N, grid: the linear test's K=4096 case


mutated_kernels = testing.mutated_kernel      # (tmp_path, kernel, old, new, count=1)


def figures(c: testing.Comparison) -> str:
    """The numbers that decide a comparison: worst-case (max_abs vs allowed there) and rms ratio."""
    worst = int(c.diff.argmax())
    return (f"worst-case: {c.n_bad}/{c.diff.numel()} bad, max_abs {float(c.diff.max()):.3g} vs allowed "
            f"{float(c.allowed.flatten()[worst]):.3g} there; rms_ratio {c.rms_ratio:.3g} vs limit "
            f"{testing.RMS_LIMIT:g} (n_eff {c.n_eff:.0f})")


def run_control(runner, case, kernel: str, old: str, new: str, tmp_path, label: str, count: int = 1):
    """Controls (a) and (b): the unmutated kernel passes both checks; return the mutated kernel's
    (comparison, the AssertionError check_output raised for it, its divergence report)."""
    pk, name, out, expected, tol, inputs, *_ = runner.run(*case, jitter=3)
    clean = testing.compare(out, expected, tol)
    testing.check_output(name, out, expected, tol, pk.layers[0].checks, inputs, pk=pk)
    assert clean.passed and clean.rms_checked
    with mutated_kernels(tmp_path, kernel, old, new, count):
        pk, name, out, expected, tol, inputs, *reference = runner.run(*case, jitter=3)
    reference_fn = reference[0] if reference else None      # rmsnorm's: the reference of eps
    c = testing.compare(out, expected, tol)
    print(f"CONTROL {label}: clean kernel {figures(clean)}: PASS")
    print(f"CONTROL {label}: mutated kernel {figures(c)}; the worst-case bound alone would "
          f"{'PASS' if c.n_bad == 0 else 'FAIL'}")
    with pytest.raises(AssertionError, match="is not close") as e:
        testing.check_output(name, out, expected, tol, pk.layers[0].checks, inputs, pk=pk,
                             reference_fn=reference_fn)
    print(f"CAUGHT {label}: {str(e.value).splitlines()[1]}")
    assert "does the kernel read fparam" not in str(e.value), "negative control: not an ignored scalar"
    assert c.rms_failed, "the rms ratio alone must catch this mutation"
    return c, str(e.value), testing.first_divergence(pk, {"out": expected}, {"out": tol})


def assert_caught_by_the_rms_ratio_alone(c: testing.Comparison, message: str, layer: str) -> None:
    assert c.n_bad == 0, "the point of this control: the worst-case bound alone lets this mutation through"
    assert re.search(r"rms ratio [0-9.e+]+ > limit 3", message), message
    assert "though every element is inside the worst-case bound" in message, message
    assert f"Bad tiles of layer '{layer}' output 'out' (grid coordinate: rms ratio, worst first): (" \
        in message, message


# ---- the statistic on synthetic roundings ----------------------------------------------------

def test_rounding_alone_passes_and_a_bias_inside_the_worst_case_bound_does_not():
    exact = torch.randn(64, 64, generator=testing.generator(offset=901), dtype=torch.float64)
    tol = testing.tolerance(torch.float32, ops=100)          # rtol = 101 u32 = 6.0e-6
    rounded = testing.compare(exact.float(), exact, tol)
    biased = testing.compare((exact * (1 + 3e-6)).float(), exact, tol)
    print(f"SYNTHETIC fp32 rounding: {figures(rounded)}")
    print(f"SYNTHETIC fp32 rounding + 3e-6 bias: {figures(biased)}")
    assert rounded.passed and rounded.rms_ratio < 1
    assert biased.n_bad == 0 and biased.rms_failed
    bf16 = testing.compare(exact.bfloat16(), exact, testing.tolerance(torch.bfloat16))
    print(f"SYNTHETIC bf16 rounding: {figures(bf16)}")
    assert bf16.passed and 0.5 < bf16.rms_ratio < 1, "output rounding alone: r ~ sqrt(E[1/m^2]) ~ 0.74"


def test_exact_budgets_small_tensors_and_nan():
    zeros = torch.zeros(8, 16)
    exact = testing.compare(zeros, zeros.double(), testing.tolerance(torch.float32))   # tensor_init
    assert exact.passed and exact.rms_ratio == 0.0 and exact.rms_checked
    small = torch.randn(4, 8, generator=testing.generator(offset=902), dtype=torch.float64)
    few = testing.compare((small * (1 + 3e-6)).float(), small, testing.tolerance(torch.float32, ops=100))
    print(f"SYNTHETIC 32 elements with a bias: {figures(few)} -> not checked ({few.rms_field()})")
    assert few.rms_ratio > testing.RMS_LIMIT and not few.rms_checked and few.passed
    nan = zeros.clone()
    nan[0, 0] = float("nan")
    bad = testing.compare(nan, zeros.double(), testing.tolerance(torch.float32))
    assert bad.n_bad == 1 and bad.rms_ratio == float("inf") and not bad.passed
    hand_made = testing.compare(zeros, zeros.double(), testing.Tolerance(0.0, 0.0, "bit-identical"))
    assert hand_made.rms_ratio is None and hand_made.rms_field() == "rms_ratio=-" and hand_made.passed


# ---- the controls ----------------------------------------------------------------------------

def test_linear_rounding_fp32_inputs_to_bf16_is_caught_by_the_rms_ratio(tmp_path):
    assert LINEAR_CASE[1:] in LINEAR.CASES
    # the 16-byte path's load of x (f32x4.cuh load_floats: the K=4096 fp32 rows are contiguous and
    # aligned); W's fp32 columns come through columns_of, SSE code on the CPU with no conversion to mutate
    c, message, report = run_control(
        LINEAR, LINEAR_CASE, "f32x4.cuh", "out[i] = to_float(q.e[i]);",
        "out[i] = to_float(from_float<bf16_t>(to_float(q.e[i])));",
        tmp_path, "linear fp32 K=4096 x rounded to bf16")
    assert_caught_by_the_rms_ratio_alone(c, message, "linear_0")
    print(f"DIVERGENCE {report}")
    lines = report.splitlines()
    assert lines[0].startswith("first divergent layer: 'linear_0'")
    assert "every element inside the worst-case bound" in lines[1], report
    assert lines[2].startswith("  bad tiles (grid coordinate: rms ratio, worst first): ("), report


@pytest.mark.parametrize("hidden", [4096, 8192])
def test_rmsnorm_dividing_by_hidden_minus_one_is_caught_by_the_rms_ratio(hidden, tmp_path):
    case = (torch.float32, 16, hidden, 16)
    assert hidden != 4096 or case[1:] in RMSNORM.SHAPES
    c, message, _ = run_control(
        RMSNORM, case, "rmsnorm.cuh",
        "sum_sq / static_cast<float>(hidden) + eps",
        "sum_sq / static_cast<float>(hidden - 1) + eps",
        tmp_path, f"rmsnorm fp32 hidden={hidden} mean over hidden-1")
    # At 4096 the bias sits on the bound (worst |diff| / allowed close to 1); the kernel's own error
    # is too small to push an element over it, so only the rms ratio sees the mutation.
    assert hidden != 4096 or float((c.diff / c.allowed).max()) > 0.9, figures(c)
    assert_caught_by_the_rms_ratio_alone(c, message, "rmsnorm_0")


def test_rmsnorm_ignoring_eps_passes_every_regular_case_and_fails_every_scalar_case(tmp_path):
    for dtype, case, params in RMSNORM.SCALAR_CASES:       # the unmutated kernel passes them
        RMSNORM.run_case(dtype, *case, jitter=case[0], scalars_required=True, **params)
    with mutated_kernels(tmp_path, "rmsnorm.cuh", "static_cast<float>(hidden) + eps)",
                         "static_cast<float>(hidden) + 0.0f)"):
        for dtype in RMSNORM.DTYPES:
            for shape in RMSNORM.SHAPES:
                RMSNORM.run_case(dtype, *shape, jitter=shape[0])
        print(f"CONTROL rmsnorm ignoring eps: all {len(RMSNORM.DTYPES) * len(RMSNORM.SHAPES)} regular cases "
              f"(eps=1e-6) PASS")
        for dtype, case, params in RMSNORM.SCALAR_CASES:
            pk, name, out, expected, tol, inputs, reference = RMSNORM.run(dtype, *case, jitter=case[0],
                                                                          **params)
            c = testing.compare(out, expected, tol)
            with pytest.raises(AssertionError, match="is not close") as e:
                testing.check_output(name, out, expected, tol, pk.layers[0].checks, inputs, pk=pk,
                                     reference_fn=reference)
            assert c.n_bad > 0 and "Bad tiles of layer 'rmsnorm_0' output 'out' (grid coordinate: " \
                                   "bad/total): (0, 0, 0): " in str(e.value), str(e.value)
            hint = ("\nScalar parameters: the output matches the reference with eps=0 (the value a kernel "
                    "that ignores 'eps' computes with): does the kernel read fparam 'eps'?\n")
            assert hint in str(e.value), str(e.value)
            if dtype == RMSNORM.SCALAR_CASES[0][0]:
                print(f"HINT {name}: {hint.strip()}")
            print(f"CAUGHT rmsnorm ignoring eps in SCALAR_CASE {name}: {figures(c)}")
