"""Port of ops-transformer's QuantReduceScatter on Ascend 950 (MTE communication, windows only).

Source: mirror-cann/ops-transformer at 3a280bcc (2026-07-21), every file read at that commit:
``mc2/quant_reduce_scatter/op_kernel/``: the entry ``quant_reduce_scatter.cpp`` (template
``MTE_COMM``, the only tiling key of ``quant_reduce_scatter_tiling_key.h``), the tiling struct
``quant_reduce_scatter_tiling_data.h``, ``QuantReduceScatterMte`` of ``quant_reduce_scatter_mte.h``
(``Init``, ``ParseTilingInfo``, ``ComputeXPerBlock``, ``ComputeBlockDistribution``,
``InitSubModules``, ``ReadDataBlockReduceSum``, ``ClearSumTensor``, ``ExecuteReduceScatter``,
``Process``), ``MTECommunication`` of ``mte_comm.h`` (``InitHcclContext``, ``InitParams``,
``InitGMTensor``, ``InitBuffer``, ``SetBlockSize``, ``ComputeTailAivId``, ``CopyDataBlock``,
``CopyDataToWin<true>``, ``WriteStatusToWin``, ``ReadStatus``, ``CopyResultToOutput``,
``GetWinAddrGm``, ``GetWinDataAddrGm``, ``GetWinStatusAddrGm``), ``VectorCompute`` of
``vec_comp.h`` (``CastToFloat``, ``DequantReduceSum``), the helpers of ``utils.h`` and, from
``mc2/common/op_kernel/moe_distribute_base.h``, the 950 ``HcclOpParam`` (``HcclCombinOpParam``:
``rankId``, ``rankDim``, ``windowsIn[r]``, ``windowsOut[r]``). The host tiling is
``op_host/op_tiling/quant_reduce_scatter_tiling.cpp`` (``SetHcommCfg``, ``SetTilingData``,
``SetXPerBlock``, ``SetTilingKey``) with the shape checks of
``op_host/op_tiling/common/quant_reduce_scatter_util_tiling.cpp``. docs/notes/mc2-kernels.md,
section 18.

What it computes: every rank holds ``x`` (BS, H), quantised per group of columns, and its
``scales``; rank r's output is its 1/rankDim share of the rows, ``sum over ranks s of
dequant(x_s, scales_s)`` in FP32, in the output type. Two instances run: KG (int8 x, one FP32
scale per 128 columns, half output; three launches) and MX (FP8 E4M3 x, one E8M0 scale per 32
columns, scales (BS, H / 64, 2), FP32 output; one launch). No Hccl object and no AI CPU server:
the host's cc tiling asks for the MTE (AIV) engine, and the kernel reads every rank's windows
from the context.

What runs unchanged: the window layout (``windowsIn[r]``: state area 0 at 0, state area 1 at
462 KB, the cores' 0/1 flags at 924 KB + ``aivId * 512``, data area 0 at 1 MB; data area 1 is
``windowsOut[r]``; scales right after the ``xSize`` bytes of x); the per-core 0/1 flag, read
and flipped on every launch, choosing the areas (so KG launches three times, the third in the
first one's areas, and MX runs in the second's); the block tiling (``xPerBlock`` from the UB budget, the host's
recommendation, the slice and the 1024 alignment; blocks dealt out to the cores, the first ones
one more, the tail block on ``lastAivId``); the copy of every block of every rank's slice into
this rank's window; one 32-byte status block ``{1.0f, 0 ...}`` per (core, rank) written into
every rank's state area at ``(aivId * rankDim + rankId) * 32``; the wait for the sum of this
core's ``rankDim`` blocks to be within 0.5 of ``rankDim``, then their reset; the reads of this
rank's slice from every rank's window, starting at its own rank (``(rankId + i) % rankDim``),
the dequantisation (int8 -> half -> float or FP8 -> float; E8M0 scales -> BF16 32 at a time ->
float; each scale broadcast over its group), the FP32 sum in that order, and the output: a
``CAST_RINT`` cast to half, or a plain copy for FP32.

Stand-ins: two of the op's instances (not ported: HiF8 and FP8 E5M2 x, BF16 output, the FP4
branch of ``CastToFloat``); UB buffers are torch tensors and pipe barriers, queues and
``SyncFunc`` are program order; ``Sum`` is ``torch.sum``, ``CastVf`` a torch cast; two AIV cores
instead of ``GetCoreNumAiv()``; a 2 MB window (``HCCL_BUFFSIZE``); H = 5120 and BS twice the world
size, so each rank's slice is five blocks of 2048 and core 0 copies three, core 1 two. A slice
that ends in a short tail block makes the kernel read scales past the end of the ``scales``
tensor (``CopyDataBlock`` copies a full block's scales); tests/test_samples.py checks that the
emulator reports it (section 18 of the notes).

Run: ``python samples/mc2_quant_reduce_scatter.py`` (4 emulated ranks),
``python -m hccl_py run -n 2 --backend gloo samples/mc2_quant_reduce_scatter.py``.
"""

