"""Residual: A -> B -> C where C also reads A's output (a skip connection), as in a transformer MLP.

A: h = rmsnorm(x) (6 row tiles); B: u = linear(h, W1) (grid 4x3), then m = silu_mul(u) (g = 4,
3 row tiles); C: y = linear_with_residual(m, W2, residual=h) (grid 6x4). Each C task waits on
one event triggered by tasks of both the silu_mul layer and A. The layer kinds, in order,
match test_grid_sweep.py: both share one build.

Run: python tests/runtime_python/test_mode/test_residual.py   (or pytest this file)
"""
import sys

import pytest
import torch

from mirage.mpk import testing

graph = testing.load_reference(__file__, name="graph_checks")

DTYPE = torch.float32           # fp32: the tight budgets are what catch a dependency bug
JITTERS = [50, 51]
BATCH, HIDDEN, INTER = 12, 96, 32


def run(jitter, output_dir, dtype=DTYPE):
    pk = graph.new_pk(jitter)
    t = graph.attach(pk, dtype, testing.generator(offset=4), x=(BATCH, HIDDEN), w_norm=(HIDDEN,),
                     w1=(2 * INTER, HIDDEN), w2=(HIDDEN, INTER), out_h=(BATCH, HIDDEN),
                     out_u=(BATCH, 2 * INTER), out_m=(BATCH, INTER), out_y=(BATCH, HIDDEN))
    pk.rmsnorm_layer(input=t["x"], weight=t["w_norm"], output=t["out_h"], grid_dim=(6, 1, 1),
                     block_dim=graph.BLOCK)
    pk.linear_layer(input=t["out_h"], weight=t["w1"], output=t["out_u"], grid_dim=(4, 3, 1),
                    block_dim=graph.BLOCK)
    pk.silu_mul_layer(input=t["out_u"], output=t["out_m"], grid_dim=(4, 3, 1), block_dim=graph.BLOCK)
    pk.linear_with_residual_layer(input=t["out_m"], weight=t["w2"], residual=t["out_h"], output=t["out_y"],
                                  grid_dim=(6, 4, 1), block_dim=graph.BLOCK)
    pk.compile(output_dir=output_dir)
    a, c = pk.layers[0], pk.layers[3]
    for task in pk.graph.layer_tasks(c):
        assert graph.waits_on_layers(pk, task) == {a.name, pk.layers[2].name}, f"{task.label} misses the skip"
    before = graph.snapshot(pk)
    pk()
    graph.check_graph(pk, before, f"residual[{str(dtype)[6:]},jitter={jitter}]")
    pk.finalize()
    return pk


@pytest.mark.parametrize("jitter", JITTERS)
def test_residual(jitter, tmp_path):
    run(jitter, graph.output_dir(tmp_path))


if __name__ == "__main__":
    for jitter in JITTERS:
        pk = run(jitter, graph.output_dir())
    print(f"generated code and task graph: {pk.output_files[0]}, {pk.output_files[1]}")
    print("All residual cases PASS")
    sys.exit(0)
