"""Grid sweep: one layer chain, several PersistentKernels with different grids in one process.

rmsnorm -> linear -> silu_mul -> linear_with_residual (fp32), from one task per layer to
one-row / one-column tiles. Every kernel must match the references; and since the CPU build
takes tile dims at run time, the generated source depends only on the variant set, so every
kernel after the first must be a cache hit (at most one compile for the whole sweep).

Run: python tests/runtime_python/test_mode/test_grid_sweep.py   (or pytest this file)
"""
import sys

import torch

from mirage.mpk import testing

graph = testing.load_reference(__file__, name="graph_checks")

DTYPE = torch.float32
BATCH, HIDDEN, INTER = 12, 96, 48
# (rmsnorm rows, linear (N split, rows), silu_mul (g, rows), linear_with_residual (N split, rows))
GRIDS = [
    (1, (1, 1), (1, 1), (1, 1)),           # one task per layer
    (4, (8, 1), (4, 3), (2, 2)),
    (3, (6, 2), (6, 1), (3, 4)),           # non-power-of-two splits everywhere
    (6, (2, 4), (2, 6), (32, 3)),
    (12, (24, 12), (12, 12), (96, 1)),     # one-row tiles; one-column output tiles at the end
]


def run(grids, jitter, output_dir):
    norm_rows, lin, silu, down = grids
    pk = graph.new_pk(jitter)
    t = graph.attach(pk, DTYPE, testing.generator(offset=jitter), x=(BATCH, HIDDEN), w_norm=(HIDDEN,),
                     w_up=(2 * INTER, HIDDEN), w_down=(HIDDEN, INTER), out_h=(BATCH, HIDDEN),
                     out_u=(BATCH, 2 * INTER), out_m=(BATCH, INTER), out_y=(BATCH, HIDDEN))
    pk.rmsnorm_layer(input=t["x"], weight=t["w_norm"], output=t["out_h"], grid_dim=(norm_rows, 1, 1),
                     block_dim=graph.BLOCK)
    pk.linear_layer(input=t["out_h"], weight=t["w_up"], output=t["out_u"], grid_dim=lin + (1,),
                    block_dim=graph.BLOCK)
    pk.silu_mul_layer(input=t["out_u"], output=t["out_m"], grid_dim=silu + (1,), block_dim=graph.BLOCK)
    pk.linear_with_residual_layer(input=t["out_m"], weight=t["w_down"], residual=t["x"], output=t["out_y"],
                                  grid_dim=down + (1,), block_dim=graph.BLOCK)
    pk.compile(output_dir=output_dir)
    before = graph.snapshot(pk)
    pk()
    graph.check_graph(pk, before, f"sweep[grids={grids},jitter={jitter}]")
    pk.finalize()
    return pk


def run_sweep(output_dir) -> list:
    pks = [run(grids, 70 + i, output_dir) for i, grids in enumerate(GRIDS)]
    compiles = sum(not pk.build.hit for pk in pks)
    print(f"GRID_SWEEP {len(pks)} kernels, {compiles} compile(s), then cache hits: "
          f"{[pk.build.hit for pk in pks]}", flush=True)
    assert all(pk.build.hit for pk in pks[1:]), "a later grid recompiled: the source must not depend on dims"
    assert len({pk.build.key for pk in pks}) == 1, "the grids produced different generated sources"
    return pks


def test_grid_sweep(tmp_path):
    run_sweep(graph.output_dir(tmp_path))


if __name__ == "__main__":
    pk = run_sweep(graph.output_dir())[-1]
    print(f"generated code and task graph: {pk.output_files[0]}, {pk.output_files[1]}")
    print("All grid-sweep kernels PASS")
    sys.exit(0)
