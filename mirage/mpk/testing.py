"""Verification helpers: error-budget tolerances, evidence lines, non-vacuity checks.

Error budget. Every kernel computes in fp32 from its inputs and rounds once to
the output dtype. With u = unit roundoff (2^-8 bf16, 2^-11 fp16, 2^-24 fp32) and the
reference evaluated in float64 on the same inputs, each output element obeys

    |out - ref| <= rtol * |ref| + atol

    rtol = u_out + ops * u32
        u_out |ref|: the final rounding to the output dtype;
        ops * u32: a few fp32 operations per element (multiplies, exp, rsqrt); for a
        normalization the reduction error is relative to the result, so it adds
        (reduction_length / 2) ops (sum of squares, halved by the square root).
    atol = ((k + 1) * u32 + u_in) * scale + tiny_out / 2
        (k + 1) * u32 * scale: recursive fp32 summation of k terms in any order, with
        scale = sum_i |x_i * w_i| per element (Higham's gamma_k bound; products of bf16 or
        fp16 values are exact in fp32, fp32 products add the "+1");
        u_in * scale: inputs that are themselves rounded intermediates of a chain may sit
        one rounding away from the reference's (0 for graph inputs);
        tiny_out / 2: half the smallest subnormal of the output dtype, the rounding floor.

These are worst-case bounds, not fitted thresholds: a missed tile, a wrong column or a
dropped dependency produces errors of the size of |ref| itself, far outside them in fp32.
For bf16/fp16 chains the tight check is per layer (each layer's reference applied to the
kernel's own inputs); the end-to-end bound composes the layers' u_in terms.

Statistical check (the rms ratio). The worst-case bound grows like k: it assumes every
rounding at its maximum, all of one sign. A correct kernel's errors are independent roundings
that grow like sqrt(k), so at large k the worst-case bound has room for a systematic loss of
precision (a K=4096 fp32 linear that rounds its inputs to bf16; an RMSNorm that divides by
h-1 at h=4096). So each comparison also checks the errors against a statistical budget.

    Model: each element's error is a sum of independent, zero-mean roundings. A round to
    nearest of v is uniform within half an ulp, so its variance is (ulp/2)^2 / 3 <= (u v)^2 / 3
    (the same u that bounds it). Summing the terms of the worst-case budget as variances:

    sigma_i^2 = [ (u_out^2 + ops u32^2) ref_i^2     output rounding and `ops` fp32 operations
                  + (k + 1) u32^2 scale_i^2         k additions whose partial sums are <= scale_i
                                                    (+1: the products; exact for bf16/fp16 inputs)
                  + u_in^2 scale2_i                 rounded chain inputs: sum_j (x_j w_j)^2 if the
                                                    caller gives scale2, else scale_i^2 (>= it)
                  + (tiny_out / 2)^2 ] / 3          the output's subnormal floor

    Statistic: r = sqrt(sum_i err_i^2 / sum_i sigma_i^2), the "rms ratio"; it fails above
    RMS_LIMIT = 3 when n_eff = (sum_i sigma_i^2)^2 / sum_i sigma_i^4 (the number of elements,
    discounted for unequal sigma_i) is at least RMS_MIN_N = 64; below that only the worst-case
    bound applies. Every evidence line shows `rms_ratio=r/limit` ("-" for the limit when the
    check does not apply, `rms_ratio=-` for a hand-made Tolerance without a model).

    False alarms. S = sum_i err_i^2 has E[S] = sum_i s_i^2 <= V = sum_i sigma_i^2 (s_i: the
    true standard deviation, sigma_i bounds it) and, with independent errors of Gaussian-like
    4th moment (kurtosis <= 3; one uniform rounding has 1.8, a sum of them lies in between),
    Var[S] = sum_i (kurt_i - 1) s_i^4 <= 2 sum_i sigma_i^4. The check fails iff S > T^2 V with
    T = RMS_LIMIT, i.e. S - E[S] >= (T^2 - 1) V, so by Cantelli's inequality
        P(false alarm) <= Var[S] / ((T^2 - 1) V)^2 <= 2 / ((T^2 - 1)^2 n_eff) = 1 / (32 n_eff),
    at most 4.9e-4 at n_eff >= 64 (the minimum: a few hundred comparisons per suite run then
    give well under one expected false alarm even by this loose bound; from a few elements a
    bias cannot be told from noise anyway). Errors shared by many elements (the rsqrt of an
    RMSNorm row) make elements dependent: read n_eff as the number of independent groups (16
    rows: 2e-3); even one error shared by all gives <= 2 / (T^2 - 1)^2 = 3%. The true rates are
    far lower: sigma_i is an upper bound (every partial sum is taken at its maximum, `scale`; a
    rounding at u |v| >= half an ulp of v), so a correct kernel shows r well below 1 (bf16/fp16
    output rounding alone gives r ~ 0.74, fp32 linear ~ 0.01), and the inputs come from fixed seeds.

    What it assumes: roundings are independent and unbiased (round to nearest). What it cannot
    see: a bias smaller than the noise it hides in (a relative bias below about T sqrt(u_out^2
    / 3), ~0.7% in bf16, under bf16's own output rounding), or one confined to a few elements
    (the worst-case bound is the check for those).
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import logging
import math
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from typing import Callable

import torch

from . import dist
from .dtypes import DType, float32, to_dtype
from .layers import AXES, DIFFERS_FROM_INPUT, FINITE, NONZERO, Layer, storage
from .tensor import SYMMETRIC

U32 = 2.0**-24
_TINY = {torch.bfloat16: 2.0**-133, torch.float16: 2.0**-24, torch.float32: 2.0**-149}
RMS_LIMIT = 3.0         # the rms ratio's limit T (module doc: false alarms <= 2 / ((T^2 - 1)^2 n_eff))
RMS_MIN_N = 64          # the fewest effective elements for which the rms ratio is checked


@dataclass
class Tolerance:
    atol: torch.Tensor | float     # per element (broadcastable) or scalar
    rtol: float
    why: str                       # how the budget was derived, for the failure message
    # The statistical model (module doc): sigma_i^2 = var_abs + var_rel * ref_i^2. None: no model
    # (a hand-made budget, e.g. one carrying a worst-case upstream error): the rms ratio is not checked.
    var_abs: torch.Tensor | float | None = None
    var_rel: float = 0.0


def tolerance(dtype: DType | torch.dtype, *, k: int = 0, scale: torch.Tensor | float | None = None,
              ops: float = 4, input_rounding: DType | torch.dtype | None = None,
              scale2: torch.Tensor | float | None = None) -> Tolerance:
    """The one tolerance function: output rounding + fp32 accumulation over k terms, as a
    worst-case bound (atol, rtol) and as per-element variances for the rms ratio (module doc).

    scale2: sum of the squared terms per element (sum_j (x_j w_j)^2), for the input-rounding
    variance; default scale^2, which is never smaller."""
    d = to_dtype(dtype)
    u_in = to_dtype(input_rounding).unit_roundoff if input_rounding is not None else 0.0
    rtol = d.unit_roundoff + ops * U32
    floor = _TINY[d.torch] / 2
    var_rel = (d.unit_roundoff**2 + ops * U32**2) / 3
    if scale is None:
        atol: torch.Tensor | float = floor
        var_abs: torch.Tensor | float = floor**2 / 3
    else:
        s = scale.double() if isinstance(scale, torch.Tensor) else float(scale)
        s2 = s * s if scale2 is None else (scale2.double() if isinstance(scale2, torch.Tensor) else scale2)
        atol = ((k + 1) * U32 + u_in) * s + floor
        var_abs = ((k + 1) * U32**2 * s * s + u_in**2 * s2 + floor**2) / 3
    why = f"u_out={d.unit_roundoff:.3g}, k={k}, ops={ops:g}, u_in={u_in:.3g}"
    return Tolerance(atol, rtol, why, var_abs, var_rel)


def tol_elementwise(dtype, scale: torch.Tensor | None = None, input_rounding=None) -> Tolerance:
    """add / silu_mul / copy: a few fp32 ops per element; scale = |a| + |b| for a sum."""
    k = 1 if scale is not None else 0
    return tolerance(dtype, k=k, scale=scale, ops=8, input_rounding=input_rounding)


def tol_linear(dtype, k: int, scale: torch.Tensor, input_rounding=None) -> Tolerance:
    """x @ W^T (+ residual): scale = |x| @ |W|^T (+ |residual|), k = in_features (+1)."""
    return tolerance(dtype, k=k, scale=scale, ops=2, input_rounding=input_rounding)


def tol_rmsnorm(dtype, hidden: int) -> Tolerance:
    """rmsnorm: the mean of squares is relative to the result: hidden/2 + rsqrt + 2 multiplies."""
    return tolerance(dtype, ops=hidden / 2 + 6)


# ---- evidence ------------------------------------------------------------------------------

def say(line: str) -> None:
    """Print one evidence line, prefixed "[rank r] " in a multi-rank job, and flush."""
    sys.stdout.write(f"{dist.rank_prefix()}{line}\n")     # one write: ranks' lines do not interleave
    sys.stdout.flush()


def _fmt_index(flat: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    idx = []
    for s in reversed(shape):
        idx.append(flat % s)
        flat //= s
    return tuple(reversed(idx))


@dataclass
class Comparison:
    """Element-wise result of comparing actual with expected under a tolerance (float64)."""
    diff: torch.Tensor        # |actual - expected|; inf where exactly one side is NaN
    allowed: torch.Tensor     # atol + rtol * |expected|
    bad: torch.Tensor         # diff > allowed
    var: torch.Tensor | None = None     # sigma_i^2 of the statistical model; None: no model
    rms_ratio: float | None = None      # sqrt(sum diff^2 / sum sigma^2) over finite sigma_i
    n_eff: float = 0.0                  # (sum sigma^2)^2 / sum sigma^4: elements the ratio rests on

    @property
    def n_bad(self) -> int:
        """Elements outside the worst-case bound."""
        return int(self.bad.sum())

    @property
    def rms_checked(self) -> bool:
        return self.rms_ratio is not None and self.n_eff >= RMS_MIN_N

    @property
    def rms_failed(self) -> bool:
        return self.rms_checked and self.rms_ratio > RMS_LIMIT

    @property
    def passed(self) -> bool:
        return self.n_bad == 0 and not self.rms_failed

    def rms_field(self, limit: float = RMS_LIMIT) -> str:
        """`rms_ratio=r/limit` as the evidence line shows it ("-" where the ratio is not checked)."""
        if self.rms_ratio is None:
            return "rms_ratio=-"
        shown = f"{limit:g}" if self.rms_checked else f"-(n_eff={self.n_eff:.0f}<{RMS_MIN_N})"
        return f"rms_ratio={self.rms_ratio:.3g}/{shown}"


def _rms(diff: torch.Tensor, var: torch.Tensor) -> tuple[float, float]:
    """(rms ratio, n_eff) over the elements with a finite sigma (an infinite reference is judged
    by the worst-case bound alone). Zero budget: 0 if every error is 0, else inf."""
    keep = torch.isfinite(var)
    d, v = diff[keep], var[keep]
    if not d.numel():
        return 0.0, 0.0
    total_var, total_sq = float(v.sum()), float((d * d).sum())
    if total_var == 0.0:
        return (0.0 if total_sq == 0.0 else math.inf), float(d.numel())
    w = v / v.max()                            # normalized: sigma^4 of tiny budgets would underflow
    return math.sqrt(total_sq / total_var), float(w.sum() ** 2 / (w * w).sum())


def compare(actual: torch.Tensor, expected: torch.Tensor, tol: Tolerance) -> Comparison:
    a64, e64 = actual.double(), expected.double()
    allowed = torch.as_tensor(tol.atol, dtype=torch.float64) + tol.rtol * e64.abs()
    diff = (a64 - e64).abs()
    diff = torch.where((a64 == e64) | (a64.isnan() & e64.isnan()), 0.0, diff)   # equal infs, both NaN
    diff = torch.where(a64.isnan() ^ e64.isnan(), math.inf, diff)
    c = Comparison(diff, allowed.expand_as(diff), diff > allowed)
    if tol.var_abs is not None:
        c.var = (torch.as_tensor(tol.var_abs, dtype=torch.float64) + tol.var_rel * e64 * e64).expand_as(diff)
        c.rms_ratio, c.n_eff = _rms(diff, c.var)
    return c


def evidence(name: str, actual: torch.Tensor, expected: torch.Tensor, tol: Tolerance,
             c: Comparison, warning: str = "") -> tuple[float, int]:
    """Print `EVIDENCE name dtype shape max_abs max_rel atol rtol worst_index rms_ratio PASS|FAIL`, with
    `WARNING[...]` before the verdict when there is one (tiling_warning)."""
    diff = c.diff
    rel = diff / expected.double().abs().clamp_min(torch.finfo(torch.float64).tiny)
    worst = int(diff.argmax()) if diff.numel() else 0
    max_abs = float(diff.max()) if diff.numel() else 0.0
    max_rel = float(rel.max()) if rel.numel() else 0.0
    atol_shown = float(torch.as_tensor(tol.atol, dtype=torch.float64).max())
    shape = tuple(actual.shape)
    say(f"EVIDENCE {name} {str(actual.dtype).replace('torch.', '')} {shape} max_abs={max_abs:.3e} "
        f"max_rel={max_rel:.3e} atol={atol_shown:.3e} rtol={tol.rtol:.3e} "
        f"worst_index={_fmt_index(worst, shape)} {c.rms_field()} {f'WARNING[{warning}] ' if warning else ''}"
        f"{'PASS' if c.passed else 'FAIL'}")
    return max_abs, worst


def _rms_line(c: Comparison) -> str:
    """The rms ratio beside a worst-case mismatch: high means systematic, not a few elements."""
    if c.rms_ratio is None:
        return ""
    limit = f"limit {RMS_LIMIT:g}" if c.rms_checked else f"not checked: n_eff {c.n_eff:.0f} < {RMS_MIN_N}"
    return f"\nRoot-mean-square error: {c.rms_ratio:.3g} times its statistical budget ({limit})"


def _output_of(pk, actual: torch.Tensor):
    """(layer, output index) of the last layer (program order: the final value) whose written
    output is stored in `actual` (same data_ptr and shape), or None."""
    found = None
    for layer in pk.layers:
        tasks = pk.graph.layer_tasks(layer)
        for k, acc in enumerate(layer.outputs):
            base = tasks[0].outputs[k].tensor.data if acc.written and tasks else None
            if base is not None and base.data_ptr() == actual.data_ptr() and base.shape == actual.shape:
                found = (layer, k)
    return found


def _tiles(pk, layer, k: int, c: Comparison, limit: int = 16) -> str:
    """The tiles of `layer`'s output k that fail: "(x, y, z): bad/total" for each tile with
    elements outside the worst-case bound or, when there are none but the rms ratio fails, the
    tiles with the largest rms ratio, "(x, y, z): rms_ratio=r"."""
    rows = []
    for task in pk.graph.layer_tasks(layer):
        box = tuple(slice(lo, hi) for lo, hi in zip(*task.outputs[k].box))
        if c.n_bad:
            region = c.bad[box]
            if region.any():
                rows.append((0.0, f"{task.coord}: {int(region.sum())}/{region.numel()}"))
        elif c.var is not None:
            r, _ = _rms(c.diff[box], c.var[box])
            rows.append((-r, f"{task.coord}: rms_ratio={r:.3g}"))
    if not c.n_bad:
        rows.sort(key=lambda row: row[0])          # the worst tiles first
    shown = "; ".join(text for _, text in rows[:limit])
    return shown + (" ..." if len(rows) > limit else "")


def _locate(pk, actual: torch.Tensor, c: Comparison) -> str:
    """The failure message's line naming the layer, its output and the grid coordinates."""
    found = _output_of(pk, actual)
    if found is None:
        return ""
    layer, k = found
    what = "bad/total" if c.n_bad else "rms ratio, worst first"
    return (f"\nBad tiles of layer '{layer.name}' output '{layer.outputs[k].tensor.name}' (grid coordinate: "
            f"{what}): {_tiles(pk, layer, k, c)}")


