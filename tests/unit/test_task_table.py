"""task_graph_rank0.json and the task table the runtime receives agree, task by task and field by field.

Random DAGs of every layer kind (tests/unit/test_random_graphs.py's generator) are compiled with
output_dir; the bytes mpk_init receives are captured (a spy around the module's mpk_init, read
through the ctypes layout of mirage/mpk/abi.py that abi.check_layout just checked against the
module) and compared with the JSON decoded by the standard library: task types, variants, events
waited on and triggered, iparams and fparams, and every tile's tensor, byte offset, dims and
strides, then every event. The JSON is also checked against the graph (ids, layers, coordinates).
A hand-made graph adds what random DAGs lack: a fused view (one tile slot's tensor differs per
task) and two allreduce layers sharing a buffer (per-task iparams).

Negative controls: the runtime's copy drifts by one field, through the fault injection that edits
the table (drop_dependency: the event waited on; wrong_tile: output offsets) and by editing one
captured field directly; each time the comparison names that task and field.
Run: pytest tests/unit/test_task_table.py -s
"""
from __future__ import annotations

import ctypes as C
import json
import os
import random

import pytest
import torch

import mirage
from mirage.mpk import abi, testing
from mirage.mpk.faults import Fault
from mirage.mpk.persistent_kernel import PersistentKernel

HERE = os.path.dirname(os.path.abspath(__file__))
dags = testing.load_reference(os.path.join(HERE, "x.py"), name="test_random_graphs")
SEEDS = (3, 11, 29)


def compile_capturing(dag, tmp_path, monkeypatch, fault: Fault | None = None):
    """Compile the DAG (a random DAG, or a function declaring layers on a PersistentKernel) with
    output_dir; return (pk, decoded JSON, copies of the task and event rows mpk_init received)."""
    seen = {}
    real_declare = abi.declare

    def spy_declare(lib):
        real_declare(lib)
        real_init = lib.mpk_init

        def init(cfg, tasks, events, *rest):
            n_tasks, n_events = cfg._obj.num_tasks, cfg._obj.num_events
            seen["tasks"] = _copy(abi.MpkTask, tasks, n_tasks)
            seen["events"] = _copy(abi.MpkEvent, events, n_events)
            return real_init(cfg, tasks, events, *rest)
        lib.mpk_init = init
    monkeypatch.setattr(abi, "declare", spy_declare)
    pk = PersistentKernel(**testing.cpu_config(jitter_seed=None, fault=fault))
    dag(pk) if callable(dag) else dags.declare(pk, dag, dags._new_tensor)
    pk.compile(output_dir=str(tmp_path))
    with open(pk.output_files[1]) as f:
        doc = json.load(f)
    return pk, doc, seen["tasks"], seen["events"]


def _copy(struct, pointer, n: int):
    address = C.cast(pointer, C.c_void_p).value
    return (struct * n).from_buffer_copy(C.string_at(address, n * C.sizeof(struct)))


