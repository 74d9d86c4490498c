"""linear_fp8: the kernel alone (testing.run_tasks; docs/kernel_tests.md), and, with residual=True, the
cases tests/runtime_python/linear_fp8_with_residual/test_linear_fp8_with_residual.py runs on the same
kernel (csrc/tasks/linear_fp8.cuh).

Each task runs by itself on one emulated worker block with everything outside its declared tiles poisoned:
a task that reads another task's weight rows or their scales, writes outside its columns or leaves an
output unwritten is a testing.MPKFootprintError naming its grid coordinate. Inputs: random data quantized
per block of 128 with UE8M0 scales (tests/runtime_python/quantize_fp8/pytorch_reference.py, what
quantize_fp8_layer(scale_ue8m0=True) writes: powers of two >= amax / 448, four codes per word). Checks, for
bf16, fp16 and fp32 outputs at 128 threads (target_cc 80) and 256 (90): against the float64 reference on
the dequantized codes under testing.tol_linear (exact products, K fp32 sums: tolerances.py "fp8 GEMMs"),
and against the product of the data before quantization under testing.tol_fp8_quantized (e4m3's half ulp
of both operands). Cases: one token; 5 rows (3 padding columns of the input's scales) and 5 blocks (a word
holding one code); 16 rows, K = 1024; one-column tiles; the edge tasks of a split; codes a column block of
a wider matrix. Negative controls: a kernel reading byte 0 of every word, one reading the first column's
weight scales for every column. Bad shapes are refused by name.

Run: python tests/runtime_python/linear_fp8/test_linear_fp8.py   (or pytest this file; -k to pick cases)
"""
import os
import sys

import pytest
import torch

from mirage.mpk import testing

ref = testing.load_reference(__file__)
quantizer = testing.load_reference(os.path.join(os.path.dirname(__file__), "..", "quantize_fp8", "_"))

DTYPES = [torch.bfloat16, torch.float16, torch.float32]
TARGETS = [80, 90]       # the worker block: 128 threads (sm_80), 256 (sm_90a / sm_100a)
# (batch, K, N, grid.x, coords)
# (16 and 19 rows at target_cc 90: the tensor cores, mma.m16n8k32 e4m3)
SHAPES = [(1, 128, 12, 3, None), (5, 640, 40, 5, None), (16, 1024, 64, 4, "edges"), (3, 256, 24, 24, None),
          (19, 256, 40, 5, None)]
block_dim = testing.worker_block_dim


def quantized(v: torch.Tensor):
    """(codes e4m3, words uint32 [packed_k, rows]) of v [rows, K] with UE8M0 scales: quantize_fp8's
    reference (the padding columns beyond rows, up to a multiple of 4, are kept for the input)."""
    codes, words, _ = quantizer.quantize_fp8_ue8m0(v, ref.BLOCK)
    signed = torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)
    return codes.clamp(-448, 448).to(torch.float8_e4m3fn), signed.view(torch.uint32)


def inputs(batch, k, n, residual=False, dtype=torch.bfloat16, x_stride=None):
    gen = testing.generator(offset=batch * 1009 + k * 7 + n + 3 * residual)
    # each block of 128 scaled by its own power of two in [2^-3, 2^3]: the blocks' codes differ, so a kernel
    # taking one block's scale for another's fails
    def spread(rows):
        return torch.ldexp(torch.ones(rows, k // ref.BLOCK), torch.randint(-3, 4, (rows, k // ref.BLOCK),
                                                                          generator=gen)).repeat_interleave(
            ref.BLOCK, -1)
    x = testing.randn((batch, k), torch.float32, gen) * spread(batch)
    w = testing.randn((n, k), torch.float32, gen, scale=k ** -0.5) * spread(n)
    qx, sx = quantized(x)
    qw, sw = quantized(w)
    if x_stride is not None:
        wide = torch.zeros(batch, x_stride, dtype=qx.dtype)
        wide[:, k:2 * k] = qx
        qx = wide[:, k:2 * k]
    d = dict(x=x, w=w, qx=qx, sx=sx, qw=qw, sw=sw[:, :n].contiguous())
    if residual:
        d["r"] = testing.randn((batch, n), dtype, gen)
    return d


