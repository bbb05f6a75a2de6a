"""Inputs of the benchmark and the numpy reference that scores every result.

Element ``i`` of rank ``r``'s send buffer is a small integer computed from
``i`` and ``r`` alone (:func:`values`), exact in every element type and under
any summation order, and never periodic in ``i`` (a misplaced block shows).
The reference rebuilds every peer's input with numpy and computes what each
rank must receive, block by block; it shares no code with hccl_py's executors.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np
import torch

from ..core.constants import HcclDataType, HcclReduceOp
from .ops import Plan

_T = HcclDataType


@dataclass(frozen=True)
class BenchType:
    """One element type: its HCCL, torch and numpy (reference) forms."""

    name: str
    hccl_type: HcclDataType
    torch_type: torch.dtype
    #: The reference's numpy type (float32 for bfloat16, which numpy lacks).
    numpy_type: type
    signed: bool = True

    @property
    def size(self) -> int:
        """Bytes per element."""
        return torch.empty((), dtype=self.torch_type).element_size()


#: ``-d`` names, as hccl_test spells them.
TYPES: dict[str, BenchType] = {
    t.name: t
    for t in (
        BenchType("int8", _T.HCCL_DATA_TYPE_INT8, torch.int8, np.int8),
        BenchType("int16", _T.HCCL_DATA_TYPE_INT16, torch.int16, np.int16),
        BenchType("int32", _T.HCCL_DATA_TYPE_INT32, torch.int32, np.int32),
        BenchType("int64", _T.HCCL_DATA_TYPE_INT64, torch.int64, np.int64),
        BenchType("uint8", _T.HCCL_DATA_TYPE_UINT8, torch.uint8, np.uint8, signed=False),
        BenchType("fp16", _T.HCCL_DATA_TYPE_FP16, torch.float16, np.float16),
        BenchType("fp32", _T.HCCL_DATA_TYPE_FP32, torch.float32, np.float32),
        BenchType("fp64", _T.HCCL_DATA_TYPE_FP64, torch.float64, np.float64),
        BenchType("bfp16", _T.HCCL_DATA_TYPE_BFP16, torch.bfloat16, np.float32),
    )
}
#: Other spellings ``-d`` accepts.
TYPE_ALIASES = {"bf16": "bfp16", "float": "fp32", "half": "fp16", "float32": "fp32"}

#: ``-o`` names: the reduce ops of the kernel API.
REDUCE_OPS: dict[str, HcclReduceOp] = {
    "sum": HcclReduceOp.HCCL_REDUCE_SUM,
    "max": HcclReduceOp.HCCL_REDUCE_MAX,
    "min": HcclReduceOp.HCCL_REDUCE_MIN,
}


def _unfold(idx: np.ndarray, base: int) -> np.ndarray:
    """``i + i // base + i // base**2 + ...``: mod ``base``, the digit sum of i (aperiodic)."""
    out = idx.copy()
    top = int(idx[-1]) if idx.size else 0
    step = base
    while step <= top:
        out += idx // step
        step *= base
    return out


@functools.lru_cache(maxsize=512)
def _values(rank: int, start: int, stop: int, reduces: bool, kind: BenchType) -> np.ndarray:
    idx = np.arange(start, stop, dtype=np.int64)
    base, span, offset = (5, 3, 2) if reduces else (251, 13, 125)
    raw = (_unfold(idx, base) + rank * span) % base - (offset if kind.signed else 0)
    out = raw.astype(kind.numpy_type)
    out.flags.writeable = False
    return out


def values(rank: int, start: int, stop: int, reduces: bool, kind: BenchType) -> np.ndarray:
    """Elements ``start:stop`` of ``rank``'s send buffer (read-only; in [-2, 2] if ``reduces``)."""
    return _values(rank, start, stop, reduces, kind)


def send_tensor(plan: Plan, rank: int, kind: BenchType, device: torch.device | str) -> torch.Tensor:
    """``rank``'s whole send buffer as a tensor of the element type on ``device``."""
    host = torch.from_numpy(np.array(values(rank, 0, plan.send, plan.op.spec.reduces, kind)))
    return host.to(device=device, dtype=kind.torch_type)


@functools.lru_cache(maxsize=8)
def _reduced(
    ranks: int, start: int, stop: int, kind: BenchType, reduce_op: HcclReduceOp
) -> np.ndarray:
    wide = np.float64 if np.issubdtype(kind.numpy_type, np.floating) else np.int64
    acc = values(0, start, stop, True, kind).astype(wide)
    for peer in range(1, ranks):
        block = values(peer, start, stop, True, kind)
        if reduce_op == HcclReduceOp.HCCL_REDUCE_SUM:
            acc += block
        elif reduce_op == HcclReduceOp.HCCL_REDUCE_MAX:
            np.maximum(acc, block, out=acc)
        else:
            np.minimum(acc, block, out=acc)
    out = acc.astype(kind.numpy_type)
    out.flags.writeable = False
    return out


def expected(
    plan: Plan, rank: int, kind: BenchType, reduce_op: HcclReduceOp
) -> Iterator[tuple[slice, np.ndarray]]:
    """What ``rank`` must hold in its receive buffer, as (slice, values) pairs."""
    name, n, stride = plan.op.name, plan.ranks, plan.stride
    mine = slice(rank * stride, (rank + 1) * stride)
    if name == "AllReduce":
        yield slice(0, plan.recv), _reduced(n, 0, plan.send, kind, reduce_op)
    elif name == "ReduceScatter":
        yield slice(0, plan.recv), _reduced(n, mine.start, mine.stop, kind, reduce_op)
    elif name == "AllGather":
        for peer in range(n):
            yield slice(peer * stride, (peer + 1) * stride), values(peer, 0, plan.send, False, kind)
    elif name == "AlltoAll":
        for peer in range(n):
            got = slice(peer * stride, (peer + 1) * stride)
            yield got, values(peer, mine.start, mine.stop, False, kind)
    else:
        rdispls = plan.rdispls(rank)
        for peer in range(n):
            length = plan.repeat * int(plan.counts[peer, rank])
            start = int(plan.sdispls(peer)[rank])
            got = slice(int(rdispls[peer]), int(rdispls[peer]) + length)
            yield got, values(peer, start, start + length, False, kind)


def count_wrong(received: torch.Tensor, blocks: Iterable[tuple[slice, np.ndarray]]) -> int:
    """Elements of ``received`` that differ from the reference blocks (NaN counts as wrong)."""
    host = received.detach().cpu()
    got = (host.float() if host.dtype == torch.bfloat16 else host).numpy().reshape(-1)
    return sum(int(np.count_nonzero(got[where] != want)) for where, want in blocks)


def clear_caches() -> None:
    """Drop the cached inputs and reductions (a sweep's large blocks)."""
    _values.cache_clear()
    _reduced.cache_clear()
