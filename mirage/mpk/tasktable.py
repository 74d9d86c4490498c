"""The runtime's task and event tables as numpy structured arrays, built a layer and a column at a time.

The rows have the layout of abi.MpkTask / abi.MpkEvent (numpy reads it from the ctypes twins of
csrc/runtime/abi.h, so the layout abi.check_layout verifies is the one used), and mpk_init receives
the arrays' memory as it is. The task-graph JSON (codegen.task_graph_json) is read from these same
rows, so what is written and what runs cannot drift apart (tests/unit/test_task_table.py).
"""
from __future__ import annotations

from itertools import chain, groupby

import numpy as np

from . import abi
from .graph import Graph, Task
from .tensor import DTensor

TASK_ROW, EVENT_ROW = np.dtype(abi.MpkTask), np.dtype(abi.MpkEvent)
PAD = [0] * abi.MAX_TRIGGERS


class TaskTable:
    """Rows of the tasks and events of one verified graph, for one kernel's variant numbering."""

    def __init__(self, graph: Graph, variants):
        self.variants = variants
        self.tasks = np.zeros(len(graph.tasks), TASK_ROW)
        self.tasks[0]["task_type"], self.tasks[0]["dependent_event"] = abi.TASK_TERMINATE, -1
        self.tensors: dict[int, DTensor] = {}           # table id -> tensor (names for the JSON)
        # each layer's tasks are one block of ids (graph.build): one block of rows
        self.blocks = [list(block) for _, block in groupby(graph.tasks[1:], key=lambda t: id(t.layer))]
        for block in self.blocks:
            self._fill(self.tasks[block[0].id:block[-1].id + 1], block)
        self.events = np.array([(abi.EVENT_TYPES[e.kind], e.num_triggers, e.first_task_id, e.last_task_id)
                                for e in graph.events], EVENT_ROW)

    def _fill(self, rows: np.ndarray, tasks: list[Task]) -> None:
        layer, first = tasks[0].layer, tasks[0]
        rows["task_type"], rows["variant"] = self.variants.task_type(layer), self.variants.of(layer)
        rows["num_inputs"], rows["num_outputs"] = len(first.inputs), len(first.outputs)
        rows["dependent_event"] = np.fromiter((t.event for t in tasks), np.int32, len(tasks))
        rows["fparams"][:, :len(layer.fparams)] = layer.fparams
        # a signal layer's iparams (slot, use, uses per pass) and Layer.task_iparams differ per task
        iparams = [t.iparams for t in tasks] if layer.signal_role or layer.task_iparams else first.iparams
        rows["iparams"][:, :len(first.iparams)] = iparams
        rows["num_triggers"] = np.fromiter((len(t.triggers) for t in tasks), np.int32, len(tasks))
        rows["trigger_events"] = [(t.triggers + PAD)[:abi.MAX_TRIGGERS] for t in tasks]
        accesses = layer.inputs + layer.outputs
        for k, slot in enumerate(zip(*(t.inputs + t.outputs for t in tasks))):
            self._fill_tiles(rows["tiles"][:, k], slot, accesses[k].tma if k < len(accesses) else None)

    def _fill_tiles(self, column: np.ndarray, tiles: tuple, tma: tuple[int, int, int] | None) -> None:
        """One tile slot of a layer: tensor ids, then dims, strides and byte offsets from the boxes, and the
        slot's tensor-map request (Access.tma)."""
        ids = np.fromiter((x.tensor.id for x in tiles), np.int32, len(tiles))
        # a fused view's tiles resolve to different source tensors: look each tensor up once
        unique, first, which = np.unique(ids, return_index=True, return_inverse=True)
        tensors = [tiles[i].tensor for i in first]
        self.tensors.update(zip(unique.tolist(), tensors))
        ndim = len(tiles[0].box[0])
        boxes = np.fromiter(chain.from_iterable(chain.from_iterable(x.box for x in tiles)), np.int64,
                            len(tiles) * 2 * ndim).reshape(len(tiles), 2, ndim)     # [task, lo / hi, dim]
        strides = np.array([t.strides for t in tensors], np.int64)[which]
        itemsize = np.array([t.dtype.itemsize for t in tensors], np.int64)[which]
        column["tensor"], column["ndim"], column["dims"][:, ndim:] = ids, ndim, 1
        column["dims"][:, :ndim], column["strides"][:, :ndim] = boxes[:, 1] - boxes[:, 0], strides
        column["offset"] = (boxes[:, 0] * strides).sum(axis=1) * itemsize
        if tma is not None:
            column["tma_rows"], column["tma_cols"], column["tma_swizzle"] = tma
            column["tma_elem_bytes"] = itemsize


def of(graph: Graph, variants) -> TaskTable:
    """The graph's table for this variant numbering, built on first use and kept on the graph until a
    runtime has copied it (Runtime.__init__): the JSON (codegen.task_graph_json) and the runtime read
    the same rows."""
    if graph.task_table is None or graph.task_table.variants is not variants:
        graph.task_table = TaskTable(graph, variants)
    return graph.task_table
