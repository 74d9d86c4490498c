"""Load a compiled module with ctypes, hand it the graph and pointers, launch, report.

ctypes.CDLL releases the GIL for the duration of each call, so a launch never blocks
other Python threads. Every call takes the handle mpk_init returned: two kernels sharing
one loaded .so share no state.
"""
from __future__ import annotations

import contextlib
import ctypes as C
import re
import threading

import numpy as np
import torch

from . import abi, faults, tasktable
from .codegen import Variants
from .errors import MPKHangError, MPKRuntimeError
from .faults import Fault
from .graph import Graph
from .tensor import DTensor


def _inject(fault: Fault, graph: Graph, tasks: np.ndarray, config: dict) -> None:
    """Runtime kinds go to the config; table kinds edit the faulted task's row (of a copy: the
    JSON and any other runtime of this graph read the kernel's own table)."""
    victim = faults.locate(fault, graph)
    if fault.kind in faults.RUNTIME_KINDS:
        config.update(fault_kind=faults.RUNTIME_KINDS[fault.kind], fault_task=victim,
                      fault_amount=fault.amount, fault_element=fault.element)
    elif fault.kind == "drop_dependency":
        tasks[victim]["dependent_event"] = -1
    else:  # wrong_tile: write where the neighbour writes, leaving the own tile unwritten
        other = faults.neighbour(graph, victim)
        first = tasks[victim]["num_inputs"]
        outputs = slice(first, first + tasks[victim]["num_outputs"])
        tasks["tiles"][victim, outputs]["offset"] = tasks["tiles"][other, outputs]["offset"]


def _names(tasks: list, limit: int = 8) -> str:
    shown = ", ".join(f"'{t.layer.name}'{t.coord}" for t in tasks[:limit])
    return shown + (f" (+{len(tasks) - limit} more)" if len(tasks) > limit else "")


