"""Waiting for a process-group call while looking for peers that will never join it."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable

import torch.distributed as dist

#: Calls whose waiter stopped waiting (a peer failed or left, the timeout) while the process
#: group still held them. When the peer's process ends such a call fails; if that happens while
#: this process shuts down, gloo aborts it (rc 134): :func:`settle_abandoned` lets them fail first.
_ABANDONED: list[tuple[dist.Work, threading.Event]] = []


def watch_work(
    work: dist.Work, every: float, look: Callable[[], None], failed: Callable[[], None]
) -> None:
    """Block until ``work`` finished; meanwhile call ``look()`` every ``every`` seconds.

    ``look`` raises to stop waiting (an abort, an absent peer, the timeout); a failed
    ``work`` raises its own error, after ``failed()`` (which may raise a clearer one:
    the peer whose process ended). A done callback wakes the thread, so the wait works
    for every process group (gloo's ``wait(timeout)`` would too, but cost the same CPU
    per launch in a measurement, within this machine's noise).
    """
    finished = threading.Event()
    work.get_future().add_done_callback(lambda _: finished.set())
    try:
        while not finished.wait(every):
            look()
    except BaseException:
        _ABANDONED.append((work, finished))
        raise
    try:
        work.wait()
    except Exception:
        failed()
        raise


def settle_abandoned(within_s: float) -> None:
    """Wait up to ``within_s`` seconds in all for the calls this process stopped waiting for to
    end (they fail once their peers' processes end), and take their errors: called when the
    process leaves the world, after every rank's outcome was exchanged."""
    deadline = time.monotonic() + within_s
    while _ABANDONED:
        work, finished = _ABANDONED.pop()
        if finished.wait(max(0.0, deadline - time.monotonic())):
            with contextlib.suppress(Exception):  # the peer is gone: that was reported
                work.wait()
