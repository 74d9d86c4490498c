"""The assertions a test makes: assert_close / assert_equal / check_output and the non-vacuity checks."""
from __future__ import annotations

from typing import Callable

import torch

from ..layers import DIFFERS_FROM_INPUT, FINITE, NONZERO
from .diagnosis import _locate, _output_of, _serial_rerun, nan_note, poison_names, tiling_warning, ue8m0_note
from .evidence import RMS_LIMIT, _fmt_index, _rms_line, compare, evidence, say
from .inputs import seed
from .keep import keep_failure
from .scalars import ignored_scalar_hint
from .tolerances import Tolerance


def assert_close(name: str, actual: torch.Tensor, expected: torch.Tensor, tol: Tolerance,
                 context: str = "", pk=None, reference_fn: Callable[..., torch.Tensor] | None = None) -> None:
    """Compare in float64 and print one evidence line, pass or fail; raise on failure: an element
    outside the worst-case bound, or an rms ratio over RMS_LIMIT (module doc). The message says what
    mismatched NaNs carry (a poison: nan_note). With `pk` (the PersistentKernel that wrote `actual`: a
    layer output stored in it, else ValueError), it names that layer and the grid coordinates of its
    bad tiles, keeps the case's files (keep_failure) and, with `reference_fn` (check_scalars'), says
    when the output matches the reference at a scalar parameter's ignored value."""
    # dtype is not compared: references are float64 and unrounded; the budget has u_out.
    if pk is not None and _output_of(pk, actual) is None:      # checked on success too: a wiring error
        raise ValueError(f"'{name}': no layer of the kernel writes a tensor stored in `actual` (shape "
                         f"{tuple(actual.shape)}); pass the attached tensor or pk.get_tensor(name)")
    for attr in ("shape", "device"):
        a, e = getattr(actual, attr), getattr(expected, attr)
        if a != e:
            line = f"EVIDENCE {name} {actual.dtype} {tuple(actual.shape)} - - - - - - FAIL"
            say(line)
            raise AssertionError(f"'{name}': the values for attribute '{attr}' do not match: {a} != {e}")
    c = compare(actual, expected, tol)
    max_abs, worst = evidence(name, actual, expected, tol, c, tiling_warning(pk, actual) if pk else "",
                              ue8m0_note(pk, actual) if pk else "")
    if c.passed:
        return
    n_bad, shape, e64 = c.n_bad, tuple(actual.shape), expected.double()
    head = f"'{name}' is not close ({str(actual.dtype).replace('torch.', '')}, {shape}){context}!\n"
    where = _locate(pk, actual, c) if pk is not None else ""
    gpu = actual.device.type == "cuda"
    whose = poison_names(pk, actual)
    nans = nan_note(actual, c.bad, gpu, *whose)
    where += f"\nNaN: {nans}" if nans else ""
    found = _output_of(pk, actual) if pk is not None and reference_fn is not None else None
    where += ignored_scalar_hint(found[0], reference_fn, actual, tol) if found and found[0].scalars else ""
    tail = f"\nTolerance budget: {tol.why}; seed: MPK_SEED={seed()}"
    if pk is not None:      # the values in the message above are this run's: the re-run restores them
        tail += keep_failure(pk, name)
        tail += _serial_rerun(pk, name, lambda: not compare(actual, expected, tol).passed,
                              lambda: nan_note(actual, compare(actual, expected, tol).bad, gpu, *whose))
    if n_bad:
        first = int(c.bad.flatten().nonzero()[0])
        idx = _fmt_index(first, shape)
        raise AssertionError(
            f"{head}"
            f"Mismatched elements: {n_bad} / {actual.numel()} ({100.0 * n_bad / actual.numel():.1f}%)\n"
            f"Greatest absolute difference: {max_abs:.6g} at index {_fmt_index(worst, shape)}\n"
            f"First mismatch at {idx}: actual {float(actual.flatten()[first].double()):.6g}, expected "
            f"{float(e64.flatten()[first]):.6g}, allowed {float(c.allowed.flatten()[first]):.3g}"
            f"{_rms_line(c)}{where}{tail}")
    worst_share = float((c.diff / c.allowed).max())
    raise AssertionError(
        f"{head}"
        f"Root-mean-square error is {c.rms_ratio:.3g} times its statistical budget (rms ratio "
        f"{c.rms_ratio:.3g} > limit {RMS_LIMIT:g}, over {actual.numel()} elements, n_eff {c.n_eff:.0f}), "
        f"though every element is inside the worst-case bound (largest |diff| / allowed = "
        f"{worst_share:.3g}): a systematic loss of precision\n"
        f"Greatest absolute difference: {max_abs:.6g} at index {_fmt_index(worst, shape)}, allowed "
        f"{float(c.allowed.flatten()[worst]):.3g}"
        f"{where}{tail}")