def assert_close(name: str, actual: torch.Tensor, expected: torch.Tensor, tol: Tolerance,
                 context: str = "", pk=None) -> None:
    """Compare in float64 and print one evidence line, pass or fail; raise on failure: an element
    outside the worst-case bound, or an rms ratio over RMS_LIMIT (module doc). With `pk` (the
    PersistentKernel that wrote `actual`: a layer output stored in it, else ValueError), the
    message names that layer and the grid coordinates of its bad tiles."""
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
    max_abs, worst = evidence(name, actual, expected, tol, c, tiling_warning(pk, actual) if pk else "")
    if c.passed:
        return
    n_bad, shape, e64 = c.n_bad, tuple(actual.shape), expected.double()
    head = f"'{name}' is not close ({str(actual.dtype).replace('torch.', '')}, {shape}){context}!\n"
    where = _locate(pk, actual, c) if pk is not None else ""
    tail = f"\nTolerance budget: {tol.why}; seed: MPK_SEED={seed()}"
    if pk is not None:      # the values in the message above are this run's: the re-run restores them
        tail += _serial_rerun(pk, name, lambda: not compare(actual, expected, tol).passed)
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


def digest(t: torch.Tensor) -> str:
    """A short sha256 of a tensor's bytes (bit-identity across ranks); needs no numpy."""
    raw = bytes(t.detach().cpu().contiguous().view(torch.uint8).flatten().tolist())
    return hashlib.sha256(raw).hexdigest()[:16]


