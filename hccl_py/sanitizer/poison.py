"""The poison option: make reads of unfinished receive ranges visibly wrong, on every backend.

A committed round's receive blocks are filled with NaN (floating types) or 0xFF
bytes until the round runs, so a kernel that reads its output before Wait sees
the pattern. Rounds whose receive blocks share bytes with their own send
blocks (in-place use) are never poisoned: that would destroy the input.
"""

from __future__ import annotations

from ..core import layout
from ..core.constants import torch_dtype_of
from ..core.task import Task
from .overlap import in_place

__all__ = ["in_place", "poison"]


def poison(task: Task, round_idx: int) -> None:
    """Fill one round's receive blocks with NaN (floating types) or 0xFF bytes."""
    blocks = layout.round_blocks(task, "recv", round_idx)
    data = task.recv.alloc.data
    dtype = torch_dtype_of(task.dtype)
    for s, n in zip(blocks.starts.tolist(), blocks.sizes.tolist(), strict=True):
        region = data[s : s + n]
        if (
            dtype is not None
            and dtype.is_floating_point
            and dtype.itemsize > 1
            and s % dtype.itemsize == 0
        ):
            region.view(dtype).fill_(float("nan"))
        else:
            region.fill_(0xFF)
