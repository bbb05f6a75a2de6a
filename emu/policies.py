"""Who runs next: the runners of an emulated world and the policies that choose among them.

The default :class:`Policy` is fixed (run until blocked, then the next runner in
(rank, core) order); :class:`SeededPolicy` makes random or PCT-style choices from a
seed, with server timings from eager to late. A policy also decides whether the
sending core's Finalize resets the finished-turn counters before another core's
racing Wait polls them (never by default; by the seed otherwise).
:func:`policy_for` picks one.
"""

from __future__ import annotations

import bisect
import operator
import random
from collections.abc import Callable, Hashable, Iterable
from typing import Any

from hccl_py.server.blocking import Text

#: Probability that a random schedule switches runners at a non-blocking switch point.
SWITCH_P = 0.25
#: PCT: priority changes per run, and the chance of one at each switch point.
PCT_CHANGES = 3
PCT_CHANGE_P = 1 / 32
#: Server timings a seeded schedule picks from: probability of running a ready round
#: at each decision (1: eager, 0: only when no runner can go on).
TIMINGS = {"eager": 1.0, "late": 0.0, "random": 0.5}
#: Probability that a seeded schedule puts a Finalize's counter reset before a racing Wait poll.
RESET_FIRST_P = 0.5
#: The kinds of seeded schedule, by ``seed % len(KINDS)``.
KINDS = ("random", "pct")


class Runner:
    """One runner of the world (a thread or a greenlet) that runs user code: a rank or a core."""

    __slots__ = (
        "key",
        "name",
        "rank",
        "target",
        "glet",
        "gate",
        "pred",
        "what",
        "polls",
        "priority",
        "thread",
        "past_failure",
        "polling",
        "released",
        "tid",
        "pinned",
    )

    def __init__(self, key: tuple[int, ...], name: str, rank: int) -> None:
        self.key = key
        self.name = name
        self.rank = rank
        #: What it runs, and the greenlet that runs it (made on its first turn, in the world's thread).
        self.target: Callable[[], None] | None = None
        self.glet: Any = None
        #: A thread runner's lock, released when it gets the baton (``HCCL_PY_EMU_RUNNERS=threads``).
        self.gate: Any = None
        #: None: runnable; else the condition it waits for and what it waits for.
        self.pred: Callable[[], bool] | None = None
        self.what: Text = ""
        #: What it polled since it last blocked: key -> (value seen, read again, description).
        self.polls: dict[Hashable, tuple[object, Callable[[], object], Text, int]] = {}
        self.priority = 0.0
        #: Its handle as its spawner sees it (``join``, ``is_alive``, the ``ident`` of its OS thread).
        self.thread: Any = None
        #: Waits on even in a failed world (a rank waiting for its cores to end).
        self.past_failure = False
        #: Blocked in a poll; and let go on reading while nothing else could run (its loop may end).
        self.polling = False
        self.released = False
        #: A thread runner's native thread id (from when its thread is given it until it ran), and, while the
        #: runner that handed it the baton keeps it on that runner's CPU, the CPUs it had
        #: (:mod:`hccl_py.server.same_cpu`).
        self.tid: int | None = None
        self.pinned: set[int] | None = None

    def runnable(self) -> bool:
        """Not blocked, or its condition holds now."""
        return self.pred is None or self.pred()


#: The (rank, core) order the default schedule runs runners in: a runner's key (an attrgetter,
#: so that the bisections of every spawn and every runner's end call no Python function).
runner_key: Callable[[Runner], Hashable] = operator.attrgetter("key")


def schedulable(runner: Runner) -> bool:
    """In a failed world: whether ``runner`` may run (it meets the failure at its next call),
    or waits on as before (:attr:`Runner.past_failure`) and may go on."""
    return not runner.past_failure or runner.runnable()


def first_ok(
    runners: Iterable[Runner], ok: Callable[[Runner], bool] | None, skip: Runner | None = None
) -> Runner | None:
    """The first of ``runners`` but ``skip`` that may run now: ``ok(runner)``, or where ``ok``
    is None runnable (:meth:`Runner.runnable` inline: asked at every switch)."""
    for r in runners:
        if r is not skip and ((r.pred is None or r.pred()) if ok is None else ok(r)):
            return r
    return None


def every_ok(
    runners: Iterable[Runner], ok: Callable[[Runner], bool] | None, skip: Runner | None = None
) -> list[Runner]:
    """Every one of ``runners`` but ``skip`` that may run now (see :func:`first_ok`)."""
    return [
        r
        for r in runners
        if r is not skip and ((r.pred is None or r.pred()) if ok is None else ok(r))
    ]


_PRIORITY = operator.attrgetter("priority")