def check_output(name: str, actual: torch.Tensor, expected: torch.Tensor, tol: Tolerance,
                 checks=(FINITE, NONZERO, DIFFERS_FROM_INPUT), inputs: tuple[torch.Tensor, ...] = (),
                 pk=None, tiled: bool = False) -> None:
    """The one call per compared tensor: the evidence line, then one line per non-vacuity check.

    pk: the PersistentKernel whose layer wrote `actual`; a mismatch then names that layer's bad
    tiles by grid coordinate and re-runs the graph serially (assert_close); the evidence line warns of
    degenerate tiling, which tiled=True makes a failure (check_nonvacuous)."""
    assert_close(name, actual, expected, tol, pk=pk)
    check_nonvacuous(name, actual, checks, inputs, reference=expected, pk=pk, tiled=tiled)


def _diverging(pk, references: dict, tolerances: dict):
    """(layer, output index, tensor name, Comparison) for each compared output, in program order."""
    for layer in pk.layers:
        for k, acc in enumerate(layer.outputs):
            name = acc.tensor.name
            if acc.written and name in references:
                out = pk.get_tensor(name)
                c = compare(out, references[name], tolerances[name])
                evidence(f"{layer.name}.{name}", out, references[name], tolerances[name], c)
                yield layer, k, name, c


