"""Which committed rounds a rank's seeing a round done orders, by the server's rules.

The server runs the tasks of a domain in Prepare order, and a task only after
the tasks it depends on through InterHcclGroupSync (and theirs). The buffer
race check (:mod:`.buffers`) asks this when a Wait or Query returns, and when a
Commit marks a round whose task waits behind one the rank has not committed.

Each rank's server follows that rank's own InterHcclGroupSync calls: another
rank's sync delays its own server, not this one's, which may read this rank's
send buffer and write its receive buffer before the other rank's dependency
finished. The emulator runs a collective's round for every rank at once, after
every rank's dependencies; its race check orders a rank's accesses by that
rank's dependencies alone, so a rank that leaves out a sync is reported although
the emulated run computed what the synced ranks made it compute.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol

from hccl_py.core.task import Task, resolved

from .slot import Slot


class Round(Protocol):
    """A committed round (:class:`.buffers.Round`): its task and its index."""

    task: Task
    index: int


class Ordered:
    """Which rounds a rank's seeing rounds ``0..last`` of ``task`` done orders before it.

    The server runs the tasks of a domain in Prepare order, and a task only
    after the tasks it depends on through InterHcclGroupSync (and theirs):
    those finished too, in every schedule.
    """

    def __init__(
        self, task: Task, last: int, slots: Callable[[str], Mapping[int, Slot]], rank: int
    ) -> None:
        self.task = task
        self.last = last
        self.slots = slots
        self.rank = rank  # the global rank that saw it done: its dependencies order
        self.below: dict[str, int] | None = None  # domain -> tasks below this seq finished

    def covers(self, rnd: Round) -> bool:
        """Whether ``rnd`` finished before the round that was seen done."""
        t, seen = rnd.task, self.task
        if t.domain_name == seen.domain_name:
            return t.seq < seen.seq or (t.seq == seen.seq and rnd.index <= self.last)
        if self.below is None:
            self.below = self._dependencies()
        return t.seq < self.below.get(t.domain_name, 0)

    def _dependencies(self) -> dict[str, int]:
        """Per other domain, the seq below which every task finished (through dependencies)."""
        below = {self.task.domain_name: self.task.seq + 1}
        todo = [(self.task.domain_name, self.task.seq)]
        while todo:
            domain, top = todo.pop()
            for name, seq in dep_keys(self.slots(domain), top, self.rank):
                if seq is not None and below.get(name, 0) <= seq:
                    below[name] = seq + 1
                    todo.append((name, seq))
        below.pop(self.task.domain_name)
        return below


def dep_keys(slots: Mapping[int, Slot], top: int, rank: int) -> list[tuple[str, int | None]]:
    """``(domain, seq)`` of the InterHcclGroupSync dependencies that global rank ``rank`` gave
    its tasks of one domain up to seq ``top``; seq None for one its domain has not prepared yet
    (:class:`~hccl_py.core.task.PendingDep`)."""
    keys = []
    for seq, slot in list(slots.items()):
        if seq <= top and slot.all_deps:  # (no rank made a sync: none of its tasks has deps)
            for dep in rank_deps(slot, rank):
                task = resolved(dep)
                keys.append((dep.domain_name, None if task is None else task.seq))
    return keys


def rank_deps(slot: Slot, rank: int) -> tuple:
    """The dependencies of global rank ``rank``'s own task at ``slot`` (none before it
    arrived)."""
    for r, task in slot.tasks.items():
        if task.domain.ranks[r] == rank:
            return task.deps
    return ()
