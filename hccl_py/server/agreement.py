"""Cross-rank agreement of tasks, and the reports each rank is given: shared by every server.

The emulator checks agreement when the last rank's task of a slot arrives; the
torch.distributed server checks the same descriptors exchanged through its
store. Both report with these functions, so a mismatch reads the same on every
backend.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..core.constants import HcclDataType, HcclReduceOp
from ..core.errors import HcclError, HcclMismatchError
from ..core.task import Task


def global_rank(task: Task) -> int:
    """The task's rank in the world (``task.rank`` is its index in the domain)."""
    return task.domain.ranks[task.rank]


def _name(enum: type, value: object, prefix: str) -> str:
    return "-" if value is None else enum(value).name.removeprefix(prefix)


#: (field, how to read it from a task) in the order a mismatch is reported.
_FIELDS: tuple[tuple[str, Callable[[Task], object]], ...] = (
    ("op", lambda t: t.name),
    ("data type", lambda t: _name(HcclDataType, t.dtype, "HCCL_DATA_TYPE_")),
    ("count", lambda t: t.count),
    ("reduce op", lambda t: _name(HcclReduceOp, t.reduce_op, "HCCL_REDUCE_")),
    ("strideCount", lambda t: t.stride),
    ("steps per round", lambda t: t.steps),
    ("repeat", lambda t: t.repeat),
)


def _where(task: Task) -> str:
    """``task #3 of domain world``: which slot a report is about."""
    return f"task #{task.seq} of domain {task.domain_name}"


def _field_mismatch(tasks: list[Task], where: str) -> HcclMismatchError | None:
    """The first field of :data:`_FIELDS` on which the tasks disagree, in report order."""
    first = tasks[0]
    for field, read in _FIELDS:
        want = read(first)
        for t in tasks[1:]:
            if read(t) != want:
                every = "; ".join(f"rank {global_rank(x)}: {x.describe()}" for x in tasks)
                return HcclMismatchError(
                    f"ranks disagree on the {field} of {where} (handle {first.handle}): "
                    f"rank {global_rank(first)} has {want}, rank {global_rank(t)} has {read(t)}. "
                    f"Tasks: {every}",
                    expected=want,
                    actual=read(t),
                )
    return None


def mismatch(tasks: list[Task]) -> HcclMismatchError | None:
    """Why the ranks' tasks of one slot disagree, or None."""
    first = tasks[0]
    place = (first.launch, first.collective_index)  # (the first task's facts: made once)
    for t in tasks[1:]:
        if (t.launch, t.collective_index) != place:
            return HcclMismatchError(
                f"ranks prepared different numbers of tasks: at {_where(first)}, rank {global_rank(first)} "
                f"is at handle {first.handle} ({first.describe()}) of its kernel launch "
                f"#{first.launch} in this domain, rank {global_rank(t)} at handle {t.handle} "
                f"({t.describe()}) of launch #{t.launch}",
                expected=f"launch #{first.launch} handle {first.handle}",
                actual=f"launch #{t.launch} handle {t.handle}",
            )
    signature, differs = first.signature(), False
    for t in tasks[1:]:  # (a loop: a generator costs a call per task it yields)
        if t.signature() != signature:
            differs = True
            break
    error = _field_mismatch(tasks, _where(first)) if differs else None
    if error is not None:
        return error
    if first.spec.pairwise_counts:
        sends = np.array([t.send_counts for t in tasks], dtype=np.int64)
        recvs = np.array([t.recv_counts for t in tasks], dtype=np.int64)
        bad = np.argwhere(sends != recvs.T)
        if len(bad):
            i, j = (int(x) for x in bad[0])
            return HcclMismatchError(
                f"AlltoAllV counts disagree at {_where(first)} (handle {first.handle}): rank "
                f"{global_rank(tasks[i])} sends {sends[i, j]} elements to rank {global_rank(tasks[j])}, "
                f"which expects {recvs[j, i]} from it (sendCounts_{i}[{j}] != recvCounts_{j}[{i}])",
                expected=int(recvs[j, i]),
                actual=int(sends[i, j]),
            )
    return None


def derived(error: HcclError, reason: str) -> HcclError:
    """An error of the same class as ``error`` with a new reason (keeps expected/actual)."""
    return type(error)(reason, expected=error.expected, actual=error.actual)


def count_mismatch(task: Task, finalizer: int, n_tasks: int) -> HcclMismatchError:
    """Domain rank ``finalizer`` finalized after ``n_tasks`` tasks, but ``task`` comes after them."""
    return HcclMismatchError(
        f"ranks prepared different numbers of tasks in kernel launch #{task.launch} of "
        f"domain {task.domain_name}: rank {task.domain.ranks[finalizer]} finalized after "
        f"{n_tasks} task(s), but rank {global_rank(task)} prepared handle {task.handle} "
        f"({task.describe()}, task #{task.seq}), which no partner will ever join",
        expected=f"{n_tasks} task(s)",
        actual=f"at least {task.handle + 1}",
    )


def error_for(error: HcclError, task: Task, round_idx: int) -> HcclError:
    """``error`` as reported to the rank that owns ``task``, naming its handle, op and round."""
    return type(error)(
        error.reason,
        rank=global_rank(task),
        domain=task.domain_name,
        handle=task.handle,
        op=task.label,
        round=round_idx,
        expected=error.expected,
        actual=error.actual,
    )


def wait_head(task: Task, round_idx: int, verb: str = "waits for") -> str:
    """The first half of a wait-for line: who waits for which round of which task."""
    return (
        f"rank {global_rank(task)} {verb} round {round_idx} of handle {task.handle} "
        f"{task.describe()} in domain {task.domain_name} (task #{task.seq})"
        + task.commit_hint(round_idx)
    )
