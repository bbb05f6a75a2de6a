"""The documentation's multi-round ReduceScatter kernels, ported line for line.

Run: ``python samples/reduce_scatter_custom.py`` (4 emulated ranks),
``python -m hccl_py run -n 8 samples/reduce_scatter_custom.py``, or under msrun
/ torchrun on Ascend. Each rank sends ``rankDim * 300`` FP16 values; rank j
receives the sum over all ranks of their block j (300 values). Both kernels cut
the 300 values into three tiles of 100 and use ``strideCount = 300`` so that
round i of rank j reads block j's tile i:

- ``three-prepares``: three Prepares with repeat 1 on advancing addresses;
- ``repeat-3``: one Prepare with repeat 3, committed three times.

Both commit and wait round by round.
"""

import numpy as np
from _common import WORLD_GROUP, compare, on_device, rank_data, run_sample, zeros

import hccl_py as hp
from hccl_py import (
    AIV,
    HCCL_CMD_REDUCE_SCATTER,
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

ELEMS = 300  # received per rank
tileLen = 100
tileNum = 3
strideCount = tileLen * tileNum
FP16 = HcclDataType.HCCL_DATA_TYPE_FP16
SUM = HcclReduceOp.HCCL_REDUCE_SUM
SIZEOF_HALF = 2


class ReduceScatterCustomTilingData(TilingData):
    _fields_ = [("mc2InitTiling", Mc2InitTiling), ("reduceScatterCcTiling", Mc2CcTiling)]


def reduce_scatter_three_prepares(xGM, yGM, workspaceGM, tilingGM):
    """Three Prepares (repeat 1), each tile's addresses advanced by tileLen elements."""
    tiling = hp.GET_TILING_DATA_WITH_STRUCT(ReduceScatterCustomTilingData, tilingGM)
    if hp.g_coreType == AIV:
        hccl = Hccl()
        contextGM = hp.GetHcclContext(0)
        hccl.InitV2(contextGM, tiling)
        if (
            hccl.SetCcTilingV2(offsetof(ReduceScatterCustomTilingData, "reduceScatterCcTiling"))
            != HCCL_SUCCESS
        ):
            return
        handleIds = []
        for _ in range(tileNum):
            handleIds.append(hccl.ReduceScatter(xGM, yGM, tileLen, FP16, SUM, strideCount, 1))
            xGM += tileLen * SIZEOF_HALF
            yGM += tileLen * SIZEOF_HALF
        for i in range(tileNum):
            hccl.Commit(handleIds[i])
            hccl.Wait(handleIds[i])
        hp.SyncAll()
        hccl.Finalize()


def reduce_scatter_repeat(xGM, yGM, workspaceGM, tilingGM):
    """The same rounds as one Prepare with repeat 3."""
    tiling = hp.GET_TILING_DATA_WITH_STRUCT(ReduceScatterCustomTilingData, tilingGM)
    if hp.g_coreType == AIV:
        hccl = Hccl()
        contextGM = hp.GetHcclContext(0)
        hccl.InitV2(contextGM, tiling)
        if (
            hccl.SetCcTilingV2(offsetof(ReduceScatterCustomTilingData, "reduceScatterCcTiling"))
            != HCCL_SUCCESS
        ):
            return
        handleId = hccl.ReduceScatter(xGM, yGM, tileLen, FP16, SUM, strideCount, tileNum)
        for _ in range(tileNum):
            hccl.Commit(handleId)
            hccl.Wait(handleId)
        hp.SyncAll()
        hccl.Finalize()


def make_tiling() -> ReduceScatterCustomTilingData:
    """Host side: fill the init tiling and the ReduceScatter cc tiling (reduce type SUM)."""
    tiling = ReduceScatterCustomTilingData()
    mc2CcTilingConfig = Mc2CcTilingConfig(
        WORLD_GROUP, HCCL_CMD_REDUCE_SCATTER, "ReduceScatter=level0:doublering", HCCL_REDUCE_SUM
    )
    mc2CcTilingConfig.GetTiling(tiling.mc2InitTiling)
    mc2CcTilingConfig.GetTiling(tiling.reduceScatterCcTiling)
    return tiling


def main() -> list[str]:
    rank, n = hp.get_rank(), hp.get_world_size()
    sends = np.stack([rank_data(r, n * ELEMS).astype(np.float32) for r in range(n)])
    expected = sends.sum(axis=0).reshape(n, ELEMS)[rank].astype(np.float16)
    verdicts = []
    for name, kernel in (
        ("three-prepares", reduce_scatter_three_prepares),
        ("repeat-3", reduce_scatter_repeat),
    ):
        x, y = on_device(rank_data(rank, n * ELEMS)), zeros(ELEMS)
        hp.launch(kernel, x, y, None, make_tiling(), block_dim=8)
        verdicts.append(compare(name, y, expected, f"block {rank} summed over {n} ranks"))
    return verdicts


if __name__ == "__main__":
    run_sample(main)
