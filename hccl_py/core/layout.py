"""Address arithmetic of spec section 3: which bytes each round of a task reads and writes.

This is the single source of the arithmetic; the emulator, the torch.distributed
server and the bounds and overlap checks all ask it. Everything is vectorised
over rounds and peers with numpy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from .task import Task


@dataclass(frozen=True)
class Blocks:
    """Byte ranges inside one allocation: block ``k`` is ``[starts[k], starts[k] + sizes[k])``."""

    starts: np.ndarray
    sizes: np.ndarray
    #: Memoised answers of :meth:`regular`, :func:`span` and :func:`first_overlap`.
    _memo: dict = field(default_factory=dict, repr=False, compare=False)

    def memo(self, name: str, compute: Callable[[Blocks], object]) -> object:
        """``compute(self)``, computed once (the arrays of a Blocks are never changed)."""
        try:
            return self._memo[name]
        except KeyError:
            value = self._memo[name] = compute(self)
            return value

    def regular(self) -> tuple[int, int, int] | None:
        """``(start, nbytes, step)`` when the blocks are equal-sized and evenly spaced (memoised)."""
        return self.memo("regular", Blocks._find_regular)

    def total(self) -> int:
        """Bytes in all blocks together (memoised)."""
        return self.memo("total", lambda b: int(b.sizes.sum()))

    def _find_regular(self) -> tuple[int, int, int] | None:
        n = len(self.starts)
        if n == 0 or (self.sizes != self.sizes[0]).any():
            return None
        if n == 1:
            return int(self.starts[0]), int(self.sizes[0]), int(self.sizes[0])
        steps = np.diff(self.starts)
        if (steps != steps[0]).any() or steps[0] < 0:
            return None
        return int(self.starts[0]), int(self.sizes[0]), int(steps[0])


def even_chunks(count: int, n: int, size: int) -> Blocks:
    """``n`` chunks of ``count`` elements of ``size`` bytes, ``ceil(count / n)`` elements each
    (the last ones short or empty): how an exact all-reduce splits a block, chunk ``k`` for the
    rank that reduces it."""
    per = -(-count // n)
    bounds = np.minimum(np.arange(n + 1) * per, count) * size
    return Blocks(bounds[:-1], np.diff(bounds))


#: Byte offsets at or above this use exact Python ints instead of int64 (which would wrap).
_INT64_SAFE = 2**62


def _index_dtype(task: Task) -> type:
    """The index dtype for a task's layout: ``np.int64``, or ``object`` for absurd counts.

    Counts or strides near 2**62 would make int64 byte offsets wrap silently (a
    huge task would look small or overlapping); exact Python ints make such a
    task fail the bounds check with its true byte range instead.
    """
    if task.spec.pairwise_counts:
        values = (*task.send_counts, *task.recv_counts, *task.sdispls, *task.rdispls, 0)
        biggest = (task.repeat + 1) * max(values)
    else:
        biggest = (task.repeat + task.rank_dim) * max(task.count, task.stride)
    offsets = abs(task.send.offset) + abs(task.recv.offset)
    return np.int64 if biggest * task.elem_size + offsets < _INT64_SAFE else object


def _element_layout(task: Task, side: str, rounds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Element offsets (relative to the side's buffer) and counts, shape (rounds, blocks)."""
    dtype = _index_dtype(task)
    r = rounds.astype(dtype)[:, None]
    peers = np.arange(task.rank_dim, dtype=dtype)[None, :]
    return task.spec.layout(task, side, r, peers)


def byte_layout(task: Task, side: str, rounds: np.ndarray | int) -> tuple[np.ndarray, np.ndarray]:
    """Absolute byte offsets in the side's allocation and byte sizes, shape (rounds, blocks)."""
    rounds = np.atleast_1d(np.asarray(rounds))
    starts, counts = _element_layout(task, side, rounds)
    addr = task.send if side == "send" else task.recv
    size = task.elem_size
    return addr.offset + starts * size, counts * size


#: Layouts of recently prepared tasks by what decides them (kernels repeat their tasks).
_MEMO: dict[tuple, tuple[list[Blocks], Blocks]] = {}
_MEMO_SIZE = 256


def _layout_key(task: Task, side: str) -> tuple:
    """Everything a task's byte layout on ``side`` depends on."""
    addr = task.send if side == "send" else task.recv
    return (
        side, task.op, task.rank, task.rank_dim, task.count, task.stride, task.repeat,
        task.steps, task.elem_size, addr.offset, task.send_counts, task.sdispls,
        task.recv_counts, task.rdispls,
    )  # fmt: skip


