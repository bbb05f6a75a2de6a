"""Port of ops-transformer's MoeDistributeCombineV2 on Atlas A3 (full mesh, windows only).

Source: mirror-cann/ops-transformer at 3a280bcc (2026-07-21), every file read at that commit:
``mc2/moe_distribute_combine_v2/op_kernel/arch22/moe_distribute_combine_v2_a3.cpp`` (the
``TILINGKEY_TPL_A3`` + ``TILINGKEY_TPL_MTE`` instance, QuantMode 0), ``MoeDistributeCombineV2``
of ``op_kernel/arch22/moe_distribute_combine_v2.h``, the tiling struct of
``op_kernel/moe_distribute_combine_v2_tiling.h``, the host ``MoeDistributeCombineA3TilingFuncImpl``
of ``op_host/op_tiling/moe_distribute_combine_v2_tiling.cpp`` (with ``CheckWinSize`` of
``moe_distribute_dispatch_v2/op_host/op_tiling/moe_distribute_check_win_size.h``), and of
``moe_distribute_dispatch_v2/op_kernel/``: ``InitWinState`` (``moe_distribute_v2_base.h``),
``HcclContextHolder`` (``hccl_context_holder.h``, over the A3 helpers of
``mc2/common/op_kernel/moe_distribute_base.h``), ``CheckWindowSize`` (``check_winsize.h``) and
the constants (``moe_distribute_v2_constant.h``). docs/notes/mc2-kernels.md, section 14.

What it computes: the partner of samples/mc2_moe_distribute_dispatch_v2_full_mesh.py, whose kernel
runs first (imported): every row the dispatch delivered to an expert goes back to its token's
rank, into slot ``token * K + k`` of that rank's In window, then a 32-byte status block of eight
1.0f into its Exp window; each rank waits for the K blocks of each of its tokens (sum ``8 * K``),
clears them and writes ``x[t] = sum_k scale[t, k] * row(t, k)`` (FP32, rounded to half).

What runs unchanged: the A3 context fields; ``InitWinState``'s status of each core at
``COMBINE_STATE_WIN_OFFSET + coreIdx * 512`` of its Exp window (0/1 state flipped per launch, the
op's identity, a launch count), the data half ``dataState * totalWinSizeEp / 2`` and the status
area ``COMBINE_STATE_OFFSET + dataState * WIN_STATE_OFFSET``; ``SplitCoreCal`` over
``epSendCount[moeSendNum - 1]`` rows, the staggered send order, two rows then their two flags;
the receive split of the BS tokens, ``WaitDispatch``'s round-robin poll of one ``K * 32``-byte read
per token (sum within 0.5 of the target), the reset, the DFX position word, the weighted sum.

Stand-ins: FP16; no quantisation, shared experts, masks, special experts, elastic or performance
info, AddRmsNorm; UB buffers and pipe barriers are tensors and program order; the experts between
the kernels add their global id to each row; the workspace holds the user part only; ``aivNum`` is
the dispatch port's 3 cores (BS = 4: core 0 waits for two tokens; K = 3: 96-byte status reads).

The v3 entry (``v3-1``, ``v3-2``): ``mc2/moe_distribute_combine_v3/op_kernel/arch22/
moe_distribute_combine_v3_a3.cpp`` runs the same kernel with ``Mc2MoeContextHolder`` (the
dispatch port's v3 path runs before it, on the same context); its tiling
(``MoeDistributeCombineV3TilingFunc``: ``isMc2Context``) has no Hccl config and the window
``ccl_buffer_size - 1 MiB - epWorldSize * 1024``. The arch35 v3 entry runs another kernel
(``MoeDistributeCombineV2A5Mte``), not ported. docs/notes/mc2-kernels.md, section 24.

Run: ``python samples/mc2_moe_distribute_combine_v2.py`` (4 emulated ranks),
``python -m hccl_py run -n 2 --backend gloo samples/mc2_moe_distribute_combine_v2.py``.
"""

