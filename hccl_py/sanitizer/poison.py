"""The poison option: make reads of unfinished receive ranges visibly wrong, on every backend.

A committed round's receive blocks are filled with NaN (floating types) or 0xFF
bytes until the round runs, so a kernel that reads its output before Wait sees
the pattern. Rounds whose receive blocks share bytes with their own send
blocks (in-place use) are never poisoned: that would destroy the input.

Every backend follows one rule (the order is kept by
:mod:`hccl_py.server.task_queue`): a committed round is poisoned once the
server reached its task, and when the round never runs (its task failed, or
the run failed) the bytes it held before are put back (:func:`save_and_poison`,
:func:`restore`).
"""

from __future__ import annotations

import numpy as np
import torch

from ..core import layout
from ..core.constants import torch_dtype_of
from ..core.task import Task
from .overlap import in_place

__all__ = ["Saved", "in_place", "poison", "restore", "save_and_poison"]


def poison(task: Task, round_idx: int) -> None:
    """Fill one round's receive blocks with NaN (floating types) or 0xFF bytes."""
    data = task.recv.alloc.data
    dtype = torch_dtype_of(task.dtype)
    size = dtype.itemsize if dtype is not None and dtype.is_floating_point else 1
    for s, n in _runs(task, round_idx):
        region = data[s : s + n]
        if size > 1 and s % size == 0 and n % size == 0:
            region.view(dtype).fill_(float("nan"))
        else:
            region.fill_(0xFF)


def _runs(task: Task, round_idx: int) -> list[tuple[int, int]]:
    """The round's non-empty receive blocks as (start, size) runs (memoised), without the
    rank's own block where ``skipLocalRankCopy`` keeps the server from writing it (the kernel
    copies it itself; poisoning it destroyed that copy).

    A block that ends where the next one starts is merged with it: one copy and
    one fill per run (the blocks of an AllGather's round are one run).
    """
    blocks = layout.round_blocks(task, "recv", round_idx)
    own = skipped_block(task, len(blocks.sizes))
    if own is None:
        return blocks.memo("poison-runs", _merged)
    return blocks.memo(f"poison-runs-but-{own}", lambda b: _merged(b, own))


def skipped_block(task: Task, blocks: int) -> int | None:
    """The index of the rank's own receive block among a round's ``blocks`` where
    ``skipLocalRankCopy`` keeps the server from writing it (AllGather, AlltoAll), else None."""
    if not task.skip_local or task.spec.reduces:
        return None
    own = task.spec.in_place(task.rank)[1]
    return own if own < blocks else None


def _merged(blocks: layout.Blocks, skip: int | None = None) -> list[tuple[int, int]]:
    """The runs of :func:`_runs`, in block order (block ``skip`` left out)."""
    keep = blocks.sizes > 0
    if skip is not None:
        keep[skip] = False
    starts, ends = blocks.starts[keep], blocks.starts[keep] + blocks.sizes[keep]
    if not len(starts):
        return []
    firsts = np.flatnonzero(np.concatenate(([True], starts[1:] != ends[:-1])))
    lasts = np.concatenate((firsts[1:] - 1, [len(starts) - 1]))
    return list(zip(starts[firsts].tolist(), (ends[lasts] - starts[firsts]).tolist(), strict=True))


#: What :func:`save_and_poison` kept of one round: its task and (start, original bytes) pairs.
Saved = tuple[Task, list[tuple[int, torch.Tensor]]]


def save_and_poison(task: Task, round_idx: int) -> Saved:
    """Poison one round's receive blocks, keeping their bytes to restore if it never runs."""
    data = task.recv.alloc.data
    saved = [(start, data[start : start + size].clone()) for start, size in _runs(task, round_idx)]
    poison(task, round_idx)
    return task, saved


def restore(saved: Saved) -> None:
    """Put back the bytes :func:`save_and_poison` kept (the round never ran)."""
    task, pieces = saved
    data = task.recv.alloc.data
    for start, raw in pieces:
        data[start : start + len(raw)].copy_(raw)
