"""A tensor-parallel MLP across MPI ranks equals the unsharded MLP (docs/runtime.md, docs/tolerances.md).

    h    = rmsnorm(x, w_norm)                          replicated: every rank computes it
    mid  = h @ [W_gate_r | W_up_r]^T                   column-parallel: rank r holds rows
                                                       r*I/W.. of W_gate and W_up (shuffled per task)
    act  = silu(gate) * up                             [B, I/W], local
    part = act @ W_down_r^T (+ x on rank 0 only)       row-parallel: rank r holds columns r*I/W..
    out  = allreduce(part)                             = the unsharded MLP + residual, on every rank

Every rank builds the same full weights from one seeded CPU generator and keeps its shard.
Checks, agreed across ranks before the next collective: sharding is active (each shard is
smaller than the full weight, and the ranks' shards differ); every layer against its
reference applied to the kernel's own inputs (the allreduce against the gathered partial
sums) with that layer's budget; the output against the unsharded reference this rank
computes itself, with the chain's composed budget; the output bit-identical across ranks.

Run: mpirun -n 4 python tests/runtime_python/test_mode/test_tensor_parallel_mlp.py
pytest runs that for N = 2 and 4 as a subprocess (the entry point is under __main__).
"""
import os
import sys

import pytest
import torch

from mirage.mpk import testing
from mirage.mpk.persistent_kernel import PersistentKernel

HERE = os.path.dirname(os.path.abspath(__file__))
graph = testing.load_reference(__file__, name="graph_checks")
REFS = graph.REFS
ALLREDUCE = testing.load_reference(os.path.join(HERE, "..", "allreduce", "pytorch_reference.py"))

BATCH, HIDDEN, INTER = 4, 96, 256
GROUPS = 2          # silu_mul tasks per rank; the gate/up linear runs on 2 * GROUPS
BLOCK = (128, 1, 1)
DTYPE = torch.float32


def full_weights():
    """The unsharded model, the same on every rank: one generator, one seed."""
    gen = testing.generator(offset=4242)
    return dict(x=testing.randn((BATCH, HIDDEN), DTYPE, gen), w_norm=testing.randn((HIDDEN,), DTYPE, gen),
                w_gate=testing.randn((INTER, HIDDEN), DTYPE, gen, scale=HIDDEN ** -0.5),
                w_up=testing.randn((INTER, HIDDEN), DTYPE, gen, scale=HIDDEN ** -0.5),
                w_down=testing.randn((HIDDEN, INTER), DTYPE, gen, scale=INTER ** -0.5))


