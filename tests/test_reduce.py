"""The server's rank-order reduction (hccl_py/server/reduce.py): the same bits however the
elements are cut up, as gloo's exact mode cuts a round into chunks that the emulator reduces whole."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hccl_py.core.constants import HcclReduceOp
from hccl_py.server import reduce
from hccl_py.server.reduce import reduce_ranks

OPS = [HcclReduceOp.HCCL_REDUCE_SUM, HcclReduceOp.HCCL_REDUCE_MAX, HcclReduceOp.HCCL_REDUCE_MIN]


@pytest.mark.parametrize("op", OPS, ids=lambda op: op.name)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_nan_bits_do_not_depend_on_where_the_elements_are_cut(
    op: HcclReduceOp, dtype: torch.dtype
) -> None:
    """torch's vectorised kernels and their scalar tails give NaNs of other payloads: reduced
    whole or in chunks of 37 elements, rank 0's NaNs give the same bytes, the default NaN."""
    n = 1001
    parts = [torch.full((n,), float("nan"), dtype=dtype), torch.arange(n).to(dtype)]
    whole = reduce_ranks(parts, op)
    cut = torch.cat([reduce_ranks([p[i : i + 37] for p in parts], op) for i in range(0, n, 37)])
    assert torch.equal(whole.view(torch.uint8), cut.view(torch.uint8))
    nan = torch.tensor([float("nan")], dtype=dtype)
    assert torch.equal(whole[:1].view(torch.uint8), nan.view(torch.uint8))
    assert torch.isnan(whole).all()


def test_numbers_are_left_alone() -> None:
    parts = [torch.tensor([1.0, -2.0, 3.0]), torch.tensor([4.0, 5.0, -6.0])]
    assert reduce_ranks(parts, HcclReduceOp.HCCL_REDUCE_MAX).tolist() == [4.0, 5.0, 3.0]
    assert reduce_ranks(parts, HcclReduceOp.HCCL_REDUCE_SUM).tolist() == [5.0, 3.0, -3.0]


def _ieee_reference(parts: list[np.ndarray], op: HcclReduceOp) -> np.ndarray:
    """numpy's MAX or MIN with IEEE 754-2019's zeros: -0.0 orders below +0.0."""
    stacked = np.stack(parts).astype(np.float64)
    if op == HcclReduceOp.HCCL_REDUCE_MAX:  # +0.0 where some rank has +0.0
        value, zero = (
            stacked.max(axis=0),
            np.where(((stacked == 0) & ~np.signbit(stacked)).any(0), 0.0, -0.0),
        )
    else:  # -0.0 where some rank has -0.0
        value, zero = (
            stacked.min(axis=0),
            np.where(((stacked == 0) & np.signbit(stacked)).any(0), -0.0, 0.0),
        )
    return np.where(value == 0, zero, value)


@pytest.mark.parametrize("op", OPS[1:], ids=lambda op: op.name)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("layout", ["contiguous", "strided", "chunked"])
def test_zeros_of_max_and_min_are_signed_as_ieee_says(
    op: HcclReduceOp, dtype: torch.dtype, layout: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tie of +0.0 and -0.0 keeps another operand in torch's vectorised loop than in its
    scalar tail: the emulator (a round whole) and gloo's exact mode (chunk by chunk) gave
    other signs. Now MAX gives +0.0 where any rank has +0.0, MIN -0.0 where any has -0.0,
    however the elements are cut up, as numpy says."""
    if layout == "chunked":  # the chunks of the sign fix itself
        monkeypatch.setattr(reduce, "NAN_CHUNK", 64)
    n, ranks = 1000, 3
    gen = torch.Generator().manual_seed(7)
    parts = []
    for rank in range(ranks):
        x = torch.randn(2 * n, generator=gen)
        x[::2] = torch.where(torch.arange(n) % (rank + 2) == 0, -0.0, 0.0)  # ties everywhere
        x[1::7] = torch.where(torch.arange(x[1::7].numel()) % 2 == rank % 2, -0.0, -1.0)
        parts.append(x.to(dtype))
    if layout == "strided":
        parts = [p[::2] for p in parts]
    want = _ieee_reference([p.float().numpy() for p in parts], op)
    whole = reduce_ranks(parts, op)
    cut = torch.cat(
        [reduce_ranks([p[i : i + 37] for p in parts], op) for i in range(0, len(whole), 37)]
    )
    for got in (whole, cut):
        np.testing.assert_array_equal(got.float().numpy(), want)
        np.testing.assert_array_equal(np.signbit(got.float().numpy()), np.signbit(want))
    assert (
        (want == 0).sum() > 100
        and np.signbit(want[want == 0]).any()
        and not np.signbit(want[want == 0]).all()
    )
