"""Boxes (half-open index ranges per dim) and an interval index over a layer's tiles.

A layer's tiles on one tensor come from an even split, so they are equal-sized along the
key dim; sorting by that dim's start and bisecting finds the overlapping tiles of a query
in O(log n + hits) instead of scanning every earlier task (docs/dependencies.md).
"""
from __future__ import annotations

import functools
import operator
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
        los = [box[0] for box, _ in items]
        distinct = [len(set(starts)) for starts in zip(*los)]                     # per dim
        self.key = k = max(range(len(distinct)), key=distinct.__getitem__) if distinct else 0
        self.starts = [lo[k] for lo in los] if distinct else []
        if self.starts != sorted(self.starts):          # tiles come in grid order: mostly sorted
            order = sorted(range(len(items)), key=self.starts.__getitem__)
            items, self.starts = [items[i] for i in order], [self.starts[i] for i in order]
        self.items = items
        self.span = max(map(operator.sub, [box[1][k] for box, _ in items], self.starts), default=0)

    @functools.cached_property
    def exact(self) -> dict[Box, int]:
        """Tile -> task id when the tiles lie apart along the key dim (an even split), so that a query
        equal to one of them meets only it; else empty. Built on a first query only."""
        gaps = list(map(operator.sub, self.starts[1:], self.starts))
        apart = self.starts and min(gaps, default=self.span) >= max(self.span, 1)
        return {box: tid for box, tid in self.items} if apart else {}

    def query(self, box: Box) -> list[tuple[Box, int]]:
        """(intersection, task id) for every tile overlapping `box` (intersect, inlined: the hot loop
        of graph.build and graph.verify)."""
        if box in self.exact:
            return [(box, self.exact[box])]
        if not self.starts:
            return [(box, tid) for _, tid in self.items] if self.items else []
        k, (lo, hi) = self.key, box
        hits = []
        for (tile_lo, tile_hi), tid in self.items[bisect_left(self.starts, lo[k] - self.span + 1):
                                                  bisect_left(self.starts, hi[k])]:
            inter = tuple(map(max, tile_lo, lo)), tuple(map(min, tile_hi, hi))
            if all(map(operator.lt, *inter)):
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
