"""Port of ops-transformer's MatmulAllReduceAddRmsNorm (arch22, FP16 "910 general"), call for call.

Source: mirror-cann/ops-transformer at 3a280bcc (2026-07-21):
``mc2/matmul_all_reduce_add_rms_norm/op_kernel/arch22/matmul_all_reduce_add_rms_norm.cpp`` (the
non-quantised keys), ``mm_allreduce_add_rms_norm_910_general.h``
(``MatmulAllReduceAddRmsNorm910General::Process``), ``add_rms_norm_kernel.h`` (``AddRmsNormKernel``),
``add_rms_norm.h`` (``KernelAddRmsNorm<half>``), ``matmul_all_reduce_add_rms_norm_tiling_data.h`` and the
host ``op_host/op_tiling/arch22/matmul_all_reduce_add_rms_norm_tiling.cpp`` (``DoOpTiling``,
``PostTiling``) with ``common_add_rms_norm_tiling.cpp`` (``Tiling4AddRmsNorm``). The inplace op
(``inplace_matmul_all_reduce_add_rms_norm``) runs the same kernel with ``y`` over ``residual``.
docs/notes/mc2-kernels.md, section 28.

How it differs from MatmulAllReduce (samples/mc2_matmul_all_reduce.py, imported: its tiling, shapes
and numpy sum): the same ``Init`` and ``InnerProcess``, instantiated ``ON_CUBE_AND_VECTOR`` (AIV block
0 prepares and commits; ``Mc2SyncAll`` is ``SyncAll<false>``), the matmul into ``normOut``, which the
AllReduce reduces in place. It never Waits: after the matmuls AIV block 0 polls ``Query`` of both
handles, stores the finished round count in the workspace, and after an AIV ``SyncAll`` every AIV core
reads it and adds ``residual`` to, and RMS-normalises, its rows of each round it has not done yet; then
``SyncAll<false>`` and the notify core's ``Finalize``.

The source's race (section 28): block 0 writes the next count with nothing to keep it behind the other
cores' read of the current one; a core that reads the final count early leaves the loop one
``SyncAll`` before block 0 and the kernel hangs. The late schedule shows it on every run, ``explore``
on some seeds; the default schedule passes.

Stand-ins: every ARN key runs ``KernelAddRmsNorm``'s arithmetic (the host may pick another variant,
not read; on these rows every summation order gives the same values); the rows are chosen so that each ``y``
row is ``+-a`` (``a`` a power of two), which makes ``normOut`` exactly ``+-gamma``; UB buffers are
tensors, pipe barriers and cache maintenance program order.

Run: ``python samples/mc2_matmul_all_reduce_add_rms_norm.py`` (4 emulated ranks),
``python -m hccl_py run -n 2 --backend gloo samples/mc2_matmul_all_reduce_add_rms_norm.py``.
"""

from ctypes import Structure, c_float

import numpy as np
import torch
from _common import Ceil, compare, on_device, random_ints, run_sample, zeros
from _mc2 import SIZEOF_HALF, matmul, uint32_fields
from mc2_matmul_all_reduce import (
    AIC_NUM,
    K,
    M,
    MatmulAllReduce910TilingData,
    N,
    all_reduce_sum,
    make_tiling,
)

import hccl_py as hp
from hccl_py import AIV, HCCL_DATA_TYPE_FP16, HCCL_REDUCE_SUM, Hccl, TilingData

AIV_NUM = 2 * AIC_NUM  # GetCoreNumAiv: two vector cores per AI core
EPSILON = 1e-6  # the epsilon attribute's default
ROW_FACTOR, UB_FACTOR_B16 = 64, 12288  # K_NORMAL's row and UB factors


class AddRMSNormTilingData(Structure):
    _fields_ = [
        *uint32_fields("num_row", "num_col", "block_factor", "row_factor", "ub_factor"),
        ("epsilon", c_float),
        ("avg_factor", c_float),
    ]


class MatmulAllReduceAddRmsNormTilingData(TilingData):
    _fields_ = [
        ("matmulAllReduceTilingData", MatmulAllReduce910TilingData),
        ("addRMSNormTileTilingData", AddRMSNormTilingData),
        ("addRMSNormTailTilingData", AddRMSNormTilingData),
        *uint32_fields("ARNKeyTile", "ARNKeyTail", "ARNNumBlocksTile", "ARNNumBlocksTail"),
    ]


