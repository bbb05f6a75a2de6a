"""Which send and receive ranges of one task may share bytes on one rank.

The server reads a round's send blocks and writes its receive blocks with no
order between them, so overlapping ranges are undefined behaviour, except for
the in-place forms that collective libraries support, where a rank's own send
block *is* the receive block its data belongs in (same round, same start,
same size):

- AllReduce: ``sendBuf == recvBuf`` (each round in place);
- AllGather: ``sendBuf == recvBuf + rank * stride * size`` (the rank's own block);
- ReduceScatter: ``recvBuf == sendBuf + rank * stride * size``;
- AlltoAll / AlltoAllV: the block a rank sends to itself lies where it receives it.

Everything else (a receive block covering part of a send block, or one round
writing what a later round reads) is reported.
"""

from __future__ import annotations

import numpy as np

from . import layout
from .constants import HcclCMDType
from .task import Task

_C = HcclCMDType


def _own_blocks(task: Task) -> tuple[int, int]:
    """(send block, receive block) index that may coincide in place on this rank."""
    me = task.rank
    return {
        _C.HCCL_CMD_ALLREDUCE: (0, 0),
        _C.HCCL_CMD_ALLGATHER: (0, me),
        _C.HCCL_CMD_REDUCE_SCATTER: (me, 0),
    }.get(task.op, (me, me))


def send_recv_clash(task: Task) -> str | None:
    """Why the task's send and receive ranges overlap in a way no in-place form allows, or None."""
    if task.send.alloc is None or task.send.alloc is not task.recv.alloc:
        return None
    rounds = np.arange(task.repeat)
    s_start, s_size = layout.byte_layout(task, "send", rounds)
    r_start, r_size = layout.byte_layout(task, "recv", rounds)
    si, ri = _own_blocks(task)
    keep = s_size > 0
    if si < s_start.shape[1] and ri < r_start.shape[1]:
        in_place = (s_start[:, si] == r_start[:, ri]) & (s_size[:, si] == r_size[:, ri])
        keep[:, si] &= ~in_place
    recv = layout.Blocks(r_start.reshape(-1), np.ascontiguousarray(r_size).reshape(-1))
    nz = np.flatnonzero(recv.sizes > 0)
    if not keep.any() or len(nz) == 0:
        return None
    order = nz[np.argsort(recv.starts[nz], kind="stable")]
    starts = recv.starts[order]
    running_end = np.maximum.accumulate(starts + recv.sizes[order])
    sends = np.flatnonzero(keep.reshape(-1))
    a = s_start.reshape(-1)[sends]
    b = a + s_size.reshape(-1)[sends]
    below = np.searchsorted(starts, b, side="left")
    hit = (below > 0) & (running_end[np.maximum(below - 1, 0)] > a)
    if not hit.any():
        return None
    k = int(np.argmax(hit))
    lo, hi = int(a[k]), int(b[k])
    candidates = order[: below[k]]
    j = int(candidates[np.argmax(recv.starts[candidates] + recv.sizes[candidates] > lo)])
    send_round, send_block = layout.block_round_peer(task, "send", int(sends[k]))
    recv_round, recv_block = layout.block_round_peer(task, "recv", j)
    r_lo = int(recv.starts[j])
    return (
        f"send range of round {send_round} block {send_block} (bytes [{lo}, {hi})) overlaps "
        f"receive range of round {recv_round} block {recv_block} (bytes [{r_lo}, "
        f"{r_lo + int(recv.sizes[j])})) of {task.recv.alloc.name}: the server may overwrite "
        "data before reading it. Only exact in-place use is allowed (see docs/sanitizer.md)"
    )
