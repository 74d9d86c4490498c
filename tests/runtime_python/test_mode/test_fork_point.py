"""Fork point: one producer layer, two consumer layers reading its output with other tile splits.

rmsnorm(x) -> h (4 row tiles); u = linear(h) (grid 6x2) and c = h + x (grid 6x4) both read h.
Every rmsnorm task must trigger events of both consumer layers (MPK: one trigger per task).
The layer kinds, in order, match test_diamond_fork_join.py: both share one build.

Run: python tests/runtime_python/test_mode/test_fork_point.py   (or pytest this file)
"""
import sys

import pytest
import torch

from mirage.mpk import testing

graph = testing.load_reference(__file__, name="graph_checks")

DTYPE = torch.float32           # fp32: the tight budgets are what catch a dependency bug
JITTERS = [20, 21]
BATCH, HIDDEN, OUT = 12, 96, 48


def run(jitter, output_dir, dtype=DTYPE, dispatch="event"):
    pk = graph.new_pk(jitter, dispatch=dispatch)
    t = graph.attach(pk, dtype, testing.generator(offset=1), x=(BATCH, HIDDEN), w_norm=(HIDDEN,),
                     w1=(OUT, HIDDEN), out_h=(BATCH, HIDDEN), out_u=(BATCH, OUT), out_c=(BATCH, HIDDEN))
    pk.rmsnorm_layer(input=t["x"], weight=t["w_norm"], output=t["out_h"], grid_dim=(4, 1, 1),
                     block_dim=graph.BLOCK)
    pk.linear_layer(input=t["out_h"], weight=t["w1"], output=t["out_u"], grid_dim=(6, 2, 1),
                    block_dim=graph.BLOCK)
    pk.elementwise_add_layer(input_a=t["out_h"], input_b=t["x"], output=t["out_c"], grid_dim=(6, 4, 1),
                             block_dim=graph.BLOCK)
    pk.compile(output_dir=output_dir)
    branches = {pk.layers[1].name, pk.layers[2].name}
    for task in pk.graph.layer_tasks(pk.layers[0]):
        assert graph.consumers_of(pk, task) == branches, f"{task.label} does not feed both branches"
    before = graph.snapshot(pk)
    pk()
    graph.check_graph(pk, before, f"fork[{str(dtype)[6:]},jitter={jitter}]")
    pk.finalize()
    return pk


@pytest.mark.parametrize("dispatch", graph.DISPATCH)
@pytest.mark.parametrize("jitter", JITTERS)
def test_fork_point(jitter, dispatch, tmp_path):
    run(jitter, graph.output_dir(tmp_path), dispatch=dispatch)


if __name__ == "__main__":
    for jitter in JITTERS:
        pk = run(jitter, graph.output_dir())
    print(f"generated code and task graph: {pk.output_files[0]}, {pk.output_files[1]}")
    print("All fork-point cases PASS")
    sys.exit(0)
