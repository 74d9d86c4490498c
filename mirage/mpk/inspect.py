"""Read a task_graph_rank{R}.json: counts, per-layer tasks, event fan-in/out, critical path, .dot."""
from __future__ import annotations

import hashlib
import json
import os
import re
from collections import Counter


class NotATaskGraph(ValueError):
    """The file is not a task_graph_rank{R}.json this package wrote; the text says what is wrong."""


_TASK_KEYS = ("task_id", "layer", "grid_coord", "trigger_events", "dependent_event")
_EVENT_KEYS = ("num_triggers",)


def load(path: str) -> dict:
    """Read and sanity-check a task graph; NotATaskGraph names the file and the first problem."""
    try:
        with open(path) as f:
            g = json.load(f)
    except UnicodeDecodeError:
        raise NotATaskGraph(f"{path} is not a task graph: not a text file") from None
    except json.JSONDecodeError as e:
        raise NotATaskGraph(f"{path} is not a task graph: not JSON ({e})") from None
    if not isinstance(g, dict) or not all(isinstance(g.get(k), list) for k in ("all_tasks", "all_events",
                                                                                "first_tasks")):
        raise NotATaskGraph(f"{path} is not a task graph: expected a JSON object with the lists all_tasks, "
                            f"all_events and first_tasks (a task_graph_rank<R>.json written by compile())")
    for kind, items, keys in (("task", g["all_tasks"], _TASK_KEYS), ("event", g["all_events"], _EVENT_KEYS)):
        for i, item in enumerate(items):
            missing = [k for k in keys if not isinstance(item, dict) or k not in item]
            if missing:
                raise NotATaskGraph(f"{path} is not a task graph of this package: {kind} {i} has no "
                                    f"{', '.join(missing)} (written by another tool or version?)")
    if not g["all_tasks"] or len(g["all_events"]) < 2:
        raise NotATaskGraph(f"{path} is not a task graph: it needs TERMINATE plus tasks, and at least the "
                            f"TERMINATION and END_OF_TASK_GRAPH events")
    return g


def producers(g: dict) -> dict[int, list[int]]:
    """event id -> ids of the tasks that trigger it."""
    out: dict[int, list[int]] = {}
    for t in g["all_tasks"][1:]:
        for e in t["trigger_events"]:
            out.setdefault(e, []).append(t["task_id"])
    return out


def critical_path(g: dict) -> list[int]:
    """The longest chain of tasks (in tasks), each waiting on an event the previous triggers."""
    prod = producers(g)
    depth: dict[int, int] = {}
    parent: dict[int, int | None] = {}
    for t in g["all_tasks"][1:]:          # ids are topological: producers come first
        before = prod.get(t["dependent_event"], []) if t["dependent_event"] >= 0 else []
        best = max(before, key=lambda p: depth[p], default=None)
        depth[t["task_id"]] = 1 + (depth[best] if best is not None else 0)
        parent[t["task_id"]] = best
    node = max(depth, key=depth.get, default=None)
    path = []
    while node is not None:
        path.append(node)
        node = parent[node]
    return path[::-1]


def summary(g: dict, name: str = "task graph") -> str:
    tasks, events = g["all_tasks"][1:], g["all_events"]
    by_id = {t["task_id"]: t for t in tasks}
    lines = [f"{name}: {len(tasks)} tasks, {len(events)} events, {len(g['first_tasks'])} first tasks"]
    for layer, n in Counter(t["layer"] for t in tasks).items():
        lines.append(f"  layer {layer}: {n} tasks")
    fan_in = max((e["num_triggers"] for e in events[1:-1]), default=0)
    fan_out = max((len([e for e in t["trigger_events"] if e != len(events) - 1]) for t in tasks), default=0)
    lines.append(f"  max event fan-in {fan_in}, max task fan-out {fan_out}, "
                 f"END_OF_TASK_GRAPH waits for {events[-1]['num_triggers']} leaf tasks")
    path = critical_path(g)
    lines.append(f"  critical path: {len(path)} tasks: " +
                 " -> ".join(f"{by_id[i]['layer']}{tuple(by_id[i]['grid_coord'])}" for i in path[:12]) +
                 (" -> ..." if len(path) > 12 else ""))
    if g.get("coarsened_layers"):
        lines.append(f"  coarsened to barriers: {', '.join(g['coarsened_layers'])}")
    return "\n".join(lines)


def to_dot(g: dict, max_tasks: int = 2000) -> str:
    """One node per task (clustered by layer), or one per layer when the graph is larger."""
    tasks, prod = g["all_tasks"][1:], producers(g)
    per_layer = len(tasks) > max_tasks
    lines = ["digraph task_graph {", "  rankdir=LR; node [shape=box, fontsize=10];"]
    if per_layer:
        edges = set()
        for t in tasks:
            for p in prod.get(t["dependent_event"], []):
                edges.add((g["all_tasks"][p]["layer"], t["layer"]))
        for layer in dict.fromkeys(t["layer"] for t in tasks):
            lines.append(f'  "{layer}";')
        lines += [f'  "{a}" -> "{b}";' for a, b in sorted(edges) if a != b]
    else:
        for layer in dict.fromkeys(t["layer"] for t in tasks):
            lines.append(f'  subgraph "cluster_{layer}" {{ label="{layer}";')
            lines += [f'    t{t["task_id"]} [label="{tuple(t["grid_coord"])}"];'
                      for t in tasks if t["layer"] == layer]
            lines.append("  }")
        for t in tasks:
            if t["dependent_event"] >= 0:
                lines += [f'  t{p} -> t{t["task_id"]} [label="e{t["dependent_event"]}"];'
                          for p in prod.get(t["dependent_event"], [])]
    lines.append("}")
    return "\n".join(lines) + "\n"


