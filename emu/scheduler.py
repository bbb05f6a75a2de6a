"""The emulator's scheduler: exactly one runner at a time, switches only at hccl_py calls.

Every rank and every core of an emulated world is a *runner*: an OS thread of its own,
woken on the CPU of the runner that hands it the baton (:mod:`hccl_py.server.same_cpu`), or
(``HCCL_PY_EMU_RUNNERS=greenlets``, :mod:`.runners`) a greenlet of the world's one OS
thread. Exactly one runner runs user code at any moment; control passes only where the
running runner calls hccl_py (a Wait, SyncAll, a CrossCore flag, a Query or window poll,
Finalize, a framework exchange, and, under a seeded schedule, at the start of any hccl_py
call). Which runner goes next, and when the server runs a committed round, is decided by a
:class:`Policy`:

- the default policy is fixed: the running runner keeps running until it
  blocks, then the next runnable runner in (rank, core) order takes over; the
  server runs rounds at once (``schedule="eager"``) or only when no runner can
  go on (``schedule="late"``);
- ``seed=S`` picks a seeded policy: random choices at every switch point, or
  PCT-style priorities with a few priority changes, and server timings from
  eager to late. The same seed replays the same schedule.

A deadlock is exact: the running runner blocks, no other runner is runnable (every blocked
runner's condition is false, every poller's values are unchanged), the server has no work.

What is per thread in torch (the dispatch and function mode stacks, grad mode) is per runner
here: a runner takes its own off when it hands the baton on and puts it back when it gets the
baton again. Per-runner Python state lives in context variables (:mod:`hccl_py.core.current`).
"""

from __future__ import annotations

import bisect
import functools
import threading
import time
from collections.abc import Callable, Hashable
from typing import Any

import greenlet

from hccl_py.kernel.context import current_rank_context
from hccl_py.server.blocking import Blocker, Text, runner_line
from hccl_py.server.same_cpu import SameCpu
from hccl_py.server.threads import PoolJob, start_thread

from .policies import Policy, Runner, runner_key, schedulable
from .polls import QuietPolls, changed, record
from .runners import (
    Spawned,
    hand_on,
    put_torch_state,
    runner_kind,
    runner_threads,
)
from .switching import SwitchingLock
from .watch import resumed

#: The name of the world's OS thread, the one that runs every runner.
THREAD_NAME = "hccl_py-emu"
#: Seconds :meth:`Scheduler.close` waits for each idle runner thread to end, and a runner's
#: join for the thread of a runner that left.
CLOSE_WAIT_S = 5.0


class _Greenlet(greenlet.greenlet):
    """The greenlet of one runner (``runner``: what the scheduler knows of it)."""

    runner: Runner


