"""One-sided copies that a server lands: BatchWrite items and Hcomm channel writes.

A copy is ``(source, destination, bytes)``; the source is a GM address or an
:class:`Immediate` (the notify value of ``Hcomm.WriteWithNotifyNbi``). The
source bytes are read when the copy lands, as a DMA engine reads them.
"""

from __future__ import annotations

from typing import Any

import torch

#: (source, destination, bytes) of each copy, in the order they land.
Copies = list[tuple[Any, Any, int]]
#: An Hcomm channel as the servers key it: (global rank that owns it, its handle).
ChannelKey = tuple[int, int]


class Immediate:
    """A value carried in the request itself (a notify's uint64), readable like a GM address."""

    __slots__ = ("data",)

    def __init__(self, value: int, nbytes: int = 8) -> None:
        self.data = torch.tensor(
            list(int(value).to_bytes(nbytes, "little", signed=value < 0)), dtype=torch.uint8
        )

    def bytes_view(self, nbytes: int) -> torch.Tensor:
        return self.data[:nbytes]


def run_copies(copies: Copies) -> None:
    """Copy each (source, destination, bytes) in order, as the server does; a source that
    overlaps its destination is read whole before any byte lands (as ``memmove``)."""
    for src, dst, nbytes in copies:
        source, target = src.bytes_view(nbytes), dst.bytes_view(nbytes)
        first, into = source.data_ptr(), target.data_ptr()
        if first < into + nbytes and into < first + nbytes and first != into:
            source = source.clone()
        target.copy_(source)
