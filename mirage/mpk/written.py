"""Poison declared output regions before a test-mode run; find what stayed unwritten after.

The poison is a NaN with a payload no arithmetic produces (a signalling NaN: any float
op quiets it), or an unlikely integer, so "still poison" means "never stored to". Each
tensor gets its own, and each launch new ones (mirage/mpk/poisons.py): a never-written
element of one tensor copied into another is then not "written" by accident.

Outputs a layer also reads (in place, or a buffer read before a later layer writes it)
cannot be poisoned before the pass (the poison would be read). They are checked another
way: elements that come out of the pass bit-identical to what they held before are run
again, from the poison (InPlace); still poison after that means never written.
"""
from __future__ import annotations

import logging

import torch

from .boxes import volume
from .errors import MPKUnwrittenError
from .graph import Graph
from .layers import DIFFERS_FROM_INPUT
from .poisons import poison as poison_bits

log = logging.getLogger("mirage.mpk")
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


def _masks(pairs: list) -> list:
    """(tensor, mask or None for all of it) per tensor of these (task, tile) pairs."""
    by_tensor: dict[int, list] = {}
    for t, tile in pairs:
        by_tensor.setdefault(tile.tensor.id, []).append(((t.layer.name, tile.role), tile))
    regions = []
    for pairs_of in by_tensor.values():
        tensor, per_access = pairs_of[0][1].tensor, {}
        for access, tile in pairs_of:     # one output's tiles in a layer are disjoint (check_splits)
            per_access[access] = per_access.get(access, 0) + volume(tile.box)
        if max(per_access.values()) == volume(((0,) * len(tensor.dims), tensor.dims)):
            regions.append((tensor, None))         # one output covers all of it: no mask to build
            continue
        mask = torch.zeros(tensor.dims, dtype=torch.bool, device=tensor.data.device)
        for _, tile in pairs_of:
            mask[_slices(tile.box)] = True
        regions.append((tensor, None if bool(mask.all()) else mask))
    return regions


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
        self.regions = _masks(self.tiles)      # (tensor, mask or None for all of it)
        self.live = {tile.tensor.id for t, tile in self.tiles if t.layer.live is not None}
        self.run = 0                           # launches poisoned so far: each gets its own poisons
        self.inplace = InPlace(graph, targets, self)

    def poison_of(self, tensor) -> int:
        """The bit pattern of `tensor`'s poison in this launch (an integer of its width)."""
        return poison_bits(tensor.data.dtype, tensor.id, self.run)

    def names(self, dtype: torch.dtype) -> dict[int, str]:
        """{this launch's poison bits (unsigned): tensor name} of the tensors of `dtype` it poisons."""
        width = dtype.itemsize
        return {self.poison_of(t) & ((1 << 8 * width) - 1): t.name
                for t, _ in self.regions + self.inplace.regions if t.data.dtype == dtype}

    def __len__(self) -> int:
        return len(self.tiles)

    def poison(self, regions: list | None = None) -> None:
        """A new launch's poisons into the outputs (or `regions`); the in-place outputs' snapshot."""
        if regions is None:
            self.run += 1
            regions = self.regions
            self.inplace.snapshot()
        for tensor, mask in regions:
            bits, sentinel = _bits(tensor.data), self.poison_of(tensor)
            if mask is None:
                bits.fill_(sentinel)
            else:
                bits.masked_fill_(mask, sentinel)

    def check(self, meta: dict | None = None) -> None:
        """Raise MPKUnwrittenError naming every layer tile that still holds poison (of a Layer.live
        layer: its live part, from `meta`)."""
        parts = self._live_parts(meta or {}) if self.live else {}
        for tensor, mask in self.regions:
            left = _bits(tensor.data) == self.poison_of(tensor)
            if tensor.id in self.live:
                mask = torch.zeros(tensor.dims, dtype=torch.bool, device=tensor.data.device)
                for t, tile in self.tiles:
                    if tile.tensor is tensor and (id(t), id(tile)) in parts:
                        mask |= parts[(id(t), id(tile))]
            if mask is not None:
                left &= mask
            if bool(left.any()):
                _raise_unwritten(self.tiles, self.poison_of, parts)

    def _live_parts(self, meta: dict, tiles: list | None = None) -> dict:
        """(id(task), id(tile)) -> the mask of its elements the pass must have written."""
        tiles = self.tiles if tiles is None else tiles
        live = {tile.tensor.id for t, tile in tiles if t.layer.live is not None}
        parts, cache = {}, {}
        for t, tile in tiles:
            if tile.tensor.id not in live:
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


