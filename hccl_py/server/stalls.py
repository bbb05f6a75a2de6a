"""Kernels stuck in their own code, on a rank whose threads run at once (gloo, hccl).

The emulator stops a runner that keeps its baton for the run's timeout without
an hccl_py call. Real threads have no baton: a kernel that polls a flag through
a tensor view it holds (``while int(flag[0]) != 1``) makes no hccl_py call, and
a flag that nobody writes would keep it spinning for ever. So every hccl_py call
of a kernel thread enters :class:`KernelStalls` (the server's ``serial``; CrossCore
flags call :meth:`KernelStalls.touch`), which notes when the thread was last
inside one, and the rank's watchdog calls :meth:`KernelStalls.stop_stuck`: a
kernel thread that ran its own code for the run's timeout is stopped at its next
bytecode with an :class:`HcclTimeoutError` that shows where it runs. A thread
found inside hccl_py's code (a Wait, a flag, a framework collective, a nested
launch) is in a call and is never stopped this way: those calls have timeouts of
their own.
"""

from __future__ import annotations

import sys
import threading
import time
import traceback
from collections.abc import Callable
from types import FrameType
from typing import Any

from ..core.errors import HcclTimeoutError
from ..core.report import in_package
from ..core.where import library, ours
from .threads import raise_in_thread

#: Lines of a stuck thread's stack shown in its report (the innermost).
STACK_LINES = 12


#: thread ident -> (report, rank) of a stop sent to it: the exception reads it when it is made
#: in that thread (an asynchronous exception is made where it lands).
_SENT: dict[int, tuple[str, int]] = {}


class _Entry(threading.local):
    """A thread's entry of :attr:`KernelStalls.threads`: None in a thread outside every kernel
    (a class default, read without a ``getattr`` call at every hccl_py call)."""

    entry: list[Any] | None = None


class KernelStallError(HcclTimeoutError):
    """A kernel thread stopped by its rank's watchdog; made in the stopped thread from the
    report the watchdog left for it, so that it is that report wherever it lands."""

    def __init__(self, *args: Any, **facts: Any) -> None:
        if not args:  # raised asynchronously: the class, made here
            reason, rank = _SENT.pop(threading.get_ident(), ("stopped by its watchdog", None))
            args, facts = (reason,), {"rank": rank}
        super().__init__(*args, **facts)


class KernelStalls:
    """The kernel threads of one rank, and when each was last inside an hccl_py call."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.lock = threading.Lock()
        #: thread ident -> [hccl_py calls it is inside, when it last left one, who].
        self.threads: dict[int, list[Any]] = {}
        #: The calling thread's entry of ``threads`` (``entry``), found without asking for its
        #: ident at every hccl_py call.
        self._mine = _Entry()
        #: Threads stopped (their report sent) during their current kernel.
        self.stopped: set[int] = set()

    def __enter__(self) -> None:
        entry = self._mine.entry
        if entry is not None:
            with self.lock:  # a stop sent meanwhile lands here, before the call starts
                entry[0] += 1

    def __exit__(self, *exc: object) -> None:
        entry = self._mine.entry
        if entry is not None:
            # No lock: the time first, so that the watchdog, which reads both at once, never
            # finds the thread outside every call with the time it entered this one.
            entry[1] = time.monotonic()
            entry[0] -= 1

    def held_call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` inside this watch: :meth:`__enter__`, the call and :meth:`__exit__` in
        one frame (every client call of a kernel thread takes this path, ``serial_run``)."""
        entry = self._mine.entry
        if entry is None:
            return fn(*args)
        with self.lock:  # a stop sent meanwhile lands here, before the call starts
            entry[0] += 1
        try:
            return fn(*args)
        finally:
            entry[1] = time.monotonic()  # the time first, as in __exit__
            entry[0] -= 1

    def kernel(self, rank: int, who: str) -> _KernelScope:
        """Around one core's run of a kernel (in its thread): watched while it runs."""
        return _KernelScope(self, rank, who)

    def touch(self) -> None:
        """The calling kernel thread is in an hccl_py call now (one that ``serial`` does not
        wrap)."""
        entry = self._mine.entry
        if entry is not None:
            entry[1] = time.monotonic()

    def stop_stuck(self) -> None:
        """Stop every kernel thread that ran its own code for the timeout (the watchdog's call).

        A thread found inside hccl_py's code now (a wait of a CrossCore flag, a framework
        collective, a nested launch) is in an hccl_py call: its clock starts again.
        """
        now = time.monotonic()
        with self.lock:
            for ident, entry in list(self.threads.items()):
                depth, left, (rank, who) = entry
                if depth or now - left < self.timeout or ident in self.stopped:
                    continue
                frame = sys._current_frames().get(ident)  # under the lock: where it is now
                if frame is None or _inside_hccl_py(frame):
                    entry[1] = now
                    continue
                _SENT[ident] = (
                    f"rank {rank}{f' {who}' if who else ''} ran its kernel's own code for "
                    f"{self.timeout:g} s (the run's timeout) without an hccl_py call: a loop that "
                    f"polls a flag through a tensor it holds, with nobody to write the flag? It "
                    f"runs here:\n{_stack(frame)}",
                    rank,
                )
                self.stopped.add(ident)
                # Under the lock, which the thread takes to enter an hccl_py call or to leave
                # the kernel: the exception lands in its own code, or as it takes the lock
                # (before the call starts), or the kernel's end cancels it (``kernel``).
                raise_in_thread(ident, KernelStallError)


