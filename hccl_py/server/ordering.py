"""The server's ordering rules, shared by every backend, and the reports they give.

The AI CPU server reads one message queue per domain, in Prepare order:

- a task starts only after the previous task of its domain finished;
- a task after ``InterHcclGroupSync(srcGroupID, srcHandleID)`` also waits for
  that task of the other domain (:func:`dependency_state`);
- a failed task fails every later task of its domain (:func:`behind`): the
  server never gets past it, and a task whose dependency failed fails with
  that reason (:func:`dependency_failed`).

The emulator tracks every rank's task of a collective, the torch.distributed
server only its own rank's; both keep them in one state machine
(:mod:`.task_queue`), which decides with these functions, so their reports
read the same.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from ..core.errors import HcclError
from ..core.task import PendingDep, Task, resolved
from .agreement import derived


def behind(error: HcclError, seq: int, domain: str) -> HcclError:
    """The report of a later task of a domain whose task #``seq`` failed with ``error``.

    The server reads a domain's queue in order, so it never reaches the tasks
    behind a failed one: they fail with the original reason.
    """
    return derived(
        error,
        f"task #{seq} of domain {domain} failed, so the server never reaches "
        f"the later tasks of the domain: {error.reason}",
    )


def dependency_failed(error: HcclError, seq: int, domain: str) -> HcclError:
    """The report of a task whose InterHcclGroupSync dependency (task #``seq`` of ``domain``) failed."""
    return derived(
        error,
        f"task #{seq} of domain {domain}, which this task waits for "
        f"through InterHcclGroupSync, failed: {error.reason}",
    )


def dependency_state(
    deps: Iterable[Task | PendingDep],
    failure: Callable[[Task], HcclError | None],
    finished: Callable[[Task], bool],
) -> tuple[bool, HcclError | None]:
    """``(all finished, error)`` of InterHcclGroupSync dependencies.

    ``failure(dep)`` is the error the dependency's task ended with (None while
    it has not failed), ``finished(dep)`` whether all its rounds ran. The first
    failed dependency gives the error to fail with; the first unfinished one (or
    one its domain has not prepared yet) makes the answer ``(False, None)``.
    """
    for pending in deps:
        dep = resolved(pending)
        if dep is None:
            return False, None
        error = failure(dep)
        if error is not None:
            return False, dependency_failed(error, dep.seq, dep.domain_name)
        if not finished(dep):
            return False, None
    return True, None


def sync_text(dep: Task | PendingDep) -> str:
    """What a round blocked by InterHcclGroupSync dependency ``dep`` waits for, in a report."""
    task = resolved(dep)
    if task is None:
        return (
            f"blocked by InterHcclGroupSync on handle {dep.handle} of domain {dep.domain_name}, "
            "which that domain's sending core has not prepared"
        )
    return (
        f"blocked by InterHcclGroupSync on task #{task.seq} of domain {task.domain_name} "
        f"(handle {task.handle}, {task.describe()})"
    )
