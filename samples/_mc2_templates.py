"""Stand-ins for the shared MC2 templates that hold no ordering call (Prepare, copies, matmul).

ops-transformer's kernels built on ``mc2/common/op_kernel/mc2_templates/`` (AlltoAllMatmul,
MatmulAlltoAll) instantiate the same ``MC2AlltoAllPrimitives``, ``MC2VecTranspose`` and
``MC2FpMatmul``; the ports share them here as the kernels share the templates. What orders
work (the communicator's Commit, Wait and Finalize, the pipelines' SyncAll and CrossCore
flags) stays in each sample, where the mutation suite (tests/mutants.py) removes it.
"""

from __future__ import annotations

from typing import Any

from _mc2 import FP16, SIZEOF_HALF, matmul, split_to_core

import hccl_py as hp
from hccl_py import AIV


# ---------------------------------------------------------------- hccl_primitives.h
class MC2AlltoAllContext:
    """MC2AlltoAllContext: what one tile group's AlltoAll tasks need."""

    def __init__(self) -> None:
        self.taskCnt = 0
        self.sendBuffer = self.recvBuffer = hp.NULL
        self.sendOffset = self.recvOffset = self.sendCount = self.strideCount = 0
        self.hcclDataType = 0
        self.repeat = 1


class MC2AlltoAllPrimitives:
    """MC2AlltoAllPrimitives: the Prepare of task ``taskIndex`` of a group."""

    def Prepare(self, hccl, context: MC2AlltoAllContext, taskIndex: int) -> int:
        return hccl.AlltoAll[False](
            context.sendBuffer + taskIndex * context.sendOffset,
            context.recvBuffer + taskIndex * context.recvOffset,
            context.sendCount,
            context.hcclDataType,
            context.strideCount,
            context.repeat,
        )


# ---------------------------------------------------------------- mc2_vec_transpose.h
class MC2TransposeContext:
    """MC2TransposeContext: where one tile group's rank blocks come from and go, and their shape."""

    def __init__(self) -> None:
        self.transposeSrcAddr = self.transposeDstAddr = hp.NULL
        self.transposeSrcOffset = self.transposeDstOffset = 0
        self.nextSrcBlockOffset = self.nextDstBlockOffset = 0
        self.rankCnt = self.innerAxis = self.transM = 0
        self.innerOffsetIn = self.innerOffsetOut = 0


