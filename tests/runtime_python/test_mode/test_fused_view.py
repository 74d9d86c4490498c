"""fuse_tensors: the [g0: in0 chunk, in1 chunk][g1: ...] order as a virtual view, no copy.

Two linears read the same gate/up weights: one through shuffle_tensors (a physical copy made
before the run), one through fuse_tensors (tiles resolved to the source tensors). Their
outputs must be bit-identical and match the reference. A third case fuses tensors that
earlier layers compute (which a shuffle refuses): the consumer's tasks must wait for exactly
the producer tasks that write the rows its tile maps to.

Run: python tests/runtime_python/test_mode/test_fused_view.py   (or pytest this file)
"""
import pytest
import torch

from mirage.mpk import testing

graph = testing.load_reference(__file__, name="graph_checks")
REFS = graph.REFS

BATCH, HIDDEN, INTER, GROUPS = 4, 64, 96, 3       # chunk = 32 rows of each weight per group


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
def test_fused_equals_shuffled(dtype):
    gen = testing.generator(offset=12)
    pk = graph.new_pk(17)
    t = graph.attach(pk, dtype, gen, x=(BATCH, HIDDEN), w_gate=(INTER, HIDDEN), w_up=(INTER, HIDDEN),
                     out_s=(BATCH, 2 * INTER), out_f=(BATCH, 2 * INTER))
    shuffled = pk.shuffle_tensors([t["w_gate"], t["w_up"]], shuffled_dim=0, num_groups=GROUPS, name="w_s")
    fused = pk.fuse_tensors([t["w_gate"], t["w_up"]], fused_dim=0, num_groups=GROUPS, name="w_f")
    for w, out in ((shuffled, t["out_s"]), (fused, t["out_f"])):
        pk.linear_layer(input=t["x"], weight=w, output=out, grid_dim=(2 * GROUPS, 1, 1),
                        block_dim=graph.BLOCK)
    pk.compile()
    pk()
    x, wg, wu = (pk.get_tensor(n) for n in ("x", "w_gate", "w_up"))
    m = INTER // GROUPS
    order = torch.cat([torch.cat([wg[g * m:(g + 1) * m], wu[g * m:(g + 1) * m]]) for g in range(GROUPS)])
    expected = REFS["linear"].linear(x, order)
    tol = testing.tol_linear(dtype, HIDDEN, graph.abs_product(x, order))
    label = f"fused_view[{str(dtype)[6:]}]"
    testing.check_output(f"{label}.shuffled", pk.get_tensor("out_s"), expected, tol, pk=pk)
    testing.check_output(f"{label}.fused", pk.get_tensor("out_f"), expected, tol, pk=pk)
    testing.assert_equal(f"{label}.fused_vs_shuffled_bits", pk.get_tensor("out_f").view(torch.uint8),
                         pk.get_tensor("out_s").view(torch.uint8))
    pk.finalize()


def test_fused_view_of_computed_tensors_orders_by_rows():
    gen = testing.generator(offset=13)
    pk = graph.new_pk(23)
    t = graph.attach(pk, torch.float32, gen, x=(BATCH, HIDDEN), a=(INTER, HIDDEN), b=(INTER, HIDDEN),
                     out_a=(INTER, HIDDEN), out_b=(INTER, HIDDEN), out=(BATCH, 2 * INTER))
    # grid.y splits an identity's rows (grid.x its last dim): 6 row tiles of 16 rows each
    pk.identity_layer(input=t["a"], output=t["out_a"], grid_dim=(1, 6, 1), block_dim=graph.BLOCK)
    pk.identity_layer(input=t["b"], output=t["out_b"], grid_dim=(1, 6, 1), block_dim=graph.BLOCK)
    fused = pk.fuse_tensors([t["out_a"], t["out_b"]], fused_dim=0, num_groups=GROUPS, name="w_ab")
    pk.linear_layer(input=t["x"], weight=fused, output=t["out"], grid_dim=(2 * GROUPS, 1, 1),
                    block_dim=graph.BLOCK)
    pk.compile()
    # linear task j reads chunk j: group j // 2, source a (j even) or b (j odd), rows 32*(j//2)..;
    # the identity tiles are 16 rows, so exactly two producer tasks of that source layer
    for task in pk.graph.layer_tasks(pk.layers[2]):
        j = task.coord[0]
        src = pk.layers[j % 2]
        want = {f"{src.name}{(0, 2 * (j // 2) + k, 0)}" for k in range(2)}
        got = {pk.graph.tasks[p].label for p in pk.graph.triggers_of(task.event)}
        assert got == want, (task.label, got, want)
    print(f"FUSED_DEPS each of {2 * GROUPS} linear tasks waits on exactly the 2 tasks writing its chunk PASS")
    before = graph.snapshot(pk)
    pk()
    a, b, x = before["a"], before["b"], before["x"]
    m = INTER // GROUPS
    order = torch.cat([torch.cat([a[g * m:(g + 1) * m], b[g * m:(g + 1) * m]]) for g in range(GROUPS)])
    testing.check_output("fused_computed.out", pk.get_tensor("out"), REFS["linear"].linear(x, order),
                         testing.tol_linear(torch.float32, HIDDEN, graph.abs_product(x, order)), pk=pk)
    pk.finalize()


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q", "-s"]))
