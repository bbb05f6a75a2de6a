"""Happens-before checks for collective buffers: accesses that no Wait orders with the server.

On by default on the emulator. A Commit of round ``r`` hands that round's
bytes to the server: its send ranges become *pending reads* and its receive
ranges *pending writes* of the committing rank, with the line of the Commit
(the Prepare's, for ``Prepare[True]``). The Wait of that round, or a Query
that returns more than ``r``, orders the round before the rank's next
accesses and clears them; so does every Wait or Query that the server's rules
(tasks of a domain in Prepare order, InterHcclGroupSync) order after it. A
round whose task waits for a round that the rank has not committed yet (through
InterHcclGroupSync or behind an earlier task) is marked at that Commit instead:
the server cannot start it before. A kernel access in between, seen by
:mod:`.watch`, is a race:

- a **read of a pending receive range** may see the old bytes or the new;
- a **write of a pending send range** may be sent or not;
- a **write of a pending receive range** may be overwritten by the round or not.

Each raises :class:`~hccl_py.core.errors.HcclRaceError` at the access, naming
the handle, op, round, bytes and both lines. Nothing depends on whether the
round already ran in this schedule, so a missing Wait is found in every
schedule, the default one included. Bytes that a round only reads and writes
back unchanged (the rank's own block of an in-place AllGather or AlltoAll) or
never writes (``skipLocalRankCopy``) are no pending write. A ``.numpy()``
view of pending receive bytes hides the reads made through it: a warning
("buffer-race"), never an error. Hcomm reads into plain GM share these marks and this
watch until their channel's Drain (:mod:`.posted`). A Commit whose round the server would
read or write where another domain's pending round writes or reads, with no Wait and no
InterHcclGroupSync between them, is a race too: the domains' servers run independently.
"""

from __future__ import annotations

import bisect
import itertools
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import CodeType
from typing import Protocol

from hccl_py.core import report
from hccl_py.core.errors import HcclRaceError
from hccl_py.core.gm import Allocation
from hccl_py.core.task import Task

from .findings import Finding, Mark, findings
from .intervals import Runs
from .races import accessor, place_text, user_frame, user_place
from .round_runs import round_runs
from .server_order import Ordered, dep_keys
from .slot import Slot

#: What the server does with the bytes of each side of a round.
_SERVER_DOES = {"send": "reads", "recv": "writes"}


class Marked(Protocol):
    """What a storage's list holds: a :class:`Pending` side, or Hcomm requests (:mod:`.posted`)."""

    side: str

    def marks(self) -> Iterable[Mark]: ...


@dataclass(eq=False)
class Round:
    """One committed round of one rank's task, pending until a Wait or Query orders it."""

    task: Task
    index: int
    #: Where it was committed: a text, or a :func:`~.races.user_place` made text when asked.
    at: str | tuple[CodeType, int] | None
    #: When the round was marked, among every round of the world (ties in reports go to the
    #: earliest).
    order: int = 0

    @property
    def where(self) -> str:
        """``file.py:line (function)`` of the Commit."""
        return self.at if isinstance(self.at, str) else place_text(self.at)

    def describe(self) -> str:
        """``round 0 of handle 1 (AllGather(FP32, count=8, repeat=1))``."""
        return f"round {self.index} of handle {self.task.handle} ({self.task.describe()})"

    def facts(self) -> dict[str, object]:
        """The round's facts for a report."""
        task = self.task
        return {
            "domain": task.domain_name,
            "handle": task.handle,
            "op": task.label,
            "round": self.index,
        }

    def error(self, found: Finding, rank: int, where: str) -> HcclRaceError:
        """The report of ``found``, an access at ``where`` of global rank ``rank``."""
        task, mark = self.task, found.mark
        base = mark.alloc.memory[1]
        side = "send" if mark.side == "send" else "receive"
        risk = {
            (False, "recv"): "the read may see the old bytes or the new ones",
            (True, "send"): "the server may send the old bytes or the new ones",
            (True, "recv"): "the round may overwrite the kernel's write, or not",
        }[(found.written, mark.side)]
        return HcclRaceError(
            f"collective buffer race: {accessor(rank)} {'writes' if found.written else 'reads'} bytes "
            f"[{found.lo - base}, {found.hi - base}) of {mark.alloc.name} at {where} before the "
            f"Wait of {self.describe()}, committed at {self.where}: the server "
            f"{_SERVER_DOES[mark.side]} these bytes (the {side} buffer) when the round runs, so "
            f"{risk}. Call Wait({task.handle}) (or Query until it reports the round done) before "
            "accessing them; see docs/sanitizer.md#buffer-races",
            rank=rank,
            **self.facts(),
        )

    #: What orders the round before the rank's next accesses (for the warning).
    ordered_by = "the Wait of the round"
    #: The server may read a send range or write a receive range at any moment: any write races.
    same_bytes_race = True

    def unseen(self) -> str:
        """What a numpy view taken now may read too early, for the warning."""
        return f"{self.describe()}, committed at {self.where}"


