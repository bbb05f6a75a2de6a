"""The watch of a rank's host code while Hcomm reads that it posted are in flight.

A kernel may return with ``ReadNbi`` requests in flight (EngramFetch reads in one
launch and drains in the next): until their channel's ``Drain``, the rank's host
code must not touch their destination either. Each rank's function has a
:class:`HostScope`, which is also the scope of each of its kernel launches;
after a launch that leaves such requests (:mod:`.posted`), it puts a
:class:`HostWatch` on the host runner's dispatch mode stack, which checks the
host's torch operations against their bytes only (nothing else is watched on
the host). The watch is off while a kernel of the
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
    """One rank's host watch, entered after the first kernel launch that leaves reads in
    flight and left by :meth:`close` when the rank's function returns; as a context manager,
    the scope of one launch (around ``inner``, the race check's own scope of it): the watch
    is off inside and back on after it while reads are in flight."""

    def __init__(self, posted: PostedRequests, rank: int, internal: Callable[[], bool]) -> None:
        self.posted = posted
        self.rank = rank
        self.internal = internal
        self.stack = contextlib.ExitStack()
        self.watch: HostWatch | None = None
        self.inner: contextlib.AbstractContextManager = contextlib.nullcontext()

    def close(self) -> None:
        """The rank's function returned: take the watch off."""
        self.stack.close()

    def __enter__(self) -> None:
        watch = self.watch
        if watch is not None and _CORE.get() is watch:
            watch.paused = True
            watch.off()
        self.inner.__enter__()

    def __exit__(self, *exc: object) -> None:
        try:
            self.inner.__exit__(*exc)
        finally:
            if self.watch is not None or self.posted.pending[self.rank]:
                self._launched()

    def _launched(self) -> None:
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
