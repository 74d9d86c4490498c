"""moe_w13_fp8: the kernel alone (testing.run_tasks; docs/kernel_tests.md), and, with w2=True, the cases
tests/runtime_python/moe_w2_fp8/test_moe_w2_fp8.py runs on the same kernel (moe_w13_fp8.cuh).

Each task runs by itself on one emulated worker block, everything outside its declared tiles poisoned and,
the tasks sharing output tiles (Layer.live), outside its live parts: its experts' tokens' input rows and
their scales, its experts' weights and weight scales, its experts' (token, slot) output rows. So a task that
reads a scale of another expert or row, handles an expert not its own or writes the wrong slot is a
testing.MPKFootprintError naming its grid coordinate.
Inputs: e4m3 codes of random data quantized per block (pytorch_reference.quantize): the activations with
scale = amax / 448 (what quantize_fp8_layer(scale_ue8m0=False) writes, not powers of two: the kernel reads
them as the power of two below, MPK's UE8M0 reading), the weights with power-of-two scales.
Checks, for bf16, fp16 and fp32 outputs at 128 threads (target_cc 80) and 256 (90): every output against the
float64 reference on the dequantized codes under testing.tol_linear (exact products, K fp32 sums:
tolerances.py "fp8 GEMMs"); with every scale a power of two, also against the product of the data before
quantization under testing.tol_fp8_quantized (e4m3's half ulp of both operands); the evidence line's UE8M0
note (check_note): none with power-of-two scales, with amax / 448 ones the count and the worst factor (scale
/ 2^floor(log2 scale)) computed here, and ue8m0_note's values on zero, negative, subnormal and NaN scales.
Cases: blocks of 64 and 128, one token, topk 1, 2 and 8, 8, 64 and 128 experts, expert strides 1, 3 and 5,
non-power-of-two and one-column tiles, every token to one expert, a slot no expert claims, the edge tasks of
a larger grid, codes a column block of a wider matrix. Negative controls: a kernel reading the float32
scales as they are (not as UE8M0), one dropping the last block, one reading expert 0's weight scales; a
layer not declaring its UE8M0 scales (no note: check_note fails); routing the kernel cannot follow fails the
task by name; bad shapes are refused by name.

Run: python tests/runtime_python/moe_w13_fp8/test_moe_w13_fp8.py   (or pytest this file; -k to pick cases)
"""
import math
import os
import sys

import pytest
import torch

from mirage.mpk import testing
from mirage.mpk.layers.moe_w13_linear import moe_grid

ref = testing.load_reference(__file__)
moe = testing.load_reference(os.path.join(os.path.dirname(__file__), "../test_mode/x.py"), name="moe_inputs")

DTYPES = [torch.bfloat16, torch.float16, torch.float32]
TARGETS = [80, 90]       # the worker block: 128 threads (sm_80), 256 (sm_90a / sm_100a)
# (batch, K, N, experts, topk, routing kind, (column tiles = grid.y, expert stride = grid.x), coords, block)
SHAPES = [
    (1, 256, 48, 8, 2, "topk", (3, 1), None, 128),      # one token; stride 1; two blocks of 128
    (6, 128, 40, 8, 8, "topk", (5, 3), None, 64),       # topk 8 of 8 over a stride of 3; blocks of 64
    (5, 256, 12, 64, 1, "one", (12, 2), None, 128),     # every token to one expert; one-column tiles
    (8, 128, 24, 128, 8, "topk", (3, 5), "edges", 64),  # 128 experts over a stride of 5: first, last task
    (3, 384, 16, 8, 2, "hole", (2, 3), None, 128),      # three blocks; a slot no expert claims
    (19, 256, 24, 8, 2, "topk", (3, 3), None, 64),      # 19 tokens: the tensor cores at target_cc 90
]


block_dim = testing.worker_block_dim


