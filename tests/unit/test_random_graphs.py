"""Seeded random DAGs of the existing layers: graph.build + graph.verify, then brute-force properties.

Pure Python, nothing is compiled. Each seed gives a small DAG (tensors of a few rows and
columns) of rmsnorm, linear, linear_with_residual, elementwise_add, identity, silu_mul and
tensor_init layers with random grids (any divisor of the split dims, 3, 5, 6, 9 ... included),
random fan-in / fan-out, and buffer reuse: an output may be any existing tensor of the right
shape (a graph input, a weight, an intermediate, or the layer's own input: in place).

On the graph that will run (events and triggers, not the builder's private deps) it checks:
  - task ids: layers in program order, each a contiguous block; inside a layer the tasks that
    wait on nothing, then one run per event in order of first appearance, each in grid order
    (x fastest); each tile is the box the layer's docstring promises (computed here from the
    layer kind, not from the layer's pmaps);
  - each event's waiters are exactly the ids [first_task_id, last_task_id), of one layer (MPK's
    launch range; [0, 0) for END); tasks of a layer with equal dependency sets share one event;
  - every trigger of a task's event has a lower id; each event's num_triggers equals the
    tasks that list it; no task triggers more than 8 events; a task triggers END iff it
    triggers nothing else, and END counts them;
  - brute force over element indices (plain Python sets): for every pair of accesses of one
    element by tasks of different layers where at least one writes (a dummy output counts as
    a write: "dummy outputs order but do not overwrite"), the earlier task is a transitive
    ancestor of the later; for every element a task reads, its LAST earlier writer triggers
    the task's own event (what the verifier demands); and outside coarsened layers every
    direct dependency shares a conflicting element with its waiter (the deps are exact);
  - negative controls: dropping the last writer from one event, or swapping two tasks of
    different events so that an event's waiters are no longer one range, is caught both by the
    brute force and by graph.verify (so neither check is vacuous).

Run: pytest tests/unit/test_random_graphs.py -s     or     python tests/unit/test_random_graphs.py
The second file, tests/runtime_python/test_mode/test_random_dags.py, loads this one by path
for its generator (random_dag / declare) and runs such DAGs through test mode.
"""
from __future__ import annotations

import random
import sys
import time
from dataclasses import dataclass, field
from itertools import product

import pytest

import mirage
from mirage.mpk import graph as graph_mod
from mirage.mpk.errors import GraphError
from mirage.mpk.persistent_kernel import PersistentKernel

KINDS = ("rmsnorm", "linear", "linear_with_residual", "elementwise_add", "identity", "silu_mul",
         "tensor_init")
BLOCK = (128, 1, 1)
ROWS = (1, 2, 3, 4, 5, 6)
WIDTHS = (2, 3, 4, 5, 6, 8, 9, 10, 12)
NUM_DAGS = 300
RUNTIME_DAGS = 50       # random_dag(seed, all_kinds=True) for these seeds run in test mode too
MAX_TRIGGERS = 8


# ---- the generator -------------------------------------------------------------------------

@dataclass
class LayerSpec:
    kind: str
    args: dict[str, str]             # role -> tensor name, in the layer's keyword order
    grid: tuple[int, int, int]
    eps: float | None = None

    def __str__(self) -> str:
        args = ", ".join(f"{r}={t}" for r, t in self.args.items())
        eps = f", eps={self.eps:g}" if self.eps is not None else ""
        return f"{self.kind}({args}, grid={self.grid}{eps})"

    @property
    def reads(self) -> list[str]:
        written = ("input", "dummy_output") if self.kind == "tensor_init" else ("output",)
        return [t for r, t in self.args.items() if r not in written]

    @property
    def target(self) -> str:
        """The tensor this layer really writes."""
        return self.args["input"] if self.kind == "tensor_init" else self.args["output"]


@dataclass
class DagSpec:
    seed: int
    rows: int
    tensors: dict[str, tuple[int, ...]] = field(default_factory=dict)   # creation order
    given: set[str] = field(default_factory=set)    # graph inputs and weights (values supplied)
    layers: list[LayerSpec] = field(default_factory=list)

    def describe(self) -> str:
        shapes = ", ".join(f"{n}{list(d)}{'' if n in self.given else '*'}" for n, d in self.tensors.items())
        lines = [f"seed={self.seed} tensors ({'*'}: buffer): {shapes}"]
        lines += [f"  L{i} {spec}" for i, spec in enumerate(self.layers)]
        return "\n".join(lines)


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


