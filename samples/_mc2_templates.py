"""Stand-ins for the shared MC2 templates that hold no ordering call (Prepare, copies, matmul).

ops-transformer's kernels built on ``mc2/common/op_kernel/mc2_templates/`` (AlltoAllMatmul,
MatmulAlltoAll) instantiate the same ``MC2AlltoAllPrimitives``, ``MC2VecTranspose`` and
``MC2FpMatmul``; the ports share them here as the kernels share the templates. Likewise the
kernels built on ``mc2/allto_allv_quant_grouped_mat_mul/op_kernel/mc2_templates/`` (the 2026
AlltoAllvGroupedMatMul and GroupedMatMulAlltoAllv) share its tiling structs
(``common/a2av_common_tiling.h``) and ``QuantGroupedMatmul`` (``compute/quant_grouped_matmul.h``).
What orders work (the communicator's Commit, Wait and Finalize, the pipelines' SyncAll and
CrossCore flags) stays in each sample, where the mutation suite (tests/mutants.py) removes it.
"""

from __future__ import annotations

from ctypes import Structure, c_bool, c_int8, c_int32, c_uint8, c_uint16, c_uint32, c_uint64
from typing import Any

from _mc2 import FP16, SIZEOF_HALF, matmul, split_to_core, typed_fields

import hccl_py as hp
from hccl_py import AIV, Mc2CcTiling, Mc2InitTiling


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


# ---------------------------------------------------------------- a2av_common_tiling.h, a2av_gmm_utils.h
MAX_EP_RANK_SIZE = 128
MAX_EXPERT_SIZE = 256
MAX_EXPERT_PER_RANK = 32
TENSOR_LIST_SIZE = 512
MAX_HANDLE_ID_NUM = 64
PERMUTE_BUF_SIZE = 32768
PACK_FACTOR, X_TYPE_SIZE = 1, 2  # FP16 gmm x


class HcclA2avTilingInfo(Structure):
    _fields_ = [("hcclInitTiling", Mc2InitTiling), ("a2avCcTiling", Mc2CcTiling)]


class TaskTilingInfo(Structure):
    """TaskTilingInfo, member for member."""

    _fields_ = [
        *typed_fields(c_uint64, "BSK", "BS", "H1", "H2", "A", "N1", "N2", "epWorldSize", "e"),
        *typed_fields(c_uint64, "ubSize", "aivCoreNum", "aicCoreNum"),
        *typed_fields(
            c_uint32, "expertNum", "mainLoopExpertNum", "tailLoopExpertNum", "totalLoopCount"
        ),
        ("sendCnt", c_int32 * MAX_EXPERT_SIZE),
        ("recvCnt", c_int32 * MAX_EXPERT_SIZE),
    ]


class GMMQuantParams(Structure):
    _fields_ = [
        *typed_fields(c_uint32, "groupNum", "activeType", "aQuantMode", "bQuantMode"),
        *typed_fields(c_uint8, "singleX", "singleW", "singleY"),
        ("groupType", c_int8),
        *typed_fields(c_uint8, "groupListType", "hasBias"),
        ("reserved", c_uint16),
    ]


class GMMArray(Structure):
    _fields_ = [(name, c_int32 * 128) for name in ("mList", "kList", "nList")]


class TCubeTiling(Structure):
    """The leading members of TCubeTiling, up to baseK."""

    _fields_ = typed_fields(
        c_int32, "usedCoreNum", "M", "N", "Ka", "Kb", "singleCoreM", "singleCoreN"
    ) + typed_fields(c_int32, "singleCoreK", "baseM", "baseN", "baseK")


class GMMQuantTilingData(Structure):
    _fields_ = [
        ("gmmQuantParams", GMMQuantParams),
        ("gmmArray", GMMArray),
        ("mmTilingData", TCubeTiling),
    ]


#: The fields of AlltoAllvGmmTilingData and QuantAlltoAllvGroupedMatmulTilingData (pack 8): two
#: structs of one layout, for the FP16 and the quantised kernels of these templates.
A2AV_GMM_TILING_FIELDS = [
    ("hcclA2avTilingInfo", HcclA2avTilingInfo),
    ("taskTilingInfo", TaskTilingInfo),
    ("isPermuteOut", c_bool),
    ("isNeedMM", c_bool),
    ("gmmQuantTilingData", GMMQuantTilingData),
    ("mmQuantTilingData", GMMQuantTilingData),
]


def CeilDiv(a: int, b: int) -> int:
    return 0 if b == 0 else (a + b - 1) // b


def Align(a: int, b: int) -> int:
    return 0 if b == 0 else CeilDiv(a, b) * b


# ---------------------------------------------------------------- a2av_comm_params.h
class A2avCommParams:
    def __init__(self) -> None:
        self.sendCnt = [0] * MAX_EP_RANK_SIZE
        self.sendOffset = [0] * MAX_EP_RANK_SIZE
        self.recvCnt = [0] * MAX_EP_RANK_SIZE
        self.recvOffset = [0] * MAX_EP_RANK_SIZE


