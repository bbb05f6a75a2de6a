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
from _common import compare, init_hccl, launch_on, op_tiling, rank_data, run_sample, sender_of

import hccl_py as hp
from hccl_py import AIV, HcclDataType, Mc2CcTiling, Mc2InitTiling, TilingData

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
        hccl = init_hccl(tiling, "alltoAllCcTiling")
        handleId = hccl.AlltoAll[True](xGM, yGM, dataCount, FP16)
        hccl.Wait(handleId)
        hp.SyncAll()
        hccl.Finalize()


def alltoall_tiled(xGM, yGM, workspaceGM, tilingGM):
    """Multi-round: tiles of 128 with repeat 2, then the 100-element tail; strideCount 356."""
    tiling = hp.GET_TILING_DATA_WITH_STRUCT(AlltoAllCustomTilingData, tilingGM)
    if hp.g_coreType == AIV:
        hccl = init_hccl(tiling, "alltoAllCcTiling")
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
    return op_tiling(AlltoAllCustomTilingData(), alltoAllCcTiling="AlltoAll")


def main() -> list[str]:
    rank, n = hp.get_rank(), hp.get_world_size()
    verdicts = []
    for name, kernel, per_peer in (
        ("non-tiled", alltoall_custom, dataCount),
        ("multi-round", alltoall_tiled, strideCount),
    ):
        sends = [rank_data(r, n * per_peer).reshape(n, per_peer) for r in range(n)]
        expected = np.stack([sends[i][rank] for i in range(n)])
        y = launch_on(kernel, sends[rank], n * per_peer, make_tiling())
        senders = sender_of(y.cpu().numpy()[::per_peer])
        verdicts.append(compare(name, y, expected, f"received blocks from ranks {senders}"))
    return verdicts


if __name__ == "__main__":
    run_sample(main)
