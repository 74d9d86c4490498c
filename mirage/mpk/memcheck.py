"""Test mode's memory check: kernels get guarded copies of the tensors, and going outside one is an
MPKMemoryError naming the task, the tensor and the bytes (docs/runtime.md, "Memory safety in test mode").

Per launch: copy the tensors in (after the outputs were poisoned, written.py), run, copy the written
ones back, then look at every red zone and at the faults the guard-page handler recorded
(csrc/runtime/guard.h). Damage is named by re-running tasks alone (mpk_run_task) with the zones
refilled and the pages closed: first the task a recorded fault's worker showed, then every task of
the layers that access the tensor, then all tasks; what a task does alone is its own. The copies
are made at compile() and kept until finalize(); symmetric (multi-rank) tensors are not guarded,
nor tensors no task accesses (a shuffle's inputs: pk() reads them, no kernel does; a copy of a weight
each launch would cost the time of the pass, benchmarks/README.md).
The meta tensors get guarded copies too (ids -1 - i, i their place in abi.META_FIELDS): the runtime
and the tasks use them, they are copied back after every pass (prepare_next_batch writes them), and
a tensor on a meta tensor's storage (embed_layer's input view of input_tokens, an argmax output
viewing output_tokens) points into that copy, so the kernels and the runtime see the same bytes.
"""
from __future__ import annotations

import contextlib

import numpy as np
import torch

from . import abi, guard
from .errors import MPKMemoryError, MPKRuntimeError
from .graph import Graph
from .poisons import red_fill
from .tensor import SHUFFLED, SYMMETRIC, DTensor

MAX_FAULTS = 256        # fault records kept per launch (all are counted)
MAX_RERUNS = 4096       # tasks re-run alone to name one damage
MAX_NAMED = 8           # culprits named per damaged tensor
HINT = ("each tensor a test-mode kernel gets lies between red zones and guard pages: docs/runtime.md, "
        "'Memory safety in test mode'")


def _where(lo: int, hi: int, n: int) -> str:
    if hi <= 0:
        return f"{-lo} bytes before its start" if hi == 0 else f"{-hi} to {-lo} bytes before its start"
    if lo >= n:
        return f"{hi - n} bytes past its end" if lo == n else f"{lo - n} to {hi - n} bytes past its end"
    return f"across its bounds ({n} bytes)"


def _inside(view: torch.Tensor, mid: int, meta: torch.Tensor) -> tuple[int | None, int]:
    """(mid, byte offset) of a tensor on meta tensor mid's storage, if it lies within that meta tensor
    (then it is read and written in the meta tensor's guarded copy); else (None, 0): read in place."""
    offset = view.data_ptr() - meta.data_ptr()
    inside = 0 <= offset and offset + guard.span_bytes(view) <= guard.span_bytes(meta)
    return (mid, offset) if inside else (None, 0)


