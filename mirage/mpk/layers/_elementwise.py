"""Shared shape rule of the row/column-tiled elementwise layers (add, init); identity tiles its own way."""
from __future__ import annotations

from . import NOT_SPLIT, Access

ROWS_COLS = (0, 1, NOT_SPLIT)   # grid.x splits rows, grid.y splits columns


def tiled_2d(role: str, tensor, written: bool = True) -> Access:
    return Access(role, tensor, ROWS_COLS if len(tensor.dims) == 2 else (0, NOT_SPLIT, NOT_SPLIT),
                  written)
