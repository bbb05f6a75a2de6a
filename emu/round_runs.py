"""The bytes of a collective round that its server reads (send) or changes (recv).

The collective buffer race check (:mod:`.buffers`) marks these bytes at a Commit
and looks them up when a kernel access meets their storage: sorted, disjoint
runs, memoised on the round's blocks. A round's own block of an in-place
AllGather or AlltoAll (read and written back unchanged) and a block that
``skipLocalRankCopy`` keeps the server from writing are no change.
"""

from __future__ import annotations

import numpy as np

from hccl_py.core import layout
from hccl_py.core.task import Task
from hccl_py.sanitizer.poison import skipped_block

from .intervals import Runs


def merged_runs(starts: np.ndarray, sizes: np.ndarray) -> Runs:
    """The non-empty blocks ``[start, start + size)`` merged into sorted, disjoint runs."""
    keep = sizes > 0
    starts, ends = starts[keep], starts[keep] + sizes[keep]
    if not len(starts):
        return []
    order = np.argsort(starts, kind="stable")
    starts, ends = starts[order], np.maximum.accumulate(ends[order])
    firsts = np.flatnonzero(np.concatenate(([True], starts[1:] > ends[:-1])))
    lasts = np.concatenate((firsts[1:] - 1, [len(starts) - 1]))
    return list(zip(starts[firsts].tolist(), ends[lasts].tolist(), strict=True))


def unchanged_block(task: Task, round_idx: int) -> int | None:
    """The receive block of round ``round_idx`` whose bytes the round does not change, if any.

    For an op that does not reduce: the rank's own block where it is the
    in-place send block (the round writes back the bytes it read), or where
    ``skipLocalRankCopy`` keeps the server from writing it.
    """
    recv = layout.round_blocks(task, "recv", round_idx)
    if task.skip_local:
        return skipped_block(task, len(recv.sizes))
    si, ri = task.spec.in_place(task.rank)
    if task.spec.reduces or ri >= len(recv.sizes):
        return None
    send = layout.round_blocks(task, "send", round_idx)
    shift = _storage_shift(task)
    same = (
        shift is not None
        and si < len(send.starts)
        and int(send.starts[si]) + shift == int(recv.starts[ri])
        and int(send.sizes[si]) == int(recv.sizes[ri])
    )
    return ri if same else None


def round_runs(task: Task, side: str, round_idx: int) -> tuple[list[int], list[int]]:
    """The bytes of its allocation that round ``round_idx`` reads (send) or changes (recv):
    the starts and the ends of sorted, disjoint runs.

    Memoised on the round's blocks, which tasks of the same shape share.
    """
    blocks = layout.round_blocks(task, side, round_idx)
    skip = unchanged_block(task, round_idx) if side == "recv" else None

    def runs(b: layout.Blocks) -> tuple[list[int], list[int]]:
        sizes = b.sizes
        if skip is not None:
            sizes = sizes.copy()
            sizes[skip] = 0
        merged = merged_runs(b.starts, sizes)
        return [lo for lo, _ in merged], [hi for _, hi in merged]

    return blocks.memo(f"buffer-runs-{skip}", runs)


def _storage_shift(task: Task) -> int | None:
    """Offset that maps send positions onto receive positions, when they share a storage."""
    a, b = task.send.alloc.memory, task.recv.alloc.memory
    if a is None or b is None or a[0] != b[0] or not a[0]:
        return None
    return a[1] - b[1]
