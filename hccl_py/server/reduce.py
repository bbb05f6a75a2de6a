"""Deterministic reductions over ranks.

Ranks are combined one after another in rank order (0, 1, ..., N-1), so the
result never depends on thread timing. Precision: floating-point SUM
accumulates in float32 (FP16 and BF16 inputs are widened) and rounds once to
the element type at the end; integer SUM accumulates in int64 and wraps to the
element type (two's complement), as integer adders do. MAX and MIN are exact;
a NaN in any rank gives NaN.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from hccl_py.core.constants import HcclReduceOp


def accumulator_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype SUM accumulates in for elements of ``dtype``."""
    return torch.float32 if dtype.is_floating_point else torch.int64


def reduce_ranks(stacked: torch.Tensor | Sequence[torch.Tensor], op: HcclReduceOp) -> torch.Tensor:
    """Reduce the ranks' tensors (``stacked[k]`` is rank k's), in rank order, to their dtype.

    ``stacked`` is one tensor with ranks first or a sequence of equally shaped
    tensors (views into each rank's memory, so nothing is stacked first).
    """
    dtype = stacked[0].dtype
    if op == HcclReduceOp.HCCL_REDUCE_SUM:
        acc = stacked[0].to(accumulator_dtype(dtype), copy=True)
        for k in range(1, len(stacked)):
            acc += stacked[k]
        return acc.to(dtype)
    combine = {
        HcclReduceOp.HCCL_REDUCE_MAX: torch.maximum,
        HcclReduceOp.HCCL_REDUCE_MIN: torch.minimum,
    }[op]
    acc = stacked[0].clone()
    for k in range(1, len(stacked)):
        acc = combine(acc, stacked[k], out=acc)
    return acc
