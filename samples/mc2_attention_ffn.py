"""Port of ops-transformer's AttentionToFFN and FFNToAttention (Atlas A3), one round trip per launch.

Source: ops-transformer, ``mc2/attention_to_ffn/op_kernel/attention_to_ffn.h``
(``AttentionToFFN``: ``Init``, ``InitByTinglingData``, ``ActiveMaskCalCnt``,
``FindExpertRank``, ``SplitToCore``, ``SetExpertAndRank``, ``CheckFlagAndSetTableGM``,
``SendTokenToFFNByTokenIdx``, ``SendTokenToFFN``, ``SetFlagToFFN``, ``SetFlagInAttn``,
``Process``), its entry ``arch22/attention_to_ffn.cpp``, ``attention_to_ffn_tiling.h``,
``attention_to_ffn_tiling_key.h`` and the host ``op_host/op_tiling/attention_to_ffn_tiling.cpp``;
``mc2/ffn_to_attention/op_kernel/ffn_to_attention.h`` (``FFNToAttention``: ``Init``,
``GetWindowAddr``, ``ReadTokenMetaData``, ``Process``), ``arch22/ffn_to_attention.cpp``,
``ffn_to_attention_tiling.h`` and ``op_host/op_tiling/ffn_to_attention_tilling.cpp``; from
``mc2/common/op_kernel/moe_distribute_base.h`` the A3 ``HcclOpResParam`` fields they read
(``localWindowsIn``, ``userMemType``, ``remoteRes[r].nextDevicePtr->windowsIn``; ``userMemRes``
when ``userMemType`` is 1) and ``ReadTokenMetaDataStruct``. Both kernels are A3 only (their
tiling keys have only ``TILINGKEY_TPL_A3``); they have no Hccl object and only use windows.

The world: attention workers are ranks ``0 .. A-1`` (``sessionId`` = rank), FFN workers
ranks ``A ..`` (``ffnStartRankId`` = A). AttentionToFFN sends each token's ``K`` routed and
``S`` shared-expert copies to the FFN rank that the ``expertRankTable`` names (a replicated
expert: the copy ``sessionId % rankCnt``), into its In window: the FFN token data at
``winOffset_[1] + ((sessionId * M + microBatchId) * BS * (K+S) + token * (K+S) + k) * HS``
elements, and the local expert id into the FFN token info table row ``(sessionId,
microBatchId)`` at ``2 + tokenOffset``, after polling that row's flag until it is not 1 (the
FFN consumed the previous round); after ``SyncAll`` each core writes ``{1, layerId}`` to the
row of its share of the FFN ranks. With an active mask, only the first ``sum(mask)`` tokens
go, and ``SetFlagInAttn`` sets the flags of the others in the attention rank's own table.
FFNToAttention sends each computed row back to the attention rank (``sessionId``, or
``attnRankTable[sessionId]``), at ``(microBatchId, tokenId, expertOffset)`` of its data, and
then sets that slot's flag in its table.

What runs unchanged: the kernels above (the unquantised, asynchronous paths, with and
without active mask; FFNToAttention with and without ``attnRankTable``), the window layout
and offsets, the core split (``SplitToCore``; tokens round robin over the cores), the host
tiling's checks and fields (window size, ``Mc2CcTilingConfig`` with op type 8).

Stand-ins: FP16 tokens; ``GetCoreNumAiv`` is 4 (A3 has 48) and UB size is A3's; UB buffers
are torch tensors, ``SyncFunc`` / ``PipeBarrier`` are program order, ``DataCacheCleanAndInvalid``
is nothing. Not ported: the quantised path (``QuantInit``, ``QuantProcess``,
``ReduceMaxInplace``: dynamic int8 quantisation) and the synchronous path (``isSync``: the
workspace of which FFN ranks got tokens, reduced with ``ReduceSum``; flags only to those);
their tiling keys are refused. Between the two kernels, the sample's own stand-ins of the
ops that run there: on the FFN side ``FfnWorkerBatching`` (ffn/ffn_worker_batching: poll
every session's flag, copy the table row and reset it to ``INT_MAX`` ids and flag 0, sort the
valid slots by local expert, gather their tokens) and the expert FFN itself (``2 * x +
8 * (localExpert + 1) + 64 * ffnIndex``, exact in FP16); on the attention side
``AttentionWorkerScheduler`` (poll until every flag of the micro batch is 1, reset them) and
a combine that returns every slot as is. The FFN tables start as ``INT_MAX`` ids (the host
fills them once; ``hp.barrier()`` after). Sizes: ``BS`` 3, ``K`` 2, one shared expert on
every FFN rank, two routed experts per FFN rank, ``H = HS = 1024`` (the tiling's minimum),
one micro batch (FFNToAttention's tiling allows only one).

Launches: odd ones plain, routed to the first FFN rank's experts only (the other FFN ranks
get the flag and no token, so the next launch's flag check has to wait for them); even ones
routed at random, with an active mask that leaves the last token out, and FFNToAttention
with an ``attnRankTable``.

Run: ``python samples/mc2_attention_ffn.py`` (4 emulated ranks: two attention, two FFN),
``python -m hccl_py run -n 2 --backend gloo samples/mc2_attention_ffn.py``.
"""

from ctypes import Structure, c_bool, c_uint8, c_uint64