class Policy:
    """The fixed default schedule: run until blocked, then the next runner in (rank, core) order."""

    #: Whether a non-blocking switch point may hand control to another runner.
    preemptive = False

    def __init__(self, late: bool = False) -> None:
        self.late = late
        self.description = "the default schedule" + (" (late server)" if late else "")

    def add(self, runner: Runner) -> None:
        """A new runner joins the world."""

    def runnable(self, runners: list[Runner], last: Runner | None) -> list[Runner]:
        """The runners (in key order) that :meth:`choose` picks from, ``last`` having run last.

        The default pick is the first runnable runner after ``last`` in key order, so
        the scan stops there: asked at every switch, it no longer tests every blocked
        runner's condition. A released poller found first makes it test them all (the
        quiet-polls count needs to know whether anything else could run).
        """
        try:  # an identity scan in C; a runner that ended is found by its key
            start = runners.index(last) + 1
        except ValueError:
            start = 0 if last is None else bisect.bisect_right(runners, last.key, key=runner_key)
        n = len(runners)
        for i in range(n):
            r = runners[(start + i) % n]
            if r.pred is None or r.pred():
                if r.released:
                    break
                return [r]
        else:
            return []
        return every_ok(runners, None)

    def choose(self, runnable: list[Runner], current: Runner | None) -> Runner:
        """The runner to run next among ``runnable`` (in key order); ``current`` ran last."""
        if current is not None:
            for r in runnable:
                if r.key > current.key:
                    return r
        return runnable[0]

    def switch(
        self, current: Runner, runners: list[Runner], ok: Callable[[Runner], bool] | None
    ) -> Runner | None:
        """At a non-blocking switch point of ``current``: another runner to run, or None.

        ``runners`` are the world's, in key order; ``ok(runner)`` says whether one may run
        now (None: whether it is runnable). A policy asks it only of the runners its choice
        depends on: it is a blocked runner's condition, asked at every switch point.
        """
        return None

    def run_round(self, runners_can_go: bool) -> bool:
        """Whether the server runs a ready round now (``runners_can_go``: some runner could run)."""
        return not (self.late and runners_can_go)

    def pick_queue(self, n: int) -> int:
        """Which of ``n`` queues with pending one-sided copies the server serves next: the
        one whose oldest copy is the oldest (by default every copy lands in posting order)."""
        return 0

    def reset_first(self) -> bool:
        """Whether a Finalize's counter reset comes before a racing Wait poll: never, by default.

        On hardware Finalize first waits for the server, which takes long, so the
        other cores' Waits usually see their turn before the reset.
        """
        return False


class SeededPolicy(Policy):
    """A reproducible schedule picked by ``seed``: random or PCT-style, with a server timing."""

    preemptive = True

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.kind = KINDS[seed % len(KINDS)]
        timing = list(TIMINGS)[(seed // len(KINDS)) % len(TIMINGS)]
        self.round_p = TIMINGS[timing]
        self.late = self.round_p == 0.0
        self.changes = 0
        self.description = f"seed {seed}: {self.kind} switches, {timing} server"

    def add(self, runner: Runner) -> None:
        runner.priority = self.rng.random() + PCT_CHANGES

    def runnable(self, runners: list[Runner], last: Runner | None) -> list[Runner]:
        """Every runnable runner: a random or priority pick needs them all."""
        return every_ok(runners, None)

    def choose(self, runnable: list[Runner], current: Runner | None) -> Runner:
        if self.kind == "pct":
            return max(runnable, key=_PRIORITY)
        return self.rng.choice(runnable)

    def switch(
        self, current: Runner, runners: list[Runner], ok: Callable[[Runner], bool] | None
    ) -> Runner | None:
        if self.kind == "pct":
            if self.changes < PCT_CHANGES and self.rng.random() < PCT_CHANGE_P:
                self.changes += 1
                current.priority = PCT_CHANGES - self.changes  # below every initial priority
            # the one of highest priority that may run, the first in key order among equals
            # (a stable sort), if above the current one's: only runners above it are asked
            mine = current.priority
            higher = [r for r in runners if r.priority > mine]
            return first_ok(sorted(higher, key=_PRIORITY, reverse=True), ok)
        if first_ok(runners, ok, current) is None or self.rng.random() >= SWITCH_P:
            return None
        return self.rng.choice(every_ok(runners, ok, current))

    def pick_queue(self, n: int) -> int:
        return self.rng.randrange(n) if n > 1 else 0

    def reset_first(self) -> bool:
        return self.rng.random() < RESET_FIRST_P

    def run_round(self, runners_can_go: bool) -> bool:
        if not runners_can_go:
            return True
        return self.round_p > 0 and (self.round_p == 1.0 or self.rng.random() < self.round_p)


def policy_for(seed: int | None, schedule: str) -> Policy:
    """The default policy (``seed`` None, server timing by ``schedule``) or the seeded one."""
    return Policy(schedule == "late") if seed is None else SeededPolicy(seed)
