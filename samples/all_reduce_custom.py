"""The documentation's AllReduce kernels, ported line for line: non-tiled and multi-round.

Run: ``python samples/all_reduce_custom.py`` (4 emulated ranks),
``python -m hccl_py run -n 8 samples/all_reduce_custom.py``, or under msrun /
torchrun on Ascend. Each rank holds 300 FP16 values; after the AllReduce (SUM)
every rank holds their element-wise sum. The multi-round kernel reduces two
tiles of 128 elements with one Prepare (repeat 2) and a 44-element tail with a
second Prepare; AllReduce rounds are contiguous, so no strideCount is needed.
"""

import numpy as np
from _common import WORLD_GROUP, compare, on_device, rank_data, run_sample, zeros

import hccl_py as hp
from hccl_py import (
    AIV,
    HCCL_CMD_ALLREDUCE,
    HCCL_REDUCE_SUM,
    HCCL_SUCCESS,
    Hccl,
    HcclDataType,
    HcclReduceOp,
    Mc2CcTiling,
    Mc2CcTilingConfig,
    Mc2InitTiling,
    TilingData,
    offsetof,
)

ELEMS = 300  # per rank
FP16 = HcclDataType.HCCL_DATA_TYPE_FP16
SUM = HcclReduceOp.HCCL_REDUCE_SUM


class AllReduceCustomTilingData(TilingData):
    _fields_ = [("mc2InitTiling", Mc2InitTiling), ("allReduceCcTiling", Mc2CcTiling)]


def all_reduce_custom(xGM, yGM, workspaceGM, tilingGM):
    """Non-tiled: one AllReduce<true> of all 300 elements."""
    tiling = hp.GET_TILING_DATA_WITH_STRUCT(AllReduceCustomTilingData, tilingGM)
    if hp.g_coreType == AIV:
        hccl = Hccl()
        contextGM = hp.GetHcclContext(0)
        hccl.InitV2(contextGM, tiling)
        if (
            hccl.SetCcTilingV2(offsetof(AllReduceCustomTilingData, "allReduceCcTiling"))
            != HCCL_SUCCESS
        ):
            return
        handleId = hccl.AllReduce[True](xGM, yGM, ELEMS, FP16, SUM)
        hccl.Wait(handleId)
        hp.SyncAll()
        hccl.Finalize()


def all_reduce_tiled(xGM, yGM, workspaceGM, tilingGM):
    """Multi-round: repeat 2 on 128-element tiles, then one 44-element tail."""
    tiling = hp.GET_TILING_DATA_WITH_STRUCT(AllReduceCustomTilingData, tilingGM)
    if hp.g_coreType == AIV:
        hccl = Hccl()
        contextGM = hp.GetHcclContext(0)
        hccl.InitV2(contextGM, tiling)
        if (
            hccl.SetCcTilingV2(offsetof(AllReduceCustomTilingData, "allReduceCcTiling"))
            != HCCL_SUCCESS
        ):
            return
        tileNum = 2  # number of full tiles
        tileLen = 128  # elements per full tile
        tailNum = 1  # number of tail tiles
        tailLen = 44  # elements of the tail tile
        kSizeOfFloat16 = 2
        handleId1 = hccl.AllReduce[True](xGM, yGM, tileLen, FP16, SUM, tileNum)
        xGM += tileLen * tileNum * kSizeOfFloat16
        yGM += tileLen * tileNum * kSizeOfFloat16
        handleId2 = hccl.AllReduce[True](xGM, yGM, tailLen, FP16, SUM, tailNum)
        for _ in range(tileNum):
            hccl.Wait(handleId1)
        for _ in range(tailNum):
            hccl.Wait(handleId2)
        hp.SyncAll()
        hccl.Finalize()


def make_tiling() -> AllReduceCustomTilingData:
    """Host side: fill the init tiling and the AllReduce cc tiling (reduce type SUM)."""
    tiling = AllReduceCustomTilingData()
    mc2CcTilingConfig = Mc2CcTilingConfig(
        WORLD_GROUP, HCCL_CMD_ALLREDUCE, "AllReduce=level0:doublering", HCCL_REDUCE_SUM
    )
    mc2CcTilingConfig.GetTiling(tiling.mc2InitTiling)
    mc2CcTilingConfig.GetTiling(tiling.allReduceCcTiling)
    return tiling


def main() -> list[str]:
    rank, n = hp.get_rank(), hp.get_world_size()
    expected = np.sum([rank_data(r, ELEMS).astype(np.float32) for r in range(n)], axis=0)
    expected = expected.astype(np.float16)
    verdicts = []
    for name, kernel in (("non-tiled", all_reduce_custom), ("multi-round", all_reduce_tiled)):
        x, y = on_device(rank_data(rank, ELEMS)), zeros(ELEMS)
        hp.launch(kernel, x, y, None, make_tiling(), block_dim=8)
        verdicts.append(compare(name, y, expected, f"sum of {n} ranks, y[:3] = {y[:3].tolist()}"))
    return verdicts


if __name__ == "__main__":
    run_sample(main)
