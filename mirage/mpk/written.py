"""Poison declared output regions before a test-mode run; find what stayed unwritten after.

The poison is a NaN with a payload no arithmetic produces (a signalling NaN: any float
op quiets it), or an unlikely integer, so "still poison" means "never stored to".
"""
from __future__ import annotations

import torch

from .errors import MPKUnwrittenError
from .graph import Graph

# bit patterns, written through an integer view of the same width
SENTINEL = {2: 0x7FA5, 4: 0x7FA5A5A5, 8: 0x7FA5A5A5A5A5A5A5}
_INT_VIEW = {2: torch.int16, 4: torch.int32, 8: torch.int64}


def _slices(box) -> tuple[slice, ...]:
    return tuple(slice(lo, hi) for lo, hi in zip(*box))


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(_INT_VIEW[t.element_size()])


def poisonable(graph: Graph) -> set[int]:
    """Tensors no task reads before (or while) the first layer writing them: pure outputs."""
    first_write, first_read = {}, {}
    order = {id(layer): i for i, layer in enumerate(graph.layers)}
    for t in graph.tasks[1:]:
        li = order[id(t.layer)]
        for tile in t.outputs:
            if tile.declared:
                first_write.setdefault(tile.tensor.id, li)
        for tile in t.inputs:
            first_read.setdefault(tile.tensor.id, li)
    return {tid for tid, li in first_write.items() if first_read.get(tid, len(graph.layers)) > li}


def watched(graph: Graph) -> list:
    """(task, tile) for every declared output tile of a pure output tensor: what pk() poisons
    and then checks. Computed once per compiled graph."""
    targets = poisonable(graph)
    return [(t, tile) for t in graph.tasks[1:] for tile in t.outputs
            if tile.declared and tile.tensor.id in targets]


def poison(tiles: list) -> None:
    for _, tile in tiles:
        _bits(tile.tensor.data)[_slices(tile.box)] = SENTINEL[tile.tensor.dtype.itemsize]


def check_written(tiles: list) -> None:
    """Raise MPKUnwrittenError naming every layer tile that still holds poison."""
    bad = []
    for t, tile in tiles:
        region = _bits(tile.tensor.data)[_slices(tile.box)]
        left = int((region == SENTINEL[tile.tensor.dtype.itemsize]).sum())
        if left:
            lo, hi = tile.box
            bad.append(f"layer '{t.layer.name}' task {t.coord}: {left} of {region.numel()} elements of "
                       f"'{tile.tensor.name}'[{', '.join(f'{a}:{b}' for a, b in zip(lo, hi))}] unwritten")
    if bad:
        shown = "\n  ".join(bad[:20]) + (f"\n  ... and {len(bad) - 20} more tiles" if len(bad) > 20 else "")
        raise MPKUnwrittenError(f"{len(bad)} output tile(s) were not written by the run:\n  {shown}")
