"""Where a failure comes from: the layer and grid coordinates of bad tiles, the first divergent
layer, degenerate tiling, and the serial re-run that tells a race from a math bug (docs/profiler.md)."""
from __future__ import annotations

import math
from typing import Callable

import torch

from ..layers import AXES, storage
from ..poisons import QUIET, is_poison
from ..tensor import SYMMETRIC
from .evidence import RMS_LIMIT, Comparison, _fmt_index, _rms, compare, evidence, say
from .keep import keep_failure
from .tolerances import Tolerance


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




def _diverging(pk, references: dict, tolerances: dict):
    """(layer, output index, tensor name, Comparison) for each compared output, in program order."""
    for layer in pk.layers:
        for k, acc in enumerate(layer.outputs):
            name = acc.tensor.name
            if acc.written and name in references:
                out = pk.get_tensor(name)
                c = compare(out, references[name], tolerances[name])
                evidence(f"{layer.name}.{name}", out, references[name], tolerances[name], c,
                         note=ue8m0_note(pk, out))
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
        kept = keep_failure(pk, "divergence")
        raise AssertionError(report + kept + _serial_rerun(pk, "divergence", lambda: any(
            not compare(pk.get_tensor(n), references[n], tolerances[n]).passed for n in references)))


# ---- NaN: which poison it carries (docs/profiler.md) ---------------------------------------------

# Measured with rmsnorm kernels that skip their barrier or read a never-written slot
# (tests/runtime_python/test_mode/test_diagnosis.py): the emulation fills shared memory with 0xFF bytes
# and x86 arithmetic and the conversions of csrc/runtime/dtypes.h keep a NaN operand's payload, so the
# output holds fp32 0xFFFFFFFF (0xFFFF0000 / 0xFFFFE000: a bf16 / fp16 slot widened), fp16 0xFFFF
# (0xFFF8: from a bf16 slot). fp32 -> bf16 makes every NaN 0xFFFF: a bf16 output keeps no payload.
_SMEM_NAN = {torch.float32: (0xFFFFFFFF, 0xFFFF0000, 0xFFFFE000), torch.float16: (0xFFFF, 0xFFF8)}
_INT = {2: torch.int16, 4: torch.int32}


def poison_names(pk, actual: torch.Tensor) -> tuple[dict[int, str], str]:
    """nan_note's poisons and own for `actual`, written by a test-mode run of pk (None: none known)."""
    found = _output_of(pk, actual) if pk is not None and getattr(pk, "_watched", None) else None
    if found is None:
        return {}, ""
    return pk._watched.names(actual.dtype), found[0].outputs[found[1]].tensor.name


def nan_note(actual: torch.Tensor, bad: torch.Tensor, gpu: bool = False,
             poisons: dict[int, str] | None = None, own: str = "") -> str:
    """What the NaNs among the mismatched elements (`bad`) carry, from their bits: the shared-memory
    poison, an output poison (mirage/mpk/poisons.py: each tensor its own) as stored or quieted by
    arithmetic, no payload (bf16, or a GPU, which keeps none), or a NaN the arithmetic made; "" when
    none is NaN. poisons: {the run's poison bits (unsigned): tensor name}, to say whose poison it is;
    own: the name of the tensor `actual` is (its own poison: never written)."""
    if actual.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        return ""
    nan, size, total = bad & actual.isnan(), actual.element_size(), int(bad.sum())
    if not bool(nan.any()):
        return ""
    bits = actual.view(_INT[size])[nan].long() & ((1 << 8 * size) - 1)
    dt, quiet = actual.dtype, QUIET[actual.dtype]
    kinds = []
    for pattern, name in sorted((poisons or {}).items()):
        whose = ("its own output poison" if name == own else f"the output poison of tensor '{name}'")
        how = ("never written" if name == own else f"copied from an element of '{name}' never written (read "
               f"before its producer wrote it, or outside what any task writes)")
        kinds.append((bits == pattern, f"hold {whose} (0x{pattern:X}): {how}"))
        if dt != torch.bfloat16:
            kinds.append((bits == pattern | quiet, f"are NaN with the payload of {whose}, quieted by "
                          f"arithmetic (0x{pattern | quiet:X}): computed from an element of '{name}' read "
                          f"before its producer wrote it (a missing dependency) or never written"))
    kinds.append((is_poison(bits, dt), "hold an output poison (a signalling NaN): never written, or "
                  "bit-copied from an element never written"))
    if gpu or dt == torch.bfloat16:
        why = "a GPU keeps no NaN payload" if gpu else "fp32 -> bf16 makes every NaN 0xFFFF"
        kinds.append((torch.ones_like(bits, dtype=torch.bool), f"are NaN ({why}, so the payload cannot "
                      f"tell): often the shared-memory poison read before a barrier or never written"))
    else:
        kinds.append((torch.isin(bits, torch.tensor(_SMEM_NAN[dt], device=bits.device)),
                      "are NaN with the shared-memory poison's payload (0xFF bytes): a read before a "
                      "barrier, or of shared memory never written"))
        kinds.append((is_poison(bits & ~quiet, dt) & (bits & quiet != 0), "are NaN with an output poison's "
                      "payload quieted by arithmetic: computed from an element read before its producer "
                      "wrote it (a missing dependency) or never written"))
        kinds.append((torch.ones_like(bits, dtype=torch.bool), "are NaN without a poison's payload: made by "
                      "the arithmetic (0/0, inf - inf, the square root of a negative)"))
    notes, left = [], torch.ones_like(bits, dtype=torch.bool)
    for mask, text in kinds:
        n = int((mask & left).sum())
        left &= ~mask
        if n:
            notes.append(f"{n} of the {total} mismatched elements {text}")
    return "; ".join(notes)


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


