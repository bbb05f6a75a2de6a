"""Waiting for a process-group call while looking for peers that will never join it."""

from __future__ import annotations

import threading
from collections.abc import Callable

import torch.distributed as dist


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
    while not finished.wait(every):
        look()
    try:
        work.wait()
    except Exception:
        failed()
        raise
