"""The one dtype table: torch dtype, C++ type, size and unit roundoff per mirage dtype."""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class DType:
    name: str            # MPK's spelling, also task_graph.json's "data_type"
    torch: torch.dtype
    cpp: str             # type the C++ kernels are instantiated with
    itemsize: int        # bytes
    unit_roundoff: float  # u = 2^-p for p significand bits; 0 for integers

    @property
    def is_float(self) -> bool:
        return self.unit_roundoff > 0

    def __repr__(self) -> str:
        return f"mirage.{self.name}"


bfloat16 = DType("bfloat16", torch.bfloat16, "mpk::bf16_t", 2, 2.0**-8)
float16 = DType("float16", torch.float16, "mpk::fp16_t", 2, 2.0**-11)
float32 = DType("float32", torch.float32, "float", 4, 2.0**-24)
# OCP E4M3 (torch.float8_e4m3fn): 3 mantissa bits, p = 4; storage for fp8 weights and activations with
# block scales, never a layer's compute type (csrc/runtime/dtypes.h: it saturates at +-448)
float8_e4m3 = DType("float8_e4m3", torch.float8_e4m3fn, "mpk::fp8_e4m3_t", 1, 2.0**-4)
int32 = DType("int32", torch.int32, "int32_t", 4, 0.0)
int64 = DType("int64", torch.int64, "int64_t", 8, 0.0)
# four UE8M0 block scales (exponent bytes) packed per word: quantize_fp8_layer(scale_ue8m0=True), linear_fp8
uint32 = DType("uint32", torch.uint32, "uint32_t", 4, 0.0)

ALL = (bfloat16, float16, float32, float8_e4m3, int32, int64, uint32)
FLOATS = (bfloat16, float16, float32)     # what every float layer's kernel is instantiated for
_BY_TORCH = {d.torch: d for d in ALL}
_BY_NAME = {d.name: d for d in ALL}


def to_dtype(x: "DType | torch.dtype | str") -> DType:
    """Accept a mirage dtype, a torch dtype or a name; raise a clear error otherwise."""
    if isinstance(x, DType):
        return x
    if isinstance(x, torch.dtype) and x in _BY_TORCH:
        return _BY_TORCH[x]
    if isinstance(x, str) and x in _BY_NAME:
        return _BY_NAME[x]
    supported = ", ".join(d.name for d in ALL)
    raise TypeError(f"unsupported dtype {x!r}; supported: {supported}")
