"""A task's first round carried by its descriptor exchange, when it is small.

The task check (:mod:`.descriptors`) all-gathers a fixed-width row per rank
before a task's first round. When round 0's send bytes fit in that row beside
the descriptor, each rank sends them there too, and once the descriptors
agree, every rank computes round 0 from the gathered rows: one process-group
call for the task's first round instead of two. The width is the same on every
rank whatever it sends, so a mismatched rank cannot make gloo abort a process
(see docs/backends.md), and whether round 0 rides along is decided from the
rows themselves (every rank sent its bytes), so every rank decides alike.

A payload is the descriptor (JSON text, which never holds a NUL byte), then,
when round 0 rides along, a NUL byte and round 0's bytes. Whoever reads a
peer's payload as JSON (a framework collective's argument exchange, met where
a peer prepared a kernel task) reads up to the NUL.

What the rows carry per op, in domain order: AllGather and AllReduce the one
send block; ReduceScatter, AlltoAll and AlltoAllV every per-peer send block,
so that each rank takes its own block out of each peer's row. Reductions ride
along only when they are exact (a rank-order reduction of the rows, as the
exact round does: bit-identical); native ones keep the process group's call.
"""

from __future__ import annotations

import torch

from ...core import layout
from ...core.constants import HcclCMDType, HcclReduceOp
from ...core.errors import HcclError
from ...core.task import Task
from ...server.reduce import reduce_ranks
from . import rounds
from .descriptors import decode_all

_C = HcclCMDType
#: Ops whose rows hold one block that every peer takes whole.
_WHOLE = (_C.HCCL_CMD_ALLGATHER, _C.HCCL_CMD_ALLREDUCE)
_REDUCING = (_C.HCCL_CMD_ALLREDUCE, _C.HCCL_CMD_REDUCE_SCATTER)


def payload(task: Task, descriptor: bytes, dom: rounds.Domain) -> bytes:
    """What this rank sends in ``task``'s descriptor exchange: the descriptor, with round 0's
    send bytes after a NUL byte when they fit in the exchange's first row."""
    data = _round0_bytes(task, dom, rounds.ROW_BYTES - len(descriptor) - 1)
    return descriptor if data is None else descriptor + b"\0" + data


def split(raw: bytes) -> tuple[bytes | None, bytes]:
    """``(round 0's bytes or None, descriptor)`` out of a peer's payload."""
    descriptor, nul, data = raw.partition(b"\0")
    return (data if nul else None), descriptor


def received(
    task: Task, mine: bytes, payloads: list[bytes]
) -> tuple[list[Task], list[bytes] | None]:
    """Every domain rank's task, as its descriptor describes it (``mine`` is this rank's), and
    every rank's round-0 bytes (None unless every rank sent them)."""
    parts = [split(raw) for raw in payloads]
    tasks = decode_all(task, mine, [descriptor for _, descriptor in parts])
    rows = [data for data, _ in parts]
    return tasks, (None if any(row is None for row in rows) else rows)  # type: ignore[misc]


def _round0_bytes(task: Task, dom: rounds.Domain, room: int) -> bytes | None:
    """Round 0's send bytes in domain order, or None when they cannot ride along."""
    if task.op not in rounds.ROUNDS or (task.op in _REDUCING and not dom.reduction.exact):
        return None
    blocks = layout.round_blocks(task, "send", 0)
    if task.op in _WHOLE:
        blocks = layout.Blocks(blocks.starts[:1], blocks.sizes[:1])
    if int(blocks.sizes.sum()) > room:
        return None
    return rounds.gather_bytes(task.memory("send"), blocks).cpu().numpy().tobytes()


def run(task: Task, tasks: list[Task], rows: list[bytes], dom: rounds.Domain) -> None:
    """Round 0 of this rank's ``task`` from every domain rank's round-0 bytes (``rows``).

    ``tasks`` are the domain ranks' tasks as their descriptors describe them
    (they agree with ``task``: the comparison passed).
    """
    me = task.rank
    pieces = []
    for peer, row in zip(tasks, rows, strict=True):
        if task.op in _WHOLE:
            pieces.append(row)
            continue
        sizes = layout.round_blocks(peer, "send", 0).sizes
        start = int(sizes[:me].sum())
        pieces.append(row[start : start + int(sizes[me])])
    joined = bytearray(b"".join(pieces))
    flat = (
        torch.frombuffer(joined, dtype=torch.uint8) if joined else torch.empty(0, dtype=torch.uint8)
    )
    data = task.memory("recv")
    if task.op not in _REDUCING:
        recv = layout.round_blocks(task, "recv", 0)
        _same_size(task, flat, int(recv.sizes.sum()))
        rounds.scatter_bytes(data, recv, flat.to(data.device), me if task.skip_local else None)
        return
    if task.count == 0:
        return
    _same_size(task, flat, task.rank_dim * task.count * task.elem_size)
    stacked = task.typed(flat).view(task.rank_dim, task.count)
    rounds.write_result(task, 0, reduce_ranks(stacked, HcclReduceOp(task.reduce_op)))


def _same_size(task: Task, flat: torch.Tensor, expected: int) -> None:
    if flat.numel() != expected:
        raise HcclError(
            f"round 0 of {task.describe()} (handle {task.handle}) received {flat.numel()} bytes "
            f"in the descriptor exchange where its receive blocks hold {expected}",
            rank=task.domain.ranks[task.rank],
            domain=task.domain_name,
            handle=task.handle,
            op=task.spec.name,
            round=0,
        )
