"""Independent numpy oracle of spec section 3 (address arithmetic) and the reduction rule.

Written again from the text of hccl-kernel-api.md and hccl_py/server/reduce.py's docstring,
without importing hccl_py or emu, so that a bug in the library's own layout code
cannot hide in the tests. Every function takes the ranks' buffers as uint8
numpy arrays (one per rank, plus the byte offset the kernel added to each
buffer's address) and returns the receive buffers as they must look afterwards;
the inputs are never modified. Bytes that no round writes keep their value.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

# HcclDataType values and element sizes (spec section 2).
INT8, INT16, INT32, FP16, FP32, INT64, UINT64, UINT8, UINT16, UINT32, FP64, BFP16 = range(12)
INT128, HIF8, FP8E4M3, FP8E5M2, FP8E8M0, MXFP8, RESERVED = 12, 14, 15, 16, 17, 18, 255
ELEM_SIZE = {
    INT8: 1,
    INT16: 2,
    INT32: 4,
    FP16: 2,
    FP32: 4,
    INT64: 8,
    UINT64: 8,
    UINT8: 1,
    UINT16: 2,
    UINT32: 4,
    FP64: 8,
    BFP16: 2,
    INT128: 16,
    HIF8: 1,
    FP8E4M3: 1,
    FP8E5M2: 1,
    FP8E8M0: 1,
    MXFP8: 1,
}
#: Types that AllReduce and ReduceScatter accept.
REDUCE_TYPES = (FP32, FP16, INT8, INT16, INT32, BFP16)
#: Types that AllGather, AlltoAll and AlltoAllV move (every type but INT128 and RESERVED).
MOVE_TYPES = tuple(t for t in ELEM_SIZE if t != INT128)

# HcclReduceOp values the kernel API supports.
SUM, MAX, MIN = 0, 2, 3

_INT_NUMPY = {INT8: np.int8, INT16: np.int16, INT32: np.int32}

Buffers = Sequence[np.ndarray]


# ------------------------------------------------------------------ values


def bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    """bfloat16 bit patterns (uint16) -> float32: the upper half of a float32."""
    return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32)


def f32_to_bf16(values: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bit patterns, rounding to nearest, ties to even (NaN -> 0x7FC0)."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    lsb = (bits >> np.uint32(16)) & np.uint32(1)
    rounded = ((bits + np.uint32(0x7FFF) + lsb) >> np.uint32(16)).astype(np.uint16)
    return np.where(np.isnan(values), np.uint16(0x7FC0), rounded)


def decode(raw: np.ndarray, dtype: int) -> np.ndarray:
    """Bytes of a reducible type -> values to compute with (float32 for floats, int64 for ints)."""
    if dtype == BFP16:
        return bf16_to_f32(raw.view(np.uint16))
    if dtype == FP16:
        return raw.view(np.float16).astype(np.float32)
    if dtype == FP32:
        return raw.view(np.float32).copy()
    return raw.view(_INT_NUMPY[dtype]).astype(np.int64)


def encode(values: np.ndarray, dtype: int) -> np.ndarray:
    """Values -> bytes of ``dtype``: floats round once (to nearest even), ints wrap."""
    if dtype == BFP16:
        out = f32_to_bf16(values)
    elif dtype == FP16:
        out = values.astype(np.float16)
    elif dtype == FP32:
        out = values.astype(np.float32)
    else:
        out = values.astype(_INT_NUMPY[dtype])
    return out.view(np.uint8)


def reduce_blocks(blocks: Buffers, dtype: int, op: int) -> np.ndarray:
    """Reduce the ranks' blocks (uint8, rank order) elementwise.

    SUM accumulates floats in float32 one rank after another and rounds once to
    the element type; integers add in int64 and wrap. MAX and MIN are exact.
    """
    values = [decode(np.ascontiguousarray(b), dtype) for b in blocks]
    acc = values[0].copy()
    for v in values[1:]:
        if op == SUM:
            acc = acc + v  # float32 + float32 or int64 + int64: the accumulator type stays
        elif op == MAX:
            acc = np.maximum(acc, v)
        elif op == MIN:
            acc = np.minimum(acc, v)
        else:
            raise ValueError(f"reduce op {op} is not supported by the kernel API")
    return encode(acc, dtype)


# ---------------------------------------------------------------- layouts


def _at(buf: np.ndarray, base: int, start: int, count: int, size: int) -> np.ndarray:
    """The bytes of ``count`` elements at element ``start`` of the buffer at byte ``base``."""
    lo = base + start * size
    return buf[lo : lo + count * size]


def _stride(stride: int, count: int) -> int:
    """``stride(x)`` of the spec: strideCount if > 0, else the count."""
    return stride if stride > 0 else count


def all_reduce(
    sends: Buffers,
    recvs: Buffers,
    *,
    dtype: int,
    count: int,
    reduce_op: int,
    repeat: int,
    send_offsets: Sequence[int],
    recv_offsets: Sequence[int],
) -> list[np.ndarray]:
    """Round r: reduce ``count`` elements at sendBuf + r*count over ranks into recvBuf + r*count."""
    size = ELEM_SIZE[dtype]
    out = [np.array(r, copy=True) for r in recvs]
    for r in range(repeat):
        blocks = [_at(s, send_offsets[k], r * count, count, size) for k, s in enumerate(sends)]
        result = reduce_blocks(blocks, dtype, reduce_op)
        for k, dst in enumerate(out):
            _at(dst, recv_offsets[k], r * count, count, size)[:] = result
    return out


def _pairwise(
    sends: Buffers,
    recvs: Buffers,
    *,
    dtype: int,
    repeat: int,
    send_offsets: Sequence[int],
    recv_offsets: Sequence[int],
    skip_local: bool,
    place: Callable[[int, int, int], tuple[int, int, int]],
) -> list[np.ndarray]:
    """Copy a block from every sender i to every receiver j in each round r.

    ``place(r, i, j)`` gives ``(send start, receive start, count)`` in elements;
    with ``skip_local`` a rank's block to itself is not copied.
    """
    size = ELEM_SIZE[dtype]
    out = [np.array(r, copy=True) for r in recvs]
    for r in range(repeat):
        for j, dst in enumerate(out):
            for i, src in enumerate(sends):
                if skip_local and i == j:
                    continue
                src_start, dst_start, count = place(r, i, j)
                block = _at(src, send_offsets[i], src_start, count, size)
                _at(dst, recv_offsets[j], dst_start, count, size)[:] = block
    return out


def _strided(
    sends: Buffers,
    recvs: Buffers,
    *,
    count: int,
    stride: int,
    send_by_peer: bool,
    skip_local: bool = False,
    **common: Any,
) -> list[np.ndarray]:
    """AllGather and AlltoAll: round r puts rank i's block at recvBuf_j + r*count + i*stride.

    The block is read at sendBuf_i + r*count, plus j*stride for AlltoAll
    (``send_by_peer``), where rank i keeps one block per receiver j.
    ``common``: ``dtype``, ``repeat``, ``send_offsets``, ``recv_offsets``.
    """
    step = _stride(stride, count)
    send_step = step if send_by_peer else 0
    return _pairwise(
        sends,
        recvs,
        skip_local=skip_local,
        place=lambda r, i, j: (r * count + j * send_step, r * count + i * step, count),
        **common,
    )


def all_gather(sends: Buffers, recvs: Buffers, **kwargs: Any) -> list[np.ndarray]:
    """Round r: rank i's block at sendBuf_i + r*count lands at recvBuf + r*count + i*stride."""
    return _strided(sends, recvs, send_by_peer=False, **kwargs)


