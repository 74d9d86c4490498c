"""linear_fp8_layer in test mode, as MPK's DeepSeek builder uses it: quantize_fp8_layer(scale_ue8m0=True)
(one task per row, as MPK) then linear_fp8_layer in one graph; several workers, schedule jitter.

Checks: the quantize layer's UE8M0 words exactly and its codes bit for bit torch's e4m3 of x / 2^e; the
linear against the float64 reference on the graph's own codes and words under testing.tol_linear, and
against x @ W^T of the data before quantization under testing.tol_fp8_quantized (tolerances.py "fp8
GEMMs"). Cases: one token; 5 rows (the scales' 3 padding columns) and 5 blocks (a word with one code);
MPK's activation width K = 7168 with 16 tokens; one-column tiles; bf16 and fp32 outputs.
With residual=True the same cases for tests/runtime_python/linear_fp8_with_residual/.

Run: python tests/runtime_python/linear_fp8/test_linear_fp8_testmode.py   (or pytest this file)
     mpirun -n 4 python tests/runtime_python/linear_fp8/test_linear_fp8_testmode.py
     (one 4-rank job: column-parallel (layers/linear_fp8.py TP): every rank quantizes the same activations
     and keeps rows [r*N/W, (r+1)*N/W) of the weight's codes and of their words; testing.run_cases_as_script)
"""
import os

import pytest
import torch

from mirage.mpk import testing
from mirage.mpk.dtypes import float8_e4m3
from mirage.mpk.layers.quantize_fp8 import packed_scale_shape
from mirage.mpk.persistent_kernel import PersistentKernel

HERE = os.path.dirname(os.path.abspath(__file__))
ref = testing.load_reference(__file__)
quantizer = testing.load_reference(os.path.join(HERE, "..", "quantize_fp8", "_"))
kernel_test = testing.load_reference(__file__, "test_linear_fp8")      # its inputs() and quantized()

DTYPES = [torch.bfloat16, torch.float32]
# (batch, K, N, grid.x)
CASES = [(1, 512, 48, 3), (5, 640, 40, 5), (16, 7168, 128, 4), (3, 1024, 24, 24)]


def build(pk, dtype, d, grid, residual=None):
    """quantize_fp8 (UE8M0, a task per row) then the linear over the weight's codes and words in `pk`; the
    tensors the graph writes."""
    batch, k = d["x"].shape
    o = dict(qx=torch.zeros(batch, k, dtype=torch.float8_e4m3fn),
             sx=torch.zeros(packed_scale_shape(batch, k), dtype=torch.uint32),
             out=torch.zeros(batch, d["qw"].shape[0], dtype=dtype))
    given = [("x", d["x"].to(dtype)), ("qw", d["qw"]), ("sw", d["sw"]), *o.items()]
    given += [("r", residual)] if residual is not None else []
    t = {n: pk.attach_input(v, name=n) for n, v in given}
    pk.quantize_fp8_layer(input=t["x"], output_fp8=t["qx"], output_scale=t["sx"], grid_dim=(batch, 1, 1),
                          block_dim=(128, 1, 1), scale_ue8m0=True)
    args = dict(input_fp8=t["qx"], input_scale=t["sx"], weight_fp8=t["qw"], weight_scale=t["sw"],
                output=t["out"], grid_dim=(grid, 1, 1), block_dim=(128, 1, 1))
    if residual is None:
        pk.linear_fp8_layer(**args)
    else:
        pk.linear_fp8_with_residual_layer(residual=t["r"], **args)
    return o