def layer_call(w2: bool, grid, target_cc):
    def call(pk, t):
        fn = pk.moe_w2_fp8_layer if w2 else pk.moe_w13_fp8_layer
        fn(input_fp8=t["qx"], input_scale=t["sx"], weight_fp8=t["qw"], weight_scale=t["sw"],
           moe_routing_indices=t["routing"], moe_mask=t["mask"], output=t["out"], grid_dim=moe_grid(*grid),
           block_dim=block_dim(target_cc))
    return call


def inputs(batch, k, n, experts, topk, kind, group, w2=False, pow2_input=False, x_stride=None, reference=ref):
    """The data x, w, their codes and scales, routing and mask: x [B, K] (w2: [B, topk, K]); x_stride: x's
    codes a column block of a wider matrix (row stride x_stride); reference: the folder's pytorch_reference
    (moe_w2_fp8's test passes its own)."""
    gen = testing.generator(offset=batch * 100003 + k * 1009 + n * 7 + experts + group + 5 * w2)
    x = testing.randn((batch, topk, k) if w2 else (batch, k), torch.float32, gen)
    w = testing.randn((experts, n, k), torch.float32, gen, scale=k ** -0.5)
    qx, sx = reference.quantize(x, group, pow2=pow2_input)
    qw, sw = reference.quantize(w, group, pow2=True)
    if x_stride is not None:
        wide = torch.zeros(*qx.shape[:-1], x_stride, dtype=qx.dtype)
        wide[..., k:2 * k] = qx
        qx = wide[..., k:2 * k]
    routing, mask = moe.route(batch, experts, topk, gen, kind)
    return dict(x=x, w=w, qx=qx, sx=sx, qw=qw, sw=sw, routing=routing, mask=mask)


def run_kernel(dtype, d, topk, grid, coords, target_cc, w2=False, exact=True, reference=ref):
    """run_tasks over the layer's tasks and the evidence against the dequantized reference; exact: the
    scales are powers of two, so also against the data before quantization (tol_fp8_quantized)."""
    qx, sx, qw, sw, routing = d["qx"], d["sx"], d["qw"], d["sw"], d["routing"]
    out = torch.zeros(qx.shape[0], topk, qw.shape[1], dtype=dtype)
    run = testing.run_tasks(layer_call(w2, grid, target_cc),
                            {k: d[k] for k in ("qx", "sx", "qw", "sw", "routing", "mask")} | {"out": out},
                            coords=coords, target_cc=target_cc)
    xd, wd = reference.dequantize(qx, sx), reference.dequantize(qw, sw)
    expected, claimed = reference.moe_linear(xd, wd, routing, topk)
    scale = reference.moe_linear(xd.abs(), wd.abs(), routing, topk)[0]
    k = qx.shape[-1]
    # the unclaimed rows: no task's live part, so never compared (run.check covers the tasks' live tiles)
    tc = run.layer.params["tensor_cores"]
    run.check("out", expected, testing.tol_linear(dtype, k, scale, tensor_cores=tc), inputs=(xd, wd))
    if exact:
        x, w = d["x"], d["w"]
        dx = testing.e4m3_rounding_bound(x, reference.block_scales(sx, k))
        dw = testing.e4m3_rounding_bound(w, reference.block_scales(sw, k))
        def both(a, b, c, e):      # sum over k of a_k b_k + c_k e_k per output
            return reference.moe_linear(a, b, routing, topk)[0] + reference.moe_linear(c, e, routing, topk)[0]
        quant, quant2 = both(dx, wd.abs(), x.abs(), dw), both(dx**2, wd**2, x**2, dw**2)
        unquantized = reference.moe_linear(x, w, routing, topk)[0]
        run.check("out", unquantized, testing.tol_fp8_quantized(dtype, k, scale, quant, quant2, tc),
                  inputs=(x, w), against="vs unquantized")
    return run


@pytest.mark.parametrize("target_cc", TARGETS)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("batch,k,n,experts,topk,kind,grid,coords,group", SHAPES,
                         ids=lambda c: "x".join(map(str, c)) if isinstance(c, tuple) else str(c))
