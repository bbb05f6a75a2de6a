"""Exact deadlock detection of pollers under the emulator's scheduler (emu/scheduler.py).

One runner runs at a time, so a poller that sees an unchanged value blocks until
the value changes; when every runner is blocked that way, the deadlock is
certain and reported at once. No poll is counted and no clock is read: a
machine that deschedules the process for seconds changes nothing.
"""

from __future__ import annotations

import functools
import itertools
import time
from collections.abc import Callable, Iterator

import pytest
from hccl_py.backends.emu.policies import Policy, SeededPolicy
from hccl_py.backends.emu.scheduler import Scheduler

from hccl_py.core.errors import HcclDeadlockError
from hccl_py.server import blocking


@pytest.fixture
def loaded_machine(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every clock read is a second after the previous one."""
    ticks = itertools.count()
    start = time.monotonic()
    monkeypatch.setattr(blocking.time, "monotonic", lambda: start + next(ticks))
    yield


def run_runners(
    bodies: dict[str, Callable[[Scheduler], None]], policy: Policy | None = None
) -> dict[str, object]:
    """Run each body as a runner of one scheduler; record "done" or its deadlock error."""
    sched = Scheduler(10.0**9, policy or Policy())
    seen: dict[str, object] = {}

    def body(name: str, fn: Callable[[Scheduler], None]) -> None:
        try:
            fn(sched)
            seen[name] = "done"
        except HcclDeadlockError as err:
            seen[name] = err
        finally:
            sched.leave()

    threads = [
        sched.spawn(functools.partial(body, name, fn), name, (i,), i)
        for i, (name, fn) in enumerate(bodies.items())
    ]
    sched.begin()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a runner never ended"
    return seen


def poller(cell: list[int], want: int, name: str) -> Callable[[Scheduler], None]:
    """Poll ``cell[0]`` until it holds ``want``."""

    def body(sched: Scheduler) -> None:
        while cell[0] != want:
            sched.poll(name, cell[0], f"{name} polls a flag nobody writes", read=lambda: cell[0])

    return body


def test_two_pollers_nobody_writes_for_are_a_deadlock(loaded_machine) -> None:
    a, b = [0], [0]
    seen = run_runners({"rank 0": poller(a, 1, "rank 0"), "rank 1": poller(b, 1, "rank 1")})
    assert all(isinstance(v, HcclDeadlockError) for v in seen.values()), seen
    report = str(seen["rank 0"])
    assert "  - ranks 0-1: poll a flag nobody writes" in report  # identical states share a line


def test_a_writer_that_computes_first_is_no_deadlock(loaded_machine) -> None:
    cell = [0]

    def writer(sched: Scheduler) -> None:
        total = sum(range(100_000))  # its own code, with no hccl_py call: no switch here
        cell[0] = 1 if total else 2

    seen = run_runners({"rank 0": poller(cell, 1, "rank 0"), "rank 1": writer})
    assert seen == {"rank 0": "done", "rank 1": "done"}


@pytest.mark.parametrize("seed", range(6))
def test_every_seeded_schedule_ends_the_same(seed: int) -> None:
    cell = [0]

    def writer(sched: Scheduler) -> None:
        for _ in range(5):
            sched.point()
        cell[0] = 1

    seen = run_runners({"rank 0": poller(cell, 1, "rank 0"), "rank 1": writer}, SeededPolicy(seed))
    assert seen == {"rank 0": "done", "rank 1": "done"}
