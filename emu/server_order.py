"""Which committed rounds a rank's seeing a round done orders, by the server's rules.

The server runs the tasks of a domain in Prepare order, and a task only after
the tasks it depends on through InterHcclGroupSync (and theirs). The buffer
race check (:mod:`.buffers`) asks this when a Wait or Query returns, and when a
Commit marks a round whose task waits behind one the rank has not committed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

from hccl_py.core.task import Task

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

    def __init__(self, task: Task, last: int, slots: Callable[[str], Mapping[int, Slot]]) -> None:
        self.task = task
        self.last = last
        self.slots = slots
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
            for dep in deps(self.slots(domain), top):
                if below.get(dep.domain_name, 0) <= dep.seq:
                    below[dep.domain_name] = dep.seq + 1
                    todo.append((dep.domain_name, dep.seq))
        below.pop(self.task.domain_name)
        return below


def deps(slots: Mapping[int, Slot], top: int) -> Iterable[Task]:
    """The InterHcclGroupSync dependencies of every task of one domain up to seq ``top``."""
    for seq, slot in list(slots.items()):
        if seq <= top:
            yield from slot.all_deps
