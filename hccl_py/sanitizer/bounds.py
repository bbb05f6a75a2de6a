"""Client-side checks of a complete task before it is sent: bounds and overlaps.

Every byte a task will read or write must lie inside the allocation its
address points into, and receive ranges must not overlap each other or the
send ranges except in the in-place forms (:mod:`.overlap`). A finding raises
:class:`~hccl_py.core.errors.InvalidCall`; the client reports it. (Ownership
and the platform's rank and size limits are checked on every core, before the
task exists: :func:`hccl_py.client.convert.task_fields`.)
"""

from __future__ import annotations

import numpy as np

from ..core import layout, report
from ..core.errors import InvalidCall
from ..core.task import Task
from .overlap import send_recv_clash


def check_task(task: Task, me: int, overlap: str) -> None:
    """Raise :class:`InvalidCall` if ``task`` (prepared by global rank ``me``) may not run.

    ``overlap``: the run's overlap policy ("error", "warn", "ignore").
    Only the sending core builds the task, so only it makes these checks; both
    findings raise in every run (``bounds``, and ``recv-overlap`` under
    overlap="error"), so no core returns -1 alone. The refusals that a lenient
    run returns as -1 (rank and size limits, another rank's memory) are decided
    on every core from the arguments (:func:`hccl_py.client.convert.task_fields`).
    """
    for side, addr in (("send", task.send), ("recv", task.recv)):
        blocks = layout.all_blocks(task, side)
        extent = layout.span(blocks)
        if extent is None:
            continue
        lo, hi = extent
        if lo < 0 or hi > addr.alloc.nbytes:
            bad = np.flatnonzero(
                (blocks.sizes > 0)
                & ((blocks.starts < 0) | (blocks.starts + blocks.sizes > addr.alloc.nbytes))
            )[0]
            rnd, peer = layout.block_round_peer(task, side, int(bad))
            start = int(blocks.starts[bad])
            raise InvalidCall(
                "bounds",
                f"{side} range of round {rnd}, block {peer} is bytes [{start}, "
                f"{start + int(blocks.sizes[bad])}) of {addr.alloc.name}, outside its "
                f"{addr.alloc.nbytes} bytes",
                round=rnd,
                expected=f"[0, {addr.alloc.nbytes})",
                actual=f"[{lo}, {hi})",
            )
    _check_overlap(task, me, overlap)


def _check_overlap(task: Task, me: int, policy: str) -> None:
    if policy == "ignore":
        return
    clash = layout.first_overlap(layout.all_blocks(task, "recv"))
    rb = None
    if clash is not None:
        (ra, ba), (rb, bb) = (layout.block_round_peer(task, "recv", i) for i in clash)
        reason = (
            f"receive ranges overlap: round {ra} block {ba} and round {rb} block {bb} write the "
            f"same bytes of {task.recv.alloc.name}{_overlap_advice(task, ba, bb)}"
        )
    else:
        reason = send_recv_clash(task)
        if reason is None:
            return
    if policy == "error":
        raise InvalidCall("recv-overlap", reason, round=rb)
    report.warn("overlap", f"{task.name}: {reason}", rank=me, round=rb)


def _overlap_advice(task: Task, a: int, b: int) -> str:
    """What makes the receive blocks of peers ``a`` and ``b`` disjoint, in the op's own arguments."""
    if task.spec.strided:
        return "; with repeat > 1 use strideCount >= repeat * count"
    if not task.spec.pairwise_counts:
        return ""
    spans = ", ".join(
        f"peer {p}: [{task.rdispls[p]}, "
        f"{task.rdispls[p] + task.repeat // task.steps * task.recv_counts[p]})"
        for p in (a, b)
    )
    return (
        "; each peer's rounds need their own elements [rdispls[p], rdispls[p] + repeat * "
        f"recvCounts[p]) (here {spans}): space rdispls by at least repeat * recvCounts"
    )
