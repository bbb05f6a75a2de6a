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

    __slots__ = ("take", "by_number")

    def __init__(self) -> None:
        #: ``take()``: the next buffer's number (a C call: every buffer of a launch takes one).
        self.take = itertools.count().__next__
        self.by_number: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()


#: The numbers of buffers made outside any rank (host code around ``hp.run``).
OUTSIDE = BufferNumbers()


def numbers_of(ctx: Any) -> BufferNumbers:
    """The buffer numbers of rank context ``ctx`` (None: outside any rank)."""
    return OUTSIDE if ctx is None else ctx.buffers
