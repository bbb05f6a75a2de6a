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

The rows are :data:`~.gathered.ROW_BYTES` wide, except after an AllGather, or an
exact AllReduce of at most :data:`~hccl_py.server.protocol.WIDE_REDUCE_BYTES`,
whose round 0 did not fit: the domain's next exchange is as wide as that round 0
and its descriptor need (:func:`next_width`, at most
:data:`~.gathered.MAX_PAYLOAD_BYTES`), so that the same task launched again rides
along. An AllGather's rows are its own data, and an exact AllReduce of that size
gathers every rank's input anyway, so a wider row sends nothing their rounds do
not; other ops keep the narrow room. Every rank computes the width from what the
exchange gave every rank and from the domain's reduction mode (``HCCL_PY_REDUCE``,
the same on every rank: ranks that differ in it call different collectives for
an AllReduce anyway), so the widths stay the same on every rank, whichever
collective (a kernel task's check, a framework collective's argument exchange)
the next exchange belongs to.

After a check of an op whose round 0 sends each peer a block of its own (AlltoAll,
AlltoAllV, an exact ReduceScatter), every rank predicts alike the domain's next
exchange as one all-to-all (:mod:`.predicted`) with blocks as large as that check's
longest descriptor and largest block: each rank then sends each peer its descriptor
and round 0's block for that peer, so the same launch again is one process-group call
although its round 0 is larger than a row.
"""

from __future__ import annotations

from functools import partial

import numpy as np
import torch

from ...core import layout
from ...core.constants import HcclCMDType, HcclReduceOp
from ...core.errors import HcclError
from ...core.task import Task
from ...server.protocol import (
    WIDE_REDUCE_BYTES,
    Outgoing,
    Payload,
    Pieces,
    Spliced,
    joined,
    record_length,
)
from ...server.reduce import reduce_ranks
from . import gathered, predicted, rounds
from .buffers import Buffers
from .descriptors import decode_all

_C = HcclCMDType
#: Ops whose rows hold one block that every peer takes whole.
_WHOLE = (_C.HCCL_CMD_ALLGATHER, _C.HCCL_CMD_ALLREDUCE)
_REDUCING = (_C.HCCL_CMD_ALLREDUCE, _C.HCCL_CMD_REDUCE_SCATTER)
#: Bytes a next descriptor may grow by (its addresses and counts printed longer) and still fit.
DESCRIPTOR_SLACK = 256


def _widens(task: Task, dom: rounds.Domain) -> int:
    """The largest round 0 for which ``task``'s op uses, and asks for, rows of its own width:
    an AllGather's (its rows are its own data) and an exact AllReduce's (it gathers every
    rank's input up to :data:`~hccl_py.server.protocol.WIDE_REDUCE_BYTES`); 0 for others."""
    if task.op == _C.HCCL_CMD_ALLGATHER:
        return gathered.MAX_PAYLOAD_BYTES
    if task.op == _C.HCCL_CMD_ALLREDUCE and dom.reduction.exact:
        return WIDE_REDUCE_BYTES
    return 0


def payload(task: Task, descriptor: bytes, dom: rounds.Domain, width: int) -> Outgoing:
    """What this rank sends in ``task``'s descriptor exchange of rows ``width`` bytes wide: the
    descriptor, with round 0's send bytes after a NUL byte when they fit in its row (in the
    whole row for the ops of :func:`_widens`, any other op's in :data:`~.gathered.ROW_BYTES`);
    the bytes are read where the exchange writes its row, not copied before."""
    room = width if _widens(task, dom) else gathered.ROW_BYTES
    data = _round0_bytes(task, dom, room - len(descriptor) - 1)
    return descriptor if data is None else Spliced(descriptor, data)


def next_width(tasks: list[Task], descriptor: int, dom: rounds.Domain) -> int:
    """The row width of the domain's next exchange, after one whose descriptors agreed (the
    longest ``descriptor`` bytes long): wide enough for the round 0 of an op of
    :func:`_widens` beside its descriptor, else :data:`~.gathered.ROW_BYTES`.

    Computed from what every rank received alike, so it is the same on every rank. An op of
    :func:`_widens` sends one block of ``count`` elements, which the descriptors agreed on:
    the first rank's block is every rank's; other ops ask every rank's.
    """
    room = _widens(tasks[0], dom)
    sized = tasks[:1] if room else tasks
    block = max([int(layout.round_blocks(t, "send", 0).sizes[0]) for t in sized])  # no generator
    if block > room:
        return gathered.ROW_BYTES
    return width_for(descriptor + 1 + DESCRIPTOR_SLACK + block)


def width_for(need: int) -> int:
    """The width of rows that carry ``need`` bytes: ``need`` when it is more than
    :data:`~.gathered.ROW_BYTES` and at most :data:`~.gathered.MAX_PAYLOAD_BYTES`, else
    :data:`~.gathered.ROW_BYTES` (more would be more control bytes than a row may hold)."""
    return need if gathered.ROW_BYTES < need <= gathered.MAX_PAYLOAD_BYTES else gathered.ROW_BYTES


class Rows:
    """How one domain's next exchange travels, the same on every rank: all-gather rows of a
    width (:func:`next_width`), or a predicted all-to-all (:mod:`.predicted`)."""

    def __init__(self) -> None:
        self.width = gathered.ROW_BYTES
        self.block = 0  # > 0: the next exchange is one all-to-all of such blocks (.predicted)
        self.carried = 0  # the block of the last exchange, when it was such an all-to-all
        self.buffers = Buffers()  # the exchanges' buffers on the CPU, reused from call to call

    def exchange(
        self,
        dom: rounds.Domain,
        payload: Outgoing,
        pieces: Pieces | None,
        device: torch.device,
        wait: rounds.Waiter,
    ) -> tuple[list[Payload], bool]:
        """Every domain rank's ``payload``, and whether every rank's pieces for this rank came
        after it (a NUL byte between): in the predicted all-to-all (:mod:`.predicted`) when
        :meth:`predict` asked for one and every rank's content fits, else in rows of the
        current width (:func:`.gathered.all_gather_bytes`; pieces stay behind). The next
        exchange is a narrow all-gather unless :meth:`agreed`, :meth:`widen` or
        :meth:`predict` says otherwise."""
        width, self.width = self.width, gathered.ROW_BYTES
        block, self.block, self.carried = self.block, 0, 0
        buffers = self.buffers if device.type == "cpu" else None  # a device's: see .buffers
        if block:
            mine = None if pieces is None else pieces()
            got = predicted.scatter_bytes(dom, payload, mine, block, device, wait, buffers)
            if got is not None:
                self.carried = block
                return got
        return gathered.all_gather_bytes(dom, payload, device, wait, width, buffers), False

    def agreed(self, tasks: list[Task], descriptor: int, dom: rounds.Domain, carry: bool) -> None:
        """A task check's descriptors agreed (the longest ``descriptor`` bytes long): the next
        exchange's width follows its task, and with ``carry``, after an op whose round 0 sends
        each peer a piece of its own (:func:`pieces`), the next exchange is predicted as the
        all-to-all that carries the same task again."""
        self.width = next_width(tasks, descriptor, dom)
        if carry and _scatters(tasks[0], dom):
            piece = max(int(_piece_blocks(t).sizes.max()) for t in tasks)
            self.predict(descriptor + 1 + piece)

    def widen(self, need: int) -> None:
        """The ranks asked alike for room for ``need`` bytes in the next exchange (a framework
        op after its argument exchange, :meth:`~hccl_py.server.protocol.Meetings.widen`)."""
        self.width = width_for(need + DESCRIPTOR_SLACK)

    def predict(self, need: int) -> None:
        """The ranks asked alike for the next exchange as one all-to-all whose blocks hold
        ``need`` bytes (a framework all-to-all after its argument exchange,
        :meth:`~hccl_py.server.protocol.Meetings.predict`). After such an all-to-all whose
        blocks were at most four times as large, the blocks stay that large: pieces that
        vary from call to call (an MoE's routing) then fit without a wasted call."""
        need = need + DESCRIPTOR_SLACK
        self.block = predicted.block_for(self.carried if need <= self.carried <= 4 * need else need)


def exchange(
    task: Task,
    descriptor: bytes,
    rows: Rows,
    dom: rounds.Domain,
    carry: bool,
    device: torch.device,
    wait: rounds.Waiter,
) -> tuple[list[Payload], bool]:
    """``task``'s descriptor exchange (:meth:`Rows.exchange`): every rank's payload, and whether
    every rank's round-0 piece for this rank came (else a row may hold a rank's whole round 0,
    :func:`payload`). With ``carry`` off, the descriptors alone."""
    if not carry:
        return rows.exchange(dom, descriptor, None, device, wait)
    offered = partial(pieces, task, dom) if _scatters(task, dom) else None
    return rows.exchange(dom, payload(task, descriptor, dom, rows.width), offered, device, wait)


def _scatters(task: Task, dom: rounds.Domain) -> bool:
    """Whether round 0 of ``task``'s op sends each peer a piece of its own that may ride in a
    predicted all-to-all: every op but those of :data:`_WHOLE` (AlltoAll, AlltoAllV, and
    ReduceScatter with exact reductions), and an exact AllReduce that splits
    (:func:`_splits`)."""
    if task.op == _C.HCCL_CMD_ALLREDUCE:
        return _splits(task, dom)
    return (
        task.op in rounds.ROUNDS
        and task.op not in _WHOLE
        and (task.op not in _REDUCING or dom.reduction.exact)
    )


def _splits(task: Task, dom: rounds.Domain) -> bool:
    """Whether ``task`` is an exact AllReduce whose round 0 reduce-scatters, then all-gathers
    (:func:`.rounds.split_chunks`), and does not widen the rows instead (:func:`_widens`)."""
    block = int(layout.round_blocks(task, "send", 0).sizes[0])
    return task.op == _C.HCCL_CMD_ALLREDUCE and dom.reduction.exact and block > WIDE_REDUCE_BYTES


def _piece_blocks(task: Task) -> layout.Blocks:
    """Where in round 0's send bytes each domain rank's piece lies (:func:`pieces`)."""
    if task.op == _C.HCCL_CMD_ALLREDUCE:
        return rounds.split_chunks(task)
    return layout.round_blocks(task, "send", 0)


def pieces(task: Task, dom: rounds.Domain) -> list[memoryview] | None:
    """Round 0's send bytes for each domain rank, in domain order (None: not
    :func:`_scatters`): its block for that rank, or an AllReduce's chunk that rank reduces."""
    if not _scatters(task, dom):
        return None
    blocks = layout.round_blocks(task, "send", 0)
    if task.op == _C.HCCL_CMD_ALLREDUCE:
        blocks = layout.Blocks(blocks.starts[:1], blocks.sizes[:1])
    view = memoryview(rounds.gather_bytes(task.memory("send"), blocks).cpu().numpy())
    ends = [0, *np.cumsum(_piece_blocks(task).sizes).tolist()]
    return [view[a:b] for a, b in zip(ends[:-1], ends[1:], strict=True)]


def received(
    task: Task, mine: bytes, payloads: list[Payload]
) -> tuple[list[Task] | None, list[memoryview] | None, int]:
    """Every domain rank's task, as its descriptor describes it (``mine`` is this rank's),
    every rank's round-0 bytes (the views after the descriptor's NUL byte; None unless every
    rank sent them) and the longest descriptor's length.

    The tasks are None where every rank sent ``mine`` but for the ``rank`` field, for an op
    whose agreement needs no per-peer counts (not AlltoAllV): the ranks agree, and their
    tasks are ``task`` at their ranks, whose blocks have ``task``'s sizes (a regular layout).
    """
    if not task.spec.pairwise_counts:
        alike = _alike(task, mine, payloads)
        if alike is not None:
            return None, *alike
    ends = [record_length(raw) for raw in payloads]
    pairs = list(zip(payloads, ends, strict=True))
    tasks = decode_all(task, mine, [bytes(raw[:end]) for raw, end in pairs])
    rows = [memoryview(raw)[end + 1 :] for raw, end in pairs if end < len(raw)]
    return tasks, (rows if len(rows) == len(payloads) else None), max(ends)


def _alike(
    task: Task, mine: bytes, payloads: list[Payload]
) -> tuple[list[memoryview] | None, int] | None:
    """:func:`received`'s rows and longest descriptor where each rank's payload starts with
    ``mine`` as that rank writes it (:func:`.descriptors.decode_all`), then ends or holds a
    NUL byte; else None (compared as bytes: nothing parsed, no task made)."""
    own, rows, longest, every = b'"rank":%d,' % task.rank, [], 0, True
    for i, raw in enumerate(payloads):
        expected = mine if i == task.rank else mine.replace(own, b'"rank":%d,' % i, 1)
        end = len(expected)
        after = raw[end : end + 1]  # (no len() calls: a loop per rank)
        if raw[:end] != expected or (after and after != b"\0"):
            return None
        if after:
            rows.append(memoryview(raw)[end + 1 :])
        else:
            every = False
        longest = end if end > longest else longest
    return (rows if every else None), longest


def _round0_bytes(task: Task, dom: rounds.Domain, room: int) -> memoryview | None:
    """Round 0's send bytes in domain order (a view of the send memory where they are one
    block of it on the CPU), or None when they cannot ride along."""
    if task.op not in rounds.ROUNDS or (task.op in _REDUCING and not dom.reduction.exact):
        return None
    blocks = layout.round_blocks(task, "send", 0)
    if task.op in _WHOLE:  # the first block
        start, size = int(blocks.starts[0]), int(blocks.sizes[0])
        data = None if size > room else task.memory("send")[start : start + size]
    else:
        data = None if blocks.total() > room else rounds.gather_bytes(task.memory("send"), blocks)
    return None if data is None else memoryview(data.cpu().numpy())


def run(
    task: Task, tasks: list[Task], rows: list[memoryview], scattered: bool, dom: rounds.Domain
) -> None:
    """Round 0 of this rank's ``task`` from every domain rank's round-0 bytes (``rows``: each
    rank's whole round 0, or where ``scattered`` its piece for this rank).

    ``tasks`` are the domain ranks' tasks as their descriptors describe them
    (they agree with ``task``: the comparison passed).
    """
    me = task.rank
    if task.op == _C.HCCL_CMD_ALLREDUCE and scattered:  # this rank's chunk of every rank
        flat = torch.from_numpy(joined(rows))
        _same_size(task, flat.numel(), task.rank_dim * int(rounds.split_chunks(task).sizes[me]))
        if flat.numel():
            stacked = task.typed(flat).view(task.rank_dim, -1)
            flat = reduce_ranks(stacked, HcclReduceOp(task.reduce_op)).view(torch.uint8)
        rounds.gather_chunks(task, 0, flat.reshape(-1).to(task.memory("recv").device), dom)
        return
    received = []
    for peer, row in zip(tasks, rows, strict=True):
        if task.op in _WHOLE or scattered:
            received.append(row)
            continue
        sizes = layout.round_blocks(peer, "send", 0).sizes
        start = int(sizes[:me].sum())
        received.append(row[start : start + int(sizes[me])])
    data = task.memory("recv")
    if task.op not in _REDUCING:
        recv = layout.round_blocks(task, "recv", 0)
        _same_size(task, sum(map(len, received)), recv.total())
        if task.skip_local:
            flat = torch.from_numpy(joined(received)).to(data.device)
            rounds.scatter_bytes(data, recv, flat, me)
        else:
            rounds.scatter_joined(data, recv, received)
        return
    flat = torch.from_numpy(joined(received))
    if task.count == 0:
        return
    _same_size(task, flat.numel(), task.rank_dim * task.count * task.elem_size)
    stacked = task.typed(flat).view(task.rank_dim, task.count)
    rounds.write_result(task, 0, reduce_ranks(stacked, HcclReduceOp(task.reduce_op)))


def _same_size(task: Task, got: int, expected: int) -> None:
    if got != expected:
        raise HcclError(
            f"round 0 of {task.describe()} (handle {task.handle}) received {got} bytes "
            f"in the descriptor exchange where its receive blocks hold {expected}",
            rank=task.domain.ranks[task.rank],
            domain=task.domain_name,
            handle=task.handle,
            op=task.spec.name,
            round=0,
        )