def disagreements(pk, doc: dict, tasks, events) -> list[str]:
    """Every field where the JSON and the runtime's rows differ, as 'task i: field json vs table'."""
    ids = {t.name: t.id for t in pk._table()}
    dtypes = {t.name: t.dtype.name for t in pk._table()}
    out = []
    assert len(doc["all_tasks"]) == len(tasks) and len(doc["all_events"]) == len(events)
    for i, (js, row) in enumerate(zip(doc["all_tasks"], tasks)):
        def differ(name, a, b, i=i):
            if a != b:
                out.append(f"task {i}: {name} {a} in the JSON, {b} in the table")
        triggers = list(row.trigger_events[:row.num_triggers])
        differ("task_type", js["task_type"], row.task_type)
        differ("variant", js["variant_id"], row.variant)
        differ("dependent_event", js["dependent_event"], row.dependent_event)
        differ("trigger_events", js["trigger_events"], triggers)
        differ("trigger_event", js["trigger_event"], triggers[0] if triggers else -1)
        differ("iparams", js["iparams"] + [0] * (abi.NUM_IPARAMS - len(js["iparams"])), list(row.iparams))
        differ("fparams", js["fparams"] + [0.0] * (abi.NUM_FPARAMS - len(js["fparams"])), list(row.fparams))
        differ("num_inputs", len(js["inputs"]), row.num_inputs)
        differ("num_outputs", len(js["outputs"]), row.num_outputs)
        for k, tile in enumerate(js["inputs"] + js["outputs"]):
            st, nd = row.tiles[k], len(tile["dims"])
            differ(f"tile {k} tensor", ids[tile["base_ptr"]], st.tensor)
            differ(f"tile {k} data_type", tile["data_type"], dtypes[tile["base_ptr"]])
            differ(f"tile {k} offset", tile["offset"], st.offset)
            differ(f"tile {k} ndim", nd, st.ndim)
            differ(f"tile {k} dims", tile["dims"] + [1] * (abi.MAX_DIMS - nd), list(st.dims))
            differ(f"tile {k} strides", tile["strides"] + [0] * (abi.MAX_DIMS - nd), list(st.strides))
    for i, (js, row) in enumerate(zip(doc["all_events"], events)):
        got = [row.event_type, row.num_triggers, row.first_task_id, row.last_task_id]
        want = [js["event_type"], js["num_triggers"], js["first_task_id"], js["last_task_id"]]
        if got != want:
            out.append(f"event {i}: {want} in the JSON, {got} in the table")
    return out


def matches_graph(pk, doc: dict) -> None:
    """The JSON's own fields against the graph it was written from (an independent source)."""
    for t in pk.graph.tasks[1:]:
        js = doc["all_tasks"][t.id]
        assert (js["task_id"], js["layer"], tuple(js["grid_coord"])) == (t.id, t.layer.name, t.coord)
        assert js["dependent_event"] == t.event and js["trigger_events"] == t.triggers
        assert [x["base_ptr"] for x in js["inputs"] + js["outputs"]] == \
            [x.tensor.name for x in t.inputs + t.outputs]


@pytest.mark.parametrize("seed", SEEDS)
def test_json_and_runtime_table_agree_on_a_random_graph(seed, tmp_path, monkeypatch):
    dag = dags.random_dag(seed, all_kinds=True)
    pk, doc, tasks, events = compile_capturing(dag, tmp_path, monkeypatch)
    matches_graph(pk, doc)
    problems = disagreements(pk, doc, tasks, events)
    assert not problems, f"{dag.describe()}\n" + "\n".join(problems[:20])
    tiles = sum(t.num_inputs + t.num_outputs for t in tasks)
    print(f"TABLE seed {seed}: {len(tasks)} tasks, {tiles} tiles, {len(events)} events: "
          f"JSON == runtime table PASS")
    pk.finalize()


def fused_and_signalled(pk) -> None:
    """What random DAGs lack: a fused view (tiles resolve to different source tensors, so the tensor
    ids of one tile slot differ per task) and allreduce layers sharing a buffer (per-task iparams)."""
    x = pk.attach_input(torch.randn(4, 64), name="x")
    gate, up = (pk.attach_input(torch.randn(96, 64), name=name) for name in ("gate", "up"))
    fused = pk.fuse_tensors([gate, up], fused_dim=0, num_groups=3, name="w_f")
    y, mid, out = (pk.attach_input(torch.zeros(4, 192), name=name) for name in ("y", "mid", "out"))
    pk.linear_layer(input=x, weight=fused, output=y, grid_dim=(6, 1, 1), block_dim=dags.BLOCK)
    buf = pk.new_tensor((1, 4, 192), dtype=mirage.float32, name="buf", io_category="nvshmem_tensor")
    pk.allreduce_layer(input=y, buffer=buf, output=mid, grid_dim=(4, 1, 1), block_dim=dags.BLOCK)
    pk.allreduce_layer(input=mid, buffer=buf, output=out, grid_dim=(4, 1, 1), block_dim=dags.BLOCK)


