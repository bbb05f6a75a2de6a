"""Hand-offs between threads that take turns, kept on one CPU.

The emulator's thread runners run one at a time: a runner wakes the next one
and goes to sleep. Woken on another CPU, the next runner waits for that CPU
to notice (on a virtual machine, an interrupt between virtual CPUs: tens of
microseconds to milliseconds), while the CPU it could have run on, the one its
waker is about to leave, goes idle. :class:`SameCpu` pins the thread about to
be woken to the waker's CPU, and the woken thread lets itself run anywhere
again as soon as it runs (:meth:`SameCpu.unpin`): its own code, and the torch
intra-op threads it may start, keep every CPU they had (a mask the thread set
for itself included).

Linux only (``os.sched_setaffinity`` and libc's ``sched_getcpu``); off where
either is missing, where the process may use one CPU only, where
:data:`SAME_CPU_ENV` is ``0``, and from the first refused call on (a CPU set
changed under the process, say): the hand-offs then wake threads wherever the
operating system likes, as before.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
from collections.abc import Callable

from ..core.config import env_flag

#: Environment variable: ``0`` turns :class:`SameCpu` off (to compare, or where pinning is unwelcome).
SAME_CPU_ENV = "HCCL_PY_SAME_CPU"


@functools.cache
def _getcpu() -> Callable[[], int] | None:
    """libc's ``sched_getcpu`` (the calling thread's CPU), or None where there is none."""
    if not hasattr(os, "sched_setaffinity"):
        return None
    try:
        return ctypes.CDLL(None).sched_getcpu
    except (OSError, AttributeError):
        return None


class SameCpu:
    """Wakes a thread on the CPU of the thread that wakes it, then gives it back the CPUs it had.

    On only where the thread that makes it may run on more than one CPU.
    """

    def __init__(self) -> None:
        self._getcpu = _getcpu() if env_flag(SAME_CPU_ENV, True) else None
        self.on = self._getcpu is not None and len(os.sched_getaffinity(0)) > 1
        #: Threads pinned (for tests: the hand-offs it kept on one CPU).
        self.pins = 0

    def pin(self, tid: int | None) -> set[int] | None:
        """Before waking thread ``tid`` (its native id): let it run on the caller's CPU only.

        Returns the CPUs it had (None where it did not pin): the woken thread gives
        them to :meth:`unpin`, so that a mask of its own (a rank's
        ``os.sched_setaffinity``, an OpenMP binding) survives its hand-offs.
        """
        if not (self.on and tid):
            return None
        try:  # (sched_getcpu returns -1 where it fails: refused as a CPU number)
            had = os.sched_getaffinity(tid)
            os.sched_setaffinity(tid, {self._getcpu()})
        except (OSError, ValueError, OverflowError):
            self.on = False
            return None
        self.pins += 1
        return had

    def unpin(self, had: set[int]) -> None:
        """In a thread that :meth:`pin` pinned, once it runs: the CPUs it had (``pin``'s answer)."""
        try:
            os.sched_setaffinity(0, had)
        except OSError:  # they are no longer the process's: take the main thread's
            self.on = False
            with contextlib.suppress(OSError):
                os.sched_setaffinity(0, os.sched_getaffinity(os.getpid()))
