"""What an MPK user's file relies on: pk.run(), positional layer arguments in MPK's order,
identity's grid.x splitting the last dim and its dependent_tensor, stable task types, per-task
integer params in the JSON, finalize on collection and as a context manager, and a variant the
module lacks failing the launch. (MPK's own test-mode files: scripts/run_mpk_testmode_files.py.)

Run: pytest tests/runtime_python/test_mode/test_mpk_compat.py -s
"""
import gc
import json

import pytest
import torch

from mirage.mpk import layers, tasktable, testing
from mirage.mpk.errors import MPKRuntimeError
from mirage.mpk.persistent_kernel import PersistentKernel

BLOCK = (128, 1, 1)
F32 = torch.float32


def rmsnorm_identity(pk, positional: bool, gen):
    """rmsnorm (grid 2) -> identity tiled by columns (MPK's grid.x), as keywords or positionally."""
    x = pk.attach_input(testing.randn((4, 96), F32, gen), name="x")
    w = pk.attach_input(testing.randn((96,), F32, gen), name="w")
    out = pk.attach_input(torch.zeros(4, 96), name="out")
    y = pk.new_tensor((4, 96), dtype=F32, name="y")
    if positional:
        pk.rmsnorm_layer(x, w, y, (2, 1, 1), BLOCK)
        pk.identity_layer(y, out, (4, 1, 1), BLOCK)
    else:
        pk.rmsnorm_layer(input=x, weight=w, output=y, grid_dim=(2, 1, 1), block_dim=BLOCK)
        pk.identity_layer(input=y, output=out, grid_dim=(4, 1, 1), block_dim=BLOCK)
    return x.data, w.data, out.data


def test_positional_arguments_build_the_same_graph_and_run_tiles_by_columns(tmp_path):
    docs = []
    for positional in (False, True):
        pk = PersistentKernel(**testing.cpu_config(jitter_seed=3))
        x, w, out = rmsnorm_identity(pk, positional, testing.generator(offset=5))
        pk.compile(output_dir=str(tmp_path / str(positional)))
        pk.run()                                  # MPK's newer spelling of pk()
        ref = x.double() * torch.rsqrt(x.double().pow(2).mean(-1, keepdim=True) + 1e-6) * w.double()
        testing.check_output(f"compat.out[positional={positional}]", out, ref, testing.tol_rmsnorm(F32, 96),
                             pk.layers[1].checks)
        with open(pk.output_files[1]) as f:
            docs.append(json.load(f))
        pk.finalize()
    assert docs[0] == docs[1]
    ident = [t for t in docs[0]["all_tasks"] if t["layer"] == "identity_1"]
    # grid.x = 4 splits the 96 columns: each task copies all 4 rows x 24 columns at byte 24 * 4 * x
    assert [(t["grid_coord"][0], t["outputs"][0]["dims"], t["outputs"][0]["offset"]) for t in ident] == \
        [(i, [4, 24], 96 * i) for i in range(4)]
    # each column tile needs both rmsnorm row tiles: one event with 2 triggers, shared by all 4
    events = {t["dependent_event"] for t in ident}
    assert len(events) == 1 and docs[0]["all_events"][events.pop()]["num_triggers"] == 2
    print("COMPAT positional == keyword graph; identity grid.x=4 splits the last dim into 24-column tiles "
          "PASS")


def test_identity_dependent_tensor_orders_without_being_read():
    """MPK's keyword: the copy waits for every writer of dependent_tensor; without it, it waits for none."""
    for with_dep in (False, True):
        gen = testing.generator(offset=8)
        pk = PersistentKernel(**testing.cpu_config(jitter_seed=4))
        x = pk.attach_input(testing.randn((4, 8), F32, gen), name="x")
        w = pk.attach_input(testing.randn((8,), F32, gen), name="w")
        d = pk.attach_input(torch.zeros(4, 8), name="d")
        src, out = testing.randn((2, 6), F32, gen), torch.zeros(2, 6)
        src_d, out_d = pk.attach_input(src, name="src"), pk.attach_input(out, name="out")
        pk.rmsnorm_layer(x, w, d, (4, 1, 1), BLOCK)
        pk.identity_layer(src_d, out_d, (3, 2, 1), BLOCK, dependent_tensor=d if with_dep else None)
        pk.compile()
        rms = {t.id for t in pk.graph.layer_tasks(pk.layers[0])}
        for task in pk.graph.layer_tasks(pk.layers[1]):
            waits = set(pk.graph.triggers_of(task.event)) if task.event > 0 else set()
            assert waits == (rms if with_dep else set()), (task.label, waits)
        pk()
        testing.assert_equal(f"compat.identity_dependent[{with_dep}]", out, src)
        pk.finalize()
    print("COMPAT identity dependent_tensor: each of 6 tasks waits for all 4 rmsnorm tasks; without it, none "
          "PASS")


