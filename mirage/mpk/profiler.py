"""The profiler (docs/profiler.md): the executor's task record -> `<trace_name>.perfetto-trace`
(Chrome trace-event JSON: pid = rank, tid = worker, one slice per task) and `<trace_name>.csv`.

The record (MpkConfig.task_record, csrc/runtime/abi.h) holds per task position: when its scheduler
enqueued it (ready), when its worker block began and ended it (ns), and the worker. Analysis of a
trace (critical path, idle share) is in scripts/parse_task_graph.py, not here."""
from __future__ import annotations

import csv
import json

import torch

from .abi import RECORD_FIELDS

COLUMNS = ("task", "layer", "x", "y", "z", "worker", "ready_ns", "begin_ns", "end_ns", "wait_ns")


def record_buffer(given: torch.Tensor | None, num_tasks: int, device: torch.device) -> torch.Tensor:
    """The task record: MPK's profiler_tensor when given (int64 or uint64, contiguous, on the kernel's
    device, at least RECORD_FIELDS entries per task), else a fresh one."""
    need = RECORD_FIELDS * num_tasks
    if given is None:
        return torch.zeros(need, dtype=torch.int64, device=device)
    t = given if isinstance(given, torch.Tensor) else torch.empty(0, dtype=torch.float16)   # (refused)
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
    """Write the trace and the CSV of the last launch; return their paths. Times start at the first
    task's ready time; every worker has a named track (an idle one too); the slices carry what
    scripts/parse_task_graph.py needs (event, triggers)."""
    table = rows(graph, buffer)
    t0 = min(min(r["ready_ns"], r["begin_ns"]) for r in table)
    events = [dict(name="process_name", ph="M", pid=rank, args=dict(name=f"rank {rank}"))]
    events += [dict(name="thread_name", ph="M", pid=rank, tid=w, args=dict(name=f"worker {w}"))
               for w in range(workers)]
    for r in table:
        task = graph.tasks[r["task"]]
        events.append(dict(name=f"{r['layer']} {task.coord}", cat=task.layer.kind, ph="X", pid=rank,
                           tid=r["worker"], ts=(r["begin_ns"] - t0) / 1e3,
                           dur=(r["end_ns"] - r["begin_ns"]) / 1e3,
                           args=dict(task=r["task"], wait_us=r["wait_ns"] / 1e3, event=task.event,
                                     triggers=list(task.triggers))))
    trace, table_path = f"{trace_name}.perfetto-trace", f"{trace_name}.csv"
    with open(trace, "w") as f:
        json.dump(dict(traceEvents=events, displayTimeUnit="ns"), f)
    with open(table_path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(table)
    return trace, table_path
