"""Graph shapes MPK rejects ("case 2/3": a task that would need two waits or two triggers) run here.

MPK gives each task one dependent event and one trigger event, and aborts compilation when a
layer is both a join and a fork consumer (case 2) or both a fork and a join producer (case 3).
Here a task waits on one event whose trigger set is its whole dependency set and may trigger
up to 8 events, so these shapes build, verify and compute the right values. Each case first
asserts the graph really has the shape (so it cannot drift into an easy one), then checks
every layer against its reference. All cases use the variants {rmsnorm, linear_with_residual}
in fp32, in that order: one compile serves the file.

Run: python tests/runtime_python/test_mode/test_mpk_rejected_shapes.py   (or pytest this file)
"""
import sys

import pytest
import torch

from mirage.mpk import testing

graph = testing.load_reference(__file__, name="graph_checks")

DTYPE = torch.float32
BATCH, HIDDEN = 12, 96
BLOCK = graph.BLOCK


def _norm(pk, t, x, w, out, rows_split):
    pk.rmsnorm_layer(input=t[x], weight=t[w], output=t[out], grid_dim=(rows_split, 1, 1), block_dim=BLOCK)


def _linear_res(pk, t, x, residual, out, grid):
    pk.linear_with_residual_layer(input=t[x], weight=t["wsq"], residual=t[residual], output=t[out],
                                  grid_dim=grid + (1,), block_dim=BLOCK)


def _names(pk, *indices) -> set[str]:
    return {pk.layers[i].name for i in indices}


def _each(pk, layer_index, relation, want: set[str], what: str) -> None:
    """Every task of the layer waits on (relation='waits') or feeds ('feeds') exactly `want` layers."""
    of = graph.waits_on_layers if relation == "waits" else graph.consumers_of
    for task in pk.graph.layer_tasks(pk.layers[layer_index]):
        got = of(pk, task)
        assert got == want, f"{what}: task {task.label} {relation} {sorted(got)}, expected {sorted(want)}"
    print(f"SHAPE {what}: PASS", flush=True)


def build_case2(pk, t):
    """MPK's case 2: B is a join consumer (of L1 and M) and a fork consumer (L1 also feeds C)."""
    _norm(pk, t, "x", "w1", "out_l1", 6)                 # 0: L1
    _norm(pk, t, "x", "w2", "out_m", 6)                  # 1: M
    _linear_res(pk, t, "out_l1", "out_m", "out_b", (3, BATCH))   # 2: B, grid as MPK's test (x, batch)
    _norm(pk, t, "out_l1", "w3", "out_c", 4)             # 3: C


def expect_case2(pk):
    _each(pk, 2, "waits", _names(pk, 0, 1), "B joins L1 and M")
    _each(pk, 0, "feeds", _names(pk, 2, 3), "L1 forks to B and C")


def build_case3(pk, t):
    """MPK's case 3: L is a fork producer (J and K read it) and a join producer (J also reads Z)."""
    _norm(pk, t, "x", "w1", "out_l", 6)                  # 0: L
    _norm(pk, t, "x", "w2", "out_z", 4)                  # 1: Z
    _linear_res(pk, t, "out_l", "out_z", "out_j", (3, BATCH))    # 2: J
    _norm(pk, t, "out_l", "w3", "out_k", 3)              # 3: K


def expect_case3(pk):
    _each(pk, 0, "feeds", _names(pk, 2, 3), "L forks to J and K")
    _each(pk, 2, "waits", _names(pk, 0, 1), "J joins L and Z")


def build_tile_overlap(pk, t):
    """4 producer row tiles (3 rows) under 3 consumer row tiles (4 rows)."""
    _norm(pk, t, "x", "w1", "out_h", 4)
    _linear_res(pk, t, "out_h", "r", "out_y", (2, 3))


def expect_tile_overlap(pk):
    most_triggers, most_fan_in = graph.fan(pk)
    assert most_triggers >= 2 and most_fan_in >= 2, f"(triggers, fan-in) = {(most_triggers, most_fan_in)}"
    print(f"SHAPE a producer tile triggers {most_triggers} events and a consumer tile waits on "
          f"{most_fan_in} producer tiles: PASS", flush=True)


def build_shared_tile(pk, t):
    """A producer tile read by tiles of two consumer layers with different splits (3 and 4 row tiles)."""
    _norm(pk, t, "x", "w1", "out_h", 2)
    _norm(pk, t, "out_h", "w2", "out_a", 3)
    _linear_res(pk, t, "out_h", "r", "out_b", (2, 4))


def expect_shared_tile(pk):
    _each(pk, 0, "feeds", _names(pk, 1, 2), "every producer tile feeds both consumer layers")


def build_coarsened(pk, t):
    """A one-task producer joined with a 12-task producer: its task would trigger 12 events (cap 8)."""
    _norm(pk, t, "x", "w1", "out_a", 1)
    _norm(pk, t, "r", "w2", "out_b", BATCH)
    _linear_res(pk, t, "out_b", "out_a", "out_y", (1, BATCH))


def expect_coarsened(pk):
    assert pk.graph.coarsened == [pk.layers[2].name], f"coarsened layers: {pk.graph.coarsened}"
    print(f"SHAPE layer '{pk.layers[2].name}' coarsened to one barrier event: PASS", flush=True)


CASES = {"mpk_case2": (build_case2, expect_case2), "mpk_case3": (build_case3, expect_case3),
         "tile_overlap": (build_tile_overlap, expect_tile_overlap),
         "shared_tile": (build_shared_tile, expect_shared_tile),
         "coarsened": (build_coarsened, expect_coarsened)}


def run(case, jitter, output_dir):
    build, expect = CASES[case]
    pk = graph.new_pk(jitter)
    vec = (BATCH, HIDDEN)
    outs = {f"out_{n}": vec for n in ("l1", "m", "b", "c", "l", "z", "j", "k", "h", "y", "a")}
    t = graph.attach(pk, DTYPE, testing.generator(offset=jitter), x=vec, r=vec, w1=(HIDDEN,), w2=(HIDDEN,),
                     w3=(HIDDEN,), wsq=(HIDDEN, HIDDEN), **outs)
    build(pk, t)
    pk.compile(output_dir=output_dir)
    expect(pk)
    before = graph.snapshot(pk)
    pk()
    graph.check_graph(pk, before, f"{case}[jitter={jitter}]")
    pk.finalize()
    return pk


@pytest.mark.parametrize("case", list(CASES))
def test_mpk_rejected_shape(case, tmp_path):
    run(case, 60 + list(CASES).index(case), graph.output_dir(tmp_path))


if __name__ == "__main__":
    for i, case in enumerate(CASES):
        pk = run(case, 60 + i, graph.output_dir())
    print(f"generated code and task graph: {pk.output_files[0]}, {pk.output_files[1]}")
    print("All MPK-rejected shapes build and PASS")
    sys.exit(0)
