"""A deliberately wrong tiled ReduceScatter, for docs/debugging.md: a send-side strideCount mistake.

Run: ``python samples/debug_send_stride_mistake.py`` (4 emulated ranks; FAILS
on purpose) and ``python samples/debug_send_stride_mistake.py --fixed``
(PASSES). The kernel is the documentation's ReduceScatter with repeat 3
(each rank sends ``rankDim * 300`` FP16 values; rank j receives the sum of
every rank's block j, in three tiles of 100) with one slip: strideCount is the
tile length instead of the block length. No call fails and no sanitizer check
fires; every receive buffer is filled exactly once, so the receive strips of
the layout picture look right. The send strips show the mistake (rounds that
read the same bytes, the second half of every send buffer never read):

    python -m hccl_py layout -n 4 --png layout.png samples/debug_send_stride_mistake.py

Each input value names its sender and its send tile (``rank + 8 * tile``), so
every received tile, a sum over the ranks, says which send tile it was read
from; the sample prints that next to the tile it should have been.
"""

import sys

import numpy as np
from _common import RANK_SPAN, compare, on_device, run_sample, zeros
from reduce_scatter_custom import (
    ELEMS,
    FP16,
    SUM,
    ReduceScatterCustomTilingData,
    make_tiling,
    tileLen,
    tileNum,
)

import hccl_py as hp
from hccl_py import AIV, Hccl, offsetof

FIXED = "--fixed" in sys.argv


def reduce_scatter_tiled(xGM, yGM, workspaceGM, tilingGM):
    """ReduceScatter with repeat 3; strideCount is the slip (tileLen instead of ELEMS)."""
    tiling = hp.GET_TILING_DATA_WITH_STRUCT(ReduceScatterCustomTilingData, tilingGM)
    if hp.g_coreType == AIV:
        hccl = Hccl()
        hccl.InitV2(hp.GetHcclContext(0), tiling)
        hccl.SetCcTilingV2(offsetof(ReduceScatterCustomTilingData, "reduceScatterCcTiling"))
        strideCount = ELEMS if FIXED else tileLen  # the slip: the tile, not the block
        handleId = hccl.ReduceScatter(xGM, yGM, tileLen, FP16, SUM, strideCount, tileNum)
        for _ in range(tileNum):
            hccl.Commit(handleId)
            hccl.Wait(handleId)
        hp.SyncAll()
        hccl.Finalize()


def tile_data(rank: int, count: int) -> np.ndarray:
    """``count`` FP16 values ``rank + 8 * (index of the tileLen-element tile)``."""
    return (rank + RANK_SPAN * (np.arange(count) // tileLen)).astype(np.float16)


def tiles_read(received: np.ndarray, n: int) -> np.ndarray:
    """Which send tile each received tile was summed from (every rank sent ``tile_data``)."""
    firsts = received.reshape(tileNum, tileLen)[:, 0].astype(np.float64)
    return ((firsts - n * (n - 1) / 2) / (RANK_SPAN * n)).astype(np.int64)


def _ranges(tiles: np.ndarray) -> str:
    return " ".join(f"[{t * tileLen}, {(t + 1) * tileLen})" for t in tiles.tolist())


def main() -> list[str]:
    rank, n = hp.get_rank(), hp.get_world_size()
    sends = np.stack([tile_data(r, n * ELEMS).astype(np.float32) for r in range(n)])
    expected = sends.sum(axis=0).reshape(n, ELEMS)[rank].astype(np.float16)
    x, y = on_device(tile_data(rank, n * ELEMS)), zeros(ELEMS)
    hp.launch(reduce_scatter_tiled, x, y, None, make_tiling(), block_dim=8)
    verdict = compare("tiled", y, expected, f"block {rank} summed over {n} ranks")
    read = tiles_read(y.cpu().numpy(), n)
    want = rank * tileNum + np.arange(tileNum)
    if (read == want).all():
        return [verdict]
    lines = [
        verdict,
        f"rank {rank}: rounds 0..{tileNum - 1} summed send elements {_ranges(read)}; "
        f"expected {_ranges(want)}",
    ]
    if rank == n - 1:
        lines.append(
            "the receive strips of 'python -m hccl_py layout' show every output byte written "
            "once; its send strips show rounds reading the same bytes ('read more than once') "
            "and the end of every send buffer 'unread'"
        )
    return lines


if __name__ == "__main__":
    run_sample(main)
