"""An exchange predicted to be the all-to-all that the domain's last exchange agreed on.

A framework all-to-all (``alltoall_single``, an exact ``reduce_scatter_tensor``)
first exchanges its arguments, then sends its data: two process-group calls.
Its data cannot ride in the exchange's all-gather rows beyond a few KiB, since
every rank would receive every rank's whole input. But once a call agreed, every
rank knows alike the sizes of "the same call again", and asks for it
(:meth:`~hccl_py.server.protocol.Meetings.predict`). The domain's next exchange,
whichever collective it belongs to, is then one ``all_to_all_single`` of blocks of
that size, equal on every rank (gloo aborts a process on messages of different
sizes: see docs/backends.md). Each block holds, after a header of two int64
(the content's length, and :data:`PIECES` or :data:`PLAIN`), the sender's payload
(its record, the same in every block) and, where it offers pieces, a NUL byte and
its piece for that peer.

A rank whose content does not fit its blocks sends :data:`UNFIT` as the length of
every block; every rank then sees it and exchanges again as usual, after one
wasted call. Every sender's kind is the same in all its blocks, so every rank
decides alike whether every rank's pieces came. When some did not (a rank that
offered none sent its payload alone, perhaps with its whole input behind its record),
the pieces that came are dropped: a piece differs from receiver to receiver, and a rank
that took it for its sender's whole data (a piece may be all of it) would compute its
output where its peers run the op's task.
"""

from __future__ import annotations

import struct

import numpy as np
import torch
import torch.distributed as dist

from ...server.protocol import Outgoing, Payload, put, record_length, record_of
from .buffers import Buffers
from .gathered import MAX_PAYLOAD_BYTES, ROW_BYTES
from .rounds import Domain, Waiter

#: The header of a block: the content's length, then its kind.
HEADER_BYTES = 16
_HEAD = struct.Struct("<qq")
#: The length a rank sends in every block when its content does not fit.
UNFIT = -1
#: A block's kind: the sender's payload alone (the same in every block).
PLAIN = 0
#: A block's kind: the sender's payload, a NUL byte and its piece for that peer.
PIECES = 1
#: The purposes of the send and receive buffers in a domain's :class:`~.buffers.Buffers`.
_SEND, _OUT = "predicted send", "predicted receive"


def scatter_bytes(
    dom: Domain,
    payload: Outgoing,
    pieces: list[memoryview] | None,
    block: int,
    device: torch.device,
    wait: Waiter,
    buffers: Buffers | None = None,
) -> tuple[list[Payload], bool] | None:
    """Every domain rank's content for this rank (domain order) in one all-to-all of ``block``
    bytes per peer, and whether every rank sent its pieces (where not, a sender's piece is
    dropped, its record kept: what is left is the same on every rank); None when some rank's
    content did not fit (every rank sees it alike, and exchanges again as usual).

    ``pieces`` (domain order, or None): this rank's data for each peer, sent after
    ``payload``'s record (:func:`~hccl_py.server.protocol.record_length`: what follows it
    rides only in an all-gather) and a NUL byte. ``buffers``: the domain's, to send and
    receive in.
    """
    n = len(dom.order)
    if pieces is not None:  # a payload's record alone: data that would ride in rows stays behind
        payload = record_of(payload)
    kind, size, head = (PLAIN if pieces is None else PIECES), HEADER_BYTES + block, len(payload)
    order = dom.order.tolist()  # process-group order
    if pieces is None:
        lengths = [head] * n
    else:  # the record, a NUL byte, the piece for that peer
        lengths = [head + 1 + pieces[d].nbytes for d in order] if len(pieces) == n else []
    fits = len(lengths) == n and max(lengths) <= block
    if buffers is None:  # zeros: no byte of this process's memory goes out unwritten
        send = torch.zeros(n * size, dtype=torch.uint8)
    else:  # the bytes after each block's content are zeroed below
        send = buffers.take(_SEND, n * size, torch.device("cpu"))
    flat = send.numpy()
    for p in range(n):
        at = p * size
        _HEAD.pack_into(flat, at, lengths[p] if fits else UNFIT, kind)
        start = at + HEADER_BYTES
        end = start + lengths[p] if fits else start
        if fits:  # each part written once, straight into its block
            put(payload, flat[start : start + head])
            if pieces is not None:
                flat[start + head] = 0  # the NUL byte
                flat[start + head + 1 : end] = np.frombuffer(pieces[order[p]], np.uint8)
        if buffers is not None:
            flat[end : at + size] = 0
    moved = send.to(device)
    out = torch.empty_like(moved) if buffers is None else buffers.take(_OUT, n * size, device)
    wait(dist.all_to_all_single(out, moved, group=dom.pg, async_op=True))
    got = dom.to_domain(out.view(n, -1)).cpu().numpy()
    if buffers is not None:
        buffers.keep(_SEND, send)
        buffers.keep(_OUT, out, got)
    heads_got = got[:, :HEADER_BYTES].copy().view("<i8").tolist()
    lengths, kinds = zip(*heads_got, strict=True)
    if UNFIT in lengths:
        return None
    for i, (length, kind) in enumerate(heads_got):
        if not 0 <= length <= block or kind not in (PLAIN, PIECES):
            raise ValueError(
                f"domain rank {i} sent a block of {length} bytes of kind {kind} in an "
                f"all-to-all exchange of {block}-byte blocks; hccl_py sends 0 to {block} bytes "
                f"of kind {PLAIN} or {PIECES}"
            )
    received = [memoryview(got[i, HEADER_BYTES : HEADER_BYTES + h]) for i, h in enumerate(lengths)]
    scattered = PLAIN not in kinds  # every kind is PLAIN or PIECES
    if not scattered:  # a piece differs per receiver: only the records, alike on every rank
        received = [
            c[: record_length(c)] if kind == PIECES else c
            for c, kind in zip(received, kinds, strict=True)
        ]
    return received, scattered


def block_for(need: int) -> int:
    """The block of a predicted exchange that carries ``need`` bytes (0: too many): at least
    :data:`~.gathered.ROW_BYTES`, so that any payload that an all-gather's rows would carry
    fits (a kernel task's check, another framework op's arguments)."""
    return max(need, ROW_BYTES) if 0 < need <= MAX_PAYLOAD_BYTES else 0