def run_kernel(dtype, d, grid, coords, target_cc, reference=ref):
    residual = "r" in d

    def call(pk, t):
        args = dict(input_fp8=t["qx"], input_scale=t["sx"], weight_fp8=t["qw"], weight_scale=t["sw"],
                    output=t["out"], grid_dim=(grid, 1, 1), block_dim=block_dim(target_cc))
        if residual:
            pk.linear_fp8_with_residual_layer(residual=t["r"], **args)
        else:
            pk.linear_fp8_layer(**args)

    tensors = {k: d[k] for k in ("qx", "sx", "qw", "sw", "r") if k in d}
    out = torch.zeros(d["qx"].shape[0], d["qw"].shape[0], dtype=dtype)
    run = testing.run_tasks(call, tensors | {"out": out}, coords=coords, target_cc=target_cc)
    xd, wd = reference.dequantize(d["qx"], d["sx"]), reference.dequantize(d["qw"], d["sw"])
    r = d.get("r")
    k = d["qx"].shape[1] + residual
    scale = xd.abs() @ wd.abs().T + (0 if r is None else r.double().abs())
    tc = run.layer.params["tensor_cores"]
    run.check("out", reference.linear_fp8(d["qx"], d["sx"], d["qw"], d["sw"], r),
              testing.tol_linear(dtype, k, scale, tensor_cores=tc), inputs=(xd, wd))
    # against the data before quantization: e4m3's rounding of both operands on top (tol_fp8_quantized)
    x, w = d["x"], d["w"]
    dx = testing.e4m3_rounding_bound(x, reference.block_scales(d["sx"], *x.shape))
    dw = testing.e4m3_rounding_bound(w, reference.block_scales(d["sw"], *w.shape))
    quant = dx @ wd.abs().T + x.double().abs() @ dw.T
    quant2 = dx**2 @ (wd**2).T + x.double()**2 @ (dw**2).T
    exact = x.double() @ w.double().T + (0 if r is None else r.double())
    run.check("out", exact, testing.tol_fp8_quantized(dtype, k, scale, quant, quant2, tc), inputs=(x, w),
              against="vs unquantized")
    return run


@pytest.mark.parametrize("target_cc", TARGETS)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("batch,k,n,grid,coords", SHAPES)
def test_linear_fp8_kernel(dtype, batch, k, n, grid, coords, target_cc):
    run_kernel(dtype, inputs(batch, k, n), grid, coords, target_cc)


@pytest.mark.quick     # the layer's case in the quick subset and the kernel sanitizer runs
@pytest.mark.parametrize("target_cc", TARGETS)
def test_linear_fp8_kernel_strided(target_cc):
    # the codes a column block of a wider matrix: row stride 3K, not K (a kernel using W's strides fails)
    run_kernel(torch.bfloat16, inputs(4, 256, 24, x_stride=768), 3, None, target_cc)


CONTROLS = [   # (old, new, what): each fails the comparison
    ("fp8::ue8m0_byte(wx, g % 4)", "fp8::ue8m0_byte(wx, 0)", "reads byte 0 of every input scale word"),
    ("ws[(g / 4) * wst.row_stride + j * wst.col_stride]", "ws[(g / 4) * wst.row_stride]",
     "reads the first column's weight scales"),
]


def negative_control(tmp_path, old, new, residual=False, reference=ref):
    d = inputs(5, 640, 40, residual, dtype=torch.float32)
    with testing.mutated_kernel(tmp_path, "linear_fp8.cuh", old, new):
        with pytest.raises(AssertionError, match="is not close"):
            run_kernel(torch.float32, d, 5, None, 80, reference=reference)


@pytest.mark.parametrize("old,new,what", CONTROLS, ids=[c[2].replace(" ", "_") for c in CONTROLS])
def test_linear_fp8_negative_controls(old, new, what, tmp_path):
    negative_control(tmp_path, old, new)


def attach(pk, residual=False, qx=(3, 256), sx=(1, 4), qw=(16, 256), sw=(1, 16), out=(3, 16),
           grid=(2, 1, 1), code=torch.float8_e4m3fn):
    e4m3, u32, bf16 = torch.float8_e4m3fn, torch.uint32, torch.bfloat16
    t = [pk.attach_input(torch.zeros(s, dtype=dt), name=nm) for s, dt, nm in
         ((qx, code, "qx"), (sx, u32, "sx"), (qw, e4m3, "qw"), (sw, u32, "sw"), (out, bf16, "out"),
          (out, bf16, "r"))]
    args = dict(input_fp8=t[0], input_scale=t[1], weight_fp8=t[2], weight_scale=t[3], output=t[4],
                grid_dim=grid, block_dim=(128, 1, 1))
    if residual:
        pk.linear_fp8_with_residual_layer(residual=t[5], **args)
    else:
        pk.linear_fp8_layer(**args)


BAD_SHAPES = [
    ({"sx": (1, 3)}, "'sx' \\(input_scale\\) dim 1 is 3, expected 4"),
    ({"sw": (2, 16)}, "'sw' \\(weight_scale\\) dim 0 is 2, expected 1"),
    ({"sw": (1, 15)}, "'sw' \\(weight_scale\\) dim 1 is 15, expected 16"),
    ({"qx": (3, 192), "qw": (16, 192)}, "K = 192 must be a multiple of the scale block 128"),
    ({"code": torch.bfloat16}, "'qx' \\(input_fp8\\) has dtype bfloat16, expected float8_e4m3"),
    ({"grid": (3, 1, 1)}, "not divisible by grid_dim.x=3"),
]


def bad_shape_is_refused(change, message, residual=False):
    from mirage.mpk.persistent_kernel import PersistentKernel
    pk = PersistentKernel(**testing.cpu_config())
    layer = "linear_fp8_with_residual_0" if residual else "linear_fp8_0"
    with pytest.raises(ValueError, match=f"layer '{layer}': .*" + message):
        attach(pk, residual, **change)
    pk.finalize()


@pytest.mark.parametrize("change,message", BAD_SHAPES, ids=[str(b[0]) for b in BAD_SHAPES])
def test_linear_fp8_bad_shapes(change, message):
    bad_shape_is_refused(change, message)


if __name__ == "__main__":
    testing.run_pytest_file_as_script(__file__, sys.argv[1:])
