"""moe_w13_fp8_layer in test mode: real generated code, several workers, schedule jitter; with w2=True the
cases tests/runtime_python/moe_w2_fp8/test_moe_w2_fp8_testmode.py runs on the same kernel.

Cases: one token; experts that receive no token; every token to one expert (the other slots unclaimed);
topk 1, 2 and 8; 8, 64 and 128 experts; expert strides 1, 3, 5 and 8; non-power-of-two column splits and
one-column tiles; a slot no expert claims; blocks of 64 and 128; a DeepSeek-V3-like shape scaled down
(64 experts, top-8, K = 1024 in 8 blocks of 128, N = 2 x 128, MPK's expert stride 8). Codes and scales
from quantizing random data per block with scale = amax / 448 (as quantize_fp8_layer writes them; the
kernel reads each scale as the power of two below, MPK's UE8M0 reading). Every claimed (token, slot) is
compared with the float64 reference on the dequantized codes under testing.tol_linear; one no expert
claims must still hold test mode's poison (nothing writes it).

Run: python tests/runtime_python/moe_w13_fp8/test_moe_w13_fp8_testmode.py   (or pytest this file)
     mpirun -n 4 python tests/runtime_python/moe_w13_fp8/test_moe_w13_fp8_testmode.py
     (one 4-rank job: column-parallel as moe_w13_linear (layers/moe_w13_fp8.py TP): every rank quantizes
     the same unsharded data, keeps rows [r*N/W, (r+1)*N/W) of every expert's codes and their scales and
     computes those columns of the output; testing.run_cases_as_script)
"""
import os

import pytest
import torch

from mirage.mpk import testing
from mirage.mpk.layers.moe_w13_linear import moe_grid
from mirage.mpk.persistent_kernel import PersistentKernel

HERE = os.path.dirname(os.path.abspath(__file__))
ref = testing.load_reference(__file__)
moe = testing.load_reference(os.path.join(HERE, "../test_mode/x.py"), name="moe_inputs")

DTYPES = [torch.bfloat16, torch.float32]
# (batch, K, N, experts, topk, routing kind, (column tiles = grid.y, expert stride = grid.x), block);
# K / block a multiple of 4, so that a 4-rank row split (moe_w2_fp8) keeps whole blocks
CASES = [
    (1, 512, 48, 8, 2, "topk", (3, 1), 128),      # one token, 6 of 8 experts without one; stride 1
    (6, 256, 40, 8, 8, "topk", (5, 3), 64),       # topk 8 of 8 experts over a stride of 3; blocks of 64
    (5, 512, 12, 64, 1, "one", (12, 2), 128),     # every token to one expert, topk 1; one-column tiles
    (8, 256, 24, 128, 8, "topk", (3, 5), 64),     # 128 experts, ~50 activated over a stride of 5
    (3, 512, 16, 8, 2, "hole", (2, 3), 128),      # token 0's second slot claimed by no expert
    (4, 1024, 256, 64, 8, "topk", (4, 8), 128),   # DeepSeek-V3-like, scaled down; MPK's stride 8
]


def quantized(batch, k, n, experts, topk, kind, group, w2=False, reference=ref):
    """The unsharded codes and scales (input, weight) and the routing of a case, the same on every rank:
    random data quantized per block with scale = amax / 448 (w2: input [B, topk, K])."""
    gen = testing.generator(offset=batch * 100003 + k * 1009 + n * 7 + experts + 11 * w2)
    x = testing.randn((batch, topk, k) if w2 else (batch, k), torch.float32, gen)
    w = testing.randn((experts, n, k), torch.float32, gen, scale=k ** -0.5)
    return (*reference.quantize(x, group, pow2=False), *reference.quantize(w, group, pow2=False),
            *moe.route(batch, experts, topk, gen, kind))


def run_layer(pk, dtype, qx, sx, qw, sw, routing, mask, topk, grid, w2=False):
    """The layer over these tensors in `pk` (grid.y: the largest column split <= grid[0] that divides the
    local N); returns the output tensor and the grid."""
    cols = max(g for g in range(1, grid[0] + 1) if qw.shape[1] % g == 0)
    out = torch.zeros(qx.shape[0], topk, qw.shape[1], dtype=dtype)
    t = {s: pk.attach_input(v, name=s) for v, s in ((qx, "qx"), (sx, "sx"), (qw, "qw"), (sw, "sw"),
                                                    (routing, "routing"), (mask, "mask"), (out, "out"))}
    layer = pk.moe_w2_fp8_layer if w2 else pk.moe_w13_fp8_layer
    layer(input_fp8=t["qx"], input_scale=t["sx"], weight_fp8=t["qw"], weight_scale=t["sw"],
          moe_routing_indices=t["routing"], moe_mask=t["mask"], output=t["out"],
          grid_dim=moe_grid(cols, grid[1]), block_dim=(128, 1, 1))
    return out, moe_grid(cols, grid[1])


