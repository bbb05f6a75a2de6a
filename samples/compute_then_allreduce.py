"""Compute, then communicate: the documentation's Matmul + AllReduce orchestration.

Run: ``python samples/compute_then_allreduce.py`` (4 emulated ranks),
``python -m hccl_py run -n 8 samples/compute_then_allreduce.py``, or under
msrun / torchrun on Ascend.

Every rank computes ``C = A @ B`` (M x N, FP16) tile by tile on its cube (AIC)
cores and all-reduces C into Y. The AllReduce is prepared early, before any
compute, with one round per tile (``repeat = tileNum``); each round is
committed as soon as its tile of C is written, so communication of tile i
overlaps the matmul of tile i+1. The kernel never calls Wait: Finalize waits
for the last round.
"""

from ctypes import c_uint32

import numpy as np
from _common import WORLD_GROUP, compare, on_device, random_ints, run_sample, zeros
from _mc2 import AIC_KERNEL, matmul

import hccl_py as hp
from hccl_py import (
    AIC,
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

M, K, N = 64, 32, 16
TILE_M = 16
FP16 = HcclDataType.HCCL_DATA_TYPE_FP16
SUM = HcclReduceOp.HCCL_REDUCE_SUM


class MatmulAllReduceCustomTilingData(TilingData):
    _fields_ = [
        ("mc2InitTiling", Mc2InitTiling),
        ("allReduceCcTiling", Mc2CcTiling),
        *[(name, c_uint32) for name in ("M", "K", "N", "tileM", "tileNum")],
    ]


def matmul_allreduce_custom(aGM, bGM, cGM, yGM, workspaceGM, tilingGM):
    """Each AIC core computes tileM / blockNum rows of every tile."""
    tilingData = hp.GET_TILING_DATA_WITH_STRUCT(MatmulAllReduceCustomTilingData, tilingGM)
    if hp.g_coreType == AIC:
        hccl = Hccl()
        contextGM = hp.GetHcclContext(0)
        hccl.InitV2(contextGM, tilingData)
        if (
            hccl.SetCcTilingV2(offsetof(MatmulAllReduceCustomTilingData, "allReduceCcTiling"))
            != HCCL_SUCCESS
        ):
            return
        m, k, n = tilingData.M, tilingData.K, tilingData.N
        tileM, tileNum = tilingData.tileM, tilingData.tileNum
        # Prepare early (no commit): the server gets ready while the cube computes.
        handleId = hccl.AllReduce(cGM, yGM, tileM * n, FP16, SUM, tileNum)

        a = hp.gm_tensor(aGM, FP16, m * k).view(m, k)
        b = hp.gm_tensor(bGM, FP16, k * n).view(k, n)
        c = hp.gm_tensor(cGM, FP16, m * n).view(m, n)
        rows = tileM // hp.GetBlockNum()
        for i in range(tileNum):
            r0 = i * tileM + hp.GetBlockIdx() * rows
            matmul(c[r0 : r0 + rows], a[r0 : r0 + rows], b)
            hp.SyncAll()  # every core has written its rows of tile i
            hccl.Commit(handleId)  # round i may run now
        hccl.Finalize()  # no Wait: Finalize waits for the last round


def make_tiling() -> MatmulAllReduceCustomTilingData:
    """Host side: the matmul shape and tiling, and the AllReduce cc tiling."""
    tiling = MatmulAllReduceCustomTilingData(M=M, K=K, N=N, tileM=TILE_M, tileNum=M // TILE_M)
    mc2CcTilingConfig = Mc2CcTilingConfig(
        WORLD_GROUP, HCCL_CMD_ALLREDUCE, "AllReduce=level0:doublering", HCCL_REDUCE_SUM
    )
    mc2CcTilingConfig.GetTiling(tiling.mc2InitTiling)
    mc2CcTilingConfig.GetTiling(tiling.allReduceCcTiling)
    return tiling


def inputs(rank: int) -> tuple[np.ndarray, np.ndarray]:
    """Rank ``rank``'s A (M x K) and B (K x N): small integers, so every sum is exact."""
    return random_ints(2 * rank, (M, K)), random_ints(2 * rank + 1, (K, N))


def main() -> list[str]:
    rank, n = hp.get_rank(), hp.get_world_size()
    products = [a.astype(np.float32) @ b.astype(np.float32) for a, b in map(inputs, range(n))]
    a, b = map(on_device, inputs(rank))
    c, y = zeros(M, N), zeros(M, N)
    tiling = make_tiling()
    hp.launch(matmul_allreduce_custom, a, b, c, y, None, tiling, **AIC_KERNEL)
    rounds = f"{M // TILE_M} rounds committed tile by tile, no Wait"
    return [
        compare("matmul", c, products[rank].astype(np.float16), f"C = A @ B, {M}x{N}"),
        compare("allreduce", y, np.sum(products, axis=0).astype(np.float16), rounds),
    ]


if __name__ == "__main__":
    run_sample(main)
