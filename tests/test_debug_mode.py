"""SetDebugMode(1), HCCL_ONLY_COMPUTE: communication off, as the AI CPU client runs it.

hccl_aicpu_impl.h skips every poll under ``debugMode_ == HCCL_ONLY_COMPUTE`` (the free
message slot, the commit count, the finished count in Wait and Finalize) and the server does
not communicate (SetDebugMode.md: "1: turn off the high-level API's communication"). So no
data moves, Wait returns 0 once its round is committed, Query reads a finished count that
nobody writes, and Finalize returns. The CCU client never reads debugMode.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from cases import RUN_TIMEOUT
from expect import expects_warning

import hccl_py as hp
from hccl_py import Hccl, HcclCMDType, HcclDataType, HcclReduceOp, Mc2CcTiling, Mc2InitTiling

FP32 = HcclDataType.HCCL_DATA_TYPE_FP32
SUM = HcclReduceOp.HCCL_REDUCE_SUM
N = 4


class Tiling(hp.TilingData):
    _fields_ = [("init", Mc2InitTiling), ("ar0", Mc2CcTiling), ("ar1", Mc2CcTiling)]


def _tiling(debug_mode: int, second_group: str) -> Tiling:
    t = Tiling()
    cfg = hp.Mc2CcTilingConfig(
        "hccl_world_group", HcclCMDType.HCCL_CMD_ALLREDUCE, "", SUM, FP32, FP32
    )
    assert not debug_mode or cfg.SetDebugMode(debug_mode) == 0
    assert cfg.GetTiling(t.init) == 0 and cfg.GetTiling(t.ar0) == 0
    assert cfg.SetGroupName(second_group) == 0 and cfg.GetTiling(t.ar1) == 0
    return t


def _kernel(x: Any, y: Any, tiling: Any, server: int, sync: bool, rec: list) -> None:
    """Two rounds of an AllReduce into y, a task of a second domain behind it by
    InterHcclGroupSync, and a Wait too many."""
    h0, h1 = Hccl(server), Hccl(server)
    h0.InitV2(hp.GetHcclContext(0), tiling)
    h0.SetCcTilingV2(hp.offsetof(Tiling, "ar0"))
    h1.InitV2(hp.GetHcclContext(1), tiling)
    h1.SetCcTilingV2(hp.offsetof(Tiling, "ar1"))
    aicpu = server == hp.HCCL_SERVER_TYPE_AICPU  # the CCU client has no Query
    handle = h0.AllReduce(x, y, N, FP32, SUM, 2)
    if sync:  # not on Ascend 950
        h1.InterHcclGroupSync(0, handle)
    if aicpu:
        rec.append(("query before", h0.Query(handle)))
    later = h1.AllReduce[True](x, y + 2 * N * 4, N, FP32, SUM)
    h0.Commit(handle)
    h0.Commit(handle)
    rec.append(("waits", h0.Wait(handle), h0.Wait(handle), h1.Wait(later)))
    if aicpu:
        rec.append(("query after", h0.Query(handle)))
    h0.Finalize()
    h1.Finalize()


def _main(debug_mode: int, server: int, sync: bool) -> tuple[list, list]:
    group = hp.new_group(range(hp.get_world_size()))
    x = torch.full((2 * N,), float(hp.get_rank() + 1))
    y = torch.full((3 * N,), -1.0)
    rec: list = []
    tiling = _tiling(debug_mode, group.name)
    hp.launch(_kernel, x, y, tiling, server, sync, rec, groups={0: hp.world_group(), 1: group})
    return rec, y.tolist()


def _run(debug_mode: int, backend: str, platform: str, server: int) -> list:
    return hp.run(
        _main,
        world_size=2,
        backend=backend,
        platform=platform,
        timeout=RUN_TIMEOUT,
        args=(debug_mode, server, platform != "950"),
    )


@expects_warning("compute-only")
@pytest.mark.parametrize("platform", ["A3", "950"])
def test_debug_mode_1_moves_no_data_and_waits_for_nothing(backend: str, platform: str) -> None:
    """The AI CPU client (A3; the 950 one reads debugMode too): y keeps its -1s, every Wait is
    0 and Query 0; InterHcclGroupSync orders nothing that runs; every rank warns."""
    result = _run(1, backend, platform, hp.HCCL_SERVER_TYPE_AICPU)
    for rec, y in result:
        assert rec == [("query before", 0), ("waits", 0, 0, 0), ("query after", 0)]
        assert y == [-1.0] * (3 * N)
    said = [str(w) for w in result.all_warnings()]
    assert len(said) == 4, said  # two objects on each of two ranks
    assert all("debugMode is 1 (HCCL_ONLY_COMPUTE" in w and "[compute-only]" in w for w in said)


def test_debug_mode_0_and_the_ccu_client_communicate(backend: str) -> None:
    """Without debugMode 1 the same kernel moves its data; the CCU client ignores debugMode."""
    done = [("waits", 0, 0, 0)]
    for debug_mode, platform, server, want in ((0, "A3", hp.HCCL_SERVER_TYPE_AICPU,
                                                [("query before", 0), *done, ("query after", 2)]),
                                               (1, "950", hp.HCCL_SERVER_TYPE_CCU, done)):  # fmt: skip
        result = _run(debug_mode, backend, platform, server)
        for rec, y in result:
            assert rec == want, (platform, rec)
            assert y == [3.0] * (3 * N), (platform, y)
        assert not result.warnings


def _fine_grained_kernel(x: Any, y: Any, tiling: Any, rec: list) -> None:
    h = Hccl()
    h.InitV2(hp.GetHcclContext(0), tiling)
    h.SetCcTilingV2(hp.offsetof(A2avTiling, "a2av"))
    handle = h.AlltoAllV(x, [1, 1], [0, 1], FP32, y, [1, 1], [0, 1], FP32)
    for _ in range(2):  # stepSize 1: a round is rankDim = 2 steps, one per Commit and Wait
        h.Commit(handle)
        rec.append(h.Wait(handle))
    rec.append(h.Wait(handle))  # nothing committed is left
    h.Finalize()


class A2avTiling(hp.TilingData):
    _fields_ = [("init", Mc2InitTiling), ("a2av", Mc2CcTiling)]


def _fine_grained_main() -> tuple[list, list]:
    t = A2avTiling()
    cfg = hp.Mc2CcTilingConfig("hccl_world_group", HcclCMDType.HCCL_CMD_ALLTOALLV, "")
    assert cfg.SetStepSize(1) == 0 and cfg.SetDebugMode(1) == 0
    assert cfg.GetTiling(t.init) == 0 and cfg.GetTiling(t.a2av) == 0
    rec: list = []
    y = torch.full((2,), -1.0)
    hp.launch(_fine_grained_kernel, torch.ones(2), y, t, rec)
    return rec, y.tolist()


@expects_warning("compute-only")
def test_debug_mode_1_counts_the_steps_of_a_fine_grained_alltoallv() -> None:
    """Commit and Wait still count stepSize steps (hccl_aicpu_impl.h): each of the rankDim
    steps' Commit and Wait is accepted, the Wait after them is -1; no data moves."""
    result = hp.run(_fine_grained_main, world_size=2, platform="A3", strict=False)
    assert list(result) == [([0, 0, -1], [-1.0, -1.0])] * 2
    assert [w.kind for w in result.all_warnings()] == ["compute-only"] * 2  # no extra-commit
