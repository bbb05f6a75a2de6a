"""A deliberately wrong multi-round AllGather, for docs/debugging.md: a strideCount mistake.

Run: ``python samples/debug_stride_mistake.py`` (4 emulated ranks; FAILS on
purpose) and ``python samples/debug_stride_mistake.py --fixed`` (PASSES).
The kernel is the documentation's multi-round AllGather (two tiles of 128
FP16 values with repeat 2, then a tail of 44, strideCount 300) with one
copy-paste slip: the tail's Prepare passes the tile length as strideCount.
No call fails and no sanitizer check fires (each task on its own is valid);
the numbers are wrong. docs/debugging.md finds the slip with the layout
picture and the timeline:

    python -m hccl_py layout -n 4 --png layout.png samples/debug_stride_mistake.py
    python -m hccl_py run -n 4 --trace trace.json samples/debug_stride_mistake.py
"""

import sys

import numpy as np
from _common import compare, on_device, rank_data, run_sample, zeros
from all_gather_custom import (
    ELEMS,
    FP16,
    SIZEOF_HALF,
    TILE,
    AllGatherCustomTilingData,
    make_tiling,
)

import hccl_py as hp
from hccl_py import AIV, Hccl, offsetof

FIXED = "--fixed" in sys.argv


def all_gather_tiled(xGM, yGM, tilingGM):
    """Multi-round AllGather; the tail's strideCount is the slip (TILE instead of ELEMS)."""
    tiling = hp.GET_TILING_DATA_WITH_STRUCT(AllGatherCustomTilingData, tilingGM)
    if hp.g_coreType == AIV:
        hccl = Hccl()
        hccl.InitV2(hp.GetHcclContext(0), tiling)
        hccl.SetCcTilingV2(offsetof(AllGatherCustomTilingData, "allGatherCcTiling"))
        tileNum = ELEMS // TILE
        tailLen = ELEMS % TILE
        handleId = hccl.AllGather[True](xGM, yGM, TILE, FP16, ELEMS, tileNum)
        xGM += TILE * tileNum * SIZEOF_HALF
        yGM += TILE * tileNum * SIZEOF_HALF
        tailStride = ELEMS if FIXED else TILE  # the slip: copied from a line above
        tailHandleId = hccl.AllGather[True](xGM, yGM, tailLen, FP16, tailStride, 1)
        for _ in range(tileNum):
            hccl.Wait(handleId)
        hccl.Wait(tailHandleId)
        hp.SyncAll()
        hccl.Finalize()


def main() -> list[str]:
    rank, n = hp.get_rank(), hp.get_world_size()
    expected = np.concatenate([rank_data(r, ELEMS) for r in range(n)])
    x, y = on_device(rank_data(rank, ELEMS)), zeros(ELEMS * n)
    hp.launch(all_gather_tiled, x, y, make_tiling())
    got = y.cpu().numpy()
    wrong = np.flatnonzero(got != expected)
    detail = f"first wrong element {wrong[0]} of {got.size}" if wrong.size else "every block"
    return [compare("multi-round", y, expected, detail)]


if __name__ == "__main__":
    run_sample(main)
