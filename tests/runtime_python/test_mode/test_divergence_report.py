"""Divergence report: with a fault in the middle of the Qwen3 MLP chain, testing names the
first divergent layer in topological order, the grid coordinates of its bad tiles and the
worst element.

The chain (small sizes: hidden 256, intermediate 384, batch 4, fp32): shuffle(gate, up) ->
linear (grid 2g) -> silu_mul (grid g) -> linear_with_residual (grid 8). Each layer's
reference is applied to the inputs the kernel gave it (graph_checks.reference_and_budget),
so the report points at the layer where the error starts.

Run: python tests/runtime_python/test_mode/test_divergence_report.py   (or pytest this file)
"""
import pytest
import torch

from mirage.mpk import testing
from mirage.mpk.faults import Fault

graph = testing.load_reference(__file__, name="graph_checks")

BATCH, HIDDEN, INTER, GROUPS = 4, 256, 384, 6


def run_chain(fault=None):
    gen = testing.generator(offset=31)
    pk = graph.new_pk(5, fault=fault)
    t = graph.attach(pk, torch.float32, gen, x=(BATCH, HIDDEN), w_gate=(INTER, HIDDEN), w_up=(INTER, HIDDEN),
                     w_down=(HIDDEN, INTER), residual=(BATCH, HIDDEN), out_mid=(BATCH, 2 * INTER),
                     out_silu=(BATCH, INTER), out_mlp=(BATCH, HIDDEN))
    w_gatedup = pk.shuffle_tensors(inputs=[t["w_gate"], t["w_up"]], shuffled_dim=0, num_groups=GROUPS,
                                   name="w_gatedup")
    pk.linear_layer(input=t["x"], weight=w_gatedup, output=t["out_mid"], grid_dim=(2 * GROUPS, 1, 1),
                    block_dim=graph.BLOCK)
    pk.silu_mul_layer(input=t["out_mid"], output=t["out_silu"], grid_dim=(GROUPS, 1, 1),
                      block_dim=graph.BLOCK)
    pk.linear_with_residual_layer(input=t["out_silu"], weight=t["w_down"], residual=t["residual"],
                                  output=t["out_mlp"], grid_dim=(8, 1, 1), block_dim=graph.BLOCK)
    pk.compile()
    pk()
    references, tolerances = {}, {}
    for layer in pk.layers:
        ins = {acc.role: pk.get_tensor(acc.tensor.name) for acc in layer.inputs}
        out = next(acc.tensor.name for acc in layer.outputs if acc.written)
        references[out], tolerances[out] = graph.reference_and_budget(layer, ins)
    pk.finalize()
    return pk, references, tolerances


def test_clean_chain_has_no_divergence():
    pk, refs, tols = run_chain()
    assert testing.first_divergence(pk, refs, tols) is None
    testing.assert_no_divergence(pk, refs, tols)


def test_fault_in_the_middle_layer_is_located():
    # silu_mul task (4, 0, 0) writes out_silu[:, 256:320]; element 70 of its 4x64 tile is (1, 262)
    pk, refs, tols = run_chain(Fault("perturb", "silu_mul_1", (4, 0, 0), amount=1e-3, element=70))
    report = testing.first_divergence(pk, refs, tols)
    print(f"DIVERGENCE {report}")
    assert report is not None
    lines = report.splitlines()
    assert lines[0] == "first divergent layer: 'silu_mul_1' (the 1 compared output(s) before it agree)"
    assert lines[1] == "  output 'out_silu' (float32, (4, 384)): 1 / 1536 elements outside tolerance"
    assert lines[2] == "  bad tiles (grid coordinate: bad/total): (4, 0, 0): 1/256"
    assert lines[3].startswith("  worst element (1, 262): actual ")
    with pytest.raises(AssertionError, match="first divergent layer: 'silu_mul_1'"):
        testing.assert_no_divergence(pk, refs, tols)


def test_pure_chain_references_also_flag_the_later_layers():
    """With references composed from the graph inputs (not the kernel's intermediates), the
    layers after the fault diverge too; the report lists them after the first one."""
    pk, refs, tols = run_chain(Fault("perturb", "silu_mul_1", (4, 0, 0), amount=1.0, element=70))
    _, clean_refs, _ = run_chain()
    chain_refs = dict(refs)
    chain_refs["out_mlp"] = clean_refs["out_mlp"]      # the downstream reference of the clean chain
    report = testing.first_divergence(pk, chain_refs, tols)
    print(f"DIVERGENCE {report}")
    assert report.startswith("first divergent layer: 'silu_mul_1'")
    assert report.endswith("later layers that diverge too: linear_with_residual_2")


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q", "-s"]))
