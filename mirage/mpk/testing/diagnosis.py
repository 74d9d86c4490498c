"""Where a failure comes from: the layer and grid coordinates of bad tiles, the first divergent
layer, degenerate tiling, and the serial re-run that tells a race from a math bug (docs/profiler.md)."""
from __future__ import annotations

from typing import Callable

import torch

from ..layers import AXES, storage
from ..tensor import SYMMETRIC
from .evidence import RMS_LIMIT, Comparison, _fmt_index, _rms, compare, evidence, say
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