def first_divergence(pk, references: dict[str, torch.Tensor], tolerances: dict[str, Tolerance]) -> str | None:
    """Report the first layer (topological order) whose output leaves its tolerance, or None.

    references / tolerances: per tensor name, the expected final value of that tensor. The
    report names the layer, the grid coordinates of its bad tiles and the worst element."""
    checked, report, later = 0, None, []
    for layer, k, name, c in _diverging(pk, references, tolerances):
        if c.passed:
            checked += 1 if report is None else 0
            continue
        if report is not None:
            later.append(layer.name)
            continue
        out = pk.get_tensor(name)
        worst = int(c.diff.argmax())
        idx = _fmt_index(worst, tuple(out.shape))
        what = (f"{c.n_bad} / {out.numel()} elements outside tolerance" if c.n_bad else
                f"rms ratio {c.rms_ratio:.3g} > {RMS_LIMIT:g}, every element inside the worst-case bound")
        tiles = "grid coordinate: bad/total" if c.n_bad else "grid coordinate: rms ratio, worst first"
        report = (f"first divergent layer: '{layer.name}' (the {checked} compared output(s) before it "
                  f"agree)\n"
                  f"  output '{name}' ({str(out.dtype)[6:]}, {tuple(out.shape)}): {what}\n"
                  f"  bad tiles ({tiles}): {_tiles(pk, layer, k, c)}\n"
                  f"  worst element {idx}: actual {float(out.flatten()[worst]):.6g}, expected "
                  f"{float(references[name].flatten()[worst]):.6g}, "
                  f"allowed {float(c.allowed.flatten()[worst]):.3g}")
    if report is not None and later:
        report += f"\n  later layers that diverge too: {', '.join(later)}"
    return report