from ctypes import Structure, c_uint32, c_uint64

import numpy as np
import torch
from _common import WORLD_GROUP, compare, on_device, run_sample, zeros
from _mc2 import typed_fields
from _quant_mte import (
    MX_SIZE,
    PER_GROUP_SIZE,
    BlockAlignMod,
    CeilAlignU32,
    CeilDiv,
    CeilDivU32,
    FloorAlign,
    FracDiv,
    VectorCompute,
    fp8_e8m0_t,
    gm,
)

import hccl_py as hp
from hccl_py import AIV, Mc2CcTiling, Mc2CcTilingConfig, Mc2InitTiling, TilingData

PLATFORM = "950"
RUN_KWARGS = {"buffsize_mb": 2}
H = 5120  # hidden size: in [1024, 8192], a multiple of 128
ROWS_PER_RANK = 2  # BS = ROWS_PER_RANK * rankDim: BS must be a multiple of rankDim
AIV_NUM = 2  # stand-in for GetCoreNumAiv()
LAUNCHES = 3  # the third launch is back in the first one's half of the windows
# quant_reduce_scatter_util_tiling.h / mc2_tiling_utils.h
OP_TYPE_ALL_TO_ALL = 8
AIV_TYPE = 3  # the MTE engine: no AI CPU server, the context lists every rank's windows
MTE_COMM = 1  # the tiling key
# mte_comm.h
UB_ALIGN_BYTES = 32
FLOAT_UB_ALIGN_NUM = 8
BUFFER_NUM = 2
SCALE_BLCOK_BYTES = 32
X_BLOCK_BYTES = 1024
STATE_WIN_SIZE = 1024 * 1024  # state areas 0 and 1, then the cores' 0/1 flags
SINGLE_STATE_REGION_SIZE = 462 * 1024
ZERONE_STATE_POS = 0
WIN_ADDR_ALIGN = 512
# quant_reduce_scatter_mte.h
MX_SCALES_LAST_DIM = 2  # MX scales are (BS, H / 64, 2)
# quant_reduce_scatter_util_tiling.h: columns of x per column of scales, per mode
TG_QUANT_NUMBER, MX_QUANT_NUMBER = 128, 64
# AscendC, __NPU_ARCH__ 3510
TOTAL_UB_SIZE = 248 * 1024
SIZEOF = {torch.int8: 1, torch.float8_e4m3fn: 1, fp8_e8m0_t: 1, torch.float32: 4}
SIZEOF |= {torch.float16: 2, torch.bfloat16: 2}
#: The two instances the sample launches: <XType, ScalesType, OutputType>.
KG = (torch.int8, torch.float32, torch.float16)  # int8 x, FP32 scales per 128, half out
MX = (torch.float8_e4m3fn, fp8_e8m0_t, torch.float32)  # FP8 x, E8M0 scales per 32, FP32 out


class QuantReduceScatterTilingInfo(Structure):
    _fields_ = [
        *typed_fields(c_uint64, "bs", "hiddenSize", "scaleHiddenSize", "aivNum", "totalWinSize"),
        *typed_fields(c_uint32, "xPerBlock", "alignBlock"),
    ]


class QuantReduceScatterTilingData(TilingData):
    _fields_ = [
        ("mc2InitTiling", Mc2InitTiling),
        ("mc2CcTiling", Mc2CcTiling),
        ("quantReduceScatterTilingInfo", QuantReduceScatterTilingInfo),
    ]