import numpy as np
import torch
from _common import WORLD_GROUP, Ceil, compare, f16, i32, on_device, run_sample
from _mc2 import typed_fields, uint32_fields

import hccl_py as hp
from hccl_py import HCCL_SUCCESS, Mc2CcTiling, Mc2CcTilingConfig, Mc2InitTiling, TilingData

PLATFORM = "A3"
RUN_KWARGS = {"buffsize_mb": 2}
BS, K, SHARED, H = 3, 2, 1, 1024
HS = H  # unquantised: a slot holds the token only
LOCAL_MOE = 2  # routed experts per FFN rank
MICRO_BATCH_NUM = 1
AIV_NUM = 4  # GetCoreNumAiv stand-in
UB_SIZE_A3 = 192 * 1024
INT_MAX = 2**31 - 1
# attention_to_ffn.h / ffn_to_attention.h
UB_ALIGN = 32
WIN_ALIGN = 512
RANK_OFFSET_STRIDE = 2
STATUS_REP_STRIDE = 8  # 32 bytes of UB per token's status
TOKEN_INFO_TABLE_RS = 2
TOKEN_INFO_TABLE_COPY_BLOCK_CNT = 2
DYNAMIC_QUANT = 2
# the host tilings
OP_TYPE_ALL_TO_ALL = 8
MB_SIZE = 1024 * 1024
NO_QUANT_MODE_WIN_SIZE = 2
MOE_EXPERT_MAX_NUM, SHARED_EXPERT_MAX_NUM, BS_MAX, K_MAX = 1024, 4, 512, 16
H_MIN, H_MAX, SCALE_SIZE = 1024, 8192, 128
MIN_WORLD_SIZE, MAX_WORLD_SIZE = 2, 768


class AttentionToFFNInfo(Structure):
    _fields_ = [
        *uint32_fields("X", "BS", "H", "K", "L", "expertNum", "moeExpertNum"),
        *uint32_fields("sharedExpertNum", "HS", "expRankTableM", "microBatchNum"),
        *uint32_fields("attentionWorkerNum", "infoTableLastDimNum", "aivNum", "worldSize"),
        *uint32_fields("syncFlag", "quantMode", "ffnStartRankId"),
        *typed_fields(c_bool, "isScales", "isActiveMask"),
        ("windowType", c_uint8),
        *typed_fields(c_uint64, "totalUbSize", "totalWinSize"),
    ]


class AttentionToFFNTilingData(TilingData):
    _fields_ = [
        ("mc2InitTiling", Mc2InitTiling),
        ("mc2CcTiling1", Mc2CcTiling),
        ("attentionToFFNInfo", AttentionToFFNInfo),
    ]


class FFNToAttentionInfo(Structure):
    _fields_ = [
        *uint32_fields("H", "A", "microBatchNum", "BS", "expertNumPerToken", "HS", "aivNum"),
        *uint32_fields("worldSize"),
        ("isInputRankTable", c_bool),
        ("windowType", c_uint8),
        *typed_fields(c_uint64, "totalUbSize", "totalWinSize"),
    ]


class FFNToAttentionTilingData(TilingData):
    _fields_ = [
        ("mc2InitTiling", Mc2InitTiling),
        ("mc2CcTiling1", Mc2CcTiling),
        ("ffnToAttentionInfo", FFNToAttentionInfo),
    ]


def GetWindowAddr(winContext, rankId: int) -> hp.GmAddr:
    """Both kernels' choice: the peer's In window, or user memory when ``userMemType`` != 0."""
    if winContext.userMemType == 0:
        return winContext.remoteRes[rankId].nextDevicePtr.windowsIn
    return winContext.userMemRes[rankId].addr


