"""The documentation's AllGather kernels, ported line for line: non-tiled and multi-round.

Run: ``python samples/all_gather_custom.py`` (4 emulated ranks) or
``python -m hccl_py run -n 8 samples/all_gather_custom.py``.
Each rank holds 300 FP16 values equal to its rank; after the AllGather every
rank must hold ``[0]*300 + [1]*300 + ...``.
"""

import torch

import hccl_py as hp
from hccl_py import (
    AIV,
    HCCL_SUCCESS,
    Hccl,
    HcclCMDType,
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


class AllGatherCustomTilingData(TilingData):
    _fields_ = [("mc2InitTiling", Mc2InitTiling), ("allGatherCcTiling", Mc2CcTiling)]


def all_gather_custom(xGM, yGM, workspaceGM, tilingGM):
    """Non-tiled: one AllGather<true> of all 300 elements."""
    tiling = hp.GET_TILING_DATA_WITH_STRUCT(AllGatherCustomTilingData, tilingGM)
    hccl = Hccl()
    contextGM = hp.GetHcclContext(0)
    if hp.g_coreType == AIV:
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
    hccl = Hccl()
    contextGM = hp.GetHcclContext(0)
    if hp.g_coreType == AIV:
        hccl.InitV2(contextGM, tiling)
        if (
            hccl.SetCcTilingV2(offsetof(AllGatherCustomTilingData, "allGatherCcTiling"))
            != HCCL_SUCCESS
        ):
            return
        tileNum = ELEMS // TILE
        tailLen = ELEMS % TILE
        handleId = hccl.AllGather[True](xGM, yGM, TILE, FP16, ELEMS, tileNum)
        xGM += TILE * tileNum * 2  # sizeof(half)
        yGM += TILE * tileNum * 2
        tailHandleId = hccl.AllGather[True](xGM, yGM, tailLen, FP16, ELEMS, 1)
        for _ in range(tileNum):
            hccl.Wait(handleId)
        hccl.Wait(tailHandleId)
        hp.SyncAll()
        hccl.Finalize()


def make_tiling() -> AllGatherCustomTilingData:
    """Host side: fill the init tiling and the AllGather cc tiling."""
    tiling = AllGatherCustomTilingData()
    cfg = Mc2CcTilingConfig(
        "hccl_world_group", HcclCMDType.HCCL_CMD_ALLGATHER, "AllGather=level0:doublering"
    )
    cfg.GetTiling(tiling.mc2InitTiling)
    cfg.GetTiling(tiling.allGatherCcTiling)
    return tiling


def main() -> list[str]:
    rank, n = hp.get_rank(), hp.get_world_size()
    expected = torch.arange(n, dtype=torch.float16).repeat_interleave(ELEMS)
    verdicts = []
    for name, kernel in (("non-tiled", all_gather_custom), ("multi-round", all_gather_tiled)):
        x = torch.full((ELEMS,), float(rank), dtype=torch.float16, device=hp.device())
        y = torch.zeros(ELEMS * n, dtype=torch.float16, device=hp.device())
        hp.launch(kernel, x, y, None, make_tiling(), block_dim=8)
        got = [int(v) for v in y.view(n, ELEMS)[:, 0].tolist()]
        ok = torch.equal(y.cpu(), expected)
        verdicts.append(
            f"rank {rank}: {name:11s} {'PASS' if ok else 'FAIL'} received blocks from ranks {got}"
        )
    return verdicts


if __name__ == "__main__":
    lines = [line for rank_lines in hp.run(main) for line in rank_lines]
    print("\n".join(lines))
    raise SystemExit(0 if all("PASS" in line for line in lines) else 1)