def shard(full: dict, comm, rank: int, size: int) -> dict:
    rows = slice(rank * INTER // size, (rank + 1) * INTER // size)
    mine = dict(w_gate=full["w_gate"][rows].contiguous(), w_up=full["w_up"][rows].contiguous(),
                w_down=full["w_down"][:, rows].contiguous())
    theirs = comm.allgather(testing.digest(mine["w_gate"]) + testing.digest(mine["w_down"]))
    with testing.on_all_ranks("sharding is active"):
        assert mine["w_gate"].shape[0] < INTER and mine["w_down"].shape[1] < INTER, "a shard is whole"
        assert len(set(theirs)) == size, f"ranks hold the same shard: {theirs}"
    testing.say(f"SHARDED W_gate/W_up rows {rows.start}..{rows.stop - 1} of {INTER} -> "
                f"{tuple(mine['w_gate'].shape)}, W_down columns {rows.start}..{rows.stop - 1} -> "
                f"{tuple(mine['w_down'].shape)}; shards differ on all {size} ranks PASS")
    return mine


def run(comm, rank: int, size: int, jitter: int, output_dir=None) -> None:
    full = full_weights()
    mine = shard(full, comm, rank, size)
    local = INTER // size
    pk = PersistentKernel(**testing.cpu_config(jitter_seed=jitter, world_size=size, mpi_rank=rank))
    testing.say(f"DISPATCH {pk.dispatch} on rank {rank} of {size}")
    x = pk.attach_input(full["x"], name="x")
    w_norm = pk.attach_input(full["w_norm"], name="w_norm")
    w_gate, w_up = pk.attach_input(mine["w_gate"], name="w_gate"), pk.attach_input(mine["w_up"], name="w_up")
    w_down = pk.attach_input(mine["w_down"], name="w_down")
    w_gatedup = pk.shuffle_tensors(inputs=[w_gate, w_up], shuffled_dim=0, num_groups=GROUPS, name="w_gatedup")
    h = pk.new_tensor((BATCH, HIDDEN), dtype=DTYPE, name="h")
    mid = pk.new_tensor((BATCH, 2 * local), dtype=DTYPE, name="mid")
    act = pk.new_tensor((BATCH, local), dtype=DTYPE, name="act")
    part = pk.new_tensor((BATCH, HIDDEN), dtype=DTYPE, name="part")
    buf = pk.new_tensor((size, BATCH, HIDDEN), dtype=DTYPE, name="buf", io_category="nvshmem_tensor")
    out = torch.zeros(BATCH, HIDDEN, dtype=DTYPE)
    out_dt = pk.attach_input(out, name="out")
    pk.rmsnorm_layer(input=x, weight=w_norm, output=h, grid_dim=(2, 1, 1), block_dim=BLOCK)
    pk.linear_layer(input=h, weight=w_gatedup, output=mid, grid_dim=(2 * GROUPS, 1, 1), block_dim=BLOCK)
    pk.silu_mul_layer(input=mid, output=act, grid_dim=(GROUPS, 1, 1), block_dim=BLOCK)
    pk.linear_with_residual_layer(input=act, weight=w_down, residual=x, output=part, grid_dim=(4, 1, 1),
                                  block_dim=BLOCK)
    pk.allreduce_layer(input=part, buffer=buf, output=out_dt, grid_dim=(3, 1, 1), block_dim=BLOCK)
    pk.compile(output_dir=output_dir)
    pk()
    label = f"tp_mlp[W={size},jitter={jitter}]"

    # per layer, on this rank's own inputs (the tight check)
    for layer in pk.layers[:-1]:
        ins = {acc.role: pk.get_tensor(acc.tensor.name) for acc in layer.inputs}
        (dst,) = [acc.tensor.name for acc in layer.outputs if acc.written]
        expected, tol = graph.reference_and_budget(layer, ins)
        with testing.on_all_ranks(f"{label}:{layer.name}"):
            testing.check_output(f"{label}:{layer.name}.{dst}", pk.get_tensor(dst), expected, tol,
                                 layer.checks, tuple(ins.values()), pk=pk)
    parts = comm.allgather(pk.get_tensor("part").clone())
    expected = ALLREDUCE.allreduce(parts)
    tol = testing.tolerance(DTYPE, k=size, scale=sum(p.double().abs() for p in parts))
    with testing.on_all_ranks(f"{label}:allreduce"):
        testing.check_output(f"{label}:{pk.layers[-1].name}.out", out, expected, tol, pk.layers[-1].checks,
                             (pk.get_tensor("part"),), pk=pk)

    # end to end: the unsharded MLP, computed here from the full weights in float64
    hid = REFS["rmsnorm"].rmsnorm(full["x"], full["w_norm"])
    gate, up = hid @ full["w_gate"].double().T, hid @ full["w_up"].double().T
    act_ref = REFS["silu_mul"].silu_mul(torch.cat([gate, up], dim=1), groups=1)     # [all gate | all up]
    expected = REFS["linear_with_residual"].linear_with_residual(act_ref, full["w_down"], full["x"])
    # a chain composes its layers' budgets (docs/tolerances.md): the error terms of every stage on the path
    # (rmsnorm H/2 + 6 ops, gate/up linear H, silu 8 ops, down linear I + residual, allreduce W),
    # relative to the scale of the final sum
    k = HIDDEN // 2 + 6 + HIDDEN + 8 + INTER + 1 + size
    scale = act_ref.abs() @ full["w_down"].double().abs().T + full["x"].double().abs()
    tol = testing.tolerance(DTYPE, k=k, scale=scale, input_rounding=DTYPE)
    with testing.on_all_ranks(f"{label}:end_to_end"):
        testing.check_output(f"{label}:end_to_end.out", out, expected, tol, pk.layers[-1].checks,
                             (full["x"], pk.get_tensor("part")), pk=pk)
    digests = comm.allgather(testing.digest(out))
    with testing.on_all_ranks(f"{label}: replicated output"):
        assert len(set(digests)) == 1, f"outputs differ across ranks: {digests}"
    testing.say(f"IDENTICAL {label}.out sha256={digests[0]} on all {size} rank(s) PASS")
    pk.finalize()


@pytest.mark.parametrize("ranks,dispatch", [(2, "event"), (4, "event"), (2, "mpk")])
def test_tensor_parallel_mlp_mpirun(ranks, dispatch, tmp_path):
    """dispatch: the model of every rank's executor (docs/runtime.md, "Dispatch models")."""
    code, out = testing.mpirun(__file__, ranks, timeout=150, env={"MPK_OUTPUT_DIR": str(tmp_path),
                                                                  "MPK_DISPATCH": dispatch})
    assert code == 0, f"mpirun -n {ranks} failed (exit {code}); output above"
    for r in range(ranks):
        evidence = testing.rank_lines(out, r, "EVIDENCE ")
        assert len(evidence) == 6, f"rank {r}: {len(evidence)} evidence lines"
        assert all(line.endswith(" PASS") for line in evidence), f"rank {r}: {evidence}"
        assert any("end_to_end" in line for line in evidence)
        assert testing.rank_lines(out, r, "SHARDED ") and testing.rank_lines(out, r, "IDENTICAL ")
        assert testing.rank_lines(out, r, f"DISPATCH {dispatch} "), f"rank {r}: not dispatch={dispatch}"
        assert testing.rank_lines(out, r, "All tensor-parallel MLP checks PASS"), f"rank {r} did not finish"


if __name__ == "__main__":
    from mpi4py import MPI
    world = MPI.COMM_WORLD
    if world.Get_size() < 2:
        raise SystemExit(f"run with several ranks: mpirun -n 4 python {sys.argv[0]}")
    run(world, world.Get_rank(), world.Get_size(), jitter=31,
        output_dir=os.environ.get("MPK_OUTPUT_DIR", "./test_output"))
    testing.say("All tensor-parallel MLP checks PASS")