def assert_no_divergence(pk, references: dict[str, torch.Tensor], tolerances: dict[str, Tolerance]) -> None:
    """Compare every intermediate with its reference; print and raise the first divergence."""
    report = first_divergence(pk, references, tolerances)
    agree = f"DIVERGENCE none: {len(references)} tensors agree"
    say(f"DIVERGENCE {report}" if report else agree)
    if report:
        raise AssertionError(report + _serial_rerun(pk, "divergence", lambda: any(
            not compare(pk.get_tensor(n), references[n], tolerances[n]).passed for n in references)))


# ---- diagnosis: degenerate tiling, the serial re-run (docs/profiler.md) -------------------------

def tiling_warning(pk, out: torch.Tensor) -> str:
    """Why the layer of `pk` that wrote `out` does not exercise tiling, or "": its grid is 1 where its
    output could be split (or every layer's grid is 1): "grid (1,1,1): tiling not exercised"; or a dim
    of `out` that a grid axis of the layer splits (its partition map) is never split. A dim of size 1
    cannot be split and is not named."""
    found = _output_of(pk, out)
    if found is None:
        return ""
    layer, k = found
    acc, grid = layer.outputs[k], ",".join(map(str, layer.grid))
    unsplit = [f"dim {d} (grid.{AXES[a]})" for a, d in enumerate(acc.pmap)
               if d >= 0 and layer.grid[a] == 1 and acc.tensor.dims[d] > 1]
    if layer.grid == (1, 1, 1) and (unsplit or all(g.grid == (1, 1, 1) for g in pk.layers)):
        return "grid (1,1,1): tiling not exercised"
    return f"grid ({grid}): '{acc.tensor.name}' {', '.join(unsplit)} never split" if unsplit else ""


def _rerun_blocker(pk) -> str:
    """Why pk's graph cannot simply run again on the same tensors, or ""."""
    if pk.world_size > 1 or any(t.kind == SYMMETRIC for t in pk.tensors.values()):
        return "several ranks or symmetric tensors (a re-run would need every rank)"
    written, read_first = {a.tensor.name for g in pk.layers for a in g.outputs if a.written}, set()
    for layer in pk.layers:        # a tensor read before any layer writes it, and written: an input
        read_first |= {n for a in layer.inputs for n in storage(a.tensor)} & written   # the run changed
        written -= {a.tensor.name for a in layer.outputs}
    return f"the graph overwrites its input(s) {sorted(read_first)}" if read_first else ""


def _first_difference(pk, parallel: dict[str, torch.Tensor]) -> str:
    """The first layer (program order; a tensor counts for its last writer) whose output differs
    between the run that failed (`parallel`) and the serial run now in pk's tensors."""
    last = {a.tensor.name: (i, layer, k) for i, layer in enumerate(pk.layers)
            for k, a in enumerate(layer.outputs) if a.written}
    for name, (_, layer, k) in sorted(last.items(), key=lambda item: item[1][0]):
        c = compare(parallel[name], pk.get_tensor(name), Tolerance(0.0, 0.0, "bit-identical"))
        if c.n_bad:
            return (f"first divergent layer '{layer.name}' (output '{name}': {c.n_bad}/{c.bad.numel()} "
                    f"elements differ from the serial run; tiles: {_tiles(pk, layer, k, c)})")
    return "yet every output equals the serial run's: the failure did not repeat"


def _serial_rerun(pk, name: str, fails: Callable[[], bool]) -> str:
    """After a failed comparison of a test-mode run with several workers or jitter: pk's graph once
    more on one worker, no jitter, tasks in position order (the program's order; MpkConfig.in_order),
    then `fails()` on the tensors the re-run wrote says which kind of bug it is. The failing run's
    outputs are put back. Prints and returns the verdict as a line for the failure message."""
    if not pk.test_mode or (pk.params["num_workers"] == 1 and pk.schedule_jitter is None):
        return ""
    blocker = _rerun_blocker(pk)
    outputs = {a.tensor.name: pk.get_tensor(a.tensor.name) for g in pk.layers for a in g.outputs if a.written}
    parallel = {n: t.clone() for n, t in outputs.items()} if not blocker else {}
    try:
        if blocker:
            verdict = f"no serial re-run: {blocker}"
        else:
            pk._rerun(num_workers=1, jitter=0, jitter_seed=0, in_order=1)
            verdict = ("fails serially too: the kernel's math or indexing" if fails() else
                       f"passes serially: a missing dependency or a race; {_first_difference(pk, parallel)}")
    except Exception as e:        # unwritten tiles, a hang: also without any parallelism
        verdict = (f"fails serially too ({type(e).__name__}: {str(e).splitlines()[0]}): the kernel's math or "
                   f"indexing")
    finally:
        for n, t in parallel.items():
            outputs[n].copy_(t)
    say(f"SERIAL {name}: {verdict}")
    return f"\nSerial re-run (1 worker, no jitter, tasks in program order): {verdict}"


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
        allowed_alt = torch.as_tensor(tol.atol, dtype=torch.float64) + tol.rtol * alt.abs()
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


