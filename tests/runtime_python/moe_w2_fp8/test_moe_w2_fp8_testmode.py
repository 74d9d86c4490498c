"""moe_w2_fp8_layer in test mode: real generated code, several workers, schedule jitter.

The cases of tests/runtime_python/moe_w13_fp8/test_moe_w13_fp8_testmode.py (which states them and their
checks) with input [B, topk, K] codes and their [B, topk, K / block] scales, one input row per (token,
slot), against this folder's pytorch_reference.

Run: python tests/runtime_python/moe_w2_fp8/test_moe_w2_fp8_testmode.py   (or pytest this file)
     mpirun -n 4 python tests/runtime_python/moe_w2_fp8/test_moe_w2_fp8_testmode.py
     (one 4-rank job: row-parallel as moe_w2_linear (layers/moe_w2_fp8.py TP): every rank quantizes the
     same unsharded data and keeps columns [r*K/W, (r+1)*K/W) of the input's and every expert's codes and
     their scales (whole blocks); its partial sums against its own reference, then a second kernel
     allreduces the partials (attached as [B * topk, N], the unclaimed rows zeroed; the partial kernel's
     files in the case directory's partial/), against the gathered partials' sum's unsharded product)
"""
import os

import pytest
import torch

from mirage.mpk import testing
from mirage.mpk.persistent_kernel import PersistentKernel

ref = testing.load_reference(__file__)
W13 = testing.load_reference(os.path.join(os.path.dirname(__file__), "..", "moe_w13_fp8", "_"),
                             "test_moe_w13_fp8_testmode")
DTYPES, CASES = W13.DTYPES, W13.CASES


def run_case(dtype, batch, k, n, experts, topk, kind, grid, group, jitter=0, output_dir=None,
             world=testing.ONE_RANK):
    qx_full, sx_full, qw_full, sw_full, routing, mask = W13.quantized(batch, k, n, experts, topk, kind, group,
                                                                      w2=True, reference=ref)
    # this rank's K columns of the input's and every expert's codes, and their scales' blocks
    qx, sx = world.shard("input", qx_full), world.shard("input", sx_full)
    qw, sw = world.shard("weight", qw_full), world.shard("weight", sw_full)
    pk = PersistentKernel(**testing.cpu_config(jitter_seed=jitter, **world.params))
    out, grid_dim = W13.run_layer(pk, dtype, qx, sx, qw, sw, routing, mask, topk, grid, w2=True)
    several = output_dir and world.size > 1
    pk.compile(output_dir=os.path.join(output_dir, "partial") if several else output_dir)
    pk()
    pk.finalize()
    name = (f"moe_w2_fp8[{str(dtype)[6:]},{batch}x{k}->{n},E={experts},topk={topk},{kind},block={group},"
            f"grid={grid_dim},jitter={jitter}{world.tag}]")
    W13.check(name, pk, out, qx, sx, qw, sw, routing, topk, reference=ref)
    if world.size == 1:
        return pk
    part = out.reshape(batch * topk, -1).clone()       # the unclaimed rows zeroed by check
    summed = torch.zeros_like(part)
    pk2 = PersistentKernel(**testing.cpu_config(jitter_seed=jitter, **world.params))
    buf = pk2.new_tensor((world.size, *part.shape), dtype=dtype, name="buf", io_category="nvshmem_tensor")
    pk2.allreduce_layer(input=pk2.attach_input(part, name="part"), buffer=buf,
                        output=pk2.attach_input(summed, name="summed"), grid_dim=(1, 1, 1),
                        block_dim=(128, 1, 1))
    pk2.compile(output_dir=output_dir)
    pk2()
    pk2.finalize()
    parts = world.gather(part.clone())
    xf, wf = ref.dequantize(qx_full, sx_full), ref.dequantize(qw_full, sw_full)
    full = ref.moe_linear(xf, wf, routing, topk)[0].reshape(batch * topk, -1)
    scale = ref.moe_linear(xf.abs(), wf.abs(), routing, topk)[0].reshape(batch * topk, -1)
    tol = testing.tolerance(dtype, k=k + world.size, scale=scale, ops=2, input_rounding=dtype,
                            scale2=sum(p.double() ** 2 for p in parts))
    testing.check_output(f"{name}.unsharded", summed, full, tol, pk2.layers[0].checks, (part,), pk=pk2)
    return pk2


def _jitter(dtype, case) -> int:
    return 9 + 10 * CASES.index(case) + DTYPES.index(dtype)    # a different schedule per case


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("case", CASES, ids=W13.case_id)
def test_moe_w2_fp8(dtype, case, tmp_path):
    run_case(dtype, *case, jitter=_jitter(dtype, case), output_dir=str(tmp_path))


@pytest.mark.parametrize("spoil,message", W13.BAD_ROUTING, ids=[b[0] for b in W13.BAD_ROUTING])
def test_moe_w2_fp8_bad_routing(spoil, message, tmp_path):
    W13.bad_routing_is_named(spoil, message, tmp_path, w2=True)


if __name__ == "__main__":
    testing.run_cases_as_script("moe_w2_fp8", run_case, DTYPES, CASES, _jitter)
