"""A prototype of the MC2 fused operator ``output = reducescatter(x1 @ x2)``.

This is the operation torch_npu exposes as ``npu_mm_reduce_scatter_base``.
Run: ``python samples/matmul_reduce_scatter.py`` (4 emulated ranks),
``python -m hccl_py run -n 2 samples/matmul_reduce_scatter.py``, or under
msrun / torchrun on Ascend, where the result is also compared with
``torch_npu.npu_mm_reduce_scatter_base``.

Compute, then communicate: every rank multiplies its x1 (rankDim*M x K) by x2
(K x N) into a workspace C; rank j receives rows ``j*M .. (j+1)*M`` of the sum
of every rank's C. The ReduceScatter is prepared early with one round per row
tile of the M rows (``strideCount = M*N``: round i of rank j reads tile i of
block j). The cube cores compute tile i of every block, then commit round i,
so the reduction of tile i overlaps the matmul of tile i+1. Finalize waits for
the last round.
"""

import numpy as np
from _common import WORLD_GROUP, compare, on_device, random_ints, run_sample, zeros
from _mc2 import AIC_KERNEL, MATMUL_FIELDS, SIZEOF_HALF, matmul, matmul_tiling, torch_npu_check

import hccl_py as hp
from hccl_py import (
    AIC,
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

M, K, N = 24, 256, 32  # rows received per rank; x1 is (rankDim * M) x K, x2 is K x N
TILE_M = 10  # two tiles of 10 rows and a tail of 4
FP16 = HcclDataType.HCCL_DATA_TYPE_FP16
SUM = HcclReduceOp.HCCL_REDUCE_SUM


class MatmulReduceScatterTilingData(TilingData):
    _fields_ = [
        ("mc2InitTiling", Mc2InitTiling),
        ("reduceScatterCcTiling", Mc2CcTiling),
        *MATMUL_FIELDS,
    ]


def matmul_reduce_scatter(x1GM, x2GM, outputGM, workspaceGM, tilingGM):
    """Core b computes the blocks of ranks b, b + blockNum, ... of C."""
    tilingData = hp.GET_TILING_DATA_WITH_STRUCT(MatmulReduceScatterTilingData, tilingGM)
    if hp.g_coreType == AIC:
        hccl = Hccl()
        contextGM = hp.GetHcclContext(0)
        hccl.InitV2(contextGM, tilingData)
        if (
            hccl.SetCcTilingV2(offsetof(MatmulReduceScatterTilingData, "reduceScatterCcTiling"))
            != HCCL_SUCCESS
        ):
            return
        m, k, n = tilingData.rankM, tilingData.rankK, tilingData.rankN
        rankDim = hccl.GetRankDim()
        cGM = workspaceGM  # the matmul result, rankDim * m rows

        # Prepare early (no commit): one round per row tile of every rank's block;
        # strideCount = rankM * n keeps round i of every block on tile i.
        t = tilingData
        stride = t.rankM * n
        tileHandleId = hccl.ReduceScatter(cGM, outputGM, t.tileM * n, FP16, SUM, stride, t.tileNum)
        tailHandleId = None
        if t.tailNum:
            tailOffset = t.tileNum * t.tileM * n * SIZEOF_HALF
            tailHandleId = hccl.ReduceScatter(
                cGM + tailOffset, outputGM + tailOffset, t.tailM * n, FP16, SUM, stride, t.tailNum
            )
        tiles = [(tileHandleId, t.tileM, t.tileNum), (tailHandleId, t.tailM, t.tailNum)]

        x1 = hp.gm_tensor(x1GM, FP16, rankDim * m * k).view(rankDim * m, k)
        x2 = hp.gm_tensor(x2GM, FP16, k * n).view(k, n)
        c = hp.gm_tensor(cGM, FP16, rankDim * m * n).view(rankDim * m, n)
        myRanks = range(hp.GetBlockIdx(), rankDim, hp.GetBlockNum())
        row = 0
        for handleId, rows, rounds in tiles:
            for _ in range(rounds):
                for r in myRanks:
                    lo = r * m + row
                    matmul(c[lo : lo + rows], x1[lo : lo + rows], x2)
                hp.SyncAll()  # this tile of every block is in C
                hccl.Commit(handleId)  # its reduction may run now
                row += rows
        hccl.Finalize()  # waits for the last round


def make_tiling() -> MatmulReduceScatterTilingData:
    """Host side: the shapes, the row tiling of each block and the ReduceScatter cc tiling."""
    tiling = MatmulReduceScatterTilingData(**matmul_tiling(M, K, N, TILE_M))
    mc2CcTilingConfig = Mc2CcTilingConfig(
        WORLD_GROUP, HCCL_CMD_REDUCE_SCATTER, "ReduceScatter=level0:doublering", HCCL_REDUCE_SUM
    )
    mc2CcTilingConfig.GetTiling(tiling.mc2InitTiling)
    mc2CcTilingConfig.GetTiling(tiling.reduceScatterCcTiling)
    return tiling


def npu_check(x1, x2, output_ref: np.ndarray) -> list[str]:
    """On NPUs: the same operation through torch_npu.npu_mm_reduce_scatter_base."""

    def check(npu_mm_reduce_scatter_base, hcom: str) -> list[str]:
        output = npu_mm_reduce_scatter_base(x1, x2, hcom, hp.get_world_size(), reduce_op="sum")
        return [compare("npu_output", output, output_ref, "torch_npu output")]

    return torch_npu_check("npu_mm_reduce_scatter_base", check)


def main() -> list[str]:
    rank, n = hp.get_rank(), hp.get_world_size()
    x2_host = random_ints(1000, (K, N))  # the same weight on every rank
    products = [random_ints(r, (n * M, K)).astype(np.float32) @ x2_host for r in range(n)]
    output_ref = np.sum(products, axis=0)[rank * M : (rank + 1) * M].astype(np.float16)

    x1, x2 = on_device(random_ints(rank, (n * M, K))), on_device(x2_host)
    output, workspace = zeros(M, N), zeros(n * M, N)
    tiling = make_tiling()
    hp.launch(matmul_reduce_scatter, x1, x2, output, workspace, tiling, **AIC_KERNEL)
    return [
        compare("output", output, output_ref, f"rows {rank * M}..{(rank + 1) * M - 1} of the sum"),
        *npu_check(x1, x2, output_ref),
    ]


if __name__ == "__main__":
    run_sample(main)