class InPlace:
    """The declared output tiles of tensors a layer also reads (in place, or a buffer read before a later
    layer writes it), which pk() cannot poison before the pass. snapshot() keeps their bits before it;
    after it, suspects() are the elements of those tiles (of a Layer.live layer: their live parts) that
    came out bit-identical. pk() poisons just those and runs the graph once more from the same state
    (PersistentKernel._inplace_rerun): a written element then holds what the kernel computed from the
    poison (a quieted NaN, or a value), an unwritten one still the poison, which check() names. A layer
    whose output may equal its input by design (identity: no DIFFERS_FROM_INPUT check) is left out: a
    copy onto itself looks like no copy at all."""

    def __init__(self, graph: Graph, poisoned: set[int], watched: Watched):
        self.tiles = [(t, tile) for t in graph.tasks[1:] for tile in t.outputs if tile.declared and
                      tile.tensor.id not in poisoned and DIFFERS_FROM_INPUT in t.layer.checks]
        self.regions, self.watched, self.before = _masks(self.tiles), watched, {}

    def snapshot(self) -> None:
        self.before = {t.id: _bits(t.data).clone() for t, _ in self.regions}

    def suspects(self, meta: dict) -> list:
        """(tensor, mask) per in-place output with elements of its tiles unchanged by the pass."""
        parts, found = self.watched._live_parts(meta, self.tiles), []
        for tensor, mask in self.regions:
            same = _bits(tensor.data) == self.before[tensor.id]
            mine = [parts[(id(t), id(tile))] for t, tile in self.tiles
                    if tile.tensor is tensor and (id(t), id(tile)) in parts]
            if mine:                      # a Layer.live layer: only the live parts must be written
                mask = torch.stack(mine).any(0)
            if mask is not None:
                same &= mask
            if bool(same.any()):
                found.append((tensor, same))
        return found

    def verify(self, pk) -> None:
        """After pk's pass: with suspects (on any rank: they decide together, so all or none run again),
        the pass once more from the state before it, the suspects poisoned, then check(). Every tensor
        the first pass wrote, and the meta tensors, are put back as it left them."""
        if not self.tiles:      # (the same on every rank: no collective, which a rank that failed its
            return              # pass, and raised, would never join)
        suspects = self.suspects(pk.meta_tensors)
        if not (pk._comm.allreduce(len(suspects)) if pk._comm else suspects):
            return
        log.info("in-place outputs: %s left bit-identical by the pass: running it again from the poison",
                 ", ".join(f"{int(m.sum())} element(s) of '{t.name}'" for t, m in suspects) or "none here")
        outputs = {a.tensor.name for g in pk.layers for a in g.outputs if a.written}
        kept = [(t, t.clone()) for t in [*pk.meta_tensors.values(), *(pk.tensors[n].data for n in outputs)]]
        try:
            for k, v in pk._meta_at_first_launch.items():
                pk.meta_tensors[k].copy_(v)
            for t, _ in self.regions:
                t.data.copy_(self.before[t.id].view(t.data.dtype))
            self.watched.poison(suspects)
            pk._launch()
            self.check(suspects, pk.meta_tensors)
        finally:
            for t, v in kept:
                t.copy_(v)

    def check(self, suspects: list, meta: dict) -> None:
        """After the second run from the poison: name the tiles where it is still there."""
        if any(bool(((_bits(t.data) == self.watched.poison_of(t)) & m).any()) for t, m in suspects):
            ids = {t.id for t, _ in suspects}
            tiles = [(t, tile) for t, tile in self.tiles if tile.tensor.id in ids]
            _raise_unwritten(tiles, self.watched.poison_of, self.watched._live_parts(meta, tiles),
                             " (outputs it also reads: the elements the pass left bit-identical, run again "
                             "from the poison, still hold it)")


def _raise_unwritten(tiles: list, poison_of, parts: dict | None = None, why: str = "") -> None:
    bad = []
    for t, tile in tiles:
        left_all = _bits(tile.tensor.data) == poison_of(tile.tensor)
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
    raise MPKUnwrittenError(f"{len(bad)} output tile(s) were not written by the run{why}:\n  {shown}")
