"""The watch of a rank's host code while Hcomm reads that it posted are in flight.

A kernel may return with ``ReadNbi`` requests in flight (EngramFetch reads in one
launch and drains in the next): until their channel's ``Drain``, the rank's host
code must not touch their destination either. :class:`HostScope` is entered
around each rank's function; after a kernel launch that leaves such requests
(:mod:`.posted`), it puts a :class:`HostWatch` on the host runner's dispatch
mode stack, which checks the host's torch operations against their bytes only
(nothing else is watched on the host). The watch is off while a kernel of the
rank runs (its cores have their own), and while nothing is in flight: a rank
that never posts a read into plain GM pays nothing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from .posted import PostedRequests
from .watch import _CORE, CoreWatch, WindowWatch


class HostWatch(CoreWatch):
    """A :class:`CoreWatch` of the host code of one rank, for its undrained Hcomm reads."""

    def __init__(self, posted: PostedRequests, rank: int, internal: Callable[[], bool]) -> None:
        # the posted requests stand in for the buffer check: the host sees only theirs
        super().__init__(WindowWatch(None, posted, rank, internal))  # type: ignore[arg-type]
        self.paused = False

    def sync(self) -> None:
        """As a core's watch, but off while a kernel of the rank runs."""
        if self.paused:
            self.off()
        else:
            super().sync()


class HostScope:
    """Around one rank's function: its host watch, entered after the first launch that
    leaves reads in flight, and left when the function returns."""

    def __init__(self, posted: PostedRequests, rank: int, internal: Callable[[], bool]) -> None:
        self.posted = posted
        self.rank = rank
        self.internal = internal
        self.stack = contextlib.ExitStack()
        self.watch: HostWatch | None = None

    def __enter__(self) -> HostScope:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stack.close()

    def launching(self) -> None:
        """A kernel launch of the rank starts: its cores watch themselves."""
        if self.watch is not None and _CORE.get() is self.watch:
            self.watch.paused = True
            self.watch.off()

    def launched(self) -> None:
        """The launch returned: watch the host while reads are in flight."""
        watch = self.watch
        if watch is None:
            if not self.posted.pending[self.rank] or _CORE.get() is not None:
                return
            watch = self.watch = HostWatch(self.posted, self.rank, self.internal)
            self.stack.enter_context(watch)
        elif _CORE.get() is not watch:
            return
        watch.paused = False
        watch.sync()