from ctypes import Structure, c_bool, c_float, c_uint32, c_uint64

import numpy as np
import torch
from _common import WORLD_GROUP, compare, on_device, run_sample, zeros
from _mc2 import split_to_core, typed_fields, uint32_fields
from _mc2_context import MB_SIZE, GetMc2ContextTensor, Mc2MoeContextHolder
from mc2_moe_distribute_dispatch_v2_full_mesh import (
    AIV_NUM,
    BS,
    LOCAL_EXPERTS,
    RUN_KWARGS,
    Context,
    DispatchV3Tiling,
    H,
    K,
    f32,
    i32,
    inputs,
    launch_dispatch,
)

import hccl_py as hp
from hccl_py import AIV, Mc2CcTiling, Mc2CcTilingConfig, Mc2InitTiling, TilingData

PLATFORM = "A3"
# moe_distribute_v2_constant.h
COMBINE_STATE_WIN_OFFSET = 818 * 1024  # the cores' 0/1 states, after the dispatch's
COMBINE_STATE_OFFSET = 64 * 1024  # the combine's status area, after the dispatch's
WIN_STATE_OFFSET = 384 * 1024
WIN_ADDR_ALIGN = 512
STATE_OFFSET = 32
FLOAT_PER_UB_ALIGN = 8
EXPAND_IDX_INFO = 3  # the assist info's (rank, token, k) triples
UB_ALIGN = 32
ZERONE_STATE_POS, OPOSITION_POS, GLOBALBS_POS, OP_CNT_POSUL = 0, 1, 5, 3
HCCL_DFX_POS = 8
MASK_CALC_NEED_WORKSPACE = 10 * 1024
# host: moe_distribute_combine_v2_tiling.cpp, moe_distribute_check_win_size.h
OP_TYPE_ALL_TO_ALL = 8
AIV_ENGINE = 3  # mc2tiling::AIV_ENGINE: no AI CPU is started
EP_RANK_OFFSET_STEP = 1024
MAX_OUT_DTYPE_SIZE, SCALE_EXPAND_IDX_BUFFER = 2, 44
UB_SIZE, BUFFER_NUM = 192 * 1024, 2
HCCL_BUFFSIZE = RUN_KWARGS["buffsize_mb"] << 20  # CommGetCclBufferSizeByGroup


class MoeDistributeCombineV2Info(Structure):
    _fields_ = [
        *uint32_fields("epWorldSize", "tpWorldSize", "epRankId", "tpRankId", "expertShardType"),
        *uint32_fields("sharedExpertNum", "sharedExpertRankNum", "moeExpertNum"),
        *uint32_fields("moeExpertPerRankNum", "zeroExpertNum", "copyExpertNum", "constExpertNum"),
        *uint32_fields("globalBs", "bs", "k", "h", "a", "aivNum"),
        *typed_fields(c_bool, "isTokenMask", "isExpertMask", "hasSharedExpertX", "hasElasticInfo"),
        *typed_fields(c_bool, "isPerformance", "isMc2Context", "hasExpertScales", "reserved1"),
        *typed_fields(c_uint64, "totalUbSize", "totalWinSizeEp"),
        *typed_fields(c_float, "armAvgFactor", "epsilon"),
        ("bufferNum", c_uint32),
    ]


class MoeDistributeCombineV2TilingData(TilingData):
    _fields_ = [
        ("mc2InitTiling", Mc2InitTiling),
        ("mc2CcTiling1", Mc2CcTiling),
        ("moeDistributeCombineV2Info", MoeDistributeCombineV2Info),
    ]


def CheckWindowSize(tilingWinSizeBytes: int, realWinSizeBytes: int) -> None:
    """check_winsize.h: a window smaller than the tiling's faults the kernel on purpose."""
    if realWinSizeBytes < tilingWinSizeBytes:
        raise RuntimeError(f"window of {realWinSizeBytes} bytes < {tilingWinSizeBytes}")


