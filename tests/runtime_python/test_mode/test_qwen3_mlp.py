"""Qwen3-8B dense MLP at real size: gate/up linear -> silu_mul -> down linear + residual.

hidden 4096, intermediate 12288, batch 8. W_gate, W_up [12288, 4096] are interleaved with
shuffle_tensors(num_groups=g) so that each of the g silu_mul tasks finds [gate | up] in its
tile; the gate/up linear runs on 2g tasks (one chunk each), the down projection
[4096, 12288] on 64. Three checks:
  1. the shuffle is the interleave [g0: gate chunk, up chunk][g1: ...] (bit-exact);
  2. per layer: each layer against its reference applied to the kernel's own inputs, with
     that layer's budget (the tight check for bf16);
  3. end to end: the output against references composed from the graph inputs in natural
     (unshuffled) order - silu(x W_gate^T) * (x W_up^T) - so the shuffle/g coupling is
     checked too; the down layer's budget has input_rounding=dtype since it reads rounded
     intermediates (mirage.mpk.testing docstring).

Run: python tests/runtime_python/test_mode/test_qwen3_mlp.py   (or pytest this file)
"""
import sys
import time

import pytest
import torch

from mirage.mpk import testing

graph = testing.load_reference(__file__, name="graph_checks")
REFS = graph.REFS

BATCH, HIDDEN, INTER = 8, 4096, 12288
DOWN_GRID = 64
# (dtype, g): g = silu_mul tasks = num_groups of the shuffle; the gate/up linear runs on 2g tasks
CASES = [(torch.float32, 96), (torch.bfloat16, 128)]


def run(dtype, groups, jitter, output_dir, dispatch="event"):
    t0 = time.perf_counter()
    gen = testing.generator(offset=8)
    x = testing.randn((BATCH, HIDDEN), dtype, gen)
    w_gate = testing.randn((INTER, HIDDEN), dtype, gen, scale=HIDDEN ** -0.5)
    w_up = testing.randn((INTER, HIDDEN), dtype, gen, scale=HIDDEN ** -0.5)
    w_down = testing.randn((HIDDEN, INTER), dtype, gen, scale=INTER ** -0.5)
    residual = testing.randn((BATCH, HIDDEN), dtype, gen)
    mlp_mid = torch.zeros(BATCH, 2 * INTER, dtype=dtype)
    silu_out = torch.zeros(BATCH, INTER, dtype=dtype)
    mlp_out = torch.zeros(BATCH, HIDDEN, dtype=dtype)

    pk = graph.new_pk(jitter, dispatch=dispatch)
    x_dt, res_dt = pk.attach_input(x, name="x"), pk.attach_input(residual, name="residual")
    w_gate_dt, w_up_dt = pk.attach_input(w_gate, name="w_gate"), pk.attach_input(w_up, name="w_up")
    w_down_dt = pk.attach_input(w_down, name="w_down")
    mid_dt, silu_dt = pk.attach_input(mlp_mid, name="mlp_mid"), pk.attach_input(silu_out, name="silu_out")
    out_dt = pk.attach_input(mlp_out, name="mlp_out")
    w_gatedup_dt = pk.shuffle_tensors(inputs=[w_gate_dt, w_up_dt], shuffled_dim=0, num_groups=groups,
                                      name="w_gatedup")
    pk.linear_layer(input=x_dt, weight=w_gatedup_dt, output=mid_dt, grid_dim=(2 * groups, 1, 1),
                    block_dim=graph.BLOCK)
    pk.silu_mul_layer(input=mid_dt, output=silu_dt, grid_dim=(groups, 1, 1), block_dim=graph.BLOCK)
    pk.linear_with_residual_layer(input=silu_dt, weight=w_down_dt, residual=res_dt, output=out_dt,
                                  grid_dim=(DOWN_GRID, 1, 1), block_dim=graph.BLOCK)
    t1 = time.perf_counter()
    pk.compile(output_dir=output_dir)
    t2 = time.perf_counter()
    before = graph.snapshot(pk)
    pk()
    t3 = time.perf_counter()
    label = f"qwen3_mlp[{str(dtype)[6:]},g={groups},jitter={jitter},dispatch={dispatch}]"

    m = INTER // groups
    chunks = pk.get_tensor("w_gatedup").view(groups, 2, m, HIDDEN)      # [g][gate | up][m rows]
    assert torch.equal(chunks[:, 0], w_gate.view(groups, m, HIDDEN)) and \
        torch.equal(chunks[:, 1], w_up.view(groups, m, HIDDEN)), \
        f"{label}: w_gatedup is not the interleave [g0: gate chunk, up chunk][g1: ...]"
    print(f"SHUFFLE {label}: w_gatedup == [g: gate rows g*{m}.., up rows g*{m}..] for g < {groups} PASS")

    graph.check_graph(pk, before, label)

    gate = graph.by_rows(REFS["linear"].linear, x, w_gate)
    up = graph.by_rows(REFS["linear"].linear, x, w_up)
    mid = REFS["silu_mul"].silu_mul(torch.cat([gate, up], dim=1), groups=1)    # [all gate | all up]
    expected = REFS["linear_with_residual"].linear_with_residual(mid, w_down, residual)
    scale = graph.abs_product(mid, w_down) + residual.double().abs()
    tol = testing.tol_linear(dtype, INTER + 1, scale, input_rounding=dtype)
    testing.assert_close(f"{label}:end_to_end.mlp_out", mlp_out, expected, tol, pk=pk)
    testing.check_nonvacuous(f"{label}:end_to_end.mlp_out", mlp_out, pk.layers[2].checks,
                             inputs=(x, residual), reference=expected)
    pk.finalize()
    t4 = time.perf_counter()
    print(f"TIMING {label}: inputs {t1 - t0:.1f} s, compile {t2 - t1:.1f} s "
          f"({'cache hit' if pk.build.hit else 'cache miss'}), run {t3 - t2:.2f} s, checks {t4 - t3:.1f} s",
          flush=True)
    return pk


@pytest.mark.parametrize("dispatch", graph.DISPATCH)
@pytest.mark.parametrize("dtype,groups", CASES, ids=[str(d)[6:] for d, _ in CASES])
def test_qwen3_mlp(dtype, groups, dispatch, tmp_path):
    run(dtype, groups, 80 + groups, graph.output_dir(tmp_path), dispatch)


if __name__ == "__main__":
    for dtype, groups in CASES:
        pk = run(dtype, groups, 80 + groups, graph.output_dir())
    print(f"generated code and task graph: {pk.output_files[0]}, {pk.output_files[1]}")
    print("All Qwen3 MLP cases PASS")
    sys.exit(0)