def check(name, pk, out, qx, sx, qw, sw, routing, topk, expected=None, reference=ref):
    """The claimed (token, slot) rows against the dequantized reference on these codes (or `expected`),
    the unclaimed ones still poison; returns the claimed mask."""
    xd, wd = reference.dequantize(qx, sx), reference.dequantize(qw, sw)
    local, claimed = reference.moe_linear(xd, wd, routing, topk)
    scale = reference.moe_linear(xd.abs(), wd.abs(), routing, topk)[0]       # sum_k |x~ w~| per output
    tol = testing.tol_linear(out.dtype, qx.shape[-1], scale, tensor_cores=pk.layers[0].params["tensor_cores"])
    moe.check_claimed(name, pk, out, local if expected is None else expected, claimed, tol, (xd, wd))
    return claimed


def run_case(dtype, batch, k, n, experts, topk, kind, grid, group, jitter=0, output_dir=None,
             world=testing.ONE_RANK):
    qx, sx, qw_full, sw_full, routing, mask = quantized(batch, k, n, experts, topk, kind, group)
    # this rank's rows of every expert's codes and their scales (column-parallel); the input whole
    qw, sw = world.shard("weight", qw_full), world.shard("weight", sw_full)
    pk = PersistentKernel(**testing.cpu_config(jitter_seed=jitter, **world.params))
    out, grid_dim = run_layer(pk, dtype, qx, sx, qw, sw, routing, mask, topk, grid)
    pk.compile(output_dir=output_dir)
    pk()
    pk.finalize()
    full = ref.moe_linear(ref.dequantize(qx, sx), ref.dequantize(qw_full, sw_full), routing, topk)[0]
    name = (f"moe_w13_fp8[{str(dtype)[6:]},{batch}x{k}->{n},E={experts},topk={topk},{kind},block={group},"
            f"grid={grid_dim},jitter={jitter}{world.tag}]")
    check(name, pk, out, qx, sx, qw, sw, routing, topk, expected=world.shard("output", full))
    return pk


def _jitter(dtype, case) -> int:
    return 7 + 10 * CASES.index(case) + DTYPES.index(dtype)    # a different schedule per case


def case_id(c) -> str:
    return f"{c[0]}x{c[1]}->{c[2]}-E{c[3]}-top{c[4]}-{c[5]}-cols{c[6][0]}-stride{c[6][1]}-block{c[7]}"


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_moe_w13_fp8(dtype, case, tmp_path):
    run_case(dtype, *case, jitter=_jitter(dtype, case), output_dir=str(tmp_path))


def bad_routing_is_named(spoil: str, message: str, tmp_path, w2=False):
    """Routing the kernel cannot follow (a mask count above num_experts, an expert id num_experts, a slot
    above topk) fails the task by name in the generated code, and the memory-safe test mode (guarded
    copies: red zones, guard pages) finds no access outside a tensor: an MPKRuntimeError, no
    MPKMemoryError."""
    from mirage.mpk.errors import MPKMemoryError, MPKRuntimeError
    gen = testing.generator(offset=5)
    routing, mask = moe.route(3, 8, 2, gen)
    moe.spoil(routing, mask, spoil, entry=-1)
    qx, sx = ref.quantize(testing.randn((3, 2, 128) if w2 else (3, 128), torch.float32, gen), 128, pow2=False)
    qw, sw = ref.quantize(testing.randn((8, 16, 128), torch.float32, gen), 128, pow2=False)
    pk = PersistentKernel(**testing.cpu_config(jitter_seed=1))
    t = [pk.attach_input(v, name=s) for v, s in ((qx, "qx"), (sx, "sx"), (qw, "qw"), (sw, "sw"),
         (routing, "routing"), (mask, "mask"), (torch.zeros(3, 2, 16, dtype=torch.bfloat16), "out"))]
    layer = pk.moe_w2_fp8_layer if w2 else pk.moe_w13_fp8_layer
    layer(input_fp8=t[0], input_scale=t[1], weight_fp8=t[2], weight_scale=t[3], moe_routing_indices=t[4],
          moe_mask=t[5], output=t[6], grid_dim=moe_grid(2, 3), block_dim=(128, 1, 1))
    pk.compile(output_dir=str(tmp_path))
    with pytest.raises(MPKRuntimeError, match=message) as info:
        pk()
    assert not isinstance(info.value, MPKMemoryError)
    pk.finalize()


BAD_ROUTING = moe.BAD_ROUTING


@pytest.mark.parametrize("spoil,message", BAD_ROUTING, ids=[b[0] for b in BAD_ROUTING])
def test_moe_w13_fp8_bad_routing(spoil, message, tmp_path):
    bad_routing_is_named(spoil, message, tmp_path)


if __name__ == "__main__":
    testing.run_cases_as_script("moe_w13_fp8", run_case, DTYPES, CASES, _jitter)
