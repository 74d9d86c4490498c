"""Summarize a task_graph_rank{R}.json (tasks per layer, event fan-in/out, critical path), or a
profiler trace <trace_name>.perfetto-trace (docs/profiler.md; a Perfetto protobuf trace, read with the
perfetto package's protos: the 'profile' extra): its structure is checked, then the critical path in
time and each worker's idle share are reported.

Run: python scripts/parse_task_graph.py test_output/task_graph_rank0.json
     python scripts/parse_task_graph.py test_trace.perfetto-trace
"""
import re
import sys
from collections import defaultdict

from mirage.mpk import inspect

SLICE_NAME = re.compile(r"\w+ \(\d+, \d+, \d+\)")   # layer and grid coordinate
EPS_US = 1e-6      # ts and dur are ns / 1000 as floats: a rounding, never a real overlap
ARGS = {"task", "event", "triggers", "wait_ns"}      # each slice's debug annotations


class BadTrace(ValueError):
    """A file that is not a well-formed profiler trace, with the reason."""


def _end(s: dict) -> float:
    return s["ts"] + s["dur"]


def read_packets(path: str) -> list:
    """The TracePackets of the file; BadTrace if it is not a Perfetto protobuf trace (JSON, truncated)."""
    # imported here: a task graph needs no 'profile' extra (perfetto, protobuf)
    from google.protobuf.message import DecodeError
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace
    trace = Trace()
    try:
        with open(path, "rb") as f:
            trace.ParseFromString(f.read())
    except DecodeError as e:
        raise BadTrace(f"{path}: not a Perfetto protobuf trace ({e})") from None
    return list(trace.packet)


def _annotation(a) -> int | list[int]:
    """A debug annotation's value: triggers is an array (empty when the task triggers nothing)."""
    return [v.int_value for v in a.array_values] if a.name == "triggers" else a.int_value


def load_trace(path: str) -> tuple[list[dict], dict]:
    """(task slices, {(rank, worker): track name}) of a trace, after checking what docs/profiler.md
    promises: a process track descriptor per rank and a thread track descriptor for every track a
    slice is on; packets in time order on one trusted sequence; each slice a TYPE_SLICE_BEGIN and
    the TYPE_SLICE_END after it on the same track with no other slice between (a worker runs one task
    at a time), named "layer (x, y, z)", with the debug annotations task, event, triggers and wait_ns,
    one per task and rank. Slices are dicts: name, cat, rank, worker, ts and dur (us from the trace's
    start) and args (task, event, triggers, wait_us). Raises BadTrace naming the first fault."""
    packets = read_packets(path)
    ranks = {p.track_descriptor.process.pid for p in packets if p.track_descriptor.HasField("process")}
    threads = {p.track_descriptor.uuid: p.track_descriptor.thread for p in packets
               if p.track_descriptor.HasField("thread")}
    # Perfetto reserves pid and tid 0: the profiler writes rank r as pid r + 1, worker w as tid w + 1.
    tracks = {(t.pid - 1, t.tid - 1): t.thread_name for t in threads.values() if t.pid in ranks}
    slices, open_, seen, last = [], {}, set(), 0
    for p in (p for p in packets if p.HasField("track_event")):
        ev, where = p.track_event, f"{path}: packet at {p.timestamp} ns"
        if not p.trusted_packet_sequence_id or p.timestamp < last:
            raise BadTrace(f"{where} is out of time order or on no trusted sequence")
        last, t = p.timestamp, threads.get(ev.track_uuid)
        if t is None or t.pid not in ranks or not t.thread_name:
            raise BadTrace(f"{where}: a slice on track {ev.track_uuid}, which no named thread track "
                           f"descriptor of a rank's process describes")
        if ev.type == ev.TYPE_SLICE_END:
            if ev.track_uuid not in open_:
                raise BadTrace(f"{where}: a slice end on worker {t.tid - 1} with no slice open")
            s = open_.pop(ev.track_uuid)
            s["dur"] = p.timestamp / 1e3 - s["ts"]
            continue
        args = {a.name: _annotation(a) for a in ev.debug_annotations}
        if ev.type != ev.TYPE_SLICE_BEGIN or ARGS - set(args) or not SLICE_NAME.fullmatch(ev.name):
            raise BadTrace(f"{where}: slice {ev.name!r} is not a slice begin named 'layer (x, y, z)' with "
                           f"the annotations {sorted(ARGS)}")
        if ev.track_uuid in open_:
            raise BadTrace(f"{where}: slices {open_[ev.track_uuid]['name']!r} and {ev.name!r} overlap on "
                           f"rank {t.pid - 1} worker {t.tid - 1}")
        if (t.pid, args["task"]) in seen:
            raise BadTrace(f"{where}: task {args['task']} of rank {t.pid - 1} has two slices")
        seen.add((t.pid, args["task"]))
        args["wait_us"] = args.pop("wait_ns") / 1e3
        open_[ev.track_uuid] = dict(name=ev.name, cat=list(ev.categories), rank=t.pid - 1, worker=t.tid - 1,
                                    ts=p.timestamp / 1e3, args=args)
        slices.append(open_[ev.track_uuid])
    if open_:
        raise BadTrace(f"{path}: slice {next(iter(open_.values()))['name']!r} never ends")
    if not slices:
        raise BadTrace(f"{path}: no task slices")
    return slices, tracks


def _by_track(slices: list[dict]) -> dict:
    tracks = defaultdict(list)
    for s in sorted(slices, key=lambda s: s["ts"]):
        tracks[(s["rank"], s["worker"])].append(s)
    return tracks


def critical_path(slices: list[dict]) -> list[dict]:
    """The chain of slices that bounds the run: from the slice that ends last, step back to whatever
    it waited for that finished last before it began: a producer of the event it waited on (a slice
    whose args.triggers hold it) or the slice before it on its worker."""
    producers, before = defaultdict(list), {}
    for s in slices:
        for e in s["args"]["triggers"]:
            producers[(s["rank"], e)].append(s)
    for ss in _by_track(slices).values():
        before.update({id(b): a for a, b in zip(ss, ss[1:])})
    path = [max(slices, key=_end)]
    while True:
        cur = path[-1]
        options = producers.get((cur["rank"], cur["args"]["event"]), []) + [before.get(id(cur))]
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
    except ImportError as e:     # a trace without the perfetto package
        sys.exit(f"parse_task_graph: reading a trace needs the 'profile' extra ({e}): pip install -e "
                 f"'.[profile]'")