class KernelAddRmsNorm:
    """``KernelAddRmsNorm<half>``: ``y = x1 + x2`` and ``normOut = half(y * rstd) * gamma`` per row,
    the rows of a round split over ``numBlocks`` AIV cores by ``block_factor``."""

    def Init(self, gammaGM, tilingData, numBlocks):
        self.numBlocks, self.numRow, self.numCol = numBlocks, tilingData.num_row, tilingData.num_col
        self.blockFactor, self.epsilon = tilingData.block_factor, tilingData.epsilon
        self.avgFactor = torch.tensor(1.0, dtype=torch.float32) / self.numCol
        self.gammaGm = hp.gm_tensor(gammaGM, torch.float16, self.numCol)

    def InitGlobalATensor(self, normOut, residual, y):
        block = hp.GetBlockIdx()
        last = self.numRow - (self.numBlocks - 1) * self.blockFactor
        self.rowWork = self.blockFactor if block < self.numBlocks - 1 else last
        at, n = block * self.blockFactor * self.numCol * SIZEOF_HALF, self.rowWork * self.numCol
        self.normOutGm = hp.gm_tensor(normOut + at, torch.float16, n).view(-1, self.numCol)
        self.residualGm = hp.gm_tensor(residual + at, torch.float16, n).view(-1, self.numCol)
        self.yGm = hp.gm_tensor(y + at, torch.float16, n).view(-1, self.numCol)

    def ComputeProcess(self, normOut, residual, y, tilingData, addRmsNormCount, rcvCnt):
        cOffset = tilingData.num_row * tilingData.num_col * SIZEOF_HALF
        while addRmsNormCount <= rcvCnt:  # every finished round not yet done
            self.InitGlobalATensor(normOut, residual, y)
            self.Process()
            normOut, residual, y = normOut + cOffset, residual + cOffset, y + cOffset
            addRmsNormCount += 1

    def Process(self):
        gammaLocal = self.gammaGm.clone()  # CopyInGamma
        for row in range(self.rowWork):  # SubProcess over row_factor chunks: row by row
            xLocal = self.normOutGm[row] + self.residualGm[row]  # CopyIn: Add in half
            self.yGm[row] = xLocal
            x_fp32 = xLocal.float()
            sqx = torch.sum(x_fp32 * x_fp32 * self.avgFactor)  # Mul, Muls, ReduceSumCustom
            rstd = 1.0 / torch.sqrt(sqx + self.epsilon)  # Adds, Sqrt, Div
            self.normOutGm[row] = (x_fp32 * rstd).half() * gammaLocal  # Muls, Cast, Mul


class AddRmsNormKernel:
    """``AddRmsNormKernel`` (add_rms_norm_kernel.h): the AIV cores' loop over finished rounds."""

    def __init__(self, arnAddrs, tileCnt, tailCnt, hccl, tileHandleId, tailHandleId):
        self.residualGM, self.gammaGM, self.yGM, self.normOutGM = arnAddrs
        self.tileCnt_, self.tailCnt_ = tileCnt, tailCnt
        self.hccl_, self.tileHandleId_, self.tailHandleId_ = hccl, tileHandleId, tailHandleId

    def ComputeAddRmsNorm(self, tileTiling, tailTiling, keyData, rcvCntGM):
        lastCnt, addRmsNormCount = 0, 1
        while True:
            if hp.GetBlockIdx() == 0:
                curCnt = self.GetCurFinishedCnt()
                if curCnt <= lastCnt:
                    continue
                hp.gm_tensor(rcvCntGM, torch.int64, 1)[0] = curCnt  # *rcvCntGM = curCnt, dcci
            hp.SyncAll()
            lastCnt = int(hp.gm_tensor(rcvCntGM, torch.int64, 1)[0])  # dcci, then the read
            if lastCnt >= addRmsNormCount:
                rcvCntTile = lastCnt
                if self.tailCnt_ != 0 and lastCnt > self.tileCnt_:
                    rcvCntTile = self.tileCnt_
                if self.tailCnt_ == 0 or addRmsNormCount <= self.tileCnt_:
                    addRmsNormCount = self.ComputeAddRmsNormInner(
                        tileTiling, keyData.ARNNumBlocksTile, rcvCntTile, addRmsNormCount
                    )
                if self.tailCnt_ != 0 and self.tileCnt_ < addRmsNormCount <= lastCnt:
                    addRmsNormCount = self.ComputeAddRmsNormInner(
                        tailTiling, keyData.ARNNumBlocksTail, lastCnt, addRmsNormCount
                    )
            if lastCnt >= self.tileCnt_ + self.tailCnt_:
                break

    def AddRmsNorm(self, tilingData, numBlocks, rcvCnt, addRmsNormCount):
        if hp.GetBlockIdx() >= numBlocks:
            return
        op = KernelAddRmsNorm()  # ARN key: the K_NORMAL arithmetic for every key (stand-in)
        op.Init(self.gammaGM, tilingData, numBlocks)
        op.ComputeProcess(self.normOutGM, self.residualGM, self.yGM, tilingData, addRmsNormCount,
                          rcvCnt)  # fmt: skip

    def ComputeAddRmsNormInner(self, tilingData, numBlocks, rcvCnt, addRmsNormCount) -> int:
        offset = SIZEOF_HALF * tilingData.num_row * tilingData.num_col  # CalcShapeOffset
        cnt = rcvCnt - addRmsNormCount + 1
        self.AddRmsNorm(tilingData, numBlocks, rcvCnt, addRmsNormCount)
        self.normOutGM += offset * cnt
        self.yGM += offset * cnt
        self.residualGM += offset * cnt
        return addRmsNormCount + cnt

    def GetCurFinishedCnt(self) -> int:
        tileCnt = self.hccl_.Query(self.tileHandleId_)
        if self.tailCnt_ == 0:
            return tileCnt
        return tileCnt + self.hccl_.Query(self.tailHandleId_)