def _rounds(task: Task, side: str) -> tuple[list[Blocks], Blocks]:
    """Every round's blocks and all of them flattened, computed once per task and side.

    A task is immutable once prepared, so its layout is cached on it: the
    bounds and overlap checks, the poisoning and every round of the executors
    share one computation. Tasks of the same shape (a kernel launched again)
    share one computation too, and with it the memoised :meth:`Blocks.regular`,
    :func:`span` and :func:`first_overlap` answers.
    """
    cached = task.layout_cache.get(side)
    if cached is not None:
        return cached
    key = _layout_key(task, side)
    cached = _MEMO.get(key)
    if cached is None:
        starts, sizes = byte_layout(task, side, np.arange(task.repeat))
        sizes = np.ascontiguousarray(np.broadcast_to(sizes, starts.shape))
        per_round = [Blocks(starts[r], sizes[r]) for r in range(task.repeat)]
        cached = (per_round, Blocks(starts.reshape(-1), sizes.reshape(-1)))
        if len(_MEMO) >= _MEMO_SIZE:
            _MEMO.pop(next(iter(_MEMO)), None)
        _MEMO[key] = cached
    task.layout_cache[side] = cached
    return cached


def round_blocks(task: Task, side: str, round_idx: int) -> Blocks:
    """The blocks that round ``round_idx`` of ``task`` reads (``side="send"``) or writes."""
    if 0 <= round_idx < task.repeat:
        return _rounds(task, side)[0][round_idx]
    starts, sizes = byte_layout(task, side, round_idx)
    return Blocks(starts[0], np.ascontiguousarray(np.broadcast_to(sizes, starts.shape))[0])


def all_blocks(task: Task, side: str) -> Blocks:
    """Every block of every round of ``task`` on one side, flattened (round-major)."""
    return _rounds(task, side)[1]


def rounds_regular(task: Task, side: str) -> tuple[int, int, int, int, int] | None:
    """``(start, blocks, nbytes, step, gap)`` when every round's blocks are regular alike
    (:meth:`Blocks.regular`) and round ``r``'s start at ``start + r * gap`` (``gap >= 0``),
    so that one strided view holds every round; memoised per task shape."""
    per_round, flat = _rounds(task, side)
    return flat.memo("rounds_regular", lambda _: _rounds_regular(per_round))  # type: ignore[return-value]


def _rounds_regular(per_round: list[Blocks]) -> tuple[int, int, int, int, int] | None:
    regs = [blocks.regular() for blocks in per_round]
    if not regs or None in regs or len({reg[1:] for reg in regs}) != 1:  # type: ignore[index]
        return None
    (start, nbytes, step), n = regs[0], len(per_round[0].starts)  # type: ignore[misc]
    gap = regs[1][0] - start if len(regs) > 1 else 0  # type: ignore[index]
    if gap < 0 or any(reg[0] != start + r * gap for r, reg in enumerate(regs)):  # type: ignore[index]
        return None
    return start, n, nbytes, step, gap


def span(blocks: Blocks) -> tuple[int, int] | None:
    """``(lowest byte, end byte)`` touched by the non-empty blocks, or None if all are empty."""
    return blocks.memo("span", _span)


def _span(blocks: Blocks) -> tuple[int, int] | None:
    nz = blocks.sizes > 0
    if not nz.any():
        return None
    return int(blocks.starts[nz].min()), int((blocks.starts + blocks.sizes)[nz].max())


def first_overlap(blocks: Blocks) -> tuple[int, int] | None:
    """Indices ``(a, b)`` of two non-empty blocks that share bytes, or None."""
    return blocks.memo("first_overlap", _first_overlap)


def _first_overlap(blocks: Blocks) -> tuple[int, int] | None:
    nz = np.flatnonzero(blocks.sizes > 0)
    if len(nz) < 2:
        return None
    order = nz[np.argsort(blocks.starts[nz], kind="stable")]
    ends = blocks.starts[order] + blocks.sizes[order]
    running_end = np.maximum.accumulate(ends)
    clash = np.flatnonzero(blocks.starts[order][1:] < running_end[:-1])
    if len(clash) == 0:
        return None
    b = int(order[clash[0] + 1])
    a = int(order[: clash[0] + 1][np.argmax(ends[: clash[0] + 1] > blocks.starts[b])])
    return a, b


def block_round_peer(task: Task, side: str, flat_index: int) -> tuple[int, int]:
    """Turn a flat index of :func:`all_blocks` back into ``(round, block)``: the kernel's
    round, also for a fine-grained task, whose server rounds are its steps."""
    n = _element_layout(task, side, np.zeros(1))[0].shape[1]
    server_round, block = divmod(flat_index, n)
    return server_round // task.steps, block