class Scheduler(Blocker):
    """A :class:`~hccl_py.server.blocking.Blocker` whose threads run one at a time, in a decided order."""

    def __init__(self, timeout: float | None, policy: Policy) -> None:
        super().__init__(timeout)
        self.policy = policy
        self.runners: list[Runner] = []
        self.current: Runner | None = None
        self.last: Runner | None = None
        #: Runners are OS threads (``HCCL_PY_EMU_RUNNERS=threads``) instead of greenlets.
        self.threads = runner_kind() == "threads"
        #: The thread runners' threads, reused from one runner to a later one (:meth:`close`).
        self.pool = runner_threads() if self.threads else None
        #: Wakes the next thread runner on the CPU of the one that hands it the baton.
        self.same_cpu = SameCpu() if self.threads else None
        #: The world's OS thread, started by :meth:`begin`; it runs every greenlet runner.
        self.thread: threading.Thread | None = None
        self._hub: greenlet.greenlet | None = None
        self._tls = threading.local()
        #: When the running runner got the baton or last blocked or polled (the watchdog's clock).
        self.touched = time.monotonic()
        self._serial = SwitchingLock(self) if policy.preemptive else self.lock
        #: Switches so far (a measure of the schedule, for reports).
        self.switches = 0
        #: Blocked pollers let read on since something other than a released poller last ran.
        self.quiet = QuietPolls()

    @property
    def serial(self) -> Any:
        """The world lock; under a seeded schedule entering it is a switch point."""
        return self._serial

    # ------------------------------------------------------------ runners
    def me(self) -> Runner | None:
        """The calling runner (None outside the world's runners)."""
        if self.threads:
            return getattr(self._tls, "runner", None)
        try:  # a runner's greenlet has one; the hub's and other threads' greenlets have none
            return greenlet.getcurrent().runner
        except AttributeError:
            return None

    def spawn(
        self, target: Callable[[], None], name: str, key: tuple[int, ...] = (), rank: int = -1
    ) -> Spawned | PoolJob:
        """Add ``target`` as a runner; it runs when the scheduler hands it the baton."""
        runner = Runner(key, name, rank)
        runner.target = target
        if self.threads:  # started first: a thread the OS refuses leaves no runner behind
            runner.gate = threading.Lock()
            runner.gate.acquire()
            runner.thread = self.pool.start(functools.partial(self._thread_body, runner), name)
            runner.tid = runner.thread.native_id  # before its first turn: every hand-off pins
        else:
            runner.thread = Spawned(self)
        with self.lock:
            bisect.insort(self.runners, runner, key=runner_key)
            self.policy.add(runner)
        return runner.thread

    def close(self) -> None:
        """The run ended: end the idle runner threads (a stuck one, a daemon, ends when it returns)."""
        if self.pool is not None:
            self.pool.close(CLOSE_WAIT_S)

    def begin(self) -> None:
        """Hand the baton to the first runner and start the world's thread, which runs them all."""
        with self.lock:
            self._hand(self.policy.choose(self.runners, None))
        if not self.threads:
            self.thread = threading.Thread(target=self._run_world, name=THREAD_NAME, daemon=True)
            start_thread(self.thread, "the world's greenlet runners", "; no rank ran any code")

    def _run_world(self) -> None:
        """The world's thread: run the runner that holds the baton (again whenever one ends or starts one)."""
        self._hub = greenlet.getcurrent()
        while self.current is not None:
            self._greenlet(self.current).switch()

    def _greenlet(self, runner: Runner) -> greenlet.greenlet:
        """``runner``'s greenlet, made on its first turn (in the world's thread)."""
        if runner.glet is None:
            runner.glet = _Greenlet(self._body, parent=self._hub)
            runner.glet.runner = runner
        return runner.glet

    def _thread_body(self, runner: Runner) -> None:
        """What a thread runner runs: wait for the baton, then its target."""
        self._tls.runner = runner
        try:
            runner.gate.acquire()
            self._woke(runner)
            runner.target()
        except BaseException as exc:  # noqa: BLE001 - stopped before its target took over
            self.fail(exc)
        finally:  # (an error delivered as it woke too); the thread may run another runner next
            self._woke(runner)
            if runner in self.runners:  # stopped as it woke: it never left, so hand on now
                self.leave()
            runner.tid = self._tls.runner = None  # no pin reaches whatever reuses the id

    def _woke(self, runner: Runner) -> None:
        """A thread runner got the baton: the CPUs it had are its own again (:class:`SameCpu`)."""
        if runner.pinned is not None:
            self.same_cpu.unpin(runner.pinned)
            runner.pinned = None

    def _body(self) -> None:
        """What a runner's greenlet runs: its target; then the baton goes on."""
        runner = self.me()
        try:
            runner.thread.run(runner.target)
        except BaseException as exc:  # noqa: BLE001 - a target that let an error out
            self.fail(exc)
        finally:
            if runner in self.runners:  # a target that did not leave
                self.leave()
            runner.thread.end()

    def enter(self, n: int = 1) -> None:
        """Runners are counted by :meth:`spawn`."""

    def leave(self) -> None:
        """The calling runner ends: hand the baton on (or report a deadlock of the rest)."""
        me = self.me()
        with self.lock:
            self.runners.remove(me)
            if self.current is me:
                self.current = None
                nxt = self._next(None)
                if nxt is not None:
                    self._hand(nxt)

    def _hand(self, runner: Runner) -> None:
        """Under the lock: ``runner`` runs next (the caller switches to it, or ends)."""
        self.switches += 1
        self.current = self.last = runner
        self.touched = time.monotonic()
        if self.threads:
            runner.pinned = self.same_cpu.pin(runner.tid)
            runner.gate.release()

    # ----------------------------------------------------------- choosing
    def _next(self, me: Runner | None) -> Runner | None:
        """Under the lock: run the rounds the policy wants now, then pick the next runner.

        Returns None only after declaring a deadlock when nothing is left to run.
        """
        while True:
            if self.error is None:
                runnable = self.policy.runnable(self.runners, self.last)
            else:
                runnable = list(filter(schedulable, self.runners))
            job = self.error is None and self.has_work() and self.policy.run_round(bool(runnable))
            if job and self._run_job():
                self.quiet.progressed()
                continue
            if runnable:
                self.quiet.choosing(runnable)
                return self.policy.choose(runnable, self.last)
            if not self.runners:
                return None
            poller = self.error is None and self.quiet.release(
                self.runners, lambda pollers: self.policy.choose(pollers, self.last)
            )
            if poller:  # it may end its own loop (see :mod:`.polls`)
                return poller
            self._declare_deadlock()

    def _run_job(self) -> bool:
        """Under the lock: run one ready job of the server; False if there was none."""
        job = self.take_work()
        if job is None:
            return False
        # under the world lock: the server's copies are no kernel code of the running runner
        try:
            job()
        finally:
            self.touched = time.monotonic()
        return True

    def _switch(self, me: Runner, nxt: Runner) -> None:
        """Under the lock: give the baton to ``nxt`` and wait until ``me`` gets it back."""
        if nxt is me:
            self.current = self.last = me
            return
        torch_state = None if self.threads else hand_on(me.name)
        self._hand(nxt)
        saved = self.cond._release_save()
        try:
            if self.threads:
                me.gate.acquire()
            else:
                # a greenlet starts with the recursion depth of the one that starts it: the
                # world's thread starts each, so that nested launches do not add up
                (self._hub if nxt.glet is None else nxt.glet).switch()
        finally:
            try:  # its CPUs back first, even when an interruption arrives as it wakes
                if self.threads:
                    self._woke(me)
                if torch_state is not None:  # (the common case: nothing was taken)
                    put_torch_state(torch_state)
            finally:  # the lock is this runner's again, whatever putting its state back raised
                self.cond._acquire_restore(saved)
            resumed()  # the race check's watch catches up with what the others did

    def _block(self, me: Runner, pred: Callable[[], bool], what: Text) -> None:
        """Under the lock: ``me`` waits until ``pred()`` (or the world failed)."""
        me.pred, me.what = pred, what
        try:
            while not (pred() or (self.error is not None and not me.past_failure)):
                nxt = self._next(me)
                if nxt is None:
                    return
                self._switch(me, nxt)
        finally:
            me.pred = None

    # ------------------------------------------------------ Blocker protocol
    def wait_for(self, pred: Callable[[], bool], what: Text, timeout: float | None = None) -> None:
        """Block the calling runner until ``pred()``; a deadlock is reported at once."""
        me = self.me()
        if me is None:
            super().wait_for(pred, what, timeout)
            return
        with self.lock:
            if me.polls:  # (a runner that polled nothing has none to forget)
                me.polls.clear()
            self.touched = time.monotonic()
            if not pred():
                self.raise_if_failed()
                self._block(me, pred, what)
                if not pred():  # (a test that held at once still holds: nothing ran since)
                    self.raise_if_failed()

    def join_spawned(self, threads: list[Any], what: Text) -> None:
        """Block until the runners of ``threads`` ended, even in a failed world."""
        me = self.me()
        if me is None:
            super().join_spawned(threads, what)
            return

        def ended() -> bool:  # (a loop: a generator costs a call per runner it yields)
            for r in self.runners:
                if r.thread in threads:
                    break
            else:
                return True
            return False

        with self.lock:
            me.past_failure = True
            try:
                self._block(me, ended, what)
            finally:
                me.past_failure = False
        if self.threads:  # each thread is back in the pool after its runner left: reused next
            for thread in threads:
                thread.join(CLOSE_WAIT_S)

    def poll(
        self,
        key: Hashable,
        value: object,
        what: Text,
        deadlock: bool = True,
        read: Callable[[], object] | None = None,
    ) -> None:
        """A non-blocking poll that saw ``value``; unchanged reads block the runner (:mod:`.polls`)."""
        me = self.me()
        if me is None or read is None:
            super().poll(key, value, what, deadlock)
            return
        with self.lock:
            self.raise_if_failed()
            if not record(me, key, value, read, what):
                self.point()
                return
            self.touched = time.monotonic()
            me.polling = True
            try:
                self._block(me, changed(me), what)
            finally:
                me.polling = me.released = False
                me.polls.clear()
            self.raise_if_failed()

    def point(self) -> None:
        """A switch point of the calling runner (the start of an hccl_py call)."""
        if not self.policy.preemptive:
            return
        me = self.me()
        if me is None or self.current is not me:
            return
        with self.lock:
            if self.error is None and self.has_work() and self.policy.run_round(True):
                self._run_job()
            ok = None if self.error is None else schedulable
            nxt = self.policy.switch(me, self.runners, ok)
            if nxt is not None:
                self._switch(me, nxt)

    def settle(self) -> None:
        """Before a Query: a late server runs the ready rounds when no other runner can go on.

        The querying runner is as good as waiting for the server, as on hardware.
        """
        if not self.policy.late:  # (asked first: an eager server leaves nothing to settle)
            return
        me = self.me()
        if me is None:
            return
        with self.lock:
            others = [r for r in self.runners if r is not me]
            while self.error is None and self.has_work() and not any(r.runnable() for r in others):
                if not self._run_job():
                    return

    def run_ready(self) -> None:
        """After a Commit: run the ready rounds if the policy runs them now (eager). Most Commits
        make none ready: one look under the lock finds that first."""
        with self.lock:
            if self.error is not None or not self.has_work():
                return
            if self.me() is not None:  # a runner: its rounds run here, the lock still held
                while self.policy.run_round(True) and self._run_job():
                    if self.error is not None or not self.has_work():
                        return
                return
        super().run_ready()

    def defers(self) -> bool:
        """Whether the server may leave ready work (BatchWrite copies) for later."""
        return self.policy.late or self.policy.preemptive

    def reset_first(self) -> bool:
        """A Finalize's counter reset races another core's Wait poll: the policy decides."""
        with self.lock:
            return self.policy.reset_first()

    def idle_for(self) -> float | None:
        """Seconds the running runner has held the baton without blocking or polling."""
        if self.current is None:
            return None
        return time.monotonic() - max(self.touched, self.progress_at)

    def state(self) -> str:
        """What every runner waits for, then the server's state."""
        with self.lock:
            lines = [
                runner_line(r.what, r.name)
                if r.pred is not None
                else f"{r.name}: {'running its own code' if r is self.current else 'runnable'}"
                for r in self.runners
            ]
            world = self.describe_world()
        text = "\n".join(f"  - {line}" for line in lines) or "  (no runner is left)"
        return f"{text}\n{world}" if world else text

    def _declare_deadlock(self) -> None:
        """Under the lock: every runner waits in vain and the server has nothing to run."""
        self._deadlock([runner_line(r.what, r.name) for r in self.runners if r.pred is not None])

    def running(self) -> Any:
        """The runner that holds the baton (None when none does)."""
        return self.current


def wait_until(pred: Callable[[], bool], what: str = "a condition of the test") -> None:
    """Block the calling rank or core until ``pred()`` holds, ordering nothing.

    A runner that waits on a ``threading.Event`` would keep the baton and stop
    the world; this lets the others run instead. It creates no happens-before
    edge for the race checks (tests use it to force an interleaving that no
    hccl_py call orders). A ``pred`` that never becomes true is a deadlock report.
    """
    ctx = current_rank_context()
    ctx.blocker.wait_for(pred, lambda: f"rank {ctx.rank} waits until {what}")
