"""Summarize a task_graph_rank{R}.json (tasks per layer, event fan-in/out, critical path), or a
profiler trace <trace_name>.perfetto-trace (docs/profiler.md): its structure is checked, then the
critical path in time and each worker's idle share are reported.

Run: python scripts/parse_task_graph.py test_output/task_graph_rank0.json
     python scripts/parse_task_graph.py test_trace.perfetto-trace
"""
import json
import re
import sys
from collections import defaultdict

from mirage.mpk import inspect

SLICE_NAME = re.compile(r"\w+ \(\d+, \d+, \d+\)")   # layer and grid coordinate
EPS_US = 1e-6      # ts and dur are ns / 1000 as floats: a rounding, never a real overlap


class BadTrace(ValueError):
    """A file that is not a well-formed profiler trace, with the reason."""


def _end(s: dict) -> float:
    return s["ts"] + s["dur"]


def load_trace(path: str) -> tuple[list[dict], dict]:
    """(task slices, {(pid, tid): track name}) of a trace, after checking what docs/profiler.md
    promises: a traceEvents list; process_name and thread_name metadata naming every track a slice is
    on; each slice complete ("X", ts, dur >= 0, args.task/event/triggers), named "layer (x, y, z)",
    one per task and rank; slices on one track never overlap. Raises BadTrace naming the first fault."""
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise BadTrace(f"{path}: not a JSON trace ({e})") from None
    events = doc.get("traceEvents") if isinstance(doc, dict) else None
    if not isinstance(events, list):
        raise BadTrace(f"{path}: no traceEvents list")
    meta = [e for e in events if e.get("ph") == "M"]
    ranks = {e.get("pid") for e in meta if e.get("name") == "process_name"}
    tracks = {(e.get("pid"), e.get("tid")): e.get("args", {}).get("name") for e in meta
              if e.get("name") == "thread_name"}
    slices, seen = [e for e in events if e.get("ph") == "X"], set()
    if not slices:
        raise BadTrace(f"{path}: no task slices")
    for s in slices:
        missing = {"name", "pid", "tid", "ts", "dur", "args"} - set(s) or \
            {"task", "event", "triggers"} - set(s["args"])
        if missing:
            raise BadTrace(f"{path}: slice {s.get('name')!r} lacks {sorted(missing)}")
        if not SLICE_NAME.fullmatch(s["name"]) or s["dur"] < 0:
            raise BadTrace(f"{path}: slice {s['name']!r} (dur {s['dur']}) is not 'layer (x, y, z)' with "
                           f"dur >= 0")
        if s["pid"] not in ranks or not tracks.get((s["pid"], s["tid"])):
            raise BadTrace(f"{path}: slice {s['name']!r} is on rank {s['pid']} worker {s['tid']}, a track "
                           f"without process_name/thread_name metadata")
        if (s["pid"], s["args"]["task"]) in seen:
            raise BadTrace(f"{path}: task {s['args']['task']} of rank {s['pid']} has two slices")
        seen.add((s["pid"], s["args"]["task"]))
    for track, ss in _by_track(slices).items():
        for a, b in zip(ss, ss[1:]):
            if b["ts"] < _end(a) - EPS_US:
                raise BadTrace(f"{path}: slices {a['name']!r} and {b['name']!r} overlap on rank {track[0]} "
                               f"worker {track[1]} ({a['ts']:.3f} + {a['dur']:.3f} us > {b['ts']:.3f} us)")
    return slices, tracks


def _by_track(slices: list[dict]) -> dict:
    tracks = defaultdict(list)
    for s in sorted(slices, key=lambda s: s["ts"]):
        tracks[(s["pid"], s["tid"])].append(s)
    return tracks


def critical_path(slices: list[dict]) -> list[dict]:
    """The chain of slices that bounds the run: from the slice that ends last, step back to whatever
    it waited for that finished last before it began: a producer of the event it waited on (a slice
    whose args.triggers hold it) or the slice before it on its worker."""
    producers, before = defaultdict(list), {}
    for s in slices:
        for e in s["args"]["triggers"]:
            producers[(s["pid"], e)].append(s)
    for ss in _by_track(slices).values():
        before.update({id(b): a for a, b in zip(ss, ss[1:])})
    path = [max(slices, key=_end)]
    while True:
        cur = path[-1]
        options = producers.get((cur["pid"], cur["args"]["event"]), []) + [before.get(id(cur))]
        options = [s for s in options if s is not None and _end(s) <= cur["ts"] + EPS_US]
        if not options:
            return path[::-1]
        path.append(max(options, key=_end))


def trace_summary(path: str) -> str:
    slices, tracks = load_trace(path)
    t0, t1 = min(s["ts"] for s in slices), max(_end(s) for s in slices)
    span = t1 - t0
    crit = critical_path(slices)
    busy = sum(s["dur"] for s in crit)
    ranks, length = len({p for p, _ in tracks}), _end(crit[-1]) - crit[0]["ts"]
    lines = [f"{path}: {len(slices)} tasks on {len(tracks)} worker(s) of {ranks} rank(s), {span:.1f} us from "
             f"the first task's begin to the last one's end",
             f"  critical path in time: {len(crit)} tasks, {length:.1f} us ({busy:.1f} us inside tasks, the "
             f"rest between them): " + " -> ".join(f"{s['name']} {s['dur']:.1f} us" for s in crit[:12]) +
             (" -> ..." if len(crit) > 12 else "")]
    per_layer = defaultdict(list)
    for s in slices:
        per_layer[s["name"].split(" ")[0]].append(s["args"].get("wait_us", 0.0))
    lines.append("  wait from ready to begin, mean / max: " + ", ".join(
        f"{layer} {sum(w) / len(w):.1f} / {max(w):.1f} us" for layer, w in per_layer.items()))
    on = _by_track(slices)
    lines.append("  idle share per worker (of that span): " + ", ".join(
        f"{name} {100 * (1 - sum(s['dur'] for s in on.get(track, [])) / span) if span else 0:.0f}%"
        for track, name in sorted(tracks.items())))
    return "\n".join(lines)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    try:
        if sys.argv[1].endswith(".perfetto-trace"):
            print(trace_summary(sys.argv[1]))
        else:
            print(inspect.summary(inspect.load(sys.argv[1]), sys.argv[1]))
    except (OSError, inspect.NotATaskGraph, BadTrace) as e:
        sys.exit(f"parse_task_graph: {e}")