class _Gen:
    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.dag = DagSpec(seed, self.rng.choice(ROWS))
        self.widths = self.rng.sample(WIDTHS, 3)
        self.defined: list[str] = []          # tensors holding a value, most recent last

    def new(self, prefix: str, dims: tuple[int, ...], given: bool) -> str:
        name = f"{prefix}{len(self.dag.tensors)}"
        self.dag.tensors[name] = dims
        if given:
            self.dag.given.add(name)
            self.defined.append(name)
        return name

    def pick(self, dims: tuple[int, ...], prefix: str = "x", p_new: float = 0.25) -> str:
        """A tensor with a value and shape `dims` (recent ones preferred), or a new graph input."""
        cands = [n for n in self.defined if self.dag.tensors[n] == dims]
        if not cands or self.rng.random() < p_new:
            return self.new(prefix, dims, True)
        weights = [2.0 ** i for i in range(len(cands))]       # fan-out of recent values
        return self.rng.choices(cands, weights)[0]

    def out(self, dims: tuple[int, ...], forbid: tuple[str, ...] = (), p_reuse: float = 0.4) -> str:
        """A new buffer, or (buffer reuse) any existing tensor of that shape, even one this layer reads."""
        cands = [n for n, d in self.dag.tensors.items() if d == dims and n not in forbid]
        if cands and self.rng.random() < p_reuse:
            return self.rng.choice(cands)
        return self.new("t", dims, False)

    def any_tensor(self) -> str:
        return self.rng.choice(list(self.dag.tensors))

    def row_input(self, even: bool = False) -> str:
        """A defined [B, *] activation (any width), or a new one."""
        b = self.dag.rows
        cands = [n for n in self.defined if len(self.dag.tensors[n]) == 2 and self.dag.tensors[n][0] == b
                 and (not even or self.dag.tensors[n][1] % 2 == 0)]
        if cands and self.rng.random() < 0.8:
            return self.rng.choices(cands, [2.0 ** i for i in range(len(cands))])[0]
        width = self.rng.choice([w for w in self.widths if not even or w % 2 == 0] or [2 * self.widths[0]])
        return self.new("x", (b, width), True)

    def layer(self, kind: str) -> LayerSpec:
        rng, b, shape = self.rng, self.dag.rows, self.dag.tensors
        gb = rng.choice(divisors(b))
        if kind == "rmsnorm":
            x = self.row_input()
            h = shape[x][1]
            w = self.pick((h,), "g", p_new=0.5)
            spec = LayerSpec(kind, {"input": x, "weight": w, "output": self.out((b, h))}, (gb, 1, 1),
                             eps=rng.choice([1e-6, 1e-6, 0.25]))
        elif kind in ("linear", "linear_with_residual"):
            x = self.row_input()
            k, n = shape[x][1], rng.choice(self.widths)
            w = self.pick((n, k), "w", p_new=0.7)
            args = {"input": x, "weight": w}
            if kind == "linear_with_residual":
                args["residual"] = self.pick((b, n))
            # never in place: the kernel reads whole input/weight rows while other threads store
            # outputs, and the layer refuses it (test_bad_input); the residual may be the output
            args["output"] = self.out((b, n), forbid=(w, x))
            spec = LayerSpec(kind, args, (rng.choice(divisors(n)), gb, 1))
        elif kind == "silu_mul":
            x = self.row_input(even=True)
            i = shape[x][1] // 2
            spec = LayerSpec(kind, {"input": x, "output": self.out((b, i))}, (rng.choice(divisors(i)), gb, 1))
        elif kind in ("elementwise_add", "identity"):
            x = self.row_input()
            h = shape[x][1]
            args = {"input_a": x, "input_b": self.pick((b, h))} if kind == "elementwise_add" else {"input": x}
            args["output"] = self.out((b, h))
            gh = rng.choice(divisors(h))
            # grid.x splits rows of an add but columns of an identity (MPK's maps); the other axis the rest
            spec = LayerSpec(kind, args, (gb, gh, 1) if kind == "elementwise_add" else (gh, gb, 1))
        elif kind == "tensor_init":
            h = rng.choice(self.widths)
            x = self.out((b, h), p_reuse=0.6)
            grid = (gb, rng.choice(divisors(h)), 1)
            # dummy_input is read whole, and never x: a layer's input sharing storage with an output it
            # writes is refused unless declared (layers.check_aliasing; tensor_init declares none)
            others = [n for n in shape if n != x]
            dummy_in = rng.choice(others) if others else self.new("x", (b, h), True)
            spec = LayerSpec(kind, {"input": x, "dummy_input": dummy_in, "dummy_output": self.any_tensor()},
                             grid)
        else:
            raise ValueError(kind)
        if spec.target not in self.defined:
            self.defined.append(spec.target)
        else:                                    # a fresh value: most recent for pick()
            self.defined.remove(spec.target)
            self.defined.append(spec.target)
        self.dag.layers.append(spec)
        return spec


