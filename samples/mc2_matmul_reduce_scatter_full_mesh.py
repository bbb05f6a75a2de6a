"""Port of ops-transformer's MatmulReduceScatter, full-mesh path (A2/A3), call for call.

Source: ops-transformer, ``mc2/matmul_reduce_scatter/op_kernel/matmul_reduce_scatter_full_mesh.h``
(class ``MatmulReduceScatterFullMesh``: ``HcclPrepare``, ``MatmulKernelCompute``,
``InnerProcess``, ``HcclFinalize``) and its host tiling
``op_host/op_tiling/matmul_reduce_scatter_tiling.cpp``; described in docs/notes/mc2-kernels.md.
The matmul itself is one torch call per tile here; the communication is the kernel's.

What it relies on (docs/fidelity.md): every AIC core Prepares (same handle ids, only block 0
sends), every core Commits after a mode-0 CrossCore barrier (flag 6) but only block 0's
Commits reach the server, *idle* cores (blockIdx >= usedCoreNum) never Commit and their
Waits return -1 at once, and the barrier before Finalize keeps block 0 from finalizing while
others still Wait.

Run: ``python samples/mc2_matmul_reduce_scatter_full_mesh.py`` (4 emulated ranks),
``python -m hccl_py run -n 2 --backend gloo samples/mc2_matmul_reduce_scatter_full_mesh.py``.
"""

from ctypes import c_uint32

import numpy as np
from _common import WORLD_GROUP, compare, on_device, random_ints, run_sample, zeros
from _mc2 import SIZEOF_HALF, matmul

import hccl_py as hp
from hccl_py import (
    AIC,
    HCCL_CMD_REDUCE_SCATTER,
    HCCL_DATA_TYPE_FP16,
    HCCL_REDUCE_SUM,
    HCCL_SUCCESS,
    PIPE_FIX,
    Hccl,
    Mc2CcTiling,
    Mc2CcTilingConfig,
    Mc2InitTiling,
    TilingData,
    offsetof,
)

BLOCK_M, K, N = 24, 64, 32  # rows of one rank block of C; A is (rankDim * BLOCK_M) x K
TILE_M, TAIL_M = 10, 4  # the host's M cut of one block: two tiles of 10 rows, one tail of 4
AIC_NUM, USED_CORE_NUM = 3, 2  # three cube cores, one of them idle


class MatmulReduceScatterTilingData(TilingData):
    """The fields of Mc2Tiling's RCSTiling and TCubeTiling that the communication uses."""

    _fields_ = [
        ("mc2InitTiling", Mc2InitTiling),
        ("mc2CcTiling", Mc2CcTiling),
        *((name, c_uint32) for name in ("rankM", "rankN", "rankK", "tileCnt", "tailCnt")),
        *((name, c_uint32) for name in ("tileM", "tailM", "usedCoreNum", "dataType", "subtype")),
    ]


def barrier():
    """The kernel's cube-core barrier: ``CrossCoreSetFlag<0, PIPE_FIX>(6); CrossCoreWaitFlag(6);``."""
    hp.CrossCoreSetFlag[0, PIPE_FIX](6)
    hp.CrossCoreWaitFlag(6)


