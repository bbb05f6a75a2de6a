"""Who runs next: the runners of an emulated world and the policies that choose among them.

The default :class:`Policy` is fixed (run until blocked, then the next runner in
(rank, core) order); seeds 1 and 2 are :class:`PriorityPolicy` (fixed priorities by
(rank, core), reversed and then in order, preempting at every switch point: a two-party
order bug shows in one of them); :class:`SeededPolicy` makes random or PCT-style choices
from any other seed, with server timings from eager to late. A policy also decides whether the
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
#: The kinds of seeded schedule, by ``seed % len(KINDS)`` (but for :data:`PRIORITY_SEEDS`).
KINDS = ("random", "pct")
#: Seeds of the fixed-priority schedules (the first that ``explore=`` runs after the default
#: one): seed -> (the last runner in (rank, core) order first, a late server).
PRIORITY_SEEDS = {1: (True, False), 2: (False, True)}


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
    #: Whether the end of an hccl_py call is a switch point too (where preemptive).
    point_at_return = False

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


class PriorityPolicy(Policy):
    """Seeds 1 and 2: fixed priorities by (rank, core), preempting at every switch point.

    The default schedule runs the running runner until it blocks; these run the runnable
    runner of highest priority at every switch point: seed 1 the last rank and its last core
    first (the reverse of the default order), with an eager server; seed 2 the first one
    first, with a late server. Of two runners that a missing order leaves unordered (a core
    that writes and one that reads, after a barrier both passed), one of the two schedules
    runs the reader first, every time: no chance involved. The end of every hccl_py call is a
    switch point too, so that the runner that let others go (the last one at a barrier, a
    flag's setter) does not run on before those of higher priority it released.
    """

    preemptive = True
    point_at_return = True

    def __init__(self, seed: int) -> None:
        self.reverse, self.late = PRIORITY_SEEDS[seed]
        first = "last" if self.reverse else "first"
        server = "late" if self.late else "eager"
        self.description = (
            f"seed {seed}: the {first} runner in (rank, core) order first, {server} server"
        )

    def runnable(self, runners: list[Runner], last: Runner | None) -> list[Runner]:
        return every_ok(runners, None)

    def choose(self, runnable: list[Runner], current: Runner | None) -> Runner:
        return runnable[-1] if self.reverse else runnable[0]

    def switch(
        self, current: Runner, runners: list[Runner], ok: Callable[[Runner], bool] | None
    ) -> Runner | None:
        at = bisect.bisect_left(runners, current.key, key=runner_key)
        higher = reversed(runners[at + 1 :]) if self.reverse else runners[:at]
        return first_ok(higher, ok)

    def pick_queue(self, n: int) -> int:
        """The reversed one serves the queue whose oldest copy is the newest first."""
        return n - 1 if self.reverse else 0

    def reset_first(self) -> bool:
        """The reversed one puts a Finalize's counter reset first (the order hardware rarely
        takes), the other one after the racing Wait polls (as the default one)."""
        return self.reverse


def policy_for(seed: int | None, schedule: str) -> Policy:
    """The default policy (``seed`` None, server timing by ``schedule``) or the seeded one."""
    if seed is None:
        return Policy(schedule == "late")
    return PriorityPolicy(seed) if seed in PRIORITY_SEEDS else SeededPolicy(seed)
