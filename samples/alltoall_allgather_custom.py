"""The documentation's two-domain kernel: AlltoAll on domain 0, then AllGather on domain 1.

Run: ``python samples/alltoall_allgather_custom.py`` (4 emulated ranks),
``python -m hccl_py run -n 8 samples/alltoall_allgather_custom.py``, or under
msrun / torchrun on Ascend A3 (InterHcclGroupSync is an A3 call).

Domain 0 is the world: an AlltoAll of ``dataCount`` elements per peer writes
``alltoallGM``. Domain 1 pairs neighbouring ranks (0-1, 2-3, ...; the whole
world when the world size is odd): its AllGather reads ``alltoallGM``, so
``hccl1.InterHcclGroupSync(0, handleId0)`` makes it start only after the
AlltoAll has finished. The host passes the two domains with
``hp.launch(..., groups={0: hp.world_group(), 1: g})``.
"""

from ctypes import c_uint32

import numpy as np
from _common import WORLD_GROUP, compare, on_device, rank_data, run_sample, zeros

import hccl_py as hp
from hccl_py import (
    AIV,
    HCCL_CMD_ALLGATHER,
    HCCL_CMD_ALLTOALL,
    HCCL_SUCCESS,
    Hccl,
    HcclDataType,
    Mc2CcTiling,
    Mc2CcTilingConfig,
    Mc2InitTiling,
    TilingData,
    offsetof,
)

PLATFORM = "A3"  # InterHcclGroupSync is an Atlas A3 call
DATA_COUNT = 64  # AlltoAll elements per peer


class AlltoAllAllGatherCustomTilingData(TilingData):
    _fields_ = [
        ("mc2InitTiling", Mc2InitTiling),
        ("alltoallTiling", Mc2CcTiling),
        ("allgatherTiling", Mc2CcTiling),
        ("dataCount", c_uint32),
    ]


def alltoall_allgather_custom(xGM, alltoallGM, allgatherGM, workspaceGM, tilingGM):
    """Domain 0 (context 0) runs the AlltoAll, domain 1 (context 1) the AllGather."""
    tilingData = hp.GET_TILING_DATA_WITH_STRUCT(AlltoAllAllGatherCustomTilingData, tilingGM)
    dtype = HcclDataType.HCCL_DATA_TYPE_FP16
    if hp.g_coreType == AIV:
        hccl0 = Hccl()
        contextGM0 = hp.GetHcclContext(0)
        hccl0.InitV2(contextGM0, tilingData)
        if (
            hccl0.SetCcTilingV2(offsetof(AlltoAllAllGatherCustomTilingData, "alltoallTiling"))
            != HCCL_SUCCESS
        ):
            return
        hccl1 = Hccl()
        contextGM1 = hp.GetHcclContext(1)
        hccl1.InitV2(contextGM1, tilingData)
        if (
            hccl1.SetCcTilingV2(offsetof(AlltoAllAllGatherCustomTilingData, "allgatherTiling"))
            != HCCL_SUCCESS
        ):
            return
        dataCount = tilingData.dataCount
        rankDim = hccl0.GetRankDim()

        handleId0 = hccl0.AlltoAll[True](xGM, alltoallGM, dataCount, dtype)
        # every later task of domain 1 waits until task handleId0 of domain 0 has finished
        hccl1.InterHcclGroupSync(0, handleId0)
        handleId1 = hccl1.AllGather[True](alltoallGM, allgatherGM, dataCount * rankDim, dtype, 0)

        hccl0.Wait(handleId0)
        hccl1.Wait(handleId1)
        hp.SyncAll()
        hccl0.Finalize()
        hccl1.Finalize()


def pair_groups(n: int) -> list[list[int]]:
    """Domain 1's rank lists: neighbouring pairs, or the whole world when ``n`` is odd."""
    return [[r, r + 1] for r in range(0, n, 2)] if n % 2 == 0 else [list(range(n))]


def make_tiling(group1: str) -> AlltoAllAllGatherCustomTilingData:
    """Host side: one config object fills the init tiling and both cc tilings.

    The AlltoAll's cc tiling is on the world group, the AllGather's on ``group1``.
    """
    tiling = AlltoAllAllGatherCustomTilingData(dataCount=DATA_COUNT)
    mc2CcTilingConfig = Mc2CcTilingConfig(
        WORLD_GROUP, HCCL_CMD_ALLTOALL, "AlltoAll=level0:fullmesh;level1:pairwise"
    )
    mc2CcTilingConfig.GetTiling(tiling.mc2InitTiling)
    mc2CcTilingConfig.GetTiling(tiling.alltoallTiling)
    mc2CcTilingConfig.SetGroupName(group1)
    mc2CcTilingConfig.SetOpType(HCCL_CMD_ALLGATHER)
    mc2CcTilingConfig.SetAlgConfig("AllGather=level0:doublering")
    mc2CcTilingConfig.GetTiling(tiling.allgatherTiling)
    return tiling


def main() -> list[str]:
    rank, n = hp.get_rank(), hp.get_world_size()
    groups = [hp.new_group(ranks) for ranks in pair_groups(n)]  # every rank creates every group
    g = next(group for group in groups if rank in group.ranks)

    sends = [rank_data(r, n * DATA_COUNT).reshape(n, DATA_COUNT) for r in range(n)]
    received = {r: np.concatenate([sends[i][r] for i in range(n)]) for r in range(n)}
    expected_alltoall = received[rank]
    expected_allgather = np.concatenate([received[r] for r in g.ranks])

    x = on_device(sends[rank])
    y, z = zeros(n * DATA_COUNT), zeros(g.size * n * DATA_COUNT)  # alltoallGM, allgatherGM
    tiling = make_tiling(g.name)
    domains = {0: hp.world_group(), 1: g}
    hp.launch(alltoall_allgather_custom, x, y, z, None, tiling, block_dim=8, groups=domains)
    return [
        compare("alltoall", y, expected_alltoall, "domain 0 = world"),
        compare("allgather", z, expected_allgather, f"domain 1 = ranks {list(g.ranks)}"),
    ]


if __name__ == "__main__":
    run_sample(main, platform=PLATFORM)