def _ue8m0_reading(s: torch.Tensor) -> torch.Tensor:
    """The float32 scales as a UE8M0 reading sees them (csrc/tasks/fp8_dot.cuh ue8m0): 2^(E - 127) for
    the exponent field E (E = 0: 2^-127), NaN for E = 255; float64."""
    code = (s.float().contiguous().view(torch.int32) >> 23) & 0xFF
    powers = torch.ldexp(torch.ones_like(code, dtype=torch.float64), code - 127)
    return torch.where(code == 255, math.nan, powers)


def ue8m0_note(pk, out: torch.Tensor | None = None, layers=None) -> str:
    """What the scales read as UE8M0 (Layer.ue8m0_scales) did to `out`: for each layer of `layers`
    (default: the layer of pk that wrote `out` and every earlier layer it reads from, transitively) given
    scales that are not all powers of two, "layer 'L' 'sx' 40/48 (up to 1.87x), 'sw' 0/96 not powers of
    two: values up to 1.87x = 2^0.904 small", from the scales' values now in pk; "" when none."""
    if layers is None:
        found = _output_of(pk, out)
        layers, needed = [], set()
        end = [id(g) for g in pk.layers].index(id(found[0])) if found else -1     # (by identity: no __eq__)
        for layer in reversed(pk.layers[:end + 1]):
            if layer is found[0] or any(storage(a.tensor) & needed for a in layer.outputs if a.written):
                layers.append(layer)
                needed |= {n for a in layer.inputs for n in storage(a.tensor)}
    notes = []
    for layer in (layer for layer in reversed(layers) if layer.ue8m0_scales):
        parts, worst, odd = [], 1.0, 0
        for a in (a for a in layer.inputs if a.role in layer.ue8m0_scales):
            s = pk.get_tensor(a.tensor.name).detach().cpu()
            factor = s.double() / _ue8m0_reading(s)     # the scale over its reading: in [1, 2) if normal
            high = float(factor[factor > 1].max()) if bool((factor > 1).any()) else 1.0
            worst, odd = worst * high, odd + int((~(factor >= 1)).sum())    # zero, negative, subnormal, NaN
            parts.append(f"'{a.tensor.name}' {int((factor != 1).sum())}/{s.numel()}"
                         + (f" (up to {high:.3g}x)" if high > 1 else ""))
        if worst > 1 or odd:
            odd_note = f", {odd} scale(s) zero, negative, subnormal or not finite" if odd else ""
            notes.append(f"layer '{layer.name}' {', '.join(parts)} not powers of two: values up to "
                         f"{worst:.3g}x = 2^{math.log2(worst):.3g} small{odd_note}")
    return "scales read as UE8M0: " + "; ".join(notes) if notes else ""


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


def _serial_rerun(pk, name: str, fails: Callable[[], bool], note: Callable[[], str] = lambda: "") -> str:
    """After a failed comparison of a test-mode run with several workers or jitter: pk's graph once
    more on one worker, no jitter, tasks in position order (the program's order; MpkConfig.in_order),
    then `fails()` on the tensors the re-run wrote says which kind of bug it is, and `note()` there
    what its NaNs carry (nan_note). The failing run's outputs are put back. Prints and returns the
    verdict as a line for the failure message."""
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
            serial = fails() and (note() or "the kernel's math or indexing")   # a poison NaN says more
            verdict = (f"fails serially too: {serial}" if serial else
                       f"passes serially: a missing dependency or a race; {_first_difference(pk, parallel)}")
    except Exception as e:        # unwritten tiles, a hang: also without any parallelism
        verdict = (f"fails serially too ({type(e).__name__}: {str(e).splitlines()[0]}): the kernel's math or "
                   f"indexing")
    finally:
        for n, t in parallel.items():
            outputs[n].copy_(t)
    say(f"SERIAL {name}: {verdict}")
    return f"\nSerial re-run (1 worker, no jitter, tasks in program order): {verdict}"


def last_progress_ns(pk) -> int:
    """When pk's last launch last made progress, from its task record (profile=True; CLOCK_MONOTONIC
    ns on the CPU, time.monotonic_ns()'s): the latest ready or begin stamp, or the end stamp of a task
    that completed (a task the abort ended inside its kernel is stamped at the abort). Watchdog tests
    time their bound from here, not from the pk() call, so a busy machine's slow start cannot fail them."""
    from ..abi import RECORD_FIELDS

    rec = pk._record.view(-1)[: RECORD_FIELDS * len(pk.graph.tasks)].view(-1, RECORD_FIELDS)[1:]
    done = torch.tensor(pk._runtime.task_progress()[1:], device=rec.device) > 0
    last = max(int(rec[:, :2].max()), int(rec[done, 2].max()) if done.any() else 0)
    assert last > 0, "no task stamped: the kernel ran nothing"
    return last
