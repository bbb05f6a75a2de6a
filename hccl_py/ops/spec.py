"""The shape of one op's entry in the op table: every fact about one collective.

Each collective module (``all_gather.py`` ...) creates one :class:`OpSpec` and
registers it; the client, the address arithmetic, the sanitizer, the agreement
check, the platform profiles, the executors, the framework layer and the
samples read op facts from there, never from a list of their own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from ..core.constants import HcclCMDType, HcclDataType


class Task(Protocol):
    """What a layout reads of a task (:class:`hccl_py.core.task.Task` has it): its counts."""

    count: int
    stride: int
    send_counts: Sequence[int] | None
    sdispls: Sequence[int] | None
    recv_counts: Sequence[int] | None
    rdispls: Sequence[int] | None


#: ``layout(task, side, rounds, peers)`` -> element offsets and counts, shape (rounds, blocks).
#: ``rounds`` has shape (R, 1) and ``peers`` shape (1, rankDim), both of the index dtype.
Layout = Callable[[Task, str, np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]


@dataclass(frozen=True)
class OpSpec:
    """What one Prepare call of the kernel API is, independent of any backend."""

    #: The op type in a tiling and in a task (``HCCL_CMD_ALLGATHER``).
    cmd: HcclCMDType
    #: The AscendC method name (``AllGather``).
    name: str
    #: Name of the count argument in the AscendC signature (None: per-peer count arrays).
    count_arg: str | None
    #: Whether the op reduces (takes a reduce op, allows only reducible types).
    reduces: bool
    #: The element types a Prepare of this op accepts.
    dtypes: frozenset[HcclDataType]
    #: Whether a count of 0 is valid.
    zero_count: bool
    #: The default algConfig string of its Mc2CcTilingConfig.
    alg_config: str
    #: Per-round element layout of each side (see :data:`Layout`).
    layout: Layout
    #: ``in_place(rank)`` -> (send block, receive block) that may coincide on this rank.
    in_place: Callable[[int], tuple[int, int]]
    #: Short names of the platforms whose kernel API has it ("A2", "A3", "950").
    platforms: frozenset[str]
    #: Whether the op takes a strideCount argument.
    strided: bool = False
    #: Whether ranks must agree pairwise on per-peer counts (AlltoAllV) rather than on ``count``.
    pairwise_counts: bool = False
    #: Whether the op is pure data movement that the executors implement (False: not yet).
    executable: bool = True
    #: How the client commits, waits, queries and finalizes its handles (the client's
    #: ``LIFECYCLES``): "rounds" (the server runs each committed round; Wait and Query ask
    #: it), "batch-write" (one-sided copies, always committed; Wait flushes them; Finalize
    #: does not count them), "window-write" (AlltoAllvWrite: Commit sends the copies, Wait
    #: meets every peer). A "rounds" op whose tiling has stepSize > 0 is "fine-grained".
    lifecycle: str = "rounds"

    def __str__(self) -> str:
        return self.name


def stride(task: Task) -> int:
    """``strideCount`` if positive, else the count: the element distance between peer blocks."""
    return task.stride if task.stride > 0 else task.count


def no_blocks(
    task: Task, side: str, r: np.ndarray, peers: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Layout of the one-sided ops (BatchWrite, AlltoAllvWrite): no collective blocks."""
    empty = np.zeros((r.shape[0], 0), dtype=r.dtype)
    return empty, empty


def regular_layout(per_peer_sides: frozenset[str]) -> Layout:
    """Layout of the regular ops: ``count`` elements per block; per-peer blocks on some sides.

    Round ``r`` starts at ``r * count``; on a per-peer side, peer ``p``'s block is
    a further ``p * stride`` elements on. Other sides have one block per round.
    """

    def layout(
        task: Task, side: str, r: np.ndarray, peers: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        c = task.count
        starts = (
            r * c + peers * stride(task) if side in per_peer_sides else r * c + 0 * peers[:, :1]
        )
        return starts, np.full(starts.shape, c, dtype=starts.dtype)

    return layout