@contextlib.contextmanager
def capture_log(level: int = logging.INFO):
    """Collect the 'mirage.mpk' logger's messages (cache hits/misses, coarsening) as a list."""
    logger = logging.getLogger("mirage.mpk")
    records: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())

    handler, old = Collect(level), logger.level
    logger.addHandler(handler)
    logger.setLevel(level)
    try:
        yield records
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old)


# ---- inputs --------------------------------------------------------------------------------

def seed(default: int = 0) -> int:
    """The test seed: MPK_SEED if set, else `default` (printed in every failure message)."""
    return int(os.environ.get("MPK_SEED", default))


def generator(offset: int = 0) -> torch.Generator:
    """A contained CPU generator (never the global RNG), seeded from MPK_SEED + offset."""
    g = torch.Generator(device="cpu")
    g.manual_seed(seed() + offset)
    return g


def randn(shape, dtype=float32, gen: torch.Generator | None = None, scale: float = 1.0) -> torch.Tensor:
    # drawn on the CPU generator, then moved: the same numbers on every backend (torch's default device)
    x = torch.randn(*shape, generator=gen or generator(), dtype=torch.float32, device="cpu") * scale
    return x.to(device=torch.get_default_device(), dtype=to_dtype(dtype).torch)


def load_reference(test_file: str, name: str = "pytorch_reference"):
    """Load `<folder of test_file>/pytorch_reference.py` under a unique name (folders never collide)."""
    folder = os.path.dirname(os.path.abspath(test_file))
    path = os.path.join(folder, f"{name}.py")
    unique = f"_mpk_ref_{os.path.basename(folder)}_{abs(hash(path)) & 0xFFFFFF:06x}"
    if unique in sys.modules:
        return sys.modules[unique]
    spec = importlib.util.spec_from_file_location(unique, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[unique] = module
    spec.loader.exec_module(module)
    return module


def run_cases_as_script(name: str, run_case, dtypes, cases, jitter=None, extra=(), scalar_cases=(),
                        after=()) -> None:
    """`python test_<layer>_testmode.py`: every (dtype, case), then every scalar case, output in
    ./test_output (or MPK_OUTPUT_DIR); any failure raises, so the script exits non-zero.

    dtypes None: each case starts with its own dtype (run as run_case(*case, ...)).
    scalar_cases: (dtype, case, params) triples, the layer test's SCALAR_CASES, each run as
    run_case(dtype, *case, output_dir=..., scalars_required=True, **params) (check_scalars).
    extra: callables run first with no argument (reference checks that build no kernel).
    after: callables run last as fn(output_dir=..., world=...), each returning its kernel.

    `mpirun -n N python test_<layer>_testmode.py` (script_world): one N-rank job. Every case runs on
    every rank as run_case(..., world=World) with the layer's tensor parallelism (the layer module's
    TP): the test slices its unsharded inputs with world.shard and passes **world.params to
    cpu_config, so rank r writes test_rank{r}.cu / task_graph_rank{r}.json; its checks compare the
    rank's shard with the matching slice of the unsharded reference. After each case World.verify
    gathers every rank's shards and outputs: split dims are smaller on every rank and the ranks'
    slices tile the dim (SHARDED lines), replicated outputs are bit-identical (IDENTICAL lines). A
    failing rank prints its traceback ("[rank r] ...") and MPI_Abort ends the job (never a hang)."""
    out_dir, world = os.environ.get("MPK_OUTPUT_DIR", "./test_output"), script_world(name)
    if world.size > 1:
        say(f"MULTIRANK {name}: {world.size} ranks, tensor parallelism '{world.tp}' {TP_KINDS[world.tp]}")
    for fn in extra:
        fn()
    pairs = [(d, c) for d in dtypes for c in cases] if dtypes else [(c[0], tuple(c[1:])) for c in cases]
    runs = [(f"{name}[{str(d)[6:]},case={c}]", functools.partial(run_case, d, *c, **(
        {"jitter": jitter(d, c)} if jitter else {}))) for d, c in pairs]
    runs += [(f"{name}[{str(d)[6:]},case={c},{p}]", functools.partial(run_case, d, *c, scalars_required=True,
                                                                      **p)) for d, c, p in scalar_cases]
    runs += [(f"{name}:{getattr(fn, 'func', fn).__name__}{getattr(fn, 'keywords', '')}", fn) for fn in after]
    pk = None
    for label, run in runs:
        pk = _on_world(world, label, lambda w: run(output_dir=out_dir, world=w)) or pk
    dist.all_ranks_agree(True, f"All {name} test-mode cases")     # every rank got here
    say(f"generated code and task graph: {pk.output_files[0]}, {pk.output_files[1]}")
    say(f"All {name} test-mode cases PASS")


def cpu_config(jitter_seed: int | None = 0, **overrides) -> dict:
    """MPK default params for a test-mode run with several workers and (by default) jitter."""
    import mirage

    from .persistent_kernel import PersistentKernel

    params = PersistentKernel.get_default_init_parameters()
    workers, schedulers = mirage.get_configurations_from_gpu(0)
    params.update(test_mode=True, num_workers=workers, num_local_schedulers=max(2, schedulers))
    params.update(overrides)
    params["schedule_jitter"] = jitter_seed
    return params


# ---- multi-rank ----------------------------------------------------------------------------

all_ranks_agree = dist.all_ranks_agree


@contextlib.contextmanager
def on_all_ranks(what: str):
    """Run checks, then agree across ranks (dist.all_ranks_agree) before any later collective:
    a rank whose check failed re-raises its error, the others raise naming the failed ranks."""
    try:
        yield
    except Exception as e:
        dist.all_ranks_agree(False, what)     # raises on every rank, naming the failed ones
        raise AssertionError(f"{what}: {e}") from e   # not reached
    dist.all_ranks_agree(True, what)


# ---- tensor parallelism: one layer test as an N-rank job ------------------------------------

# How a layer is split across ranks under tensor parallelism, as MPK's models use it. Each layer
# module declares one kind as its module-level `TP` (the only per-layer knowledge); the table says
# what the kind means for the test's tensors: role -> the dim of which rank r holds
# [r*n//W, (r+1)*n//W) (roles not named stay whole on every rank).
#   replicated: every rank computes the whole layer on the same full inputs; outputs bit-identical
#   column:     rank r holds its rows of the weight and computes its columns of the output
#   row:        rank r holds its columns of the input and of the weight and computes a partial sum
#               (the residual on rank 0 only); an allreduce after it gives every rank the whole sum
#   reduce:     the allreduce: each rank's input is its own partial; the sum is bit-identical on all
# Attention (by heads) and MoE (by experts) will add kinds.
TP_KINDS = {"replicated": {}, "column": {"weight": 0, "output": -1}, "row": {"input": -1, "weight": 1},
            "reduce": {}}
# Negative control (read here only): on this rank, World.shard gives the kernel its neighbour's part
# of every input it slices, while the reference ("output") stays this rank's: a wrong shard.
WRONG_SHARD_ENV = "MPK_TEST_WRONG_SHARD_RANK"


def layer_tp(kind: str) -> str:
    """The tensor parallelism layers/<kind>.py declares: its module-level TP, a key of TP_KINDS
    (tests/unit/test_layer_recipe.py requires it of every layer module)."""
    return importlib.import_module(f"mirage.mpk.layers.{kind}").TP


class CaseSkipped(Exception):
    """A case whose split dim is smaller than the number of ranks (the same on every rank)."""


class World:
    """One rank's view of a layer test run as an N-rank job (run_cases_as_script under mpirun).

    A layer test's run_case takes `world=testing.ONE_RANK` and: draws its unsharded tensors from one
    seeded generator (the same on every rank); keeps its part of each with `world.shard(role,
    tensor)` (the tensor itself on one rank and for the roles its TP keeps whole); builds the kernel
    with `cpu_config(..., **world.params)`; a row-parallel layer adds an allreduce_layer; it
    compares what it computed with `world.shard("output", unsharded_reference)` and puts
    `world.tag` in its names. `shards` records (role, full shape, local shape, dim, lo, hi, sha256)."""

    def __init__(self, rank: int = 0, size: int = 1, comm=None, tp: str | None = None):
        self.rank, self.size, self.comm, self.tp, self.shards = rank, size, comm, tp, []
        self.params = dict(world_size=size, mpi_rank=rank)     # for PersistentKernel / cpu_config
        self.tag = f",W={size}" if size > 1 else ""             # "" on one rank: names as ever

    def part(self, n: int, rank: int | None = None) -> tuple[int, int]:
        """[lo, hi) of `rank`'s part (default this rank's) of a dim of n: [r*n//W, (r+1)*n//W)."""
        if n < self.size:
            raise CaseSkipped(f"a dim of {n} cannot be split across {self.size} ranks")
        r = self.rank if rank is None else rank
        return r * n // self.size, (r + 1) * n // self.size

    def shard(self, role: str, full: torch.Tensor) -> torch.Tensor:
        """This rank's part (contiguous) of an unsharded tensor of `role`, as TP_KINDS[tp] splits it."""
        dim = TP_KINDS[self.tp].get(role) if self.size > 1 else None
        if dim is None:
            return full
        dim %= full.dim()
        wrong = role != "output" and os.environ.get(WRONG_SHARD_ENV) == str(self.rank)
        lo, hi = self.part(full.shape[dim], (self.rank + wrong) % self.size)
        local = full.narrow(dim, lo, hi - lo).contiguous()
        self.shards.append((role, tuple(full.shape), tuple(local.shape), dim, lo, hi, digest(local)))
        return local

    def gather(self, obj) -> list:
        return self.comm.allgather(obj) if self.comm is not None else [obj]

    def verify(self, label: str, pk) -> None:
        """After a case ran on every rank (collective), from what all ranks gathered: each split dim is
        smaller than the whole, and the ranks' parts tile it and differ (SHARDED lines); the replicated
        outputs (every output in a replicated layer's test, a reduce layer's) agree (IDENTICAL lines).
        Inside on_all_ranks: a failed check fails every rank with the same message."""
        same = [a.tensor.name for layer in pk.layers for a in layer.outputs
                if a.written and (self.tp == "replicated" or layer_tp(layer.kind) == "reduce")]
        everyone = self.gather((self.shards, [digest(pk.get_tensor(n)) for n in same]))
        with on_all_ranks(f"{label}: tensor parallelism '{self.tp}'"):
            for k, (role, full, local, dim, lo, hi, _) in enumerate(self.shards):
                parts = [theirs[0][k][4:] for theirs in everyone]
                assert local[dim] < full[dim], f"'{role}' is not split: {full} -> {local}"
                assert [p[:2] for p in parts] == [self.part(full[dim], q) for q in range(self.size)] and \
                    len({p[2] for p in parts}) == self.size, f"'{role}': the ranks hold {parts}"
                say(f"SHARDED {label} tp={self.tp} {role} {full} -> {local} (dim {dim}: [{lo}, {hi}) of "
                    f"{full[dim]}); the {self.size} ranks' parts tile it and differ PASS")
            for i, n in enumerate(same):
                seen = [theirs[1][i] for theirs in everyone]
                assert len(set(seen)) == 1, f"replicated output '{n}' differs across ranks: {seen}"
                say(f"IDENTICAL {label} {n} sha256={seen[0]} on all {self.size} rank(s) PASS")


ONE_RANK = World()


def script_world(layer: str | None = None) -> World:
    """A one-rank World under plain python (mpi4py is not imported); under `mpirun -n N` (the launcher's
    PMI_SIZE or OMPI_COMM_WORLD_SIZE set) COMM_WORLD's rank and size, with the abort-on-exception hook
    installed (dist.install_excepthook); tp: the layer's TP."""
    tp = layer_tp(layer) if layer else None
    if not {"PMI_SIZE", "OMPI_COMM_WORLD_SIZE"} & set(os.environ) or dist.mpi().COMM_WORLD.Get_size() == 1:
        return World(tp=tp)
    comm = dist.mpi().COMM_WORLD
    dist.install_excepthook(comm)
    return World(comm.Get_rank(), comm.Get_size(), comm, tp)


def _on_world(world: World, label: str, run):
    """One case: on one rank exactly run(world); on several run(fresh World), then World.verify. A
    failure propagates: the excepthook prints the rank's traceback and MPI_Abort ends the job."""
    if world.size == 1:
        return run(world)
    case = World(world.rank, world.size, world.comm, world.tp)
    try:
        pk = run(case)
    except CaseSkipped as e:
        return say(f"SKIP {label}: {e}")
    case.verify(label, pk)
    return pk


def mpiexec() -> str:
    """The `mpiexec` of this Python's environment (the mpich wheel installs it), else the PATH's."""
    here = os.path.join(sysconfig.get_path("scripts"), "mpiexec")
    found = here if os.access(here, os.X_OK) else shutil.which("mpiexec")
    if not found:
        raise FileNotFoundError(f"mpiexec not found in {os.path.dirname(here)} or on PATH: "
                                f"{dist.INSTALL_HINT}")
    return found


def mpirun(file: str, n: int, timeout: float = 60, args: tuple = (),
           env: dict | None = None) -> tuple[int, str]:
    """Run `mpiexec -n N python FILE ARGS` and return (exit code, stdout + stderr); 124 on a timeout,
    after killing the whole job. Multi-rank tests assert on the code and on per-rank evidence lines."""
    cmd = [mpiexec(), "-n", str(n), sys.executable, file, *map(str, args)]
    full_env = dict(os.environ, **(env or {}))
    full_env.pop("PYTEST_CURRENT_TEST", None)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=full_env,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
        code = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)           # mpiexec and every rank: one session
        out, _ = proc.communicate()
        out += f"\n[mpirun] TIMEOUT: killed after {timeout:g} s: {' '.join(cmd)}\n"
        code = 124
    print(f"$ {' '.join(cmd)}  -> exit {code}\n{out}", flush=True)
    return code, out


def rank_lines(output: str, rank: int, prefix: str) -> list[str]:
    """Lines of rank `rank` in an mpirun output that start with `prefix` (after "[rank r] ")."""
    tag = f"[rank {rank}] {prefix}"
    return [line for line in output.splitlines() if line.startswith(tag)]