def test_json_and_runtime_table_agree_on_fused_views_and_signals(tmp_path, monkeypatch):
    pk, doc, tasks, events = compile_capturing(fused_and_signalled, tmp_path, monkeypatch)
    matches_graph(pk, doc)
    problems = disagreements(pk, doc, tasks, events)
    assert not problems, "\n".join(problems[:20])
    sources = {tasks[t.id].tiles[1].tensor for t in pk.graph.tasks[1:] if t.layer.kind == "linear"}
    uses = [list(tasks[t.id].iparams[:3]) for t in pk.graph.tasks[1:] if t.layer.kind == "allreduce"]
    assert sources == {pk.tensors["gate"].id, pk.tensors["up"].id} and [1, 0, 2] in uses and [1, 1, 2] in uses
    print(f"TABLE fused view (weight tensors {sorted(sources)}) and shared-buffer allreduce (iparams "
          f"{uses[:2]} ...): JSON == runtime table PASS")
    pk.finalize()


def _victim(dag, want) -> tuple[str, tuple[int, int, int], int]:
    """A (layer, coord, task id) of the DAG's graph for which want(task, graph) holds."""
    _, g = dags.build_graph(dag)
    task = next(t for t in g.tasks[1:] if want(t, g))
    return task.layer.name, task.coord, task.id


@pytest.mark.parametrize("kind, field", [("drop_dependency", "dependent_event"),
                                         ("wrong_tile", "offset")])
def test_a_fault_edited_runtime_table_is_reported(kind, field, tmp_path, monkeypatch):
    """Negative control: the table faults make the runtime's rows drift from the JSON by one field."""
    dag = dags.random_dag(SEEDS[0], all_kinds=True)
    if kind == "drop_dependency":
        layer, coord, victim = _victim(dag, lambda t, g: t.event > 0)
    else:
        layer, coord, victim = _victim(dag, lambda t, g: len(g.layer_tasks(t.layer)) > 1 and any(
            x.declared for x in t.outputs))
    pk, doc, tasks, events = compile_capturing(dag, tmp_path, monkeypatch, Fault(kind, layer, coord))
    problems = disagreements(pk, doc, tasks, events)
    print(f"TABLE fault {kind} on task {victim}: {problems}")
    assert problems and all(p.startswith(f"task {victim}: ") and field in p for p in problems), problems
    pk.finalize()


@pytest.mark.parametrize("field", ["variant", "trigger_events", "iparams", "tensor", "dims", "strides"])
def test_one_drifted_field_is_reported(field, tmp_path, monkeypatch):
    """Negative control: one field of one random task changed in the captured rows is found and named."""
    dag = dags.random_dag(SEEDS[1], all_kinds=True)
    pk, doc, tasks, events = compile_capturing(dag, tmp_path, monkeypatch)
    rng = random.Random(field)
    i = rng.randrange(1, len(tasks))
    row, tile = tasks[i], tasks[i].tiles[rng.randrange(tasks[i].num_inputs + tasks[i].num_outputs)]
    if field == "variant":
        row.variant += 1
    elif field == "trigger_events":
        row.trigger_events[0] += 1
    elif field == "iparams":
        row.iparams[abi.NUM_IPARAMS - 1] = 7      # a slot no layer uses: the JSON lists fewer
    elif field == "tensor":
        tile.tensor = (tile.tensor + 1) % len(pk._table())
    else:
        getattr(tile, field)[tile.ndim - 1] += 1
    problems = disagreements(pk, doc, tasks, events)
    print(f"TABLE drifted {field} of task {i}: {problems}")
    assert problems and all(p.startswith(f"task {i}: ") for p in problems), problems
    assert any(field.rstrip("s") in p for p in problems), problems
    pk.finalize()
