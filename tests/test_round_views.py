"""The executor's per-task round views are the views it made round by round before.

A task's rounds are cut from one strided view of all of them, made once per task
(``emu.executor._round_view``). Each must address exactly the bytes that the
round's own blocks name (the layout, an independent numpy computation here), and
a round written through it must change those bytes and no others.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hccl_py.backends.emu import executor

from hccl_py.core import layout
from hccl_py.core.constants import HcclCMDType, HcclDataType, HcclReduceOp
from hccl_py.core.gm import Allocation, GmAddr
from hccl_py.core.group import Group
from hccl_py.core.task import Task

NBYTES = 4096


def _task(count: int, stride: int, repeat: int, offset: int, op: HcclCMDType) -> Task:
    send = GmAddr(Allocation(torch.zeros(NBYTES, dtype=torch.uint8), 0), offset)
    recv = GmAddr(Allocation(torch.zeros(NBYTES, dtype=torch.uint8), 0), offset)
    return Task(
        op=op,
        domain=Group((0, 1, 2, 3), "world"),
        rank=0,
        rank_dim=4,
        handle=0,
        seq=0,
        send=send,
        recv=recv,
        dtype=HcclDataType.HCCL_DATA_TYPE_FP16,
        count=count,
        reduce_op=HcclReduceOp.HCCL_REDUCE_SUM,
        stride=stride,
        repeat=repeat,
    )


CASES = [
    # count, stride (elements), repeat, byte offset of both buffers
    (4, 0, 1, 0),
    (4, 0, 3, 0),
    (4, 16, 3, 0),
    (3, 0, 4, 2),  # 6-byte blocks at an odd-sized gap: only bytes fit
    (8, 10, 2, 4),  # rounds 20 bytes apart: narrower than each round alone allows
    (2, 5, 5, 6),
]


@pytest.mark.parametrize("op", [HcclCMDType.HCCL_CMD_ALLGATHER, HcclCMDType.HCCL_CMD_ALLTOALL])
@pytest.mark.parametrize(("count", "stride", "repeat", "offset"), CASES)
@pytest.mark.parametrize("side", ["send", "recv"])
@pytest.mark.parametrize("wide", [False, True])
def test_each_round_view_holds_exactly_its_blocks(
    op: HcclCMDType, count: int, stride: int, repeat: int, offset: int, side: str, wide: bool
) -> None:
    task = _task(count, stride, repeat, offset, op)
    data = task.memory(side)
    for r in range(repeat):
        starts, sizes = layout.byte_layout(task, side, r)
        want = np.zeros(NBYTES, dtype=bool)
        sizes = np.broadcast_to(sizes, starts.shape)
        for s, n in zip(starts[0].tolist(), sizes[0].tolist(), strict=True):
            want[s : s + n] = True
        view = executor._round_view(task, side, r, wide)
        assert view is not None
        data.zero_()
        view.fill_(-1 if view.dtype != torch.uint8 else 255)
        assert np.array_equal(data.numpy() != 0, want), (r, view.shape, view.stride())
        assert view.view(torch.uint8).shape[0] == want.sum() // int(sizes.flat[0])


def test_rounds_that_do_not_form_one_view_are_made_one_by_one() -> None:
    task = _task(4, 0, 3, 0, HcclCMDType.HCCL_CMD_ALLGATHER)
    task.round_views[("recv", True)] = ()  # as for rounds of different shapes
    view = executor._round_view(task, "recv", 2, True)
    blocks = layout.round_blocks(task, "recv", 2)
    assert (
        view is not None
        and view.data_ptr() == task.memory("recv")[int(blocks.starts[0]) :].data_ptr()
    )
