"""Poison declared output regions before a test-mode run; find what stayed unwritten after.

The poison is a NaN with a payload no arithmetic produces (a signalling NaN: any float
op quiets it), or an unlikely integer, so "still poison" means "never stored to".
"""
from __future__ import annotations

import torch

from .boxes import volume
from .errors import MPKUnwrittenError
from .graph import Graph

# bit patterns, written through an integer view of the same width. One byte is e4m3 (the only 1-byte
# element type, mirage/mpk/dtypes.py): 0xFF is its negative NaN, which no conversion writes (CUDA's
# __nv_fp8_e4m3 and the CPU's fp8_e4m3_t make every NaN 0x7F, csrc/runtime/dtypes.h)
SENTINEL = {1: 0xFF, 2: 0x7FA5, 4: 0x7FA5A5A5, 8: 0x7FA5A5A5A5A5A5A5}
_INT_VIEW = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


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


class Watched:
    """What pk() poisons and then checks, computed once per compiled graph: per pure-output tensor
    the union of its declared output tiles (None: the whole tensor), and the (task, tile) pairs
    that name an unwritten element. Poison and check are whole-tensor operations (two torch calls
    per tensor, whatever the number of tiles); only a failed check walks the tiles to name them.
    A layer with Layer.live writes only part of its tiles, decided by the meta tensors: its whole
    tiles are poisoned, and after the pass only its tasks' live parts (from the meta tensors as the
    pass left them) must hold no poison; the rest keeps the poison, as nothing wrote it."""

    def __init__(self, graph: Graph):
        targets = poisonable(graph)
        self.tiles = [(t, tile) for t in graph.tasks[1:] for tile in t.outputs
                      if tile.declared and tile.tensor.id in targets]
        by_tensor: dict[int, list] = {}
        for t, tile in self.tiles:
            by_tensor.setdefault(tile.tensor.id, []).append(((t.layer.name, tile.role), tile))
        self.regions = []                     # (tensor, mask or None for all of it)
        for pairs in by_tensor.values():
            tensor, per_access = pairs[0][1].tensor, {}
            for access, tile in pairs:        # one output's tiles in a layer are disjoint (check_splits)
                per_access[access] = per_access.get(access, 0) + volume(tile.box)
            if max(per_access.values()) == volume(((0,) * len(tensor.dims), tensor.dims)):
                self.regions.append((tensor, None))       # one output covers all of it: no mask to build
                continue
            mask = torch.zeros(tensor.dims, dtype=torch.bool, device=tensor.data.device)
            for _, tile in pairs:
                mask[_slices(tile.box)] = True
            whole = bool(mask.all())
            self.regions.append((tensor, None if whole else mask))
        self.live = {tile.tensor.id for t, tile in self.tiles if t.layer.live is not None}

    def __len__(self) -> int:
        return len(self.tiles)

    def poison(self) -> None:
        for tensor, mask in self.regions:
            bits, sentinel = _bits(tensor.data), SENTINEL[tensor.dtype.itemsize]
            if mask is None:
                bits.fill_(sentinel)
            else:
                bits.masked_fill_(mask, sentinel)

    def check(self, meta: dict | None = None) -> None:
        """Raise MPKUnwrittenError naming every layer tile that still holds poison (of a Layer.live
        layer: its live part, from `meta`)."""
        parts = self._live_parts(meta or {}) if self.live else {}
        for tensor, mask in self.regions:
            left = _bits(tensor.data) == SENTINEL[tensor.dtype.itemsize]
            if tensor.id in self.live:
                mask = torch.zeros(tensor.dims, dtype=torch.bool, device=tensor.data.device)
                for t, tile in self.tiles:
                    if tile.tensor is tensor and (id(t), id(tile)) in parts:
                        mask |= parts[(id(t), id(tile))]
            if mask is not None:
                left &= mask
            if bool(left.any()):
                _raise_unwritten(self.tiles, parts)

    def _live_parts(self, meta: dict) -> dict:
        """(id(task), id(tile)) -> the mask of its elements the pass must have written."""
        parts, cache = {}, {}
        for t, tile in self.tiles:
            if tile.tensor.id not in self.live:
                continue
            part = torch.zeros(tile.tensor.dims, dtype=torch.bool, device=tile.tensor.data.device)
            part[_slices(tile.box)] = True
            if t.layer.live is not None:
                key = id(t)
                if key not in cache:
                    cache[key] = t.layer.live(meta, t.coord)
                if tile.role in cache[key]:
                    part &= cache[key][tile.role].to(part.device)
            parts[(id(t), id(tile))] = part
        return parts


def _raise_unwritten(tiles: list, parts: dict | None = None) -> None:
    bad = []
    for t, tile in tiles:
        left_all = _bits(tile.tensor.data) == SENTINEL[tile.tensor.dtype.itemsize]
        part = (parts or {}).get((id(t), id(tile)))
        region = left_all[_slices(tile.box)] if part is None else left_all & part
        size = volume(tile.box) if part is None else int(part.sum())
        left = int(region.sum())
        if left:
            lo, hi = tile.box
            live = "" if part is None else " (its live part, from the meta tensors)"
            box = ", ".join(f"{a}:{b}" for a, b in zip(lo, hi))
            bad.append(f"layer '{t.layer.name}' task {t.coord}: {left} of {size} elements of "
                       f"'{tile.tensor.name}'[{box}]{live} unwritten")
    shown = "\n  ".join(bad[:20]) + (f"\n  ... and {len(bad) - 20} more tiles" if len(bad) > 20 else "")
    raise MPKUnwrittenError(f"{len(bad)} output tile(s) were not written by the run:\n  {shown}")
