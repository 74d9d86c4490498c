"""Fault injection for negative controls: prove each check catches the fault it exists for.

    PersistentKernel(..., fault=Fault("perturb", "linear_1", (0, 0, 0), amount=1e-3))
    MPK_FAULT=perturb:linear_1:0,0,0:1e-3      (kind:layer:x,y,z[:amount[:element[:rank]]])

kinds: skip        the task's kernel does not run (its events still fire)
       perturb     output 0's element `element` (row-major in the tile) += amount
       no_trigger  the task never triggers its events (consumers starve: the watchdog fires)
       no_signal   a cross-rank task (allreduce) signals no peer but itself: a stalled rank
                   (the peers' watchdogs fire, naming it)
       overrun     after the kernel, `amount` elements (at least 1) of output 0's type are written
                   `element` elements past the end of output 0's tile (0: right after it)
       underrun    the same, ending `element` elements before the tile's first element
       overread    the same as overrun, read instead of written
                   (past the tensor's end, for the last tile: the memory-safety negative controls)
       wrong_tile  the task's output tiles move to its neighbour's (the previous one for the
                   last task of the layer); its own tile stays unwritten
       drop_dependency  the task waits on nothing
The first seven run in the runtime and are compiled in only when a fault is requested
(-DMPK_FAULT_INJECTION, a separate cache entry); the last two edit the task table.
`rank` limits a fault to one rank of a multi-rank job (None: every rank).
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from . import abi

RUNTIME_KINDS = {"skip": abi.FAULT_SKIP, "perturb": abi.FAULT_PERTURB, "no_trigger": abi.FAULT_NO_TRIGGER,
                 "no_signal": abi.FAULT_NO_SIGNAL, "overrun": abi.FAULT_OVERRUN,
                 "underrun": abi.FAULT_UNDERRUN, "overread": abi.FAULT_OVERREAD}
TABLE_KINDS = ("wrong_tile", "drop_dependency")


@dataclass(frozen=True)
class Fault:
    kind: str
    layer: str
    task: tuple[int, int, int] = (0, 0, 0)
    amount: float = 0.0
    element: int = 0
    rank: int | None = None

    def __post_init__(self):
        if self.kind not in RUNTIME_KINDS and self.kind not in TABLE_KINDS:
            raise ValueError(f"fault kind {self.kind!r}: expected one of "
                             f"{sorted(RUNTIME_KINDS) + list(TABLE_KINDS)}")


def from_env() -> Fault | None:
    raw = os.environ.get("MPK_FAULT", "")
    if not raw:
        return None
    parts = raw.split(":")
    try:
        coord = tuple(int(c) for c in parts[2].split(",")) if len(parts) > 2 else (0, 0, 0)
        coord = coord + (0,) * (3 - len(coord))
        amount = float(parts[3]) if len(parts) > 3 else 0.0
        element = int(parts[4]) if len(parts) > 4 else 0
        rank = int(parts[5]) if len(parts) > 5 and parts[5] != "" else None
        return Fault(parts[0], parts[1], coord, amount, element, rank)
    except (IndexError, ValueError) as e:
        raise ValueError(f"MPK_FAULT={raw!r}: expected kind:layer:x,y,z[:amount[:element[:rank]]] "
                         f"({e})") from None


def locate(fault: Fault, graph) -> int:
    """The faulted task's id, with the fault checked against the graph."""
    tasks = [t for t in graph.tasks[1:] if t.layer.name == fault.layer]
    if not tasks:
        raise ValueError(f"fault: no layer named '{fault.layer}'; layers: "
                         f"{[layer.name for layer in graph.layers]}")
    task = next((t for t in tasks if t.coord == tuple(fault.task)), None)
    if task is None:
        raise ValueError(f"fault: layer '{fault.layer}' has grid {tasks[0].layer.grid}; no task {fault.task}")
    if fault.kind == "wrong_tile" and len(tasks) == 1:
        raise ValueError(f"fault wrong_tile: layer '{fault.layer}' has a grid of 1, so there is no "
                         f"neighbouring tile to write")
    if fault.kind == "no_signal" and task.layer.signal_role is None:
        raise ValueError(f"fault no_signal: layer '{fault.layer}' signals no other rank (allreduce "
                         f"layers do)")
    if fault.kind in ("overrun", "underrun", "overread") and (fault.element < 0 or not task.outputs):
        raise ValueError(f"fault {fault.kind}: needs an output tile and element >= 0 (the gap in elements), "
                         f"got element {fault.element}")
    if fault.kind == "perturb":
        n = 1
        for d in task.outputs[0].dims:
            n *= d
        if not 0 <= fault.element < n:
            raise ValueError(f"fault perturb: element {fault.element} is outside output tile of {n} elements")
    return task.id


def neighbour(graph, task_id: int) -> int:
    """The next task of the same layer, or the previous one for the last."""
    layer = graph.tasks[task_id].layer
    nxt = task_id + 1
    return nxt if nxt < len(graph.tasks) and graph.tasks[nxt].layer is layer else task_id - 1