def _elements(ranges: list[tuple[int, int]], size: int) -> list[tuple[int, int]]:
    """Byte ranges widened to whole elements and merged (a written value may share bytes with the fill)."""
    out: list[tuple[int, int]] = []
    for lo, hi in sorted((lo // size * size, -(-hi // size) * size) for lo, hi in ranges):
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(hi, out[-1][1]))
        else:
            out.append((lo, hi))
    return out


class Fences:
    """The guarded copies of one kernel's tensors, the guard table and the fault records."""

    def __init__(self, tensors: list[DTensor], graph: Graph, pages: bool, meta: dict | None = None):
        self.tensors, self.graph = tensors, graph
        self.meta = [(-1 - i, k, meta[k]) for i, k in enumerate(abi.META_FIELDS)] if meta else []
        own = {m.untyped_storage().data_ptr(): (mid, m) for mid, _, m in self.meta if m.numel()}  # (0: none)
        self.guarded = {mid: guard.guarded_copy(m, pages=pages) for mid, _, m in self.meta}
        home = {t.id: own.get(t.data.untyped_storage().data_ptr()) for t in tensors if t.kind != SYMMETRIC}
        self.inside = {tid: _inside(tensors[tid].data, *m) for tid, m in home.items() if m is not None}
        used = {tile.tensor.id for t in graph.tasks[1:] for tile in t.inputs + t.outputs}
        self.guarded.update({t.id: guard.guarded_copy(t.data, pages=pages) for t in tensors
                             if t.kind != SYMMETRIC and t.id not in self.inside and t.id in used})
        # A shuffled tensor is the runner's own staging copy (pk() refills it from its inputs before
        # every launch): its guarded copy becomes its storage, so the shuffle writes there and copy_in
        # has nothing to copy. close() leaves that mapping to the tensor (freed with it).
        self.owned = {t.id for t in tensors if t.kind == SHUFFLED and t.id in self.guarded}
        for tid in self.owned:
            tensors[tid].data = self.guarded[tid].tensor
        outputs = {tile.tensor.id for t in graph.tasks[1:] for tile in t.outputs}
        self.written = sorted(outputs & set(self.guarded)) + [mid for mid, _, _ in self.meta]
        rows = [(lo, hi, tid) for tid, g in self.guarded.items() for lo, hi in g.guard_pages]
        self.ranges = np.array(rows, dtype=np.int64).reshape(-1, abi.GUARD_RANGE_FIELDS)
        self.faults = np.zeros((MAX_FAULTS, abi.GUARD_FAULT_FIELDS), dtype=np.int64)
        self.count = np.zeros(1, dtype=np.int64)
        self.dirty = self.pinned = False
        self.run = 0                  # launches so far (red_fill's run)

    def pointers(self) -> list[int]:
        """The tensors' pointers, then the meta tensors' (abi.META_FIELDS order) when they are guarded."""
        def one(t: DTensor) -> int:
            if t.id in self.guarded:
                return self.guarded[t.id].tensor.data_ptr()
            mid, offset = self.inside.get(t.id, (None, 0))
            return self.guarded[mid].base + offset if mid is not None else t.data.data_ptr()
        return [one(t) for t in self.tensors] + [self.guarded[m[0]].tensor.data_ptr() for m in self.meta]

    def source(self, tid: int) -> torch.Tensor:
        """What guarded copy `tid` copies: a tensor's data, or (tid < 0) a meta tensor."""
        return self.meta[-1 - tid][2] if tid < 0 else self.tensors[tid].data

    def name(self, tid: int) -> str:
        return f"meta tensor '{self.meta[-1 - tid][1]}'" if tid < 0 else f"tensor '{self.tensors[tid].name}'"

    def config(self) -> dict:
        """The MpkConfig fields of the guard table (abi.h)."""
        return dict(num_guard_ranges=len(self.ranges), max_guard_faults=MAX_FAULTS,
                    guard_ranges=self.ranges.ctypes.data, guard_faults=self.faults.ctypes.data,
                    guard_fault_count=self.count.ctypes.data)

    def copy_in(self) -> None:
        """The tensors into their copies; each tensor's red zones get this launch's own byte
        (poisons.red_fill), so one tensor's red-zone byte copied into another's red zone is damage."""
        self.run += 1
        for tid, g in self.guarded.items():
            if tid not in self.owned:
                g.tensor.copy_(self.source(tid))
            g.fill_red(red_fill(tid, self.run))
        self.arm()

    def arm(self) -> None:
        """Red zones full, guard pages closed, no fault recorded."""
        if self.dirty:
            for g in self.guarded.values():
                g.fill_red(g.red)
                g.protect()
        self.count[0], self.dirty = 0, False

    def _damage(self, tid: int) -> tuple[list[tuple[int, int]], np.ndarray]:
        recs = self.faults[:min(int(self.count[0]), MAX_FAULTS)]
        mine = recs[recs[:, 1] == tid]
        g = self.guarded[tid]
        return (g.damage(mine[:, 0].tolist()) if len(mine) else g.red_damage()), mine

    def finish(self, runtime) -> None:
        """After a pass: copy the written tensors back, then raise MPKMemoryError for any damage."""
        for tid in self.written:
            self.source(tid).copy_(self.guarded[tid].tensor)
        found = {tid: d for tid, d in ((tid, self._damage(tid)) for tid in self.guarded)
                 if len(d[0]) or len(d[1])}
        self.dirty = self.dirty or bool(found) or int(self.count[0]) > 0
        if not found:
            return
        lines = [line for tid, d in found.items() for line in self._name(runtime, tid, *d)]
        head = f"{len(lines)} out-of-bounds accesses in test mode:\n  " if len(lines) > 1 else ""
        raise MPKMemoryError(head + "\n  ".join(lines) + f"\n({HINT})")

    def _report(self, who: str, tid: int, ranges: list, recs: np.ndarray) -> list[str]:
        n, size = self.guarded[tid].nbytes, self.source(tid).element_size()
        covered = _elements(ranges, size)
        what = f"of {self.name(tid)}, which has {n} bytes"
        lines = [f"{who} wrote bytes [{lo}, {hi}) {what}: {_where(lo, hi, n)}" for lo, hi in covered]
        for addr, _, access, _, _ in recs.tolist():
            lo = (addr - self.guarded[tid].base) // size * size
            if access == 2 and any(a <= lo < b for a, b in covered):
                continue
            lines.append(f"{who} {abi.ACCESS[access]} bytes [{lo}, {lo + size}) {what}: "
                         f"{_where(lo, lo + size, n)} (a guard page trapped it)")
        return lines

    def _name(self, runtime, tid: int, ranges: list, recs: np.ndarray) -> list[str]:
        """Lines naming who made this damage: the tasks that make it when run alone."""
        tasks = self.graph.tasks
        hinted = [int(p) for p in recs[:, 3].tolist() if 0 < p < len(tasks)]
        touching = [t.id for t in tasks[1:] if any(x.tensor.id == tid for x in t.inputs + t.outputs)]
        order = list(dict.fromkeys(hinted + touching + [t.id for t in tasks[1:]]))
        order = [p for p in order if tasks[p].layer.signal_role is None][:MAX_RERUNS]
        if hasattr(runtime.lib, "mpk_launch_async"):     # CUDA modules: red zones, no re-runs (not run yet)
            names = ", ".join(sorted({f"'{tasks[p].layer.name}'" for p in touching})) or \
                ("(any; or the runtime)" if tid < 0 else "(none accesses it)")
            return self._report(f"a task of layer(s) {names}", tid, ranges, recs)
        lines, named, touched = [], 0, set(touching)
        for pos in order:
            if lines and pos not in touched:      # named among those that access it: enough
                break
            self.arm()
            self.dirty = True
            with contextlib.suppress(MPKRuntimeError):      # a task failing alone is no culprit
                runtime.run_task(pos)
            alone = self._damage(tid)
            if len(alone[0]) or len(alone[1]):
                t, named = tasks[pos], named + 1
                lines += self._report(f"task {t.coord} of layer '{t.layer.name}'", tid, *alone)
                if named == MAX_NAMED:
                    break
        if lines:
            return lines
        hint = tasks[hinted[0]] if hinted else None
        shown = f"; the worker showed task {hint.coord} of layer '{hint.layer.name}'" if hint else ""
        who = f"a task (none of the {len(order)} re-run alone did it{shown})"
        return self._report(who, tid, ranges, recs)

    def close(self) -> None:
        """Unmap the copies, unless a kernel may still run on them (pinned: a hang or an interrupt)."""
        if self.pinned:
            return
        for tid, g in self.guarded.items():
            if tid not in self.owned:      # an owned copy is its tensor's storage: it lives as long
                g.close()
        self.guarded = {}
