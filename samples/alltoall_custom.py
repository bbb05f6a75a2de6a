"""The documentation's AlltoAll kernels, ported line for line: non-tiled and multi-round.

Run: ``python samples/alltoall_custom.py`` (4 emulated ranks),
``python -m hccl_py run -n 8 samples/alltoall_custom.py``, or under msrun /
torchrun on Ascend. Rank i sends its block j to rank j, which stores it as its
block i.

- ``non-tiled``: ``dataCount = 128`` elements per peer.
- ``multi-round``: 356 elements per peer, cut into two tiles of 128 (one
  Prepare, repeat 2) and a tail of 100; ``strideCount = 2*128 + 100`` keeps
  every tile inside its 356-element peer block on both sides.
"""

import numpy as np
from _common import WORLD_GROUP, compare, on_device, rank_data, run_sample, sender_of, zeros

import hccl_py as hp
from hccl_py import (
    AIV,
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

dataCount = 128  # non-tiled: elements exchanged with each peer
tileLen = 128
tileNum = 2
tailLen = 100
strideCount = tileLen * tileNum + tailLen  # multi-round: elements exchanged with each peer
FP16 = HcclDataType.HCCL_DATA_TYPE_FP16
SIZEOF_HALF = 2


class AlltoAllCustomTilingData(TilingData):
    _fields_ = [("mc2InitTiling", Mc2InitTiling), ("alltoAllCcTiling", Mc2CcTiling)]


def alltoall_custom(xGM, yGM, workspaceGM, tilingGM):
    """Non-tiled: one AlltoAll<true> of dataCount elements per peer."""
    tiling = hp.GET_TILING_DATA_WITH_STRUCT(AlltoAllCustomTilingData, tilingGM)
    if hp.g_coreType == AIV:
        hccl = Hccl()
        contextGM = hp.GetHcclContext(0)
        hccl.InitV2(contextGM, tiling)
        if (
            hccl.SetCcTilingV2(offsetof(AlltoAllCustomTilingData, "alltoAllCcTiling"))
            != HCCL_SUCCESS
        ):
            return
        handleId = hccl.AlltoAll[True](xGM, yGM, dataCount, FP16)
        hccl.Wait(handleId)
        hp.SyncAll()
        hccl.Finalize()


def alltoall_tiled(xGM, yGM, workspaceGM, tilingGM):
    """Multi-round: tiles of 128 with repeat 2, then the 100-element tail; strideCount 356."""
    tiling = hp.GET_TILING_DATA_WITH_STRUCT(AlltoAllCustomTilingData, tilingGM)
    if hp.g_coreType == AIV:
        hccl = Hccl()
        contextGM = hp.GetHcclContext(0)
        hccl.InitV2(contextGM, tiling)
        if (
            hccl.SetCcTilingV2(offsetof(AlltoAllCustomTilingData, "alltoAllCcTiling"))
            != HCCL_SUCCESS
        ):
            return
        handleId = hccl.AlltoAll[True](xGM, yGM, tileLen, FP16, strideCount, tileNum)
        xGM += tileLen * tileNum * SIZEOF_HALF
        yGM += tileLen * tileNum * SIZEOF_HALF
        tailHandleId = hccl.AlltoAll[True](xGM, yGM, tailLen, FP16, strideCount, 1)
        for _ in range(tileNum):
            hccl.Wait(handleId)
        hccl.Wait(tailHandleId)
        hp.SyncAll()
        hccl.Finalize()


def make_tiling() -> AlltoAllCustomTilingData:
    """Host side: fill the init tiling and the AlltoAll cc tiling."""
    tiling = AlltoAllCustomTilingData()
    mc2CcTilingConfig = Mc2CcTilingConfig(
        WORLD_GROUP, HCCL_CMD_ALLTOALL, "AlltoAll=level0:fullmesh;level1:pairwise"
    )
    mc2CcTilingConfig.GetTiling(tiling.mc2InitTiling)
    mc2CcTilingConfig.GetTiling(tiling.alltoAllCcTiling)
    return tiling


def main() -> list[str]:
    rank, n = hp.get_rank(), hp.get_world_size()
    verdicts = []
    for name, kernel, per_peer in (
        ("non-tiled", alltoall_custom, dataCount),
        ("multi-round", alltoall_tiled, strideCount),
    ):
        sends = [rank_data(r, n * per_peer).reshape(n, per_peer) for r in range(n)]
        expected = np.stack([sends[i][rank] for i in range(n)])
        x, y = on_device(sends[rank]), zeros(n * per_peer)
        hp.launch(kernel, x, y, None, make_tiling(), block_dim=8)
        senders = sender_of(y.cpu().numpy()[::per_peer])
        verdicts.append(compare(name, y, expected, f"received blocks from ranks {senders}"))
    return verdicts


if __name__ == "__main__":
    run_sample(main)
