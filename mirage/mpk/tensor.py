"""DTensor: a named tensor of the task graph, and the index maps of shuffled/fused views."""
from __future__ import annotations

import keyword
import re
from dataclasses import dataclass, field

import torch

from .dtypes import DType

_C_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_CPP_RESERVED = {"int", "float", "double", "char", "void", "auto", "class", "struct", "new", "delete",
                 "return", "if", "else", "for", "while", "switch", "case", "default", "const", "static"}

ATTACHED, NEW, SHUFFLED, FUSED, META = "attached", "new", "shuffled", "fused", "meta"
SYMMETRIC = "symmetric"      # new, in node-shared memory every rank maps (dist.py)


def row_major_strides(dims: tuple[int, ...]) -> tuple[int, ...]:
    strides, acc = [], 1
    for d in reversed(dims):
        strides.append(acc)
        acc *= d
    return tuple(reversed(strides))


def check_name(name: object, taken: dict) -> str:
    """A tensor name must be a C identifier (it names buffers in generated code) and unique."""
    if not isinstance(name, str) or not _C_IDENT.match(name) or name in _CPP_RESERVED \
            or keyword.iskeyword(name):
        raise ValueError(f"tensor name {name!r} is not a valid C identifier "
                         f"(letters, digits and '_', not starting with a digit, not a keyword)")
    if name in taken:
        raise ValueError(f"tensor name {name!r} is already used by another tensor of this kernel")
    return name


@dataclass(eq=False)
class DTensor:
    """A tensor of the graph. `id` indexes the runtime's tensor table (-1 for fused views)."""
    name: str
    dims: tuple[int, ...]
    strides: tuple[int, ...]
    dtype: DType
    kind: str
    id: int = -1
    data: torch.Tensor | None = None          # backing storage (None for fused views)
    sources: list["DTensor"] = field(default_factory=list)   # shuffled/fused inputs
    num_groups: int = 1

    @property
    def shape(self) -> tuple[int, ...]:
        return self.dims

    @property
    def numel(self) -> int:
        n = 1
        for d in self.dims:
            n *= d
        return n

    def __repr__(self) -> str:
        return f"DTensor({self.name!r}, {self.dims}, {self.dtype.name}, {self.kind})"


def group_chunks(sources: list[DTensor], num_groups: int) -> list[tuple[int, int, int]]:
    """Order of a shuffled/fused dim-0 view: [g0: in0 chunk, in1 chunk, ...][g1: ...] ...

    Returns (source index, first source row, rows) per chunk, in view order."""
    chunks = []
    for g in range(num_groups):
        for k, src in enumerate(sources):
            rows = src.dims[0] // num_groups
            chunks.append((k, g * rows, rows))
    return chunks


def map_fused_rows(view: DTensor, lo: int, hi: int) -> tuple[DTensor, int]:
    """Map rows [lo, hi) of a fused view to (source tensor, first row there).

    A tile must lie inside one source chunk: the kernel gets one pointer per tile."""
    start = 0
    for k, first, rows in group_chunks(view.sources, view.num_groups):
        if start <= lo < start + rows:
            if hi > start + rows:
                raise ValueError(
                    f"tile rows [{lo}, {hi}) of fused tensor '{view.name}' straddle two inputs "
                    f"(chunk of '{view.sources[k].name}' is rows [{start}, {start + rows})); "
                    f"choose a grid whose tile divides {rows}")
            return view.sources[k], first + (lo - start)
        start += rows
    raise ValueError(f"rows [{lo}, {hi}) are outside fused tensor '{view.name}' ({view.dims[0]} rows)")


def shuffle_into(view: DTensor) -> None:
    """Fill a shuffled tensor's storage from its inputs (a physical interleave)."""
    parts = []
    for k, first, rows in group_chunks(view.sources, view.num_groups):
        parts.append(view.sources[k].data[first:first + rows])
    torch.cat(parts, dim=0, out=view.data)
