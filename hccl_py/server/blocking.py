"""Blocking with timeouts and deadlock detection.

Every call that can block (Wait, Finalize, SyncAll, a rank waiting for its
cores) goes through :meth:`Blocker.wait_for`, and every thread that runs user
code is started through :meth:`Blocker.spawn`: this is the one interface between
hccl_py and the way a backend runs and blocks its threads.

:class:`Blocker` is the implementation of the process backends (gloo, HCCL),
whose threads run concurrently: it counts the threads that run user code; when
every one of them waits and no waited-for condition can become true, that is a
deadlock, reported at once. Each wait also has a timeout. A thread that polls
instead of blocking (a ``Query`` loop) reports each poll through
:meth:`Blocker.poll`. After :data:`SPIN_POLLS` polls that return the same value
it counts as *spinning*; if it keeps polling the same value for
:data:`FROZEN_POLLS` more polls while every other thread waits in vain (or spins
too), the process is just as stuck and the poller reports the deadlock.

The emulator's (``emu/scheduler.py``) runs one runner (a greenlet) at a time in an order it
decides, and reports deadlocks exactly, without counting polls.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

from ..core.config import TIMEOUT_ENV, default_timeout
from ..core.current import rank_or_none
from ..core.errors import (
    ForgedValueError,
    HcclDeadlockError,
    HcclPeerError,
    HcclRunnerStartError,
    HcclTimeoutError,
    error_text,
)
from ..core.grouping import group_rank_lines, thread_core
from .threads import CORE_THREADS, PoolJob, WakeCondition, join_all

#: Unchanged polls after which a polling thread counts as spinning.
SPIN_POLLS = 10_000
#: Further unchanged polls, while no other thread can progress, that make a deadlock.
FROZEN_POLLS = 10_000
#: A spinning thread that has not polled for this many seconds, and for the last
#: SPIN_FRESH_POLLS polls per running thread of the world, is no longer spinning (it
#: computes). Counting the world's polls keeps a spinner live while a loaded machine
#: deschedules the whole process; the count stays below FROZEN_POLLS, so that a thread
#: that went off to compute goes stale long before a poller's frozen count makes a deadlock.
SPIN_FRESH_S = 0.05
SPIN_FRESH_POLLS = 500

#: The full, ungrouped deadlock report goes to the debug log (HCCL_PY_LOG=debug).
_log = logging.getLogger("hccl_py")

Job = Callable[[], None]
Text = str | Callable[[], str]


#: Seconds :meth:`Blocker.join_spawned` waits for the threads of a kernel's cores.
JOIN_S = 5.0


def _text(what: Text) -> str:
    return what() if callable(what) else what


def _core_threads() -> dict[int | None, tuple[str, str]]:
    """The live kernel cores' threads: id -> (``rank 0 ``, ``AIV core 1``), read from their
    names at a report (nothing to record at each wait)."""
    found = {}
    for thread in threading.enumerate():
        core = thread_core(thread.name)
        if core is not None:
            found[thread.ident] = core
    return found


def runner_line(what: Text, name: str) -> str:
    """What the thread or emulated runner called ``name`` waits for (``what``), naming its
    core when it runs one (:func:`~hccl_py.core.grouping.core_thread_name`)."""
    return _named(_text(what), thread_core(name))


def _named(line: str, core: tuple[str, str] | None) -> str:
    """``rank 0 waits ...`` -> ``rank 0 AIV core 1 waits ...``: a core's line names the core
    (so that the waits of several cores of a rank stay apart), unless it does already."""
    if core is None or not line.startswith(core[0]) or line.startswith(core[1], len(core[0])):
        return line
    return f"{core[0]}{core[1]} {line[len(core[0]) :]}"


@dataclass
class _Spin:
    """What one polling thread has been seeing."""

    key: Hashable
    value: object
    what: Text
    unchanged: int = 0
    frozen: int = 0
    since: float = field(default_factory=time.monotonic)
    last: float = field(default_factory=time.monotonic)
    #: The world's poll count at this thread's latest poll.
    tick: int = 0

    def describe(self) -> str:
        return f"{_text(self.what)} [polled {self.unchanged + 1} times without change]"


class Blocker:
    """A condition variable shared by all threads of one world (or one process).

    ``take_work`` (optional) is called under the lock by a waiting thread; it may
    return a job (a callable) that the thread then runs outside the lock. This is
    how a lazily scheduled server executes rounds only when somebody waits.
    ``has_work`` tells, without taking it, whether such a job exists (or one
    runs); ``job_ready`` whether ``take_work`` would return a job now (it runs
    in the thread that notifies, to decide whether to wake a waiter).
    ``describe_world`` (optional) returns lines on the server's state for reports.
    """

    def __init__(self, timeout: float | None = None, detect_deadlock: bool = True) -> None:
        #: The world lock (re-entrant); ``cond`` waits and notifies on it, and wakes a
        #: waiting thread only when its condition holds (see :meth:`wait_for`).
        self.lock = threading.RLock()
        self.cond = WakeCondition(self.lock)
        self.cond.on_notify = self._wakes_everyone
        self.timeout = default_timeout() if timeout is None else float(timeout)
        self.detect_deadlock = detect_deadlock
        self.active = 0
        self.blocked: dict[int, tuple[Callable[[], bool], Text]] = {}
        #: When the server's state last changed (a task, a commit, a round, a rank's return)
        #: or a thread last stopped waiting in an hccl_py call.
        self.progress_at = time.monotonic()
        self.spinning: dict[int, _Spin] = {}
        #: Polls of every thread so far (the clock that spinner freshness is also read on).
        self.ticks = 0
        self.error: BaseException | None = None
        self.take_work: Callable[[], Job | None] = lambda: None
        self.has_work: Callable[[], bool] = lambda: False
        self.job_ready: Callable[[], bool] = lambda: False
        self.describe_world: Callable[[], str] = lambda: ""
        #: Under the lock: what the clients hold back, for deadlock reports (key -> line).
        self.held: dict[Any, str] = {}
        #: Threads that run user code and now wait in a call to a process group for it (a
        #: round, an exchange): what they wait for (set and popped by the thread itself).
        #: Reports only: such a call ends when peers act, so it is no input of the deadlock check.
        self.calling: dict[int, Text] = {}
        #: Under the lock: threads whose wait timed out, until they leave (reports only).
        self.timed_out: dict[int, str] = {}

    def spawn(
        self, target: Callable[[], None], name: str, key: tuple[int, ...] = (), rank: int = -1
    ) -> PoolJob:
        """Run ``target`` in a thread that runs user code (``key`` orders it, ``rank`` owns it).

        The thread is an idle one of the process's pool of core threads
        (:data:`~hccl_py.server.threads.CORE_THREADS`), started only when none is idle.
        """
        self.enter(1)
        try:
            return CORE_THREADS.start(target, name)
        except HcclRunnerStartError:  # no thread: it runs no user code
            with self.lock:
                self.active -= 1
            raise

    def join_spawned(self, threads: list[Any], what: Text) -> None:
        """Wait (at most :data:`JOIN_S`) for ``threads``; a failed world releases them at once."""
        join_all(threads, JOIN_S)

    def point(self) -> None:
        """A switch point (the start of an hccl_py call): threads here switch on their own."""

    def settle(self) -> None:
        """Before a poll (Query): a late server may run what is ready (the emulator's)."""

    def defers(self) -> bool:
        """Whether the server may leave ready work for later (the emulator's late schedules)."""
        return False

    def reset_first(self) -> bool:
        """Whether a Finalize's counter reset comes before another core's racing Wait poll.

        Real threads decide it by timing: the client models the usual hardware
        order (the Wait sees its turn first). The emulator's seeded schedules
        decide it from their seed (``emu/policies.py``).
        """
        return False

    @property
    def serial(self) -> Any:
        """The lock every hccl_py call holds (the server's ``serial``): the lock of ``cond``."""
        return self.lock

    def enter(self, n: int = 1) -> None:
        """Count ``n`` more threads that run user code (call before starting them)."""
        with self.lock:
            self.active += n

    def leave(self) -> None:
        """The calling thread stops running user code; check whether the rest are stuck."""
        with self.lock:
            self.active -= 1
            me = threading.get_ident()
            self.spinning.pop(me, None)
            self.timed_out.pop(me, None)
            self._check_deadlock()

    def notify(self) -> None:
        """Wake every waiter so it re-checks its condition."""
        with self.lock:
            self.cond.notify_all()

    def fail(self, error: BaseException) -> None:
        """Stop the world: every current and future wait raises because of ``error``."""
        with self.lock:
            if self.error is None:
                self.error = error
            self.cond.notify_all()

    def progressed(self) -> None:
        """The server's state changed: wake every waiting thread (call under the lock)."""
        self.progress_at = time.monotonic()
        self.cond.notify_all()

    def idle_for(self) -> float | None:
        """Seconds without progress while no thread waits or polls in hccl_py, else None."""
        with self.lock:
            if self.blocked or self.spinning:
                return None
            return time.monotonic() - self.progress_at

    def raise_if_failed(self) -> None:
        """Raise the world's failure in this thread (called under or outside the lock)."""
        error = self.error
        if error is None:
            return
        if isinstance(error, ForgedValueError) or (
            isinstance(error, HcclDeadlockError) and error.rank is None
        ):  # the world's deadlock concerns every thread; one rank's (a SyncAll) is that rank's
            raise type(error)(error.reason)
        rank, me = getattr(error, "hccl_rank", None), getattr(rank_or_none(), "rank", None)
        who = f"rank {rank}" if rank is not None else "another thread"
        raise HcclPeerError(f"stopped because {who} failed: {error_text(error)}", rank=me)

    def run_ready(self) -> None:
        """Run every job that ``take_work`` offers (an eager server calls this after a Commit)."""
        while True:
            with self.lock:
                job = self.take_work()
            if job is None:
                return
            job()

    def state(self) -> str:
        """What every thread of the world is doing, then the server's state."""
        with self.lock:
            lines = self._waits(time.monotonic(), calls=True)
            running = self.active - len(lines)
            if running > 0:
                lines.append(
                    f"{running} thread(s) running outside hccl_py calls "
                    "(computing, sleeping or stuck in user code)"
                )
            world = self.describe_world()
        text = "\n".join(f"  - {line}" for line in group_rank_lines(lines))
        text = text or "  (no thread is waiting)"
        return f"{text}\n{world}" if world else text

    def wait_for(self, pred: Callable[[], bool], what: Text, timeout: float | None = None) -> None:
        """Block until ``pred()`` (evaluated under the lock) is true.

        A notification wakes the thread only when ``pred()`` holds, the world
        failed or a job is ready for it (``job_ready``), so that a thread waits
        through changes of the state that do not concern it.
        Raises :class:`HcclDeadlockError` when no thread can make progress,
        :class:`HcclTimeoutError` after ``timeout`` seconds (default: the
        blocker's), and :class:`HcclPeerError` when the world failed meanwhile.
        """
        limit = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + limit
        me = threading.get_ident()
        with self.lock:
            if self.spinning:  # a thread that polled (Query) waits now
                self.spinning.pop(me, None)
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
                self.blocked[me] = (pred, what)
                if remaining <= 0:
                    raise self._timeout(me, f"{limit:g} s waiting for", _text(what))
                try:
                    self._check_deadlock()
                    self.raise_if_failed()
                    self.cond.wait_until(pred, remaining)
                finally:
                    self.blocked.pop(me, None)
                    self.progress_at = time.monotonic()  # a waiting rank is not idle

    def poll(
        self,
        key: Hashable,
        value: object,
        what: Text,
        deadlock: bool = True,
        read: Callable[[], object] | None = None,
    ) -> None:
        """Record one non-blocking poll of the calling thread that observed ``value``.

        ``key`` names what is polled (a task); ``what`` describes the poll for a
        report. Raises :class:`HcclDeadlockError` when the thread has been
        spinning on an unchanged value while no other thread can progress, and
        :class:`HcclTimeoutError` when the value stayed unchanged for longer
        than the timeout, as a blocking wait would. ``deadlock=False`` keeps the
        timeout only (a poll of memory that other processes may write).
        ``read`` reads the polled value again (the emulator's scheduler uses it).
        """
        me = threading.get_ident()
        with self.lock:
            self.raise_if_failed()
            self.ticks += 1
            spin = self.spinning.get(me)
            if spin is None or spin.key != key or spin.value != value:
                self.spinning[me] = _Spin(key, value, what, tick=self.ticks)
                return
            spin.unchanged += 1
            spin.last = time.monotonic()
            spin.tick = self.ticks
            if spin.last - spin.since > self.timeout:
                raise self._timeout(me, f"{self.timeout:g} s polling:", spin.describe())
            if spin.unchanged < SPIN_POLLS or not (self.detect_deadlock and deadlock):
                return
            if not self._frozen(me):
                spin.frozen = 0
                return
            spin.frozen += 1
            if spin.frozen >= FROZEN_POLLS:
                self._declare_deadlock()
                self.raise_if_failed()

    # ------------------------------------------------------------- internals
    def _timeout(self, me: int, head: str, what: str) -> HcclTimeoutError:
        """Under the lock: the timeout of ``me``'s wait or poll (``what``), with the state of
        the world; until it leaves, the thread is in reports as timed out (not as running)."""
        what = _named(what, _core_threads().get(me))
        self.timed_out[me] = f"{what} [timed out: raises HcclTimeoutError]"
        state = self.state()
        self.blocked.pop(me, None)
        self.spinning.pop(me, None)
        return HcclTimeoutError(
            f"timed out after {head} {what}; set {TIMEOUT_ENV} or timeout= to change the "
            f"limit. State of the world:\n{state}"
        )

    def _live(self, spin: _Spin, now: float, polls: int = SPIN_POLLS) -> bool:
        """``spin`` polled the same value ``polls`` times and is still polling it."""
        recent = min(SPIN_FRESH_POLLS * max(self.active, 2), FROZEN_POLLS // 2)
        fresh = now - spin.last < SPIN_FRESH_S or self.ticks - spin.tick < recent
        return spin.unchanged >= polls and fresh

    def _others_stuck(self, me: int, polls: int = SPIN_POLLS) -> bool:
        """Under the lock: every thread but ``me`` is blocked or spinning (``polls`` unchanged)."""
        now = time.monotonic()
        others = sum(1 for ident in self.blocked if ident != me)
        others += sum(
            1
            for ident, s in self.spinning.items()
            if ident != me and ident not in self.blocked and self._live(s, now, polls)
        )
        return others >= self.active - 1

    def _frozen(self, me: int) -> bool:
        """Under the lock: every thread but ``me`` waits in vain or spins, and no work is ready."""
        if not self._others_stuck(me):
            return False
        return not any(pred() for pred, _ in self.blocked.values()) and not self.has_work()

    def _declare_deadlock(self) -> None:
        """Under the lock: fail the world with a report of who waits for what."""
        self._deadlock(self._waits(time.monotonic()))

    def _waits(self, now: float, calls: bool = False) -> list[str]:
        """Under the lock: a line per thread that waits or polls in an hccl_py call (``calls``:
        or waits in a process group's call for user code, or timed out), a kernel core's
        naming its core."""
        cores = _core_threads()
        lines = [_named(_text(what), cores.get(ident)) for ident, (_, what) in self.blocked.items()]
        seen = set(self.blocked)
        for ident, spin in self.spinning.items():
            if ident not in seen and self._live(spin, now):
                seen.add(ident)
                lines.append(_named(spin.describe(), cores.get(ident)))
        if calls:
            for ident, what in self.calling.copy().items():  # (changed outside the lock)
                if ident not in seen:
                    seen.add(ident)
                    lines.append(_named(_text(what), cores.get(ident)))
            lines += [line for ident, line in self.timed_out.items() if ident not in seen]
        return lines

    def _deadlock(self, lines: list[str]) -> None:
        """Under the lock: fail the world with ``lines`` (who waits for what) and the server's state."""
        world = self.describe_world()
        lines = lines + list(self.held.values())
        head = "deadlock: every running thread waits and none of them can make progress:\n"
        tail = f"\n{world}" if world else ""
        _log.debug("%s%s%s", head, "\n".join(f"  - {line}" for line in lines), tail)
        self.error = HcclDeadlockError(
            head + "\n".join(f"  - {line}" for line in group_rank_lines(lines)) + tail
        )
        self.cond.notify_all()

    def _wakes_everyone(self) -> bool:
        """Under the lock, at a notification: check for a deadlock; wake every waiter?

        Yes when the world failed (every wait raises) or a job is ready for a
        waiting thread to take; otherwise only the waiters whose condition holds wake.
        """
        if self.blocked:  # else no deadlock to check (one call less per notification)
            self._check_deadlock()
        return self.error is not None or self.job_ready()

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
        self._declare_deadlock()
