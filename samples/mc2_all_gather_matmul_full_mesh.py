"""Port of ops-transformer's AllGatherMatmul, full-mesh path (A2/A3), call for call.

Source: ops-transformer, ``mc2/all_gather_matmul/op_kernel/all_gather_matmul_full_mesh.h``
(class ``AllGatherMatmulFullMesh``: ``Init``, ``HcclPrepare``, ``MatmulKernelLocal``,
``MatmulKernelGather``, ``HcclFinalize``) and its host tiling
``op_host/op_tiling/all_gather_matmul_tiling_base.cpp``; described in docs/notes/mc2-kernels.md.

What it relies on (docs/fidelity.md): every cube core Prepares with ``commit = true`` (so
each core's own commit count allows its Waits; only block 0's Commits reach the server),
the cube cores that compute Wait every round before using it, idle cores (blockIdx >=
usedCoreNum) neither Wait nor compute, and a mode-0 CrossCore barrier (flag 6) separates
every Wait from block 0's Finalize.

Run: ``python samples/mc2_all_gather_matmul_full_mesh.py`` (4 emulated ranks),
``python -m hccl_py run -n 2 --backend gloo samples/mc2_all_gather_matmul_full_mesh.py``.
"""

from ctypes import c_uint32

import numpy as np
from _common import WORLD_GROUP, compare, on_device, random_ints, run_sample, zeros
from _mc2 import SIZEOF_HALF, matmul

import hccl_py as hp
from hccl_py import (
    AIC,
    HCCL_CMD_ALLGATHER,
    HCCL_DATA_TYPE_FP16,
    HCCL_SUCCESS,
    PIPE_FIX,
    Hccl,
    Mc2CcTiling,
    Mc2CcTilingConfig,
    Mc2InitTiling,
    TilingData,
    offsetof,
)

RANK_M, K, N = 20, 32, 16  # every rank's A is RANK_M x K; C is the gathered A times B
TILE_M = 8  # the host's cut of one rank's M: two tiles of 8 rows and a tail of 4
AIC_NUM, USED_CORE_NUM, LOCAL_USED_CORE_NUM = 3, 2, 3  # cube core 2 only joins the local matmul


class AllGatherMatmulTilingData(TilingData):
    """Mc2Tiling::AllGatherMatmulTilingData: the HCCL tilings, then the fields the kernel reads."""

    _fields_ = [
        ("mc2InitTiling", Mc2InitTiling),
        ("mc2CcTiling", Mc2CcTiling),
        *(
            (name, c_uint32)
            for name in (
                "rankM",
                "rankN",
                "rankK",
                "tileCnt",
                "tileM",
                "tailCnt",
                "tailM",
                "usedCoreNum",
                "localUsedCoreNum",
                "dataType",
            )
        ),
    ]


