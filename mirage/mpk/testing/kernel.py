"""Kernel-level runs: one layer's tasks, each alone on one block, every byte around it watched.

This is where a layer author iterates (tests/runtime_python/<layer>/test_<layer>.py; docs/kernel_tests.md):
no scheduler, no events, no meta-tensor pass, the same kernel source and the same build cache as test
mode (mpk_run_task in csrc/runtime/entry.h). For every task of `coords`:

  1. every tensor's storage span (and a red zone on each side) is filled with a poison, except the
     task's declared input tiles, which hold the inputs; its declared output tiles hold the poison too;
  2. the task runs alone (CPU: the SIMT emulation with a seeded thread order);
  3. footprint, writes: every byte outside its declared output tiles must still hold what step 1 put
     there (a write outside a tile, into storage padding, or past either end of a tensor is named);
  4. the same with a second poison (another bit pattern, finite where the first is NaN): the output
     tiles must come out bit-identical, or the task read memory outside its declared input tiles; the
     byte is found by bisection (a handful of re-runs) and named;
  5. the same with a second thread order: bit-identical, or the block races with itself;
  6. every element of its declared output tiles was written (not poison after both runs).

A violation raises MPKFootprintError naming the layer, the task's grid coordinate, the tensor and the
element range. The outputs the tasks wrote are copied into the tensors given and returned; a mismatch
against a reference (KernelRun.check) names the tasks whose tiles are wrong and, under the emulation,
the thread (warp, lane) that last wrote the first bad element.
"""
from __future__ import annotations

import contextlib
import os
import shutil
from dataclasses import dataclass, field
from typing import Callable

import torch

from .. import abi, build, guard, poisons
from ..dtypes import to_dtype
from ..errors import MPKFootprintError, MPKRuntimeError
from ..graph import Task
from ..layers import DEFAULT_CHECKS, NONZERO, Layer
from ..meta import check_batch
from ..tensor import ATTACHED, SHUFFLED, DTensor, check_name, shuffle_into
from .checks import check_nonvacuous
from .diagnosis import nan_note, ue8m0_note
from .evidence import RMS_LIMIT, Comparison, _fmt_index, _rms, compare, evidence, say
from .inputs import seed as test_seed
from .keep import keep_failure
from .races import TsanReports, named_race
from .tolerances import Tolerance

# The two poisons and the red zones' bytes are each tensor's own, and the run's (mirage/mpk/poisons.py):
# the first a NaN no arithmetic produces (test mode's kind), the second finite, so that a value read from
# outside a tile changes the result whatever the kernel does; a copy from one tensor's poison or red zone
# into another's changes bytes there.
SMEM_FILL = (0xFF, 0x41)          # the block's shared memory (static and dynamic) at its start, CPU
# Each red zone: as large as the span, so a write a whole tile past either end lands in it (256 bytes,
# a CUDA allocation's alignment, at least; 1 MiB at most).
RED_MIN, RED_MAX = 256, 1 << 20
ALIGN_KEPT = 16                   # a source's offset modulo this (bytes) is kept: the widest vector access
_INT = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
MAX_SHOWN = 3                     # element ranges named per violation


# ---- buffers: one tensor's storage span between red zones ---------------------------------------