# ---------------------------------------------------------------- quant_grouped_matmul.h
class QuantGroupedMatmul:
    """QuantGroupedMatmul<..., FP16, ND, aTrans = false, bTrans = false, isLocal, isA2avGmm>:
    the grouped matmul of one batch of experts on the AIC cores (stand-in for Mc2GmmASWKernel).

    Groups are (expert, rank) pairs unless ``isLocal`` (the shared expert: one group of BS
    rows). ``isA2avGmm`` (communicate first): A is read through a table of per-group offsets
    into the rank-major receive buffer, C is written after the previous group. Otherwise
    (compute first): A follows the previous group and C goes through a table of per-group
    offsets into a rank-major send buffer (``cGroupOffsetTable``).
    """

    def __init__(self, isLocal: bool, isA2avGmm: bool) -> None:
        self.isLocal, self.isA2avGmm = isLocal, isA2avGmm
        self.expertTokenNum_ = [0] * MAX_EXPERT_PER_RANK
        self.expertTokenOffset_ = 0

    def Init(self, xGM, weightGM, yGM, tilingData, gmmTilingData, isA2avGmmFlag=False) -> None:
        if hp.g_coreType == AIV:
            return
        self.xGM_, self.wGM_, self.yGM_ = xGM, weightGM, yGM
        self.xBase_, self.wBase_, self.yBase_ = xGM, weightGM, yGM  # the GlobalTensors
        info = tilingData.taskTilingInfo
        self.tilingData_, self.gmmTilingData_ = tilingData, gmmTilingData
        self.e_, self.epWorldSize_ = info.e, info.epWorldSize
        self.h1_, self.n1_, self.bs_ = info.H1, info.N1, info.BS
        opCnt = info.recvCnt if isA2avGmmFlag else info.sendCnt
        for e in range(self.e_):
            for i in range(self.epWorldSize_):
                self.expertTokenNum_[e] += opCnt[e + i * self.e_]

    def Process(self, startExpertIdx: int, expertNum: int = 1) -> None:
        if hp.g_coreType == AIV:
            return
        batch = range(startExpertIdx, startExpertIdx + expertNum)
        expertTokenNum = sum(self.expertTokenNum_[x] for x in batch)
        if not self.isLocal and expertTokenNum == 0:
            return
        ranks, e, info = self.epWorldSize_, self.e_, self.tilingData_.taskTilingInfo
        aTable = cTable = None
        if not self.isLocal:  # group (expert, rank): rows of rank r for the batch's expert
            opCnt = info.recvCnt if self.isA2avGmm else info.sendCnt
            groupList = [opCnt[x + r * e] for x in batch for r in range(ranks)]
            # the rank-major side: per rank the batch's experts, rank after rank
            table, rankStart = [0] * len(groupList), 0
            width = self.h1_ // PACK_FACTOR if self.isA2avGmm else self.n1_
            if self.isA2avGmm:
                rankStart = self.expertTokenOffset_ * width
            for r in range(ranks):
                running = rankStart
                for j, x in enumerate(batch):
                    table[j * ranks + r] = running
                    running += opCnt[x + r * e] * width
                rankStart = running
            if self.isA2avGmm:
                aTable = table
            else:
                cTable = table
            groupNum = expertNum * ranks
        else:
            groupList, groupNum = [self.bs_], 1
        self.UpdateAddr(startExpertIdx, expertTokenNum)
        k = info.H2 if self.isLocal else self.h1_
        n = info.N2 if self.isLocal else self.n1_
        self.Mc2GmmASWKernel(groupNum, groupList, aTable, cTable, k, n, ranks)

    def UpdateAddr(self, startExpertIdx: int, expertTokenNum: int) -> None:
        if not self.isLocal and self.isA2avGmm:  # x stays at commOut, the table places it
            self.xGM_ = self.xBase_
        else:
            self.xGM_ = self.xBase_ + self.expertTokenOffset_ * self.h1_ * SIZEOF_HALF
        self.wGM_ = self.wBase_ + startExpertIdx * self.h1_ * self.n1_ * SIZEOF_HALF
        self.yGM_ = self.yBase_ + self.expertTokenOffset_ * self.n1_ * SIZEOF_HALF
        self.expertTokenOffset_ += expertTokenNum

    def Mc2GmmASWKernel(self, groupNum, groupList, aTable, cTable, k, n, rankDim) -> None:
        """Stand-in (QuantASWBlockSch::UpdateGroupOffset): groups in order, A at its table's
        offset or after the previous group, the weight moving on at each expert boundary, C at
        its table's offset or after the previous group; blocks baseM x baseN dealt round robin
        over usedCoreNum AIC cores."""
        cube = self.gmmTilingData_.mmTilingData
        block, me = 0, hp.GetBlockIdx()
        aOff = bOff = cOff = 0
        for g in range(groupNum):
            m = groupList[g]
            if g > 0:
                aOff = aTable[g] if aTable else aOff + groupList[g - 1] * k
                if rankDim <= 1 or g % rankDim == 0:
                    bOff += k * n
                cOff = cTable[g] if rankDim > 1 and cTable else cOff + groupList[g - 1] * n
            else:
                aOff = aTable[0] if aTable else 0
                cOff = cTable[0] if rankDim > 1 and cTable else 0
            for mIdx in range(CeilDiv(m, cube.baseM)):
                for nIdx in range(CeilDiv(n, cube.baseN)):
                    if block % cube.usedCoreNum == me:
                        self.block(aOff, bOff, cOff, m, k, n, mIdx, nIdx)
                    block += 1

    def block(self, aOff, bOff, cOff, m, k, n, mIdx, nIdx) -> None:
        cube = self.gmmTilingData_.mmTilingData
        rows = min(cube.baseM, m - mIdx * cube.baseM)
        cols = min(cube.baseN, n - nIdx * cube.baseN)
        r0, c0 = mIdx * cube.baseM, nIdx * cube.baseN
        a = hp.gm_tensor(self.xGM_ + (aOff + r0 * k) * SIZEOF_HALF, FP16, rows * k)
        b = hp.gm_tensor(self.wGM_ + (bOff + c0) * SIZEOF_HALF, FP16, (k - 1) * n + cols)
        c = hp.gm_tensor(
            self.yGM_ + (cOff + r0 * n + c0) * SIZEOF_HALF, FP16, (rows - 1) * n + cols
        )
        matmul(
            c.as_strided((rows, cols), (n, 1)),
            a.view(rows, k),
            b.as_strided((k, cols), (n, 1)),
        )

    def End(self) -> None:
        pass


