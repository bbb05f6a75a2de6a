"""The benchmark's op table: what each benchmarked collective moves and how it is scored.

Each :class:`BenchOp` points at the op table's :class:`~hccl_py.ops.OpSpec`
(name, command type, whether it reduces, element types, platforms) and adds
what only the benchmark needs: the framework collective that runs the same
op, the bus-bandwidth factor of nccl-tests, and the buffer plan of one size.

Sizes are the bytes each rank sends in one op (its send buffer): S, the
size in the bandwidth formulas, is n times that for AllGather (the gathered
total) and equal to it for the others (for ReduceScatter the n blocks each
rank contributes, for AlltoAll(V) its whole send buffer).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..ops import BY_NAME, OpSpec


@dataclass(frozen=True)
class BenchOp:
    """One benchmarked collective."""

    #: Command-line name (``allgather``).
    key: str
    #: The op table's entry.
    spec: OpSpec
    #: The framework collective (hccl_py.framework) that runs the same op.
    framework: str
    #: Bus-bandwidth factor of nccl-tests for n ranks: busbw = algbw * factor(n).
    bus_factor: Callable[[int], float]
    #: S / size for n ranks: S is the size in the bandwidth formulas.
    total_factor: Callable[[int], int]

    @property
    def name(self) -> str:
        """The AscendC name (``AllGather``)."""
        return self.spec.name


def _ring(n: int) -> float:
    return (n - 1) / n


def _double_ring(n: int) -> float:
    return 2 * (n - 1) / n


def _one(n: int) -> int:
    return 1


def _ranks(n: int) -> int:
    return n


#: Command-line name -> benchmarked op, in the op table's order.
BENCH_OPS: dict[str, BenchOp] = {
    op.key: op
    for op in (
        BenchOp("allreduce", BY_NAME["AllReduce"], "all_reduce", _double_ring, _one),
        BenchOp("allgather", BY_NAME["AllGather"], "all_gather_into_tensor", _ring, _ranks),
        BenchOp("reducescatter", BY_NAME["ReduceScatter"], "reduce_scatter_tensor", _ring, _one),
        BenchOp("alltoall", BY_NAME["AlltoAll"], "alltoall_single", _ring, _one),
        BenchOp("alltoallv", BY_NAME["AlltoAllV"], "alltoall_single", _ring, _one),
    )
}


def algbw(op: BenchOp, ranks: int, size: int, seconds: float) -> float:
    """Algorithm bandwidth in GB/s: S / time (nccl-tests), S = size * total_factor."""
    if seconds <= 0:
        return 0.0
    return size * op.total_factor(ranks) / seconds / 1e9


def busbw(op: BenchOp, ranks: int, size: int, seconds: float) -> float:
    """Bus bandwidth in GB/s: algbw times the op's factor (AllReduce 2(n-1)/n, else (n-1)/n)."""
    return algbw(op, ranks, size, seconds) * op.bus_factor(ranks)


@dataclass(frozen=True)
class Plan:
    """The buffers of one op at one size on every rank, in elements.

    ``block`` is the element count per round of one peer block (the Prepare's
    count argument; for AlltoAllV ``counts[i][j]``, what rank i sends rank j per
    round). Rounds of one peer lie next to each other: ``stride = repeat *
    block`` (strideCount), and AlltoAllV displacements are ``repeat`` times the
    prefix sums of the counts.
    """

    op: BenchOp
    ranks: int
    block: int
    repeat: int
    send: int
    recv: int
    counts: np.ndarray | None = None

    @property
    def size_elems(self) -> int:
        """Elements each rank sends per round (the row's count)."""
        return self.send // self.repeat

    @property
    def stride(self) -> int:
        """strideCount: the element distance between peer blocks."""
        return self.repeat * self.block

    def sdispls(self, rank: int) -> np.ndarray:
        """AlltoAllV send displacements of ``rank`` (elements)."""
        return self.repeat * _exclusive(self.counts[rank])

    def rdispls(self, rank: int) -> np.ndarray:
        """AlltoAllV receive displacements of ``rank`` (elements)."""
        return self.repeat * _exclusive(self.counts[:, rank])


def _exclusive(values: np.ndarray) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(values)[:-1]]).astype(np.int64)


def uneven_counts(total: int, ranks: int) -> np.ndarray:
    """AlltoAllV counts: rank i sends ``w[(j - i) % n]`` elements to rank j.

    ``w`` grows linearly (w[m] ~ m + 1) and sums to ``total``, so the matrix is
    uneven but every rank sends, and receives, exactly ``total`` elements.
    """
    weights = np.arange(1, ranks + 1, dtype=np.int64)
    w = total * weights // int(weights.sum())
    w[-1] += total - int(w.sum())
    shift = (np.arange(ranks)[None, :] - np.arange(ranks)[:, None]) % ranks
    return w[shift]


def plan(op: BenchOp, ranks: int, size: int, elem_size: int, repeat: int = 1) -> Plan:
    """The buffers of ``op`` when each rank sends about ``size`` bytes per round.

    The element count is rounded down to whole peer blocks where the op has
    them (at least one element per block), so a row's size is what really moved.
    """
    elems = max(1, size // elem_size)
    name = op.name
    if name == "AllReduce":
        return Plan(op, ranks, elems, repeat, repeat * elems, repeat * elems)
    if name == "AllGather":
        return Plan(op, ranks, elems, repeat, repeat * elems, repeat * elems * ranks)
    block = max(1, elems // ranks)
    if name == "ReduceScatter":
        return Plan(op, ranks, block, repeat, repeat * block * ranks, repeat * block)
    if name == "AlltoAll":
        return Plan(op, ranks, block, repeat, repeat * block * ranks, repeat * block * ranks)
    total = block * ranks
    return Plan(
        op, ranks, block, repeat, repeat * total, repeat * total, uneven_counts(total, ranks)
    )
