"""The documentation's AllGather kernels, ported line for line: non-tiled and multi-round.

Run: ``python samples/all_gather_custom.py`` (4 emulated ranks),
``python -m hccl_py run -n 8 samples/all_gather_custom.py``, or under msrun /
torchrun on Ascend. Each rank holds 300 FP16 values; after the AllGather every
rank holds rank 0's 300 values, then rank 1's, ... The multi-round kernel sends
two tiles of 128 (one Prepare, repeat 2) and a tail of 44 with strideCount 300,
so that every tile lands inside its sender's 300-element block.
"""

import numpy as np
from _common import WORLD_GROUP, compare, on_device, rank_data, run_sample, sender_of, zeros

import hccl_py as hp
from hccl_py import (
    AIV,
    HCCL_CMD_ALLGATHER,
    HCCL_SUCCESS,
    Hccl,
    HcclDataType,
    Mc2CcTiling,
    Mc2CcTilingConfig,
    Mc2InitTiling,
    TilingData,
    offsetof,
)

ELEMS = 300  # per rank
TILE = 128  # multi-round kernel: two tiles of 128 and a tail of 44
FP16 = HcclDataType.HCCL_DATA_TYPE_FP16
SIZEOF_HALF = 2


class AllGatherCustomTilingData(TilingData):
    _fields_ = [("mc2InitTiling", Mc2InitTiling), ("allGatherCcTiling", Mc2CcTiling)]


def all_gather_custom(xGM, yGM, workspaceGM, tilingGM):
    """Non-tiled: one AllGather<true> of all 300 elements."""
    tiling = hp.GET_TILING_DATA_WITH_STRUCT(AllGatherCustomTilingData, tilingGM)
    if hp.g_coreType == AIV:
        hccl = Hccl()
        contextGM = hp.GetHcclContext(0)
        hccl.InitV2(contextGM, tiling)
        if (
            hccl.SetCcTilingV2(offsetof(AllGatherCustomTilingData, "allGatherCcTiling"))
            != HCCL_SUCCESS
        ):
            return
        handleId = hccl.AllGather[True](xGM, yGM, ELEMS, FP16, 0)
        hccl.Wait(handleId)
        hp.SyncAll()
        hccl.Finalize()


def all_gather_tiled(xGM, yGM, workspaceGM, tilingGM):
    """Multi-round: tiles of 128 with repeat 2, then the 44-element tail; strideCount 300."""
    tiling = hp.GET_TILING_DATA_WITH_STRUCT(AllGatherCustomTilingData, tilingGM)
    if hp.g_coreType == AIV:
        hccl = Hccl()
        contextGM = hp.GetHcclContext(0)
        hccl.InitV2(contextGM, tiling)
        if (
            hccl.SetCcTilingV2(offsetof(AllGatherCustomTilingData, "allGatherCcTiling"))
            != HCCL_SUCCESS
        ):
            return
        tileNum = ELEMS // TILE
        tailLen = ELEMS % TILE
        handleId = hccl.AllGather[True](xGM, yGM, TILE, FP16, ELEMS, tileNum)
        xGM += TILE * tileNum * SIZEOF_HALF
        yGM += TILE * tileNum * SIZEOF_HALF
        tailHandleId = hccl.AllGather[True](xGM, yGM, tailLen, FP16, ELEMS, 1)
        for _ in range(tileNum):
            hccl.Wait(handleId)
        hccl.Wait(tailHandleId)
        hp.SyncAll()
        hccl.Finalize()


def make_tiling() -> AllGatherCustomTilingData:
    """Host side: fill the init tiling and the AllGather cc tiling."""
    tiling = AllGatherCustomTilingData()
    mc2CcTilingConfig = Mc2CcTilingConfig(
        WORLD_GROUP, HCCL_CMD_ALLGATHER, "AllGather=level0:doublering"
    )
    mc2CcTilingConfig.GetTiling(tiling.mc2InitTiling)
    mc2CcTilingConfig.GetTiling(tiling.allGatherCcTiling)
    return tiling


def main() -> list[str]:
    rank, n = hp.get_rank(), hp.get_world_size()
    expected = np.concatenate([rank_data(r, ELEMS) for r in range(n)])
    verdicts = []
    for name, kernel in (("non-tiled", all_gather_custom), ("multi-round", all_gather_tiled)):
        x, y = on_device(rank_data(rank, ELEMS)), zeros(ELEMS * n)
        hp.launch(kernel, x, y, None, make_tiling(), block_dim=8)
        senders = sender_of(y.cpu().numpy()[::ELEMS])
        verdicts.append(compare(name, y, expected, f"received blocks from ranks {senders}"))
    return verdicts


if __name__ == "__main__":
    run_sample(main)
