"""The server's rank-order reduction (hccl_py/server/reduce.py): the same bits however the
elements are cut up, as gloo's exact mode cuts a round into chunks that the emulator reduces whole."""

from __future__ import annotations

import pytest
import torch

from hccl_py.core.constants import HcclReduceOp
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
