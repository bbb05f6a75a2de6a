"""Which threads a run left behind: every thread that is new and not an idle pool thread."""

from __future__ import annotations

import threading

from hccl_py.server.threads import IDLE_NAME


def threads_now() -> set[threading.Thread]:
    """The threads alive now (a baseline for :func:`left_since`)."""
    return set(threading.enumerate())


def left_since(baseline: set[threading.Thread]) -> list[str]:
    """Names of the threads alive now that were not at ``baseline``, idle pool threads aside
    (they wait for the next job and end on their own; a thread that ended does not count)."""
    return sorted(
        t.name for t in threading.enumerate() if t not in baseline and t.name != IDLE_NAME
    )