# ---------------------------------------------------------------- AttentionToFFN
class AttentionToFFN:
    """``AttentionToFFNImpl::AttentionToFFN<XType, isQuant, isSync, isActiveMask>``, per core."""

    def __init__(self, isQuant: bool, isSync: bool, isActiveMask: bool) -> None:
        assert not isQuant and not isSync, "the quantised and sync paths are not ported"
        self.isActiveMask = isActiveMask

    def InitByTinglingData(self, tilingData):
        self.aivId_ = hp.GetBlockIdx()
        self.winContext_ = hp.GetHcclContext(0)  # HcclOpResParam
        self.rankId_ = self.winContext_.localUsrRankId
        info = tilingData.attentionToFFNInfo
        self.axisX_, self.axisBS_, self.axisH_ = info.X, info.BS, info.H
        self.axisL_, self.axisK_ = info.L, info.K
        self.expertNum_, self.moeExpertNum_ = info.expertNum, info.moeExpertNum
        self.expRankTableM_, self.microBatchNum_ = info.expRankTableM, info.microBatchNum
        self.attentionWorkerNum_ = info.attentionWorkerNum
        self.infoTableLastDimNum_ = info.infoTableLastDimNum
        self.axisHS_, self.aivNum_, self.worldSize_ = info.HS, info.aivNum, info.worldSize
        self.ffnStartRankId_ = info.ffnStartRankId
        self.sharedExpertNum_ = info.sharedExpertNum
        self.ffnNum_ = self.worldSize_ - self.attentionWorkerNum_
        self.curBsCnt_ = self.axisBS_
        self.expertIdsCnt_ = self.axisX_ * self.axisBS_ * self.axisK_
        self.expertRankTableCnt_ = self.expertNum_ * self.expRankTableM_

    def Init(self, x, sessionId, microBatchId, layerId, expertIds, expertRankTable, scales,
             activeMask, workspaceGM, tilingData):  # fmt: skip
        self.InitByTinglingData(tilingData)
        self.xGMTensor_, self.expertIdsGMTensor_ = x, expertIds
        self.expertRankTableGMTensor_, self.activeMaskGMTensor_ = expertRankTable, activeMask
        self.sessionId_ = int(i32(sessionId, 1)[0])  # X = 1: the first value
        self.microBatchId_ = int(i32(microBatchId, 1)[0])
        self.layerId_ = int(i32(layerId, 1)[0])
        self.layIdsExpRankTableOffset_ = self.layerId_ * self.expertRankTableCnt_
        kS = self.axisK_ + self.sharedExpertNum_
        infoBytes = self.attentionWorkerNum_ * self.microBatchNum_ * self.infoTableLastDimNum_ * 4
        self.winOffset_ = [0, Ceil(infoBytes, WIN_ALIGN) * WIN_ALIGN]
        self.winInfoTableOffset_ = (
            self.sessionId_ * self.microBatchNum_ * self.infoTableLastDimNum_
            + self.microBatchId_ * self.infoTableLastDimNum_
        ) * 4
        self.winTokenDataOffset_ = (
            self.sessionId_ * self.microBatchNum_ * self.axisBS_ * kS * self.axisHS_
            + self.microBatchId_ * self.axisBS_ * kS * self.axisHS_
        )

    def ActiveMaskCalCnt(self):
        # DataCopyPad the mask, Cast to half, Sum: the number of active tokens
        mask = hp.gm_tensor(self.activeMaskGMTensor_, torch.bool, self.axisBS_)
        self.curBsCnt_ = int(mask.to(torch.float16).sum())

    def FindExpertRank(self, expertId):
        table = self.expertRankTableUb_
        expRankTableOffset = expertId * self.expRankTableM_
        rankCnt = int(table[expRankTableOffset])  # the ranks this expert is deployed on
        rankOffset = (self.sessionId_ % rankCnt) * RANK_OFFSET_STRIDE + 1
        self.toRankId_ = int(table[expRankTableOffset + rankOffset])
        self.localExpId_ = int(table[expRankTableOffset + rankOffset + 1])

    def SplitToCore(self, curSendCnt, curUseAivNum):
        sendTokenNum, remainderTokenNum = divmod(curSendCnt, curUseAivNum)
        startTokenId = sendTokenNum * self.aivId_
        if self.aivId_ < remainderTokenNum:  # the first cores take one more
            sendTokenNum += 1
            startTokenId += self.aivId_
        else:
            startTokenId += remainderTokenNum
        return startTokenId, startTokenId + sendTokenNum, sendTokenNum

    def SetExpertAndRank(self, tokenIdx, tokenId, topkId):
        if topkId < self.axisK_:  # a routed expert
            self.dstExpertId_ = int(self.expertIdsTensor_[tokenId * self.axisK_ + topkId])
        else:  # the shared experts come after the moeExpertNum routed ones
            self.dstExpertId_ = self.moeExpertNum_ + (topkId - self.axisK_)
        self.FindExpertRank(self.dstExpertId_)
        self.statusTensor_[tokenIdx * STATUS_REP_STRIDE] = self.localExpId_

    def CheckFlagAndSetTableGM(self, toRankId):
        toRankAddr = GetWindowAddr(self.winContext_, toRankId)
        tokenInfoTableGMTensor = toRankAddr + self.winInfoTableOffset_
        # the FFN has consumed the previous round of this row: its flag is no longer 1
        while int(i32(tokenInfoTableGMTensor, 1)[0]) == 1:
            pass
        return toRankAddr, tokenInfoTableGMTensor

    def SendTokenToFFNByTokenIdx(self, tokenIdx):
        kS = self.axisK_ + self.sharedExpertNum_
        tokenOffset = self.aivId_ + tokenIdx * self.aivNum_  # the slot in BS * (K + S)
        tokenId, topkId = divmod(tokenOffset, kS)
        xInTensor = f16(self.xGMTensor_ + tokenId * self.axisH_ * 2, self.axisH_).clone()
        self.SetExpertAndRank(tokenIdx, tokenId, topkId)
        toRankAddr, tokenInfoTableGMTensor = self.CheckFlagAndSetTableGM(self.toRankId_)
        tokenData = toRankAddr + self.winOffset_[1]
        tokenData += (
            self.winTokenDataOffset_ + tokenId * kS * self.axisHS_ + topkId * self.axisHS_
        ) * 2
        f16(tokenData, self.axisH_)[:] = xInTensor
        # this FFN rank's token flag: the local expert id, after the token (one MTE3 queue)
        slot = tokenInfoTableGMTensor + (TOKEN_INFO_TABLE_RS + tokenOffset) * 4
        i32(slot, 1)[0] = self.statusTensor_[tokenIdx * STATUS_REP_STRIDE]

    def SendTokenToFFN(self):
        self.totalSendNum_ = self.axisX_ * self.curBsCnt_ * (self.axisK_ + self.sharedExpertNum_)
        self.expertIdsTensor_ = i32(self.expertIdsGMTensor_, self.expertIdsCnt_).clone()
        startId, _, self.sendNum_ = self.SplitToCore(self.totalSendNum_, self.aivNum_)
        statusCnt = self.sendNum_ if self.sendNum_ > 0 else 1  # the buffer is reused
        self.statusTensor_ = torch.zeros(statusCnt * STATUS_REP_STRIDE, dtype=torch.int32)
        if startId >= self.totalSendNum_:
            return
        # one refresh of the layer's expertRankTable cache lines, then read from there
        table = self.expertRankTableGMTensor_ + self.layIdsExpRankTableOffset_ * 4
        self.expertRankTableUb_ = i32(table, self.expertRankTableCnt_).clone()
        for tokenIdx in range(self.sendNum_):
            self.SendTokenToFFNByTokenIdx(tokenIdx)

    def SetFlagToFFN(self):
        # asynchronous: every FFN rank gets the flag, split over the cores
        startFFNId, endFFNId, _ = self.SplitToCore(self.ffnNum_, self.aivNum_)
        self.statusTensor_[:TOKEN_INFO_TABLE_COPY_BLOCK_CNT] = torch.tensor([1, self.layerId_])
        if startFFNId >= self.ffnNum_:
            return
        startFFNId += self.ffnStartRankId_
        endFFNId += self.ffnStartRankId_
        for ffnIdx in range(startFFNId, endFFNId):
            toRankAddr = GetWindowAddr(self.winContext_, ffnIdx)
            tableFlagGMTensor = i32(toRankAddr + self.winInfoTableOffset_, 2)
            tableFlagGMTensor[:] = self.statusTensor_[:TOKEN_INFO_TABLE_COPY_BLOCK_CNT]

    def SetFlagInAttn(self):
        # the masked tokens' slots: their flags in this rank's own table, as if answered
        kS = self.axisK_ + self.sharedExpertNum_
        totalNum = self.axisX_ * (self.axisBS_ - self.curBsCnt_) * kS
        if totalNum == 0:
            return
        startId, endId, sendNum = self.SplitToCore(totalNum, self.aivNum_)
        if startId >= totalNum:
            return
        sendMaskTokenCnt = self.curBsCnt_ * kS
        attnTokenInfoTableOffset = (self.microBatchId_ * self.axisBS_ * kS + sendMaskTokenCnt) * 4
        attnTableGMTensor = self.winContext_.localWindowsIn + attnTokenInfoTableOffset
        i32(attnTableGMTensor + startId * 4, sendNum)[:] = 1

    def Process(self):
        if self.isActiveMask:
            self.ActiveMaskCalCnt()
        self.SendTokenToFFN()
        hp.SyncAll()  # PipeBarrier<PIPE_ALL>, SyncAll<true>: every core's tokens are out
        self.SetFlagToFFN()
        if self.isActiveMask:
            self.SetFlagInAttn()


