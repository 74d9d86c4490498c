"""Layers -> tasks -> events (docs/dependencies.md), and the verifier that checks what will run.

Dependencies are exact at tile level: a task depends on the earlier tasks whose writes
overlap what it reads (read-after-write), and a writing task also on the earlier readers
and writers of what it overwrites (write-after-read, write-after-write). Walking a tensor's
history backwards stops at the first layer whose writes cover the whole tile: anything
older is ordered before that layer already. Tasks of one layer with the same dependency set
share an event, and tasks are numbered so that each event's waiters are one id range, MPK's
[first_task_id, last_task_id); no DAG shape is rejected.
"""
from __future__ import annotations

import contextlib
import gc
import logging
from collections import Counter
from dataclasses import dataclass, field
from itertools import chain, product

from .boxes import Box, BoxIndex, intersect, uncovered, volume
from .errors import GraphError
from .layers import ACCUMULATE, BY_REQUEST, NOT_SPLIT, Access, Layer
from .tensor import FUSED, DTensor, map_fused_rows

log = logging.getLogger("mirage.mpk")

MAX_TRIGGERS = 8          # == MPK_MAX_TRIGGERS in csrc/runtime/abi.h
TERMINATION_EVENT = 0


@dataclass(slots=True)
class Tile:
    """What one task touches of one tensor: a box of a base (storage-owning) tensor."""
    role: str
    tensor: DTensor           # base tensor: attached, new, shuffled or meta (never fused)
    box: Box
    written: bool = False     # an output tile
    declared: bool = False    # in the layer's declared written region (poison / unwritten checks)

    @property
    def dims(self) -> tuple[int, ...]:
        return tuple(h - l for l, h in zip(*self.box))


@dataclass(slots=True)
class Task:
    id: int
    layer: Layer
    coord: tuple[int, int, int]
    inputs: list[Tile]
    outputs: list[Tile]
    deps: set[int] = field(default_factory=set)
    event: int = -1                                  # event waited on, -1 = none
    triggers: list[int] = field(default_factory=list)
    signal: tuple[int, int, int] | None = None       # cross-rank (slot, use, uses per pass)

    @property
    def label(self) -> str:
        return f"{self.layer.name}{self.coord}"

    @property
    def iparams(self) -> tuple[int, ...]:
        """The task's integer parameters: (slot, use, uses per pass) of a signal, the layer's own per task
        (Layer.task_iparams), else the layer's."""
        if self.signal is not None:
            return self.signal
        return self.layer.task_iparams(self.coord) if self.layer.task_iparams else self.layer.iparams


@dataclass(slots=True)
class Event:
    id: int
    kind: str                     # "termination" | "launch" | "end_of_task_graph"
    num_triggers: int
    waiters: list[int]            # ascending; consecutive ids (the verifier checks it)

    # MPK's half-open range of the tasks an event launches when it fires. An event nobody waits
    # on (TERMINATION, END_OF_TASK_GRAPH) has the empty range [0, 0), as MPK writes them.
    @property
    def first_task_id(self) -> int:
        return self.waiters[0] if self.waiters else 0

    @property
    def last_task_id(self) -> int:
        return self.waiters[-1] + 1 if self.waiters else 0


@dataclass
class Graph:
    layers: list[Layer]
    tasks: list[Task | None]      # tasks[0] is TERMINATE (None)
    events: list[Event]
    coarsened: list[str] = field(default_factory=list)
    num_signal_slots: int = 0
    task_table: object = field(default=None, repr=False, compare=False)   # tasktable.of, built once

    @property
    def end_event(self) -> int:
        return len(self.events) - 1

    def layer_tasks(self, layer: Layer) -> list[Task]:
        return [t for t in self.tasks[1:] if t.layer is layer]

    def triggers_of(self, event: int) -> list[int]:
        return [t.id for t in self.tasks[1:] if event in t.triggers]


# ---- tiles ---------------------------------------------------------------------------------

