"""The emulated server: one object shared by every rank of an in-process world.

Tasks with the same position (``seq``) in a domain form a *slot*. When every
rank of the domain has submitted its task the slot is checked for agreement
(op, counts, dtype, reduce op, repeat, stride, AlltoAllV counts pairwise);
round ``r`` runs once every rank committed it and every InterHcclGroupSync
dependency finished. With the eager schedule the committing thread runs it at
once; with the late schedule it runs only when somebody waits or queries.
"""

from __future__ import annotations

import functools

import numpy as np

from hccl_py.blocking import Blocker, Job
from hccl_py.constants import HcclCMDType
from hccl_py.context import Config
from hccl_py.errors import HcclError, HcclMismatchError
from hccl_py.server import Server
from hccl_py.task import Task

from . import executor


class Slot:
    """One collective: the tasks of every rank at one position of one domain."""

    def __init__(self, key: tuple[str, int], rank_dim: int) -> None:
        self.key = key
        self.rank_dim = rank_dim
        self.tasks: dict[int, Task] = {}
        self.committed: dict[int, int] = {}
        self.done = 0
        self.running = False
        self.error: HcclError | None = None

    @property
    def complete(self) -> bool:
        """Every rank of the domain submitted its task."""
        return len(self.tasks) == self.rank_dim

    def not_submitted(self) -> list[int]:
        """Domain ranks whose task has not arrived."""
        return [r for r in range(self.rank_dim) if r not in self.tasks]

    def not_committed(self, rounds: int) -> list[int]:
        """Domain ranks that committed fewer than ``rounds`` rounds."""
        return [r for r in range(self.rank_dim) if self.committed.get(r, 0) < rounds]


def _global(task: Task) -> int:
    return task.domain.ranks[task.rank]


def _mismatch(tasks: list[Task]) -> str | None:
    """Why the ranks' tasks of one slot disagree, or None."""
    sigs = [t.signature() for t in tasks]
    if any(s != sigs[0] for s in sigs):
        lines = "; ".join(f"rank {_global(t)}: {t.describe()}" for t in tasks)
        return f"ranks issued different tasks at the same position: {lines}"
    if tasks[0].op == HcclCMDType.HCCL_CMD_ALLTOALLV:
        sends = np.array([t.send_counts for t in tasks], dtype=np.int64)
        recvs = np.array([t.recv_counts for t in tasks], dtype=np.int64)
        bad = np.argwhere(sends != recvs.T)
        if len(bad):
            i, j = (int(x) for x in bad[0])
            return (
                f"AlltoAllV counts disagree: rank {_global(tasks[i])} sends {sends[i, j]} elements to "
                f"rank {_global(tasks[j])}, which expects {recvs[j, i]} from it "
                f"(sendCounts_{i}[{j}] != recvCounts_{j}[{i}])"
            )
    return None