def test_moe_w13_fp8_kernel(dtype, batch, k, n, experts, topk, kind, grid, coords, group, target_cc):
    d = inputs(batch, k, n, experts, topk, kind, group)
    run_kernel(dtype, d, topk, grid, coords, target_cc, exact=False)


def expected_note(layers: dict[str, dict[str, torch.Tensor]]) -> str:
    """The NOTE the evidence line of an output computed from these layers (name -> its float32 scales, name ->
    values, in program order) must carry, or "" when every scale is a power of two; derived here from frexp,
    not from the exponent field the library reads: a scale over the power of two at or below it is 2 x its
    mantissa in [0.5, 1)."""
    notes = []
    for layer, scales in layers.items():
        parts, worst = [], 1.0
        for name, s in scales.items():
            factor = 2 * torch.frexp(s.double()).mantissa
            high = float(factor.max())
            worst *= high
            up_to = f" (up to {high:.3g}x)" if high > 1 else ""
            parts.append(f"'{name}' {int((factor != 1).sum())}/{s.numel()}{up_to}")
        if worst > 1:
            notes.append(f"layer '{layer}' {', '.join(parts)} not powers of two: values up to {worst:.3g}x = "
                         f"2^{math.log2(worst):.3g} small")
    return f"NOTE[scales read as UE8M0: {'; '.join(notes)}]" if notes else ""


def check_note(printed: str, layers: dict[str, dict[str, torch.Tensor]], select: str = "EVIDENCE ") -> None:
    """Every EVIDENCE line of `printed` that contains `select` ends with expected_note(layers) before its
    verdict (no NOTE when that is "")."""
    lines = [ln for ln in printed.splitlines() if ln.startswith("EVIDENCE ") and select in ln]
    want = expected_note(layers)
    assert lines, f"no evidence line with {select!r} printed"
    for line in lines:
        verdict_at = line.rindex(" ")
        shown = line[line.find("NOTE["):verdict_at] if "NOTE[" in line else ""
        assert shown == want, f"evidence line {line!r}: expected the note {want!r}"
    print(f"UE8M0 {select!r}: {len(lines)} evidence line(s) carry {want or 'no note'!r} PASS")


@pytest.mark.parametrize("group", [64, 128])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=lambda d: str(d)[6:])
def test_moe_w13_fp8_power_of_two_scales_match_the_unquantized_product(dtype, group, capsys):
    d = inputs(6, 256, 40, 8, 2, "topk", group, pow2_input=True)
    run_kernel(dtype, d, 2, (5, 3), None, 90, exact=True)
    check_note(capsys.readouterr().out, {"moe_w13_fp8_0": {"sx": d["sx"], "sw": d["sw"]}})     # no note


def test_moe_w13_fp8_floored_scales_fail_the_unquantized_comparison():
    """Negative control of the check above: activations quantized with scale = amax / 448 (not a power of
    two) dequantize, as the kernel and MPK read the scale, up to 2x small, which the budget of e4m3's
    rounding must not absorb."""
    d = inputs(6, 256, 40, 8, 2, "topk", 128, pow2_input=False)
    with pytest.raises(AssertionError, match="vs unquantized"):
        run_kernel(torch.float32, d, 2, (5, 3), None, 90, exact=True)


@pytest.mark.quick     # the layer's case in the quick subset and the kernel sanitizer runs
@pytest.mark.parametrize("target_cc", TARGETS)
def test_moe_w13_fp8_kernel_strided(target_cc, capsys):
    # the codes a column block of a wider matrix: row stride 3K, not K (a kernel using W's strides fails)
    d = inputs(4, 128, 24, 8, 2, "topk", 64, x_stride=384)
    run_kernel(torch.bfloat16, d, 2, (3, 3), None, target_cc, exact=False)
    # the input scales amax / 448: the note, with the worst factor of these scales
    check_note(capsys.readouterr().out, {"moe_w13_fp8_0": {"sx": d["sx"], "sw": d["sw"]}})


