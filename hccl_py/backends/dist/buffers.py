"""The buffers of a domain's exchanges, reused from one call to the next.

A new buffer per call costs the first touch of its pages (on 2 gloo ranks, about 20 us per
64 KiB buffer, in a process-group call that takes 250 us). A buffer goes back for reuse only
after its call ended (a call that a rank stopped waiting for may still write into it), and a
receive buffer is reused only once nothing of what the call returned (the array that the
payloads view) is alive any more: a payload that a caller keeps never changes under it.
Only CPU process groups reuse them (a device's copies may still be queued when a call ends).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable

import numpy as np
import torch


def _none() -> None:
    return None


class Buffers:
    """One buffer per purpose (a name), kept between calls while nothing else holds it."""

    def __init__(self) -> None:
        self._kept: dict[str, tuple[torch.Tensor, Callable[[], object]]] = {}

    def take(self, purpose: str, nbytes: int, device: torch.device) -> torch.Tensor:
        """A uint8 buffer of ``nbytes`` on ``device`` (its bytes are left over: the caller
        writes every byte it sends): the kept one when it fits and is free, else a new one."""
        kept = self._kept.pop(purpose, None)
        if kept is not None and kept[0].numel() == nbytes and kept[1]() is None:
            return kept[0]
        return torch.empty(nbytes, dtype=torch.uint8, device=device)

    def keep(self, purpose: str, buffer: torch.Tensor, view: np.ndarray | None = None) -> None:
        """``buffer`` again for the next :meth:`take` of ``purpose`` (its call ended), once
        ``view`` (an array over its memory that the call returned, if any) is gone."""
        self._kept[purpose] = (buffer, _none if view is None else weakref.ref(view))
