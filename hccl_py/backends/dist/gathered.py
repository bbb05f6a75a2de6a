"""A domain's exchange as one all-gather of fixed-width rows of control bytes.

A kernel task's descriptor check and a framework collective's argument exchange send each
rank's payload (its record, maybe data that rides along) in a row of the same width on every
rank: gloo aborts a process on messages of different sizes, so no rank's payload may change
another's call (see docs/backends.md). Each row starts with the payload's length; a payload
longer than the row makes every rank gather again at the longest length. The width is chosen
by :class:`.first_round.Rows`; :mod:`.predicted` is the other way an exchange travels.
"""

from __future__ import annotations

import numpy as np
import torch

from ...server.protocol import EXCHANGE_ROOM_BYTES, NARROW_EXCHANGE_BYTES, Outgoing, Payload, put
from . import rounds
from .buffers import Buffers

#: Bytes per rank of the first all-gather of :func:`all_gather_bytes` (a length, then the
#: payload); a longer payload on any rank makes every rank gather again at the longest width.
ROW_BYTES = NARROW_EXCHANGE_BYTES
_LENGTH_BYTES = 8
#: The most control bytes one rank sends with :func:`all_gather_bytes`.
MAX_PAYLOAD_BYTES = EXCHANGE_ROOM_BYTES
#: The purposes of this rank's row and of the received rows in a domain's :class:`.Buffers`.
_ROW, _ROWS = "gathered row", "gathered rows"


def _gather_rows(
    dom: rounds.Domain,
    payload: Outgoing,
    width: int,
    device: torch.device,
    wait: rounds.Waiter,
    buffers: Buffers | None = None,
) -> np.ndarray:
    """Every domain rank's row of ``width`` (:func:`_row`; the same on every rank), in domain
    order (uint8); this rank's row and the receive buffer from ``buffers`` where it has them
    free (else new ones: the row a bytearray, which :func:`_row` makes)."""
    n, size = len(dom.order), _LENGTH_BYTES + width
    if buffers is None:
        mine = torch.frombuffer(_row(payload, width), dtype=torch.uint8).to(device)
        out = torch.empty(n * size, dtype=torch.uint8, device=device)
    else:
        mine = buffers.take(_ROW, size, device)
        _fill(mine.numpy(), payload)
        out = buffers.take(_ROWS, n * size, device)
    wait(rounds._all_gather_single(out, mine, group=dom.pg, async_op=True))  # looked up per call
    rows = dom.to_domain(out.view(n, size)).cpu().numpy()
    if buffers is not None:
        buffers.keep(_ROW, mine)
        buffers.keep(_ROWS, out, rows)
    return rows


def _row(payload: Outgoing, width: int) -> bytearray:
    """``payload``'s length, then its first ``width`` bytes, in a row of ``width`` (zeros after)."""
    row = bytearray(_LENGTH_BYTES + width)
    _fill(np.frombuffer(row, np.uint8), payload)
    return row


def _fill(row: np.ndarray, payload: Outgoing) -> None:
    """Write ``payload``'s length into the uint8 ``row``, then as many of its bytes as fit, then
    zeros (no byte of this process's memory goes out unwritten)."""
    row[:_LENGTH_BYTES] = np.frombuffer(len(payload).to_bytes(_LENGTH_BYTES, "little"), np.uint8)
    kept = put(payload, row[_LENGTH_BYTES:])
    row[_LENGTH_BYTES + kept :] = 0


def all_gather_bytes(
    dom: rounds.Domain,
    payload: Outgoing,
    device: torch.device,
    wait: rounds.Waiter,
    width: int = ROW_BYTES,
    buffers: Buffers | None = None,
) -> list[Payload]:
    """Every domain rank's ``payload``, in domain order, over the domain's process group.

    One all-gather of ``width`` bytes per rank (the same on every rank); only when some rank's
    payload is longer, a second one at the longest length (every rank sees the lengths,
    so every rank makes the same calls). ``wait`` blocks on each call, so the
    caller can look for absent peers meanwhile. ``buffers``: the domain's, to send and receive in.
    """
    rows = _gather_rows(dom, payload, width, device, wait, buffers)
    lengths = rows[:, :_LENGTH_BYTES].copy().view("<i8")[:, 0].tolist()
    longest = max(lengths)
    bad = [i for i, length in enumerate(lengths) if not 0 <= length <= MAX_PAYLOAD_BYTES]
    if bad:
        raise ValueError(
            f"domain rank {bad[0]} announced {lengths[bad[0]]} bytes of control data over the "
            f"process group; hccl_py sends 0 to {MAX_PAYLOAD_BYTES}"
        )
    if longest > width:
        rows = _gather_rows(dom, payload, longest, device, wait, buffers)
    return [memoryview(rows[i, _LENGTH_BYTES : _LENGTH_BYTES + n]) for i, n in enumerate(lengths)]