def test_moe_w13_fp8_a_layer_not_declaring_its_ue8m0_scales_fails_the_note_check(monkeypatch, capsys):
    """Negative control of check_note: the layer without Layer.ue8m0_scales prints no note, as any layer
    reading float32 scales as UE8M0 without declaring it would: the check above fails."""
    from mirage.mpk.layers import moe_w13_fp8
    monkeypatch.setattr(moe_w13_fp8, "UE8M0_SCALES", ())
    d = inputs(4, 128, 24, 8, 2, "topk", 64, x_stride=384)
    run_kernel(torch.bfloat16, d, 2, (3, 3), None, 80, exact=False)
    with pytest.raises(AssertionError, match="expected the note .NOTE\\[scales read as UE8M0"):
        check_note(capsys.readouterr().out, {"moe_w13_fp8_0": {"sx": d["sx"], "sw": d["sw"]}})


def test_moe_w13_fp8_ue8m0_note_values():
    """ue8m0_note on given scales (no run): both tensors off a power of two multiply the bound; a zero, a
    negative, a subnormal or a NaN scale is counted and named; powers of two give no note."""
    from mirage.mpk.persistent_kernel import PersistentKernel
    from mirage.mpk.testing.diagnosis import ue8m0_note
    pk = PersistentKernel(**testing.cpu_config())
    attach_layer(pk)
    sx, sw = pk.get_tensor("sx"), pk.get_tensor("sw")
    sx.fill_(2.0 ** -7)
    sw.fill_(0.25)
    assert ue8m0_note(pk, layers=pk.layers) == ""
    sx[1, 0], sw[3, 5, 1] = 1.5 * 2.0 ** -7, 1.75
    note = ue8m0_note(pk, layers=pk.layers)
    assert note == ("scales read as UE8M0: layer 'moe_w13_fp8_0' 'sx' 1/6 (up to 1.5x), 'sw' 1/256 (up to "
                    "1.75x) not powers of two: values up to 2.62x = 2^1.39 small"), note
    sw[0, 0, 0], sw[0, 0, 1], sw[0, 1, 0], sw[0, 1, 1] = 0.0, -0.25, 2.0 ** -140, float("nan")
    assert ue8m0_note(pk, layers=pk.layers).endswith(
        "'sw' 5/256 (up to 1.75x) not powers of two: values up to 2.62x = 2^1.39 small, 4 scale(s) zero, "
        "negative, subnormal or not finite"), ue8m0_note(pk, layers=pk.layers)
    pk.finalize()


CONTROLS = [   # (file, old, new, the error, what)
    ("fp8_dot.cuh", "{ return ue8m0_value((__float_as_uint(scale) >> 23) & 0xFFu); }", "{ return scale; }",
     AssertionError, "reads the float32 scales as they are"),
    ("fp8_dot.cuh", "for (int64_t g = 0; g < groups; ++g)", "for (int64_t g = 0; g + 1 < groups; ++g)",
     AssertionError, "drops the last block"),
    ("moe_w13_fp8.cuh", "return ws + e * wst.strides[0];", "return ws;", testing.MPKFootprintError,
     "reads expert 0's weight scales"),
]


def negative_control(tmp_path, kernel, old, new, error, w2=False, reference=ref):
    """The kernel with `old` replaced by `new` in csrc/tasks/`kernel` fails (error) on inputs the right
    kernel passes."""
    d = inputs(6, 256, 40, 8, 2, "topk", 128, w2=w2, pow2_input=False, reference=reference)
    with testing.mutated_kernel(tmp_path, kernel, old, new):
        with pytest.raises(error):
            run_kernel(torch.float32, d, 2, (5, 3), None, 80, w2=w2, exact=False, reference=reference)


@pytest.mark.parametrize("kernel,old,new,error,what", CONTROLS,
                         ids=[c[4].replace(" ", "_") for c in CONTROLS])