# ---------------------------------------------------------------- mc2_tiling_struct.h (arch35)
# The RCSTiling and Mc2MatMulV3TilingData of the Ascend 950 (arch35) fused matmul kernels
# (AllGatherMatmulV2's AllGatherMatmulTilingDataV2 holds one RCSTiling and three of the latter).
class RCSTiling(Structure):
    """Mc2Tiling::RCSTiling: the shapes, the row cut and the workspace lengths, field for field."""

    _fields_ = (
        typed_fields(c_uint32, "rankDim", "rankID", "commtype", "subtype", "tileCnt", "tailM")
        + typed_fields(c_uint32, "tailCnt", "biasLen", "isAdd", "rankM", "rankN", "rankK")
        + typed_fields(c_uint32, "gatherIndex", "isTransposeA", "isTransposeB", "storageGather")
        + typed_fields(c_uint64, "nd2NzWorkLen", "cToFloatLen", "gatherLen")
        + typed_fields(c_uint32, "workspaceAddr4", "aicCoreNum", "needUbBuffer", "addX3UbCnt")
        + typed_fields(c_uint32, "commWorkSpaceSize", "isInputCommQuantScale", "dataType")
        + typed_fields(c_uint32, "commInt8WorkSpace", "dynamicQuantTempBuffSize")
    )


class Mc2MatMulV3TilingData(Structure):
    """Mc2MatMulV3TilingData (mat_mul_v3 arch35/mat_mul_tiling_data.h), TCubeTiling cut after baseK."""

    _fields_ = (
        [("tCubeTiling", TCubeTiling)]
        + typed_fields(
            c_uint32, "mTailCnt", "nTailCnt", "kTailCnt", "mBaseTailSplitCnt", "nBaseTailSplitCnt"
        )
        + typed_fields(c_uint32, "mTailMain", "nTailMain", "isHf32", "aswWindowLen")
    )


# ---------------------------------------------------------------- mc2_mat_mul_asw_kernel.h (arch35)
class AswBasicIndex:
    """``UpdateBasicIndex`` of the arch35 ASW matmul kernels: the (m, n) base block of a linear
    index, walked in windows of ``mainWindow`` m-blocks (the last window ``tailWindow``), every
    other window's n order reversed. The deriving kernel sets ``nCnt``, ``mainWindow``,
    ``mainRow`` and ``tailWindow``; it orders nothing, so both 950 matmul ports share it."""

    nCnt: int
    mainWindow: int
    mainRow: int
    tailWindow: int

    def UpdateBasicIndex(self, index: int) -> tuple[int, int]:
        rowIdx = index // self.nCnt // self.mainWindow
        if rowIdx < self.mainRow:
            mIdx = rowIdx * self.mainWindow + index % self.mainWindow
            nIdx = (index // self.mainWindow) % self.nCnt
        else:
            rowIdx, tailIndex = self.mainRow, index - self.mainRow * self.mainWindow * self.nCnt
            mIdx = self.mainRow * self.mainWindow + tailIndex % self.tailWindow
            nIdx = (tailIndex // self.tailWindow) % self.nCnt
        return mIdx, (self.nCnt - 1 - nIdx if rowIdx % 2 else nIdx)
