"""The positions of a domain's task queue: what :class:`~.task_queue.TaskBoard` keeps per task.

- :class:`Position`: one position of a domain, the tracked ranks' tasks and their rounds;
- :class:`DomainTasks`: the positions of one domain in Prepare order, its head, its first
  failure, the rounds done, and retiring a kernel launch's finished positions;
- :class:`Why`: why a round is not done (:meth:`~.task_queue.TaskBoard.why`).

Pure state, as the board: no threads, no locks, no bytes moved.
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Iterable
from typing import Any, Literal

from ..core.errors import HcclError
from ..core.task import PendingDep, Task
from .ordering import behind


@dataclasses.dataclass(eq=False)
class Position:
    """One position of a domain: the tracked ranks' tasks and their rounds."""

    domain: str
    seq: int
    #: The domain ranks whose tasks this server tracks (all of them, or its own).
    ranks: tuple[int, ...]
    tasks: dict[int, Task] = dataclasses.field(default_factory=dict)
    #: Domain rank -> rounds committed (released: as the late schedule let them start).
    committed: dict[int, int] = dataclasses.field(default_factory=dict)
    released: dict[int, int] = dataclasses.field(default_factory=dict)
    done: int = 0
    running: bool = False
    error: HcclError | None = None
    #: Domain rank -> committed rounds not poisoned yet; round -> what the server saved.
    unpoisoned: dict[int, list[int]] = dataclasses.field(default_factory=dict)
    poisoned: dict[int, list[Any]] = dataclasses.field(default_factory=dict)
    #: Set as tasks arrive (:meth:`add`), asked at every switch: every tracked rank submitted
    #: its task; the rounds (as the first task says); every task's InterHcclGroupSync deps.
    complete: bool = False
    repeat: int = 0
    all_deps: list[Task | PendingDep] = dataclasses.field(default_factory=list)
    #: Every round ran (complete, ``done >= repeat``): kept as tasks arrive and rounds end.
    finished: bool = False

    @property
    def key(self) -> tuple[str, int]:
        """``(domain, seq)``."""
        return (self.domain, self.seq)

    def add(self, rank: int, task: Task) -> None:
        """Domain rank ``rank``'s task arrived at this position.

        Another rank's task comes last in :attr:`tasks`: its deps follow the others' and the
        first task (the rounds) stays; the first task, or one that replaces a rank's, makes both
        anew."""
        tasks = self.tasks
        if tasks and rank not in tasks:
            tasks[rank] = task
            self.all_deps = [*self.all_deps, *task.deps]
        else:
            tasks[rank] = task
            self.all_deps = [dep for one in tasks.values() for dep in one.deps]
            self.repeat = self.sample().repeat
        self.complete = len(tasks) == len(self.ranks)
        self.finished = self.complete and self.done >= self.repeat

    def sample(self) -> Task:
        """Some rank's task (the first to arrive), for descriptions."""
        for task in self.tasks.values():  # (a loop: no iter() and next() calls)
            return task
        raise StopIteration  # no task arrived yet: as next() of an empty iterator

    def not_submitted(self) -> list[int]:
        """Tracked domain ranks whose task has not arrived."""
        return [r for r in self.ranks if r not in self.tasks]

    def not_committed(self, rounds: int, late: bool = False) -> list[int]:
        """Tracked domain ranks that committed (late: released) fewer than ``rounds`` rounds."""
        counts = self.released if late else self.committed
        return [r for r in self.ranks if counts.get(r, 0) < rounds]

    @classmethod
    def retired(cls, task: Task, ranks: Iterable[int]) -> Position:
        """A stand-in for the finished position of ``task`` that its domain forgot."""
        position = cls(task.domain_name, task.seq, tuple(ranks))
        for rank in position.ranks:
            position.add(rank, task)
        position.done, position.finished = task.repeat, True
        return position


#: The reasons :meth:`~.task_queue.TaskBoard.why` gives, in the order the server meets them.
WhyKind = Literal[
    "failed",
    "finished",
    "not submitted",
    "not committed",
    "earlier round",
    "earlier task",
    "dependency",
    "running",
    "runnable",
]