def test_moe_w13_fp8_negative_controls(kernel, old, new, error, what, tmp_path):
    negative_control(tmp_path, kernel, old, new, error)


def bad_routing_fails(which, message, w2=False, reference=ref):
    """Routing the kernel cannot follow fails the task (task_fail) by name, and no access leaves the
    tensors (the footprint checks run first and would name one)."""
    d = inputs(3, 128, 8, 8, 2, "topk", 128, w2=w2, reference=reference)
    moe.spoil(d["routing"], d["mask"], which)
    with pytest.raises(Exception, match=message):
        run_kernel(torch.bfloat16, d, 2, (2, 1), None, 80, w2=w2, exact=False, reference=reference)


@pytest.mark.parametrize("which,message", moe.BAD_ROUTING, ids=[b[0] for b in moe.BAD_ROUTING])
def test_moe_w13_fp8_bad_routing_fails_the_task(which, message):
    bad_routing_fails(which, message)


def attach_layer(pk, w2=False, qx=None, sx=None, qw=(8, 16, 256), sw=(8, 16, 2), out=(3, 2, 16),
                 grid=(1, 2, 1), code=torch.float8_e4m3fn, scale=torch.float32):
    qx = qx or ((3, 2, 256) if w2 else (3, 256))
    sx = sx or ((3, 2, 2) if w2 else (3, 2))
    t = [pk.attach_input(torch.zeros(s, dtype=dt), name=n) for s, dt, n in
         ((qx, code, "qx"), (sx, scale, "sx"), (qw, code, "qw"), (sw, torch.float32, "sw"),
          ((8, 3), torch.int32, "routing"), ((9,), torch.int32, "mask"), (out, torch.bfloat16, "out"))]
    fn = pk.moe_w2_fp8_layer if w2 else pk.moe_w13_fp8_layer
    fn(input_fp8=t[0], input_scale=t[1], weight_fp8=t[2], weight_scale=t[3], moe_routing_indices=t[4],
       moe_mask=t[5], output=t[6], grid_dim=grid, block_dim=(128, 1, 1))


BAD_SHAPES = [
    ({"sx": (3, 3)}, "input_scale 'sx' has 3 scales per row of input_fp8 'qx' \\(3, 256\\): one float32 "
                     "scale per block of 64 or 128 codes, so K / 128 = 2 or K / 64 = 4"),
    ({"sw": (8, 16, 4)}, "weight_scale 'sw' is \\(8, 16, 4\\), expected \\(8, 16, 2\\) \\(one scale per 128 "
                         "codes of 'qw'"),
    ({"qw": (8, 16, 192), "sw": (8, 16, 3)}, "weight_fp8 'qw' is \\(8, 16, 192\\) but input_fp8 'qx' is "
                                             "\\(3, 256\\)"),
    ({"code": torch.bfloat16}, "'qx' \\(input_fp8\\) has dtype bfloat16, expected float8_e4m3"),
    ({"scale": torch.bfloat16}, "'sx' \\(input_scale\\) has dtype bfloat16, expected float32"),
    ({"grid": (1, 3, 1)}, "dim 1 \\(16\\) is not divisible by grid_dim.y=3"),
]


def bad_shape_is_refused(change, message, w2=False):
    from mirage.mpk.persistent_kernel import PersistentKernel
    pk = PersistentKernel(**testing.cpu_config())
    with pytest.raises(ValueError, match=f"layer 'moe_w{2 if w2 else 13}_fp8_0': .*" + message):
        attach_layer(pk, w2=w2, **change)
    pk.finalize()


@pytest.mark.parametrize("change,message", BAD_SHAPES, ids=[str(b[0]) for b in BAD_SHAPES])
def test_moe_w13_fp8_bad_shapes(change, message):
    bad_shape_is_refused(change, message)


if __name__ == "__main__":
    testing.run_pytest_file_as_script(__file__, sys.argv[1:])