def rows_of(lo: int, rows: int, parts: int, part: int) -> slice:
    """The share of rows ``[lo, lo + rows)`` that core ``part`` of ``parts`` computes."""
    chunk = -(-rows // parts)
    start = lo + min(rows, part * chunk)
    return slice(start, min(lo + rows, start + chunk))


def all_gather_matmul(aGM, bGM, cGM, gatherOutGM, workspaceGM, tilingGM):
    tiling = hp.GET_TILING_DATA_WITH_STRUCT(AllGatherMatmulTilingData, tilingGM)
    if hp.g_coreType != AIC:
        return
    # Init: the deprecated API, with the tilings' addresses
    hccl = Hccl()
    hccl.Init(hp.GetHcclContext(0), tilingGM + offsetof(AllGatherMatmulTilingData, "mc2InitTiling"))
    if (
        hccl.SetCcTiling(tilingGM + offsetof(AllGatherMatmulTilingData, "mc2CcTiling"))
        != HCCL_SUCCESS
    ):
        return
    rankId, rankDim = hccl.GetRankId(), hccl.GetRankDim()
    gatherGM = gatherOutGM  # storageGather: the user wants the gathered A

    # HcclPrepare (every AIC core): commit = true, strideCount = one rank's A
    aTileCnt = tiling.tileM * tiling.rankK
    aTileOffset = tiling.tileCnt * tiling.tileM * tiling.rankK * SIZEOF_HALF
    aRankCnt = tiling.rankM * tiling.rankK
    dataType = tiling.dataType
    h = hccl.AllGather[True](aGM, gatherGM, aTileCnt, dataType, aRankCnt, tiling.tileCnt)
    t = -1
    if tiling.tailCnt:
        t = hccl.AllGather[True](
            aGM + aTileOffset,
            gatherGM + aTileOffset,
            tiling.tailM * tiling.rankK,
            dataType,
            aRankCnt,
            tiling.tailCnt,
        )

    m = tiling.rankM
    a = hp.gm_tensor(aGM, HCCL_DATA_TYPE_FP16, m * tiling.rankK).view(m, -1)
    b = hp.gm_tensor(bGM, HCCL_DATA_TYPE_FP16, tiling.rankK * tiling.rankN).view(tiling.rankK, -1)
    gathered = hp.gm_tensor(gatherGM, HCCL_DATA_TYPE_FP16, rankDim * aRankCnt).view(rankDim * m, -1)
    c = hp.gm_tensor(cGM, HCCL_DATA_TYPE_FP16, rankDim * m * tiling.rankN).view(rankDim * m, -1)
    me = hp.GetBlockIdx()

    # MatmulKernelLocal: this rank's own block needs no communication
    if me < tiling.localUsedCoreNum:
        own = rows_of(0, m, tiling.localUsedCoreNum, me)
        matmul(c[rankId * m :][own], a[own], b)

    # MatmulKernelGather, for the tiles and then the tail: Wait, then the remote blocks
    row = 0
    for handle, rows, cnt in ((h, tiling.tileM, tiling.tileCnt), (t, tiling.tailM, tiling.tailCnt)):
        if me >= tiling.usedCoreNum:
            break  # idle cores return at once: no Wait
        for i in range(cnt):
            hccl.Wait(handle)  # round i of every rank has arrived
            for j in range(rankDim):
                rank = (rankId + j + me) % rankDim
                index = (rank + rankDim - (rankId + 1)) % rankDim + i * (rankDim - 1)
                if rank == rankId or index % tiling.usedCoreNum != me:
                    continue
                lo = rank * m + row
                matmul(c[lo : lo + rows], gathered[lo : lo + rows], b)
            row += rows

    # HcclFinalize
    hp.CrossCoreSetFlag[0, PIPE_FIX](6)
    hp.CrossCoreWaitFlag(6)
    hccl.Finalize()


def make_tiling() -> AllGatherMatmulTilingData:
    """Host side (AllGatherMatmulTilingFunc): the M cut, the core counts and the cc tiling."""
    tile_cnt, tail_m = divmod(RANK_M, TILE_M)
    tiling = AllGatherMatmulTilingData(
        rankM=RANK_M,
        rankN=N,
        rankK=K,
        tileCnt=tile_cnt,
        tileM=TILE_M,
        tailCnt=1 if tail_m else 0,
        tailM=tail_m,
        usedCoreNum=USED_CORE_NUM,
        localUsedCoreNum=LOCAL_USED_CORE_NUM,
        dataType=HCCL_DATA_TYPE_FP16,
    )
    cfg = Mc2CcTilingConfig(WORLD_GROUP, HCCL_CMD_ALLGATHER, "AllGather=level0:fullmesh")
    gatherLen = 0  # the gathered A goes to the user's gather_out, not the workspace
    cfg.SetSkipBufferWindowCopy(0 if gatherLen == 0 else 1)
    if cfg.GetTiling(tiling.mc2InitTiling) != 0 or cfg.GetTiling(tiling.mc2CcTiling) != 0:
        raise RuntimeError(f"tiling failed: {cfg.last_error}")
    return tiling


def main() -> list[str]:
    rank, n = hp.get_rank(), hp.get_world_size()
    b_host = random_ints(1000, (K, N))
    gathered_ref = np.concatenate([random_ints(r, (RANK_M, K)) for r in range(n)])
    c_ref = (gathered_ref.astype(np.float32) @ b_host).astype(np.float16)

    a, b = on_device(random_ints(rank, (RANK_M, K))), on_device(b_host)
    c, gather_out = zeros(n * RANK_M, N), zeros(n * RANK_M, K)
    hp.launch(
        all_gather_matmul,
        a,
        b,
        c,
        gather_out,
        None,
        make_tiling(),
        block_dim=AIC_NUM,
        kernel_type="mix_aic_1_2",
    )
    return [
        compare("gather_out", gather_out, gathered_ref, f"{n} ranks' A"),
        compare("output", c, c_ref, f"gathered A x B, {n * RANK_M} rows"),
    ]


if __name__ == "__main__":
    run_sample(main)