def matmul_reduce_scatter(aGM, bGM, cGM, workspaceGM, tilingGM):
    tiling = hp.GET_TILING_DATA_WITH_STRUCT(MatmulReduceScatterTilingData, tilingGM)
    if hp.g_coreType != AIC:
        return  # the AIV cores only convert layouts (Nd2NzBiasCast): nothing to do for ND input
    # Init: the deprecated API the kernel uses, with the tiling's address
    hccl = Hccl()
    hccl.Init(
        hp.GetHcclContext(0), tilingGM + offsetof(MatmulReduceScatterTilingData, "mc2InitTiling")
    )
    if (
        hccl.SetCcTiling(tilingGM + offsetof(MatmulReduceScatterTilingData, "mc2CcTiling"))
        != HCCL_SUCCESS
    ):
        return
    rankDim = hccl.GetRankDim()
    gmToFloat = workspaceGM  # the local C = A x B, rankM x N, one block of rows per rank

    # HcclPrepare (every AIC core): tiles of each rank block, strideCount = one block
    tileDataCnt = tiling.tileM * tiling.rankN
    rankDataCnt = tiling.rankM * tiling.rankN // rankDim
    tileDataOff = tileDataCnt * tiling.tileCnt * SIZEOF_HALF
    dataType, subtype = tiling.dataType, tiling.subtype
    h = hccl.ReduceScatter[False](
        gmToFloat, cGM, tileDataCnt, dataType, subtype, rankDataCnt, tiling.tileCnt
    )
    t = -1
    if tiling.tailCnt > 0:
        t = hccl.ReduceScatter[False](
            gmToFloat + tileDataOff,
            cGM + tileDataOff,
            tiling.tailM * tiling.rankN,
            dataType,
            subtype,
            rankDataCnt,
            tiling.tailCnt,
        )

    # InnerProcess: MatmulKernelCompute for the tiles, then for the tail
    blockM = tiling.rankM // rankDim
    a = hp.gm_tensor(aGM, HCCL_DATA_TYPE_FP16, tiling.rankM * tiling.rankK).view(tiling.rankM, -1)
    b = hp.gm_tensor(bGM, HCCL_DATA_TYPE_FP16, tiling.rankK * tiling.rankN).view(tiling.rankK, -1)
    c = hp.gm_tensor(gmToFloat, HCCL_DATA_TYPE_FP16, tiling.rankM * tiling.rankN).view(
        tiling.rankM, -1
    )
    row = 0
    for handle, rows, count in (
        (h, tiling.tileM, tiling.tileCnt),
        (t, tiling.tailM, tiling.tailCnt),
    ):
        for i in range(count):
            if hp.GetBlockIdx() < tiling.usedCoreNum:  # idle cores only join the barrier
                for j in range(rankDim):
                    rank = (j + hp.GetBlockIdx()) % rankDim
                    if (rank + i * rankDim) % tiling.usedCoreNum == hp.GetBlockIdx():
                        lo = rank * blockM + row
                        matmul(c[lo : lo + rows], a[lo : lo + rows], b)
            barrier()  # every core wrote this tile of every block
            if hp.GetBlockIdx() < tiling.usedCoreNum:
                hccl.Commit(handle)  # only block 0's Commit reaches the server
            row += rows
    for _ in range(tiling.tileCnt):
        hccl.Wait(h)  # idle cores: -1 at once, they never committed
    for _ in range(tiling.tailCnt):
        hccl.Wait(t)

    # HcclFinalize
    barrier()
    hccl.Finalize()


def make_tiling(rankDim: int) -> MatmulReduceScatterTilingData:
    """Host side (MatmulReduceScatterTilingFunc): shapes, the M cut, and the cc tiling."""
    tiling = MatmulReduceScatterTilingData(
        rankM=rankDim * BLOCK_M,
        rankN=N,
        rankK=K,
        tileCnt=(BLOCK_M - TAIL_M) // TILE_M,
        tailCnt=1,
        tileM=TILE_M,
        tailM=TAIL_M,
        usedCoreNum=USED_CORE_NUM,
        dataType=HCCL_DATA_TYPE_FP16,
        subtype=HCCL_REDUCE_SUM,
    )
    cfg = Mc2CcTilingConfig(
        WORLD_GROUP, HCCL_CMD_REDUCE_SCATTER, "ReduceScatter=level0:fullmesh", 0
    )
    cfg.GetTiling(tiling.mc2InitTiling)
    cfg.GetTiling(tiling.mc2CcTiling)
    return tiling


def main() -> list[str]:
    rank, n = hp.get_rank(), hp.get_world_size()
    b_host = random_ints(1000, (K, N))  # the same weight on every rank
    products = [random_ints(r, (n * BLOCK_M, K)).astype(np.float32) @ b_host for r in range(n)]
    expected = np.sum(products, axis=0)[rank * BLOCK_M : (rank + 1) * BLOCK_M].astype(np.float16)

    a, b = on_device(random_ints(rank, (n * BLOCK_M, K))), on_device(b_host)
    c, workspace = zeros(BLOCK_M, N), zeros(n * BLOCK_M, N)
    hp.launch(
        matmul_reduce_scatter,
        a,
        b,
        c,
        workspace,
        make_tiling(n),
        block_dim=AIC_NUM,
        kernel_type="mix_aic_1_2",
    )
    return [compare("output", c, expected, f"rows {rank * BLOCK_M}..{(rank + 1) * BLOCK_M - 1}")]


if __name__ == "__main__":
    run_sample(main)
