"""moe_w2_fp8 reference, in float64, unrounded: moe_w13_fp8's (tests/runtime_python/moe_w13_fp8/
pytorch_reference.py: the codes dequantized with their scales read as UE8M0, then a loop over the experts
with masks), whose moe_linear takes the input row (t, slot) when x is [B, topk, K]: y[t, slot] = x~[t, slot]
@ w~[e]^T. Its helpers (quantize, dequantize, block_scales, moe_linear) are this module's. torch only.
"""
import importlib.util
import os

_path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "moe_w13_fp8", "pytorch_reference.py")
_spec = importlib.util.spec_from_file_location("_moe_fp8_reference_for_w2", _path)
_w13 = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_w13)

pow2_floor, block_scales, dequantize, quantize, moe_linear = (
    _w13.pow2_floor, _w13.block_scales, _w13.dequantize, _w13.quantize, _w13.moe_linear)


def moe_w2_fp8(qx, sx, qw, sw, routing, topk: int):
    """qx [B, topk, K] e4m3, sx [B, topk, K / G] -> (y [B, topk, N], claimed [B, topk])."""
    return moe_linear(dequantize(qx, sx), dequantize(qw, sw), routing, topk)
