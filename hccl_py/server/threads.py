"""The threads of a process backend (gloo, HCCL): selective wake-ups and reusable core threads.

Every thread of a rank blocks on one lock, the blocker's condition, and every
change of the server's state notifies it. :class:`WakeCondition` is that
condition, but a waiter may say when it wants to be woken (``wait_until``):
``notify_all`` then evaluates that test under the lock and wakes only the
waiters whose test passes, so a core waiting in SyncAll sleeps through the
rounds that another core runs. Plain ``wait`` wakes at every notification, as
``threading.Condition`` does.

:data:`CORE_THREADS` is the process's pool of threads for the cores of kernel
launches: a launch with ``block_dim`` 8 takes eight idle threads of the pool
(and starts new ones only when fewer are idle), so that a launch costs no
thread creation. An idle thread sleeps on its own lock and ends after
:data:`IDLE_S` seconds without work; given a job, it runs on the CPUs of the thread that
starts the job, as a new thread would. The emulator keeps a pool of its own per
run for its thread runners (``ThreadPool(fresh=...)``), closed when the run ends.
"""

from __future__ import annotations

import contextvars
import ctypes
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from typing import Any

import torch

from ..core.errors import HcclRunnerStartError
from .latch import Latch

#: Seconds an idle pool thread waits for work before it ends.
IDLE_S = 30.0
#: The name of a pool thread while it has no job.
IDLE_NAME = "hccl_py-idle"

Test = Callable[[], bool]


class _Sleeper:
    """One waiting thread: its own lock (released to wake it) and its wake-up test."""

    __slots__ = ("lock", "test")

    def __init__(self, test: Test | None) -> None:
        self.lock = threading.Lock()
        self.lock.acquire()
        self.test = test


class WakeCondition(threading.Condition):
    """A condition whose ``notify_all`` wakes only the waiters whose wake-up test passes.

    ``on_notify`` (optional) runs under the lock at each notification while a
    waiter with a test sleeps, before the tests are evaluated; when it returns
    True every waiter wakes. The blocker checks there, once per notification,
    what concerns every waiter (a deadlock, which a waiter no longer checks at
    every notification; a failed world; a job ready to take). A notification
    the hook makes is served by the same pass.

    Waiters whose test passed wake in turn: each passes the turn on once it holds the lock
    again. Released together, the cores waiting for one round or SyncAll fought over the lock
    and the GIL, ~4 context switches each instead of 1 (issue 28). Plain waiters, and all
    when ``on_notify`` wakes everyone (a failure, a job to take), are released at once.
    """

    def __init__(self, lock: Any = None) -> None:
        super().__init__(lock)
        self._sleepers: list[_Sleeper] = []
        #: How many of them have a test (the hook runs only then).
        self._tested = 0
        self._notifying = False
        self._again = False
        self.on_notify: Callable[[], bool] | None = None
        #: Waiters whose test passed, not released yet: each waits for its turn.
        self._pending: list[_Sleeper] = []
        #: The waiter released last, until it holds the lock again and passes the turn on.
        self._turn: _Sleeper | None = None

    def wait(self, timeout: float | None = None) -> bool:
        """Wait (holding the lock) until any notification, or ``timeout`` seconds."""
        return self.wait_until(None, timeout)

    def wait_until(self, test: Test | None, timeout: float | None = None) -> bool:
        """Wait (holding the lock) until a notification finds ``test()`` true, or ``timeout``.

        ``test`` runs under the lock in the notifying thread; it must not block.
        Returns whether a notification woke the caller (False: the timeout).
        """
        if not self._is_owned():
            raise RuntimeError("cannot wait on un-acquired lock")
        sleeper = _Sleeper(test)
        self._sleepers.append(sleeper)
        self._tested += test is not None
        saved = self._release_save()
        woken = False
        try:
            woken = sleeper.lock.acquire(True, -1 if timeout is None else max(0.0, timeout))
            return woken
        finally:
            try:
                self._acquire_restore(saved)
            finally:
                self._woke(sleeper, woken)

    def _woke(self, sleeper: _Sleeper, woken: bool) -> None:
        """Under the lock again: pass the turn on, or (a timeout) stop waiting for one."""
        if sleeper is self._turn:
            self._next_turn()
        elif not woken and sleeper in self._pending:
            self._pending.remove(sleeper)
        elif not woken and sleeper in self._sleepers:
            self._sleepers.remove(sleeper)
            self._tested -= sleeper.test is not None

    def _next_turn(self) -> None:
        """Release the next waiter whose test passed, if any."""
        self._turn = self._pending.pop(0) if self._pending else None
        if self._turn is not None:
            self._turn.lock.release()

    def notify(self, n: int = 1) -> None:
        """Wake at most ``n`` of the waiters whose test passes."""
        self._wake(n)

    def _wake(self, n: int | None = None) -> None:
        """Wake at most ``n`` (None: every one) of the waiters whose test passes (plain
        waiters always)."""
        if not self._is_owned():
            raise RuntimeError("cannot notify on un-acquired lock")
        if not self._sleepers and not self._notifying:  # nobody to wake (a runner's world)
            return
        if self._notifying:  # a test or the hook notified again: evaluate everyone once more
            self._again = True
            return
        self._notifying = True
        try:
            every = False
            if self.on_notify is not None and self._tested:
                every = self.on_notify()  # what it notifies is woken by the pass below
            self._again = True
            while self._again and self._sleepers and n != 0:
                self._again = False
                n = self._wake_due(n, every)
        finally:
            self._notifying = False

    #: Wake every waiter whose test passes (plain waiters always): ``_wake`` itself, one
    #: call less at each of the server's notifications.
    notify_all = _wake

    def _wake_due(self, n: int | None, every: bool) -> int | None:
        """Release the sleepers that are due (``every``: all), at most ``n``; how many more may
        wake. A test that raises wakes its waiter, which re-evaluates it and sees the error."""
        asleep = []
        for sleeper in self._sleepers:
            test = sleeper.test
            due = n != 0
            if due and not every and test is not None:
                try:
                    due = bool(test())
                except Exception:  # noqa: BLE001 - the waiter re-evaluates and raises it
                    due = True
            if due:
                if test is None or every:
                    sleeper.lock.release()
                else:
                    self._pending.append(sleeper)
                self._tested -= test is not None
                n = None if n is None else n - 1
            else:
                asleep.append(sleeper)
        self._sleepers = asleep
        while every and self._pending:  # no turns: an interrupted waiter might not pass one on
            self._pending.pop().lock.release()
        if self._turn is None:
            self._next_turn()
        return n


