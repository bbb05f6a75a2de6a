"""Which send and receive ranges of one task may share bytes on one rank.

The server reads a round's send blocks and writes its receive blocks with no
order between them, so overlapping ranges are undefined behaviour, except for
the in-place forms that collective libraries support, where a rank's own send
block *is* the receive block its data belongs in (same round, same start,
same size); send and receive may be one tensor or two views of one storage.
The op table names that pair for each op (``OpSpec.in_place``):

- AllReduce: ``sendBuf == recvBuf`` (each round in place);
- AllGather: ``sendBuf == recvBuf + rank * stride * size`` (the rank's own block);
- ReduceScatter: ``recvBuf == sendBuf + rank * stride * size``;
- AlltoAll / AlltoAllV: the block a rank sends to itself lies where it receives it.

:func:`first_shared` is the one overlap predicate; the client's check
(:func:`send_recv_clash`), the poison option (:func:`in_place`) and the
process-group executor (does a round's source need a private copy?) all ask it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core import layout
from ..core.gm import shift_between
from ..core.task import Task


@dataclass(frozen=True)
class Clash:
    """A send block and a receive block of one task that share bytes."""

    send_round: int
    send_block: int
    send_range: tuple[int, int]
    recv_round: int
    recv_block: int
    recv_range: tuple[int, int]


def first_shared(task: Task, rounds: np.ndarray | int, exempt_in_place: bool) -> Clash | None:
    """The first send block of ``rounds`` that shares bytes with a receive block of ``rounds``.

    With ``exempt_in_place``, the op's in-place send block is skipped in every
    round where it coincides exactly with its receive block. Vectorised: one
    sort of the receive blocks, one binary search per send block.
    """
    shift = shift_between(task.send.alloc, task.recv.alloc)
    if shift is None:
        return None
    rounds = np.atleast_1d(np.asarray(rounds))
    s_start, s_size = layout.byte_layout(task, "send", rounds)
    s_start = s_start + shift  # send positions as offsets into the receive allocation
    r_start, r_size = layout.byte_layout(task, "recv", rounds)
    keep = s_size > 0
    si, ri = task.spec.in_place(task.rank)
    if exempt_in_place and si < s_start.shape[1] and ri < r_start.shape[1]:
        coincide = (s_start[:, si] == r_start[:, ri]) & (s_size[:, si] == r_size[:, ri])
        keep[:, si] &= ~coincide
    recv_starts = r_start.reshape(-1)
    recv_sizes = np.ascontiguousarray(r_size).reshape(-1)
    nz = np.flatnonzero(recv_sizes > 0)
    if not keep.any() or len(nz) == 0:
        return None
    order = nz[np.argsort(recv_starts[nz], kind="stable")]
    starts = recv_starts[order]
    running_end = np.maximum.accumulate(starts + recv_sizes[order])
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
    j = int(candidates[np.argmax(recv_starts[candidates] + recv_sizes[candidates] > lo)])
    blocks = s_start.shape[1]
    send_round, send_block = divmod(int(sends[k]), blocks)
    recv_round, recv_block = divmod(j, r_start.shape[1])
    r_lo = int(recv_starts[j])
    return Clash(
        int(rounds[send_round]),
        send_block,
        (lo, hi),
        int(rounds[recv_round]),
        recv_block,
        (r_lo, r_lo + int(recv_sizes[j])),
    )


def send_recv_clash(task: Task) -> str | None:
    """Why the task's send and receive ranges overlap in a way no in-place form allows, or None."""
    clash = first_shared(task, np.arange(task.repeat), exempt_in_place=True)
    if clash is None:
        return None
    (lo, hi), (r_lo, r_hi) = clash.send_range, clash.recv_range
    return (
        f"send range of round {clash.send_round} block {clash.send_block} (bytes [{lo}, {hi})) "
        f"overlaps receive range of round {clash.recv_round} block {clash.recv_block} (bytes "
        f"[{r_lo}, {r_hi})) of {task.recv.alloc.name}: the server may overwrite "
        "data before reading it. Only exact in-place use is allowed (see docs/sanitizer.md)"
    )


def in_place(task: Task, round_idx: int) -> bool:
    """Whether one round's receive blocks share any bytes with its send blocks."""
    return first_shared(task, round_idx, exempt_in_place=False) is not None
