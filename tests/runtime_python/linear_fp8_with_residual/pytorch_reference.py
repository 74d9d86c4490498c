"""linear_fp8_with_residual reference, in float64, unrounded: linear_fp8's (tests/runtime_python/linear_fp8/
pytorch_reference.py: the codes dequantized with their packed UE8M0 scales) plus the residual, x~ @ w~^T + r.
Its helpers (BLOCK, block_scales, dequantize) are this module's. torch only.
"""
import importlib.util
import os

_path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "linear_fp8", "pytorch_reference.py")
_spec = importlib.util.spec_from_file_location("_linear_fp8_reference_for_residual", _path)
_plain = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_plain)
BLOCK, block_scales, dequantize = _plain.BLOCK, _plain.block_scales, _plain.dequantize


def linear_fp8(qx, sx, qw, sw, residual=None):
    """The same computation, the residual required here."""
    assert residual is not None, "linear_fp8_with_residual: the residual is an input"
    return _plain.linear_fp8(qx, sx, qw, sw, residual)
