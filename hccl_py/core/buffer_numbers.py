"""Each rank's buffers numbered as its own address space, per run (``bufN``, ``int(addr)``).

A rank's buffers are numbered from 0 in every run, whatever other ranks, other runs
(nested, concurrent) or other schedules of an exploration allocate: names and integer
addresses then depend only on the rank's own program, as in a rank process of its own,
and a seed replays what an exploration reported.
"""

from __future__ import annotations

import itertools
import weakref
from typing import Any


class BufferNumbers:
    """One rank's buffers in one run, numbered as its own address space (``bufN``, ``int(addr)``),
    and those whose integer address was taken, for :meth:`GmAddr.from_int`."""

    __slots__ = ("_next", "by_number")

    def __init__(self) -> None:
        self._next = itertools.count()
        self.by_number: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()

    def take(self) -> int:
        """The next buffer's number."""
        return next(self._next)


#: The numbers of buffers made outside any rank (host code around ``hp.run``).
_OUTSIDE = BufferNumbers()


def numbers_of(ctx: Any) -> BufferNumbers:
    """The buffer numbers of rank context ``ctx`` (None: outside any rank)."""
    return _OUTSIDE if ctx is None else ctx.buffers
