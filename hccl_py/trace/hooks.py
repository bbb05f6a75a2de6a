"""Where the client and the servers report to the recorder (each hook: one lookup when off)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..core.task import Task
from ..kernel.context import current_core_context, current_rank_context
from .recorder import (
    AIC_TID,
    AIV_TID,
    Recorder,
    now_us,
    of_rank,
    recording,
    round_key,
)


def recorder() -> Recorder | None:
    """The calling rank's recorder, or None when this run records nothing."""
    if not recording():
        return None
    ctx = current_rank_context(required=False)
    return None if ctx is None else of_rank(ctx.rank)


def core_tid() -> int:
    """The calling core's track id (AIC cores first, then AIV cores)."""
    core = current_core_context()
    if core is None:
        return AIV_TID
    return (AIC_TID if core.kind.name == "AIC" else AIV_TID) + core.block_idx


def _task_of(client: Any, handle: Any, info: Any) -> Task | None:
    """The task behind ``handle`` (prepared by this core or by the launch's sending core)."""
    state = getattr(client, "state", None)
    return info.task or (state.tasks.get(int(handle)) if state is not None else None)


def traced_call(
    rec: Recorder, client: Any, name: str, head: str, args: tuple, run: Callable[[], Any]
) -> Any:
    """Run one client call, recording it (and for Commit / Wait, the flow to or from its round)."""
    tid = core_tid()
    info = client._handle(args[0]) if name in ("Commit", "Wait") and args else None
    if info is not None:  # the server's round: a fine-grained handle's are its steps
        round_idx = info.rounds_committed if name == "Commit" else info.rounds_waited
    start = now_us()
    try:
        result = run()
    finally:
        end = now_us()
        # After the call: a core that is not the sender may Wait before the sender prepared.
        task = None if info is None else _task_of(client, args[0], info)
        call_args: dict[str, Any] = {"call": head}
        if task is not None:
            call_args.update(domain=task.domain_name, task=task.seq, round=round_idx)
        rec.call(_display(name, head), tid, start, end, call_args)
    if name == "Commit" and task is not None and info.task is not None:
        # Only the sending core's Commit reaches the server: one flow per round it committed
        # (none for an extra Commit, several for a fine-grained step).
        for r in range(round_idx, info.rounds_committed):
            rec.flow(f"commit/{rec.rank}/{round_key(task, r)}", tid, start, start=True)
    if name == "Wait" and task is not None and result == 0 and not client._waits_at_once():
        rec.wait_flow(round_key(task, info.rounds_waited - 1), tid, end)  # its last round
    if name == "_prepare" and isinstance(result, int) and result >= 0:
        info = client._handle(result)
        if info is not None and info.task is not None:  # the core that sent the task
            rec.task(info.task)
    return result


def _display(name: str, head: str) -> str:
    """``AllGather[True]`` for a Prepare, the method name otherwise."""
    return head.split("(", 1)[0] if name == "_prepare" else name


def server_round(task: Task, round_idx: int, start_us: float) -> None:
    """The server finished round ``round_idx`` of ``task``, which it started at ``start_us``."""
    if not recording():
        return
    rec = of_rank(task.domain.ranks[task.rank] if hasattr(task.domain, "ranks") else task.rank)
    if rec is not None:
        rec.round(task, round_idx, start_us, now_us())