def check(name, pk, dtype, x, o, qw, sw, w, exact, residual=None, reference=ref):
    """The quantize layer exactly, the linear on the graph's own codes and against `exact`, this rank's
    columns of the unquantized x @ W^T (+ residual), float64."""
    codes, words, _ = quantizer.quantize_fp8_ue8m0(x, reference.BLOCK)
    batch = x.shape[0]
    got = o["sx"].view(torch.int32).long() & 0xFFFFFFFF
    testing.assert_equal(f"{name}.sx (UE8M0 words)", got[:, :batch], words[:, :batch])
    testing.check_output(f"{name}.qx", o["qx"], codes, testing.tol_elementwise(float8_e4m3),
                         pk.layers[0].checks, pk=pk)
    xd, wd = reference.dequantize(o["qx"], o["sx"]), reference.dequantize(qw, sw)
    r = None if residual is None else residual.double()
    k = x.shape[1] + (r is not None)
    scale = xd.abs() @ wd.abs().T + (0 if r is None else r.abs())
    tc = pk.layers[1].params["tensor_cores"]
    testing.check_output(f"{name}.out", o["out"], reference.linear_fp8(o["qx"], o["sx"], qw, sw, residual),
                         testing.tol_linear(dtype, k, scale, tensor_cores=tc), pk.layers[1].checks, (xd, wd),
                         pk=pk)
    dx = testing.e4m3_rounding_bound(x, reference.block_scales(o["sx"], *x.shape))
    dw = testing.e4m3_rounding_bound(w, reference.block_scales(sw, *w.shape))
    quant = dx @ wd.abs().T + x.double().abs() @ dw.T
    quant2 = dx**2 @ (wd**2).T + x.double()**2 @ (dw**2).T
    testing.check_output(f"{name}.out vs unquantized", o["out"], exact,
                         testing.tol_fp8_quantized(dtype, k, scale, quant, quant2, tc), pk.layers[1].checks,
                         pk=pk)


def run_case(dtype, batch, k, n, grid, jitter=0, output_dir=None, world=testing.ONE_RANK, target_cc=None):
    d = kernel_test.inputs(batch, k, n)                       # the same on every rank
    d["x"] = d["x"].to(dtype).float()                         # the activations as the graph holds them
    # this rank's weight rows: the codes, and the words of those rows (the columns of [packed_k, N])
    qw, w = world.shard("weight", d["qw"]), world.shard("weight", d["w"])
    sw = world.shard("weight", d["sw"].T.contiguous()).T.contiguous()
    pk = PersistentKernel(**testing.cpu_config(jitter_seed=jitter, **world.params,
                                               **({"target_cc": target_cc} if target_cc else {})))
    cols = max(g for g in range(1, grid + 1) if qw.shape[0] % g == 0)        # divides the local N
    o = build(pk, dtype, {**d, "qw": qw, "sw": sw}, cols)
    pk.compile(output_dir=output_dir)
    pk()
    pk.finalize()
    name = f"linear_fp8[{str(dtype)[6:]},{batch}x{k}->{n},grid={pk.layers[1].grid},jitter={jitter}" \
           f"{world.tag}]"
    exact = world.shard("output", d["x"].double() @ d["w"].double().T)      # this rank's columns
    check(name, pk, dtype, d["x"], o, qw, sw, w, exact)
    return pk


def _jitter(dtype, case) -> int:
    return 3 + 10 * CASES.index(case) + DTYPES.index(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c)))
def test_linear_fp8(dtype, case, tmp_path):
    run_case(dtype, *case, jitter=_jitter(dtype, case), output_dir=str(tmp_path))



@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=lambda d: str(d)[6:])
def test_linear_fp8_tensor_cores(dtype, tmp_path):
    """16 rows on an sm_90 target: the tensor-core path (mma.m16n8k32 e4m3, csrc/tasks/linear_fp8.cuh) on
    real generated code, several workers, jitter; its budget counts K twice (tol_linear)."""
    pk = run_case(dtype, 16, 1024, 64, 4, jitter=7, output_dir=str(tmp_path), target_cc=90)
    assert pk.layers[1].params["tensor_cores"]

if __name__ == "__main__":
    testing.run_cases_as_script("linear_fp8", run_case, DTYPES, CASES, _jitter)
