"""Blocking with timeouts and deadlock detection.

Every call that can block (Wait, Finalize, SyncAll, a rank waiting for its
cores) goes through :meth:`Blocker.wait_for`. A blocker counts the threads that
run user code; when every one of them waits and no waited-for condition can
become true, that is a deadlock, reported at once with a line per waiting
thread instead of a hang. Each wait also has a timeout.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

from .errors import HcclDeadlockError, HcclPeerError, HcclTimeoutError

#: Environment variable overriding the default timeout (seconds) of every blocking call.
TIMEOUT_ENV = "HCCL_PY_TIMEOUT"
DEFAULT_TIMEOUT = 120.0

Job = Callable[[], None]
Text = str | Callable[[], str]


def default_timeout() -> float:
    """The timeout from ``HCCL_PY_TIMEOUT`` or :data:`DEFAULT_TIMEOUT`."""
    value = os.environ.get(TIMEOUT_ENV)
    return float(value) if value else DEFAULT_TIMEOUT


def _text(what: Text) -> str:
    return what() if callable(what) else what


class Blocker:
    """A condition variable shared by all threads of one world (or one process).

    ``take_work`` (optional) is called under the lock by a waiting thread; it may
    return a job (a callable) that the thread then runs outside the lock. This is
    how a lazily scheduled server executes rounds only when somebody waits.
    ``has_work`` tells, without taking it, whether such a job exists.
    """

    def __init__(self, timeout: float | None = None, detect_deadlock: bool = True) -> None:
        self.cond = threading.Condition(threading.RLock())
        self.timeout = default_timeout() if timeout is None else float(timeout)
        self.detect_deadlock = detect_deadlock
        self.active = 0
        self.blocked: dict[int, tuple[Callable[[], bool], Text]] = {}
        self.error: BaseException | None = None
        self.take_work: Callable[[], Job | None] = lambda: None
        self.has_work: Callable[[], bool] = lambda: False

    def enter(self, n: int = 1) -> None:
        """Count ``n`` more threads that run user code (call before starting them)."""
        with self.cond:
            self.active += n

    def leave(self) -> None:
        """The calling thread stops running user code; check whether the rest are stuck."""
        with self.cond:
            self.active -= 1
            self._check_deadlock()

    def notify(self) -> None:
        """Wake every waiter so it re-checks its condition."""
        with self.cond:
            self.cond.notify_all()

    def fail(self, error: BaseException) -> None:
        """Stop the world: every current and future wait raises because of ``error``."""
        with self.cond:
            if self.error is None:
                self.error = error
            self.cond.notify_all()

    def raise_if_failed(self) -> None:
        """Raise the world's failure in this thread (called under or outside the lock)."""
        error = self.error
        if error is None:
            return
        if isinstance(error, HcclDeadlockError):
            raise HcclDeadlockError(error.reason)
        rank = getattr(error, "hccl_rank", None)
        who = f"rank {rank}" if rank is not None else "another thread"
        raise HcclPeerError(f"stopped because {who} failed: {type(error).__name__}: {error}")

    def run_ready(self) -> None:
        """Run every job that ``take_work`` offers (an eager server calls this after a Commit)."""
        while True:
            with self.cond:
                job = self.take_work()
            if job is None:
                return
            job()

    def state(self) -> str:
        """One line per waiting thread: what it waits for."""
        with self.cond:
            lines = [_text(what) for _, what in self.blocked.values()]
        return "\n".join(f"  - {line}" for line in lines) or "  (no thread is waiting)"

    def wait_for(self, pred: Callable[[], bool], what: Text, timeout: float | None = None) -> None:
        """Block until ``pred()`` (evaluated under the lock) is true.

        Raises :class:`HcclDeadlockError` when no thread can make progress,
        :class:`HcclTimeoutError` after ``timeout`` seconds (default: the
        blocker's), and :class:`HcclPeerError` when the world failed meanwhile.
        """
        limit = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + limit
        me = threading.get_ident()
        with self.cond:
            while True:
                if pred():
                    return
                self.raise_if_failed()
                job = self.take_work()
                if job is not None:
                    self.cond.release()
                    try:
                        job()
                    finally:
                        self.cond.acquire()
                    continue
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise HcclTimeoutError(
                        f"timed out after {limit:g} s waiting for {_text(what)}; "
                        f"set {TIMEOUT_ENV} or timeout= to change the limit. "
                        f"Threads waiting now:\n{self.state()}"
                    )
                self.blocked[me] = (pred, what)
                try:
                    self._check_deadlock()
                    self.raise_if_failed()
                    self.cond.wait(remaining)
                finally:
                    self.blocked.pop(me, None)

    def _check_deadlock(self) -> None:
        """Under the lock: fail the world if every active thread waits in vain."""
        if not self.detect_deadlock or self.error is not None or not self.blocked:
            return
        if len(self.blocked) < self.active:
            return
        if any(pred() for pred, _ in self.blocked.values()):
            return
        if self.has_work():
            self.cond.notify_all()
            return
        lines = "\n".join(f"  - {_text(what)}" for _, what in self.blocked.values())
        self.error = HcclDeadlockError(
            f"deadlock: every running thread waits and none of them can make progress:\n{lines}"
        )
        self.cond.notify_all()