class SpanBuffer:
    """A copy of a tensor's storage span (first to last element, padding of strided views included)
    between two red zones, on the tensor's device; `tensor` has the source's shape and strides. On the
    CPU it lives in test mode's guarded copy of the tensor (mirage/mpk/guard.py: its guard pages are
    in the module's guard table, so an access far past the red zones is recorded, not a crash); a
    symmetric tensor, one on a GPU, or a misaligned view gets its own allocation with red zones as
    large as the span (a whole tile past either end lands in them)."""

    def __init__(self, t: torch.Tensor, guarded: guard.Guarded | None = None):
        self.shape, self.strides, self.itemsize = tuple(t.shape), tuple(t.stride()), t.element_size()
        # the source's misalignment to 16 bytes is kept (slots of padding before the first element): a
        # view that starts mid-row reaches the kernel as unaligned as the caller made it
        self.lead = t.data_ptr() % ALIGN_KEPT // self.itemsize
        self.span = self.lead + 1 + sum((d - 1) * s for d, s in zip(self.shape, self.strides))  # elements
        nbytes = self.span * self.itemsize
        self.guarded = guarded if guarded is not None and not self.lead and guarded.nbytes == nbytes else None
        if self.guarded is not None:
            self.red, self.raw = self.guarded.red_lo, self.guarded._bytes
        else:
            self.red = min(RED_MAX, max(RED_MIN, -(-nbytes // RED_MIN) * RED_MIN))
            self.raw = torch.empty(2 * self.red + nbytes, dtype=torch.uint8, device=t.device)
        self.slots = self.raw[self.red:self.red + nbytes].view(_INT[self.itemsize])
        self.tensor = self.slots.view(t.dtype).as_strided(self.shape, self.strides, self.lead)
        # offset (in elements, inside the span) of every element of the tensor, and the inverse map
        self.offsets = torch.arange(self.span, device=t.device).as_strided(self.shape, self.strides,
                                                                          self.lead)
        self.index_of = torch.full((self.span,), -1, dtype=torch.int64, device=t.device)
        self.index_of[self.offsets.flatten()] = torch.arange(self.offsets.numel(), device=t.device)

    @property
    def pointer(self) -> int:
        return self.slots.data_ptr() + self.lead * self.itemsize

    def red_zones(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.raw[:self.red], self.raw[self.red + self.span * self.itemsize:]


def _slices(box) -> tuple[slice, ...]:
    return tuple(slice(lo, hi) for lo, hi in zip(*box))


@dataclass
class _Image:
    """What a task's run starts from, per tensor: the span's slots, the red zones' byte, and the mask
    of the slots the task may write (its declared output tiles)."""
    slots: torch.Tensor
    red: int
    writable: torch.Tensor | None    # None: the task writes nothing of this tensor


# ---- the run ---------------------------------------------------------------------------------

@dataclass
class KernelRun:
    """The result of run_tasks: the layer, the tasks that ran and the outputs they wrote."""
    layer: Layer
    tasks: list[Task]
    outputs: dict[str, torch.Tensor]             # declared outputs, as the tasks that ran wrote them
    covered: dict[str, torch.Tensor]             # per output: the elements those tasks' tiles cover
    _harness: "_Harness" = field(repr=False, default=None)

    @property
    def coords(self) -> list[tuple[int, int, int]]:
        return [t.coord for t in self.tasks]

    def check(self, name: str, expected: torch.Tensor, tol: Tolerance, checks=DEFAULT_CHECKS,
              inputs: tuple[torch.Tensor, ...] = (), against: str = "") -> None:
        """The evidence line of output `name` over the tiles of the tasks that ran, then the layer's
        non-vacuity checks there; a mismatch names the tasks with bad elements and (CPU) the thread
        that last wrote the first of them. against: what `expected` is, when a test checks one output
        against two references (shown in the label)."""
        if name not in self.outputs:
            raise KeyError(f"run_tasks: layer '{self.layer.name}' has no declared output '{name}'; outputs: "
                           f"{sorted(self.outputs)}")
        actual, cover = self.outputs[name], self.covered[name]
        if tuple(expected.shape) != tuple(actual.shape):
            raise AssertionError(f"'{name}': the values for attribute 'shape' do not match: "
                                 f"{tuple(actual.shape)} != {tuple(expected.shape)}")
        c = _restrict(compare(actual, expected.to(actual.device), tol), cover)
        label = (f"{self.layer.name}.{name}[kernel,{len(self.tasks)} task(s),{self._harness.threads} threads"
                 f"{',' + against if against else ''}]")
        evidence(label, actual, expected, tol, c, note=ue8m0_note(self._harness.pk, layers=[self.layer]))
        if not c.passed:
            raise AssertionError(self._mismatch(name, label, actual, expected, c, tol))
        same_shape = tuple(x[cover] for x in inputs if x.shape == actual.shape)
        # a layer whose outputs may be all zero by design (tensor_init) has no nonzero check, and its
        # reference is no more trivial than it is
        nontrivial = expected[cover].to(actual.device) if NONZERO in checks else None
        check_nonvacuous(label, actual[cover], checks, same_shape, reference=nontrivial)

    def _mismatch(self, name: str, label: str, actual, expected, c: Comparison, tol: Tolerance) -> str:
        shape = tuple(actual.shape)
        bad = c.bad if c.n_bad else (c.diff > 0)
        first = int(bad.flatten().nonzero()[0]) if bad.any() else int(c.diff.argmax())
        idx = _fmt_index(first, shape)
        tasks = [t for t in self.tasks for tile in t.outputs
                 if tile.declared and tile.tensor.name == name and bad[_slices(tile.box)].any()]
        owner = next((t for t in tasks if _inside(idx, t, name)), None)
        what = (f"{c.n_bad} / {int(self.covered[name].sum())} elements of the tasks' tiles outside the budget"
                if c.n_bad else f"rms ratio {c.rms_ratio:.3g} > limit {RMS_LIMIT:g}")
        lines = [f"'{label}' is not close ({str(actual.dtype)[6:]}, {shape}): {what}",
                 f"First bad element {idx}: actual {float(actual.flatten()[first].double()):.6g}, expected "
                 f"{float(expected.flatten()[first].double()):.6g}, "
                 f"allowed {float(c.allowed.flatten()[first]):.3g}",
                 f"Tasks with bad elements (grid coordinate): {', '.join(str(t.coord) for t in tasks[:16])}"
                 f"{' ...' if len(tasks) > 16 else ''}"]
        if owner is not None:
            lines.append(self._harness.who_wrote(owner, name, idx))
        h, width = self._harness, actual.element_size()
        whose = {h.poison(t, 0) & ((1 << 8 * width) - 1): t.name for t in h.table
                 if t.data.dtype == actual.dtype}
        note = nan_note(actual, bad & self.covered[name], actual.device.type == "cuda", whose, name)
        if note:
            lines.append(f"NaN: {note}")
        lines.append(f"Tolerance budget: {tol.why}; seed: MPK_SEED={test_seed()}")
        kept = keep_failure(self._harness.pk, label).strip()
        return "\n".join(lines + ([kept] if kept else []))


def _inside(idx: tuple[int, ...], task: Task, name: str) -> bool:
    return any(tile.declared and tile.tensor.name == name and
               all(lo <= i < hi for i, lo, hi in zip(idx, *tile.box)) for tile in task.outputs)


def _restrict(c: Comparison, cover: torch.Tensor) -> Comparison:
    """c over the covered elements only (the others are judged nowhere: their tasks did not run)."""
    keep = cover.expand_as(c.diff)
    c.diff, c.bad = torch.where(keep, c.diff, 0.0), c.bad & keep
    if c.var is not None:
        c.var = torch.where(keep, c.var, 0.0)
        c.rms_ratio, c.n_eff = _rms(c.diff[keep], c.var[keep])
    return c


class _Harness:
    """The compiled one-layer kernel, its buffers, and one task's runs."""

    def __init__(self, pk, layer: Layer, seed: int):
        self.pk, self.layer, self.seed = pk, layer, seed
        self.salt = seed * 1000003 + test_seed()       # the run of poisons.poison / red_fill
        self.races = TsanReports.open() if pk.device.type == "cpu" else None    # under MPK_SANITIZE=thread
        self.threads = pk.worker_threads
        self.table: list[DTensor] = pk._table()
        self.fences = pk._fences        # test mode's guarded copies (None on a GPU: red zones only)
        if self.fences is not None:     # the tasks read the meta tensors' copies: the values as given now
            for mid, _, m in self.fences.meta:
                self.fences.guarded[mid].tensor.copy_(m)
        guarded = self.fences.guarded if self.fences is not None and pk.device.type == "cpu" else {}
        self.buffers = [SpanBuffer(t.data, guarded.get(t.id)) for t in self.table]
        self.pointers = [b.pointer for b in self.buffers]
        self.runtime = pk._runtime
        self.live: dict[int, dict] = {}      # task id -> Layer.live's masks
        self._footprint: tuple[int, list] = (-1, [])     # footprint(): the last task's

    # ---- images

    def image(self, task: Task, k: int) -> list[_Image]:
        """Run `task` from poison k: everything poison but its input tiles."""
        images = []
        for t, b, (reads, writable) in zip(self.table, self.buffers, self.footprint(task)):
            slots = torch.full((b.span,), self.poison(t, k), dtype=_INT[b.itemsize], device=b.slots.device)
            # as integers: a bit copy, and torch indexes every integer type (not uint32 and others)
            view, data = slots.as_strided(b.shape, b.strides, b.lead), t.data.view(_INT[b.itemsize])
            for part in reads:
                view[part] = data[part]
            images.append(_Image(slots, poisons.red_fill(t.id, self.salt, k), writable))
        return images

    def poison(self, t: DTensor, k: int) -> int:
        """Tensor t's poison k in this run (poisons.poison: an integer of its width)."""
        return poisons.poison(t.data.dtype, t.id, self.salt, k)

    def footprint(self, task: Task) -> list[tuple[list, torch.Tensor | None]]:
        """Per tensor of the table: the parts of it the task reads (self.part of each input tile) and the
        mask of the span's slots it may write (None: none), computed once per task (both poisons' images
        and the re-runs share them)."""
        if self._footprint[0] != task.id:
            per_tensor = []
            for t, b in zip(self.table, self.buffers):
                reads = [self.part(task, tile) for tile in task.inputs if tile.tensor is t]
                writes = [tile for tile in task.outputs if self.writes(tile) and tile.tensor is t]
                writable = None
                if writes:
                    writable = torch.zeros(b.span, dtype=torch.bool, device=b.slots.device)
                    for tile in writes:
                        writable[b.offsets[self.part(task, tile)].flatten()] = True
                per_tensor.append((reads, writable))
            self._footprint = (task.id, per_tensor)
        return self._footprint[1]

    def part(self, task: Task, tile):
        """What of `tile` the task touches: its box, or (Layer.live) a mask of the live elements in it,
        from the meta tensors as given (a kernel-level run has no meta pass)."""
        if self.layer.live is None:
            return _slices(tile.box)
        if task.id not in self.live:
            self.live[task.id] = self.layer.live(self.pk.meta_tensors, task.coord)
        mask = self.live[task.id].get(tile.role)
        if mask is None:
            return _slices(tile.box)
        inside = torch.zeros(tile.tensor.dims, dtype=torch.bool, device="cpu")
        inside[_slices(tile.box)] = True
        return (inside & mask.cpu()).to(tile.tensor.data.device)

    def writes(self, tile) -> bool:
        """Whether the task writes all of `tile`: a declared output tile, or its tile of the staging
        buffer of a cross-rank layer (allreduce: the layer does not declare it written, as peers write
        it in their own time; in a kernel-level run this rank is the only one, and its task the tile's
        only writer, so the tile must be written whole and nothing outside it)."""
        return tile.declared or (tile.role == self.layer.signal_role and self.pk.world_size == 1)

    def run(self, task: Task, images: list[_Image], seed: int, watch: tuple[int, int] | None = None,
            smem: int = SMEM_FILL[0]) -> int:
        for b, im in zip(self.buffers, images):
            b.slots.copy_(im.slots)
            for zone in b.red_zones():
                zone.fill_(im.red)
        if self.races is not None:
            self.races.arm()
        try:
            thread = self.runtime.run_task(task.id, seed, self.pointers, watch, smem)
        except MPKRuntimeError as e:    # an access outside a tensor before the failure is named first
            self.check_guard_pages(task, then=str(e).splitlines()[0])
            raise
        self.check_guard_pages(task)
        for report in self.races.new() if self.races is not None else ():
            found = named_race(report, self.locate)
            if found:
                raise MPKFootprintError(f"{self.where(task)} {found}")
        return thread

    def locate(self, address: int) -> str:
        """The element of the run's tensors at this address (_describe), or "" (not in a span)."""
        for t, b in zip(self.table, self.buffers):
            lo = b.slots.data_ptr()
            if lo <= address < lo + b.span * b.itemsize:
                return _describe(t, b, torch.tensor([(address - lo) // b.itemsize], device=b.slots.device))
        return ""

    def check_guard_pages(self, task: Task, then: str = "") -> None:
        """An access the guard-page handler recorded (csrc/runtime/guard.h: far past a red zone) is an
        MPKFootprintError naming the tensor and the byte; the pages are closed again first. then: the
        task's failure that followed the access, if it failed."""
        f = self.fences
        if f is None or not int(f.count[0]):
            return
        records = f.faults[:min(int(f.count[0]), len(f.faults))].tolist()
        f.count[0] = 0
        for g in f.guarded.values():
            g.protect()
        addr, tid, access = records[0][:3]
        g, src = f.guarded[tid], f.source(tid)
        lo = addr - g.base
        side = f"{lo - g.nbytes} bytes past its end" if lo >= g.nbytes else f"{-lo} bytes before its start"
        raise MPKFootprintError(
            f"{self.where(task)} {abi.ACCESS[access]} outside {f.name(tid)} ({str(src.dtype)[6:]}, "
            f"{tuple(src.shape)}, {g.nbytes} bytes): byte {lo} relative to its first element, {side} (a "
            f"guard page trapped it; {len(records)} access(es) recorded){'; then ' + then if then else ''}")

    def task_seed(self, task: Task, k: int) -> int:
        return (self.seed * 0x9E3779B97F4A7C15 + task.id * 0x632BE59BD9B4E019 + k) % 2**64

    # ---- checks

    def where(self, task: Task) -> str:
        return f"task {task.coord} of layer '{self.layer.name}' ({self.layer.kind})"

    def check_writes(self, task: Task, images: list[_Image], what: str) -> None:
        """Every byte outside the task's declared output tiles holds what the run started from."""
        for t, b, im in zip(self.table, self.buffers, images):
            if im.writable is None and torch.equal(b.slots, im.slots):
                changed = None               # the common case, one comparison: a tensor it may not write
            else:
                changed = b.slots != im.slots
                if im.writable is not None:
                    changed &= ~im.writable
            if changed is not None and changed.any():
                raise MPKFootprintError(f"{self.where(task)} writes outside its declared output tiles "
                                        f"({what}): {_describe(t, b, changed.nonzero().flatten())}")
            for side, zone in zip(("before its start", "past its end"), b.red_zones()):
                hit = (zone != im.red).nonzero().flatten()
                if hit.numel():
                    lo, hi = int(hit[0]), int(hit[-1]) + 1
                    lead, span_bytes = b.lead * b.itemsize, (b.span - b.lead) * b.itemsize
                    rel = (lo - b.red - lead, hi - b.red - lead) if side.startswith("before") else \
                        (span_bytes + lo, span_bytes + hi)
                    raise MPKFootprintError(
                        f"{self.where(task)} writes outside tensor '{t.name}' ({t.dtype.name}, {b.shape}, "
                        f"{span_bytes} bytes): bytes [{rel[0]}, {rel[1]}) relative to its first element, "
                        f"{side} ({what})")

    def outputs(self, images: list[_Image]) -> list[torch.Tensor]:
        """The slots after a run that check_writes passed: a copy of each tensor the task writes; the
        others still hold exactly their image (no need to copy a weight per task)."""
        return [b.slots.clone() if im.writable is not None and im.writable.any() else im.slots
                for b, im in zip(self.buffers, images)]

    def who_wrote(self, task: Task, name: str, idx: tuple[int, ...]) -> str:
        """Re-run `task` (first poison, first seed) watching element `idx` of output `name`."""
        if self.pk.device.type != "cpu":
            return f"Task {task.coord} wrote element {idx} (the writing thread: CPU emulation only)"
        i = next(i for i, t in enumerate(self.table) if t.name == name)
        b = self.buffers[i]
        address = b.pointer + int(b.offsets[idx]) * b.itemsize
        thread = self.run(task, self.image(task, 0), self.task_seed(task, 0), watch=(address, b.itemsize))
        if thread < 0:
            return f"Task {task.coord}: no thread wrote element {idx} (a re-run watched it)"
        return (f"Task {task.coord}: element {idx} was last written by thread {thread} (warp {thread // 32}, "
                f"lane {thread % 32}) in a re-run that watched it")

    def find_read(self, task: Task, images: tuple[list[_Image], list[_Image]],
                  reference: list[torch.Tensor], reference2: list[torch.Tensor]) -> str:
        """What the result depends on that the task should not read, as the message's tail: shared memory
        no thread wrote (the second run's other shared-memory fill alone changes it), else the element
        outside the input tiles found by bisecting the slots whose two poisons differ, else a tensor's red
        zones. The bisection first switches subsets of the second (finite) poison's image to the first
        (NaN) poison, against the second run's outputs: a NaN read anywhere in the subset shows, which
        the other direction misses when the rest of the image's NaNs reach the output anyway; then, for a
        kernel whose arithmetic drops NaNs (fmaxf), the other direction against the first run's."""
        first, second = images
        candidates = [(i, (a.slots != c.slots).nonzero().flatten())
                      for i, (a, c) in enumerate(zip(first, second))]

        def differs(choice: list[tuple[int, torch.Tensor]], red: int = -1, smem: int = SMEM_FILL[0],
                    base: int = 0) -> bool:
            start, other = (first, second) if base == 0 else (second, first)
            mixed = [_Image(im.slots.clone(), other[i].red if i == red else im.red, im.writable)
                     for i, im in enumerate(start)]
            for i, slots in choice:
                mixed[i].slots[slots] = other[i].slots[slots]
            self.run(task, mixed, self.task_seed(task, 0), smem=SMEM_FILL[1] if base else smem)
            return any(not torch.equal(b.slots[w], r[w]) for b, r, w in
                       zip(self.buffers, reference2 if base else reference, (im.writable for im in first))
                       if w is not None)
        if self.pk.device.type == "cpu" and differs([], smem=SMEM_FILL[1]):
            return (f"reads shared memory no thread wrote: its output changes with the byte a fresh block's "
                    f"shared memory holds (0x{SMEM_FILL[0]:02X} or 0x{SMEM_FILL[1]:02X}): a read before a "
                    f"barrier, or of a slot no thread wrote this task")
        outside = ("reads outside its declared input tiles: its output changes with the poison around them; "
                   "it depends on ")
        for base in (1, 0):
            for i, slots in candidates:
                if not slots.numel() or not differs([(i, slots)], base=base):
                    continue
                for _ in range(64):          # halve until one slot is left (log2 of the span's slots)
                    if slots.numel() == 1:
                        break
                    half = slots[: slots.numel() // 2]
                    slots = half if differs([(i, half)], base=base) else slots[slots.numel() // 2:]
                if slots.numel() == 1 and not differs([(i, slots)], base=base):
                    continue                 # no single culprit this way (reads that matter only together)
                t, b = self.table[i], self.buffers[i]
                return outside + _describe(t, b, slots[:1]) + (" (one of the elements read)"
                                                               if slots.numel() == 1 else "")
        for i, t in enumerate(self.table):
            if differs([], red=i):
                b = self.buffers[i]
                return (f"{outside}memory just outside tensor '{t.name}' ({t.dtype.name}, {b.shape}): before "
                        f"its first or past its last element (its red zones, {b.red} bytes each side)")
        return outside + "several regions together (no one tensor's region changes the result alone)"


def _describe(t: DTensor, b: SpanBuffer, slots: torch.Tensor) -> str:
    """Slots (element offsets in the span) as element ranges of tensor t: "tensor 'out' (...):
    elements (4, 0)..(4, 383) (384 elements)", or storage padding a strided view skips."""
    index = b.index_of[slots]
    pad = slots[index < 0]
    shown, runs = [], []
    elems = index[index >= 0].tolist()
    for e in elems:
        if runs and e == runs[-1][1] + 1:
            runs[-1][1] = e
        else:
            runs.append([e, e])
    for lo, hi in runs[:MAX_SHOWN]:
        a, z = _fmt_index(lo, b.shape), _fmt_index(hi, b.shape)
        shown.append(f"{a}" if lo == hi else f"{a}..{z} ({hi - lo + 1} elements)")
    if len(runs) > MAX_SHOWN:
        shown.append(f"and {len(runs) - MAX_SHOWN} more range(s)")
    if pad.numel():
        shown.append(f"{pad.numel()} slot(s) of storage padding the view skips (first at element offset "
                     f"{int(pad[0]) - b.lead} from its first element)")
    return f"tensor '{t.name}' ({t.dtype.name}, shape {b.shape}, strides {b.strides}): {'; '.join(shown)}"


def _attach(pk, name: str, t: torch.Tensor) -> DTensor:
    """attach_input, also for a strided view (a kernel-level test exercises the strides a kernel
    accepts; test mode itself takes contiguous tensors, as MPK does)."""
    if t.is_contiguous():
        return pk.attach_input(t, name=name)
    pk._claim_device(t.device, f"tensor '{name}'")
    return pk._add(DTensor(check_name(name, pk.tensors), tuple(t.shape), tuple(t.stride()), to_dtype(t.dtype),
                           ATTACHED, data=t))


def run_tasks(layer_call: Callable, tensors: dict[str, torch.Tensor], coords=None, *, target_cc: int = 0,
              seed: int = 0, params: dict | None = None) -> KernelRun:
    """Build one layer (layer_call(pk, {name: DTensor})), compile it (the test-mode build and cache) and
    run its tasks alone with the footprint checks (module doc). coords: None (every task), "edges"
    (the first and last), or a list of grid coordinates. target_cc 0/80: a 128-thread worker block;
    90/100: 256 threads. params: more PersistentKernel parameters, e.g. meta_tensors (with the
    max_seq_length they need) for a layer that reads them: the tasks see them as given (no meta pass).
    Returns the KernelRun; the given output tensors receive what the tasks wrote."""
    from ..persistent_kernel import PersistentKernel

    cuda = any(t.device.type == "cuda" for t in tensors.values())
    pk = PersistentKernel(test_mode=True, num_workers=1, num_local_schedulers=1,
                          target_cc=None if cuda else target_cc, **(params or {}))
    try:
        dts = {name: _attach(pk, name, t) for name, t in tensors.items()}
        layer_call(pk, dts)
        if len(pk.layers) != 1:
            raise ValueError(f"run_tasks: layer_call declared {len(pk.layers)} layers; a kernel-level run "
                             f"takes exactly one")
        layer = pk.layers[0]
        pk.compile()
        check_batch(pk.params, pk.meta_tensors)    # the layout as given: the tasks index with it
        tasks = _select(pk.graph.layer_tasks(layer), coords, layer)
        for t in pk._table():
            if t.kind == SHUFFLED:
                shuffle_into(t)
        h = _Harness(pk, layer, seed)
        keep = {h.table.index(a.tensor) for a in layer.outputs if a.written}
        results = {}
        for task in tasks:
            got = _run_one(h, task)
            results[task.id] = {i: got[i] for i in keep}      # only the outputs: weights can be large
        run = _collect(h, layer, tasks, results, dts)
        say(f"FOOTPRINT {layer.name}[{layer.kind},{len(tasks)}/{layer.num_tasks} task(s),{h.threads} "
            f"threads] writes only its output tiles, reads only its input tiles (2 poisons), thread-order "
            f"independent (2 seeds), every declared element written PASS")
        return run                # pk stays open for KernelRun.check's re-runs; freed when collected
    except MPKFootprintError as e:
        kept = keep_failure(pk, f"{pk.layers[0].name}[kernel]").strip() if pk.layers else ""
        pk.finalize()
        raise MPKFootprintError(f"{e}\n{kept}" if kept else str(e)) from None
    except BaseException:
        pk.finalize()
        raise


def _select(tasks: list[Task], coords, layer: Layer) -> list[Task]:
    if coords is None:
        return tasks
    if coords == "edges":
        return [tasks[0]] if len(tasks) == 1 else [tasks[0], tasks[-1]]
    by = {t.coord: t for t in tasks}
    chosen = []
    for c in coords:
        key = tuple(c) + (0,) * (3 - len(tuple(c)))
        if key not in by:
            raise ValueError(f"run_tasks: layer '{layer.name}' has no task at grid coordinate {tuple(c)} "
                             f"(grid {layer.grid})")
        chosen.append(by[key])
    return chosen


def _run_one(h: _Harness, task: Task) -> list[torch.Tensor]:
    """The three runs of one task (two poisons, two thread orders) and their checks; its outputs."""
    first, second = h.image(task, 0), h.image(task, 1)
    h.run(task, first, h.task_seed(task, 0))
    h.check_writes(task, first, "first poison")
    got = h.outputs(first)
    h.run(task, second, h.task_seed(task, 0), smem=SMEM_FILL[1])
    h.check_writes(task, second, "second poison")
    # (a tensor the task may not write: check_writes found it unchanged, so nothing of it to compare)
    outs = [i for i, im in enumerate(first) if im.writable is not None]
    for t, b, im, im2, g in ((h.table[i], h.buffers[i], first[i], second[i], got[i]) for i in outs):
        # (an element both images start with alike is an input read-modify-written in place: not poison)
        still = (g == im.slots) & (b.slots == im2.slots) & im.writable & (im.slots != im2.slots)
        if still.any():
            raise MPKFootprintError(f"{h.where(task)} leaves part of its declared output tile unwritten "
                                    f"(still poison after runs with two poisons): "
                                    f"{_describe(t, b, still.nonzero().flatten())}")
    if any(not torch.equal(h.buffers[i].slots[first[i].writable], got[i][first[i].writable]) for i in outs):
        found = h.find_read(task, (first, second), got, h.outputs(second))
        raise MPKFootprintError(f"{h.where(task)} {found}")
    h.run(task, first, h.task_seed(task, 1))
    for t, b, im, g in ((h.table[i], h.buffers[i], first[i], got[i]) for i in outs):
        differs = (b.slots != g) & im.writable
        if differs.any():
            raise MPKFootprintError(f"{h.where(task)} gives different results with another order of its "
                                    f"threads (seeds {h.task_seed(task, 0)} and {h.task_seed(task, 1)}): "
                                    f"a race inside the block (a missing __syncthreads or __syncwarp?): "
                                    f"{_describe(t, b, differs.nonzero().flatten())}")
    return got


def _collect(h: _Harness, layer: Layer, tasks: list[Task], results: dict, dts: dict) -> KernelRun:
    """Each declared output as the tasks wrote it (elements of tasks that did not run: poison), copied
    into the given tensors too."""
    outputs, covered = {}, {}
    for acc in layer.outputs:
        if not acc.written:
            continue
        t = acc.tensor
        i = h.table.index(t)
        b = h.buffers[i]
        out = torch.empty(b.shape, dtype=t.data.dtype, device=t.data.device)
        bits = out.view(_INT[b.itemsize])            # (integer views: bit copies any dtype can take)
        bits.fill_(h.poison(t, 0))
        cover = torch.zeros(b.shape, dtype=torch.bool, device=t.data.device)
        for task in tasks:
            got = results[task.id][i].as_strided(b.shape, b.strides, b.lead)
            for tile in task.outputs:
                if tile.declared and tile.tensor is t:
                    part = h.part(task, tile)
                    bits[part] = got[part]
                    cover[part] = True
        if t.kind == ATTACHED:
            dts[t.name].data.view(_INT[b.itemsize])[cover] = bits[cover]
        outputs[t.name], covered[t.name] = out, cover
    return KernelRun(layer, tasks, outputs, covered, h)


# ---- what the layers' kernel-level tests share (tests/runtime_python/<stem>/test_<stem>.py)

def worker_block_dim(target_cc: int) -> tuple[int, int, int]:
    """block_dim of a task on the worker block of target_cc: 256 threads from Hopper (90) on, else 128."""
    return (256 if target_cc >= 90 else 128, 1, 1)


def strided_view(shape, layout, dtype, gen: torch.Generator, scale: float = 1.0, zeros: bool = False):
    """A [rows, cols] view with strides `layout` ((row, column) stride; None: contiguous) of random (or
    zero) storage; the storage between its elements is random too (run_tasks poisons it anyway)."""
    from .inputs import randn

    rows, cols = shape
    rs, cs = layout or (cols, 1)
    if rs < cols * cs:
        raise ValueError(f"strided_view: layout {layout} overlaps the rows of {shape}")
    n = (rows - 1) * rs + (cols - 1) * cs + 1
    # (a test's input: on the test's device, torch's default, as randn's)
    base = torch.zeros(n, dtype=dtype, device=torch.get_default_device()) if zeros else \
        randn((n,), dtype, gen, scale=scale)
    return base.as_strided(shape, (rs, cs))


def same_bits(run: KernelRun, other: KernelRun, name: str, what: str) -> None:
    """Output `name` of two runs is bit-identical on the elements the first one's tasks wrote."""
    cover = run.covered[name]
    a, b = run.outputs[name][cover], other.outputs[name][cover]
    differ = int((a.view(_INT[a.element_size()]) != b.view(_INT[b.element_size()])).sum())
    assert differ == 0, f"{run.layer.name}: {differ} of {a.numel()} outputs' bits differ from {what}"


def case_params(rows: list[tuple], quick: tuple | None = None) -> list:
    """pytest params of `rows` (ids from their values; the last is target_cc), the row `quick` marked
    `quick`: one case per layer in the quick subset (pytest -m quick, and the sanitizer runs)."""
    import pytest

    def show(v) -> str:
        if isinstance(v, torch.dtype):
            return str(v)[6:]
        return "x".join(map(str, v)) if isinstance(v, tuple) else str(v)
    return [pytest.param(*r, id="-".join(show(v) for v in r[:-1]) + f"-cc{r[-1]}",
                         marks=[pytest.mark.quick] if r == quick else []) for r in rows]



@contextlib.contextmanager
def mutated_kernel(tmp_path, kernel: str, old: str, new: str, count: int = 1):
    """Negative controls: build against a copy of the kernel sources (MPK_CSRC_DIR) in which
    csrc/tasks/`kernel` has each of the `count` occurrences of `old` replaced by `new`."""
    copy = os.path.join(str(tmp_path), "csrc")
    shutil.copytree(build.csrc_dir(), copy)
    path = os.path.join(copy, "tasks", kernel)
    text = open(path).read()
    assert text.count(old) == count, (f"{kernel}: the text this control mutates occurs {text.count(old)} "
                                      f"times, expected {count} (was the kernel rewritten? update the "
                                      f"control): {old!r}")
    open(path, "w").write(text.replace(old, new))
    before = os.environ.get("MPK_CSRC_DIR")
    os.environ["MPK_CSRC_DIR"] = copy
    try:
        yield
    finally:
        os.environ.pop("MPK_CSRC_DIR")
        os.environ.update({} if before is None else {"MPK_CSRC_DIR": before})
