"""A refused Prepare leaves every core of a kernel with the same handle ids (strict=False).

Every core of a kernel calls Prepare and gets the same handle ids (spec
section 4); only the sending core sends. hccl_py's own refusals that the
official client does not make (a buffer in another rank's memory, the AlltoAll
rank limit of Atlas A3, the 256 MiB task limit of Ascend 950) are decided on
every core from the arguments, so a lenient run returns -1 on every core and
the next Prepare gets the same handle everywhere; no deadlock follows. A
refusal only the sending core can make (it needs the task, or GM the others do
not read) raises even in a lenient run when the launch has other cores.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from cases import RUN_TIMEOUT, init_hccl, make_tiling

import hccl_py as hp
from hccl_py import (
    Hccl,
    HcclCMDType,
    HcclDataType,
    HcclReduceOp,
    Mc2CcTiling,
    Mc2CcTilingConfig,
    Mc2InitTiling,
)
from hccl_py.client.convert import Limits, PrepareParam, task_fields
from hccl_py.core.errors import InvalidCall
from hccl_py.core.gm import Allocation, GmAddr
from hccl_py.core.platform import PLATFORMS
from hccl_py.ops import OPS
from hccl_py.ops.batch_write import ITEM_DTYPES

FP32 = HcclDataType.HCCL_DATA_TYPE_FP32
INT8 = HcclDataType.HCCL_DATA_TYPE_INT8
SUM = HcclReduceOp.HCCL_REDUCE_SUM
BIG = 256 * 1024 * 1024 + 64  # one byte more than Ascend 950 allows in a task, and some


class BwTiling(hp.TilingData):
    _fields_ = [("init", Mc2InitTiling), ("bw", Mc2CcTiling)]


def _foreign_kernel(xGM: Any, yGM: Any, tilingGM: Any, record: list) -> None:
    """Every Prepare-calling core: a refused AllReduce from the peer's window, then a good one."""
    if hp.g_coreType != hp.AIV:
        return  # a mixed kernel's AIC cores take no part
    hccl = init_hccl(Hccl(), tilingGM, ops=("AllReduce",))
    peer = 1 - hccl.GetRankId()
    bad = hccl.AllReduce(hccl.GetWindowsInAddr(peer), yGM, 4, FP32, SUM)
    why = hccl.last_error
    good = hccl.AllReduce[True](xGM, yGM, 4, FP32, SUM)
    record.append((hp.GetBlockIdx(), bad, good, hccl.Wait(good), why))
    hp.SyncAll()
    hccl.Finalize()


def foreign_rank(kernel_type: str) -> tuple[list, list]:
    rank = hp.get_rank()
    x = torch.full((4,), 1.0 + rank)
    y = torch.zeros(4)
    record: list = []
    hp.launch(_foreign_kernel, x, y, make_tiling(), record, block_dim=2, kernel_type=kernel_type)
    return sorted(record), y.tolist()


@pytest.mark.parametrize("kernel_type", ["aiv", "mix_aic_1_2"])
def test_foreign_buffer_is_refused_on_every_core(backend: str, kernel_type: str) -> None:
    out = hp.run(
        foreign_rank,
        world_size=2,
        backend=backend,
        strict=False,
        timeout=RUN_TIMEOUT,
        args=(kernel_type,),
    )
    cores = 2 if kernel_type == "aiv" else 4
    for rank, (record, y) in enumerate(out):
        assert [core for core, *_ in record] == sorted(range(cores))
        for core, bad, good, waited, why in record:
            assert (bad, good, waited) == (-1, 0, 0), f"rank {rank} core {core}"
            assert f"sendBuf points into rank {1 - rank}'s memory" in why
        assert y == [3.0] * 4  # 1 + 2: the good AllReduce ran once


def _big_kernel(bigGM: Any, xGM: Any, yGM: Any, tilingGM: Any, record: list) -> None:
    hccl = init_hccl(Hccl(), tilingGM, ops=("AllReduce",))
    bad = hccl.AllReduce(bigGM, bigGM, BIG, INT8, SUM)
    why = hccl.last_error
    good = hccl.AllReduce[True](xGM, yGM, 4, INT8, SUM)
    record.append((hp.GetBlockIdx(), bad, good, hccl.Wait(good), why))
    hp.SyncAll()
    hccl.Finalize()


def big_rank() -> tuple[list, list]:
    big = torch.empty(BIG, dtype=torch.int8)  # never touched: the task is refused
    y = torch.zeros(4, dtype=torch.int8)
    record: list = []
    hp.launch(_big_kernel, big, torch.ones(4, dtype=torch.int8), y, make_tiling(), record,
              block_dim=2)  # fmt: skip
    return sorted(record), y.tolist()


def test_950_task_limit_is_refused_on_every_core() -> None:
    out = hp.run(big_rank, world_size=2, platform="950", strict=False, timeout=RUN_TIMEOUT)
    for record, y in out:
        assert [core for core, *_ in record] == [0, 1]
        for core, bad, good, waited, why in record:
            assert (bad, good, waited) == (-1, 0, 0), f"core {core}"
            assert f"one task's data exceeds {256 * 1024 * 1024} bytes on Ascend 950" in why
        assert y == [2] * 4


