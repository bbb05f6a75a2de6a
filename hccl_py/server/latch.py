"""A one-shot latch that threads wait on more cheaply than on a ``threading.Event``."""

from __future__ import annotations

import threading


class Latch:
    """Set once, from any thread; every wait from then on returns at once.

    A lock held until the latch is set: a wait is one acquire (and a release that leaves it
    set), where an Event's goes through a Python condition (a dozen calls). Pool jobs, greenlet
    runners and the gloo backend's wait for a process-group call end through one.
    """

    __slots__ = ("_lock", "done")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lock.acquire()
        #: Whether it was set.
        self.done = False

    def set(self) -> None:
        """Set it (once): whoever waits goes on."""
        self.done = True
        self._lock.release()

    def wait(self, timeout: float | None = None) -> bool:
        """Whether it is set within ``timeout`` seconds (None: wait until it is; 0 or less: do
        not block, as an Event's wait)."""
        if self.done:
            return True
        if self._lock.acquire(True, -1 if timeout is None else max(0.0, timeout)):
            self._lock.release()  # set for the next waiter too
            return True
        return False
