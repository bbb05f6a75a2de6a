"""Rank-order reductions of the rows of dtypes the servers do not reduce (float64, int64, uint8
... bool): what ``all_reduce`` and ``reduce_scatter_tensor`` compute after gathering every rank's
data, exactly, in any dtype the framework collectives carry."""

from __future__ import annotations

import torch

from ..core.constants import HcclReduceOp


def local_reduce(stacked: torch.Tensor, reduce_op: HcclReduceOp) -> torch.Tensor:
    """Reduce ``stacked`` over dim 0 (the ranks) in rank order, keeping its dtype exactly.

    bool: SUM and MAX are a logical or, MIN a logical and. Integers sum in
    int64 and wrap to the element type, floating point sums in float64. MAX and
    MIN compare in a type torch orders where it has no comparison of its own
    (unsigned 16 to 64 bits, float8): the same element wins.
    """
    dtype = stacked.dtype
    if dtype == torch.bool:
        return stacked.any(0) if reduce_op != HcclReduceOp.HCCL_REDUCE_MIN else stacked.all(0)
    if reduce_op == HcclReduceOp.HCCL_REDUCE_SUM:
        wide = torch.float64 if dtype.is_floating_point else torch.int64
        acc = _as(stacked[0], wide)
        for k in range(1, stacked.shape[0]):
            acc = acc + _as(stacked[k], wide)
        return _as(acc, dtype)
    combine = torch.maximum if reduce_op == HcclReduceOp.HCCL_REDUCE_MAX else torch.minimum
    keys = _ordered(stacked)
    acc = keys[0]
    for k in range(1, keys.shape[0]):
        acc = combine(acc, keys[k])
    return _unordered(acc, dtype)


#: The unsigned types torch cannot compare, and uint64's bit that makes its order int64's.
_UNORDERED_UINTS = (torch.uint16, torch.uint32)
_UINT64_FLIP = -(1 << 63)


def _as(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``t`` as ``dtype``; uint64 and int64 reinterpret their bits (sums wrap alike)."""
    if {t.dtype, dtype} == {torch.uint64, torch.int64}:
        return t.view(dtype)
    return t.to(dtype)


def _ordered(t: torch.Tensor) -> torch.Tensor:
    """``t`` in a dtype torch.maximum compares, in the same order as its values."""
    if t.dtype in _UNORDERED_UINTS:
        return t.to(torch.int64)
    if t.dtype == torch.uint64:
        return t.view(torch.int64) ^ _UINT64_FLIP
    if t.dtype.is_floating_point and t.element_size() == 1:  # float8: exact in float32
        return t.to(torch.float32)
    return t


def _unordered(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """What :func:`_ordered` gave back as ``dtype``."""
    if dtype == torch.uint64:
        return (t ^ _UINT64_FLIP).view(torch.uint64)
    return t if t.dtype == dtype else t.to(dtype)