def random_dag(seed: int, num_layers: int | None = None, all_kinds: bool = False) -> DagSpec:
    """A reproducible DAG for `seed`. all_kinds: each of the 7 kinds at least once (one compile)."""
    gen = _Gen(seed)
    if all_kinds:
        kinds = list(KINDS) + [gen.rng.choice(KINDS) for _ in range(gen.rng.randint(0, 4))]
        gen.rng.shuffle(kinds)
    else:
        kinds = [gen.rng.choice(KINDS) for _ in range(num_layers or gen.rng.randint(1, 10))]
    for kind in kinds:
        gen.layer(kind)
    return gen.dag


def declare(pk: PersistentKernel, dag: DagSpec, make_tensor) -> dict:
    """Declare the DAG's tensors (make_tensor(pk, name, dims, given) -> DTensor) and layers."""
    dts = {name: make_tensor(pk, name, dims, name in dag.given) for name, dims in dag.tensors.items()}
    for spec in dag.layers:
        kwargs = {role: dts[t] for role, t in spec.args.items()}
        if spec.eps is not None:
            kwargs["eps"] = spec.eps
        getattr(pk, f"{spec.kind}_layer")(grid_dim=spec.grid, block_dim=BLOCK, **kwargs)
    return dts


def _new_tensor(pk, name, dims, given):
    return pk.new_tensor(dims=dims, dtype=mirage.float32, name=name)


def build_graph(dag: DagSpec):
    pk = PersistentKernel(test_mode=True)
    declare(pk, dag, _new_tensor)
    g = graph_mod.build(pk.layers)
    graph_mod.verify(g)
    return pk, g


# ---- brute force -----------------------------------------------------------------------------