class HcclContextHolder(Context):
    """hccl_context_holder.h over the A3 HcclOpResParam (the dispatch port's Context)."""

    def __init__(self) -> None:
        pass

    def InitAndCheck(self, ctxPtr: hp.HcclContext, epWorldSize: int, totalWinSize: int) -> None:
        self.ctx = ctxPtr
        CheckWindowSize(totalWinSize, self.ctx.winSize)

    def GetEpRankId(self) -> int:
        return self.ctx.localUsrRankId

    def GetEpWorldSize(self) -> int:
        return self.ctx.rankSize


def InitWinState(selfDataStatusGMTensor, epRankIdHccl, epWorldSizeHccl, epRankIdOriginal,
                 moeExpertNum, epWorldSizeOriginal, globalBS) -> int:  # fmt: skip
    """moe_distribute_v2_base.h: flip this core's 0/1 state, note the op, count the launch."""
    dataStateLocalTensor = selfDataStatusGMTensor[: UB_ALIGN // 4].clone()
    dataState = int(dataStateLocalTensor[ZERONE_STATE_POS])
    dataStateLocalTensor[ZERONE_STATE_POS] = 1 if dataState == 0 else 0
    dataStateLocalTensor[OPOSITION_POS : GLOBALBS_POS + 1] = dataStateLocalTensor.new_tensor(
        [1, epRankIdOriginal, moeExpertNum, epWorldSizeOriginal, globalBS]
    )
    dataStateLocalTensor.view(torch.int64)[OP_CNT_POSUL] += 1  # opCnt, a uint64 slot
    selfDataStatusGMTensor[: UB_ALIGN // 4] = dataStateLocalTensor
    if epRankIdOriginal != epRankIdHccl or epWorldSizeOriginal != epWorldSizeHccl:
        selfDataStatusGMTensor[HCCL_DFX_POS:] = dataStateLocalTensor.new_tensor(
            [epRankIdHccl, epWorldSizeHccl]
        )
    return dataState


class MoeDistributeCombineV2:
    """``MoeDistributeCombineV2<ContextHolder, half, half, int32_t, UNQUANT, false>``: the v2
    entry's ``HcclContextHolder``, or the v3 entry's ``Mc2MoeContextHolder``."""

    def __init__(self, ContextHolder: type = HcclContextHolder) -> None:
        self.ContextHolder = ContextHolder

    def Init(self, mc2Context, expandX, expertIds, expandIdx, epSendCount, expertScales, XOut,
             workspaceGM, tilingData) -> None:  # fmt: skip
        self.coreIdx = hp.GetBlockIdx()
        self.maskCalcWorkspaceGM = workspaceGM + self.coreIdx * MASK_CALC_NEED_WORKSPACE
        # InitInputAndOutput
        self.expandXGM, self.expertIdsGM, self.expandIdxGM = expandX, expertIds, expandIdx
        self.epSendCountGM, self.expertScalesGM = epSendCount, expertScales
        self.expandOutGlobal = XOut
        info = tilingData.moeDistributeCombineV2Info
        self.ctx = self.ContextHolder()
        self.ctx.InitAndCheck(mc2Context, info.epWorldSize, info.totalWinSizeEp)
        self.InitAttrs(info)
        # the window is cut into two halves: consecutive combines alternate between them
        self.winDataSizeOffsetEp = self.dataState * (info.totalWinSizeEp // 2)
        self.winStatusOffset = COMBINE_STATE_OFFSET + self.dataState * WIN_STATE_OFFSET
        self.epWindowGM = self.GetWinAddrByRankId(self.epRankIdOriginal)
        # not a shared-expert rank: the last of epSendCount's moeSendNum cumulative counts
        self.selfSendCnt = int(i32(self.epSendCountGM, self.moeSendNum)[self.moeSendNum - 1])
        self.SplitCoreCal()
        self.flagRcvCount = self.axisK + self.sharedExpertNum

    def InitAttrs(self, info: MoeDistributeCombineV2Info) -> None:
        # InitTilingAttrs
        self.axisBS, self.axisH, self.axisK, self.aivNum = info.bs, info.h, info.k, info.aivNum
        self.globalBS, self.hasExpertScalesFlag = info.globalBs, info.hasExpertScales
        self.epWorldSize = self.epWorldSizeOriginal = info.epWorldSize
        self.epRankId = self.epRankIdOriginal = info.epRankId
        self.moeExpertPerRankNum, self.moeExpertNum = info.moeExpertPerRankNum, info.moeExpertNum
        # InitCommContext
        statusDataSpaceGm = self.ctx.GetStatusDataSpaceGm()
        epRankIdHccl, epWorldSizeHccl = self.ctx.GetEpRankId(), self.ctx.GetEpWorldSize()
        statusGM = statusDataSpaceGm + COMBINE_STATE_WIN_OFFSET + self.coreIdx * WIN_ADDR_ALIGN
        self.selfDataStatusGMTensor = i32(statusGM, HCCL_DFX_POS + 2)
        self.dataState = InitWinState(self.selfDataStatusGMTensor, epRankIdHccl, epWorldSizeHccl,
                                      self.epRankIdOriginal, self.moeExpertNum,
                                      self.epWorldSizeOriginal, self.globalBS)  # fmt: skip
        self.sharedExpertNum = info.sharedExpertNum
        self.moeSendNum = self.epWorldSize * self.moeExpertPerRankNum
        self.hExpandXTypeSize = self.axisH * 2
        self.hAlignWinSize = -(-self.hExpandXTypeSize // WIN_ADDR_ALIGN) * WIN_ADDR_ALIGN

    def GetWinAddrByRankId(self, rankId: int) -> hp.GmAddr:
        window = self.ctx.GetWindAddrByRankId(rankId, self.epRankIdOriginal)
        return window + self.winDataSizeOffsetEp

    def GetWinStateAddrByRankId(self, rankId: int) -> hp.GmAddr:
        window = self.ctx.GetWindStateAddrByRankId(rankId, self.epRankIdOriginal)
        return window + self.winStatusOffset

    def SplitCoreCal(self) -> None:
        """The rows to send, dealt out to the cores, the first ones one more."""
        start, end = split_to_core(self.selfSendCnt, self.aivNum, self.coreIdx)
        self.startTokenId, self.endTokenId = start, end
        self.sendCntNum = self.endTokenId - self.startTokenId

    def ExpertAlltoAllDispatchCopyAdd(self) -> None:
        if self.sendCntNum == 0:
            return  # an idle core
        triples = i32(
            self.expandIdxGM + self.startTokenId * EXPAND_IDX_INFO * 4,
            self.sendCntNum * EXPAND_IDX_INFO,
        )
        expandIdxLocal = triples.tolist()
        statusTensor = torch.ones(FLOAT_PER_UB_ALIGN, dtype=torch.float32, device=hp.device())
        loop = 0
        while loop < self.sendCntNum:
            tkIndexFirst = self.startTokenId + (loop + self.epRankId) % self.sendCntNum  # staggered
            baseOffsetFirst = (tkIndexFirst - self.startTokenId) * EXPAND_IDX_INFO
            toRankIdFirst, tokenIdFirst, topkIdFirst = expandIdxLocal[
                baseOffsetFirst : baseOffsetFirst + EXPAND_IDX_INFO
            ]
            self.ExpertAlltoAllDispatchInnerCopyAdd(
                toRankIdFirst, tokenIdFirst, topkIdFirst, tkIndexFirst
            )
            hasSecond = loop + 1 < self.sendCntNum
            if hasSecond:
                tkIndexSecond = self.startTokenId + (loop + 1 + self.epRankId) % self.sendCntNum
                baseOffsetSecond = (tkIndexSecond - self.startTokenId) * EXPAND_IDX_INFO
                toRankIdSecond, tokenIdSecond, topkIdSecond = expandIdxLocal[
                    baseOffsetSecond : baseOffsetSecond + EXPAND_IDX_INFO
                ]
                self.ExpertAlltoAllDispatchInnerCopyAdd(
                    toRankIdSecond, tokenIdSecond, topkIdSecond, tkIndexSecond
                )
            # PipeBarrier<PIPE_MTE3>: both rows are out before their flags
            stateGMFirst = (
                self.GetWinStateAddrByRankId(toRankIdFirst)
                + tokenIdFirst * self.flagRcvCount * STATE_OFFSET
                + topkIdFirst * STATE_OFFSET
            )
            stateGMTensorFirst = f32(stateGMFirst, FLOAT_PER_UB_ALIGN)
            stateGMTensorFirst[:] = statusTensor
            if hasSecond:
                stateGMSecond = (
                    self.GetWinStateAddrByRankId(toRankIdSecond)
                    + tokenIdSecond * self.flagRcvCount * STATE_OFFSET
                    + topkIdSecond * STATE_OFFSET
                )
                stateGMTensorSecond = f32(stateGMSecond, FLOAT_PER_UB_ALIGN)
                stateGMTensorSecond[:] = statusTensor
            loop += 2 if hasSecond else 1

    def ExpertAlltoAllDispatchInnerCopyAdd(self, toRankId, tokenId, topkId, tkIndex) -> None:
        epOffset = tokenId * (self.axisK + self.sharedExpertNum) + topkId
        rankGM = self.GetWinAddrByRankId(toRankId) + epOffset * self.hAlignWinSize
        rankWindow = hp.gm_tensor(rankGM, torch.float16, self.axisH)
        tokenGM = self.expandXGM + tkIndex * self.hExpandXTypeSize
        expandXInTensor = hp.gm_tensor(tokenGM, torch.float16, self.axisH).clone()
        rankWindow[:] = expandXInTensor

    def AlltoAllBuffInitAndMaskCal(self) -> None:
        """No mask: every token is active; the zeros that reset a token's status blocks."""
        self.activeMaskBsCnt = self.axisBS
        self.stateResetTensor = torch.zeros(
            self.flagRcvCount * FLOAT_PER_UB_ALIGN, dtype=torch.float32, device=hp.device()
        )

    def WaitDispatch(self, tokenIndex: int, copyCount: int) -> bool:
        """Whether all K status blocks of the token arrived; if so, clear them."""
        target = 1.0 * copyCount  # no expert mask, no special expert
        minTarget, maxTarget = target - 0.5, target + 0.5
        stateGM = (
            self.GetWinStateAddrByRankId(self.epRankIdOriginal)
            + tokenIndex * self.flagRcvCount * STATE_OFFSET
        )
        stateGMTensor = f32(stateGM, copyCount)
        localState = float(stateGMTensor.sum())
        if minTarget < localState < maxTarget:
            stateGMTensor[:] = self.stateResetTensor
            return True
        return False

    def ExpertScaleCopy(self, beginIndex: int, tokenPerAivNum: int) -> None:
        self.expertScaleBeginIdx = beginIndex
        expertScaleCntPerCore = tokenPerAivNum * self.axisK
        if self.hasExpertScalesFlag:
            scalesGM = self.expertScalesGM + self.expertScaleBeginIdx * self.axisK * 4
            self.expertScalesLocal = f32(scalesGM, expertScaleCntPerCore).tolist()

    def ProcessMoeExpert(self, tokenIndexOffset, topkId, scaleVal, sumFloatBufLocal) -> None:
        wAddr = self.epWindowGM + (tokenIndexOffset + topkId) * self.hAlignWinSize
        tmpUb = hp.gm_tensor(wAddr, torch.float16, self.axisH).clone()
        rowTmpFloatLocal = tmpUb.float()
        if self.hasExpertScalesFlag:
            sumFloatBufLocal += rowTmpFloatLocal * scaleVal
        else:
            sumFloatBufLocal += rowTmpFloatLocal

    def ProcessExpert(self, tokenIndex: int) -> torch.Tensor:
        index = (tokenIndex - self.expertScaleBeginIdx) * self.axisK
        scaleVal = 0.0
        sumFloatBufLocal = torch.zeros(self.axisH, dtype=torch.float32, device=hp.device())
        tokenIndexOffset = tokenIndex * (self.axisK + self.sharedExpertNum)
        for topkId in range(self.axisK):
            if self.hasExpertScalesFlag:
                scaleVal = self.expertScalesLocal[index]
            self.ProcessMoeExpert(tokenIndexOffset, topkId, scaleVal, sumFloatBufLocal)
            index += 1
        return sumFloatBufLocal

    def LocalWindowCopy(self) -> None:
        if self.activeMaskBsCnt == 0:
            return
        statePos = 1
        beginIndex, endIndex = split_to_core(self.activeMaskBsCnt, self.aivNum, self.coreIdx)
        tokenPerAivNum = endIndex - beginIndex
        if tokenPerAivNum == 0:
            return
        self.ExpertScaleCopy(beginIndex, tokenPerAivNum)
        tokenStatusTensor = [0] * tokenPerAivNum
        tokenNumCompleted = 0
        while tokenNumCompleted != tokenPerAivNum:
            for curIdx in range(beginIndex, endIndex):
                if tokenStatusTensor[curIdx - beginIndex] == 1:
                    continue
                tokenIndex = curIdx
                copyCount = self.flagRcvCount * FLOAT_PER_UB_ALIGN
                if not self.WaitDispatch(tokenIndex, copyCount):
                    continue
                tokenNumCompleted += 1
                tokenStatusTensor[curIdx - beginIndex] = 1
                statePos += 1
                self.selfDataStatusGMTensor[OPOSITION_POS] = statePos  # DFX: how far it got
                sumFloatBufLocal = self.ProcessExpert(tokenIndex)
                outGM = self.expandOutGlobal + tokenIndex * self.hExpandXTypeSize
                hp.gm_tensor(outGM, torch.float16, self.axisH)[:] = sumFloatBufLocal.half()

    def Process(self) -> None:
        if hp.g_coreType == AIV:  # every AIV core; BuffInit only carves UB
            self.ExpertAlltoAllDispatchCopyAdd()
            self.AlltoAllBuffInitAndMaskCal()
            self.LocalWindowCopy()


def moe_distribute_combine_v2(expandX, expertIds, assistInfoForCombine, epSendCount, scales,
                              tpSendCounts, xActiveMask, activationScale, weightScale, groupList,
                              expandScales, sharedExpertX, elasticInfo, oriX, constExpertAlpha1,
                              constExpertAlpha2, constExpertV, performanceInfo, XOut, workspaceGM,
                              tilingGM):  # fmt: skip
    """The kernel entry: ``ArchTag`` TILINGKEY_TPL_A3, ``LayeredMode`` TILINGKEY_TPL_MTE."""
    tilingData = hp.GET_TILING_DATA_WITH_STRUCT(MoeDistributeCombineV2TilingData, tilingGM)
    contextGM0 = hp.GetHcclContext(0)
    op = MoeDistributeCombineV2()
    op.Init(contextGM0, expandX, expertIds, assistInfoForCombine, epSendCount, scales, XOut,
            workspaceGM, tilingData)  # fmt: skip
    op.Process()


def moe_distribute_combine_v3(mc2Context, expandX, expertIds, assistInfoForCombine, epSendCount,
                              scales, tpSendCount, xActiveMask, activationScale, weightScale,
                              groupList, expandScales, sharedExpertX, elasticInfo, oriX,
                              constExpertAlpha1, constExpertAlpha2, constExpertV, performanceInfo,
                              XOut, workspaceGM, tilingGM):  # fmt: skip
    """arch22/moe_distribute_combine_v3_a3.cpp: the same kernel with ``Mc2MoeContextHolder``."""
    tilingData = hp.GET_TILING_DATA_WITH_STRUCT(MoeDistributeCombineV2TilingData, tilingGM)
    op = MoeDistributeCombineV2(Mc2MoeContextHolder)
    op.Init(mc2Context, expandX, expertIds, assistInfoForCombine, epSendCount, scales, XOut,
            workspaceGM, tilingData)  # fmt: skip
    op.Process()


def make_tiling(rank: int, n: int, cclBufferSize: int = 0) -> MoeDistributeCombineV2TilingData:
    """Host: MoeDistributeCombineA3TilingFuncImpl with this rank's attributes; with
    ``cclBufferSize`` (the v3 op's attribute) MoeDistributeCombineV3TilingFunc's
    ``isMc2Context`` config: the window is the attribute less the 1 MiB state area, and there
    is no Hccl tiling."""
    tiling = MoeDistributeCombineV2TilingData()
    info = tiling.moeDistributeCombineV2Info
    # GetAttrAndSetTilingData, CheckAttrs, CheckTensorShape
    info.epWorldSize, info.tpWorldSize, info.epRankId, info.tpRankId = n, 1, rank, 0
    info.sharedExpertNum = info.sharedExpertRankNum = 0  # attr 1 without shared ranks: 0
    info.moeExpertNum = LOCAL_EXPERTS * n
    info.moeExpertPerRankNum = info.moeExpertNum // (n - info.sharedExpertRankNum)
    info.globalBs = BS * n  # attr globalBs 0: epWorldSize * bs
    info.bs, info.k, info.h = BS, K, H
    info.a = info.globalBs * min(info.moeExpertPerRankNum, K)
    info.hasExpertScales = True
    # CheckAndCalWinSize (CheckWinSize, CheckActualWinSize): both ops' tokens, double-buffered
    tokenNeedSizeCombine = -(-H * MAX_OUT_DTYPE_SIZE // WIN_ADDR_ALIGN) * WIN_ADDR_ALIGN
    tokenActualLen = -(-H * MAX_OUT_DTYPE_SIZE // UB_ALIGN) * UB_ALIGN + SCALE_EXPAND_IDX_BUFFER
    tokenNeedSizeDispatch = -(-tokenActualLen // WIN_ADDR_ALIGN) * WIN_ADDR_ALIGN
    maxBs = info.globalBs // n
    actualSize = maxBs * tokenNeedSizeDispatch * n * info.moeExpertPerRankNum
    actualSize = (actualSize + maxBs * tokenNeedSizeCombine * (K + info.sharedExpertNum)) * 2
    info.isMc2Context = cclBufferSize > 0
    if info.isMc2Context:
        maxWindowSizeEp = cclBufferSize - MB_SIZE
        assert actualSize <= maxWindowSizeEp, "HCCL_BUFFSIZE_EP is too SMALL"
        info.totalWinSizeEp = maxWindowSizeEp - n * EP_RANK_OFFSET_STEP
        info.aivNum, info.totalUbSize, info.bufferNum = AIV_NUM, UB_SIZE, BUFFER_NUM
        return tiling
    assert actualSize <= HCCL_BUFFSIZE, "HCCL_BUFFSIZE_EP is too SMALL"
    info.totalWinSizeEp = HCCL_BUFFSIZE - n * EP_RANK_OFFSET_STEP
    # SetHCommCfg
    mc2CcTilingConfig = Mc2CcTilingConfig(
        WORLD_GROUP, OP_TYPE_ALL_TO_ALL, "AlltoAll=level0:fullmesh;level1:pairwise"
    )
    assert mc2CcTilingConfig.SetCommEngine(AIV_ENGINE) == 0
    assert mc2CcTilingConfig.GetTiling(tiling.mc2InitTiling) == 0
    assert mc2CcTilingConfig.GetTiling(tiling.mc2CcTiling1) == 0
    # CheckAndSetPlatformInfo: blockDim = aivNum; UbUsedCal finds room for two buffers
    info.aivNum, info.totalUbSize, info.bufferNum = AIV_NUM, UB_SIZE, BUFFER_NUM
    return tiling


def expert_scales(rank: int, launch: int) -> np.ndarray:
    """The router's weights (BS, K): quarters, so every product and sum is exact in FP32."""
    t, k = np.meshgrid(np.arange(BS), np.arange(K), indexing="ij")
    return ((1 + (rank + launch + t + 2 * k) % 4) / 4).astype(np.float32)


def experts(expand_x: torch.Tensor, send_counts: torch.Tensor) -> torch.Tensor:
    """Stand-in for the experts between the two kernels: expert e adds e to its rows (the
    rows are grouped by [local expert][source rank], sendCounts their cumulative counts)."""
    rows = torch.arange(expand_x.numel() // H, dtype=send_counts.dtype, device=expand_x.device)
    slot = torch.searchsorted(send_counts, rows, right=True)
    expert = hp.get_rank() * LOCAL_EXPERTS + slot // hp.get_world_size()
    return (expand_x.view(-1, H) + expert[:, None].to(expand_x.dtype)).view(-1)


def reference(rank: int, launch: int) -> np.ndarray:
    """numpy: each token's K expert answers (x + expert id), weighted by the scales, summed."""
    x, ids = inputs(rank, launch)
    answers = x.astype(np.float32)[:, None, :] + ids.astype(np.float32)[:, :, None]
    return (expert_scales(rank, launch)[:, :, None] * answers).sum(axis=1).astype(np.float16)


def main() -> list[str]:
    """Two launches of dispatch and combine through the v2 entries (the HCCL context), then two
    through the v3 entries (the ``mc2Context`` input over their own communicator's buffers)."""
    rank, n = hp.get_rank(), hp.get_world_size()
    mc2Context, hcclBuffSize = GetMc2ContextTensor(hp.new_group(list(range(n))))
    v3 = (mc2Context, DispatchV3Tiling(n, rank, hcclBuffSize))
    tilings = {"launch": make_tiling(rank, n), "v3": make_tiling(rank, n, hcclBuffSize)}
    info = tilings["launch"].moeDistributeCombineV2Info
    workspace = zeros(info.aivNum * MASK_CALC_NEED_WORKSPACE // 2)
    lines = []
    for entry in ("launch", "v3"):  # the v2 launches, then the v3 ones
        for launch in (1, 2):  # each op's data state flips: the second launch uses the other halves
            x, ids = inputs(rank, launch)
            expand_x, expand_idx, _, send_counts = launch_dispatch(
                x, ids, v3 if entry == "v3" else None
            )
            x_out = zeros(BS, H)
            args = (
                experts(expand_x, send_counts),
                on_device(ids),
                expand_idx,
                send_counts,
                on_device(expert_scales(rank, launch)),
                *[None] * 13,  # tpSendCounts .. performanceInfo: not given
                x_out,
                workspace,
                tilings[entry],
            )
            if entry == "v3":
                hp.launch(moe_distribute_combine_v3, mc2Context, *args, block_dim=info.aivNum,
                          kernel_type="aiv")  # fmt: skip
            else:
                hp.launch(moe_distribute_combine_v2, *args, block_dim=info.aivNum,
                          kernel_type="aiv")  # fmt: skip
            lines.append(compare(f"{entry}-{launch}", x_out, reference(rank, launch)))
    return lines


if __name__ == "__main__":
    run_sample(main, platform=PLATFORM, **RUN_KWARGS)
