"""A map from disjoint byte ranges ``[lo, hi)`` to values, for the window race check.

Only the pieces that overlap a query are touched (``bisect`` over the sorted
starts), so a window written by a few hundred copies costs a few hundred
entries, whatever its size.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator
from typing import Any

Piece = tuple[int, int, Any]
#: Sorted, disjoint byte ranges ``[lo, hi)``.
Runs = list[tuple[int, int]]


class IntervalMap:
    """Disjoint ranges ``[lo, hi)``, each with a value; gaps have none."""

    __slots__ = ("_starts", "_pieces")

    def __init__(self) -> None:
        self._starts: list[int] = []
        self._pieces: list[Piece] = []

    def __len__(self) -> int:
        return len(self._pieces)

    def _span(self, lo: int, hi: int) -> tuple[int, int]:
        """Indices ``i, j`` of the pieces that overlap ``[lo, hi)``: ``pieces[i:j]``."""
        i = bisect.bisect_right(self._starts, lo) - 1
        if i < 0 or self._pieces[i][1] <= lo:
            i += 1
        j = bisect.bisect_left(self._starts, hi, lo=max(i, 0))
        return i, j

    def overlapping(self, lo: int, hi: int) -> Iterator[Piece]:
        """The pieces that share bytes with ``[lo, hi)``, clipped to it, in address order."""
        if hi <= lo:
            return
        i, j = self._span(lo, hi)
        for a, b, value in self._pieces[i:j]:
            yield max(a, lo), min(b, hi), value

    def update(self, lo: int, hi: int, fn: Callable[[Any], Any]) -> None:
        """Give every byte of ``[lo, hi)`` the value ``fn(old)`` (old is None in gaps; None drops)."""
        if hi <= lo:
            return
        i, j = self._span(lo, hi)
        if i == j or (j == i + 1 and self._pieces[i][0] == lo and self._pieces[i][1] == hi):
            self._whole(i, j, lo, hi, fn)  # a gap, or exactly one piece: what the loop gives
            return
        old = self._pieces[i:j]
        new: list[Piece] = []
        if old and old[0][0] < lo:
            new.append((old[0][0], lo, old[0][2]))
        cursor = lo
        results: dict[int, Any] = {}
        for a, b, value in old:
            a, b = max(a, lo), min(b, hi)
            if cursor < a:
                _append(new, cursor, a, fn(None))
            key = id(value)
            if key not in results:
                results[key] = fn(value)
            _append(new, a, b, results[key])
            cursor = b
        if cursor < hi:
            _append(new, cursor, hi, fn(None))
        if old and old[-1][1] > hi:
            new.append((hi, old[-1][1], old[-1][2]))
        self._pieces[i:j] = new
        self._starts[i:j] = [p[0] for p in new]

    def _whole(self, i: int, j: int, lo: int, hi: int, fn: Callable[[Any], Any]) -> None:
        """``update`` where ``[lo, hi)`` is a gap (``i == j``) or exactly the piece ``i``."""
        value = fn(None if i == j else self._pieces[i][2])
        if value is None:
            del self._pieces[i:j], self._starts[i:j]
        else:
            self._pieces[i:j] = [(lo, hi, value)]
            self._starts[i:j] = [lo]

    def assign(self, lo: int, hi: int, value: Any) -> None:
        """Give every byte of ``[lo, hi)`` ``value`` (None clears the range)."""
        self.update(lo, hi, lambda _old: value)


def _append(pieces: list[Piece], a: int, b: int, value: Any) -> None:
    """Add ``[a, b) -> value``, merged with the previous piece when they touch and agree."""
    if value is None:
        return
    if pieces and pieces[-1][1] == a and pieces[-1][2] is value:
        pieces[-1] = (pieces[-1][0], b, value)
    else:
        pieces.append((a, b, value))