# ---------------------------------------------------------------- mte_comm.h
class MTECommunication:
    """``MTECommunication<XType, ScalesType, OutputType>``: the copies into the windows and flags."""

    def __init__(self, XType: torch.dtype, ScalesType: torch.dtype, OutputType: torch.dtype):
        self.XType, self.ScalesType, self.OutputType = XType, ScalesType, OutputType

    def InitHcclContext(self) -> None:
        self.hcclContext_ = hp.GetHcclContext(0)  # GetHcclContext<HCCL_GROUP_ID_0>()

    def InitParams(self) -> None:
        self.aivId_ = hp.GetBlockIdx()
        self.assignedBlockNums_ = self.round_ + (self.aivId_ < self.tailBlockNums_)
        blockIdx = self.aivId_ * self.round_ + min(self.aivId_, self.tailBlockNums_)
        self.xOffset_ = blockIdx * self.xNumPerBlock_
        self.scaleOffset_ = blockIdx * self.scaleNumsPerBlock_

    def InitGMTensor(self, x, scales, output, xSize: int, winSpaceGmSize: int) -> None:
        self.xGMTensor_, self.scalesGMTensor_, self.outputTensor_ = x, scales, output
        # the 0/1 flag of this core, in this rank's window after the two state areas
        currCoreFlagOffset = 2 * SINGLE_STATE_REGION_SIZE + self.aivId_ * WIN_ADDR_ALIGN
        flagGM = self.GetWinAddrGm(self.hcclContext_.rankId, currCoreFlagOffset)
        selfWinFlagGMTensor = gm(flagGM, torch.int32, UB_ALIGN_BYTES // 4)
        winFlagLocalTensor = selfWinFlagGMTensor.clone()  # DataCopy GM -> UB
        self.winBufferFlags_ = int(winFlagLocalTensor[ZERONE_STATE_POS])
        winFlagLocalTensor[ZERONE_STATE_POS] = 1 - self.winBufferFlags_  # 0 -> 1, 1 -> 0
        selfWinFlagGMTensor[:] = winFlagLocalTensor  # DataCopy UB -> GM
        # this rank's data area of the chosen half: x, then the scales
        localDataSpaceGm = self.GetWinDataAddrGm(self.hcclContext_.rankId, self.winBufferFlags_)
        self.localWinXGM_ = localDataSpaceGm
        self.localWinScaleGM_ = localDataSpaceGm + xSize

    def InitBuffer(self) -> None:
        rankDim = self.hcclContext_.rankDim
        # stateResetBuf_: rankDim 32-byte blocks of zeros, to clear the state area
        self.stateResetTensor_ = torch.zeros(rankDim * FLOAT_UB_ALIGN_NUM, dtype=torch.float32)

    def SetBlockSize(self, elementsPerBlock, aivNum, lastBlockNum, scaleNumsPerBlock=0) -> None:
        self.xNumPerBlock_, self.aivNum_, self.tailXNums_ = elementsPerBlock, aivNum, lastBlockNum
        if scaleNumsPerBlock == 0:
            scaleNumsPerBlock = SCALE_BLCOK_BYTES // SIZEOF[self.ScalesType]
        self.scaleNumsPerBlock_ = scaleNumsPerBlock

    def ComputeTailAivId(self, totalAivCount: int) -> None:
        """The core of the tail block: with a single round, the last core that has a block."""
        if self.round_ == 0:
            self.lastAivId_ = self.tailBlockNums_ - 1
        else:
            self.lastAivId_ = totalAivCount - 1

    def CopyDataBlock(self, curXOffset: int, curScaleOffset: int, count: int) -> None:
        # x: GM -> UB -> window
        xTmpTensor = gm(self.xGMTensor_ + curXOffset, self.XType, count).clone()
        gm(self.localWinXGM_ + curXOffset, self.XType, count)[:] = xTmpTensor
        # scales: GM -> UB -> window (DataCopyPad of a whole block's scales)
        scaleBytes = SIZEOF[self.ScalesType]
        scaleGM = self.scalesGMTensor_ + curScaleOffset * scaleBytes
        scaleTmpTensor = gm(scaleGM, self.ScalesType, self.scaleNumsPerBlock_).clone()
        winScaleGM = self.localWinScaleGM_ + curScaleOffset * scaleBytes
        gm(winScaleGM, self.ScalesType, self.scaleNumsPerBlock_)[:] = scaleTmpTensor

    def CopyDataToWin(self, xSliceSizeNums: int, scaleSliceNums: int) -> None:
        """``CopyDataToWin<true>`` (ReduceScatter): this core's blocks of every rank's slice."""
        for curBlock in range(self.assignedBlockNums_):
            curXOffset = self.xOffset_ + curBlock * self.xNumPerBlock_
            curScaleOffset = self.scaleOffset_ + curBlock * self.scaleNumsPerBlock_
            copyBlockNum = self.xNumPerBlock_
            if self.aivId_ == self.lastAivId_ and curBlock == self.assignedBlockNums_ - 1:
                copyBlockNum = self.tailXNums_
            for curRank in range(self.hcclContext_.rankDim):
                curRankXOffset = curXOffset + curRank * xSliceSizeNums
                curRankScaleOffset = curScaleOffset + curRank * scaleSliceNums
                self.CopyDataBlock(curRankXOffset, curRankScaleOffset, copyBlockNum)
        # PipeBarrier<PIPE_ALL>: every copy has landed before the status goes out

    def WriteStatusToWin(self) -> None:
        """A 1.0f status block of this core into every rank's state area."""
        rankDim, rankId = self.hcclContext_.rankDim, self.hcclContext_.rankId
        coreOffset = self.aivId_ * rankDim
        for curRank in range(rankDim):
            statusTensor = self.stateResetTensor_[:FLOAT_UB_ALIGN_NUM].clone()
            statusTensor[0] = 1.0
            remoteWinStateGM = self.GetWinStatusAddrGm(curRank, self.winBufferFlags_)
            curOffset = (coreOffset + rankId) * FLOAT_UB_ALIGN_NUM
            stateGMTensor = gm(remoteWinStateGM + curOffset * 4, torch.float32, FLOAT_UB_ALIGN_NUM)
            stateGMTensor[:] = statusTensor

    def ReadStatus(self) -> None:
        """Wait until every rank's core ``aivId`` wrote its status block here, then clear them."""
        rankDim = self.hcclContext_.rankDim
        stateGM = self.GetWinStatusAddrGm(self.hcclContext_.rankId, self.winBufferFlags_)
        offset = self.aivId_ * rankDim * FLOAT_UB_ALIGN_NUM  # this core's rankDim blocks
        statusGM = stateGM + offset * 4
        statusCnt = rankDim * FLOAT_UB_ALIGN_NUM
        minTarget, maxTarget = rankDim - 0.5, rankDim + 0.5
        # DataCopy the rankDim blocks from GM, Sum them, until the sum is rankDim
        while not minTarget <= float(gm(statusGM, torch.float32, statusCnt).sum()) <= maxTarget:
            pass
        selfStatusWinTensor = gm(statusGM, torch.float32, statusCnt)
        selfStatusWinTensor[:] = self.stateResetTensor_  # the state area back to zeros

    def CopyResultToOutput(self, outOffsetGM: int, localResultTensor, count: int) -> None:
        if self.OutputType == torch.float32:
            xOutTensor = localResultTensor[:count].clone()  # DataCopy
        else:
            xOutTensor = localResultTensor[:count].to(self.OutputType)  # Cast CAST_RINT
        outGM = self.outputTensor_ + outOffsetGM * SIZEOF[self.OutputType]
        gm(outGM, self.OutputType, count)[:] = xOutTensor

    def GetWinAddrGm(self, rankId: int, offset: int = 0) -> hp.GmAddr:
        return self.hcclContext_.windowsIn[rankId] + offset

    def GetWinDataAddrGm(self, rankId: int, winFlag: int) -> hp.GmAddr:
        if winFlag == 0:
            return self.GetWinAddrGm(rankId, STATE_WIN_SIZE)  # area 0: after the state areas
        return self.hcclContext_.windowsOut[rankId]  # area 1: the Out window

    def GetWinStatusAddrGm(self, rankId: int, winFlag: int) -> hp.GmAddr:
        if winFlag == 0:
            return self.GetWinAddrGm(rankId)
        return self.GetWinAddrGm(rankId, SINGLE_STATE_REGION_SIZE)


# ---------------------------------------------------------------- quant_reduce_scatter_mte.h
class QuantReduceScatterMte:
    """``QuantReduceScatterMte<XType, ScalesType, OutputType>``."""

    def __init__(self, XType: torch.dtype, ScalesType: torch.dtype, OutputType: torch.dtype):
        self.XType, self.ScalesType, self.OutputType = XType, ScalesType, OutputType
        self.mteComm_ = MTECommunication(XType, ScalesType, OutputType)
        self.vecComp_ = VectorCompute(XType, ScalesType, OutputType)

    def Init(self, x, scales, output, tilingData: QuantReduceScatterTilingData) -> None:
        self.mteComm_.InitHcclContext()
        self.ParseTilingInfo(tilingData)
        self.ComputeXPerBlock(tilingData)
        aivNum = tilingData.quantReduceScatterTilingInfo.aivNum
        self.ComputeBlockDistribution(aivNum)
        self.InitSubModules(x, scales, output, aivNum)

    def ParseTilingInfo(self, tilingData: QuantReduceScatterTilingData) -> None:
        info = tilingData.quantReduceScatterTilingInfo
        rankDim = self.mteComm_.hcclContext_.rankDim
        self.totalWinSize_ = info.totalWinSize
        self.xSize_ = info.bs * info.hiddenSize * SIZEOF[self.XType]
        self.scaleSize_ = info.bs * info.scaleHiddenSize * SIZEOF[self.ScalesType]
        if self.ScalesType == fp8_e8m0_t:
            self.scaleSize_ *= MX_SCALES_LAST_DIM
        xSliceSize = self.xSize_ // rankDim
        self.xSliceSizeNums_ = xSliceSize // SIZEOF[self.XType]
        self.scaleSliceNums_ = self.scaleSize_ // (rankDim * SIZEOF[self.ScalesType])

    def ComputeXPerBlock(self, tilingData: QuantReduceScatterTilingData) -> None:
        """The block size: what fits the UB, at most the host's and the slice, 1024-aligned."""
        info = tilingData.quantReduceScatterTilingInfo
        rankDim = self.mteComm_.hcclContext_.rankDim
        # buffers whose size does not depend on the block: scaleQueue_, winFlagsBuf_,
        # writeStateBuf_, readStateBuf_, stateResetBuf_
        mteCommFixedSpace = BUFFER_NUM * X_BLOCK_BYTES + 2 * UB_ALIGN_BYTES
        mteCommFixedSpace += 2 * rankDim * UB_ALIGN_BYTES
        # bytes per x: xOutQueue_, xQueue_, brcbBuf_, xCastBuf_, xCastBf16Buf_, xCastfp16Buf_,
        # sumBuf_, xInQueue_
        baseDynamic = (
            BUFFER_NUM * SIZEOF[self.OutputType] + BUFFER_NUM * SIZEOF[self.XType] + 4 + 4 + 2 + 2
        )
        baseDynamic += 4 + BUFFER_NUM * SIZEOF[self.XType]
        remainingSpace = TOTAL_UB_SIZE - mteCommFixedSpace
        if self.ScalesType == fp8_e8m0_t:
            maxXPerBlock = FracDiv(remainingSpace, baseDynamic, 4, 1)  # + 1/4 B of scale per x
        else:
            maxXPerBlock = FracDiv(remainingSpace, baseDynamic, 32, 3)  # + 3/32 B of scale per x
        hostRecommended = info.xPerBlock
        if hostRecommended != 0 and maxXPerBlock > hostRecommended:
            maxXPerBlock = hostRecommended
        self.xPerBlock_ = min(maxXPerBlock, self.xSliceSizeNums_)
        alignBlock = info.alignBlock
        self.xPerBlock_ = FloorAlign(self.xPerBlock_, alignBlock)
        if self.xPerBlock_ == 0:
            self.xPerBlock_ = alignBlock
        if self.ScalesType == fp8_e8m0_t:
            self.scaleNumsPerBlock_ = self.xPerBlock_ // MX_SIZE
        else:
            self.scaleNumsPerBlock_ = self.xPerBlock_ // PER_GROUP_SIZE
        # xInQueue_, scaleInQue_ (32-byte aligned), sumBuf_: the UB tensors of the reads
        scaleAlignNum = UB_ALIGN_BYTES // SIZEOF[self.ScalesType]
        self.scaleAllocCount_ = CeilAlignU32(self.scaleNumsPerBlock_, scaleAlignNum)
        self.sumTensor_ = torch.zeros(self.xPerBlock_, dtype=torch.float32)

    def ComputeBlockDistribution(self, aivNum: int) -> None:
        aivId = hp.GetBlockIdx()
        self.totalBlockNums_ = CeilDiv(self.xSliceSizeNums_, self.xPerBlock_)
        self.round_, self.tailBlockNums_ = divmod(self.totalBlockNums_, aivNum)
        self.assignedBlockNums_ = self.round_ + (aivId < self.tailBlockNums_)
        self.lastAivId_ = self.tailBlockNums_ - 1 if self.round_ == 0 else aivNum - 1
        blockIdx = aivId * self.round_ + min(aivId, self.tailBlockNums_)
        self.xOffset_ = blockIdx * self.xPerBlock_
        self.scaleOffset_ = blockIdx * self.scaleNumsPerBlock_
        self.tailXNums_ = BlockAlignMod(self.xSliceSizeNums_, self.xPerBlock_)

    def InitSubModules(self, x, scales, output, aivNum: int) -> None:
        self.vecComp_.SetBlockSize(self.xPerBlock_)
        self.vecComp_.SetScaleNums(self.scaleNumsPerBlock_)
        self.mteComm_.round_ = self.round_
        self.mteComm_.tailBlockNums_ = self.tailBlockNums_
        self.mteComm_.ComputeTailAivId(aivNum)
        self.mteComm_.SetBlockSize(
            self.xPerBlock_, aivNum, self.tailXNums_, self.scaleNumsPerBlock_
        )
        self.mteComm_.InitParams()
        self.mteComm_.InitBuffer()
        self.mteComm_.InitGMTensor(x, scales, output, self.xSize_, self.totalWinSize_)

    def ReadDataBlockReduceSum(self, curXOffset, curScaleOffset, xNum, scaleNum) -> None:
        # x: window -> UB (xInQueue_ has a whole block's room; the lanes past xNum are unused)
        xTmpTensor = torch.zeros(self.xPerBlock_, dtype=self.XType)
        xTmpTensor[:xNum] = gm(self.remoteWinXGM_ + curXOffset, self.XType, xNum)
        # scales: window -> UB (DataCopyPad of scaleNum)
        scaleTmpTensor = torch.zeros(self.scaleAllocCount_, dtype=self.ScalesType)
        scaleGM = self.remoteWinScaleGM_ + curScaleOffset * SIZEOF[self.ScalesType]
        scaleTmpTensor[:scaleNum] = gm(scaleGM, self.ScalesType, scaleNum)
        self.vecComp_.DequantReduceSum(xTmpTensor, scaleTmpTensor, self.sumTensor_)

    def ClearSumTensor(self) -> None:
        self.sumTensor_.zero_()  # Duplicate 0.0

    def ExecuteReduceScatter(self) -> None:
        self.mteComm_.ReadStatus()  # the soft synchronisation
        aivId = hp.GetBlockIdx()
        context = self.mteComm_.hcclContext_
        for curBlock in range(self.assignedBlockNums_):
            curXOffset = self.xOffset_ + curBlock * self.xPerBlock_
            curScaleOffset = self.scaleOffset_ + curBlock * self.scaleNumsPerBlock_
            curXNum, curScaleNum = self.xPerBlock_, self.scaleNumsPerBlock_
            if aivId == self.lastAivId_ and curBlock == self.assignedBlockNums_ - 1:
                curXNum = self.tailXNums_
                if self.ScalesType == fp8_e8m0_t:
                    curScaleNum = CeilDivU32(curXNum, MX_SIZE)
                else:
                    curScaleNum = CeilDivU32(curXNum, PER_GROUP_SIZE)
            self.ClearSumTensor()
            # every rank's window, staggered: rank r reads r, r + 1, ... first
            startRankId = context.rankId
            for i in range(context.rankDim):
                remoteRankId = (startRankId + i) % context.rankDim
                remoteDataSpaceGm = self.mteComm_.GetWinDataAddrGm(
                    remoteRankId, self.mteComm_.winBufferFlags_
                )
                self.remoteWinXGM_ = remoteDataSpaceGm
                self.remoteWinScaleGM_ = remoteDataSpaceGm + self.xSize_
                # only this rank's slice of each window
                curRankXOffset = curXOffset + context.rankId * self.xSliceSizeNums_
                curRankScaleOffset = curScaleOffset + context.rankId * self.scaleSliceNums_
                self.ReadDataBlockReduceSum(
                    curRankXOffset, curRankScaleOffset, curXNum, curScaleNum
                )
            self.mteComm_.CopyResultToOutput(curXOffset, self.sumTensor_, curXNum)

    def Process(self) -> None:
        if hp.g_coreType != AIV:
            return  # AIV only
        self.mteComm_.CopyDataToWin(self.xSliceSizeNums_, self.scaleSliceNums_)
        self.mteComm_.WriteStatusToWin()
        self.ExecuteReduceScatter()


def QuantReduceScatterKernel(DTYPE_X, DTYPE_SCALES, DTYPE_OUT_PUT):
    """The kernel instance the binary holds for these input and output types."""

    def quant_reduce_scatter(x, scales, output, workspaceGM, tilingGM):
        """The kernel entry, ``quant_reduce_scatter<MTE_COMM>`` (KERNEL_TYPE_AIV_ONLY)."""
        tilingData = hp.GET_TILING_DATA_WITH_STRUCT(QuantReduceScatterTilingData, tilingGM)
        op = QuantReduceScatterMte(DTYPE_X, DTYPE_SCALES, DTYPE_OUT_PUT)
        op.Init(x, scales, output, tilingData)
        op.Process()

    return quant_reduce_scatter


# ---------------------------------------------------------------- host tiling
def QuantReduceScatterTilingFunc(
    bs: int, h: int, rankSize: int, scalesDtype: torch.dtype
) -> QuantReduceScatterTilingData:
    """Host: the shape checks, SetHcommCfg, SetTilingData, SetXPerBlock (x (bs, h))."""
    # CheckTilingFunc: BS divisible by the ranks, H in [1024, 8192] and a multiple of 128;
    # the quantisation mode from the scales' type (FP32: TG, E8M0: MX)
    assert rankSize in (2, 4, 8), "rankSize must be 2, 4 or 8"
    assert bs % rankSize == 0, "BS must be a multiple of rankSize"
    assert 1024 <= h <= 8192 and h % 128 == 0, "H must be in [1024, 8192] and 128 multiple"
    quantNumber = MX_QUANT_NUMBER if scalesDtype == fp8_e8m0_t else TG_QUANT_NUMBER
    tilingData = QuantReduceScatterTilingData()
    # SetHcommCfg: the MTE engine
    mc2CcTilingConfig = Mc2CcTilingConfig(
        WORLD_GROUP, OP_TYPE_ALL_TO_ALL, "AlltoAll=level0:fullmesh;level1:pairwise"
    )
    assert mc2CcTilingConfig.SetCommEngine(AIV_TYPE) == 0
    assert mc2CcTilingConfig.GetTiling(tilingData.mc2InitTiling) == 0
    assert mc2CcTilingConfig.GetTiling(tilingData.mc2CcTiling) == 0
    # SetTilingData: the scales' dimension 1 (TG: (bs, h / 128), MX: (bs, h / 64, 2))
    info = tilingData.quantReduceScatterTilingInfo
    info.aivNum = AIV_NUM  # blockDim = CalcTschBlockDim(aivNum, 0, aivNum)
    info.bs, info.hiddenSize, info.scaleHiddenSize = bs, h, CeilDiv(h, quantNumber)
    info.totalWinSize = RUN_KWARGS["buffsize_mb"] << 20  # GetMaxWindowSize(): HCCL_BUFFSIZE
    # SetXPerBlock: about three blocks per core, at least 2048, a multiple of 1024
    TARGET_ITER, MIN_BLOCK, ALIGN_BLOCK = 3, 2048, 1024
    xSliceSizeNums = bs * h // rankSize
    perCoreElem = CeilDiv(xSliceSizeNums, info.aivNum)
    xPerBlock = max(CeilDiv(perCoreElem, TARGET_ITER), MIN_BLOCK)
    info.xPerBlock = xPerBlock // ALIGN_BLOCK * ALIGN_BLOCK
    info.alignBlock = ALIGN_BLOCK
    return tilingData  # SetTilingKey: MTE_COMM


# ---------------------------------------------------------------- inputs and reference
def inputs(rank: int, launch: int, bs: int, h: int, mode=KG) -> tuple[np.ndarray, np.ndarray]:
    """Rank ``rank``'s x (bs, h) and scales, as numpy arrays of the kernel's bytes.

    KG: int8 x and FP32 scales (bs, h / 128): random values quantised per group of 128
    (scale = amax / 127, x = round(v / scale)). MX: FP8 E4M3 codes (uint8, every finite code)
    and E8M0 scale codes (uint8, scales 2 ** -10 .. 2 ** 3) of shape (bs, h / 64, 2).
    """
    rng = np.random.default_rng(100 * launch + rank)
    if mode == MX:
        codes = rng.integers(0, 0x7F, size=(bs, h), dtype=np.uint8)  # 0x7F is NaN
        codes |= (rng.integers(0, 2, size=(bs, h)) << 7).astype(np.uint8)  # the sign
        return codes, rng.integers(117, 131, size=(bs, h // 64, 2), dtype=np.uint8)
    values = rng.standard_normal((bs, h // PER_GROUP_SIZE, PER_GROUP_SIZE)).astype(np.float32)
    values *= np.float32(1 + rank)
    scales = (np.abs(values).max(axis=2) / np.float32(127)).astype(np.float32)
    x = np.clip(np.rint(values / scales[:, :, None]), -127, 127).astype(np.int8)
    return x.reshape(bs, h), scales


def dequantise(x: np.ndarray, scales: np.ndarray, mode) -> np.ndarray:
    """numpy: FP32 x times its group's scale; FP8 E4M3 and E8M0 decoded from their bits."""
    if mode == MX:
        exponent, mantissa = (x >> 3 & 0xF).astype(np.int32), (x & 7).astype(np.float32)
        normal = np.ldexp(1 + mantissa / 8, exponent - 7)
        value = np.where(exponent == 0, np.ldexp(mantissa / 8, -6), normal)
        value = np.where(x >> 7, -value, value).astype(np.float32)
        scale = np.ldexp(np.float32(1), scales.reshape(len(x), -1).astype(np.int32) - 127)
        return value * np.repeat(scale.astype(np.float32), MX_SIZE, axis=1)
    return x.astype(np.float32) * np.repeat(scales, PER_GROUP_SIZE, axis=1)


def reference(rank: int, n: int, launch: int, bs: int, h: int, mode=KG) -> np.ndarray:
    """numpy: this rank's rows of ``sum_s dequant(x_s, scales_s)``, summed in FP32 in the
    kernel's order (this rank first, then the next ones round the ring), in the output type."""
    rows = slice(rank * bs // n, (rank + 1) * bs // n)
    acc = np.zeros((bs // n, h), dtype=np.float32)
    for i in range(n):
        x, scales = inputs((rank + i) % n, launch, bs, h, mode)
        acc = (acc + dequantise(x[rows], scales[rows], mode)).astype(np.float32)
    return acc if mode == MX else acc.astype(np.float16)


def launch_quant_reduce_scatter(launch: int, bs: int, h: int, mode=KG) -> torch.Tensor:
    """One launch on this rank's inputs: the (bs / rankDim, h) output."""
    n = hp.get_world_size()
    XType, ScalesType, OutputType = mode
    tiling = QuantReduceScatterTilingFunc(bs, h, n, ScalesType)
    x, scales = inputs(hp.get_rank(), launch, bs, h, mode)
    output = zeros(bs // n, h, dtype=OutputType)
    hp.launch(
        QuantReduceScatterKernel(XType, ScalesType, OutputType),
        on_device(x).view(XType),
        on_device(scales).view(ScalesType),
        output,
        None,
        tiling,
        block_dim=AIV_NUM,
        kernel_type="aiv",
    )
    return output


def main() -> list[str]:
    rank, n = hp.get_rank(), hp.get_world_size()
    bs = ROWS_PER_RANK * n
    lines = []
    for launch in range(1, LAUNCHES + 1):  # the 0/1 flag flips: launches alternate halves
        output = launch_quant_reduce_scatter(launch, bs, H)
        lines.append(compare(f"launch-{launch}", output, reference(rank, n, launch, bs, H)))
    output = launch_quant_reduce_scatter(LAUNCHES + 1, bs, H, MX)  # and the MX instance
    lines.append(compare("mx", output, reference(rank, n, LAUNCHES + 1, bs, H, MX)))
    return lines


if __name__ == "__main__":
    run_sample(main, platform=PLATFORM, **RUN_KWARGS)
