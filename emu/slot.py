"""One collective of an emulated world: the tasks of every rank at one position of one domain."""

from __future__ import annotations

import dataclasses

from hccl_py.core.task import Task
from hccl_py.server.positions import Position


@dataclasses.dataclass(eq=False)
class Slot(Position):
    """One collective: a :class:`~hccl_py.server.positions.Position` that tracks every rank.

    The world's task queues (:class:`~hccl_py.server.task_queue.TaskBoard`)
    keep its state; the slot adds what only the emulator needs.
    """

    #: (domain rank, round) -> the rank's clock at that Commit (the window race check)
    clocks: dict[tuple[int, int], tuple[int, ...] | None] = dataclasses.field(default_factory=dict)
    #: Every rank's task in domain-rank order, made once the last one arrived (each round's
    #: copies read them in this order).
    ranked: list[Task] = dataclasses.field(default_factory=list)