def _part(n: int, g: int, i: int) -> range:
    return range(i * n // g, (i + 1) * n // g)


def task_accesses(spec: LayerSpec, coord, dims: dict) -> list[tuple[str, str, list[range]]]:
    """(role, mode r|w|o, index ranges per dim) of one task, from the layer's documented tiling."""
    x, y = coord[0], coord[1]
    gx, gy = spec.grid[0], spec.grid[1]
    a = spec.args
    full = lambda t: [range(d) for d in dims[a[t]]]        # noqa: E731
    if spec.kind == "rmsnorm":
        b, h = dims[a["input"]]
        rows = _part(b, gx, x)
        return [("input", "r", [rows, range(h)]), ("weight", "r", full("weight")),
                ("output", "w", [rows, range(h)])]
    if spec.kind in ("linear", "linear_with_residual"):
        b, k = dims[a["input"]]
        n = dims[a["weight"]][0]
        rows, cols = _part(b, gy, y), _part(n, gx, x)
        acc = [("input", "r", [rows, range(k)]), ("weight", "r", [cols, range(k)])]
        if spec.kind == "linear_with_residual":
            acc.append(("residual", "r", [rows, cols]))
        return acc + [("output", "w", [rows, cols])]
    if spec.kind == "silu_mul":
        b, w2 = dims[a["input"]]
        rows = _part(b, gy, y)
        return [("input", "r", [rows, _part(w2, gx, x)]), ("output", "w", [rows, _part(w2 // 2, gx, x)])]
    if spec.kind in ("elementwise_add", "identity"):
        b, h = dims[a["output"]]
        box = [_part(b, gx, x), _part(h, gy, y)] if spec.kind == "elementwise_add" else \
            [_part(b, gy, y), _part(h, gx, x)]
        return [(role, "w" if role == "output" else "r", box) for role in a]
    if spec.kind == "tensor_init":
        b, h = dims[a["input"]]
        d = dims[a["dummy_input"]]
        # grid.x splits the dummy's rows where it can (MPK's map), else the dummy is read whole
        dummy = [_part(d[0], gx, x), range(d[1])] if len(d) == 2 and d[0] % gx == 0 else full("dummy_input")
        return [("dummy_input", "r", dummy), ("input", "w", [_part(b, gx, x), _part(h, gy, y)]),
                ("dummy_output", "o", full("dummy_output"))]
    raise ValueError(spec.kind)


def _elements(ranges: list[range], dims: tuple[int, ...]) -> list[int]:
    strides = [1] * len(dims)
    for d in range(len(dims) - 2, -1, -1):
        strides[d] = strides[d + 1] * dims[d + 1]
    return [sum(i * s for i, s in zip(idx, strides)) for idx in product(*ranges)]


def direct_deps(g) -> dict[int, set[int]]:
    """task id -> the tasks that trigger the event it waits on (what will actually run)."""
    triggered_by: dict[int, set[int]] = {}
    for t in g.tasks[1:]:
        for e in t.triggers:
            triggered_by.setdefault(e, set()).add(t.id)
    return {t.id: set(triggered_by.get(t.event, ())) if t.event > 0 else set() for t in g.tasks[1:]}


def ancestors(direct: dict[int, set[int]]) -> dict[int, int]:
    """task id -> bitset of its transitive ancestors (ids must be topological; checked before use)."""
    anc: dict[int, int] = {}
    for tid in sorted(direct):
        anc[tid] = 0
        for p in direct[tid]:
            anc[tid] |= anc.get(p, 0) | (1 << p)
    return anc


def check_properties(dag: DagSpec, pk: PersistentKernel, g) -> dict:
    """Assert every property listed in the module docstring; return counters for the summary."""
    tasks, events = g.tasks, g.events
    n, end = len(tasks) - 1, g.end_event
    stats = dict(tasks=n, joins=0, forks=0, war_waw=0, coarsened=len(g.coarsened))
    # each event's waiters are exactly the ids [first_task_id, last_task_id) (MPK's launch range),
    # all of one layer; events with no waiters have the empty range [0, 0)
    waiting: dict[int, list[int]] = {}
    for t in tasks[1:]:
        if t.event != -1:
            waiting.setdefault(t.event, []).append(t.id)
    for e in events:
        first, last = e.first_task_id, e.last_task_id
        assert e.waiters == list(range(first, last)) == waiting.get(e.id, []), \
            f"event {e.id}: waiters {e.waiters}, range [{first}, {last}), tasks waiting {waiting.get(e.id)}"
        assert (first, last) != (0, 0) or e.kind != "launch", f"launch event {e.id} has no waiters"
        assert len({tasks[w].layer.name for w in e.waiters}) <= 1, f"event {e.id} spans layers"
    assert set(waiting) == {e.id for e in events[1:-1]}, "an event nobody waits on, or a wait on a non-event"
    assert [e.first_task_id for e in events[1:-1]] == sorted(e.first_task_id for e in events[1:-1]), \
        "events are not numbered in order of their ranges"
    # ids: layers in program order, each a contiguous block; inside a layer the numbering rule
    # (docs/dependencies.md): the tasks waiting on nothing, then one run per event in order of first
    # appearance, each in grid order (x fastest); tiles as documented
    grid_order = lambda c: (c[2], c[1], c[0])                                   # noqa: E731
    expected_ids = []
    for li, spec in enumerate(dag.layers):
        start, size = len(expected_ids) + 1, spec.grid[0] * spec.grid[1] * spec.grid[2]
        block = tasks[start:start + size]
        assert len(block) == size and all(t.layer is pk.layers[li] for t in block), \
            f"tasks {start}..{start + size - 1} are not exactly layer {li} ({spec.kind})"
        by_grid = sorted(block, key=lambda t: grid_order(t.coord))
        assert [t.coord for t in by_grid] == [(xx, yy, zz) for zz, yy, xx in product(
            range(spec.grid[2]), range(spec.grid[1]), range(spec.grid[0]))], f"layer {li}: grid coordinates"
        runs: dict[int, list] = {}                  # event -> its tasks in grid order (first appearance)
        for t in by_grid:
            runs.setdefault(t.event, []).append(t)
        rule = runs.pop(-1, []) + [t for run in runs.values() for t in run]
        assert [t.id for t in block] == list(range(start, start + size)), f"layer {li}: ids"
        assert block == rule, (f"layer {li} is numbered {[t.coord for t in block]}, the rule gives "
                               f"{[t.coord for t in rule]}")
        expected_ids += [(li, t.coord) for t in block]
    assert len(expected_ids) == n, f"{n} tasks, expected {len(expected_ids)}"
    accesses = {}
    for tid, (li, coord) in enumerate(expected_ids, start=1):
        t = tasks[tid]
        acc = task_accesses(dag.layers[li], coord, dag.tensors)
        tiles = {tile.role: tile for tile in t.inputs + t.outputs}
        assert set(tiles) == {role for role, _, _ in acc}, f"{t.label}: roles {sorted(tiles)}"
        for role, _, ranges in acc:
            box = (tuple(r.start for r in ranges), tuple(r.stop for r in ranges))
            assert tiles[role].box == box, f"{t.label} {role}: tile {tiles[role].box}, documented {box}"
        accesses[tid] = acc
    # events
    triggered_by: dict[int, list[int]] = {e.id: [] for e in events}
    for t in tasks[1:]:
        assert len(t.triggers) <= MAX_TRIGGERS, f"{t.label} triggers {len(t.triggers)} events"
        assert len(set(t.triggers)) == len(t.triggers), f"{t.label} triggers {t.triggers}"
        assert (end in t.triggers) == (t.triggers == [end]), f"{t.label}: END must be its only trigger"
        assert t.triggers, f"{t.label} triggers nothing"
        for e in t.triggers:
            triggered_by[e].append(t.id)
        stats["forks"] += len(t.triggers) > 1
    for e in events[1:]:
        assert e.num_triggers == len(triggered_by[e.id]), \
            f"event {e.id}: num_triggers={e.num_triggers}, triggered by {len(triggered_by[e.id])} tasks"
        stats["joins"] += e.kind == "launch" and e.num_triggers > 1
        assert e.kind == ("end_of_task_graph" if e.id == end else "launch")
    direct = direct_deps(g)
    for tid, deps in direct.items():
        assert all(p < tid for p in deps), f"{tasks[tid].label} waits for a task with a higher id: {deps}"
    # tasks of one layer with equal dependency sets share one event
    shared: dict[tuple[str, frozenset], set[int]] = {}
    for t in tasks[1:]:
        shared.setdefault((t.layer.name, frozenset(direct[t.id])), set()).add(t.event)
    for (layer, deps), evs in shared.items():
        assert len(evs) == 1, f"layer {layer}: tasks with dependencies {sorted(deps)} wait on events {evs}"
    anc = ancestors(direct)
    # brute force over elements
    hist: dict[tuple[str, int], list[tuple[int, int, str]]] = {}     # (tensor, elem) -> (layer, task, mode)
    conflicts: dict[int, set[int]] = {tid: set() for tid in direct}
    war_waw: set[int] = set()             # tasks that overwrite what an earlier layer read or wrote
    for tid, (li, _) in enumerate(expected_ids, start=1):
        spec = dag.layers[li]
        for role, mode, ranges in accesses[tid]:
            name = spec.args[role]
            for el in _elements(ranges, dag.tensors[name]):
                h = hist.setdefault((name, el), [])
                last_writer = None
                for pl, p, pmode in h:
                    if pl == li:
                        continue
                    if pmode == "w":
                        last_writer = p
                    if pmode == "r" and mode == "r":
                        continue
                    conflicts[tid].add(p)
                    war_waw.add(tid) if mode == "w" else None
                    if not (anc[tid] >> p) & 1:
                        raise AssertionError(
                            f"{tasks[tid].label} {mode} '{name}' element {el} is not ordered after "
                            f"{tasks[p].label} ({pmode}) of an earlier layer: not a transitive ancestor")
                if mode == "r" and last_writer is not None:
                    assert last_writer in direct[tid], \
                        f"{tasks[tid].label} reads '{name}' element {el}, last written by " \
                        f"{tasks[last_writer].label}, which does not trigger its event {tasks[tid].event}"
                h.append((li, tid, mode))
    for tid, deps in direct.items():
        if tasks[tid].layer.name in g.coarsened:
            continue
        extra = deps - conflicts[tid]
        assert not extra, f"{tasks[tid].label} waits for {[tasks[p].label for p in extra]}, which share no " \
                          f"conflicting element with it (dependencies should be exact)"
    stats["war_waw"] = len(war_waw)
    return stats


def _overlap(a, b) -> bool:
    return a.tensor is b.tensor and all(alo < bhi and blo < ahi for alo, ahi, blo, bhi in zip(*a.box, *b.box))


def _untrigger(g, producer, event: int) -> None:
    """Remove `event` from the producer's triggers, keeping counts and END consistent."""
    producer.triggers.remove(event)
    g.events[event].num_triggers -= 1
    if not producer.triggers:
        producer.triggers.append(g.end_event)
        g.events[g.end_event].num_triggers += 1


def drop_last_writer(g) -> str | None:
    """Mutate g: drop the latest writer of what a task reads from that task's event (a RAW edge)."""
    for t in g.tasks[1:]:
        if t.event <= 0:
            continue
        for tile in t.inputs:
            for p in sorted(g.triggers_of(t.event), reverse=True):    # the highest id is the last writer
                pt = g.tasks[p]
                if any(o.declared and _overlap(o, tile) for o in pt.outputs):
                    _untrigger(g, pt, t.event)
                    return f"{t.label} no longer waits for {pt.label}"
    return None


def drop_war(g) -> str | None:
    """Mutate g: drop a reader from the event of a task that overwrites what it read (a WAR edge),
    choosing one that then is no longer ordered before the writer by any path. None if no such edge."""
    direct = direct_deps(g)
    for t in g.tasks[1:]:
        for p in sorted(direct[t.id]):
            pt = g.tasks[p]
            if any(o.declared for o in pt.outputs if any(_overlap(o, w) for w in t.outputs)):
                continue                                  # p also writes there: not a pure WAR edge
            if not any(_overlap(r, w) for r in pt.inputs for w in t.outputs if w.declared):
                continue
            trial = {k: set(v) for k, v in direct.items()}
            for w in g.events[t.event].waiters:
                trial[w].discard(p)
            if (ancestors(trial)[t.id] >> p) & 1:
                continue                                  # still ordered through another path
            _untrigger(g, pt, t.event)
            return f"{t.label} (writer) no longer waits for reader {pt.label}"
    return None


def break_contiguity(g) -> str | None:
    """Mutate g: swap the ids of the last waiter of one event and the first of the next event of
    the same layer, one of them waiting with others, so that an event's waiters are no longer
    consecutive. Dependencies stay right (tasks of one layer do not depend on each other)."""
    for e, nxt in zip(g.events[1:-2], g.events[2:-1]):
        a, b = e.waiters[-1], nxt.waiters[0]
        ta, tb = g.tasks[a], g.tasks[b]
        if b != a + 1 or ta.layer is not tb.layer or len(e.waiters) + len(nxt.waiters) < 3:
            continue
        g.tasks[a], g.tasks[b] = tb, ta
        ta.id, tb.id = b, a
        e.waiters[-1], nxt.waiters[0] = b, a
        e.waiters.sort()
        nxt.waiters.sort()
        return f"{ta.label} (event {e.id}) and {tb.label} (event {nxt.id}) swapped ids {a} and {b}"
    return None


# ---- tests -----------------------------------------------------------------------------------

def run_seeds(seeds, runtime_seeds=range(RUNTIME_DAGS)) -> dict:
    """Check random_dag(seed) for `seeds` and the all-kinds DAGs the test-mode file runs."""
    t0 = time.perf_counter()
    totals = dict(dags=0, layers=0, tasks=0, joins=0, forks=0, war_waw=0, coarsened=0, in_place=0,
                  reuse=0, non_pow2=0)
    kinds = set()
    failures = []
    for seed, all_kinds in [(s, False) for s in seeds] + [(s, True) for s in runtime_seeds]:
        dag = random_dag(seed, all_kinds=all_kinds)
        try:
            pk, g = build_graph(dag)
            stats = check_properties(dag, pk, g)
        except (AssertionError, GraphError, ValueError) as e:
            what = f"seed {seed}{' (all_kinds=True)' if all_kinds else ''}"
            failures.append(f"{what}: {type(e).__name__}: {e}\n{dag.describe()}")
            print(f"FAIL {what}: {e}\n{dag.describe()}", flush=True)
            continue
        totals["dags"] += 1
        totals["layers"] += len(dag.layers)
        for k in ("tasks", "joins", "forks", "war_waw", "coarsened"):
            totals[k] += stats[k]
        first_write = {}
        for i, spec in enumerate(dag.layers):
            kinds.add(spec.kind)
            totals["in_place"] += spec.target in spec.reads
            totals["reuse"] += spec.target in dag.given or spec.target in first_write
            first_write.setdefault(spec.target, i)
            totals["non_pow2"] += any(gd & (gd - 1) for gd in spec.grid)
    totals["seconds"] = time.perf_counter() - t0
    totals["kinds"] = len(kinds)
    totals["failures"] = failures
    return totals


def summary(t: dict) -> str:
    return (f"random graphs: {t['dags']} DAGs, {t['layers']} layers, {t['tasks']} tasks in "
            f"{t['seconds']:.1f} s "
            f"(kinds {t['kinds']}, joins {t['joins']}, forks {t['forks']}, WAR/WAW waiters {t['war_waw']}, "
            f"buffer reuses {t['reuse']}, in-place {t['in_place']}, non-power-of-two grids {t['non_pow2']}, "
            f"coarsened layers {t['coarsened']}, failures {len(t['failures'])})")


def test_random_dags_build_verify_and_brute_force():
    t = run_seeds(range(NUM_DAGS))
    print(summary(t))
    assert not t["failures"], f"{len(t['failures'])} failing seeds:\n" + "\n".join(t["failures"][:5])
    # the generator must reach what the properties are about, or they pass vacuously
    assert t["kinds"] == len(KINDS)
    for key in ("joins", "forks", "war_waw", "reuse", "in_place", "non_pow2", "coarsened"):
        assert t[key] > 0, f"no DAG exercised {key}"
    assert t["seconds"] < 30


def test_dropped_last_writer_is_caught_by_brute_force_and_verify():
    caught = 0
    for seed in range(60):
        dag = random_dag(seed)
        pk, g = build_graph(dag)
        what = drop_last_writer(g)
        if what is None:
            continue
        with pytest.raises(AssertionError, match="not a transitive ancestor|does not trigger its event"):
            check_properties(dag, pk, g)
        with pytest.raises(GraphError, match="missing dependency"):
            graph_mod.verify(g)
        caught += 1
    print(f"negative controls: {caught} DAGs with a dropped read-after-write edge, each caught by the brute "
          f"force and by verify")
    assert caught >= 20


def test_dropped_write_after_read_is_caught_by_brute_force_and_verify():
    """A writer that no longer waits for an earlier reader of what it overwrites: the brute force
    and graph.verify (its write-after-read check) both reject every such graph."""
    caught = verify_caught = 0
    for seed in range(150):
        dag = random_dag(seed)
        pk, g = build_graph(dag)
        if drop_war(g) is None:
            continue
        with pytest.raises(AssertionError, match="not a transitive ancestor"):
            check_properties(dag, pk, g)
        caught += 1
        try:
            graph_mod.verify(g)
        except GraphError:
            verify_caught += 1
    print(f"negative controls: {caught} DAGs with a dropped write-after-read edge, each caught by the brute "
          f"force ({verify_caught} of them also by graph.verify)")
    assert caught >= 10 and verify_caught == caught


def test_broken_event_range_is_caught_by_brute_force_and_verify():
    """Two tasks of one layer waiting on different events swap ids: the graph still orders every
    access, but an event's waiters are no longer its range [first_task_id, last_task_id)."""
    caught = 0
    for seed in range(100):
        dag = random_dag(seed)
        pk, g = build_graph(dag)
        if break_contiguity(g) is None:
            continue
        with pytest.raises(AssertionError, match=r"waiters .*, range \["):
            check_properties(dag, pk, g)
        with pytest.raises(GraphError, match=r"event \d+: waiters are tasks .* but its range \[\d+, \d+\) "
                                             r"also holds task \d+ = '\w+'\(\d+, \d+, \d+\), which waits "
                                             r"on event \d+"):
            graph_mod.verify(g)
        caught += 1
    print(f"negative controls: {caught} DAGs with an event whose waiters are not one id range, each caught "
          f"by the brute force and by verify")
    assert caught >= 20


def test_generator_is_reproducible():
    for seed in (0, 7, 123):
        assert random_dag(seed).describe() == random_dag(seed).describe()
        assert random_dag(seed, all_kinds=True).describe() == random_dag(seed, all_kinds=True).describe()
    assert {s.kind for s in random_dag(5, all_kinds=True).layers} == set(KINDS)


if __name__ == "__main__":
    totals = run_seeds(range(int(sys.argv[1]) if len(sys.argv) > 1 else NUM_DAGS))
    print(summary(totals))
    sys.exit(1 if totals["failures"] else 0)
