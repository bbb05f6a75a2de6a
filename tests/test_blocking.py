"""Deadlock detection of pollers (hccl_py.server.blocking.Blocker) on a loaded machine.

A thread that polls an unchanged value counts as spinning while it keeps polling.
"Keeps polling" is read on two clocks: wall time, and the world's poll count. On a
busy CI machine the whole process is descheduled for tens of milliseconds at a time;
the poll count keeps two spinners that wait for each other a deadlock there, while
a thread that stopped polling to compute still drops out of the picture.
"""

from __future__ import annotations

import itertools
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from hccl_py.core.errors import HcclDeadlockError
from hccl_py.server import blocking
from hccl_py.server.blocking import FROZEN_POLLS, SPIN_POLLS, Blocker

#: More polls than a deadlock needs (SPIN_POLLS + FROZEN_POLLS), with room to spare.
ENOUGH = 3 * (SPIN_POLLS + FROZEN_POLLS)


@pytest.fixture
def loaded_machine(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every clock read is 10 ms after the previous one, and threads switch often."""
    ticks = itertools.count()
    start = time.monotonic()
    monkeypatch.setattr(blocking.time, "monotonic", lambda: start + 0.01 * next(ticks))
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    yield
    sys.setswitchinterval(interval)


def spin(blocker: Blocker, name: str, polls: int, seen: dict[str, object]) -> None:
    """Poll an unchanged value ``polls`` times; record how it ended."""
    try:
        for _ in range(polls):
            blocker.poll(name, 0, f"{name} polls a flag nobody writes")
        seen[name] = "done"
    except HcclDeadlockError as err:
        seen[name] = err


def run_threads(blocker: Blocker, polls: dict[str, int]) -> dict[str, object]:
    seen: dict[str, object] = {}
    threads = [threading.Thread(target=spin, args=(blocker, n, k, seen)) for n, k in polls.items()]
    blocker.enter(len(threads))
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    return seen


def test_two_spinners_are_a_deadlock_even_when_the_process_is_descheduled(loaded_machine) -> None:
    seen = run_threads(Blocker(timeout=10.0**9), {"rank 0": ENOUGH, "rank 1": ENOUGH})
    assert all(isinstance(v, HcclDeadlockError) for v in seen.values()), seen
    report = str(seen["rank 0"])
    assert "rank 0 polls a flag nobody writes" in report
    assert "rank 1 polls a flag nobody writes" in report


def test_a_spinner_that_stopped_polling_to_compute_is_no_deadlock(loaded_machine) -> None:
    blocker = Blocker(timeout=10.0**9)
    seen = run_threads(blocker, {"rank 1": SPIN_POLLS + 10})
    assert seen == {"rank 1": "done"}
    # rank 1 still runs (it computes, and will write the flag later); rank 0 spins alone.
    assert run_threads(blocker, {"rank 0": ENOUGH}) == {"rank 0": "done"}
