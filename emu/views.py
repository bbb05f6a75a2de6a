"""Numpy views of window bytes, for the window race check.

``t.numpy()`` of a window tensor shares the window's memory: what a kernel
writes through it is no torch operation, so :mod:`.watch` cannot see it. A
:class:`HeldViews` keeps, for every such view, the bytes it covered when it was
taken. Bytes that changed under it and that no seen write explains were
written by its holder through it: they are recorded as the holder's write as
soon as a peer reads them (so a flag set with ``t.numpy()[0] = 1`` orders the
data before it) or the view dies. While a view lives, its holder may also
*read* through it unseen (poll a flag): :meth:`HeldViews.blind` says so, and
the holder's findings become warnings.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from hccl_py.server.windows import WindowAllocation

from .intervals import Runs


class WriteLog(Protocol):
    """What the views need of the race check (:class:`~.races.WindowRaces` has it)."""

    lock: threading.RLock
    version: int

    def unseen_write(
        self, rank: int, window: WindowAllocation, runs: Runs, since: int, where: str
    ) -> None: ...


@dataclass(eq=False)
class HeldView:
    """One numpy view of window bytes and what they held when last looked at."""

    holder: int
    window: WindowAllocation
    array: weakref.ref
    mirror: np.ndarray  # the same bytes, held by the check
    before: np.ndarray  # their element bytes when last looked at
    offsets: np.ndarray  # window offset of each element
    since: int  # the write version when last looked at
    where: str
    lo: int
    hi: int


def element_bytes(array: np.ndarray) -> np.ndarray:
    """The bytes of each element of ``array``, one row per element in row-major order."""
    return np.ascontiguousarray(array).reshape(-1).view(np.uint8).reshape(-1, array.itemsize)


def runs_of(starts: np.ndarray, size: int) -> Runs:
    """The contiguous byte ranges covered by elements of ``size`` bytes at sorted ``starts``."""
    breaks = np.flatnonzero(np.diff(starts) > size) + 1
    firsts = np.concatenate(([0], breaks))
    lasts = np.concatenate((breaks - 1, [len(starts) - 1]))
    return [(int(a), int(b) + size) for a, b in zip(starts[firsts], starts[lasts], strict=True)]


class HeldViews:
    """The live numpy views of the windows of one emulated world (under the races' lock)."""

    def __init__(self, races: WriteLog) -> None:
        self.races = races
        self.live: list[HeldView] = []

    def add(
        self,
        holder: int,
        window: WindowAllocation,
        array: np.ndarray,
        mirror: np.ndarray,
        offsets: np.ndarray,
        where: str,
    ) -> None:
        """Rank ``holder`` took ``array``, a numpy view of ``window`` bytes at ``offsets``."""
        with self.races.lock:
            view = HeldView(
                holder,
                window,
                weakref.ref(array),
                mirror,
                element_bytes(mirror).copy(),
                offsets,
                self.races.version,
                where,
                int(offsets.min()),
                int(offsets.max()) + mirror.itemsize,
            )
            self.live.append(view)
            weakref.finalize(array, self._died, view)

    def settle(self, window: WindowAllocation, runs: Runs, reader: int) -> None:
        """Before rank ``reader`` reads ``runs``: record what peers wrote through their views."""
        lo, hi = runs[0][0], runs[-1][1]
        for view in self.live:
            if view.window is window and view.holder != reader and view.lo < hi and lo < view.hi:
                self._look(view)

    def blind(self, rank: int) -> str | None:
        """Where rank ``rank`` took a numpy view of window bytes that is still alive, if any."""
        return next(
            (v.where for v in self.live if v.holder == rank and v.array() is not None), None
        )

    def _died(self, view: HeldView) -> None:
        with self.races.lock:
            self._look(view)
            self.live.remove(view)

    def _look(self, view: HeldView) -> None:
        """Record the bytes that changed under ``view`` as its holder's write, unless a seen write did."""
        now = element_bytes(view.mirror)
        changed = (now != view.before).any(axis=1)
        if changed.any():
            size = view.mirror.itemsize
            runs = runs_of(np.unique(view.offsets[changed]), size)
            where = f"{view.where} (through a numpy view)"
            self.races.unseen_write(view.holder, view.window, runs, view.since, where)
            view.before = now.copy()
        view.since = self.races.version
