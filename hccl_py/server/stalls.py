"""Kernels stuck in their own code, on a rank whose threads run at once (gloo, hccl).

The emulator stops a runner that keeps its baton for the run's timeout without
an hccl_py call. Real threads have no baton: a kernel that polls a flag through
a tensor view it holds (``while int(flag[0]) != 1``) makes no hccl_py call, and
a flag that nobody writes would keep it spinning for ever. So every hccl_py call
of a kernel thread enters :class:`KernelStalls` (the server's ``serial``), which
notes when the thread was last inside one, and the rank's watchdog calls
:meth:`KernelStalls.stop_stuck`: a kernel thread that ran its own code for the
run's timeout is stopped at its next bytecode with an :class:`HcclTimeoutError`
that shows where it runs. A thread inside an hccl_py call (a Wait, a framework
collective) is never stopped this way: those calls have timeouts of their own.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from typing import Any

from ..core.errors import HcclTimeoutError
from .threads import raise_in_thread

#: Lines of a stuck thread's stack shown in its report (the innermost).
STACK_LINES = 12


class _Stopped(BaseException):
    """Internal: raised in a stuck kernel thread; :meth:`KernelStalls.kernel` turns it into the
    thread's report."""


class KernelStalls:
    """The kernel threads of one rank, and when each was last inside an hccl_py call."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.lock = threading.Lock()
        #: thread ident -> [hccl_py calls it is inside, when it last left one, who].
        self.threads: dict[int, list[Any]] = {}
        #: thread ident -> the report of a thread that was stopped (raised when it lands).
        self.reports: dict[int, HcclTimeoutError] = {}

    def __enter__(self) -> None:
        entry = self.threads.get(threading.get_ident())
        if entry is not None:
            with self.lock:
                entry[0] += 1

    def __exit__(self, *exc: object) -> None:
        entry = self.threads.get(threading.get_ident())
        if entry is not None:
            with self.lock:
                entry[0] -= 1
                entry[1] = time.monotonic()

    @contextlib.contextmanager
    def kernel(self, rank: int, who: str) -> Iterator[None]:
        """Around one core's run of a kernel (in its thread): watched while it runs."""
        me = threading.get_ident()
        with self.lock:
            outer = self.threads.get(me)  # a framework collective's launch inside a kernel
            self.threads[me] = [0, time.monotonic(), (rank, who)]
        try:
            yield
        except _Stopped:
            raise self.reports.pop(me) from None
        finally:
            with self.lock:
                if outer is None:
                    self.threads.pop(me, None)
                else:
                    self.threads[me] = outer

    def stop_stuck(self) -> None:
        """Stop every kernel thread that ran its own code for the timeout (the watchdog's call)."""
        now = time.monotonic()
        with self.lock:
            for ident, (depth, left, (rank, who)) in list(self.threads.items()):
                if depth or now - left < self.timeout or ident in self.reports:
                    continue
                self.reports[ident] = HcclTimeoutError(
                    f"rank {rank}{f' {who}' if who else ''} ran its kernel's own code for "
                    f"{self.timeout:g} s (the run's timeout) without an hccl_py call: a loop that "
                    "polls a flag through a tensor it holds, with nobody to write the flag? It "
                    f"runs here:\n{_stack(ident)}",
                    rank=rank,
                )
                # Under the lock: the thread cannot be entering an hccl_py call meanwhile.
                raise_in_thread(ident, _Stopped)


def _stack(ident: int) -> str:
    """Where thread ``ident`` runs: its frames inside the kernel (after hccl_py's last one)."""
    frame = sys._current_frames().get(ident)
    if frame is None:
        return "  (its stack is not available)"
    frames = traceback.extract_stack(frame)
    ours = [i for i, f in enumerate(frames) if f.filename.startswith(_PACKAGE)]
    kernel = frames[ours[-1] + 1 :] if ours else frames
    return "".join(traceback.format_list(kernel[-STACK_LINES:])).rstrip()


#: Where hccl_py's own modules are.
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