def attention_to_ffn(x, sessionId, microBatchId, layerId, expertIds, expertRankTable, scales,
                     activeMask, workspaceGM, tilingGM):  # fmt: skip
    tilingData = hp.GET_TILING_DATA_WITH_STRUCT(AttentionToFFNTilingData, tilingGM)
    info = tilingData.attentionToFFNInfo  # the tiling key's template arguments (CalTilingKey)
    op = AttentionToFFN(info.quantMode == DYNAMIC_QUANT, info.syncFlag == 1, info.isActiveMask)
    op.Init(x, sessionId, microBatchId, layerId, expertIds, expertRankTable, scales, activeMask,
            workspaceGM, tilingData)  # fmt: skip
    op.Process()


# ---------------------------------------------------------------- FFNToAttention
class FFNToAttention:
    """``FFNToAttentionImpl::FFNToAttention<xType, isInputRankTable>``, per core."""

    def __init__(self, isInputRankTable: bool) -> None:
        self.isInputRankTable = isInputRankTable

    def Init(self, x, sessionIds, microBatchIds, tokenIds, expertOffsets, actualTokenNum,
             attnRankTable, workspaceGM, tilingData):  # fmt: skip
        self.aivId_ = hp.GetBlockIdx()
        self.winContext_ = hp.GetHcclContext(0)
        info = tilingData.ffnToAttentionInfo
        self.axisBS_, self.axisH_, self.axisHS_, self.axisA_ = info.BS, info.H, info.HS, info.A
        self.microBatchNum_, self.expertNumPerToken_ = info.microBatchNum, info.expertNumPerToken
        self.aivNum_, self.worldSize_ = info.aivNum, info.worldSize
        self.xGMTensor_, self.sessionIdsGMTensor_ = x, sessionIds
        self.microBatchIdsGMTensor_, self.tokenIdsGMTensor_ = microBatchIds, tokenIds
        self.expertOffsetsGMTensor_, self.attnRankTableGMTensor_ = expertOffsets, attnRankTable
        self.actualTokenNum_ = int(hp.gm_tensor(actualTokenNum, torch.int64, 1)[0])
        self.statusTensor_ = torch.ones(UB_ALIGN // 4, dtype=torch.int32)  # the flag
        self.batchSizeSendCnt_ = self.axisBS_ * self.expertNumPerToken_
        self.perMicroBatchOffset_ = self.batchSizeSendCnt_ * self.axisHS_
        self.perExpertOffset_ = self.expertNumPerToken_ * self.axisHS_
        tableBytes = self.microBatchNum_ * self.batchSizeSendCnt_ * 4
        self.winTokenInfoTableSize_ = Ceil(tableBytes, WIN_ALIGN) * WIN_ALIGN

    def ReadTokenMetaData(self, YOffset):
        curAttenWorkIds = int(i32(self.sessionIdsGMTensor_ + YOffset * 4, 1)[0])
        curAttenWorkRank = curAttenWorkIds
        if self.isInputRankTable:
            curAttenWorkRank = int(i32(self.attnRankTableGMTensor_ + curAttenWorkIds * 4, 1)[0])
        curMicroBatchIds = int(i32(self.microBatchIdsGMTensor_ + YOffset * 4, 1)[0])
        curTokenBatchOffset = int(i32(self.tokenIdsGMTensor_ + YOffset * 4, 1)[0])
        curTokenTopkOffset = int(i32(self.expertOffsetsGMTensor_ + YOffset * 4, 1)[0])
        return curAttenWorkRank, curMicroBatchIds, curTokenBatchOffset, curTokenTopkOffset

    def Process(self):
        sendTokenNum, remainderRankNum = divmod(self.actualTokenNum_, self.aivNum_)
        calStartTokenId = 0
        if self.aivId_ < remainderRankNum:  # the first cores take one more
            sendTokenNum += 1
            calStartTokenId += self.aivId_
        else:
            calStartTokenId += remainderRankNum
        if calStartTokenId >= self.actualTokenNum_:
            sendTokenNum = 0
        for tokenCnt in range(sendTokenNum):
            YOffset = self.aivId_ + tokenCnt * self.aivNum_  # the row of x
            xTmpTensor = f16(self.xGMTensor_ + YOffset * self.axisH_ * 2, self.axisH_).clone()
            rank, microBatch, token, topk = self.ReadTokenMetaData(YOffset)
            curRankWinAddr = GetWindowAddr(self.winContext_, rank)
            tokenInfoTableOffset = microBatch * self.batchSizeSendCnt_
            tokenDataOffset = (
                microBatch * self.perMicroBatchOffset_
                + token * self.perExpertOffset_
                + topk * self.axisHS_
            ) * 2
            slot = tokenInfoTableOffset + token * self.expertNumPerToken_ + topk
            tokenInfoTableGMTensor = curRankWinAddr + slot * 4  # the table first, then the data
            tokenDataGMTensor = curRankWinAddr + self.winTokenInfoTableSize_ + tokenDataOffset
            f16(tokenDataGMTensor, self.axisH_)[:] = xTmpTensor
            # PipeBarrier<PIPE_MTE3>: the flag after the data
            i32(tokenInfoTableGMTensor, 1)[0] = self.statusTensor_[0]


def ffn_to_attention(x, sessionIds, microBatchIds, tokenIds, expertOffsets, actualTokenNum,
                     attnRankTable, workspaceGM, tilingGM):  # fmt: skip
    tilingData = hp.GET_TILING_DATA_WITH_STRUCT(FFNToAttentionTilingData, tilingGM)
    op = FFNToAttention(tilingData.ffnToAttentionInfo.isInputRankTable)
    op.Init(x, sessionIds, microBatchIds, tokenIds, expertOffsets, actualTokenNum, attnRankTable,
            workspaceGM, tilingData)  # fmt: skip
    op.Process()


# ---------------------------------------------------------------- host tilings
def SetHcommCfg(tilingData, group: str) -> None:
    """Both hosts: an AlltoAll config of op type 8; no comm engine is set."""
    algConfigAllToAllStr = "AlltoAll=level0:fullmesh;level1:pairwise"
    mc2CcTilingConfig = Mc2CcTilingConfig(group, OP_TYPE_ALL_TO_ALL, algConfigAllToAllStr)
    assert mc2CcTilingConfig.GetTiling(tilingData.mc2InitTiling) == HCCL_SUCCESS
    assert mc2CcTilingConfig.GetTiling(tilingData.mc2CcTiling1) == HCCL_SUCCESS


def AttentionToFFNTilingFunc(group, worldSize, ffnTokenInfoTableShape, ffnTokenDataShape,
                             attnTokenInfoTableShape, moeExpertNum, quantMode, syncFlag,
                             ffnStartRankId, xShape, expertIdsShape, expertRankTableShape,
                             isActiveMask):  # fmt: skip
    tilingData = AttentionToFFNTilingData()
    info = tilingData.attentionToFFNInfo
    # CheckAndSetAttrs, CheckAndSetShapeAttrs
    assert 0 < moeExpertNum <= MOE_EXPERT_MAX_NUM and 0 <= quantMode <= DYNAMIC_QUANT
    assert syncFlag in (0, 1) and 0 <= ffnStartRankId < worldSize
    assert MIN_WORLD_SIZE <= worldSize <= MAX_WORLD_SIZE
    assert len(ffnTokenInfoTableShape) == 3 and len(ffnTokenDataShape) == 5
    assert len(attnTokenInfoTableShape) == 3
    assert ffnTokenInfoTableShape[:2] == ffnTokenDataShape[:2]
    assert ffnTokenDataShape[2] == xShape[1] == attnTokenInfoTableShape[1]
    assert attnTokenInfoTableShape[0] == ffnTokenInfoTableShape[1]
    assert attnTokenInfoTableShape[2] == ffnTokenDataShape[3]
    info.attentionWorkerNum = ffnTokenDataShape[0]
    assert 0 < info.attentionWorkerNum < worldSize
    info.microBatchNum, info.HS = ffnTokenDataShape[1], ffnTokenDataShape[4]
    info.infoTableLastDimNum = ffnTokenInfoTableShape[2]
    info.moeExpertNum, info.quantMode, info.syncFlag = moeExpertNum, quantMode, syncFlag
    info.ffnStartRankId, info.worldSize = ffnStartRankId, worldSize
    # CheckInputAndSetTilingData (unquantised: no scales)
    assert quantMode != 1, "static quantisation is not supported"
    assert xShape[0] == 1 and 0 < xShape[1] <= BS_MAX and H_MIN <= xShape[2] <= H_MAX
    assert expertIdsShape[:2] == xShape[:2] and 0 < expertIdsShape[2] <= min(K_MAX, moeExpertNum)
    assert expertRankTableShape[0] == 1
    assert moeExpertNum <= expertRankTableShape[1] <= moeExpertNum + SHARED_EXPERT_MAX_NUM
    info.X, info.BS, info.H = xShape
    info.K, info.L = expertIdsShape[2], expertRankTableShape[0]
    info.expertNum, info.expRankTableM = expertRankTableShape[1], expertRankTableShape[2]
    info.sharedExpertNum = expertRankTableShape[1] - moeExpertNum
    info.isScales, info.isActiveMask = False, isActiveMask
    # CalWinSize
    kS = info.K + info.sharedExpertNum
    tokenInfoNeedWinSize = (
        info.attentionWorkerNum * info.microBatchNum * info.infoTableLastDimNum * 4
    )
    tokenDataNeedWinSize = info.attentionWorkerNum * info.microBatchNum * info.BS * kS * info.HS
    tokenDataNeedWinSize *= 1 if quantMode != 0 else NO_QUANT_MODE_WIN_SIZE
    info.totalWinSize = RUN_KWARGS["buffsize_mb"] * MB_SIZE  # GetMaxWindowSize(): HCCL_BUFFSIZE
    neededSize = (tokenInfoNeedWinSize + tokenDataNeedWinSize) // MB_SIZE + 1
    assert neededSize <= info.totalWinSize // MB_SIZE
    SetHcommCfg(tilingData, group)
    # numBlocks = CalcTschBlockDim(aivNum, 0, aivNum): every AIV core
    info.totalUbSize, info.aivNum = UB_SIZE_A3, AIV_NUM
    return tilingData, AIV_NUM


def FFNToAttentionTilingFunc(group, worldSize, tokenInfoTableShape, tokenDataShape, xShape,
                             attnRankTableShape):  # fmt: skip
    tilingData = FFNToAttentionTilingData()
    info = tilingData.ffnToAttentionInfo
    # CheckAndSetAttrs
    assert len(tokenInfoTableShape) == 3 and len(tokenDataShape) == 4
    assert tokenInfoTableShape == tokenDataShape[:3]
    assert MIN_WORLD_SIZE <= worldSize <= MAX_WORLD_SIZE
    assert tokenInfoTableShape[0] == 1, "one micro batch"
    assert 0 < tokenDataShape[1] <= BS_MAX and H_MIN <= tokenDataShape[3] <= H_MAX + SCALE_SIZE
    info.worldSize = worldSize
    info.microBatchNum, info.BS, _, info.HS = tokenDataShape
    info.expertNumPerToken = tokenInfoTableShape[2]
    # CheckInputDim, CheckInputDim0Dim1
    assert len(xShape) == 2 and H_MIN <= xShape[1] <= H_MAX
    info.H = xShape[1]
    info.isInputRankTable = attnRankTableShape is not None
    if info.isInputRankTable:
        info.A = attnRankTableShape[0]
        assert worldSize - 1 >= info.A
    # CalWinSize
    cells = info.microBatchNum * info.BS * info.expertNumPerToken
    info.totalWinSize = RUN_KWARGS["buffsize_mb"] * MB_SIZE
    assert (cells * info.HS * 2 + cells * 4) // MB_SIZE + 1 <= info.totalWinSize // MB_SIZE
    SetHcommCfg(tilingData, group)
    info.totalUbSize, info.aivNum = UB_SIZE_A3, AIV_NUM
    return tilingData, AIV_NUM


# ---------------------------------------------------------------- the stand-ins between them
def roles() -> tuple[int, int]:
    """Attention workers (ranks 0 .. A-1) and FFN workers (ranks A ..)."""
    n = hp.get_world_size()
    return n // 2, n - n // 2


def info_last_dim() -> int:
    return TOKEN_INFO_TABLE_RS + BS * (K + SHARED)


def ffn_table_init(_):
    """Host setup of an FFN rank: every expert id of its token info table is INT_MAX."""
    A, _ = roles()
    table = i32(hp.GetHcclContext(0).localWindowsIn, A * MICRO_BATCH_NUM * info_last_dim())
    table.view(A * MICRO_BATCH_NUM, -1)[:, TOKEN_INFO_TABLE_RS:] = INT_MAX


def ffn_worker(yGM, sessionIdsGM, microBatchIdsGM, tokenIdsGM, expertOffsetsGM, actualGM, layerGM):
    """FfnWorkerBatching (need_schedule 1) and the experts' FFN, on one core."""
    A, _ = roles()
    ctx, kS, F, mb = hp.GetHcclContext(0), K + SHARED, info_last_dim(), 0
    win = ctx.localWindowsIn
    for a in range(A):  # KernelScanTokenInfo: every session's flag of the micro batch
        while int(i32(win + (a * MICRO_BATCH_NUM + mb) * F * 4, 1)[0]) != 1:
            pass
    table = i32(win, A * MICRO_BATCH_NUM * F).view(A, MICRO_BATCH_NUM, F)[:, mb]
    rows = table.clone().numpy()
    table[:, TOKEN_INFO_TABLE_RS:] = INT_MAX  # copied in and cleared: ids INT_MAX, flag 0
    table[:, 0] = 0
    ids = rows[:, TOKEN_INFO_TABLE_RS:].reshape(-1)
    valid = np.flatnonzero(ids != INT_MAX)
    order = valid[np.argsort(ids[valid], kind="stable")]
    session, slot = np.divmod(order, BS * kS)
    token, topk = np.divmod(slot, kS)
    dataBytes = Ceil(A * MICRO_BATCH_NUM * F * 4, WIN_ALIGN) * WIN_ALIGN
    data = f16(win + dataBytes, A * MICRO_BATCH_NUM * BS * kS * HS)
    x = data.view(A, MICRO_BATCH_NUM, BS, kS, HS)[session, mb, token, topk, :H]
    ffnIndex = ctx.localUsrRankId - A
    y = 2 * x + torch.from_numpy(8 * (ids[order] + 1) + 64 * ffnIndex)[:, None].to(x.dtype)
    n = len(order)
    f16(yGM, n * H)[:] = y.reshape(-1)
    for gm, values in ((sessionIdsGM, session), (microBatchIdsGM, np.full(n, mb)),
                       (tokenIdsGM, token), (expertOffsetsGM, topk)):  # fmt: skip
        i32(gm, n)[:] = torch.from_numpy(values.astype(np.int32))
    hp.gm_tensor(actualGM, torch.int64, 1)[0] = n
    i32(layerGM, A)[:] = torch.from_numpy(rows[:, 1])


def attention_worker(outGM):
    """AttentionWorkerScheduler (wait for every flag of the micro batch, reset them) and a
    combine that returns every slot."""
    kS, mb = K + SHARED, 0
    win = hp.GetHcclContext(0).localWindowsIn
    flags = win + mb * BS * kS * 4
    while int((i32(flags, BS * kS) == 1).sum()) != BS * kS:
        pass
    i32(flags, BS * kS)[:] = 0
    dataBytes = Ceil(MICRO_BATCH_NUM * BS * kS * 4, WIN_ALIGN) * WIN_ALIGN
    data = f16(win + dataBytes, MICRO_BATCH_NUM * BS * kS * HS).view(MICRO_BATCH_NUM, BS, kS, HS)
    f16(outGM, BS * kS * H)[:] = data[mb, :, :, :H].reshape(-1)


# ---------------------------------------------------------------- inputs and the reference
def moe_expert_num() -> int:
    return LOCAL_MOE * roles()[1]


def expert_rank_table() -> np.ndarray:
    """(L = 1, moeExpertNum + SHARED, M): routed expert e on FFN rank A + e % F as local
    expert e // F; the shared expert on every FFN rank, as local expert LOCAL_MOE."""
    A, F = roles()
    table = np.zeros((1, moe_expert_num() + SHARED, 1 + RANK_OFFSET_STRIDE * F), dtype=np.int32)
    for e in range(moe_expert_num()):
        table[0, e, :3] = (1, A + e % F, e // F)
    table[0, moe_expert_num(), 0] = F
    table[0, moe_expert_num(), 1::2] = A + np.arange(F)
    table[0, moe_expert_num(), 2::2] = LOCAL_MOE
    return table


def tokens(session: int, launch: int) -> np.ndarray:
    """x of an attention worker: exact FP16 integers naming session, token and column."""
    x = 100 * session + 10 * np.arange(BS)[:, None] + np.arange(H) % 8 + launch
    return x.astype(np.float16)


def expert_ids(session: int, launch: int) -> np.ndarray:
    """Odd launches route only to the experts of the first FFN rank, so that the others get
    no token of session 0 but its flag (the next launch's flag check waits for them)."""
    rng = np.random.default_rng(100 * launch + session)
    _, F = roles()
    experts = np.arange(0, moe_expert_num(), F if launch % 2 else 1)
    ids = [rng.permutation(experts)[:K] for _ in range(BS)]
    return np.array(ids, dtype=np.int32)


def active_tokens(launch: int) -> int:
    """Even launches mask the last token out."""
    return BS - 1 if launch % 2 == 0 else BS


def routes(session: int, launch: int) -> np.ndarray:
    """numpy: (token, k, toRank, localExpert) of every slot the session sends."""
    table, ids = expert_rank_table()[0], expert_ids(session, launch)
    out = []
    for t in range(active_tokens(launch)):
        for k in range(K + SHARED):
            e = ids[t, k] if k < K else moe_expert_num() + k - K
            pick = 1 + (session % table[e, 0]) * RANK_OFFSET_STRIDE
            out.append((t, k, table[e, pick], table[e, pick + 1]))
    return np.array(out, dtype=np.int64).reshape(-1, 4)


def expert_ffn(x: np.ndarray, rank: np.ndarray, local: np.ndarray) -> np.ndarray:
    A, _ = roles()
    return 2 * x.astype(np.float64) + (8 * (local + 1) + 64 * (rank - A))[:, None]


def attention_reference(session: int, launch: int) -> np.ndarray:
    """The rows the attention worker gets back, for its active tokens."""
    r = routes(session, launch)
    return expert_ffn(tokens(session, launch)[r[:, 0]], r[:, 2], r[:, 3])


def ffn_reference(rank: int, launch: int) -> np.ndarray:
    """What an FFN worker receives: count, sessions, tokens, k, layer ids, and its rows."""
    A, _ = roles()
    got = []
    for s in range(A):
        r = routes(s, launch)
        slot = s * BS * (K + SHARED) + r[:, 0] * (K + SHARED) + r[:, 1]
        got += [(le, sl, s, t, k) for (t, k, to, le), sl in zip(r, slot, strict=True) if to == rank]
    got = np.array(sorted(got), dtype=np.int64).reshape(-1, 5)
    x = np.stack([tokens(s, launch) for s in range(A)])[got[:, 2], got[:, 3]]
    y = expert_ffn(x, np.full(len(got), rank), got[:, 0])
    meta = [len(got), *got[:, 2], *got[:, 3], *got[:, 4], *np.zeros(A)]
    return np.concatenate([np.array(meta, dtype=np.float64), y.reshape(-1)])


# ---------------------------------------------------------------- the round trips
def attention_round(launch: int) -> str:
    rank, n = hp.get_rank(), hp.get_world_size()
    A, _ = roles()
    kS, dev = K + SHARED, hp.device()
    mask = np.arange(BS) < active_tokens(launch)
    tiling, numBlocks = AttentionToFFNTilingFunc(
        WORLD_GROUP, n, [A, MICRO_BATCH_NUM, info_last_dim()],
        [A, MICRO_BATCH_NUM, BS, kS, HS], [MICRO_BATCH_NUM, BS, kS], moe_expert_num(), 0, 0, A,
        (1, BS, H), (1, BS, K), expert_rank_table().shape, launch % 2 == 0,
    )  # fmt: skip
    ints = [torch.tensor([v], dtype=torch.int32, device=dev) for v in (rank, 0, 0)]
    hp.launch(
        attention_to_ffn,
        on_device(tokens(rank, launch)),
        *ints,
        on_device(expert_ids(rank, launch)),
        on_device(expert_rank_table()),
        None,
        on_device(mask) if launch % 2 == 0 else None,
        None,
        tiling,
        block_dim=numBlocks,
        kernel_type="aiv",
    )
    out = torch.zeros(BS * kS * H, dtype=torch.float16, device=dev)
    hp.launch(attention_worker, out, block_dim=1, kernel_type="aiv")
    got = out.view(BS, kS, H)[: active_tokens(launch)].double()
    return compare(f"launch-{launch}", got, attention_reference(rank, launch), "attention")


def ffn_round(launch: int) -> str:
    rank, n = hp.get_rank(), hp.get_world_size()
    A, _ = roles()
    kS, dev = K + SHARED, hp.device()
    Y = A * BS * kS
    y = torch.zeros(Y * H, dtype=torch.float16, device=dev)
    meta = [torch.zeros(Y, dtype=torch.int32, device=dev) for _ in range(4)]
    actual = torch.zeros(1, dtype=torch.int64, device=dev)
    layer = torch.zeros(A, dtype=torch.int32, device=dev)
    hp.launch(ffn_worker, y, *meta, actual, layer, block_dim=1, kernel_type="aiv")
    rank_table = torch.arange(A, dtype=torch.int32, device=dev) if launch % 2 == 0 else None
    tiling, numBlocks = FFNToAttentionTilingFunc(
        WORLD_GROUP, n, [MICRO_BATCH_NUM, BS, kS], [MICRO_BATCH_NUM, BS, kS, HS], (Y, H),
        None if rank_table is None else tuple(rank_table.shape),
    )  # fmt: skip
    hp.launch(ffn_to_attention, y, *meta, actual, rank_table, None, tiling,
              block_dim=numBlocks, kernel_type="aiv")  # fmt: skip
    count = int(actual[0])
    got = torch.cat([actual.double(), *(m[:count].double() for m in (meta[0], meta[2], meta[3])),
                     layer.double(), y[: count * H].double()])  # fmt: skip
    return compare(f"launch-{launch}", got, ffn_reference(rank, launch), f"FFN, {count} tokens")


def main() -> list[str]:
    A, _ = roles()
    if hp.get_rank() >= A:
        hp.launch(
            ffn_table_init, torch.zeros(1, device=hp.device()), block_dim=1, kernel_type="aiv"
        )
    hp.barrier()  # the tables are ready before any attention worker sends
    lines = []
    for launch in (1, 2):
        lines.append(attention_round(launch) if hp.get_rank() < A else ffn_round(launch))
    return lines


if __name__ == "__main__":
    run_sample(main, platform=PLATFORM, **RUN_KWARGS)