def read_in_a_new_thread(read: Callable[[], Any]) -> Any:
    """What ``read()`` returns in a thread that changed nothing (a new thread's torch state)."""
    found = []
    thread = threading.Thread(target=lambda: found.append(read()), daemon=True)
    thread.start()
    thread.join()
    return found[0]


def raise_in_thread(ident: int, exc: type[BaseException] | None) -> None:
    """Raise ``exc`` in the thread ``ident`` at its next bytecode (a long C call: when it returns);
    ``None`` cancels an exception sent that has not landed yet."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(ident), None if exc is None else ctypes.py_object(exc)
    )


#: Whether this system lets threads read and set their CPUs (Linux).
_AFFINITY = hasattr(os, "sched_getaffinity") and hasattr(os, "sched_setaffinity")


def _inherit_cpus(tid: int | None) -> None:
    """Thread ``tid`` (a native id) gets the calling thread's CPUs, as a thread it started would:
    a pool thread keeps the mask an earlier job set (``os.sched_setaffinity(0, ...)``, an
    OpenMP binding), which must not reach the next job, of another rank perhaps."""
    if not (_AFFINITY and tid):
        return
    try:
        mine = os.sched_getaffinity(0)
        if os.sched_getaffinity(tid) != mine:
            os.sched_setaffinity(tid, mine)
    except OSError:  # not ours to change (a CPU set changed under the process): as before
        pass


class PoolJob:
    """One target run by a pool thread; ``join`` and ``is_alive`` as on a thread."""

    def __init__(self, target: Callable[[], None], name: str) -> None:
        self.target = target
        self.name = name
        #: Set when the target returned.
        self._returned = Latch()
        #: The OS thread that runs the target, while it runs (None before and after).
        self.ident: int | None = None
        #: Whether :meth:`interrupt` sent an exception into the target's thread.
        self.interrupted = False
        #: The native id of the OS thread the job is given (:meth:`ThreadPool.start` sets it
        #: before the job can run).
        self.native_id: int | None = None
        self._lock = threading.Lock()

    def join(self, timeout: float | None = None) -> None:
        """Wait until the target returned (at most ``timeout`` seconds)."""
        self._returned.wait(timeout)

    def is_alive(self) -> bool:
        """Whether the target has not returned yet."""
        return not self._returned.done

    def interrupt(self, exc: type[BaseException]) -> bool:
        """Raise ``exc`` in the target's thread at its next bytecode (to stop a stuck target).

        Only while the target runs (False otherwise): the exception can never reach a
        later job of the same thread, and the thread is not reused after it.
        """
        with self._lock:
            if self.ident is None:
                return False
            self.interrupted = True
            raise_in_thread(self.ident, exc)
            return True

    def _begin(self) -> None:
        with self._lock:
            self.ident = threading.get_ident()

    def _end(self) -> bool:
        """The target returned: no interruption from now on; whether one was sent."""
        with self._lock:
            self.ident = None
            return self.interrupted


def _ended(job: PoolJob) -> bool:
    """``job._end()``, again if an interruption sent as the target returned arrives meanwhile
    (at the call, inside it, or at its return): none can be sent once it returned."""
    while True:
        try:
            return job._end()
        except BaseException:  # noqa: BLE001 - that interruption: the thread ends after
            continue


class _Worker:
    """A pool thread: sleeps on its own lock until it is given a job."""

    def __init__(self, pool: ThreadPool) -> None:
        self.pool = pool
        self.gate = threading.Lock()
        self.gate.acquire()
        self.job: PoolJob | None = None
        self.thread = threading.Thread(target=self._loop, name=IDLE_NAME, daemon=True)

    def give(self, job: PoolJob | None) -> None:
        """Run ``job`` next (None: end)."""
        self.job = job
        self.gate.release()

    def _loop(self) -> None:
        try:
            while self.pool.next_job(self) and self.job is not None:
                if not self._run(self.job):
                    return
        finally:
            self.pool.gone(self)

    def _run(self, job: PoolJob) -> bool:
        """Run one job; whether this thread may take another (an escaped error ends it, as it
        ends a plain thread, and so do an interruption and torch state a new thread lacks)."""
        self.thread.name = job.name
        returned = reuse = False
        try:
            job._begin()
            # A fresh context, as a new thread has: no context variable of an earlier job.
            contextvars.Context().run(job.target)
            returned = True
        finally:
            try:
                interrupted = _ended(job)
                torch.set_grad_enabled(True)  # a new thread's grad mode
                self.job = None
                reuse = returned and not interrupted and self.pool.fresh()
                if reuse:  # before done: a joined job's thread is idle again
                    self.thread.name = IDLE_NAME
                    reuse = self.pool.idle(self)
            finally:
                job._returned.set()
        return reuse


def join_all(threads: Iterable[Any], timeout: float) -> None:
    """Join ``threads`` (anything with ``join(timeout)``), ``timeout`` seconds in
    all, not each: one stuck thread does not multiply the wait."""
    deadline = time.monotonic() + timeout
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))


def start_thread(thread: threading.Thread, what: str, advice: str = "") -> None:
    """Start ``thread``; one the OS refuses (no thread left) is an HcclRunnerStartError that
    names ``what`` it was for and ends with ``advice``."""
    try:
        thread.start()
    except RuntimeError as exc:  # "can't start new thread"
        error = HcclRunnerStartError(f"the OS refused to start a thread for {what} ({exc}){advice}")
        error.refusal = str(exc)
        raise error from None


class ThreadPool:
    """Reusable daemon threads that run one job at a time (see the module docstring).

    ``fresh`` says whether the calling thread, after a job, is as a new thread
    would be (torch's per-thread state); a thread that is not ends instead of
    taking another job. ``what`` names a job in the error of a thread the OS
    refuses, and ``advice`` ends it.
    """

    def __init__(
        self, fresh: Callable[[], bool] | None = None, what: str = "job", advice: str = ""
    ) -> None:
        self.what, self.advice = what, advice
        self._lock = threading.Lock()
        self._idle: list[_Worker] = []
        #: Every thread of the pool that has not ended.
        self._workers: set[_Worker] = set()
        self._closed = False
        self.fresh = fresh or (lambda: True)
        #: Threads this pool started so far.
        self.started = 0
        _POOLS.add(self)

    def start(self, target: Callable[[], None], name: str) -> PoolJob:
        """Run ``target`` in an idle thread (a new one if none is idle); returns its handle."""
        job = PoolJob(target, name)
        with self._lock:
            worker = self._idle.pop() if self._idle else None
            if worker is None:
                self.started += 1
        reused = worker is not None
        if worker is None:
            worker = _Worker(self)
            # a thread that cannot start is never one of the workers
            start_thread(worker.thread, f"{self.what} {name}", self.advice)
            with self._lock:
                self._workers.add(worker)
        job.native_id = worker.thread.native_id
        if reused:
            _inherit_cpus(job.native_id)
        worker.give(job)
        return job

    def idle(self, worker: _Worker) -> bool:
        """``worker`` finished its job: it waits for the next one (False: the pool is closed)."""
        with self._lock:
            if not self._closed:
                self._idle.append(worker)
            return not self._closed

    def next_job(self, worker: _Worker) -> bool:
        """Block until ``worker`` is given a job (True), or it stayed idle :data:`IDLE_S` (False)."""
        if worker.gate.acquire(True, IDLE_S):
            return True
        with self._lock:
            if worker in self._idle:
                self._idle.remove(worker)
                return False
        worker.gate.acquire()  # taken from the idle list just now: its job is on the way
        return True

    def gone(self, worker: _Worker) -> None:
        """``worker``'s thread ends."""
        with self._lock:
            self._workers.discard(worker)

    def close(self, timeout: float) -> None:
        """End the idle threads and wait (at most ``timeout`` seconds in all) for every thread
        but those whose job was interrupted (stuck: they end when the job returns)."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
            ending = [w for w in self._workers if w.job is None or not w.job.interrupted]
        for worker in idle:
            worker.give(None)
        join_all((worker.thread for worker in ending), timeout)

    def _forget(self) -> None:
        """In a forked child: the parent's threads do not exist here."""
        self._lock = threading.Lock()
        self._idle = []
        self._workers = set()


#: Every pool of this process, forgotten in a forked child (one fork hook, not one per pool).
_POOLS: weakref.WeakSet[ThreadPool] = weakref.WeakSet()


def _forget_all() -> None:
    for pool in list(_POOLS):
        pool._forget()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_all)

#: The threads of this process that run the cores of kernel launches.
CORE_THREADS = ThreadPool(
    what="core",
    advice="; each core of a launch runs in an OS thread of its own: launch with a smaller "
    "block_dim",
)
