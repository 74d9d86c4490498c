"""moe_w2_linear_layer in test mode: real generated code, several workers, schedule jitter.

Cases: one token; experts that receive no token; every token to one expert (the other slots unclaimed);
topk 1, 2 and 8; 8, 64 and 128 experts; an expert stride (grid.x) of 1 and of 3 and 5 with more
activated experts than the stride; non-power-of-two column splits and one-column tiles; a slot no expert
claims. Every (token, slot) the routing assigns is compared with the float64 reference under
testing.tol_linear (K fp32 terms); one that no expert claims must still hold test mode's poison.

Run: python tests/runtime_python/moe_w2_linear/test_moe_w2_linear_testmode.py   (or pytest this file)
     mpirun -n 4 python tests/runtime_python/moe_w2_linear/test_moe_w2_linear_testmode.py
     (one 4-rank job: moe_w2_linear is row-parallel (layers/moe_w2_linear.py TP), as MPK's MoE down
     projection: every rank draws the same unsharded tensors, keeps columns [r*K/W, (r+1)*K/W) of the input
     and of every expert's weight and computes its partial sums; then, as there is no view of the
     [B, topk, N] output as allreduce_layer's [B, N], a second kernel allreduces the partials attached
     as [B * topk, N] (the unclaimed rows zeroed; its files in the case directory, the partial kernel's
     in its partial/). Checks per rank: the partial against its own float64
     reference, the sum against the gathered partials and against the unsharded reference (the composed
     budget: K + W terms, each partial rounded once), the sum bit-identical across ranks)
"""
import os

import pytest
import torch

from mirage.mpk import testing
from mirage.mpk.layers.moe_w13_linear import moe_grid
from mirage.mpk.persistent_kernel import PersistentKernel

ref = testing.load_reference(__file__)
moe = testing.load_reference(os.path.join(os.path.dirname(__file__), "../test_mode/x.py"), name="moe_inputs")
ALLREDUCE = testing.load_reference(os.path.join(os.path.dirname(__file__), "..", "allreduce", "x.py"))

DTYPES = [torch.bfloat16, torch.float16, torch.float32]
# (batch, K = intermediate, N = hidden, experts, topk, routing kind, (column tiles = grid.y, stride = grid.x))
CASES = [
    (1, 64, 48, 8, 2, "topk", (3, 1)),        # one token, 6 of 8 experts without one; stride 1
    (6, 96, 40, 8, 8, "topk", (5, 3)),        # topk 8 of 8 experts: 8 activated over a stride of 3
    (5, 128, 12, 64, 1, "one", (12, 2)),      # every token to one expert, topk 1; one-column tiles
    (8, 72, 24, 128, 8, "topk", (3, 5)),      # 128 experts, ~50 activated over a stride of 5
    (3, 40, 16, 8, 2, "hole", (2, 3)),        # token 0's second slot claimed by no expert
    (16, 64, 32, 8, 2, "topk", (4, 3)),       # 16 tokens: bf16 / fp16 on the tensor cores
]


def allreduced(dtype, out, claimed, jitter, world):
    """The second kernel of a multi-rank case: allreduce_layer over the partials as [B * topk, N]."""
    batch, topk, n = out.shape
    part = out.reshape(batch * topk, n).clone()
    summed = torch.zeros(batch * topk, n, dtype=dtype)
    pk = PersistentKernel(**testing.cpu_config(jitter_seed=jitter, **world.params))
    buf = pk.new_tensor((world.size, batch * topk, n), dtype=dtype, name="buf", io_category="nvshmem_tensor")
    pk.allreduce_layer(input=pk.attach_input(part, name="part"), buffer=buf,
                       output=pk.attach_input(summed, name="summed"), grid_dim=(1, 1, 1),
                       block_dim=(128, 1, 1))
    return pk, part, summed


