"""Scalar layer parameters (rmsnorm's eps): does a case exercise them? (Layer.scalars)"""
from __future__ import annotations

from typing import Callable

import torch

from ..layers import Layer
from .evidence import RMS_LIMIT, compare, say
from .tolerances import Tolerance


def check_scalars(name: str, layer: Layer, reference_fn: Callable[..., torch.Tensor], expected: torch.Tensor,
                  tol: Tolerance, required: bool) -> dict[str, bool]:
    """Whether this case exercises each scalar parameter of `layer` (Layer.scalars: parameter ->
    the value a kernel that ignored it would in effect use, e.g. rmsnorm's eps -> 0).

    reference_fn(**params) recomputes the reference with the layer's scalar parameters as keyword
    arguments (it must reproduce `expected` at the layer's values). A kernel that ignores parameter
    p computes, within its own budget, reference_fn(p=ignored); it is sure to fail `assert_close`
    when that moves an element by more than both budgets together (|alt - ref| > allowed(ref) +
    allowed(alt)), or moves the rms ratio past 2 * RMS_LIMIT (the kernel's own noise, rms ratio <=
    RMS_LIMIT, can cancel at most RMS_LIMIT of it: triangle inequality). Prints one line per
    parameter: `SCALAR name p=value (ignored: v) moves m/n elements ...: EXERCISED|not exercised`.
    required: raise AssertionError for a parameter that is not exercised (the layer test's
    SCALAR_CASES); otherwise only report (a regular case at a default value such as eps=1e-6)."""
    values = {p: layer.params[p] for p in layer.scalars}
    if not torch.equal(reference_fn(**values), expected.double()):
        raise ValueError(f"check_scalars('{name}'): reference_fn({values}) does not reproduce `expected`")
    result = {}
    for p, ignored in layer.scalars.items():
        alt = reference_fn(**{**values, p: ignored})
        c = compare(alt, expected, tol)
        allowed_alt = torch.as_tensor(tol.atol, dtype=torch.float64, device=alt.device) + tol.rtol * alt.abs()
        moved = int((c.diff > c.allowed + allowed_alt).sum())
        by_rms = c.rms_checked and c.rms_ratio > 2 * RMS_LIMIT
        result[p] = moved > 0 or by_rms
        line = (f"{p}={values[p]:g} (ignored: {ignored:g}) moves {moved}/{expected.numel()} elements beyond "
                f"both budgets, {c.rms_field(2 * RMS_LIMIT)}")
        say(f"SCALAR {name} {line}: {'EXERCISED' if result[p] else 'not exercised'}")
        if required and not result[p]:
            raise AssertionError(
                f"'{name}' does not exercise the scalar parameter '{p}' of layer '{layer.name}': with "
                f"{line}, so a kernel that ignored it (computing with {p}={ignored:g}) would pass. Pick a "
                f"value or inputs at which {p} matters (the layer test's SCALAR_CASES)")
    return result


def ignored_scalar_hint(layer: Layer, reference_fn: Callable[..., torch.Tensor], actual: torch.Tensor,
                        tol: Tolerance) -> str:
    """For a failed comparison: the scalar parameter of `layer` at whose ignored value (Layer.scalars)
    the reference matches `actual` within the same budget, as a line for the failure message, or ""."""
    values = {p: layer.params[p] for p in layer.scalars}
    for p, ignored in layer.scalars.items():
        if compare(actual, reference_fn(**{**values, p: ignored}), tol).passed:
            return (f"\nScalar parameters: the output matches the reference with {p}={ignored:g} (the value "
                    f"a kernel that ignores '{p}' computes with): does the kernel read fparam '{p}'?")
    return ""
