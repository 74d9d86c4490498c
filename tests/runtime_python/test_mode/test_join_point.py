"""Join point: elementwise_add of two rmsnorms whose row tiles differ (4 and 3 tiles).

Every add task (grid 6x2) waits on one event triggered by tasks of both rmsnorm layers
(MPK: one dependent event per producer layer).

Run: python tests/runtime_python/test_mode/test_join_point.py   (or pytest this file)
"""
import sys

import pytest
import torch

from mirage.mpk import testing

graph = testing.load_reference(__file__, name="graph_checks")

DTYPE = torch.float32           # fp32: the tight budgets are what catch a dependency bug
JITTERS = [30, 31]
BATCH, HIDDEN = 12, 96


def run(jitter, output_dir, dtype=DTYPE, dispatch="event"):
    pk = graph.new_pk(jitter, dispatch=dispatch)
    t = graph.attach(pk, dtype, testing.generator(offset=2), x1=(BATCH, HIDDEN), x2=(BATCH, HIDDEN),
                     w_a=(HIDDEN,), w_b=(HIDDEN,), out_a=(BATCH, HIDDEN), out_b=(BATCH, HIDDEN),
                     out_y=(BATCH, HIDDEN))
    pk.rmsnorm_layer(input=t["x1"], weight=t["w_a"], output=t["out_a"], grid_dim=(4, 1, 1),
                     block_dim=graph.BLOCK)
    pk.rmsnorm_layer(input=t["x2"], weight=t["w_b"], output=t["out_b"], grid_dim=(3, 1, 1),
                     block_dim=graph.BLOCK)
    pk.elementwise_add_layer(input_a=t["out_a"], input_b=t["out_b"], output=t["out_y"], grid_dim=(6, 2, 1),
                             block_dim=graph.BLOCK)
    pk.compile(output_dir=output_dir)
    producers = {pk.layers[0].name, pk.layers[1].name}
    for task in pk.graph.layer_tasks(pk.layers[2]):
        assert graph.waits_on_layers(pk, task) == producers, f"{task.label} does not wait on both rmsnorms"
    before = graph.snapshot(pk)
    pk()
    graph.check_graph(pk, before, f"join[{str(dtype)[6:]},jitter={jitter}]")
    pk.finalize()
    return pk


@pytest.mark.parametrize("dispatch", graph.DISPATCH)
@pytest.mark.parametrize("jitter", JITTERS)
def test_join_point(jitter, dispatch, tmp_path):
    run(jitter, graph.output_dir(tmp_path), dispatch=dispatch)


if __name__ == "__main__":
    for jitter in JITTERS:
        pk = run(jitter, graph.output_dir())
    print(f"generated code and task graph: {pk.output_files[0]}, {pk.output_files[1]}")
    print("All join-point cases PASS")
    sys.exit(0)