def run_case(dtype, batch, k, n, experts, topk, kind, grid, jitter=0, output_dir=None,
             world=testing.ONE_RANK):
    x_full, w_full, routing, mask = moe.routed_inputs(dtype, (batch, topk), k, n, experts, topk, kind,
                                                      offset=1)     # the same on every rank
    x, w = world.shard("input", x_full), world.shard("weight", w_full)      # this rank's columns of K
    out = torch.zeros(batch, topk, n, dtype=dtype)      # one rank: y; several: this rank's partial sums
    # several ranks: this kernel's files in the case directory's partial/, the allreduce kernel's (the one
    # returned, whose output every rank must agree on) in the case directory itself
    several = output_dir and world.size > 1
    pk = moe.graph(testing.cpu_config(jitter_seed=jitter, **world.params),
                   moe.expert_linear("moe_w2_linear", moe_grid(*grid)),
                   {"x": x, "w": w, "routing": routing, "mask": mask, "out": out},
                   os.path.join(output_dir, "partial") if several else output_dir)
    pk()
    pk.finalize()
    expected, claimed = ref.moe_w2_linear(x, w, routing)
    scale = ref.moe_w2_linear(x.abs(), w.abs(), routing)[0]           # sum_k |x w| per output
    name = (f"moe_w2_linear[{str(dtype)[6:]},{batch}x{k}->{n},E={experts},topk={topk},{kind},"
            f"grid={moe_grid(*grid)},jitter={jitter}{world.tag}]")
    tc = pk.layers[0].params["tensor_cores"]
    moe.check_claimed(name, pk, out, expected, claimed, testing.tol_linear(dtype, x.shape[-1], scale,
                                                                           tensor_cores=tc), (x, w))
    if world.size == 1:
        return pk
    pk2, part, summed = allreduced(dtype, out, claimed, jitter, world)
    pk2.compile(output_dir=output_dir)
    pk2()
    pk2.finalize()
    parts = world.gather(part.clone())
    tol = testing.tolerance(dtype, k=world.size, scale=sum(p.double().abs() for p in parts))
    testing.check_output(f"{name}.allreduce", summed, ALLREDUCE.allreduce(parts), tol, pk2.layers[0].checks,
                         (part,), pk=pk2)
    full = ref.moe_w2_linear(x_full, w_full, routing)[0].reshape(batch * topk, n)
    scale = ref.moe_w2_linear(x_full.abs(), w_full.abs(), routing)[0].reshape(batch * topk, n)
    tol = testing.tolerance(dtype, k=(2 * k if tc else k) + world.size, scale=scale, ops=2,
                            input_rounding=dtype, scale2=sum(p.double() ** 2 for p in parts))
    testing.check_output(f"{name}.unsharded", summed, world.shard("output", full), tol, pk2.layers[0].checks,
                         (part,), pk=pk2)
    return pk2


def _jitter(dtype, case) -> int:
    return 3 + 10 * CASES.index(case) + DTYPES.index(dtype)    # a different schedule per case


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}x{c[1]}->{c[2]}-E{c[3]}-top{c[4]}-{c[5]}-"
                                                      f"cols{c[6][0]}-stride{c[6][1]}")
def test_moe_w2_linear(dtype, case, tmp_path):
    run_case(dtype, *case, jitter=_jitter(dtype, case), output_dir=str(tmp_path))


@pytest.mark.parametrize("spoil,message", moe.BAD_ROUTING, ids=[b[0] for b in moe.BAD_ROUTING])
def test_moe_w2_linear_bad_routing(spoil, message, tmp_path):
    """Routing the kernel cannot follow (a mask count above num_experts, an expert id num_experts, a slot
    above topk) fails the task by name, and no access leaves a tensor (moe.bad_routing_fails)."""
    moe.bad_routing_fails("moe_w2_linear", (3, 2, 64), spoil, message, str(tmp_path))


if __name__ == "__main__":
    testing.run_cases_as_script("moe_w2_linear", run_case, DTYPES, CASES, _jitter)
