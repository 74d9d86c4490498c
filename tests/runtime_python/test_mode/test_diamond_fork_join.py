"""Diamond: rmsnorm forks into two linears with different grids, which join in an elementwise_add.

x -> rmsnorm (4 row tiles) -> h;  p = linear(h, W1) (grid 8x3);  q = linear(h, W2) (grid 3x2);
y = p + q (grid 4x6). Each tile split differs from its neighbours', so tile-level events are
many-to-many at both the fork and the join.

Run: python tests/runtime_python/test_mode/test_diamond_fork_join.py   (or pytest this file)
"""
import sys

import pytest
import torch

from mirage.mpk import testing

graph = testing.load_reference(__file__, name="graph_checks")

DTYPE = torch.float32           # fp32: the tight budgets are what catch a dependency bug
JITTERS = [40, 41]
BATCH, HIDDEN = 12, 96


def run(jitter, output_dir, dtype=DTYPE, dispatch="event"):
    pk = graph.new_pk(jitter, dispatch=dispatch)
    t = graph.attach(pk, dtype, testing.generator(offset=3), x=(BATCH, HIDDEN), w_norm=(HIDDEN,),
                     w1=(HIDDEN, HIDDEN), w2=(HIDDEN, HIDDEN), out_h=(BATCH, HIDDEN), out_p=(BATCH, HIDDEN),
                     out_q=(BATCH, HIDDEN), out_y=(BATCH, HIDDEN))
    pk.rmsnorm_layer(input=t["x"], weight=t["w_norm"], output=t["out_h"], grid_dim=(4, 1, 1),
                     block_dim=graph.BLOCK)
    pk.linear_layer(input=t["out_h"], weight=t["w1"], output=t["out_p"], grid_dim=(8, 3, 1),
                    block_dim=graph.BLOCK)
    pk.linear_layer(input=t["out_h"], weight=t["w2"], output=t["out_q"], grid_dim=(3, 2, 1),
                    block_dim=graph.BLOCK)
    pk.elementwise_add_layer(input_a=t["out_p"], input_b=t["out_q"], output=t["out_y"], grid_dim=(4, 6, 1),
                             block_dim=graph.BLOCK)
    pk.compile(output_dir=output_dir)
    norm, left, right, join = pk.layers
    branches = {left.name, right.name}
    for task in pk.graph.layer_tasks(norm):
        assert graph.consumers_of(pk, task) == branches, f"{task.label}: the fork misses a branch"
    for task in pk.graph.layer_tasks(join):
        assert graph.waits_on_layers(pk, task) == branches, f"{task.label}: the join misses a branch"
    before = graph.snapshot(pk)
    pk()
    graph.check_graph(pk, before, f"diamond[{str(dtype)[6:]},jitter={jitter}]")
    pk.finalize()
    return pk


@pytest.mark.parametrize("dispatch", graph.DISPATCH)
@pytest.mark.parametrize("jitter", JITTERS)
def test_diamond_fork_join(jitter, dispatch, tmp_path):
    run(jitter, graph.output_dir(tmp_path), dispatch=dispatch)


if __name__ == "__main__":
    for jitter in JITTERS:
        pk = run(jitter, graph.output_dir())
    print(f"generated code and task graph: {pk.output_files[0]}, {pk.output_files[1]}")
    print("All diamond fork-join cases PASS")
    sys.exit(0)