def test_task_types_are_stable_per_layer_kind(tmp_path):
    """Like MPK's TaskType: a kind's number does not depend on the other layers of the graph."""
    types = {}
    for stem in ("rmsnorm", "linear", "linear_with_residual", "silu_mul", "identity", "elementwise_add",
                 "tensor_init", "allreduce"):
        types[stem] = layers.task_type_of(stem)
    assert len(set(types.values())) == len(types) and min(types.values()) >= 100, types
    # MPK's numbers (runtime_header.h TaskType) where MPK has the task
    assert (types["rmsnorm"], types["linear"], types["identity"], types["linear_with_residual"]) == \
        (119, 120, 121, 108)
    seen = []
    for with_linear in (False, True):
        pk = PersistentKernel(test_mode=True, num_workers=2)
        rmsnorm_identity(pk, False, testing.generator())
        if with_linear:
            W = pk.attach_input(torch.randn(8, 96), name="W")
            z = pk.attach_input(torch.zeros(4, 8), name="z")
            pk.linear_layer(pk.tensors["out"], W, z, (2, 1, 1), BLOCK)
        pk.compile(output_dir=str(tmp_path / str(with_linear)))
        with open(pk.output_files[1]) as f:
            seen.append({t["layer"]: t["task_type"] for t in json.load(f)["all_tasks"][1:]})
        pk.finalize()
    assert seen[0]["rmsnorm_0"] == seen[1]["rmsnorm_0"] == 119 and seen[1]["linear_2"] == 120
    print(f"COMPAT task types {types} stable across graphs PASS")


def test_per_task_integer_params_are_in_the_json(tmp_path):
    """Two allreduces sharing one buffer: each task's (slot, use, uses per pass) is in the JSON."""
    pk = PersistentKernel(test_mode=True, num_workers=2)
    x, out = testing.randn((2, 12), F32, testing.generator(offset=9)), torch.zeros(2, 12)
    mid = pk.new_tensor((2, 12), dtype=F32, name="mid")
    buf = pk.new_tensor((1, 2, 12), dtype=F32, name="buf", io_category="nvshmem_tensor")
    pk.allreduce_layer(pk.attach_input(x, name="x"), buf, mid, (3, 1, 1), BLOCK)
    pk.allreduce_layer(mid, buf, pk.attach_input(out, name="out"), (3, 1, 1), BLOCK)
    pk.compile(output_dir=str(tmp_path))
    with open(pk.output_files[1]) as f:
        tasks = json.load(f)["all_tasks"][1:]
    got = [(t["layer"], t["iparams"]) for t in tasks]
    assert got == [(f"allreduce_{layer}", [slot, layer, 2]) for layer in (0, 1) for slot in range(3)], got
    assert [list(t.iparams) for t in pk.graph.tasks[1:]] == [t["iparams"] for t in tasks]   # what ran
    pk()
    testing.assert_equal("compat.allreduce_one_rank", out, x)
    pk.finalize()
    print(f"COMPAT allreduce iparams in the JSON: {got} PASS")


def test_finalize_on_collection_and_as_context_manager():
    gen = testing.generator(offset=2)
    with PersistentKernel(**testing.cpu_config(jitter_seed=None, num_workers=4)) as pk:
        rmsnorm_identity(pk, True, gen)
        pk.compile()
        pk()
        rt = pk._runtime
        assert rt.handle
    assert rt.handle is None and pk._runtime is None
    with pytest.raises(RuntimeError, match=r"pk\(\) called after finalize\(\)"):
        pk()
    pk = PersistentKernel(**testing.cpu_config(jitter_seed=None, num_workers=4))
    rmsnorm_identity(pk, True, gen)
    pk.compile()
    pk()
    rt = pk._runtime
    assert rt.handle
    del pk
    gc.collect()
    assert rt.handle is None                    # mpk_finalize ran: the module handle is freed
    print("COMPAT a with-block and garbage collection each free the runtime's handle PASS")


def test_a_variant_the_module_lacks_fails_the_launch(monkeypatch):
    """The generated dispatcher's default case is an error naming the task, not a silent no-op."""
    real = tasktable.TaskTable.__init__

    def bad_variant(table, graph, variants):
        real(table, graph, variants)
        victim = next(t for t in graph.tasks[1:] if t.layer.kind == "identity" and t.coord == (1, 0, 0))
        table.tasks[victim.id]["variant"] = 57

    monkeypatch.setattr(tasktable.TaskTable, "__init__", bad_variant)
    pk = PersistentKernel(**testing.cpu_config(jitter_seed=None))
    rmsnorm_identity(pk, True, testing.generator())
    pk.compile()
    with pytest.raises(MPKRuntimeError) as e:
        pk()
    msg = str(e.value)
    print(f"COMPAT unknown variant -> {msg}")
    assert "= 'identity_1'(1, 0, 0) has variant 57, which this module's dispatcher does not have" in msg, msg
    pk.finalize()


def test_mpk_s_page_snapshot_meta_tensor_is_accepted():
    """MPK allocates meta_tensors["paged_kv_indices_snapshot"] (max_num_pages,) int32; files may pass it."""
    snap = torch.empty(3, dtype=torch.int32)
    pk = PersistentKernel(**testing.cpu_config(jitter_seed=None, max_num_pages=3,
                                               meta_tensors={"paged_kv_indices_snapshot": snap}))
    rmsnorm_identity(pk, True, testing.generator())
    pk.compile()
    pk()
    assert pk.get_tensor("paged_kv_indices_snapshot") is snap
    pk.finalize()
    wrong = {"paged_kv_indices_snapshot": torch.empty(4, dtype=torch.int32)}
    bad = PersistentKernel(**testing.cpu_config(jitter_seed=None, max_num_pages=3, meta_tensors=wrong))
    rmsnorm_identity(bad, True, testing.generator())
    with pytest.raises(ValueError, match=r"meta tensor 'paged_kv_indices_snapshot' has shape \(4,\), "
                                         r"expected \(3,\)"):
        bad.compile()
    print("COMPAT paged_kv_indices_snapshot accepted and checked PASS")
