"""SetCcTilingV2 keeps its parse of a cc tiling by the tiling's bytes: a launch whose tiling
bytes differ from an earlier launch's is checked on its own bytes, however alike the rest."""

from __future__ import annotations

import pytest
import torch
from cases import RUN_TIMEOUT
from expect import expects_warning

import hccl_py as hp
from hccl_py import (
    GET_TILING_DATA_WITH_STRUCT,
    HCCL_CMD_ALLGATHER,
    GetBlockIdx,
    GetHcclContext,
    Hccl,
    Mc2CcTiling,
    Mc2CcTilingConfig,
    Mc2InitTiling,
    SyncAll,
    TilingData,
    offsetof,
)
from hccl_py.kernel.context import current_rank_context

ALG = "AllGather=level0:doublering"


class Tiling(TilingData):
    _fields_ = [("mc2InitTiling", Mc2InitTiling), ("ccTiling", Mc2CcTiling)]


def _tiling(group: str) -> Tiling:
    tiling = Tiling()
    cfg = Mc2CcTilingConfig(group, HCCL_CMD_ALLGATHER, ALG)
    assert cfg.GetTiling(tiling.mc2InitTiling) == 0 and cfg.GetTiling(tiling.ccTiling) == 0
    return tiling


def _kernel(tilingGM) -> None:
    hccl = Hccl()
    tiling = GET_TILING_DATA_WITH_STRUCT(Tiling, tilingGM)
    hccl.InitV2(GetHcclContext(0), tiling)
    hccl.SetCcTilingV2(offsetof(Tiling, "ccTiling"))
    hccl.Finalize()


def _launches(groups: list[str]) -> list[int]:
    """One launch per group name; the warnings this rank has after each."""
    seen = []
    for group in groups:
        hp.launch(_kernel, _tiling(group))
        seen.append(len(current_rank_context().warnings))
    return seen


@expects_warning("group-name")
def test_a_later_launch_with_other_tiling_bytes_is_checked_on_them() -> None:
    world, other = "hccl_world_group", "group_0_1"
    out = hp.run(
        _launches, args=([world, world, other, world, other],), world_size=2, timeout=RUN_TIMEOUT
    )
    for rank in (0, 1):
        # only the launches whose tiling names another domain warn, each time
        assert out[rank] == [0, 0, 1, 1, 2]
        assert [w.kind for w in out.warnings[rank]] == ["group-name", "group-name"]


def _prepare_per_core(sendGM, recvGM, tilingGM, data_types) -> None:
    hccl = Hccl()
    tiling = GET_TILING_DATA_WITH_STRUCT(Tiling, tilingGM)
    hccl.InitV2(GetHcclContext(0), tiling)
    hccl.SetCcTilingV2(offsetof(Tiling, "ccTiling"))
    core = GetBlockIdx()
    if core:
        SyncAll()  # core 0 validated its Prepare first
    hccl.AllGather(sendGM, recvGM, 8, data_types[core], 0, 1)
    if not core:
        SyncAll()


def _two_cores(data_types: tuple) -> None:
    send, recv = torch.zeros(32, dtype=torch.uint8), torch.zeros(64, dtype=torch.uint8)
    hp.launch(_prepare_per_core, send, recv, _tiling("hccl_world_group"), data_types, block_dim=2)


def test_a_core_whose_arguments_differ_in_type_is_validated_on_its_own() -> None:
    # HCCL_DATA_TYPE_INT16 is 1: True equals it and hashes alike, but is no data type
    with pytest.raises(hp.WorldError) as info:
        hp.run(_two_cores, args=((1, True),), world_size=1, timeout=RUN_TIMEOUT)
    err = info.value.failures[0]
    assert isinstance(err, hp.HcclUsageError)
    assert "the data type must be an int (an HcclDataType) (got a bool (True))" in str(err)


def _reads_per_call(tilings: list) -> dict[str, int]:
    """How often InitV2, SetCcTilingV2 and AllGather read the init tiling (its bytes), with
    debugMode 1 (HCCL_ONLY_COMPUTE) so that the AllGather needs no peer."""
    from hccl_py.client import binding, setup

    reads: dict[str, int] = {}
    now = ["none"]
    real = setup.tiling_bytes

    def counted(*args: object, **kwargs: object) -> bytes:
        reads[now[0]] = reads.get(now[0], 0) + 1
        return real(*args, **kwargs)

    def kernel(xGM: hp.GmAddr, yGM: hp.GmAddr) -> None:
        hccl = Hccl()
        now[0] = "InitV2"
        hccl.InitV2(GetHcclContext(0), tilings[0])
        now[0] = "SetCcTilingV2"
        hccl.SetCcTilingV2(offsetof(Tiling, "ccTiling"))
        now[0] = "AllGather"
        hccl.AllGather[True](xGM, yGM, 4, hp.HcclDataType.HCCL_DATA_TYPE_FP32, 0, 1)
        now[0] = "rest"
        hccl.Finalize()

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(setup, "tiling_bytes", counted)
        patch.setattr(binding, "tiling_bytes", counted)
        hp.launch(kernel, torch.zeros(4), torch.zeros(8))
    return reads


@expects_warning("compute-only")
def test_each_call_reads_the_init_tiling_once() -> None:
    """InitV2 checks the tiling and reads debugMode in one read (before, two)."""
    tiling = _tiling("hccl_world_group")
    tiling.mc2InitTiling.debugMode = 1
    (reads,) = hp.run(lambda: _reads_per_call([tiling]), world_size=1, timeout=RUN_TIMEOUT)
    assert reads == {"InitV2": 1, "SetCcTilingV2": 1, "AllGather": 1}
