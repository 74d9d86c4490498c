"""The profiler (docs/profiler.md): the executor's task record -> `<trace_name>.perfetto-trace`
(a native Perfetto protobuf trace, as MPK writes: a process track per rank, a thread track per
worker, one slice per task) and `<trace_name>.csv`.

The record (MpkConfig.task_record, csrc/runtime/abi.h) holds per task position: when its scheduler
enqueued it (ready), when its worker block began and ended it (ns), and the worker. Analysis of a
trace (critical path, idle share) is in scripts/parse_task_graph.py, not here."""
from __future__ import annotations

import csv

import torch

from .abi import RECORD_FIELDS
from .errors import MPKInstallError

COLUMNS = ("task", "layer", "x", "y", "z", "worker", "ready_ns", "begin_ns", "end_ns", "wait_ns")


def require() -> type:
    """perfetto_trace_pb2.Trace of the perfetto package (the `profile` extra), or an MPKInstallError
    saying how to install it. PersistentKernel calls it when profiling is asked for, so a missing
    package shows at construction, not after a launch."""
    try:
        from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace
    except Exception as e:     # ImportError, or protobuf's VersionError (older than perfetto's gencode)
        raise MPKInstallError(f"profiling needs the 'profile' extra, which does not import ({e}): pip "
                              f"install -e '.[profile]' in the checkout, or perfetto==0.59.1 protobuf") from e
    return Trace


def record_buffer(given: torch.Tensor | None, num_tasks: int, device: torch.device) -> torch.Tensor:
    """The task record: MPK's profiler_tensor when given (int64 or uint64, contiguous, on the kernel's
    device, at least RECORD_FIELDS entries per task), else a fresh one."""
    need = RECORD_FIELDS * num_tasks
    if given is None:
        return torch.zeros(need, dtype=torch.int64, device=device)
    # (a non-tensor: an empty stand-in that the checks below refuse)
    t = given if isinstance(given, torch.Tensor) else torch.empty(0, dtype=torch.float16, device="cpu")
    if t.dtype in (torch.int64, torch.uint64) and t.is_contiguous() and t.device == device and \
            t.numel() >= need:
        return t
    raise ValueError(f"profiler_tensor: {type(given).__name__} {getattr(given, 'dtype', '')} "
                     f"{tuple(getattr(given, 'shape', ()))}; the profiler needs a contiguous int64/uint64 "
                     f"tensor on {device} of at least {need} entries ({RECORD_FIELDS} per task, {num_tasks} "
                     f"tasks)")


def rows(graph, buffer: torch.Tensor) -> list[dict]:
    """One dict per layer task (COLUMNS), from the record of the last launch."""
    rec = buffer.view(torch.int64)[: RECORD_FIELDS * len(graph.tasks)].cpu().view(-1, RECORD_FIELDS).tolist()
    out = []
    for t in graph.tasks[1:]:
        ready, begin, end, worker = rec[t.id]
        x, y, z = t.coord
        out.append(dict(task=t.id, layer=t.layer.name, x=x, y=y, z=z, worker=worker, ready_ns=ready,
                        begin_ns=begin, end_ns=end, wait_ns=begin - ready))
    return out


def export(graph, buffer: torch.Tensor, trace_name: str, rank: int = 0, workers: int = 1) -> tuple[str, str]:
    """Write the trace and the CSV of the last launch; return their paths. Times are ns from the first
    task's ready time; every worker has a named track (an idle one too); each slice's debug
    annotations carry what scripts/parse_task_graph.py needs (task, wait_ns, event, triggers).
    Perfetto reserves pid and tid 0 (the idle "swapper"), so rank r is pid r + 1 and worker w tid
    w + 1; the track names say which."""
    Trace, table, uuid = require(), rows(graph, buffer), (rank + 1) << 32   # (uuids unique across ranks)
    t0 = min(min(r["ready_ns"], r["begin_ns"]) for r in table)
    tracks = [dict(uuid=uuid, process=dict(pid=rank + 1, process_name=f"rank {rank}"))]
    tracks += [dict(uuid=uuid + w + 1, parent_uuid=uuid,
                    thread=dict(pid=rank + 1, tid=w + 1, thread_name=f"worker {w}")) for w in range(workers)]
    packets = [dict(track_descriptor=t) for t in tracks]
    for r in sorted(table, key=lambda r: (r["begin_ns"], r["end_ns"])):      # each worker's in order
        task, track = graph.tasks[r["task"]], uuid + r["worker"] + 1
        args = [dict(name=k, int_value=r[k]) for k in ("task", "wait_ns")] + [
            dict(name="event", int_value=task.event),
            dict(name="triggers", array_values=[dict(int_value=e) for e in task.triggers])]
        begin = dict(type="TYPE_SLICE_BEGIN", track_uuid=track, name=f"{r['layer']} {task.coord}",
                     categories=[task.layer.kind], debug_annotations=args)
        packets += [dict(timestamp=r["begin_ns"] - t0, track_event=begin), dict(
            timestamp=r["end_ns"] - t0, track_event=dict(type="TYPE_SLICE_END", track_uuid=track))]
    # Time order; the sort is stable, so on one worker a slice's end stays before the next one's begin
    # at the same ns. Every packet comes from one writer: one trusted_packet_sequence_id.
    ordered = sorted(packets, key=lambda p: p.get("timestamp", -1))           # the tracks first
    trace, table_path = f"{trace_name}.perfetto-trace", f"{trace_name}.csv"
    with open(trace, "wb") as f:
        f.write(Trace(packet=[dict(p, trusted_packet_sequence_id=1) for p in ordered]).SerializeToString())
    with open(table_path, "w", newline="") as f:
        csv.writer(f).writerows([COLUMNS] + [[r[c] for c in COLUMNS] for r in table])
    return trace, table_path