class MC2VecTranspose:
    """MC2VecTranspose<half>: each AIV core copies its 64 x 256 pieces of every rank's block."""

    MAIN_TILEM_SPLIT_SIZE = 64
    MAIN_INNER_AXIS_SPLIT_SIZE = 256
    ONE_RATIO_TWO = 2

    def __init__(self) -> None:
        self.context_ = MC2TransposeContext()

    def GetContextPtr(self) -> MC2TransposeContext:
        return self.context_

    def Process(self, taskIndex: int) -> None:
        ctx = self.context_
        srcAddr = ctx.transposeSrcAddr + taskIndex * ctx.transposeSrcOffset
        dstAddr = ctx.transposeDstAddr + taskIndex * ctx.transposeDstOffset
        splitM, splitInner = self.MAIN_TILEM_SPLIT_SIZE, self.MAIN_INNER_AXIS_SPLIT_SIZE
        usedCoreNum = hp.GetBlockNum() * self.ONE_RATIO_TWO  # CV 1:2, every AIV core at first
        tileMSplitCnt = -(-ctx.transM // splitM)
        innerAxisSplitCnt = -(-ctx.innerAxis // splitInner)
        totalCnt = tileMSplitCnt * innerAxisSplitCnt
        tailSplitTileM = ctx.transM - (tileMSplitCnt - 1) * splitM
        tailSplitInnerAxis = ctx.innerAxis - (innerAxisSplitCnt - 1) * splitInner
        usedCoreNum = min(usedCoreNum, totalCnt)
        calBlockRound, tailBlockCnt = divmod(totalCnt, usedCoreNum)
        blockIdx = hp.GetBlockIdx()
        if blockIdx >= usedCoreNum:
            return
        if blockIdx < tailBlockCnt:
            calBlockRound += 1
        for rankIdx in range(ctx.rankCnt):
            srcGmOffset = rankIdx * ctx.nextSrcBlockOffset  # rank rankIdx's part of the input
            dstGmOffset = rankIdx * ctx.nextDstBlockOffset  # and of the output
            for block in range(calBlockRound):
                inTotal = block * usedCoreNum + blockIdx
                curInner, curTileM = inTotal % innerAxisSplitCnt, inTotal // innerAxisSplitCnt
                rows = tailSplitTileM if curTileM == tileMSplitCnt - 1 else splitM
                cols = tailSplitInnerAxis if curInner == innerAxisSplitCnt - 1 else splitInner
                src = srcGmOffset + curTileM * splitM * ctx.innerOffsetIn + curInner * splitInner
                dst = dstGmOffset + curTileM * splitM * ctx.innerOffsetOut + curInner * splitInner
                self.VecTransposeProcess(srcAddr, src, dstAddr, dst, rows, cols)

    def VecTransposeProcess(self, srcAddr, srcGmOffset, dstAddr, dstGmOffset, rows, cols) -> None:
        """CopyInToUB + CopyOutToGm: ``rows`` rows of ``cols`` elements, each side with its
        own row pitch (innerOffsetIn, innerOffsetOut), through the Unified Buffer."""
        ctx = self.context_
        src = hp.gm_tensor(
            srcAddr + srcGmOffset * SIZEOF_HALF, FP16, (rows - 1) * ctx.innerOffsetIn + cols
        )
        dst = hp.gm_tensor(
            dstAddr + dstGmOffset * SIZEOF_HALF, FP16, (rows - 1) * ctx.innerOffsetOut + cols
        )
        ub = src.as_strided((rows, cols), (ctx.innerOffsetIn, 1)).clone()
        dst.as_strided((rows, cols), (ctx.innerOffsetOut, 1)).copy_(ub)


# ---------------------------------------------------------------- mc2_fp_matmul.h
class MC2MMBaseData:
    """MC2MMContext's baseData: the matrices of task 0 and the step per task, in bytes."""

    def __init__(self) -> None:
        self.aGM = self.bGM = self.cGM = self.biasGM = hp.NULL
        self.aOffset = self.bOffset = self.cOffset = 0


class MC2FpMatmul:
    """MC2FpMatmul (stand-in for Mc2MatmulBaseKernel): c = a @ b of one task on the AIC cores.

    ``info`` is the kernel's tiling info (``rankN``), ``k`` the inner dimension of its matmul.
    """

    def __init__(self, info: Any, k: int) -> None:
        self.baseData = MC2MMBaseData()
        self.info = info
        self.k = k
        self.rows = 0  # the task's M: tileM or tailM (the matmul tiling's M)

    def GetContextPtr(self) -> MC2FpMatmul:
        return self

    def Init(self) -> None:
        pass

    def Process(self, taskIndex: int) -> None:
        if hp.g_coreType == AIV:
            return
        base, k, n = self.baseData, self.k, self.info.rankN
        a = hp.gm_tensor(base.aGM + taskIndex * base.aOffset, FP16, self.rows * k)
        b = hp.gm_tensor(base.bGM + taskIndex * base.bOffset, FP16, k * n)
        c = hp.gm_tensor(base.cGM + taskIndex * base.cOffset, FP16, self.rows * n)
        first, last = split_to_core(self.rows, hp.GetBlockNum(), hp.GetBlockIdx())
        a, c = a.view(self.rows, k), c.view(self.rows, n)
        matmul(c[first:last], a[first:last], b.view(k, n))

    def End(self) -> None:
        pass
