"""An all_gather_into_tensor carried by its argument exchange.

Every framework collective first exchanges what each rank was asked to do
(:func:`._common.agree`): one all-gather of a row per rank on the domain's
process group on gloo and HCCL, a meeting of the ranks in the emulator. For an
all-gather, that exchange is the op itself when the data fits beside the
arguments. Each rank then sends its input's bytes after its record, behind a
NUL byte, and once the records agree every rank builds its output from the
rows. The op makes no task of its own: one process-group call instead of two.

Whether the data rode along is decided from what the exchange gave every rank
(every rank's bytes are there, as long as its record says), so every rank
decides alike even when their hints about the room differed
(:meth:`~hccl_py.server.protocol.Meetings.room`). After the records agree,
every rank asks the server alike for room for the same call again
(:meth:`~hccl_py.server.protocol.Meetings.widen`), computed from every rank's
record: on gloo the domain's next exchange rows are that wide, up to 1 MiB, so
an input too large for the first, 4 KiB rows rides from its second call on.

Only all-gathers carry: their rows are their own data, while any other op
would send its whole input to every rank. Asynchronous calls keep their task,
so that their output changes only on ``wait()`` (and the emulator's poison
shows a read before it).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..core.group import Group
from ..kernel.context import current_rank_context
from ..trace import hooks
from ..trace.recorder import AIV_TID, now_us
from ._common import exchange, head_length, record, records_of

#: The fact of a record that says how many bytes its rank carries (0: none).
CARRY = "carry"


def agree_carrying(
    group: Group, op: str, problem: str | None, data: torch.Tensor | None, **facts: Any
) -> tuple[list[dict[str, Any]], bytes | None]:
    """:func:`._common.agree`, with ``data``'s bytes beside this rank's record where the
    exchange has room: every rank's records, and every rank's data bytes one after another
    in group rank order when every rank's rode along (None: run the op's task)."""
    server = current_rank_context().server
    size = 0 if data is None else data.numel() * data.element_size()
    head = record(op, problem, {**facts, CARRY: size})
    payload = head
    if data is not None and problem is None and len(head) + 1 + size <= server.room(group):
        payload = head + b"\0" + _bytes_of(data)
    raw = exchange(group, op, payload)
    records = records_of(group, op, raw)
    sizes = [r[CARRY] if isinstance(r.get(CARRY), int) else 0 for r in records]
    heads = [head_length(r) for r in raw]
    server.widen(group, max(heads) + 1 + max(sizes))
    tails = [memoryview(r)[h + 1 :] for r, h in zip(raw, heads, strict=True)]
    if any(h == len(r) for r, h in zip(raw, heads, strict=True)) or any(
        len(t) != n for t, n in zip(tails, sizes, strict=True)
    ):
        return records, None
    return records, b"".join(tails)


def _bytes_of(data: torch.Tensor) -> bytes:
    """``data``'s bytes in memory order of its contiguous form."""
    data = data.detach()
    if not data.is_contiguous():
        data = data.contiguous()
    return data.view(torch.uint8).cpu().numpy().tobytes()


def write_gathered(op: str, out: torch.Tensor, gathered: bytes, started_us: float) -> None:
    """Every rank's carried bytes, in rank order (``gathered``), into ``out`` (its shape
    agreed); the trace shows the op as one call that started at ``started_us``."""
    if gathered and out.is_contiguous() and out.device.type == "cpu":
        out.detach().view(torch.uint8).numpy().reshape(-1)[:] = np.frombuffer(gathered, np.uint8)
    elif gathered:
        values = torch.frombuffer(bytearray(gathered), dtype=torch.uint8)
        out.copy_(values.view(out.dtype).view(out.shape).to(out.device))
    rec = hooks.recorder()
    if rec is not None:
        rec.call(op, AIV_TID, started_us, now_us(), {"carried": "in the argument exchange",
                                                     "bytes": len(gathered)})  # fmt: skip
