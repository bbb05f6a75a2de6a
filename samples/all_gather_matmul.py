"""A prototype of the MC2 fused operator ``output = allgather(x1) @ x2``.

This is the operation torch_npu exposes as ``npu_all_gather_base_mm``
(``gather_out`` is ``allgather(x1)``). Run: ``python samples/all_gather_matmul.py``
(4 emulated ranks), ``python -m hccl_py run -n 2 samples/all_gather_matmul.py``,
or under msrun / torchrun on Ascend, where the result is also compared with
``torch_npu.npu_all_gather_base_mm``.

Communicate, then compute: every rank's x1 (M x K) is cut into row tiles (two
of TILE_M rows and a tail). One AllGather round per tile is committed up front
(``AllGather<true>`` with ``repeat = tileNum``, ``strideCount = M*K`` so that
tile i of rank j lands at rows ``j*M + i*TILE_M`` of gather_out). The cube
cores first multiply the local x1, which needs no communication, then multiply
each gathered tile as soon as its Wait returns, while later tiles are still in
flight.
"""

import numpy as np
from _common import WORLD_GROUP, compare, on_device, random_ints, run_sample, zeros
from _mc2 import AIC_KERNEL, MATMUL_FIELDS, SIZEOF_HALF, matmul, matmul_tiling, torch_npu_check

import hccl_py as hp
from hccl_py import (
    AIC,
    HCCL_CMD_ALLGATHER,
    HCCL_SUCCESS,
    Hccl,
    HcclDataType,
    Mc2CcTiling,
    Mc2CcTilingConfig,
    Mc2InitTiling,
    TilingData,
    offsetof,
)

M, K, N = 40, 256, 64  # x1: M x K per rank, x2: K x N (torch_npu needs K >= 256)
TILE_M = 16  # two tiles of 16 rows and a tail of 8
FP16 = HcclDataType.HCCL_DATA_TYPE_FP16


class AllGatherMatmulTilingData(TilingData):
    _fields_ = [
        ("mc2InitTiling", Mc2InitTiling),
        ("allGatherCcTiling", Mc2CcTiling),
        *MATMUL_FIELDS,
    ]


def all_gather_matmul(x1GM, x2GM, outputGM, gatherOutGM, workspaceGM, tilingGM):
    """Core b multiplies the blocks of ranks b, b + blockNum, ... of gather_out."""
    tilingData = hp.GET_TILING_DATA_WITH_STRUCT(AllGatherMatmulTilingData, tilingGM)
    if hp.g_coreType == AIC:
        hccl = Hccl()
        contextGM = hp.GetHcclContext(0)
        hccl.InitV2(contextGM, tilingData)
        if (
            hccl.SetCcTilingV2(offsetof(AllGatherMatmulTilingData, "allGatherCcTiling"))
            != HCCL_SUCCESS
        ):
            return
        m, k, n = tilingData.rankM, tilingData.rankK, tilingData.rankN
        rankId, rankDim = hccl.GetRankId(), hccl.GetRankDim()

        # Communication: one round per row tile, all committed now; strideCount = rankM * k
        # keeps round i of every rank's block on tile i.
        t = tilingData
        stride = t.rankM * k
        tileHandleId = hccl.AllGather[True](x1GM, gatherOutGM, t.tileM * k, FP16, stride, t.tileNum)
        tailHandleId = None
        if t.tailNum:
            tailOffset = t.tileNum * t.tileM * k * SIZEOF_HALF
            tailHandleId = hccl.AllGather[True](
                x1GM + tailOffset, gatherOutGM + tailOffset, t.tailM * k, FP16, stride, t.tailNum
            )
        tiles = [(tileHandleId, t.tileM, t.tileNum), (tailHandleId, t.tailM, t.tailNum)]

        x1 = hp.gm_tensor(x1GM, FP16, m * k).view(m, k)
        x2 = hp.gm_tensor(x2GM, FP16, k * n).view(k, n)
        gatherOut = hp.gm_tensor(gatherOutGM, FP16, rankDim * m * k).view(rankDim * m, k)
        output = hp.gm_tensor(outputGM, FP16, rankDim * m * n).view(rankDim * m, n)
        myRanks = range(hp.GetBlockIdx(), rankDim, hp.GetBlockNum())

        # Compute: the local block needs no communication, so it goes first.
        if rankId in myRanks:
            matmul(output[rankId * m : (rankId + 1) * m], x1, x2)
        row = 0
        for handleId, rows, rounds in tiles:
            for _ in range(rounds):
                hccl.Wait(handleId)  # this tile of every rank has arrived
                for r in myRanks:
                    if r != rankId:
                        lo = r * m + row
                        matmul(output[lo : lo + rows], gatherOut[lo : lo + rows], x2)
                row += rows
        hp.SyncAll()
        hccl.Finalize()


def make_tiling() -> AllGatherMatmulTilingData:
    """Host side: the shapes, the row tiling of x1 and the AllGather cc tiling."""
    tiling = AllGatherMatmulTilingData(**matmul_tiling(M, K, N, TILE_M))
    mc2CcTilingConfig = Mc2CcTilingConfig(
        WORLD_GROUP, HCCL_CMD_ALLGATHER, "AllGather=level0:doublering"
    )
    mc2CcTilingConfig.GetTiling(tiling.mc2InitTiling)
    mc2CcTilingConfig.GetTiling(tiling.allGatherCcTiling)
    return tiling


def npu_check(x1, x2, gather_ref: np.ndarray, output_ref: np.ndarray) -> list[str]:
    """On NPUs: the same operation through torch_npu.npu_all_gather_base_mm."""

    def check(npu_all_gather_base_mm, hcom: str) -> list[str]:
        output, gather_out = npu_all_gather_base_mm(
            x1, x2, hcom, hp.get_world_size(), gather_index=0
        )
        return [
            compare("npu_gather", gather_out, gather_ref, "torch_npu gather_out"),
            compare("npu_output", output, output_ref, "torch_npu output"),
        ]

    return torch_npu_check("npu_all_gather_base_mm", check)


def main() -> list[str]:
    rank, n = hp.get_rank(), hp.get_world_size()
    x2_host = random_ints(1000, (K, N))  # the same weight on every rank
    gather_ref = np.concatenate([random_ints(r, (M, K)) for r in range(n)])
    output_ref = (gather_ref.astype(np.float32) @ x2_host.astype(np.float32)).astype(np.float16)

    x1, x2 = on_device(random_ints(rank, (M, K))), on_device(x2_host)
    output, gather_out = zeros(n * M, N), zeros(n * M, K)
    tiling = make_tiling()
    hp.launch(all_gather_matmul, x1, x2, output, gather_out, None, tiling, **AIC_KERNEL)
    return [
        compare("gather_out", gather_out, gather_ref, f"allgather(x1), {n * M}x{K}"),
        compare("output", output, output_ref, f"allgather(x1) @ x2, {n * M}x{N}"),
        *npu_check(x1, x2, gather_ref, output_ref),
    ]


if __name__ == "__main__":
    run_sample(main)
