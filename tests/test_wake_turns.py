"""WakeCondition wakes the waiters whose test passed in turn (issue 28, goal 2).

Each released waiter passes the turn on once it holds the lock again, so every one of
them wakes; a waiter that timed out while waiting for its turn does not stop the
others; a notification that wakes everyone (``on_notify``) releases the waiting turns
at once. Outcomes only, never timed: any interleaving of the threads must pass.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from hccl_py.server.threads import WakeCondition

WAITERS = 6


def _waiters(
    cond: WakeCondition, tests: list[Callable[[], bool]], timeouts: list[float | None]
) -> tuple[list[threading.Thread], list[bool]]:
    """Threads that wait on ``cond`` with ``tests`` and ``timeouts`` and their results (in
    order); returns once all of them sleep."""
    results: list[bool] = [False] * len(tests)

    def wait(i: int) -> None:
        with cond:
            results[i] = cond.wait_until(tests[i], timeouts[i])

    threads = [threading.Thread(target=wait, args=(i,), daemon=True) for i in range(len(tests))]
    for t in threads:
        t.start()
    while True:
        with cond:
            if len(cond._sleepers) == len(tests):
                return threads, results
        time.sleep(0.001)


def _settled(cond: WakeCondition, threads: list[threading.Thread]) -> None:
    """Every waiter returned, and no turn is left over."""
    for t in threads:
        t.join(60)
        assert not t.is_alive()
    assert cond._turn is None and not cond._pending and not cond._sleepers and not cond._tested


def test_every_waiter_whose_test_passed_wakes_in_turn() -> None:
    cond, ready = WakeCondition(threading.RLock()), [False]
    threads, results = _waiters(cond, [lambda: ready[0]] * WAITERS, [None] * WAITERS)
    with cond:
        cond.notify_all()  # no test passes: nobody wakes
        assert len(cond._sleepers) == WAITERS and not cond._pending
        ready[0] = True
        cond.notify_all()
        # one released, the others wait for their turn while the notifier holds the lock
        assert cond._turn is not None and len(cond._pending) == WAITERS - 1
    _settled(cond, threads)
    assert results == [True] * WAITERS


def test_a_waiter_that_times_out_before_its_turn_does_not_stop_the_others() -> None:
    cond, ready = WakeCondition(threading.RLock()), [False]
    timeouts = [None, 0.2, None, 0.2, None]
    threads, results = _waiters(cond, [lambda: ready[0]] * len(timeouts), timeouts)
    with cond:
        ready[0] = True
        cond.notify_all()
        # those with a timeout may time out before their turn: either way every waiter returns
        threads[1].join(1)
        threads[3].join(1)
    _settled(cond, threads)
    assert results[0] and results[2] and results[4]


def test_a_notification_that_wakes_everyone_releases_the_turns_at_once() -> None:
    cond, ready = WakeCondition(threading.RLock()), [False]
    tests = [lambda: ready[0]] * WAITERS + [lambda: False]
    threads, results = _waiters(cond, tests, [None] * len(tests))
    with cond:
        ready[0] = True
        cond.notify_all()
        assert len(cond._pending) == WAITERS - 1 and len(cond._sleepers) == 1
        cond.on_notify = lambda: True  # as the blocker's hook after a failure
        cond.notify_all()
        assert not cond._pending and not cond._sleepers
    _settled(cond, threads)
    assert results == [True] * len(tests)