class Runtime:
    interrupted = ""        # why a launch was stopped by Ctrl-C (launch): the kernel is unusable

    def __init__(self, so_path: str, graph: Graph, variants: Variants, tensors: list[DTensor],
                 meta: dict[str, torch.Tensor], config: dict, fault: Fault | None = None,
                 pointers: list[int] | None = None):
        self.graph = graph
        self.lib = C.CDLL(so_path)
        abi.declare(self.lib)
        abi.check_layout(self.lib, so_path)
        table = tasktable.of(graph, variants)
        tasks, config = table.tasks, dict(config)
        if fault is not None:
            tasks = tasks.copy()
            _inject(fault, graph, tasks, config)
        # test mode: the guarded copies, the tensors' then the meta tensors' (memcheck.Fences.pointers)
        pointers = pointers or [t.data.data_ptr() for t in tensors]
        ptrs = (C.c_void_p * len(tensors))(*pointers[:len(tensors)])
        m = abi.MpkMeta(*(pointers[len(tensors):] or [meta[k].data_ptr() for k in abi.META_FIELDS]))
        cfg = abi.MpkConfig(abi_version=abi.ABI_VERSION, num_tasks=len(graph.tasks),
                            num_events=len(graph.events), num_tensors=len(tensors), **config)
        err = C.create_string_buffer(4096)
        self.handle = self.lib.mpk_init(C.byref(cfg), tasks.ctypes.data_as(C.POINTER(abi.MpkTask)),
                                        table.events.ctypes.data_as(C.POINTER(abi.MpkEvent)), ptrs,
                                        C.byref(m), err, len(err))
        graph.task_table = None     # mpk_init copied the rows (744 bytes a task): free ours
        if not self.handle:
            why = self.name_tasks(err.value.decode(errors="replace"))
            raise MPKRuntimeError(f"the runtime rejected the kernel: {why}")
        self.num_workers, self.watchdog_s = config["num_workers"], config["watchdog_s"]

    def launch(self) -> int:
        """Run to termination; return the number of graph passes, or raise with a report. Ctrl-C stops
        the workers between tasks (mpk_abort) and raises KeyboardInterrupt; `interrupted` is then set."""
        self._check(self._interruptible(self.lib.mpk_launch))
        return self.lib.mpk_iterations(self.handle)

    def _interruptible(self, entry) -> int:
        """entry(handle) on a helper thread (ctypes releases the GIL) while this thread waits in short
        steps: Python runs a signal handler only in the main thread between bytecodes, so a blocking
        call here would hold Ctrl-C back until the whole pass ended."""
        out: list[int] = []
        done = threading.Event()     # not Thread.join: before Python 3.13 a join interrupted by Ctrl-C
        threading.Thread(target=lambda: (out.append(entry(self.handle)), done.set()), daemon=True).start()
        try:                         # can mark the thread as ended while it still runs; timed: a
            while not done.wait(0.05):   # SIGINT taken by another thread wakes no one
                pass
        except KeyboardInterrupt:
            while not done.is_set():    # repeated: the launch may not have begun at the first one
                with contextlib.suppress(KeyboardInterrupt):   # a second Ctrl-C: it is back within ~1 s
                    self.lib.mpk_abort(self.handle)
                    done.wait(0.01)
            why = self.error_message() if out == [abi.INTERRUPTED] else f"the launch ended (status {out[0]})"
            self.interrupted = why      # a partial pass (and, with ranks, partial signals): unusable
            raise KeyboardInterrupt(f"{self.name_tasks(why)}; the kernel cannot run again: call finalize()") \
                from None
        return out[0]

    def launch_async(self, stream: int) -> None:
        """CUDA modules only: enqueue one launch on `stream` (a cudaStream_t); wait() collects it."""
        self._check(self.lib.mpk_launch_async(self.handle, C.c_void_p(stream)))

    def wait(self) -> int:
        """CUDA modules only: wait for the launch in flight (the watchdog runs meanwhile); passes run."""
        self._check(self._interruptible(self.lib.mpk_wait))
        return self.lib.mpk_iterations(self.handle)

    def _check(self, status: int) -> None:
        """A launch's status as an exception naming layers and tiles (nothing for MPK_OK)."""
        if status == abi.HANG:
            raise MPKHangError(self.hang_report())
        if status == abi.STUCK:   # a task inside its kernel past stuck_s: the message names it
            raise MPKHangError(self.name_tasks(self.error_message()))
        if status != abi.OK:
            raise MPKRuntimeError(f"launch failed (status {status}): {self.name_tasks(self.error_message())}")

    def name_tasks(self, message: str) -> str:
        """'task 4' in a runtime message -> "task 4 = 'linear_1'(0, 2, 0)": layers and grid coordinates; and
        its 'tile 1 (input 1)' -> "tile 1 (input 1, 'weight': tensor 'w' [32, 520] of [96, 520])"."""
        def label(m: re.Match) -> str:
            i = int(m.group(1))
            if not 1 <= i < len(self.graph.tasks):
                return m.group(0)
            task = self.graph.tasks[i]
            text = f"task {i} = '{task.layer.name}'{task.coord}"
            if m.group(2):
                t = (task.inputs + task.outputs)[int(m.group(2))]
                text += (f" tile {m.group(2)} ({m.group(3)}, '{t.role}': tensor '{t.tensor.name}' "
                         f"{list(t.dims)} of {list(t.tensor.dims)})")
            return text
        return re.sub(r"\btask (\d+)\b(?: tile (\d+) \(((?:input|output) \d+)\))?", label, message)

    def error_message(self) -> str:
        buf = C.create_string_buffer(4096)
        self.lib.mpk_error_message(self.handle, buf, len(buf))
        return buf.value.decode(errors="replace")

    def _read(self, entry, kind, n: int) -> list:
        """One of the module's array getters (entry(handle, out, n) -> count) as a list."""
        out = (kind * n)()
        return list(out[:max(0, min(n, entry(self.handle, out, n)))])

    def snapshot(self) -> list[abi.MpkWorkerState]:
        return self._read(self.lib.mpk_snapshot, abi.MpkWorkerState, self.num_workers)

    def event_counters(self) -> list[int]:
        return self._read(self.lib.mpk_event_counters, C.c_int64, len(self.graph.events))

    def task_progress(self) -> list[int]:
        return self._read(self.lib.mpk_task_progress, C.c_int64, len(self.graph.tasks))

    def hang_report(self) -> str:
        """The events of the running pass that never fired (with the layer and tiles waiting on each,
        and whether a producer is unfinished or a trigger was lost), then every worker: what it holds
        and, for a wait on a peer rank, who is late. Tasks are enqueued only when their event fires
        (docs/runtime.md), so a starved task is named by its event, not by a worker."""
        g, progress, counters = self.graph, self.task_progress(), self.event_counters()
        run = self.lib.mpk_iterations(self.handle) + 1        # passes completed + the stuck one
        starved = []
        for e in g.events[1:-1]:
            waiting = [g.tasks[t] for t in e.waiters if progress[t] < run]
            if not waiting or counters[e.id] >= e.num_triggers * run:  # fired, or nobody waits
                continue
            producers = [g.tasks[p] for p in g.triggers_of(e.id)]
            late = [p for p in producers if progress[p.id] < run]
            why = (f"unfinished producers: {_names(late)}" if late else f"all {len(producers)} producers "
                   f"finished ({_names(producers)}) but a trigger never arrived")
            coords = ", ".join(str(t.coord) for t in waiting[:8]) + (", ..." if len(waiting) > 8 else "")
            starved.append((bool(late), f"  not started in layer '{waiting[0].layer.name}' {coords}: event "
                            f"{e.id} never fired (counter {counters[e.id]}, needs {e.num_triggers * run}); "
                            f"{why}"))
        lines = [f"no progress for {self.watchdog_s:g} s (watchdog_s; MPK_WATCHDOG_S): the task graph is "
                 f"stuck in pass {run}", *[line for _, line in sorted(starved)[:8]]]  # lost triggers first
        for w in self.snapshot():
            state = abi.WORKER_STATES.get(w.state, str(w.state))
            if not 0 < w.task < len(g.tasks):
                lines.append(f"  worker {w.worker}: {state}, no task")
                continue
            task = g.tasks[w.task]
            line, p = f"  worker {w.worker}: {state} in layer '{task.layer.name}' task {task.coord}", w.peer
            tile, seen = f"'{task.layer.name}' tile {task.coord}", f"(counter {w.counter}, needs {w.needed})"
            if w.state == 1 and p >= 0 and w.peer_wait == abi.PEER_CONSUMED:
                line += f", waits for rank {p} to finish reading {tile} of the previous pass {seen}"
            elif w.state == 1 and p >= 0:
                line += f", waits for rank {p}'s signal on {tile} {seen}: rank {p} has not sent its part"
            elif w.state == 1 and w.event >= 0:
                line += f", waits on event {w.event} {seen}"
            lines.append(line)
        return "\n".join(lines)

    def run_task(self, position: int, seed: int = 0, tensor_ptrs: list[int] | None = None,
                 watch: tuple[int, int] | None = None, smem_fill: int = 0xFF) -> int:
        """One task alone on one block, on this thread (mpk_run_task: no scheduler, no events), on the
        tensors at `tensor_ptrs` (default: those mpk_init got). watch (CPU): (address, bytes) of memory
        whose last writer's linear thread index is returned (-1: none wrote it); smem_fill (CPU): the byte
        the block's shared memory starts with. Raises MPKRuntimeError
        naming the task's layer and grid coordinate."""
        ptrs = (C.c_void_p * len(tensor_ptrs))(*tensor_ptrs) if tensor_ptrs is not None else None
        writer = C.c_int32(-1)
        address, size = watch or (0, 0)
        status = self.lib.mpk_run_task(self.handle, position, seed, ptrs, smem_fill, address or None, size,
                                       C.byref(writer))
        if status != abi.OK:
            raise MPKRuntimeError(self.name_tasks(self.error_message()))
        return writer.value

    def finalize(self) -> None:
        if self.handle:
            self.lib.mpk_finalize(self.handle)
            self.handle = None