class MixedRuns(NotATaskGraph):
    """An output_dir whose per-rank files were written by different runs (a stale rank's files)."""


STALE_S = 600      # rank files of one run are written within seconds of each other (one job)


def _sha256(path: str) -> str | None:
    if not os.path.isfile(path):
        return None
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def check_one_run(path: str, ranks: list[int]) -> str:
    """Raise MixedRuns, naming the files, when the rank files of `path` cannot come from one run: a
    rank's source or task graph is not the one its kernel_metadata_rank{R}.json hashes; the metadata's
    world sizes differ, or the ranks present are not 0..world_size-1; the ranks' layers differ (names
    and variants from the metadata, names from a task graph kept without it; every rank of a job
    builds the same layers, whatever its shard). Return a warning line (or "") when only the task
    graphs' mtimes lie more than STALE_S apart, a hint that is not proof."""
    problems, sizes, layers, mtimes = [], {}, {}, {}
    for r in ranks:
        meta, graph = f"kernel_metadata_rank{r}.json", f"task_graph_rank{r}.json"
        if os.path.isfile(os.path.join(path, graph)):
            mtimes[graph] = os.path.getmtime(os.path.join(path, graph))
        if os.path.isfile(os.path.join(path, meta)):
            with open(os.path.join(path, meta)) as f:
                m = json.load(f)
            for name, key in ((f"test_rank{r}.cu", "source_sha256"), (graph, "graph_sha256")):
                found = _sha256(os.path.join(path, name))
                if found is not None and found != m.get(key):
                    problems.append(f"{name} is not the file {meta} describes (its {key} differs)")
            sizes[meta] = m.get("world_size")
            layers[meta] = [(g["name"], g["variant"]) for g in m.get("layers", [])]
        elif graph in mtimes:
            tasks = load(os.path.join(path, graph))["all_tasks"][1:]
            layers[graph] = [(name, None) for name in dict.fromkeys(t["layer"] for t in tasks)]
    if len(set(sizes.values())) > 1:
        problems.append("world sizes differ: " + ", ".join(f"{n} says {w}" for n, w in sizes.items()))
    elif sizes and ranks != list(range(world := next(iter(sizes.values())))):
        problems.append(f"ranks {ranks} are present, but the metadata says world_size {world}")
    names = {tuple(n for n, _ in v) for v in layers.values()}
    variants = {tuple(v) for f, v in layers.items() if f in sizes}
    if len(names) > 1 or len(variants) > 1:
        problems.append("layers differ: " + "; ".join(
            f"{f}: {', '.join(n if v is None else f'{n} {v}' for n, v in ls)}" for f, ls in layers.items()))
    if problems:
        raise MixedRuns(f"{path} mixes files of different runs: {'; '.join(problems)}. Remove the stale "
                        f"files (or the directory) and run again, or inspect one run's own directory")
    if mtimes and max(mtimes.values()) - min(mtimes.values()) > STALE_S:
        old, new = min(mtimes, key=mtimes.get), max(mtimes, key=mtimes.get)
        return (f"WARNING: {old} is {mtimes[new] - mtimes[old]:.0f} s older than {new} (one run writes its "
                f"ranks' files seconds apart): it may be a stale file of another run")
    return ""


def output_dir_summary(path: str) -> str:
    """What compile(output_dir=...) left in `path`, per rank: the generated source (its headers and
    variants), the task graph summary, the kept module's metadata, and any profiler trace. Files of
    different runs are refused (check_one_run)."""
    names = sorted(os.listdir(path))
    ranks = sorted({int(m.group(1)) for n in names if (m := re.match(r"(?:test|task_graph)_rank(\d+)", n))})
    if not ranks:
        raise NotATaskGraph(f"{path} holds no test_rank<R>.cu or task_graph_rank<R>.json: not an output_dir "
                            f"of compile(output_dir=...)")
    warning = check_one_run(path, ranks)
    lines = [warning] if warning else []
    lines += [f"{path}: {len(ranks)} rank(s) ({', '.join(map(str, ranks))}), files: {', '.join(names)}"]
    for r in ranks:
        cu = os.path.join(path, f"test_rank{r}.cu")
        if os.path.isfile(cu):
            with open(cu) as f:
                src = f.read()
            headers = re.findall(r'^#include "([^"]+)"', src, re.M)
            variants = re.findall(r"case \d+: MPK_RUN_TASK\(v, \((\S+)\)\)", src)
            lines.append(f"rank {r} test_rank{r}.cu: {len(src.splitlines())} lines, includes "
                         f"{', '.join(headers)}; {len(variants)} variant(s): {', '.join(variants)}")
        graph = os.path.join(path, f"task_graph_rank{r}.json")
        if os.path.isfile(graph):
            lines.append("rank " + str(r) + " " + summary(load(graph), f"task_graph_rank{r}.json"))
        meta = os.path.join(path, f"kernel_metadata_rank{r}.json")
        if os.path.isfile(meta):
            with open(meta) as f:
                m = json.load(f)
            lines.append(f"rank {r} kernel_metadata_rank{r}.json: backend {m.get('backend')}, ABI "
                         f"{m.get('abi_version')}, world_size {m.get('world_size')}, test_mode "
                         f"{m.get('test_mode')}, module {m.get('module_bytes')} bytes (sha256 "
                         f"{str(m.get('module_sha256'))[:16]}...), {len(m.get('layers', []))} layer(s), "
                         f"{len(m.get('tensors', {}))} tensor(s)")
    traces = [n for n in names if n.endswith((".perfetto-trace", ".csv"))]
    lines.append(f"traces: {', '.join(traces)}" if traces else "traces: none (profiling was off)")
    return "\n".join(lines)