@dataclasses.dataclass(frozen=True)
class Why:
    """Why a round is not done: the first reason, in the order the server meets them.

    ``kind`` is one of ``failed``, ``finished``, ``not submitted``, ``not committed``
    (``ranks``: the domain ranks), ``earlier round`` (round ``position.done`` of the same
    position runs first), ``earlier task`` (``position``: the previous, unfinished position),
    ``dependency`` (``dep``: the unfinished InterHcclGroupSync task, ``position``: its
    position if known), ``running`` or ``runnable``.
    """

    kind: WhyKind
    ranks: tuple[int, ...] = ()
    position: Position | None = None
    dep: Task | PendingDep | None = None
    error: HcclError | None = None


#: A position's seq (the order of a domain's positions).
_SEQ = operator.attrgetter("seq")


class DomainTasks:
    """The positions of one domain, in Prepare order."""

    def __init__(self, name: str, ranks: Iterable[int], position: type[Position]) -> None:
        self.name = name
        self.ranks = tuple(ranks)
        self.position_type = position
        self.positions: dict[int, Position] = {}
        #: Every position below this one finished and was forgotten.
        self.retired_below = 0
        #: The lowest position that failed by itself (later ones fail behind it).
        self.failed: Position | None = None

    def get(self, seq: int) -> Position | None:
        """The position ``seq``, if it exists and was not retired."""
        return self.positions.get(seq)

    def position(self, task: Task) -> Position:
        """``task``'s position, created on first use (a stand-in once retired)."""
        found = self.positions.get(task.seq)
        if found is not None:
            return found
        if task.seq < self.retired_below:
            return self.position_type.retired(task, self.ranks)
        found = self.positions[task.seq] = self.position_type(self.name, task.seq, self.ranks)
        if self.failed is not None and self.failed.seq < task.seq:
            found.error = self._behind()
        return found

    def _behind(self) -> HcclError:
        failed = self.failed
        assert failed is not None and failed.error is not None
        return behind(failed.error, failed.seq, self.name)

    def head(self) -> Position | None:
        """The first position that has not finished (the server's place in the queue), if any."""
        unfinished = [p for p in self.positions.values() if not p.finished]
        return min(unfinished, key=_SEQ, default=None)  # (a C key: no call per position)

    @property
    def next_seq(self) -> int:
        """The position after the last one: the server's place once every position finished."""
        return max(self.positions, default=self.retired_below - 1) + 1

    def reached(self, position: Position) -> bool:
        """Whether the server got to ``position``: the previous position finished (or is unknown)."""
        previous = self.positions.get(position.seq - 1)
        return previous is None or previous.finished

    def rounds_done(self, seq: int, repeat: int) -> int:
        """How many rounds of position ``seq`` (of ``repeat`` rounds) finished."""
        if seq < self.retired_below:
            return repeat
        found = self.positions.get(seq)
        return 0 if found is None else found.done

    def failure_at(self, seq: int) -> HcclError | None:
        """The error position ``seq`` ends with, if it or an earlier position failed."""
        found = self.positions.get(seq)
        if found is not None:
            return found.error
        if self.failed is not None and self.failed.seq < seq:
            return self._behind()
        return None

    def first_failure(self) -> HcclError | None:
        """The error of the domain's lowest position that failed by itself."""
        return None if self.failed is None else self.failed.error

    def unfinished(self) -> list[Position]:
        """The positions that neither finished nor failed, in Prepare order."""
        return [p for p in self.positions.values() if p.error is None and not p.finished]

    def retire(self, launch: int) -> range:
        """Forget the leading finished positions of kernel launches up to ``launch``.

        Nobody waits for them or queries them any more, and their tasks hold
        the launch's buffers. Returns the positions forgotten.
        """
        first = seq = self.retired_below
        found = self.positions.get(seq)
        while found is not None and found.finished and found.error is None:
            if found.sample().launch > launch:
                break
            del self.positions[seq]
            seq += 1
            found = self.positions.get(seq)
        self.retired_below = seq
        return range(first, seq)
