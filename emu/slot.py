"""One collective of an emulated world: the tasks of every rank at one position of one domain."""

from __future__ import annotations

from hccl_py.core.errors import HcclError
from hccl_py.core.task import Task


class Slot:
    """One collective: the tasks of every rank at one position of one domain."""

    def __init__(self, key: tuple[str, int], rank_dim: int) -> None:
        self.key = key
        self.rank_dim = rank_dim
        self.tasks: dict[int, Task] = {}
        self.committed: dict[int, int] = {}
        #: (domain rank, round) -> the rank's clock at that Commit (the window race check)
        self.clocks: dict[tuple[int, int], tuple[int, ...] | None] = {}
        self.done = 0
        self.running = False
        self.error: HcclError | None = None

    @property
    def domain(self) -> str:
        """Name of the slot's domain."""
        return self.key[0]

    @property
    def seq(self) -> int:
        """Position of the slot in its domain."""
        return self.key[1]

    @property
    def complete(self) -> bool:
        """Every rank of the domain submitted its task."""
        return len(self.tasks) == self.rank_dim

    @property
    def repeat(self) -> int:
        """Rounds of the slot (as the first submitted task says)."""
        return next(iter(self.tasks.values())).repeat

    @property
    def finished(self) -> bool:
        """Every round ran."""
        return self.complete and self.done >= self.repeat

    def sample(self) -> Task:
        """Some rank's task, for descriptions."""
        return next(iter(self.tasks.values()))

    def not_submitted(self) -> list[int]:
        """Domain ranks whose task has not arrived."""
        return [r for r in range(self.rank_dim) if r not in self.tasks]

    def not_committed(self, rounds: int) -> list[int]:
        """Domain ranks that committed fewer than ``rounds`` rounds."""
        return [r for r in range(self.rank_dim) if self.committed.get(r, 0) < rounds]

    @classmethod
    def retired(cls, task: Task) -> Slot:
        """A stand-in for the finished slot of ``task`` that the world forgot."""
        slot = cls((task.domain_name, task.seq), task.rank_dim)
        slot.tasks = dict.fromkeys(range(task.rank_dim), task)
        slot.done = task.repeat
        return slot
