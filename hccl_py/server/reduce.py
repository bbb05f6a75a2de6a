"""Deterministic reductions over ranks.

Ranks are combined one after another in rank order (0, 1, ..., N-1), so the
result never depends on thread timing. Precision: floating-point SUM
accumulates in float32 (FP16 and BF16 inputs are widened) and rounds once to
the element type at the end; integer SUM accumulates in int64 and wraps to the
element type (two's complement), as integer adders do. MAX and MIN are exact;
a NaN in any rank gives NaN, always the dtype's default one (payloads are not kept),
and they order -0.0 below +0.0 (IEEE 754-2019's maximum and minimum): the MAX of
-0.0 and +0.0 is +0.0, their MIN -0.0.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch

from hccl_py.core.constants import HcclReduceOp

#: Elements whose NaNs :func:`_one_nan` (or zeros, :func:`_signed_zeros`) it fixes at a time
#: (a mask of 256 KiB).
NAN_CHUNK = 1 << 18


def accumulator_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype SUM accumulates in for elements of ``dtype``."""
    return torch.float32 if dtype.is_floating_point else torch.int64


def reduce_ranks(
    stacked: torch.Tensor | Sequence[torch.Tensor],
    op: HcclReduceOp,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Reduce the ranks' tensors (``stacked[k]`` is rank k's), in rank order, to their dtype.

    ``stacked`` is one tensor with ranks first or a sequence of equally shaped
    tensors (views into each rank's memory, so nothing is stacked first).
    ``out`` (their dtype and shape, sharing no byte with them) receives the
    result, and is returned; when SUM accumulates in a wider type the result is
    reduced aside and copied in, else it is reduced in ``out`` (no temporary).
    """
    dtype = stacked[0].dtype
    if op == HcclReduceOp.HCCL_REDUCE_SUM:
        wide = accumulator_dtype(dtype)
        acc = out if out is not None and wide == dtype else stacked[0].to(wide, copy=True)
        if acc is out:
            acc.copy_(stacked[0])
        for k in range(1, len(stacked)):
            acc += stacked[k]
        return _one_nan(_into(acc.to(dtype), out))
    combine = {
        HcclReduceOp.HCCL_REDUCE_MAX: torch.maximum,
        HcclReduceOp.HCCL_REDUCE_MIN: torch.minimum,
    }[op]
    acc = stacked[0].clone() if out is None else out.copy_(stacked[0])
    for k in range(1, len(stacked)):
        acc = combine(acc, stacked[k], out=acc)
    return _one_nan(_signed_zeros(acc, stacked, op == HcclReduceOp.HCCL_REDUCE_MAX))


def _one_nan(result: torch.Tensor) -> torch.Tensor:
    """``result`` with every NaN made the dtype's default NaN, in place.

    torch's vectorised maximum, minimum and narrowing casts give other NaN payloads than
    their scalar tails, and where a tail falls depends on how the elements are cut up: the
    emulator reduces a round whole, gloo's exact mode chunk by chunk. One NaN keeps the two
    bit-identical.
    """
    if not result.is_floating_point() or torch.isfinite(result.sum()):
        return result  # no NaN (nor an infinity, nor a sum too large): one pass, no temporary
    for (piece,) in _pieces([result]):
        piece.masked_fill_(torch.isnan(piece), float("nan"))
    return result


def _pieces(tensors: Sequence[torch.Tensor]) -> Iterator[tuple[torch.Tensor, ...]]:
    """Equally shaped ``tensors`` cut alike into pieces of :data:`NAN_CHUNK` elements, so that
    masks of a piece stay small (whole, in one piece, where one is not contiguous)."""
    if not all(t.is_contiguous() for t in tensors):
        yield tuple(tensors)
        return
    flat = [t.view(-1) for t in tensors]
    for start in range(0, flat[0].numel(), NAN_CHUNK):
        yield tuple(t[start : start + NAN_CHUNK] for t in flat)


def _signed_zeros(
    result: torch.Tensor, stacked: torch.Tensor | Sequence[torch.Tensor], is_max: bool
) -> torch.Tensor:
    """``result`` of a MAX (``is_max``) or MIN, with every zero signed as IEEE 754-2019 says,
    in place: a MAX zero is -0.0 only where no rank's zero is +0.0, a MIN zero -0.0 where
    some rank's is.

    On a tie of +0.0 and -0.0, torch's vectorised maximum and minimum keep another operand
    than their scalar tails, so the sign would depend on how the elements are cut up (the
    emulator reduces a round whole, gloo's exact mode chunk by chunk).
    """
    if not result.is_floating_point():
        return result
    for got, *parts in _pieces([result, *stacked]):
        zero = got == 0
        if not zero.any():
            continue
        # MAX: no rank has +0.0 there; MIN: some rank has -0.0
        negative = zero.clone() if is_max else torch.zeros_like(zero)
        for part in parts:
            signed = torch.signbit(part)
            if is_max:
                negative &= signed | (part != 0)
            else:
                negative |= signed & (part == 0)
        got.masked_fill_(zero, 0.0).masked_fill_(negative & zero, -0.0)
    return result


def _into(result: torch.Tensor, out: torch.Tensor | None) -> torch.Tensor:
    """``result``, copied into ``out`` when there is one and it is not ``result`` already."""
    if out is None or out is result:
        return result
    return out.copy_(result)
