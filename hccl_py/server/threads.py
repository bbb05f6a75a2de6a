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
:data:`IDLE_S` seconds without work.
"""

from __future__ import annotations

import contextvars
import os
import threading
from collections.abc import Callable
from typing import Any

import torch

#: Seconds an idle pool thread waits for work before it ends.
IDLE_S = 30.0

Test = Callable[[], bool]


class _Sleeper:
    """One waiting thread: its own lock (released to wake it) and its wake-up test."""

    __slots__ = ("lock", "test")

    def __init__(self, test: Test | None) -> None:
        self.lock = threading.Lock()
        self.lock.acquire()
        self.test = test

    def due(self) -> bool:
        """Whether to wake it now (a test that raises wakes it: it sees the error itself)."""
        if self.test is None:
            return True
        try:
            return bool(self.test())
        except Exception:  # noqa: BLE001 - the waiter re-evaluates and raises it
            return True


class WakeCondition(threading.Condition):
    """A condition whose ``notify_all`` wakes only the waiters whose wake-up test passes.

    ``on_notify`` (optional) runs under the lock at each notification while a
    waiter with a test sleeps, before the tests are evaluated; when it returns
    True every waiter wakes. The blocker checks there, once per notification,
    what concerns every waiter (a deadlock, which a waiter no longer checks at
    every notification; a failed world; a job ready to take). A notification
    the hook makes is served by the same pass.
    """

    def __init__(self, lock: Any = None) -> None:
        super().__init__(lock)
        self._sleepers: list[_Sleeper] = []
        self._notifying = False
        self._again = False
        self.on_notify: Callable[[], bool] | None = None

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
        saved = self._release_save()
        woken = False
        try:
            woken = sleeper.lock.acquire(True, -1 if timeout is None else max(0.0, timeout))
            return woken
        finally:
            self._acquire_restore(saved)
            if not woken and sleeper in self._sleepers:
                self._sleepers.remove(sleeper)

    def notify(self, n: int = 1) -> None:
        """Wake at most ``n`` of the waiters whose test passes."""
        self._wake(n)

    def notify_all(self) -> None:
        """Wake every waiter whose test passes (plain waiters always)."""
        self._wake(None)

    def _wake(self, n: int | None) -> None:
        if not self._is_owned():
            raise RuntimeError("cannot notify on un-acquired lock")
        if self._notifying:  # a test or the hook notified again: evaluate everyone once more
            self._again = True
            return
        self._notifying = True
        try:
            every = False
            if self.on_notify is not None and any(s.test for s in self._sleepers):
                every = self.on_notify()  # what it notifies is woken by the pass below
            self._again = True
            while self._again and self._sleepers and n != 0:
                self._again = False
                n = self._wake_due(n, every)
        finally:
            self._notifying = False

    def _wake_due(self, n: int | None, every: bool) -> int | None:
        """Release the sleepers that are due (``every``: all), at most ``n``; how many more may wake."""
        asleep = []
        for sleeper in self._sleepers:
            if n != 0 and (every or sleeper.due()):
                sleeper.lock.release()
                n = None if n is None else n - 1
            else:
                asleep.append(sleeper)
        self._sleepers = asleep
        return n


class PoolJob:
    """One target run by a pool thread; ``join`` and ``is_alive`` as on a thread."""

    def __init__(self, target: Callable[[], None], name: str) -> None:
        self.target = target
        self.name = name
        self.done = threading.Event()

    def join(self, timeout: float | None = None) -> None:
        """Wait until the target returned (at most ``timeout`` seconds)."""
        self.done.wait(timeout)

    def is_alive(self) -> bool:
        """Whether the target has not returned yet."""
        return not self.done.is_set()


class _Worker:
    """A pool thread: sleeps on its own lock until it is given a job."""

    def __init__(self, pool: ThreadPool) -> None:
        self.pool = pool
        self.gate = threading.Lock()
        self.gate.acquire()
        self.job: PoolJob | None = None
        self.thread = threading.Thread(target=self._loop, name="hccl_py-core", daemon=True)

    def give(self, job: PoolJob) -> None:
        """Run ``job`` next."""
        self.job = job
        self.gate.release()

    def _loop(self) -> None:
        while self.pool.next_job(self):
            job = self.job
            assert job is not None
            self.thread.name = job.name
            returned = False
            try:
                # A fresh context, as a new thread has: no context variable of an earlier job.
                contextvars.Context().run(job.target)
                returned = True
            finally:
                torch.set_grad_enabled(True)  # a new thread's grad mode
                self.job = None
                if returned:  # an error that escaped ends this thread, as a plain thread's would
                    self.pool.idle(self)  # before done: a joined job's thread is idle again
                job.done.set()


class ThreadPool:
    """Reusable daemon threads that run one job at a time (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: list[_Worker] = []
        #: Threads this pool started so far.
        self.started = 0
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=self._forget)

    def start(self, target: Callable[[], None], name: str) -> PoolJob:
        """Run ``target`` in an idle thread (a new one if none is idle); returns its handle."""
        job = PoolJob(target, name)
        with self._lock:
            worker = self._idle.pop() if self._idle else None
            if worker is None:
                self.started += 1
        if worker is None:
            worker = _Worker(self)
            worker.thread.start()
        worker.give(job)
        return job

    def idle(self, worker: _Worker) -> None:
        """``worker`` finished its job and waits for the next one."""
        with self._lock:
            self._idle.append(worker)

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

    def _forget(self) -> None:
        """In a forked child: the parent's threads do not exist here."""
        self._lock = threading.Lock()
        self._idle = []


#: The threads of this process that run the cores of kernel launches.
CORE_THREADS = ThreadPool()