def _limits(platform: str, rank_dim: int) -> Limits:
    return Limits(
        platform=PLATFORMS[platform],
        kernel_api=True,
        has_tiling=True,
        handles_used=0,
        syncs_used=0,
        rank_dim=rank_dim,
        rank=0,
    )


def _alltoall(buf: GmAddr) -> PrepareParam:
    spec = next(s for s in OPS.values() if s.name == "AlltoAll")
    return PrepareParam(spec, buf, buf, FP32, 1, count=1, stride=0)


def test_a3_alltoall_rank_limit_needs_no_task() -> None:
    """The 129-rank AlltoAll is refused from the arguments, as on every core (no world needed)."""
    buf = GmAddr(Allocation(torch.zeros(1024), 0))
    assert task_fields(_alltoall(buf), _limits("A3", 128))["count"] == 1
    with pytest.raises(InvalidCall, match="Atlas A3 allows at most 128 ranks in AlltoAll") as bad:
        task_fields(_alltoall(buf), _limits("A3", 129))
    assert bad.value.rule == "platform-limit"
    assert task_fields(_alltoall(buf), _limits("950", 129))["count"] == 1  # A3 only


def test_strict_run_still_raises_the_refusal() -> None:
    with pytest.raises(hp.WorldError, match="sendBuf points into rank") as err:
        hp.run(foreign_rank, world_size=2, timeout=RUN_TIMEOUT, args=("aiv",))
    assert "HcclUsageError" in str(err.value)
    assert "deadlock" not in str(err.value)


def _batch_write_rank() -> None:
    """A2 BatchWrite into a GM tensor (not a window), from an AIV kernel of two cores."""

    def kernel(out: Any, tilingGM: Any) -> None:
        h = Hccl()
        h.InitV2(hp.GetHcclContext(0), hp.GET_TILING_DATA_WITH_STRUCT(BwTiling, tilingGM))
        assert h.SetCcTilingV2(hp.offsetof(BwTiling, "bw")) == 0
        me = h.GetRankId()
        src = h.GetWindowsOutAddr(me)
        items = np.zeros(1, dtype=ITEM_DTYPES["A2"])
        items[0] = (int(src), int(out), 1, int(FP32), 1 - me)
        raw = torch.from_numpy(items.view(np.uint8).copy())
        hp.gm_tensor(src + 4096, torch.uint8, raw.numel())[:] = raw
        h.BatchWrite[True](src + 4096, 1)

    t = BwTiling()
    cfg = Mc2CcTilingConfig(
        "hccl_world_group", HcclCMDType.HCCL_CMD_BATCH_WRITE, "BatchWrite=level0:fullmesh"
    )
    assert cfg.GetTiling(t.init) == 0 and cfg.GetTiling(t.bw) == 0
    hp.launch(kernel, torch.zeros(4), t, block_dim=2)


def test_a_refusal_only_the_sending_core_makes_raises_in_a_lenient_run() -> None:
    """The items are read by the sending core alone: block 1 got handle 0, so -1 would drift."""
    with pytest.raises(hp.WorldError) as err:
        hp.run(
            _batch_write_rank, world_size=2, ranks_per_server=1, strict=False, timeout=RUN_TIMEOUT
        )
    text = str(err.value)
    assert "HcclUsageError" in text and "is not a communication window" in text
    assert "only the sending core can check this" in text
    assert "deadlock" not in text


def _validated_once_kernel(xGM: Any, yGM: Any, tilingGM: Any, record: list) -> None:
    """Block 0 prepares an AllReduce into y; then block 1 the same call into the peer's window,
    at y's offset in its allocation. Arguments every core passes alike are validated once per
    launch; a buffer in another allocation is validated anew."""
    hccl = init_hccl(Hccl(), tilingGM, ops=("AllReduce",))
    peer = hccl.GetWindowsInAddr(1 - hccl.GetRankId())
    if hp.GetBlockIdx() == 0:
        handle = hccl.AllReduce[True](xGM, yGM, 4, FP32, SUM)
        record.append((0, handle, hccl.Wait(handle), hccl.last_error))
        hp.SyncAll()
    else:
        hp.SyncAll()
        record.append((1, hccl.AllReduce(xGM, peer, 4, FP32, SUM), None, hccl.last_error))
    hp.SyncAll()
    hccl.Finalize()


def validated_once_rank() -> tuple[list, list]:
    y = torch.zeros(4)
    record: list = []
    hp.launch(_validated_once_kernel, torch.full((4,), 1.0 + hp.get_rank()), y, make_tiling(),
              record, block_dim=2)  # fmt: skip
    return sorted(record), y.tolist()


def test_a_receive_buffer_in_another_allocation_is_validated_anew() -> None:
    out = hp.run(validated_once_rank, world_size=2, strict=False, timeout=RUN_TIMEOUT)
    for rank, (record, y) in enumerate(out):
        assert record == [
            (0, 0, 0, None),
            (1, -1, None, f"[rank {rank}, domain hccl_world_group, op AllReduce] AllReduce: "
             f"recvBuf points into rank {1 - rank}'s memory, not this rank's"),
        ]  # fmt: skip
        assert y == [3.0] * 4