def tiler(access: Access, grid: tuple[int, int, int], written: bool, boxes: dict):
    """coord -> Tile for one access of a layer: the one place a grid coordinate becomes a tile
    (fused views resolve to their source). The split sizes are worked out once per access, not
    per task (benchmarks/compile_scaling.py)."""
    t = access.tensor
    splits = [(d, a, t.dims[d] // grid[a]) for a, d in enumerate(access.pmap)
              if d != NOT_SPLIT and grid[a] > 1]
    role, declared, fused, zeros, dims = access.role, written and access.written, t.kind == FUSED, \
        [0] * len(t.dims), list(t.dims)

    def tile(coord: tuple[int, int, int]) -> Tile:
        lo, hi, base = zeros.copy(), dims.copy(), t
        for d, a, size in splits:
            lo[d] = coord[a] * size
            hi[d] = lo[d] + size
        if fused:
            base, first = map_fused_rows(t, lo[0], hi[0])
            hi[0], lo[0] = first + hi[0] - lo[0], first
        # one object per distinct box in a build (`boxes`): layers tiled alike share them, and the
        # cyclic GC has ~3 tuples per tile fewer to walk once compile() ends (compile_scaling.py)
        return Tile(role, base, boxes.setdefault(box := (tuple(lo), tuple(hi)), box), written, declared)
    return tile


def grid_coords(grid: tuple[int, int, int]):
    """x fastest, as CUDA linearizes blockIdx."""
    for z, y, x in product(range(grid[2]), range(grid[1]), range(grid[0])):
        yield (x, y, z)


# ---- build ---------------------------------------------------------------------------------

@dataclass
class _Entry:
    layer: int
    write: bool
    covering: bool            # a real write (dummy outputs order but do not overwrite)
    index: BoxIndex


@contextlib.contextmanager
def gc_paused():
    """A 100k-task graph allocates ~10^6 acyclic objects; cyclic GC passes over them would double
    the time of each stage of compile(), which runs under one pause (benchmarks/compile_scaling.py)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def build(layers: list[Layer]) -> Graph:
    with gc_paused():
        return _build(layers)


def _build(layers: list[Layer]) -> Graph:
    if not layers:
        raise GraphError("the kernel has no layers: add at least one *_layer before compile()")
    tasks: list[Task | None] = [None]
    history: dict[int, list[_Entry]] = {}      # base tensor id -> accesses, in program order
    writes: dict[int, list[_Entry]] = {}       # the writes among them: all that a read depends on
    boxes: dict = {}
    for li, layer in enumerate(layers):
        mine = []
        in_tiles = [tiler(a, layer.grid, False, boxes) for a in layer.inputs]
        out_tiles = [tiler(a, layer.grid, True, boxes) for a in layer.outputs]
        for coord in grid_coords(layer.grid):
            task = Task(-1, layer, coord, [f(coord) for f in in_tiles], [f(coord) for f in out_tiles])
            for tile in task.inputs:
                if tile.tensor.id in writes:
                    task.deps |= _dependencies(writes[tile.tensor.id], tile)
            for tile in task.outputs:
                if tile.tensor.id in history:
                    task.deps |= _dependencies(history[tile.tensor.id], tile)
            mine.append(task)
        # Numbered once its dependencies are known (they point at earlier layers only), so the
        # history holds final ids; only a coarsened layer is renumbered later (_assign_events).
        mine = _layer_order(mine)
        for task in mine:
            task.id = len(tasks)
            tasks.append(task)
        _record(history, writes, li, layer, mine)
    graph = Graph(layers, tasks, [])
    _assign_events(graph)
    _assign_signals(graph)
    return graph


def covered_volume(hits: list[tuple[Box, int]]) -> int:
    """The volume the hits of one layer cover: its tiles are disjoint but for the identical tiles
    its tasks along a BY_REQUEST axis share, counted once."""
    return sum(volume(b) for b in {b for b, _ in hits})


def _dependencies(entries: list[_Entry], tile: Tile) -> set[int]:
    deps: set[int] = set()
    for e in reversed(entries):
        if not (e.write or tile.written):
            continue                      # read after read: no order needed
        hits = e.index.query(tile.box)
        deps.update(tid for _, tid in hits)
        if e.write and e.covering and ((len(hits) == 1 and hits[0][0] == tile.box) or   # one covers it
                                       covered_volume(hits) == volume(tile.box)):
            break                         # this layer overwrote the whole tile: older is ordered
    return deps


def _record(history: dict[int, list[_Entry]], writes: dict[int, list[_Entry]], li: int, layer: Layer,
            tasks: list[Task]) -> None:
    groups: dict[tuple[int, bool, bool], list[tuple[Box, int]]] = {}
    for task in tasks:
        for tile in task.inputs + task.outputs:
            covering = tile.written and tile.declared
            groups.setdefault((tile.tensor.id, tile.written, covering), []).append((tile.box, task.id))
    # Output tiles of one layer are disjoint by construction: check_splits makes every grid
    # axis > 1 split its own dim of every written output, evenly (outputs are never views).
    # ... except along a BY_REQUEST axis, whose tasks split the tile at run time (their reads and
    # writes of it are disjoint too: Layer.live, checked in test mode), or an ACCUMULATE one, whose
    # tasks each read-modify-write the whole tile atomically (their adds commute)
    indexes = {key: BoxIndex(items) for key, items in groups.items()}
    shared = {a.tensor.id for a in layer.outputs if a.shared in (BY_REQUEST, ACCUMULATE)}
    for (tid, write, covering), index in indexes.items():
        if not write and (tid, True, True) in indexes and tid not in shared:
            _check_no_cross_task_rw(layer, tasks, index, indexes[(tid, True, True)])
    # Reads are recorded before writes: within a task, reads happen first.
    for (tid, write, covering), index in sorted(indexes.items(), key=lambda kv: kv[0][1]):
        entry = _Entry(li, write, covering, index)
        history.setdefault(tid, []).append(entry)
        if write:
            writes.setdefault(tid, []).append(entry)


def _check_no_cross_task_rw(layer: Layer, tasks: list[Task], reads: BoxIndex, writes: BoxIndex) -> None:
    for box, tid in reads.items:
        others = [o for _, o in writes.query(box) if o != tid]
        if others:
            raise GraphError(f"layer '{layer.name}': task {_label(tasks, tid)} reads elements that task "
                             f"{_label(tasks, others[0])} of the same layer writes (a race); split the "
                             f"layer in two or use another output tensor")


def _label(tasks: list[Task], tid: int) -> str:
    first = tasks[0].id
    return str(tasks[tid - first].coord)


# ---- cross-rank signal slots ----------------------------------------------------------------

def _assign_signals(graph: Graph) -> None:
    """One slot per distinct tile of a symmetric buffer (csrc/tasks/allreduce.cuh); tasks of
    layers that share the tile use its slot in program order, which the local dependencies on
    the buffer (a write) enforce on every rank alike."""
    slots: dict[tuple[int, Box], list[Task]] = {}
    for t in graph.tasks[1:]:
        if t.layer.signal_role is None:
            continue
        tile = next(x for x in t.inputs + t.outputs if x.role == t.layer.signal_role)
        key = (tile.tensor.id, tile.box)
        if key not in slots:
            for (tid, box), users in slots.items():
                if tid == tile.tensor.id and intersect(box, tile.box):
                    raise GraphError(
                        f"layer '{t.layer.name}' task {t.coord} uses '{tile.tensor.name}' elements "
                        f"{tile.box[0]}..{tile.box[1]}, which overlap but differ from the tile "
                        f"{box[0]}..{box[1]} of layer '{users[0].layer.name}': layers sharing a "
                        f"symmetric buffer must split it the same way (same grid), or use their own")
        slots.setdefault(key, []).append(t)
    for slot, users in enumerate(slots.values()):
        for use, t in enumerate(users):
            t.signal = (slot, use, len(users))
    graph.num_signal_slots = len(slots)


# ---- events --------------------------------------------------------------------------------

def _layer_order(tasks: list[Task]) -> list[Task]:
    """The numbering rule, for one layer's tasks given in grid order (x fastest): first the
    tasks that wait on nothing, then one run per dependency set in order of first appearance,
    each run in grid order. A run is one event's waiters (_assign_events).

    Why: an event launches a contiguous id range (MPK's [first_task_id, last_task_id)), so its
    waiters must be consecutive; events are per layer because layers are contiguous and two
    layers' waiters of one set are in general not adjacent. Tasks that wait on nothing go
    first: they can start at once, and a scheduler walking the layer in id order reaches them
    before tasks that still wait."""
    free: list[Task] = []
    runs: dict[frozenset, list[Task]] = {}        # insertion order = first appearance
    for t in tasks:
        if t.deps:
            runs.setdefault(frozenset(t.deps), []).append(t)
        else:
            free.append(t)
    if len(runs) <= 1 and (not free or not runs):
        return tasks                              # already in that order: the common case
    for run in runs.values():
        free += run
    return free


def _assign_events(graph: Graph) -> None:
    """One launch event per dependency set of a layer, coarsened over the trigger cap; the tasks
    are numbered so that each event's waiters are one run of ids (_layer_order)."""
    tasks = graph.tasks
    layer_index = {id(layer): li for li, layer in enumerate(graph.layers)}
    while True:
        consumers = Counter(chain.from_iterable(t.deps for t in tasks[1:]))    # >= each one's fan-out
        if max(consumers.values(), default=0) <= MAX_TRIGGERS:
            break
        fan_out: dict[int, set[tuple[int, frozenset]]] = {}
        for t in tasks[1:]:
            if t.deps:
                key = (layer_index[id(t.layer)], frozenset(t.deps))
                for p in t.deps:
                    fan_out.setdefault(p, set()).add(key)
        if max(map(len, fan_out.values()), default=0) <= MAX_TRIGGERS:
            break
        worst = max(fan_out, key=lambda p: len(fan_out[p]))
        _coarsen(graph, worst, fan_out[worst])
    if graph.coarsened:
        _renumber_coarsened(graph)

    events = [Event(TERMINATION_EVENT, "termination", 0, [])]
    ev, prev = events[0], None
    for t in tasks[1:]:                           # equal sets of a layer are adjacent: one event
        if not t.deps:
            prev = None
            continue
        if prev is None or prev.layer is not t.layer or prev.deps != t.deps:
            ev = Event(len(events), "launch", len(t.deps), [])
            events.append(ev)
            for p in sorted(t.deps):
                tasks[p].triggers.append(ev.id)
        ev.waiters.append(t.id)
        t.event = ev.id
        prev = t
    leaves = [t for t in tasks[1:] if not t.triggers]
    end = Event(len(events), "end_of_task_graph", len(leaves), [])
    events.append(end)
    for t in leaves:
        t.triggers.append(end.id)
    graph.events = events


def _renumber_coarsened(graph: Graph) -> None:
    """A coarsened layer is one run (all its tasks wait on the barrier): back to grid order. Each
    layer keeps its block of ids, so only ids inside coarsened layers move."""
    tasks = graph.tasks
    new_id = list(range(len(tasks)))
    for name in graph.coarsened:
        block = [t for t in tasks[1:] if t.layer.name == name]          # in id order: its block
        for k, t in enumerate(sorted(block, key=lambda t: t.coord[::-1]), start=block[0].id):
            new_id[t.id] = k                                          # z, y, x: x fastest
    tasks[1:] = sorted(tasks[1:], key=lambda t: new_id[t.id])
    for t in tasks[1:]:
        t.id = new_id[t.id]
        t.deps = {new_id[p] for p in t.deps}


def _coarsen(graph: Graph, producer: int, keys: set[tuple[int, frozenset]]) -> None:
    """Give the consumer layer that adds most events to `producer` one barrier event."""
    by_layer: dict[int, set[frozenset]] = {}
    for li, deps in keys:
        by_layer.setdefault(li, set()).add(deps)
    # ties go to the earliest layer: deterministic, so every rank coarsens alike
    li = max(sorted(by_layer), key=lambda k: len(by_layer[k]))
    if len(by_layer[li]) == 1:
        p = graph.tasks[producer]
        names = ", ".join(f"'{graph.layers[k].name}'" for k in sorted(by_layer))
        raise GraphError(f"task {p.label} would trigger {len(keys)} events (cap {MAX_TRIGGERS}) even "
                         f"with one barrier per consumer layer: layers {names} each wait on it through "
                         f"their own event (events are per layer); split its consumers differently, e.g. "
                         f"let some layers read a copy of its output (an identity layer)")
    layer = graph.layers[li]
    members = [t for t in graph.tasks[1:] if t.layer is layer]
    union = set().union(*(t.deps for t in members))
    for t in members:
        t.deps = set(union)
    graph.coarsened.append(layer.name)
    log.info("layer '%s': %d dependency sets would make task %s trigger more than %d events; "
             "coarsened to one barrier event over %d tasks", layer.name, len(by_layer[li]),
             graph.tasks[producer].label, MAX_TRIGGERS, len(union))


# ---- verifier ------------------------------------------------------------------------------

def verify(graph: Graph) -> None:
    """Check the graph that will run (events and triggers, not the builder's deps)."""
    with gc_paused():
        _verify(graph)


def _verify(graph: Graph) -> None:
    tasks, events = graph.tasks[1:], graph.events
    n_events = len(events)
    if n_events < 2 or events[0].kind != "termination" or events[-1].kind != "end_of_task_graph":
        raise GraphError("events must start with TERMINATION and end with END_OF_TASK_GRAPH")
    triggered: dict[int, list[Task]] = {e: [] for e in range(n_events)}
    for i, t in enumerate(tasks, start=1):
        if t.id != i:
            raise GraphError(f"task {t.label} is at position {i} of the task list but has id {t.id}")
        if not -1 <= t.event < n_events or t.event in (TERMINATION_EVENT, n_events - 1):
            raise GraphError(f"task {t.label} waits on event {t.event}, which no task may wait on")
        if len(t.triggers) > MAX_TRIGGERS or len(set(t.triggers)) != len(t.triggers):
            raise GraphError(f"task {t.label} has triggers {t.triggers}: at most {MAX_TRIGGERS}, distinct")
        for e in t.triggers:
            if not 0 < e < n_events:
                raise GraphError(f"task {t.label} triggers event {e}, out of range 1..{n_events - 1}")
            triggered[e].append(t)
    for e in events[1:]:
        got = triggered[e.id]
        if len(got) != e.num_triggers:
            names = ", ".join(t.label for t in got[:6])
            raise GraphError(f"event {e.id} ({e.kind}) has num_triggers={e.num_triggers} but "
                             f"{len(got)} tasks trigger it: {names}")
    bare = next((t for t in tasks if not t.triggers), None)      # a leaf whose triggers lack END
    if bare is not None:
        raise GraphError(f"task {bare.label} triggers nothing: a leaf must trigger END_OF_TASK_GRAPH")
    waits_for = {e: {p.id for p in got} for e, got in triggered.items()}      # one set per event
    deps = {t.id: waits_for[t.event] if t.event > 0 else set() for t in tasks}
    late = next(((p, t) for t in tasks for p in deps[t.id] if p >= t.id), None)
    if late is not None:              # a cycle, named, or else ids out of topological order
        _check_acyclic(graph, deps)   # (in id order, no cycle is possible: no search otherwise)
        p, t = late
        raise GraphError(f"event {t.event}: trigger task {graph.tasks[p].label} (id {p}) does not "
                         f"come before waiter {t.label} (id {t.id}); ids must be topological")
    index = _AccessIndex(graph)
    _check_reads_covered(graph, deps, index)
    _check_overwrites_ordered(graph, deps, index)
    _check_event_ranges(graph)


def _ids(ids: list[int], limit: int = 8) -> str:
    more = f", ... ({len(ids)} tasks)" if len(ids) > limit else ""
    return ", ".join(map(str, ids[:limit])) + more if ids else "none"


def _check_event_ranges(graph: Graph) -> None:
    """The tasks waiting on each event are exactly its range [first_task_id, last_task_id), the
    tasks MPK's scheduler launches when the event fires, and `waiters` (which the range and the
    JSON come from) lists them."""
    waiting: dict[int, list[int]] = {}
    for t in graph.tasks[1:]:                   # in id order: each list ascends
        if t.event > 0:
            waiting.setdefault(t.event, []).append(t.id)
    for e in graph.events:
        ids = waiting.get(e.id, [])
        if ids and ids[-1] - ids[0] + 1 != len(ids):
            first, last, mine = ids[0], ids[-1] + 1, set(ids)
            other = graph.tasks[next(k for k in range(first, last) if k not in mine)]
            what = f"waits on event {other.event}" if other.event >= 0 else "waits on no event"
            raise GraphError(f"event {e.id}: waiters are tasks {_ids(ids)} but its range [{first}, {last}) "
                             f"also holds task {other.id} = '{other.layer.name}'{other.coord}, which {what}")
        if e.waiters != ids:
            raise GraphError(f"event {e.id} ({e.kind}) lists waiters {_ids(e.waiters)}, range "
                             f"[{e.first_task_id}, {e.last_task_id}), but the tasks waiting on it are "
                             f"{_ids(ids)}")


def _check_acyclic(graph: Graph, deps: dict[int, set[int]]) -> None:
    state: dict[int, int] = {}          # 1 = on the stack, 2 = done
    for root in deps:
        if state.get(root):
            continue
        stack, path = [(root, iter(deps[root]))], [root]
        state[root] = 1
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                state[node] = 2
                stack.pop()
                path.pop()
            elif state.get(nxt) == 1:
                cyc = path[path.index(nxt):] + [nxt]
                raise GraphError("cycle in the task graph: " +
                                 " -> ".join(graph.tasks[i].label for i in reversed(cyc)))
            elif not state.get(nxt):
                state[nxt] = 1
                stack.append((nxt, iter(deps.get(nxt, ()))))
                path.append(nxt)


class _AccessIndex:
    """The verifier's own view of who touches what: per (tensor, layer, write) a BoxIndex of
    the tiles (writes: declared regions only; dummy outputs order but hold no data)."""

    def __init__(self, graph: Graph):
        self.layer_of = {id(layer): i for i, layer in enumerate(graph.layers)}
        groups: dict[tuple[int, int, bool], list[tuple[Box, int]]] = {}
        for t in graph.tasks[1:]:
            li = self.layer_of[id(t.layer)]
            for tile in t.inputs:
                groups.setdefault((tile.tensor.id, li, False), []).append((tile.box, t.id))
            for tile in t.outputs:
                if tile.declared:
                    groups.setdefault((tile.tensor.id, li, True), []).append((tile.box, t.id))
        self.boxes = {key: BoxIndex(items) for key, items in groups.items()}
        self.layers: dict[int, list[int]] = {}      # tensor id -> layers touching it, descending
        self.writers: dict[int, list[int]] = {}     # tensor id -> layers writing it, descending
        for tid, li, write in sorted(self.boxes, reverse=True):
            for found in (self.layers, self.writers) if write else (self.layers,):
                if found.setdefault(tid, [])[-1:] != [li]:
                    found[tid].append(li)

    def query(self, tensor: int, layer: int, write: bool, box: Box) -> list[tuple[Box, int]]:
        index = self.boxes.get((tensor, layer, write))
        return index.query(box) if index else []


def _check_reads_covered(graph: Graph, deps: dict[int, set[int]], index: _AccessIndex) -> None:
    """Every element a task reads that an earlier layer wrote is written by a dependency."""
    for t in graph.tasks[1:]:
        me = index.layer_of[id(t.layer)]
        for tile in t.inputs:
            tid = tile.tensor.id
            hits = [h for li in index.writers.get(tid, ()) if li < me
                    for h in index.boxes[(tid, li, True)].query(tile.box)]
            missing = [b for b, p in hits if p not in deps[t.id]]
            if not missing:
                continue
            cover = [b for b, p in hits if p in deps[t.id]]
            cell = uncovered(missing, cover, tile.box)
            if cell is not None:
                writer = next(p for b, p in hits if p not in deps[t.id])
                raise GraphError(
                    f"task {t.label} reads '{tile.tensor.name}' elements {cell[0]}..{cell[1]} written by "
                    f"task {graph.tasks[writer].label}, but its event {t.event} does not wait for a "
                    f"writer of them (missing dependency)")


def _check_overwrites_ordered(graph: Graph, deps: dict[int, set[int]], index: _AccessIndex) -> None:
    """A task that overwrites elements waits for every earlier reader and writer of them, back to
    the last layer that wrote them all (write-after-read, write-after-write): that layer's own
    tasks were checked the same way, so the order holds by induction."""
    for t in graph.tasks[1:]:
        me = index.layer_of[id(t.layer)]
        for tile in t.outputs:
            if not tile.declared:
                continue
            tid = tile.tensor.id
            for li in (li for li in index.layers[tid] if li < me):
                written = index.query(tid, li, True, tile.box)
                for kind, hits in (("reads", index.query(tid, li, False, tile.box)), ("writes", written)):
                    late = next((p for _, p in hits if p not in deps[t.id]), None)
                    if late is not None:
                        raise GraphError(
                            f"task {t.label} overwrites '{tile.tensor.name}' elements that task "
                            f"{graph.tasks[late].label} {kind} earlier, but its event {t.event} does not "
                            f"wait for it (missing write-after-{'read' if kind == 'reads' else 'write'} "
                            f"dependency)")
                if covered_volume(written) == volume(tile.box):
                    break