class EmuWorld(Server):
    """The server of an emulated world; every rank's client sends to this one object."""

    def __init__(self, world_size: int, config: Config) -> None:
        self.world_size = world_size
        self.config = config
        self.blocker = Blocker(config.timeout)
        self.blocker.take_work = self._take_work
        self.blocker.has_work = self._has_work
        self.slots: dict[tuple[str, int], Slot] = {}
        self.pending: dict[Slot, None] = {}

    # ----------------------------------------------------------- slot state
    def _slot(self, task: Task) -> Slot:
        key = (task.domain_name, task.seq)
        slot = self.slots.get(key)
        if slot is None:
            slot = self.slots[key] = Slot(key, task.rank_dim)
        return slot

    def _dep_slots(self, slot: Slot) -> list[tuple[Slot, int]]:
        return [(self._slot(dep), dep.repeat) for task in slot.tasks.values() for dep in task.deps]

    def _ready(self, slot: Slot) -> bool:
        if (
            slot.running
            or slot.error is not None
            or not slot.complete
            or slot.done >= slot.tasks[0].repeat
        ):
            return False
        if slot.not_committed(slot.done + 1):
            return False
        for dep, repeat in self._dep_slots(slot):
            if dep.error is not None:
                slot.error = HcclError(
                    f"a task this one depends on (InterHcclGroupSync) failed: {dep.error}"
                )
                return False
            if dep.done < repeat:
                return False
        return True

    def _has_work(self) -> bool:
        return any(self._ready(s) for s in self.pending)

    def _take_work(self) -> Job | None:
        for slot in self.pending:
            if self._ready(slot):
                slot.running = True
                return functools.partial(self._execute, slot)
        return None

    def _execute(self, slot: Slot) -> None:
        round_idx = slot.done
        tasks = [slot.tasks[r] for r in range(slot.rank_dim)]
        error = None
        try:
            executor.run_round(tasks, round_idx)
        except Exception as exc:  # noqa: BLE001 - reported to every waiting rank
            error = HcclError(
                f"round {round_idx} of {tasks[0].describe()} failed: {type(exc).__name__}: {exc}"
            )
        with self.blocker.cond:
            slot.running = False
            if error is not None:
                slot.error = error
            else:
                slot.done += 1
            if slot.error is not None or slot.done >= tasks[0].repeat:
                self.pending.pop(slot, None)
            self.blocker.cond.notify_all()

    # -------------------------------------------------------- server protocol
    def submit(self, task: Task) -> None:
        with self.blocker.cond:
            slot = self._slot(task)
            slot.tasks[task.rank] = task
            if slot.complete:
                reason = _mismatch([slot.tasks[r] for r in range(slot.rank_dim)])
                if reason:
                    slot.error = HcclMismatchError(reason)
            self.blocker.cond.notify_all()

    def commit(self, task: Task, round_idx: int) -> None:
        with self.blocker.cond:
            slot = self._slot(task)
            slot.committed[task.rank] = round_idx + 1
            if slot.done < task.repeat and slot.error is None:
                self.pending[slot] = None
            if self.config.poison:
                executor.poison(task, round_idx)
            self.blocker.cond.notify_all()
        if self.config.schedule == "eager":
            self.blocker.run_ready()

    def wait(self, task: Task, round_idx: int) -> None:
        slot = self._slot(task)
        self.blocker.wait_for(
            lambda: slot.done > round_idx or slot.error is not None,
            lambda: self._describe_wait(slot, task, round_idx),
        )
        if slot.error is not None and slot.done <= round_idx:
            raise self._error_for(slot.error, task, round_idx)

    def finished(self, task: Task) -> int:
        if self.config.schedule == "late":
            self.blocker.run_ready()
        with self.blocker.cond:
            slot = self._slot(task)
            if slot.error is not None:
                raise self._error_for(slot.error, task, slot.done)
            return slot.done

    # -------------------------------------------------------------- reports
    @staticmethod
    def _error_for(error: HcclError, task: Task, round_idx: int) -> HcclError:
        return type(error)(
            error.reason,
            rank=_global(task),
            domain=task.domain_name,
            handle=task.handle,
            op=task.name,
            round=round_idx,
        )

    def _describe_wait(self, slot: Slot, task: Task, round_idx: int) -> str:
        head = (
            f"rank {_global(task)} waits for round {round_idx} of handle {task.handle} "
            f"{task.describe()} in domain {task.domain_name} (task #{task.seq})"
        )
        ranks = task.domain.ranks
        if not slot.complete:
            who = [ranks[r] for r in slot.not_submitted()]
            return f"{head}: ranks {who} have not prepared this task"
        lagging = [ranks[r] for r in slot.not_committed(round_idx + 1)]
        if lagging:
            return f"{head}: ranks {lagging} have not committed round {round_idx}"
        deps = [dep for dep, repeat in self._dep_slots(slot) if dep.done < repeat]
        if deps:
            return f"{head}: blocked by InterHcclGroupSync on task #{deps[0].key[1]} of domain {deps[0].key[0]}"
        return f"{head}: runnable"