def reduce_scatter(
    sends: Buffers,
    recvs: Buffers,
    *,
    dtype: int,
    count: int,
    reduce_op: int,
    stride: int,
    repeat: int,
    send_offsets: Sequence[int],
    recv_offsets: Sequence[int],
) -> list[np.ndarray]:
    """Round r: rank j gets, at recvBuf_j + r*count, the reduction of sendBuf_k + r*count + j*stride."""
    size = ELEM_SIZE[dtype]
    step = _stride(stride, count)
    out = [np.array(r, copy=True) for r in recvs]
    for r in range(repeat):
        for j, dst in enumerate(out):
            blocks = [
                _at(s, send_offsets[k], r * count + j * step, count, size)
                for k, s in enumerate(sends)
            ]
            _at(dst, recv_offsets[j], r * count, count, size)[:] = reduce_blocks(
                blocks, dtype, reduce_op
            )
    return out


def all_to_all(sends: Buffers, recvs: Buffers, **kwargs: Any) -> list[np.ndarray]:
    """Round r: rank j stores rank i's block i->j (at j*stride) at recvBuf_j + r*count + i*stride."""
    return _strided(sends, recvs, send_by_peer=True, **kwargs)


def all_to_all_v(
    sends: Buffers,
    recvs: Buffers,
    *,
    send_counts: Sequence[Sequence[int]],
    sdispls: Sequence[Sequence[int]],
    recv_counts: Sequence[Sequence[int]],
    rdispls: Sequence[Sequence[int]],
    **common: Any,
) -> list[np.ndarray]:
    """Rank i sends sendCounts_i[j] elements at sdispls_i[j] (+ r*count) to rank j's rdispls_j[i].

    The arrays are indexed ``[rank][peer]``; ``recv_counts[j][i]`` must equal
    ``send_counts[i][j]``.
    """

    def place(r: int, i: int, j: int) -> tuple[int, int, int]:
        n = send_counts[i][j]
        if recv_counts[j][i] != n:
            raise ValueError(f"sendCounts_{i}[{j}] != recvCounts_{j}[{i}]")
        return sdispls[i][j] + r * n, rdispls[j][i] + r * n, n

    return _pairwise(sends, recvs, skip_local=False, place=place, **common)
