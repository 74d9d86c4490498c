"""Boxes (half-open index ranges per dim) and an interval index over a layer's tiles.

A layer's tiles on one tensor come from an even split, so they are equal-sized along the
key dim; sorting by that dim's start and bisecting finds the overlapping tiles of a query
in O(log n + hits) instead of scanning every earlier task (docs/dependencies.md).
"""
from __future__ import annotations

from bisect import bisect_left
from itertools import product

Box = tuple[tuple[int, ...], tuple[int, ...]]   # (lo, hi), hi exclusive


def intersect(a: Box, b: Box) -> Box | None:
    lo, hi = tuple(map(max, a[0], b[0])), tuple(map(min, a[1], b[1]))
    for low, high in zip(lo, hi):
        if low >= high:
            return None
    return lo, hi


def volume(b: Box) -> int:
    v = 1
    for lo, hi in zip(*b):
        v *= hi - lo
    return v


def contains(outer: Box, inner: Box) -> bool:
    return all(ol <= il and ih <= oh for ol, il, ih, oh in zip(outer[0], inner[0], inner[1], outer[1]))


class BoxIndex:
    """Tiles (box, task id) of one access of one layer; query returns the overlapping ones."""

    def __init__(self, items: list[tuple[Box, int]]):
        ndim = len(items[0][0][0]) if items else 0
        distinct = [len({box[0][d] for box, _ in items}) for d in range(ndim)]
        self.key = max(range(ndim), key=lambda d: distinct[d]) if ndim else 0
        self.items = sorted(items, key=lambda it: it[0][0][self.key]) if ndim else items
        self.starts = [box[0][self.key] for box, _ in self.items] if ndim else []
        self.span = max((box[1][self.key] - box[0][self.key] for box, _ in self.items), default=0)

    def query(self, box: Box) -> list[tuple[Box, int]]:
        """(intersection, task id) for every tile overlapping `box`."""
        if not self.starts:
            return [(box, tid) for _, tid in self.items] if self.items else []
        k = self.key
        i0 = bisect_left(self.starts, box[0][k] - self.span + 1)
        i1 = bisect_left(self.starts, box[1][k])
        hits = []
        for j in range(i0, i1):
            tile, tid = self.items[j]
            inter = intersect(tile, box)
            if inter is not None:
                hits.append((inter, tid))
        return hits


def uncovered(region: list[Box], cover: list[Box], within: Box) -> Box | None:
    """A cell of `within` inside some region box but inside no cover box, or None.

    Coordinate compression over the boxes' boundaries: exact, and cheap for the few
    boxes a single tile read meets."""
    ndim = len(within[0])
    cuts = []
    for d in range(ndim):
        pts = {within[0][d], within[1][d]}
        for b in region + cover:
            pts.update(p for p in (b[0][d], b[1][d]) if within[0][d] <= p <= within[1][d])
        cuts.append(sorted(pts))
    for cell_idx in product(*(range(len(c) - 1) for c in cuts)):
        lo = tuple(cuts[d][i] for d, i in enumerate(cell_idx))
        hi = tuple(cuts[d][i + 1] for d, i in enumerate(cell_idx))
        cell = (lo, hi)
        if any(contains(b, cell) for b in region) and not any(contains(b, cell) for b in cover):
            return cell
    return None
