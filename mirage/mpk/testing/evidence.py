"""Comparison in float64 and the one evidence line per compared tensor (docs/tolerances.md)."""
from __future__ import annotations

import hashlib
import math
import sys
from dataclasses import dataclass

import torch

from .. import dist
from .tolerances import RMS_LIMIT, RMS_MIN_N, Tolerance


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
    allowed = torch.as_tensor(tol.atol, dtype=torch.float64, device=e64.device) + tol.rtol * e64.abs()
    diff = (a64 - e64).abs()
    diff = torch.where((a64 == e64) | (a64.isnan() & e64.isnan()), 0.0, diff)   # equal infs, both NaN
    # NaN on one side only, or an infinity the other side does not match: wrong whatever the budget (an
    # expected inf or NaN makes `allowed` inf or NaN, which no comparison with diff would fail)
    mismatch = (a64.isnan() ^ e64.isnan()) | ((a64.isinf() | e64.isinf()) & (a64 != e64) & (diff != 0))
    diff = torch.where(mismatch, math.inf, diff)
    c = Comparison(diff, allowed.expand_as(diff), (diff > allowed) | mismatch)
    if tol.var_abs is not None:
        var_abs = torch.as_tensor(tol.var_abs, dtype=torch.float64, device=e64.device)
        c.var = (var_abs + tol.var_rel * e64 * e64).expand_as(diff)
        c.rms_ratio, c.n_eff = _rms(diff, c.var)
    return c


def evidence(name: str, actual: torch.Tensor, expected: torch.Tensor, tol: Tolerance,
             c: Comparison, warning: str = "", note: str = "") -> tuple[float, int]:
    """Print `EVIDENCE name dtype shape max_abs max_rel atol rtol worst_index rms_ratio PASS|FAIL`, with
    `WARNING[...]` (tiling_warning) and `NOTE[...]` (what the values went through that the reference
    reproduces: diagnosis.ue8m0_note) before the verdict when there are some."""
    diff = c.diff
    rel = diff / expected.double().abs().clamp_min(torch.finfo(torch.float64).tiny)
    worst = int(diff.argmax()) if diff.numel() else 0
    max_abs = float(diff.max()) if diff.numel() else 0.0
    max_rel = float(rel.max()) if rel.numel() else 0.0
    atol_shown = float(torch.as_tensor(tol.atol, dtype=torch.float64, device=diff.device).max())
    shape = tuple(actual.shape)
    say(f"EVIDENCE {name} {str(actual.dtype).replace('torch.', '')} {shape} max_abs={max_abs:.3e} "
        f"max_rel={max_rel:.3e} atol={atol_shown:.3e} rtol={tol.rtol:.3e} "
        f"worst_index={_fmt_index(worst, shape)} {c.rms_field()} {f'WARNING[{warning}] ' if warning else ''}"
        f"{f'NOTE[{note}] ' if note else ''}"
        f"{'PASS' if c.passed else 'FAIL'}")
    return max_abs, worst


def _rms_line(c: Comparison) -> str:
    """The rms ratio beside a worst-case mismatch: high means systematic, not a few elements."""
    if c.rms_ratio is None:
        return ""
    limit = f"limit {RMS_LIMIT:g}" if c.rms_checked else f"not checked: n_eff {c.n_eff:.0f} < {RMS_MIN_N}"
    return f"\nRoot-mean-square error: {c.rms_ratio:.3g} times its statistical budget ({limit})"




def digest(t: torch.Tensor) -> str:
    """A short sha256 of a tensor's bytes (bit-identity across ranks); needs no numpy."""
    # (reshape first: a "contiguous" tensor with a size-1 dim may keep a stride torch's byte view refuses)
    raw = bytes(t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).tolist())
    return hashlib.sha256(raw).hexdigest()[:16]