@dataclass(eq=False)
class Pending:
    """One side of one task of a rank, while some of its committed rounds are not ordered.

    The bytes of those rounds are computed only when a kernel access meets the
    storage (:meth:`marks`): a Commit and a Wait only add and drop rounds. Both sides
    of a task share one list of rounds.
    """

    task: Task
    side: str
    alloc: Allocation
    base: int
    rounds: list[Round]

    def marks(self) -> Iterable[Mark]:
        """The marks of the pending rounds that move bytes on this side."""
        for rnd in self.rounds:
            starts, ends = round_runs(self.task, self.side, rnd.index)
            if starts:
                yield Mark(rnd, self.side, self.alloc, self.base, starts, ends)


class BufferRaces:
    """The pending rounds of every rank of one emulated world, by the storage they mark."""

    def __init__(self, world_size: int, slots: Callable[[str], Mapping[int, Slot]]) -> None:
        self.lock = threading.Lock()
        #: Per global rank: storage address -> the sides of its tasks with pending rounds there,
        #: and its Hcomm requests that no Drain ordered yet (:mod:`.posted`; tested with ``in``
        #: before every watched torch operation).
        self.pending: list[dict[int, list[Marked]]] = [{} for _ in range(world_size)]
        #: Per global rank: task -> its pending sides (the same objects as in ``pending``).
        self.tasks: list[dict[Task, list[Pending]]] = [{} for _ in range(world_size)]
        #: Numbers the marks (rounds and Hcomm requests) in the order they were made.
        self.sequence = itertools.count()
        #: Per global rank: committed rounds whose task waits behind a round it did not commit.
        self.gated: list[list[Round]] = [[] for _ in range(world_size)]
        #: A domain's unretired slots by seq, for the InterHcclGroupSync dependencies of a Wait.
        self.slots = slots
        #: (rank, round, where) of the numpy views already warned about.
        self.warned: set[tuple[int, Round, str]] = set()

    def committed(
        self, rank: int, task: Task, round_idx: int, at: tuple[CodeType, int] | None = None
    ) -> None:
        """Global rank ``rank`` committed round ``round_idx`` of ``task`` (at the kernel's line
        ``at``, a :func:`~.races.user_place`; found here by default): mark its bytes, or, while
        a round that must finish first is not committed by this rank (the task waits behind
        it), keep them until that Commit; then mark the rounds it releases."""
        rnd = Round(task, round_idx, user_place() if at is None else at)
        clash = None  # the first round marked here that meets another domain's (reported)
        with self.lock:
            # a task with rounds marked was not gated at their Commit, and stays so (Commits only
            # add up, a dependency once prepared stays prepared): only its first Commits ask
            if task not in self.tasks[rank] and self._gated(rank, task):
                self.gated[rank].append(rnd)
            else:
                name = task.domain_name  # (no other domain's task pending: nothing to ask)
                for other in self.tasks[rank]:
                    if other.domain_name != name:
                        clash = self._across_domains(rank, rnd)
                        break
                self._mark(rank, rnd)
            for held in list(self.gated[rank]):
                if held is not rnd and not self._gated(rank, held.task):
                    self.gated[rank].remove(held)
                    clash = clash or self._across_domains(rank, held)
                    self._mark(rank, held)
        if clash is not None:
            raise clash

    def _across_domains(self, rank: int, rnd: Round) -> HcclRaceError | None:
        """Under the lock, before ``rnd`` is marked: the report when the server's accesses of
        ``rnd`` meet another domain's pending round of this rank that nothing orders with it
        (no Wait of it yet, no InterHcclGroupSync either way)."""
        task = rnd.task
        others = [t for t in self.tasks[rank] if t.domain_name != task.domain_name]
        if not others or task.seq not in self.slots(task.domain_name):
            return None
        unordered = {t for t in others if self._unordered(t, task)}
        for side, alloc in (("send", task.send.alloc), ("recv", task.recv.alloc)):
            memory = alloc.memory
            if not unordered or memory is None or not memory[0]:
                continue
            starts, ends = round_runs(task, side, rnd.index)
            runs = [(memory[1] + lo, memory[1] + hi) for lo, hi in zip(starts, ends, strict=True)]
            marks = [
                mark
                for pending in self.pending[rank].get(memory[0], ())
                if isinstance(pending, Pending) and pending.task in unordered
                for mark in pending.marks()
            ]
            found = findings(marks, runs, written=side == "recv") if runs else []
            if found:
                return _cross_domain_error(rnd, side, found[0], rank)
        return None

    def _unordered(self, other: Task, task: Task) -> bool:
        """Whether the server may run ``other`` (another domain's, this launch's) and ``task``
        in either order: neither waits for the other through InterHcclGroupSync."""
        if other.seq not in self.slots(other.domain_name):  # an earlier launch's: it finished
            return False
        last = Round(other, other.repeat - 1, None)
        rank = task.domain.ranks[task.rank]
        if Ordered(task, -1, self.slots, rank).covers(last):
            return False
        return not Ordered(other, -1, self.slots, rank).covers(Round(task, task.repeat - 1, None))

    def _gated(self, rank: int, task: Task) -> bool:
        """Whether global rank ``rank`` has not committed every round of a task that must
        finish before ``task`` runs: an earlier task of its domain, a task it depends on through
        InterHcclGroupSync, or (in turn) one of theirs. The server cannot start ``task`` before
        that Commit, so no access made before it races with ``task``."""
        slots = self.slots(task.domain_name)
        if not task.deps:  # the earlier tasks left finished: every rank
            for at, slot in slots.items():  # committed them and those they waited for
                if at >= task.seq:  # (in seq order; a loop: no generator's calls per Commit)
                    return False
                if not slot.finished:
                    break
            else:
                return False
        todo = [(task.domain_name, task.seq - 1), *dep_keys(slots, task.seq, rank)]  # run first
        top: dict[str, int] = {}
        while todo:
            domain, seq = todo.pop()
            if seq is None:  # a dependency its domain has not prepared, nor this rank committed
                return True
            if top.get(domain, -1) >= seq:
                continue
            top[domain] = seq
            slots = self.slots(domain)
            for at, slot in list(slots.items()):
                if at <= seq:
                    for r, t in slot.tasks.items():
                        if t.domain.ranks[r] == rank and slot.committed.get(r, 0) < t.repeat:
                            return True
            todo += dep_keys(slots, seq, rank)
        return False

    def _mark(self, rank: int, rnd: Round) -> None:
        """Under the lock: the bytes of ``rnd`` become pending accesses of the server."""
        task = rnd.task
        rnd.order = next(self.sequence)
        sides = self.tasks[rank].get(task)
        if sides is None:
            sides = self._sides(rank, task)
            if not sides:
                return
            self.tasks[rank][task] = sides
        rounds = sides[0].rounds  # the sides share one list, in index order
        if rounds and rounds[-1].index > rnd.index:  # a round held back behind another
            bisect.insort(rounds, rnd, key=lambda held: held.index)
        else:
            rounds.append(rnd)

    def _sides(self, rank: int, task: Task) -> list[Pending]:
        """The sides of ``task`` in tensor memory, filed under their storages."""
        rounds: list[Round] = []
        sides = []
        for side, alloc in (("send", task.send.alloc), ("recv", task.recv.alloc)):
            memory = alloc.memory
            if memory is None or not memory[0]:
                continue
            pending = Pending(task, side, alloc, memory[1], rounds)
            self.pending[rank].setdefault(memory[0], []).append(pending)
            sides.append(pending)
        return sides

    def ordered(self, rank: int, task: Task, last: int) -> None:
        """Global rank ``rank`` saw rounds ``0..last`` of ``task`` done: clear what that orders."""
        with self.lock:
            tasks = self.tasks[rank]
            if not tasks and not self.gated[rank]:
                return
            done = None  # made when a round of another task asks (a Wait's own task: inline)
            if self.gated[rank]:
                done = Ordered(task, last, self.slots, rank)
                self.gated[rank] = [rnd for rnd in self.gated[rank] if not done.covers(rnd)]
            for pending_task in list(tasks):  # (its keys: no items() call per Wait)
                sides = tasks[pending_task]
                rounds = sides[0].rounds  # never empty while filed; what a Wait orders: a prefix
                n = len(rounds)
                if pending_task is task:  # its own rounds up to ``last`` (``covers``, inline)
                    ordered = 0
                    while ordered < n and rounds[ordered].index <= last:
                        ordered += 1
                else:
                    done = done or Ordered(task, last, self.slots, rank)
                    ordered = n if done.covers(rounds[-1]) else 0
                    while ordered < n and done.covers(rounds[ordered]):
                        ordered += 1
                if ordered == n:
                    del tasks[pending_task]
                    self._unfile(rank, sides)
                else:
                    del rounds[:ordered]

    def _unfile(self, rank: int, sides: list[Pending]) -> None:
        """Drop ``sides`` (no round pending any more) from their storages' lists."""
        pending = self.pending[rank]
        for side in sides:
            storage = side.alloc.memory[0]
            entries = pending[storage]
            # (the storage's only entry, the usual case: no list to build)
            left = [] if entries == [side] else [p for p in entries if p is not side]
            if left:
                pending[storage] = left
            else:
                del pending[storage]

    def access(self, rank: int, storage: int, runs: Runs, written: bool) -> list[Finding]:
        """Global rank ``rank`` reads or writes ``runs`` of ``storage``: every pending mark it
        meets, in address order (:mod:`.findings` judges them)."""
        with self.lock:
            return self._findings(rank, storage, runs, written)

    def viewed(self, rank: int, storage: int, runs: Runs) -> None:
        """Rank ``rank`` took a numpy view of ``runs``: its reads through it are not seen."""
        with self.lock:
            met = self._findings(rank, storage, runs, written=False)
        if not met:
            return
        found = met[0]
        where, rnd = user_frame(), found.mark.round
        key = (rank, rnd, where)
        if key in self.warned:
            return
        self.warned.add(key)
        base = found.mark.alloc.memory[1]
        report.warn(
            "buffer-race",
            f"collective buffer race check: cannot tell whether rank {rank}'s reads of bytes "
            f"[{found.lo - base}, {found.hi - base}) of {found.mark.alloc.name} through the numpy "
            f"view taken at {where} come after {rnd.unseen()}: reads through a numpy view are "
            f"not seen; take the view after {rnd.ordered_by}",
            **rnd.facts(),
        )

    def _findings(self, rank: int, storage: int, runs: Runs, written: bool) -> list[Finding]:
        """The pending marks that a read (or write) of ``runs`` of ``storage`` meets, in address
        order (ties: the earliest mark first)."""
        marks = [
            mark
            for pending in self.pending[rank].get(storage, ())
            if written or pending.side == "recv"
            for mark in pending.marks()
        ]
        marks.sort(key=lambda mark: mark.round.order)  # stable: a round's send side first
        return findings(marks, runs, written)


def _cross_domain_error(rnd: Round, side: str, found: Finding, rank: int) -> HcclRaceError:
    """The report of ``rnd``, whose server ``side`` meets ``found``: another domain's round."""
    mark, other = found.mark, found.mark.round
    base = mark.alloc.memory[1]
    theirs = _SERVER_DOES[mark.side]
    return HcclRaceError(
        f"collective buffer race between domains: the server {_SERVER_DOES[side]} bytes "
        f"[{found.lo - base}, {found.hi - base}) of {mark.alloc.name} for {rnd.describe()} of "
        f"domain {rnd.task.domain_name}, committed at {rnd.where}, and {theirs} them for "
        f"{other.describe()} of domain {other.task.domain_name}, committed at {other.where}; "
        "nothing orders the two rounds (no Wait of the first before this Commit, no "
        "InterHcclGroupSync between the tasks), and the servers of two domains run their tasks "
        "independently (on hardware and on gloo), so which one moves these bytes first is "
        f"left to chance. Wait({other.task.handle}) on domain {other.task.domain_name}'s Hccl "
        "object before this Commit, or order the tasks with InterHcclGroupSync; see "
        "docs/sanitizer.md#buffer-races",
        rank=rank,
        **rnd.facts(),
    )