def assert_equal(name: str, actual, expected) -> None:
    """Exact comparison (integers, metadata, bit copies), with its evidence line."""
    a = actual.tolist() if isinstance(actual, torch.Tensor) else actual
    e = expected.tolist() if isinstance(expected, torch.Tensor) else expected
    shape = tuple(actual.shape) if isinstance(actual, torch.Tensor) else (len(a),) if isinstance(a, list) \
        else ()
    ok = a == e
    say(f"EVIDENCE {name} exact {shape} {'PASS' if ok else 'FAIL'}")
    if not ok:
        raise AssertionError(f"'{name}' is not equal:\n  actual   {a}\n  expected {e}\n"
                             f"seed: MPK_SEED={seed()}")




def check_output(name: str, actual: torch.Tensor, expected: torch.Tensor, tol: Tolerance,
                 checks=(FINITE, NONZERO, DIFFERS_FROM_INPUT), inputs: tuple[torch.Tensor, ...] = (),
                 pk=None, tiled: bool = False,
                 reference_fn: Callable[..., torch.Tensor] | None = None) -> None:
    """The one call per compared tensor: the evidence line, then one line per non-vacuity check.

    pk: the PersistentKernel whose layer wrote `actual`; a mismatch then names that layer's bad
    tiles by grid coordinate, keeps the case's files and re-runs the graph serially (assert_close); the
    evidence line warns of degenerate tiling, which tiled=True makes a failure (check_nonvacuous).
    reference_fn: the reference as a function of the layer's scalar parameters (check_scalars' own;
    a layer with Layer.scalars must pass it): a mismatch then says when the output is the reference
    at a parameter's ignored value (a kernel that does not read it)."""
    assert_close(name, actual, expected, tol, pk=pk, reference_fn=reference_fn)
    check_nonvacuous(name, actual, checks, inputs, reference=expected, pk=pk, tiled=tiled)




def _nonvacuous_line(name: str, check: str, ok: bool, detail: str = "") -> None:
    verdict = "PASS" if ok else "FAIL"
    say(f"NONVACUOUS {name} {check} {verdict}{(' ' + detail) if detail else ''}")
    if not ok:
        raise AssertionError(f"non-vacuity check '{check}' failed for '{name}' {detail}")


def check_nonvacuous(name: str, out: torch.Tensor, checks=(FINITE, NONZERO, DIFFERS_FROM_INPUT),
                     inputs: tuple[torch.Tensor, ...] = (), reference: torch.Tensor | None = None, pk=None,
                     tiled: bool = False) -> None:
    """One line per check: finite, not all zero, not equal to an input, reference not trivial; with
    tiled=True (and pk, whose layer wrote `out`) also that its tiling is exercised (tiling_warning)."""
    if tiled:
        if pk is None:
            raise ValueError(f"check_nonvacuous('{name}', tiled=True) needs pk=, the kernel that wrote it")
        why = tiling_warning(pk, out)
        _nonvacuous_line(name, "tiled", not why, f"({why})" if why else "")
    if FINITE in checks:
        _nonvacuous_line(name, "finite", bool(torch.isfinite(out.float()).all()))
    if NONZERO in checks:
        nz = int((out != 0).sum())
        _nonvacuous_line(name, "nonzero", nz > 0, f"({nz}/{out.numel()} nonzero)")
    if DIFFERS_FROM_INPUT in checks:
        same = [i for i, x in enumerate(inputs) if x.shape == out.shape and torch.equal(x.to(out.dtype), out)]
        _nonvacuous_line(name, "differs_from_input", not same, f"(equal to input #{same[0]})" if same else "")
    if reference is not None:
        _nonvacuous_line(name, "reference_nontrivial", bool((reference != 0).any()) and
                         bool(torch.isfinite(reference.float()).all()))


def check_layer_outputs(pk, outputs: dict[str, torch.Tensor] | None = None) -> None:
    """Run every layer's declared non-vacuity checks on its final outputs."""
    for layer in pk.layers:
        ins = tuple(a.tensor.data for a in layer.inputs if a.tensor.data is not None)
        for acc in layer.outputs:
            if acc.written:
                check_nonvacuous(f"{layer.name}.{acc.tensor.name}", pk.get_tensor(acc.tensor.name),
                                 layer.checks, ins)