def matmul_all_reduce_add_rms_norm(aGM, bGM, residualGM, gammaGM, yGM, normOutGM, workspaceGM,
                                   tilingGM):  # fmt: skip
    """``MatmulAllReduceAddRmsNorm910General`` (``ON_CUBE_AND_VECTOR``): ``Init`` and
    ``InnerProcess`` of the base with the matmul into ``normOut``, then the ARN loop, no Wait."""
    tilingData = hp.GET_TILING_DATA_WITH_STRUCT(MatmulAllReduceAddRmsNormTilingData, tilingGM)
    tiling = tilingData.matmulAllReduceTilingData
    notifyFlag = hp.g_coreType == AIV and hp.GetBlockIdx() == 0
    hccl = Hccl()
    hccl.Init(hp.GetHcclContext(0))
    cGM = outputGM = (
        normOutGM  # addrs = {aGM, bGM, biasGM, nullptr, normOutGM, workspaceGM, normOutGM}
    )
    tileCOffset = tiling.tileM * tiling.rankN
    tileCAddrOffset = tileCOffset * SIZEOF_HALF
    tileHandleId = tailHandleId = -1  # set on the notify core only
    if notifyFlag:
        tileHandleId = hccl.AllReduce(
            cGM, outputGM, tileCOffset, tiling.dataType, HCCL_REDUCE_SUM, tiling.tileCnt
        )
        if tiling.tailCnt:
            tailAddr = tiling.tileCnt * tileCAddrOffset
            tailHandleId = hccl.AllReduce(cGM + tailAddr, outputGM + tailAddr,
                                          tiling.tailM * tiling.rankN, tiling.dataType,
                                          HCCL_REDUCE_SUM, tiling.tailCnt)  # fmt: skip
    a = hp.gm_tensor(aGM, HCCL_DATA_TYPE_FP16, tiling.rankM * tiling.rankK).view(tiling.rankM, -1)
    b = hp.gm_tensor(bGM, HCCL_DATA_TYPE_FP16, tiling.rankK * tiling.rankN).view(tiling.rankK, -1)
    c = hp.gm_tensor(cGM, HCCL_DATA_TYPE_FP16, tiling.rankM * tiling.rankN).view(tiling.rankM, -1)
    row = 0
    for handle, rows, cnt in (
        (tileHandleId, tiling.tileM, tiling.tileCnt),
        (tailHandleId, tiling.tailM, tiling.tailCnt),
    ):
        for _ in range(cnt):  # InnerProcess: the cube cores that compute split the rows
            if hp.g_coreType != AIV and hp.GetBlockIdx() < tiling.usedCoreNum:
                chunk = -(-rows // tiling.usedCoreNum)
                lo = row + hp.GetBlockIdx() * chunk
                hi = min(row + rows, lo + chunk)
                if lo < hi:
                    matmul(c[lo:hi], a[lo:hi], b)
            row += rows  # PostProcEachTurn: aGM += aOffset; cGM += cOffset; Mc2SyncAll; Commit
            hp.SyncAll[False]()
            if notifyFlag:
                hccl.Commit(handle)
    hp.SyncAll[False]()
    if hp.g_coreType == AIV:
        arnAddrs = (residualGM, gammaGM, yGM, normOutGM)
        op = AddRmsNormKernel(arnAddrs, tiling.tileCnt, tiling.tailCnt, hccl, tileHandleId,
                              tailHandleId)  # fmt: skip
        op.ComputeAddRmsNorm(tilingData.addRMSNormTileTilingData,
                             tilingData.addRMSNormTailTilingData, tilingData, workspaceGM)  # fmt: skip
    hp.SyncAll[False]()
    if notifyFlag:
        hccl.Finalize()


def Tiling4AddRmsNorm(numRow: int, numCol: int) -> tuple[AddRMSNormTilingData, int]:
    """``CommonAddResNormTiling::Tiling4AddRmsNorm`` for one group's rows: the rows split over
    the AIV cores in blocks of ``ceil(numRow / numCore)``; returns the tiling and numBlocks."""
    blockFactor = Ceil(numRow, AIV_NUM)
    tilingData = AddRMSNormTilingData(numRow, numCol, blockFactor, ROW_FACTOR, UB_FACTOR_B16,
                                      EPSILON, 1.0 / numCol)  # fmt: skip
    return tilingData, Ceil(numRow, blockFactor)


def make_arn_tiling() -> MatmulAllReduceAddRmsNormTilingData:
    """``MatmulAllReduceAddRmsNormTiling::DoOpTiling``: the matmul's tiling, then one ARN tiling
    for the tile rows and one for the tail rows; ``PostTiling`` checks ``aicCoreNum * 2``."""
    tilingData = MatmulAllReduceAddRmsNormTilingData(matmulAllReduceTilingData=make_tiling())
    tiling = tilingData.matmulAllReduceTilingData
    tilingData.addRMSNormTileTilingData, tilingData.ARNNumBlocksTile = Tiling4AddRmsNorm(
        tiling.tileM, tiling.rankN
    )
    numBlocksOfArn = tilingData.ARNNumBlocksTile
    if tiling.tailCnt:
        tilingData.addRMSNormTailTilingData, tilingData.ARNNumBlocksTail = Tiling4AddRmsNorm(
            tiling.tailM, tiling.rankN
        )
        numBlocksOfArn = max(numBlocksOfArn, tilingData.ARNNumBlocksTail)
    assert numBlocksOfArn <= AIC_NUM * 2, "aicCoreNum * 2 must cover the ARN cores"
    return tilingData


def arn_rows() -> tuple[np.ndarray, np.ndarray]:
    """The ``y`` every rank should get (row r is ``+-2**(r % 4)``, signs alternating) and gamma."""
    r, col = np.meshgrid(np.arange(M), np.arange(N), indexing="ij")
    y = ((-1.0) ** (r + col) * 2.0 ** (r % 4)).astype(np.float16)
    return y, ((1 + np.arange(N) % 8) / 4).astype(np.float16)


def arn(mm_sum: np.ndarray, launches: int = 2) -> list[str]:
    """MatmulAllReduceAddRmsNorm: residual = y - (the AllReduce's sum), so y is known exactly
    and normOut is ``sign(y) * gamma``; both checked against numpy. The launches share one
    workspace, as an operator's launches do: the second starts with the first's round count
    in it."""
    rank = hp.get_rank()
    y_want, gamma = arn_rows()
    residual = (y_want.astype(np.float32) - mm_sum.astype(np.float32)).astype(np.float16)
    a, b = on_device(random_ints(rank, (M, K))), on_device(random_ints(1000, (K, N)))
    workspace = zeros(16, dtype=torch.int64)
    want = np.concatenate([y_want.reshape(-1), (np.sign(y_want) * gamma).reshape(-1)])
    verdicts = []
    for launch in range(launches):
        y, norm_out = zeros(M, N), zeros(M, N)
        hp.launch(matmul_all_reduce_add_rms_norm, a, b, on_device(residual), on_device(gamma),
                  y, norm_out, workspace, make_arn_tiling(), block_dim=AIC_NUM,
                  kernel_type="mix_aic_1_2")  # fmt: skip
        got = torch.cat([y.reshape(-1), norm_out.reshape(-1)])
        verdicts.append(compare(f"arn{launch + 1}", got, want, "y and normOut"))
    return verdicts


def main() -> list[str]:
    return arn(all_reduce_sum(hp.get_world_size()))


if __name__ == "__main__":
    run_sample(main)
