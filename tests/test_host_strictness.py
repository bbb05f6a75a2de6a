"""Host-side checks: a failed tiling call raises at the host call in strict runs; algConfig and
groupName mistakes are warnings that name what was expected."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from cases import RUN_TIMEOUT
from expect import expects_warning

import hccl_py as hp
from hccl_py import (
    HCCL_CMD_ALLGATHER,
    HCCL_DATA_TYPE_FP32,
    HCCL_SUCCESS,
    Hccl,
    Mc2CcTiling,
    Mc2CcTilingConfig,
    Mc2InitTiling,
    TilingData,
    offsetof,
)


class Tiling(TilingData):
    _fields_ = [("mc2InitTiling", Mc2InitTiling), ("allGatherCcTiling", Mc2CcTiling)]


def _bad_setter() -> int:
    cfg = Mc2CcTilingConfig("hccl_world_group", HCCL_CMD_ALLGATHER, "AllGather=level0:doublering")
    return cfg.SetOpType(0)


def test_a_failed_setter_raises_at_the_host_call_when_strict(backend: str) -> None:
    with pytest.raises(hp.WorldError) as info:
        hp.run(_bad_setter, world_size=1, backend=backend, timeout=RUN_TIMEOUT)
    err = info.value.failures[0]
    assert isinstance(err, hp.HcclUsageError)
    assert "Mc2CcTilingConfig.SetOpType failed" in str(err) and "0 < opType < 21" in str(err)


def test_a_failed_setter_returns_1_when_not_strict_and_outside_hp_run() -> None:
    assert hp.run(_bad_setter, world_size=1, strict=False, timeout=RUN_TIMEOUT) == [1]
    assert _bad_setter() == 1


def _kernel(xGM: Any, yGM: Any, tilingGM: Any) -> None:
    hccl = Hccl()
    hccl.InitV2(hp.GetHcclContext(0), tilingGM)
    if hccl.SetCcTilingV2(offsetof(Tiling, "allGatherCcTiling")) != HCCL_SUCCESS:
        return
    handleId = hccl.AllGather[True](xGM, yGM, 4, HCCL_DATA_TYPE_FP32, 0)
    hccl.Wait(handleId)
    hp.SyncAll()
    hccl.Finalize()


def _gather(group_name: str | None, alg: str) -> list[float]:
    n = hp.get_world_size()
    group = hp.new_group(range(n))  # a domain of its own, named group_0_1
    tiling = Tiling()
    cfg = Mc2CcTilingConfig(group_name or group.name, HCCL_CMD_ALLGATHER, alg)
    cfg.GetTiling(tiling.mc2InitTiling)
    cfg.GetTiling(tiling.allGatherCcTiling)
    x = torch.full((4,), float(hp.get_rank()))
    y = torch.zeros(4 * n)
    hp.launch(_kernel, x, y, tiling, groups={0: group})
    return y.tolist()


def test_matching_group_and_alg_config_give_no_warning() -> None:
    out = hp.run(
        _gather, world_size=2, timeout=RUN_TIMEOUT, args=(None, "AllGather=level0:doublering")
    )
    assert out.warnings == {}
    assert out[0] == [0.0] * 4 + [1.0] * 4


def test_warnings_are_shown_through_python_warnings_on_the_emulator() -> None:
    with pytest.warns(hp.HcclWarning, match="groupName 'hccl_world_group'"):
        hp.run(
            _gather,
            world_size=2,
            timeout=RUN_TIMEOUT,
            args=("hccl_world_group", "AllGather=level0:doublering"),
        )


@expects_warning("group-name")
def test_a_tiling_for_another_domain_is_a_warning(backend: str) -> None:
    out = hp.run(
        _gather,
        world_size=2,
        backend=backend,
        timeout=RUN_TIMEOUT,
        args=("hccl_world_group", "AllGather=level0:doublering"),
    )
    assert sorted(out.warnings) == [0, 1]
    for rank, (w,) in out.warnings.items():
        assert (w.kind, w.rank, w.domain, w.op) == ("group-name", rank, "group_0_1", "AllGather")
        assert "'group_0_1'" in str(w)


@expects_warning("alg-config")
@pytest.mark.parametrize(
    ("alg", "fact"),
    [
        ("AllReduce=level0:doublering", "names AllReduce, but the tiling's op is AllGather"),
        ("AllGather:doublering", "is not of the form AllGather=level0:<algorithm>"),
        ("AllGather=level7:ring", "is not of the form"),
    ],
)
def test_an_unknown_alg_config_is_a_warning(backend: str, alg: str, fact: str) -> None:
    out = hp.run(
        _gather, world_size=2, platform="A3", backend=backend, timeout=RUN_TIMEOUT, args=(None, alg)
    )
    assert sorted(out.warnings) == [0, 1]
    for found in out.warnings.values():
        assert [w.kind for w in found] == ["alg-config"]
        assert fact in found[0].reason
    with pytest.raises(hp.WorldError) as info:
        hp.run(
            _gather,
            world_size=2,
            backend=backend,
            timeout=RUN_TIMEOUT,
            args=(None, alg),
            platform="A3",
            warnings_as_errors={"alg-config"},
        )
    assert fact in str(info.value)


def _half_alltoallv_tiling() -> None:
    """The 950 MoE dispatch's host tiling: AlltoAll's algConfig string for HALF_ALLTOALLV."""
    tiling = Tiling()
    cfg = Mc2CcTilingConfig(
        "hccl_world_group",
        hp.HcclCMDType.HCCL_CMD_HALF_ALLTOALLV,
        "AlltoAll=level0:fullmesh;level1:pairwise",
    )
    assert cfg.GetTiling(tiling.mc2InitTiling) == 0
    assert cfg.GetTiling(tiling.allGatherCcTiling) == 0


@pytest.mark.parametrize("platform", ["A2", "950"])
def test_alg_config_gives_no_warning_where_it_is_a_reserved_field(platform: str) -> None:
    """SetAlgConfig: on A2 and Ascend 950 algConfig is reserved and has no effect."""
    out = hp.run(_half_alltoallv_tiling, world_size=1, platform=platform)
    assert out.warnings == {}