class _KernelScope:
    """:meth:`KernelStalls.kernel`: one core's run of a kernel, watched while it runs (a class
    rather than a generator's context manager: four calls less per core and launch)."""

    __slots__ = ("stalls", "rank", "who", "me", "outer")

    def __init__(self, stalls: KernelStalls, rank: int, who: str) -> None:
        self.stalls, self.rank, self.who = stalls, rank, who

    def __enter__(self) -> None:
        stalls = self.stalls
        me = self.me = threading.get_ident()
        with stalls.lock:
            self.outer = stalls.threads.get(me)  # a framework collective's launch inside a kernel
            stalls.threads[me] = stalls._mine.entry = [0, time.monotonic(), (self.rank, self.who)]
            stalls.stopped.discard(me)

    def __exit__(self, kind: Any, stopped: Any, tb: Any) -> None:
        stalls, me, outer = self.stalls, self.me, self.outer
        try:
            if isinstance(stopped, KernelStallError):  # the report, with the kernel's frames
                raise HcclTimeoutError(stopped.reason, rank=stopped.rank).with_traceback(
                    stopped.__traceback__
                ) from None
        finally:
            if me in stalls.stopped and _SENT.pop(me, None) is not None:
                raise_in_thread(me, None)  # sent as the kernel returned, not landed: cancelled
            with stalls.lock:
                if outer is None:
                    stalls.threads.pop(me, None)
                else:  # the outer kernel waited for this one: an hccl_py call
                    outer[1] = time.monotonic()
                    stalls.threads[me] = outer
                stalls._mine.entry = outer


def _inside_hccl_py(frame: FrameType | None) -> bool:
    """Whether the innermost frame that is not torch's or Python's own is hccl_py's: the
    thread is inside an hccl_py call (else in the kernel's own code)."""
    while frame is not None:
        if in_package(frame):
            return True
        if not library(frame.f_code.co_filename):
            return False
        frame = frame.f_back
    return False


def _stack(frame: FrameType) -> str:
    """Where a thread runs: its frames inside the kernel (after hccl_py's last one)."""
    frames = traceback.extract_stack(frame)
    mine = [i for i, f in enumerate(frames) if ours(f.filename)]
    kernel = frames[mine[-1] + 1 :] if mine else frames
    return "".join(traceback.format_list(kernel[-STACK_LINES:])).rstrip()
