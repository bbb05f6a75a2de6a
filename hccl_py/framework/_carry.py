"""Framework collectives carried by their argument exchange.

Every framework collective first exchanges what each rank was asked to do
(:func:`._common.agree`): one all-gather of a row per rank on the domain's
process group on gloo and HCCL, a meeting of the ranks in the emulator. Where
an op's input fits beside its record, each rank sends the input's bytes there
too, behind a NUL byte, and once the records agree every rank computes its
output from the rows (every rank's whole input, in group rank order). The op
makes no task of its own: one process-group call instead of two.

- ``all_gather_into_tensor``: the output is the rows one after another. Its
  rows are its own data, so it may fill the server's whole room
  (:meth:`~hccl_py.server.protocol.Meetings.room`), and after the records
  agree every rank asks alike for room for the same call again
  (:meth:`~hccl_py.server.protocol.Meetings.widen`), computed from every
  rank's record: on gloo the domain's next rows are that wide, up to 1 MiB,
  so an input too large for the first, 4 KiB rows rides from its second call on.
- ``all_reduce``, ``reduce_scatter_tensor``: each rank reduces the rows in rank
  order (its own block of each, for a reduce-scatter) with the function the
  op's task would use, so the result is the same byte for byte; only where the
  server's reductions are the emulator's
  (:meth:`~hccl_py.server.protocol.Meetings.exact_reductions`). An all-reduce
  of up to 64 KiB widens the rows as an all-gather does: an exact all-reduce
  task gathers every rank's input at those sizes anyway.
- ``alltoall_single``, ``global_scatter``, ``global_gather``: each rank takes its
  piece out of each row (:meth:`Carried.pieces_for`).

``reduce_scatter_tensor`` and the all-to-alls carry at most
:data:`~hccl_py.server.protocol.NARROW_EXCHANGE_BYTES`, record included: every
rank would receive every rank's whole input. Whether the data rode along is decided from what
the exchange gave every rank (every rank's bytes are there, as long as its
record says), so every rank decides alike even when their hints about the
room differed. On gloo and HCCL these calls called again ride in a predicted
all-to-all (:meth:`~hccl_py.server.protocol.Meetings.predict`): each rank receives
each rank's piece for it (:attr:`Carried.scattered`), or, where not every rank sent
its pieces, none (the server drops them), so again every rank decides alike.
Asynchronous calls keep their task, so that their output changes only on ``wait()``
(and the emulator's poison shows a read before it).
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from functools import partial
from itertools import accumulate
from typing import Any

import torch
from torch.autograd.graph import increment_version

from ..core.gm import flat_elements
from ..core.group import Group
from ..kernel.context import current_rank_context
from ..sanitizer.sharing import Extent, first_clash
from ..server.protocol import (
    MAX_EXCHANGE_BYTES,
    NARROW_EXCHANGE_BYTES,
    WIDE_REDUCE_BYTES,
    Met,
    Outgoing,
    Payload,
    Pieces,
    Spliced,
    joined,
    record_length,
)
from ..trace import hooks
from ..trace.recorder import AIV_TID, now_us
from ._common import exchange, record, records_of, writable

#: The fact of a record that says how many bytes its rank carries (0: none).
CARRY = "carry"
#: The fact of a record that lists the bytes of its rank's data for each group rank, in order
#: (an all-to-all's or a reduce-scatter's pieces): what the same call again would send each peer.
PIECES = "pieces"
#: Where the ranks share one address space: the fact that says which bytes the rank's output
#: and input span (:func:`_span`).
MEMORY = "memory"


class Carried:
    """Every rank's input bytes from an exchange that carried them (``rows``, group rank
    order), and when the op started (for the trace)."""

    def __init__(
        self,
        op: str,
        domain: str,
        rows: list[memoryview],
        started_us: float,
        scattered: bool = False,
        need: int = 0,
    ) -> None:
        self.op, self.domain, self.rows, self.started_us = op, domain, rows, started_us
        #: Whether each row is only its rank's piece for this rank (a predicted all-to-all).
        self.scattered = scattered
        #: What the group's next exchange was predicted to carry (bytes of a block; 0: none).
        self.need = need

    def gather(self, group: Group, mine: torch.Tensor, out: torch.Tensor) -> None:
        """After an all-reduce's reduce-scatter rode in a predicted exchange (each row: this
        rank's chunk of a rank's input): every rank's reduced chunk (``mine`` is this rank's)
        in a second exchange, which the first one's prediction makes an all-to-all of the
        same payload to every peer, written one after another into ``out``; the next exchange
        is predicted again as the first one was."""
        head = record(self.op, None, {})
        raw = exchange(group, self.op, Spliced(head, _bytes_of(mine)))
        heads = [record_length(r) for r in raw]
        records_of(group, self.op, raw, heads)
        self.rows = [memoryview(r)[h + 1 :] for r, h in zip(raw, heads, strict=True)]
        current_rank_context().server.predict(group, self.need)
        self.write(out, self.rows)

    def stacked(self, dtype: torch.dtype) -> torch.Tensor:
        """The rows as a ``(ranks, elements)`` tensor of ``dtype`` (they are equally long)."""
        return _stack(self.rows, dtype)

    def pieces_for(self, me: int, sends: list[list[int]], row_bytes: int) -> list[memoryview]:
        """Group rank ``me``'s piece of every rank's rows, in rank order, where rank ``i``'s
        rows hold ``sends[i][j]`` rows of ``row_bytes`` for each rank ``j``, in rank order (an
        all-to-all's input)."""
        if self.scattered:
            return self.rows
        pieces = []
        for data, send in zip(self.rows, sends, strict=True):
            start = int(sum(send[:me])) * row_bytes
            pieces.append(data[start : start + int(send[me]) * row_bytes])
        return pieces

    def blocks_for(self, me: int, dtype: torch.dtype) -> torch.Tensor:
        """Block ``me`` of every rank's rows, each split in as many equal blocks as there are
        ranks, as a ``(ranks, elements)`` tensor of ``dtype`` (a reduce-scatter's input)."""
        if self.scattered:
            return self.stacked(dtype)
        block = len(self.rows[0]) // len(self.rows)
        return _stack([r[me * block : (me + 1) * block] for r in self.rows], dtype)

    def write(self, out: torch.Tensor, result: list[memoryview] | torch.Tensor) -> None:
        """``result`` (pieces of bytes that, one after another, are ``out``'s in memory order, or
        a tensor of ``out``'s elements) into ``out``; the trace shows the op as one call."""
        out = writable(out)
        if isinstance(result, torch.Tensor):
            out.copy_(result.view(out.shape))
        elif out.numel() and out.is_contiguous() and out.device.type == "cpu":
            joined(result, out=flat_elements(out).view(torch.uint8).numpy())
            increment_version(out)  # numpy's write does not move it
        elif out.numel():
            values = torch.from_numpy(joined(result))
            out.copy_(values.view(out.dtype).view(out.shape).to(out.device))
        rec = hooks.recorder()
        if rec is not None:
            rec.call(self.op, AIV_TID, self.started_us, now_us(),
                     {"carried": "in the argument exchange", "domain": self.domain,
                      "bytes": sum(len(r) for r in self.rows),
                      "received": out.numel() * out.element_size()})  # fmt: skip


@dataclass(frozen=True)
class Rule:
    """How an op rides in its exchange: ``most`` is the largest input it carries in rows
    that are wide enough (0: only within :data:`NARROW_EXCHANGE_BYTES`, record included);
    ``widens``: after the records agree, every rank asks alike for rows as wide as the same
    call needs; ``reduces``: only where the server's reductions are exact; ``scatters``: after
    the records agree, every rank asks alike for the next exchange as an all-to-all that
    carries each rank's piece for each peer in the same call (:data:`PIECES`); ``shared``:
    the largest input it carries where the ranks share memory and rows are handed over, not
    sent (the emulator: every rank reading every rank's whole input costs no traffic there,
    but a reduction of larger inputs on every rank costs more than the op's task)."""

    most: int
    widens: bool
    reduces: bool
    scatters: bool = False
    shared: int = WIDE_REDUCE_BYTES


#: all_gather_into_tensor: its rows are its own data.
GATHER = Rule(MAX_EXCHANGE_BYTES, widens=True, reduces=False, shared=MAX_EXCHANGE_BYTES)
#: all_reduce: up to 64 KiB, which an exact all-reduce task gathers from every rank anyway
#: (below ``EXACT_SPLIT_MIN_BYTES`` on gloo; at it, one call instead of three).
ALL_REDUCE = Rule(WIDE_REDUCE_BYTES, widens=True, reduces=True, scatters=True)
#: reduce_scatter_tensor: every rank would receive every rank's whole input.
REDUCE_SCATTER = Rule(0, widens=False, reduces=True, scatters=True)
#: alltoall_single, global_scatter, global_gather: likewise.
ALL_TO_ALL = Rule(0, widens=False, reduces=False, scatters=True, shared=MAX_EXCHANGE_BYTES)


def agree_carrying(
    group: Group,
    op: str,
    problem: str | None,
    data: torch.Tensor | None,
    rule: Rule,
    written: torch.Tensor | None,
    pieces: list[int] | None = None,
    **facts: Any,
) -> tuple[list[dict[str, Any]], Carried | None]:
    """:func:`._common.agree`, with ``data``'s bytes beside this rank's record where the
    exchange has room for them (``rule``): every rank's records, and every rank's data when
    every rank's rode along and no rank's output (``written``; None: memory the op allocates) is
    another rank's memory (None: run the op's task).

    ``pieces``: for a ``rule`` that scatters, the bytes of ``data`` for each group rank, in
    order; where the exchange was predicted as an all-to-all, only each rank's piece for this
    rank comes (:attr:`Carried.scattered`).
    """
    started = now_us()
    server = current_rank_context().server
    willing = data is not None and problem is None
    if rule.reduces and willing:
        willing = server.exact_reductions(group)
    size = data.numel() * data.element_size() if willing else 0  # type: ignore[union-attr]
    if willing and server.ranks_share_memory:
        facts[MEMORY] = [_span(written), _span(data)]  # type: ignore[arg-type]
    offered = willing and rule.scatters and pieces is not None
    if offered:
        facts[PIECES] = pieces
    head = record(op, problem, {**facts, CARRY: size})
    room = server.room(group)
    shared = server.ranks_share_memory  # rows handed over, not sent: Rule.shared
    fits = len(head) + 1 + size <= (
        room if rule.most or shared else min(room, NARROW_EXCHANGE_BYTES)
    )
    rides = (
        willing and fits and size <= (rule.shared if shared else rule.most or NARROW_EXCHANGE_BYTES)
    )
    payload = Spliced(head, _bytes_of(data)) if rides else head  # type: ignore[arg-type]
    offer = None
    if offered and max(pieces) <= MAX_EXCHANGE_BYTES:  # type: ignore[arg-type]
        offer = partial(_split, data, pieces)  # made in the exchange's turn, if it carries them
    raw, scattered = _exchange(group, op, payload, offer)
    read = _read(group, op, raw, rule)
    if read.widen:
        server.widen(group, read.widen)
    if read.need:
        server.predict(group, read.need)
    records, rows, lists = read.records, read.rows, read.lists
    if read.clash:
        return records, None
    if scattered:
        me = group.rank_of(current_rank_context().rank)
        if lists is not None and all(len(r) == p[me] for r, p in zip(rows, lists, strict=True)):
            return records, Carried(op, group.name, rows, started, scattered=True, need=read.need)
        return records, None
    if not read.whole:
        return records, None  # some rank's data did not ride along whole
    return records, Carried(op, group.name, rows, started)


class _Reading:
    """What every rank reads alike from an exchange's payloads (:func:`_read`)."""

    __slots__ = ("records", "rows", "lists", "widen", "need", "clash", "whole")

    def __init__(self, group: Group, op: str, raw: list[Payload], rule: Rule) -> None:
        heads = [record_length(r) for r in raw]
        #: Every rank's record (:func:`._common.records_of` raised if they disagree).
        self.records = records = records_of(group, op, raw, heads)
        sizes = [r[CARRY] if isinstance(r.get(CARRY), int) else 0 for r in records]
        #: The room to ask for the next exchange (0: none, :meth:`Meetings.widen`).
        self.widen = max(heads) + 1 + max(sizes) if rule.widens and max(sizes) <= rule.most else 0
        #: Every rank's :data:`PIECES`, where the rule scatters and every rank listed them.
        self.lists = lists = _piece_lists(records, group.size) if rule.scatters else None
        #: The block of the predicted all-to-all to ask for (0: none, :meth:`Meetings.predict`).
        self.need = 0 if lists is None else max(heads) + 1 + max(max(p) for p in lists)
        #: Every rank's bytes after its record.
        self.rows = rows = [memoryview(r)[h + 1 :] for r, h in zip(raw, heads, strict=True)]
        #: Whether some rank's output is memory of another rank's (:func:`_shared`).
        self.clash = _shared([r.get(MEMORY) for r in records])
        #: Whether every rank's data rode along whole.
        self.whole = list(map(len, rows)) == sizes and not any(
            map(operator.eq, heads, map(len, raw))
        )


def _read(group: Group, op: str, raw: list[Payload], rule: Rule) -> _Reading:
    """What every rank reads alike from ``raw``: once per meeting where the members share one
    list (a :class:`~hccl_py.server.protocol.Met`, which keeps the first member's reading for
    the others), else every time."""
    if type(raw) is not Met:
        return _Reading(group, op, raw, rule)
    kept = getattr(raw, "reading", None)
    if kept is not None and kept[0] is rule:
        return kept[1]
    read = _Reading(group, op, raw, rule)
    raw.reading = (rule, read)
    return read


def _exchange(
    group: Group, op: str, payload: Outgoing, pieces: Pieces | None
) -> tuple[list[Payload], bool]:
    """Every rank's payload, and whether every rank's piece for this rank came after its record
    (only where this rank offers ``pieces``, :meth:`~hccl_py.server.protocol.Meetings.meet_pieces`)."""
    if pieces is not None:
        ctx = current_rank_context()
        got = ctx.server.meet_pieces(group, group.rank_of(ctx.rank), op, payload, pieces)
        if got is not None:
            return got
    return exchange(group, op, payload), False


def _split(data: torch.Tensor, sizes: list[int]) -> list[memoryview]:
    """``data``'s bytes cut into consecutive pieces of ``sizes`` bytes."""
    whole, ends = _bytes_of(data), [0, *accumulate(sizes)]
    return [whole[a:b] for a, b in zip(ends[:-1], ends[1:], strict=True)]


def _piece_lists(records: list[dict[str, Any]], n: int) -> list[list[int]] | None:
    """Every rank's :data:`PIECES` (None unless every rank listed ``n`` sizes): from the
    records, so the same on every rank."""
    lists = [r.get(PIECES) for r in records]
    if all(
        isinstance(p, list) and len(p) == n and all(type(v) is int and v >= 0 for v in p)
        for p in lists
    ):
        return lists  # type: ignore[return-value]
    return None


def _stack(rows: list[memoryview], dtype: torch.dtype) -> torch.Tensor:
    """Equally long ``rows`` as a ``(rows, elements)`` tensor of ``dtype`` (one copy)."""
    flat = joined(rows)
    if not flat.size:
        return torch.empty((len(rows), 0), dtype=dtype)
    return torch.from_numpy(flat).view(dtype).view(len(rows), -1)


def _span(t: torch.Tensor | None) -> list[int]:
    """The bytes ``t`` spans as an extent: ``[address of its first byte, 0, bytes from there to
    the end of its last element]`` (none: [])."""
    if t is None or not t.numel():
        return []
    if t.is_contiguous():
        reach = t.numel()
    else:
        reach = 1 + sum((n - 1) * stride for n, stride in zip(t.shape, t.stride(), strict=True))
    return [t.data_ptr(), 0, reach * t.element_size()]


#: The spans :func:`_shared` judged last and its verdict: a loop passes the same buffers.
_last_shared: tuple[list[Any], bool] = ([], False)


def _shared(spans: list[Any]) -> bool:
    """Whether one rank's output spans bytes of another rank's output or input (``spans``: per
    rank, its record's :data:`MEMORY`): one buffer for both ranks in this process, while each
    process of a real run has its own. The op's task then runs, and its check reports it
    (:func:`~hccl_py.sanitizer.sharing.first_clash` judges both). The verdict depends on the
    numbers alone, so the same spans as the last call's get the last verdict."""
    global _last_shared
    last = _last_shared
    if spans == last[0]:
        return last[1]
    buffers = [
        (_extent(m[0]), _extent(m[1])) if isinstance(m, list) and len(m) == 2 else (None, None)
        for m in spans
    ]
    verdict = first_clash(buffers) is not None
    _last_shared = (spans, verdict)
    return verdict


def _extent(span: Any) -> Extent | None:
    """A peer's :func:`_span` as an extent, or None for none (or anything else)."""
    if isinstance(span, list) and len(span) == 3 and all(type(v) is int for v in span):
        return span[0], span[1], span[2]
    return None


def _bytes_of(data: torch.Tensor) -> memoryview:
    """``data``'s bytes in memory order of its contiguous form (its own memory where it is
    contiguous and on the CPU: read before the call returns)."""
    data = data.detach()
    if not data.is_contiguous():
        data = data.contiguous()
    return memoryview(flat_elements(data).view(torch.uint8).cpu().numpy())
