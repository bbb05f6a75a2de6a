"""Port of ops-transformer's layered MoeDistributeDispatchV2 + CombineV2 on Atlas A2, AI CPU data plane.

Source: mirror-cann/ops-transformer at 3a280bcc (2026-07-21), every file read at that commit:
the entries ``mc2/moe_distribute_dispatch_v2/op_kernel/arch22/moe_distribute_dispatch_v2_a2.cpp``
and ``mc2/moe_distribute_combine_v2/op_kernel/arch22/moe_distribute_combine_v2_a2.cpp``
(``ArchTag`` TILINGKEY_TPL_A2, ``CommMode``/``LayeredMode`` TILINGKEY_TPL_AICPU, no quantisation;
``GetDataplaneMode`` of ``common/op_kernel/moe_distribute_base.h``: AICPU when the context has no
capability), ``MoeDistributeDispatchA2LayeredAicpu`` of
``op_kernel/arch22/moe_distribute_dispatch_a2_layered_aicpu.h``, ``MoeDistributeCombineA2LayeredAicpu``
of ``moe_distribute_combine_v2/op_kernel/arch22/moe_distribute_combine_a2_layered_aicpu.h``, the host
``op_host/op_tiling/arch22/moe_distribute_dispatch_v2_tiling_arch22.cpp`` (``CheckCommAlg``,
``CalcTilingKey``, ``GetAlgConfig`` "BatchWrite=level1:hierarchy", the layered ``CheckWinSize``) and
the tensor sizes of ``op_host/moe_distribute_dispatch_v2_infershape.cpp`` (A2, with expertScales).
The tiling structs and the MTE branches of the entries come from samples/mc2_moe_distribute_a2.py.
docs/notes/mc2-kernels.md, section 27.

What it computes: the dispatch sends each token once to each server that holds one of its K
experts (one BatchWrite of two items per server: the rows with their expert ids, weights and
per-expert positions, then a 32-byte flag) to the rank with the same index there ("the plane
rank"); that rank copies each row into the IPC area (the In window past 100 MB) of every rank
of its server whose expert the token chose, and counts it there (atomic add). After an IPC
barrier of the 8 ranks of a server each rank writes its rows to ``expandX`` by [local
expert][source rank], with ``expandScales`` (the router weight of each pair), ``epRecvCounts``
(cumulative per (expert, source)) and ``expertTokenNums``; behind the counts in ``epRecvCounts``
it leaves the combine's reduce information (``CreateInnerReduceInfo`` / ``CreateOuterReduceInfo``).
The combine sends each row with its weight back through the IPC area of the rank of the own
server that shares the destination's index, which sums each token's rows of its server times
their weights (``SumToWindow``, FP32, ``CAST_RINT``), BatchWrites the partial rows to the plane
ranks, then a status word per server (a second BatchWrite); each rank adds the partial rows of
its tokens (``SumToServer``).

Both BatchWrites include items towards the own rank (the own server's pair), which
BatchWrite.md forbids on A2: hccl_py warns once per rank (``batch-write-server``)
and copies the items, as for the fullmesh kernels (sections 25 and 27; tests/test_a2_layered.py
``test_layered_dispatch_own_rank_item_warns``), and numpy checks what the kernels compute. ``expandScales`` gets 32 floats of room after the size
infershape gives it: the combine reads the scales in blocks of 32 (``EXPAND_SCALES_PAD``).

Stand-ins: FP16; one launch shape (BS = 2, K = 3, H = 16, one expert per rank, 16 ranks on two
servers of 8, ``aivNum`` 8: the IPC barrier needs one core per rank of a server); the expert
between the kernels adds its id to each row; the UB words a DataCopy carries beyond the ones
the kernel sets are zero; ``SyncFunc`` / ``PipeBarrier`` / ``DataCacheCleanAndInvalid`` are
program order. Not ported: the AIV data plane (``moe_distribute_dispatch_a2_layered.h``,
``moe_distribute_combine_a2_layered.h``, ``HcclAiRMA*``) and quantisation.

Run: ``python samples/mc2_moe_distribute_a2_layered.py`` (16 emulated ranks; not on gloo or torchrun,
where 16 processes are too many for this machine). The source's dispatch clean-up and combine
IPC reads race the next launch (docs/notes/mc2-kernels.md, section 27): some explored schedules
compute a wrong combine (``python -m hccl_py run -n 16 --explore 3`` reports schedule 1's
``combine-2`` FAIL as a schedule-dependent result), so only the default schedule is checked.
"""

from __future__ import annotations

import functools
import os

import numpy as np
import torch
from _common import WORLD_GROUP, compare, f16, f32, i32, on_device, run_sample, zeros
from _mc2 import split_to_core
from mc2_moe_distribute_a2 import (
    BUFFER_NUM,
    BW_ITEM_SIZE,
    FLAG_VALUE,
    OP_TYPE_BATCH_WRITE,
    UB_SIZE,
    BatchWriteItem,
    MoeDistributeCombineA2,
    MoeDistributeCombineA2TilingData,
    MoeDistributeDispatchA2,
    MoeDistributeDispatchA2TilingData,
    RoundUp,
)

import hccl_py as hp
from hccl_py import (
    AIV,
    HCCL_DATA_TYPE_FP16,
    HCCL_DATA_TYPE_INT8,
    HCCL_DATA_TYPE_INT32,
    Hccl,
    Mc2CcTilingConfig,
    offsetof,
)

PLATFORM = "A2"
BUFFSIZE_MB = 105  # the kernel's 100 MB RDMA area, the 4 MB IPC header, then the IPC slots
RUN_KWARGS = {"buffsize_mb": BUFFSIZE_MB}
WORLD = 16  # two servers of 8 ranks
BS, K, H = 2, 3, 16  # tokens per rank, experts per token, hidden size (32-byte rows)
LOCAL_EXPERTS = 1
AIV_NUM = 8  # GetCoreNumAiv(): SetIpcFlag / WaitIpcFlag need one core per rank of a server
EXPERT_TOKEN_NUMS_TYPE = 0  # cumulative
SIZEOF_HALF = 4 // 2
# tiling keys (moe_distribute_dispatch_v2_tiling_key.h)
TILINGKEY_TPL_MTE, TILINGKEY_TPL_AICPU = 0, 1
# moe_distribute_dispatch_a2_layered_aicpu.h
STATE_OFFSET = 512
STATUS_SIZE_LAYERED = 1024 * 1024
SERVER_RANK_SIZE = 8
RDMA_BUFFER_ALIGN = 4 * 1024
SELF_STATE_OFFSET = 512 * 1024
B32_PER_BLOCK = 8
B64_PER_BLOCK = 4
PER_MSG_RDMA_SEND_TIME = 2
UB_32B_ALIGN = 32
EXP_TOKEN_COUNT_FLAG_CNT = 8
IPC_MAGIC_OFFSET = 2 * 1024 * 1024 - 64 * 32
IPC_FLAG_OFFSET = 1024 * 1024
IPC_TOKEN_CNT_OFFSET = 2 * 1024 * 1024
IPC_DATA_OFFSET = 4 * 1024 * 1024
IPC_BUFF_ALIGN = 512
TOKEN_COUNT_SIZE = 32
FLAG_U32_CNT = 8
IPC_FLAG_STEP_1, IPC_FLAG_STEP_2 = 1, 2
TBUF_SIZE = 190 * 1024
TBUF_TEMP_OFFSET = 8 * 1024
RDMA_DATA_SIZE = 100 * 1024 * 1024
COMBINE_BATCH_WRITE_ITEM_OFFSET = 8 * 1024  # combine: the items, 8 KiB into the status area
COMBINE_IPC_FLAG = 12345
# host (moe_distribute_dispatch_v2_tiling_arch22.cpp)
RANK_NUM_PER_NODE_A2 = 8
MAX_MOE_EXPERT_NUMS_A2_HIERARCHY = 512
MB_SIZE = 1024 * 1024
#: Floats after expandScales: the combine reads each rank's scales in blocks of 32 (section 27).
EXPAND_SCALES_PAD = 32
#: Whether each launch runs the combine after the dispatch (tests run dispatches back to back).
COMBINE = True
U32 = 0xFFFFFFFF


def u8(addr: hp.GmAddr, n: int) -> torch.Tensor:
    """``n`` bytes at a GM address (a ``GlobalTensor<uint8_t>``)."""
    return hp.gm_tensor(addr, torch.uint8, n)


def u64(addr: hp.GmAddr, n: int) -> torch.Tensor:
    """``n`` 64-bit words at a GM address (a ``GlobalTensor<uint64_t>``, as int64)."""
    return hp.gm_tensor(addr, torch.int64, n)


def GetDataplaneMode(contextGM0) -> str:
    """``moe_distribute_base.h``: AICPU unless the capability bitmap has bit 2 (AIV)."""
    capability = contextGM0.capability
    if not capability:
        return "AICPU"
    return "AIV" if capability.dataplaneModeBitmap & 0x04 else "AICPU"


class MoeDistributeDispatchA2LayeredAicpu:
    """``MoeDistributeDispatchA2LayeredAicpu<half, half, false, false, false>``."""

    def Init(self, x, expertIds, expertScales, expandXOut, expertTokenNumsOut, epRecvCountsOut,
             expandScales, workspaceGM, tilingGM, contextGM0) -> None:  # fmt: skip
        T = MoeDistributeDispatchA2TilingData
        tilingData = hp.GET_TILING_DATA_WITH_STRUCT(T, tilingGM)
        self.hccl_ = Hccl()
        self.hccl_.InitV2(contextGM0, tilingData)
        self.hccl_.SetCcTilingV2(offsetof(T, "mc2CcTiling"))
        self.winContext_ = contextGM0
        info = tilingData.moeDistributeDispatchInfo
        self.rankId_ = info.epRankId
        self.windowInGM_ = self.hccl_.GetWindowsInAddr(self.rankId_)
        self.windowOutGM_ = self.hccl_.GetWindowsOutAddr(self.rankId_)
        self.axisBS_, self.globalBs_, self.axisH_, self.axisK_ = (
            info.bs,
            info.globalBs,
            info.h,
            info.k,
        )
        self.alignK_ = RoundUp(self.axisK_, B32_PER_BLOCK)
        self.aivNum_, self.worldSize_ = info.aivNum, info.epWorldSize
        self.moeExpertNum_ = info.moeExpertNum
        self.localMoeExpertNum_ = self.moeExpertNum_ // self.worldSize_
        self.totalSize_ = self.winContext_.winSize
        self.totalWinSize_ = 100 * 1024 * 1024  # the RDMA area
        self.shareMemOffset_ = self.totalWinSize_
        self.halfWinSize_ = self.totalWinSize_ // 2
        self.WIN_SIZE = self.halfWinSize_ - STATUS_SIZE_LAYERED
        self.expertTokenNumsType_ = info.expertTokenNumsType
        server0 = self.rankId_ // SERVER_RANK_SIZE * SERVER_RANK_SIZE
        self.shareAddrs = [
            self.hccl_.GetWindowsInAddr(server0 + i) + self.shareMemOffset_
            for i in range(SERVER_RANK_SIZE)
        ]
        # the token struct: the row, then K expert ids, K weights, K counts (each 32-byte
        # aligned) and a 32-byte scale block
        self.tokenLenInStruct_ = self.axisH_ * SIZEOF_HALF
        self.expLenInStruct_ = self.alignK_ * 4
        self.weightLenInStruct_ = self.alignK_ * 4
        self.cntLenInStruct_ = self.alignK_ * 4
        self.scaleLenInStruct_ = UB_32B_ALIGN
        self.realLenInStruct_ = self.axisK_ * 4
        self.tokenStructLen_ = (
            self.tokenLenInStruct_ + self.expLenInStruct_ + self.weightLenInStruct_
            + self.cntLenInStruct_ + self.scaleLenInStruct_
        )  # fmt: skip
        self.expOffsetInStruct_ = self.tokenLenInStruct_
        self.weightOffsetInStruct_ = self.expOffsetInStruct_ + self.expLenInStruct_
        self.cntOffsetInStruct_ = self.weightOffsetInStruct_ + self.weightLenInStruct_
        # uint32_t arithmetic: a window below 104 MB wraps (section 27)
        ipcBytes = (self.totalSize_ - self.totalWinSize_ - IPC_DATA_OFFSET) & U32
        self.RANK_SIZE_ON_IPC = ipcBytes // (self.localMoeExpertNum_ * self.worldSize_)
        self.RANK_SIZE_ON_IPC = self.RANK_SIZE_ON_IPC // IPC_BUFF_ALIGN * IPC_BUFF_ALIGN
        self.aivId_ = hp.GetBlockIdx()
        self.expertIdsCnt_ = self.axisBS_ * self.axisK_
        self.serverNum = self.worldSize_ // SERVER_RANK_SIZE
        self.SERVER_SIZE_ON_WIN = self.WIN_SIZE // self.serverNum
        self.SERVER_SIZE_ON_WIN = self.SERVER_SIZE_ON_WIN // RDMA_BUFFER_ALIGN * RDMA_BUFFER_ALIGN
        chosenAt = self.windowInGM_ + self.WIN_SIZE + self.worldSize_ * STATE_OFFSET
        self.bufferChosenGlobal_ = i32(chosenAt, 1)
        self.bufferId_ = int(self.bufferChosenGlobal_[0])
        self.windowInGM_ = self.windowInGM_ + self.halfWinSize_ * self.bufferId_
        self.windowOutGM_ = self.windowOutGM_ + self.halfWinSize_ * self.bufferId_
        self.expertIdsGM_, self.expandXOutGM_, self.weightsOutGM_ = (
            expertIds,
            expandXOut,
            expandScales,
        )
        self.sendStatusGM_ = self.windowOutGM_ + self.WIN_SIZE
        self.readStatusGM_ = self.windowInGM_ + self.WIN_SIZE
        self.expertTokenNumsOutGM_, self.epRecvCountsGM_ = expertTokenNumsOut, epRecvCountsOut
        self.statusSpaceGm_ = self.windowInGM_ + self.WIN_SIZE
        self.expandXGM_, self.weightsGM_ = x, expertScales
        self.dataBatchWriteInfo_ = workspaceGM
        infoWords = self.serverNum * PER_MSG_RDMA_SEND_TIME * B64_PER_BLOCK
        self.expertToServerCntGM_ = workspaceGM + infoWords * 8
        self.tableLen_ = RoundUp(self.axisBS_ * self.serverNum, B32_PER_BLOCK)
        E, S = self.localMoeExpertNum_, self.serverNum
        self.combineInnerCntOffset = E * S * SERVER_RANK_SIZE * 4
        self.combineInnerCntIndexOffset = self.combineInnerCntOffset + self.globalBs_ * S * 2
        self.combineOuterCntOffset = (
            self.combineInnerCntIndexOffset + self.globalBs_ * self.axisK_ * S * 4
        )
        self.combineOuterCntIndexOffset = self.combineOuterCntOffset + self.axisBS_ * 4
        self.moeExpertNumInServer_ = SERVER_RANK_SIZE * E
        self.expertToServerIdxTensor_ = [0] * S
        expertIdsSize = RoundUp(self.expertIdsCnt_ * 4, UB_32B_ALIGN)
        expertCountSize = RoundUp(self.moeExpertNum_ * 4, UB_32B_ALIGN)
        self.tokenUbSize_ = (
            TBUF_SIZE - TBUF_TEMP_OFFSET - expertIdsSize - expertCountSize - self.tableLen_ * 4
        )
        self.expertToServerCntTensor_ = [0] * self.tableLen_
        self.expertCountTensor_ = [0] * self.moeExpertNum_
        i32(self.statusSpaceGm_ + SELF_STATE_OFFSET + self.aivId_ * UB_32B_ALIGN * 4, 1).clone()
        if self.aivId_ == 0:
            i32(self.sendStatusGM_, 1)[0] = FLAG_VALUE
        # each launch increments this core's magic: the IPC flags of different launches differ
        magicAt = self.shareAddrs[self.rankId_ % SERVER_RANK_SIZE] + IPC_MAGIC_OFFSET
        magicGt = u64(magicAt + self.aivId_ * UB_32B_ALIGN, UB_32B_ALIGN // 8)
        tempLocal = magicGt.clone()
        tempLocal[0] += 1
        self.magicVal_ = int(tempLocal[0])
        magicGt[:] = tempLocal

    # ------------------------------------------------------------------ send
    def ReorderTokens(self) -> None:
        sendTokenNum = self.axisBS_ // self.aivNum_
        remainderTokenNum = self.axisBS_ % self.aivNum_
        startTokenId = sendTokenNum * self.aivId_
        if self.aivId_ < remainderTokenNum:
            sendTokenNum += 1
            startTokenId += self.aivId_
        else:
            startTokenId += remainderTokenNum
        if sendTokenNum == 0:
            return
        L = self.tokenStructLen_
        singleTokenUBSize = max(L, self.axisH_ * SIZEOF_HALF)
        maxTokenNumInUB = self.tokenUbSize_ // singleTokenUBSize
        batchNum = -(-sendTokenNum // maxTokenNumInUB)
        self.expertIdsTensor_ = i32(self.expertIdsGM_, self.expertIdsCnt_).tolist()
        S, K = self.serverNum, self.axisK_
        for batchIndex in range(batchNum):
            currentTokenNum = min(sendTokenNum, maxTokenNumInUB)
            ub = np.zeros(currentTokenNum * L, dtype=np.uint8)
            structs = ub.reshape(currentTokenNum, L)
            rows = u8(self.expandXGM_ + startTokenId * self.tokenLenInStruct_,
                      currentTokenNum * self.tokenLenInStruct_)  # fmt: skip
            structs[:, : self.tokenLenInStruct_] = rows.cpu().numpy().reshape(currentTokenNum, -1)
            ids = u8(self.expertIdsGM_ + startTokenId * self.realLenInStruct_,
                     currentTokenNum * self.realLenInStruct_)  # fmt: skip
            e0 = self.expOffsetInStruct_
            structs[:, e0 : e0 + self.realLenInStruct_] = (
                ids.cpu().numpy().reshape(currentTokenNum, -1)
            )
            weights = u8(self.weightsGM_ + startTokenId * self.realLenInStruct_,
                         currentTokenNum * self.realLenInStruct_)  # fmt: skip
            w0 = self.weightOffsetInStruct_
            structs[:, w0 : w0 + self.realLenInStruct_] = (
                weights.cpu().numpy().reshape(currentTokenNum, -1)
            )
            cnts = structs[
                :, self.cntOffsetInStruct_ : self.cntOffsetInStruct_ + self.cntLenInStruct_
            ]
            cnts = cnts.view(np.uint32)
            startExpId = startTokenId * K
            endExpId = startExpId + currentTokenNum * K
            if batchIndex == 0:
                for expertIndex in range(startExpId):
                    tokenIndex = expertIndex // K
                    expertId = self.expertIdsTensor_[expertIndex]
                    dstServerId = expertId // self.moeExpertNumInServer_
                    self.expertToServerCntTensor_[tokenIndex * S + dstServerId] = 1
                    self.expertCountTensor_[expertId] += 1
            for expertIndex in range(startExpId, endExpId):
                tokenIndex = expertIndex // K
                expertId = self.expertIdsTensor_[expertIndex]
                currentSum = self.expertCountTensor_[expertId]
                dstServerId = expertId // self.moeExpertNumInServer_
                self.expertToServerCntTensor_[tokenIndex * S + dstServerId] = 1
                self.expertCountTensor_[expertId] = currentSum + 1
                sendTokenIdx = expertIndex // K - startTokenId
                cnts[sendTokenIdx, expertIndex % K] = currentSum
                self.expertToServerIdxTensor_[dstServerId] = expertIndex
                if expertIndex % K != K - 1:
                    continue
                # the token's last pair: copy it once to each server one of its pairs goes to
                for reviewExpIdx in range(expertIndex + 1 - K, expertIndex + 1):
                    reviewServerId = (
                        self.expertIdsTensor_[reviewExpIdx] // self.moeExpertNumInServer_
                    )
                    if self.expertToServerIdxTensor_[reviewServerId] == reviewExpIdx:
                        self.CopyTokenToWinOut(structs, sendTokenIdx, reviewExpIdx // K,
                                               reviewServerId)  # fmt: skip
            if endExpId == self.expertIdsCnt_:
                # the last token's core writes the table of (token, server) pairs
                table = i32(self.expertToServerCntGM_, self.tableLen_)
                table[:] = torch.tensor(self.expertToServerCntTensor_, dtype=torch.int32)
            startTokenId += currentTokenNum
            sendTokenNum -= currentTokenNum

    def CopyTokenToWinOut(self, structs: np.ndarray, localTokenIdx: int, globalTokenIdx: int,
                          dstServerId: int) -> None:  # fmt: skip
        toServerCntSum = 0
        for tokenIdx in range(globalTokenIdx):
            toServerCntSum += self.expertToServerCntTensor_[tokenIdx * self.serverNum + dstServerId]
        destOffset = (
            dstServerId * self.SERVER_SIZE_ON_WIN + self.tokenStructLen_ * toServerCntSum
            + TOKEN_COUNT_SIZE
        )  # fmt: skip
        u8(self.windowOutGM_ + destOffset, self.tokenStructLen_)[:] = torch.from_numpy(
            structs[localTokenIdx].copy()
        )

    def serverSplit(self) -> tuple[int, int]:
        """This core's servers ``[start, end)``: ``serverNum`` over ``aivNum``, the first
        cores one more."""
        num, rem = divmod(self.serverNum, self.aivNum_)
        start = num * self.aivId_
        if self.aivId_ < rem:
            start += self.aivId_
            num += 1
        else:
            start += rem
        return start, start + num

    def GatherAndWriteCntInfo(self) -> None:
        startServerId, endServerId = self.serverSplit()
        if endServerId == startServerId:
            return
        self.expertToServerCntTensor_ = i32(self.expertToServerCntGM_, self.tableLen_).tolist()
        for dstServerId in range(startServerId, endServerId):
            dstServerCnt = 0
            for tokenIdx in range(self.axisBS_):
                dstServerCnt += self.expertToServerCntTensor_[
                    self.serverNum * tokenIdx + dstServerId
                ]
            self.expertToServerIdxTensor_[dstServerId] = dstServerCnt
            writeCntLt = torch.zeros(EXP_TOKEN_COUNT_FLAG_CNT, dtype=torch.int32)
            writeCntLt[0] = dstServerCnt
            destOffset = dstServerId * self.SERVER_SIZE_ON_WIN
            i32(self.windowOutGM_ + destOffset, EXP_TOKEN_COUNT_FLAG_CNT)[:] = writeCntLt

    def ConstructDataAndFlagBatchWriteInfo(self) -> None:
        startServerId, endServerId = self.serverSplit()
        curServerId = self.rankId_ // SERVER_RANK_SIZE
        for dstserverInd in range(startServerId, endServerId):
            dstRankId = self.rankId_ % SERVER_RANK_SIZE + dstserverInd * SERVER_RANK_SIZE
            half = self.halfWinSize_ * self.bufferId_
            dstDataRdmaAddr = (
                self.hccl_.GetWindowsInAddr(dstRankId)
                + half
                + curServerId * self.SERVER_SIZE_ON_WIN
            )
            srcDataRdmaAddr = (
                self.hccl_.GetWindowsOutAddr(self.rankId_) + half
                + dstserverInd * self.SERVER_SIZE_ON_WIN
            )  # fmt: skip
            validTokenCount = self.expertToServerIdxTensor_[dstserverInd]
            validDataLength = TOKEN_COUNT_SIZE + validTokenCount * self.tokenStructLen_
            batchWriteU64Tensor_ = np.zeros(PER_MSG_RDMA_SEND_TIME * B64_PER_BLOCK, dtype=np.uint64)
            batchWriteU32Tensor_ = batchWriteU64Tensor_.view(np.uint32)
            batchWriteU64Tensor_[0] = int(srcDataRdmaAddr)
            batchWriteU64Tensor_[1] = int(dstDataRdmaAddr)
            batchWriteU64Tensor_[2] = validDataLength
            batchWriteU32Tensor_[6] = HCCL_DATA_TYPE_INT8
            batchWriteU32Tensor_[7] = dstRankId
            dstFlagRdmaAddr = (
                self.hccl_.GetWindowsInAddr(dstRankId) + half + self.WIN_SIZE
                + curServerId * STATE_OFFSET
            )  # fmt: skip
            batchWriteU64Tensor_[4] = int(self.sendStatusGM_)
            batchWriteU64Tensor_[5] = int(dstFlagRdmaAddr)
            batchWriteU64Tensor_[6] = TOKEN_COUNT_SIZE
            batchWriteU32Tensor_[14] = HCCL_DATA_TYPE_INT8
            batchWriteU32Tensor_[15] = dstRankId
            at = self.dataBatchWriteInfo_ + dstserverInd * batchWriteU64Tensor_.nbytes
            u8(at, batchWriteU64Tensor_.nbytes)[:] = torch.from_numpy(
                batchWriteU64Tensor_.view(np.uint8)
            )

    def DispatchBetweenServer(self) -> None:
        self.ConstructDataAndFlagBatchWriteInfo()
        hp.SyncAll[True]()
        if self.aivId_ == 0:
            self.hccl_.BatchWrite[True](
                self.dataBatchWriteInfo_, self.serverNum * PER_MSG_RDMA_SEND_TIME
            )
            self.bufferChosenGlobal_[0] = self.bufferId_ ^ 1
        if self.aivId_ == self.aivNum_ - 1:
            self.CreateOuterReduceInfo()

    def WaitWindow(self) -> None:
        if self.aivId_ >= self.serverNum or self.aivId_ == self.rankId_ // SERVER_RANK_SIZE:
            return
        status = i32(self.readStatusGM_ + self.aivId_ * STATE_OFFSET, FLAG_U32_CNT)
        while int(status[0]) != FLAG_VALUE:
            pass

    # ------------------------------------------------------------------ inside the server
    def serverTokens(self, serverId: int) -> hp.GmAddr:
        """The rows from ``serverId``: the own Out window for the own server (never sent),
        else the In window."""
        base = (
            self.windowOutGM_ if serverId == self.rankId_ // SERVER_RANK_SIZE else self.windowInGM_
        )
        return base + serverId * self.SERVER_SIZE_ON_WIN

    def Win2Ipc(self) -> None:
        coresPerServer = (self.aivNum_ - self.serverNum) // self.serverNum
        if self.aivId_ >= coresPerServer * self.serverNum:
            return
        formServerId = self.aivId_ // coresPerServer
        tokenCntGlobalAddr = self.serverTokens(formServerId)
        tokenCnt = int(i32(tokenCntGlobalAddr, EXP_TOKEN_COUNT_FLAG_CNT)[0])
        localAivId = self.aivId_ % coresPerServer
        tokenCntPerAiv, tokenCntRemain = divmod(tokenCnt, coresPerServer)
        tokenCntPreRemain = min(localAivId, tokenCntRemain)
        tokenCntCurAiv = tokenCntPerAiv + (1 if localAivId < tokenCntRemain else 0)
        L, E, W = self.tokenStructLen_, self.localMoeExpertNum_, self.worldSize_
        tokenCntInUB = self.tokenUbSize_ // L
        batchCnt = -(-tokenCntCurAiv // tokenCntInUB)
        localRank = self.rankId_ % SERVER_RANK_SIZE
        for batchIdx in range(batchCnt):
            tokenCntInBatch = tokenCntInUB
            if batchIdx == batchCnt - 1:
                tokenCntInBatch = tokenCntCurAiv - (batchCnt - 1) * tokenCntInUB
            tokenStructIdx = (
                localAivId * tokenCntPerAiv + tokenCntPreRemain + batchIdx * tokenCntInUB
            )
            src = tokenCntGlobalAddr + TOKEN_COUNT_SIZE + tokenStructIdx * L
            localUB = u8(src, tokenCntInBatch * L).clone().view(tokenCntInBatch, L)
            for tokenIdx in range(tokenCntInBatch):
                words = localUB[tokenIdx].view(torch.int32)
                expInfo = words[self.expOffsetInStruct_ // 4 :].tolist()
                cntInfo = words[self.cntOffsetInStruct_ // 4 :].tolist()
                for expIdx in range(self.axisK_):
                    targetexpertId = expInfo[expIdx]
                    targetRankId = targetexpertId // E
                    if targetRankId // SERVER_RANK_SIZE != self.rankId_ // SERVER_RANK_SIZE:
                        continue
                    tokenPosInBlock = cntInfo[expIdx]
                    targetOffset = (
                        (targetexpertId % E) * W * self.RANK_SIZE_ON_IPC
                        + formServerId * SERVER_RANK_SIZE * self.RANK_SIZE_ON_IPC
                        + localRank * self.RANK_SIZE_ON_IPC
                        + tokenPosInBlock * L
                    )  # fmt: skip
                    share = self.shareAddrs[targetRankId % SERVER_RANK_SIZE]
                    u8(share + IPC_DATA_OFFSET + targetOffset, L)[:] = localUB[tokenIdx]
                    setTokenCntOffset = (
                        (targetexpertId % E) * W + formServerId * SERVER_RANK_SIZE + localRank
                    )
                    at = (
                        share
                        + IPC_TOKEN_CNT_OFFSET
                        + EXP_TOKEN_COUNT_FLAG_CNT * setTokenCntOffset * 4
                    )
                    self.SetTokenCnt(at)

    def SetTokenCnt(self, globalSet: hp.GmAddr) -> None:
        """SetAtomicAdd: one block of 8 ints, 1 in the first."""
        localSet = torch.zeros(EXP_TOKEN_COUNT_FLAG_CNT, dtype=torch.int32)
        localSet[0] = 1
        i32(globalSet, EXP_TOKEN_COUNT_FLAG_CNT).add_(localSet.to(hp.device()))

    def SetIpcFlag(self, flagVal: int) -> None:
        if self.aivId_ >= SERVER_RANK_SIZE:
            return
        localRankId = self.rankId_ % SERVER_RANK_SIZE
        at = self.shareAddrs[self.aivId_] + IPC_FLAG_OFFSET + localRankId * B64_PER_BLOCK * 8
        localSet = torch.zeros(B64_PER_BLOCK, dtype=torch.int64)
        localSet[0] = self.magicVal_ * 2 + flagVal  # MergeMagicWithValue
        u64(at, B64_PER_BLOCK)[:] = localSet

    def WaitIpcFlag(self, flagVal: int) -> None:
        waitVal = self.magicVal_ * 2 + flagVal
        if self.aivId_ >= SERVER_RANK_SIZE:
            return
        localRankId = self.rankId_ % SERVER_RANK_SIZE
        at = self.shareAddrs[localRankId] + IPC_FLAG_OFFSET + self.aivId_ * B64_PER_BLOCK * 8
        flagIpcGt = u64(at, B64_PER_BLOCK)
        while int(flagIpcGt[0]) < waitVal:
            pass

    def Ipc2Out(self) -> None:
        E, W = self.localMoeExpertNum_, self.worldSize_
        coresPerExp = self.aivNum_ // E
        if self.aivId_ >= coresPerExp * E:
            return
        share = self.shareAddrs[self.rankId_ % SERVER_RANK_SIZE]
        curExpIdx, localAivId = divmod(self.aivId_, coresPerExp)
        srCntPerExp = self.serverNum * SERVER_RANK_SIZE
        srCntPerCore, srCntRemain = divmod(srCntPerExp, coresPerExp)
        srCntPreRemain = min(localAivId, srCntRemain)
        srCntCurCore = srCntPerCore + (1 if localAivId < srCntRemain else 0)
        tempSize = self.serverNum * SERVER_RANK_SIZE * E
        blocks = i32(share + IPC_TOKEN_CNT_OFFSET, tempSize * EXP_TOKEN_COUNT_FLAG_CNT).tolist()
        tokenCntUB = list(np.cumsum(blocks[::EXP_TOKEN_COUNT_FLAG_CNT]))
        tokenCntByExpUB = []
        for i in range(E):
            if self.expertTokenNumsType_ == 1:
                preValue = 0 if i == 0 else tokenCntUB[i * W - 1]
                tokenCntByExpUB.append(tokenCntUB[i * W + W - 1] - preValue)
            else:
                tokenCntByExpUB.append(tokenCntUB[i * W + W - 1])
        srPreCnt = curExpIdx * srCntPerExp + localAivId * srCntPerCore + srCntPreRemain
        L, H = self.tokenStructLen_, self.axisH_
        tokenCntInUB = (TBUF_SIZE - TBUF_TEMP_OFFSET) // L
        sumTokenCnt = 0 if srPreCnt == 0 else int(tokenCntUB[srPreCnt - 1])
        myExpert = curExpIdx + self.rankId_ * E
        for idx in range(srCntCurCore):
            srIdx = srPreCnt + idx
            curSrTokenCnt = int(tokenCntUB[srIdx] - (0 if srIdx == 0 else tokenCntUB[srIdx - 1]))
            if curSrTokenCnt == 0:
                continue
            batchCnt = -(-curSrTokenCnt // tokenCntInUB)
            for batchIdx in range(batchCnt):
                tokenCntInBatch = tokenCntInUB
                if batchIdx == batchCnt - 1:
                    tokenCntInBatch = curSrTokenCnt - (batchCnt - 1) * tokenCntInUB
                srcIpcOffset = srIdx * self.RANK_SIZE_ON_IPC + batchIdx * tokenCntInUB * L
                localUB = u8(share + IPC_DATA_OFFSET + srcIpcOffset, tokenCntInBatch * L).clone()
                localUB = localUB.view(tokenCntInBatch, L)
                first = sumTokenCnt + batchIdx * tokenCntInUB
                rows = localUB[:, : self.tokenLenInStruct_].contiguous().view(torch.float16)
                f16(self.expandXOutGM_ + first * H * SIZEOF_HALF, tokenCntInBatch * H)[:] = (
                    rows.reshape(-1)
                )
                weightLt = torch.zeros(tokenCntInBatch, dtype=torch.float32)
                for tokenIdx in range(tokenCntInBatch):
                    words = localUB[tokenIdx].view(torch.int32)
                    floats = localUB[tokenIdx].view(torch.float32)
                    for expIdx in range(self.axisK_):
                        expOffset = self.expOffsetInStruct_ // 4 + expIdx
                        if myExpert == int(words[expOffset]):
                            weightLt[tokenIdx] = floats[expOffset + self.alignK_]
                            break
                f32(self.weightsOutGM_ + first * 4, tokenCntInBatch)[:] = weightLt
            sumTokenCnt += curSrTokenCnt
        if self.aivId_ == 0:
            counts = torch.tensor([int(c) for c in tokenCntUB[:tempSize]], dtype=torch.int32)
            i32(self.epRecvCountsGM_, tempSize)[:] = counts
            nums = hp.gm_tensor(self.expertTokenNumsOutGM_, torch.int64, E)
            nums[:] = torch.tensor([int(c) for c in tokenCntByExpUB], dtype=torch.int64)

    # ------------------------------------------------------------------ the combine's info
    def CreateInnerReduceInfo(self) -> None:
        curServerId = self.aivNum_ - self.aivId_ - 1
        NS, E, K = self.moeExpertNumInServer_, self.localMoeExpertNum_, self.axisK_
        currServerExpBegin = self.rankId_ // SERVER_RANK_SIZE * NS
        currServerExpEnd = currServerExpBegin + NS
        tokenCntGlobalAddr = self.serverTokens(curServerId)
        realBS = int(i32(tokenCntGlobalAddr, 1)[0])
        innerCntAt = (
            self.epRecvCountsGM_ + self.combineInnerCntOffset + self.globalBs_ * curServerId * 2
        )
        innerCnt = hp.gm_tensor
        if realBS == 0:
            copyTokenNum = min(self.aivNum_, self.globalBs_)
            innerCnt(innerCntAt, torch.int16, copyTokenNum)[:] = 0
            return
        localUB = []
        for tokenIdx in range(realBS):
            src = TOKEN_COUNT_SIZE + tokenIdx * self.tokenStructLen_ + self.expOffsetInStruct_
            localUB.append(i32(tokenCntGlobalAddr + src, self.alignK_).tolist())
        invalidInfoData = self.globalBs_
        combineReduceInfo = [invalidInfoData] * (NS * realBS)
        expCntMap = [0] * NS
        tokenOffset = [0] * (realBS * K)
        innerCntLt = [0] * (realBS + self.aivNum_)
        innerOffsetLt = [0] * (realBS * K)
        for tokenIdx in range(realBS):
            for expIdx in range(K):
                expId = localUB[tokenIdx][expIdx]
                if currServerExpBegin <= expId < currServerExpEnd:
                    expIdInServer = expId % NS
                    offsetInExp = expCntMap[expIdInServer]
                    expCntMap[expIdInServer] += 1
                    combineReduceInfo[expIdInServer * realBS + offsetInExp] = tokenIdx
                    tokenOffset[tokenIdx * K + expIdx] = offsetInExp
        for expIdx in range(NS):
            if expIdx % E != 0:
                expCntMap[expIdx] += expCntMap[expIdx - 1]
        tokenOccurNum = expOccurNum = 0
        for expBlockId in range(NS):
            validCnt = (
                expCntMap[expBlockId] if expBlockId % E == 0
                else expCntMap[expBlockId] - expCntMap[expBlockId - 1]
            )  # fmt: skip
            for tokenIdx in range(validCnt):
                tokenId = combineReduceInfo[expBlockId * realBS + tokenIdx]
                if tokenId == invalidInfoData:
                    continue
                for expIdx in range(K):
                    expId = localUB[tokenId][expIdx]
                    if currServerExpBegin <= expId < currServerExpEnd:
                        expIdInServer = expId % NS
                        rankIdInServer = expIdInServer // E
                        pos = expIdInServer * realBS + tokenOffset[tokenId * K + expIdx]
                        combineReduceInfo[pos] = invalidInfoData
                        innerCntLt[tokenOccurNum] += 1
                        innerOffsetLt[expOccurNum] = (
                            0 if expIdInServer % E == 0 else expCntMap[expIdInServer - 1]
                        )
                        innerOffsetLt[expOccurNum] += rankIdInServer * self.globalBs_ * K
                        innerOffsetLt[expOccurNum] += tokenOffset[tokenId * K + expIdx]
                        expOccurNum += 1
                tokenOccurNum += 1
        for tokenIdx in range(1, realBS):
            innerCntLt[tokenIdx] += innerCntLt[tokenIdx - 1]
        copyTokenNum = min(realBS + self.aivNum_, self.globalBs_)
        innerCnt(innerCntAt, torch.int16, copyTokenNum)[:] = torch.tensor(
            innerCntLt[:copyTokenNum], dtype=torch.int16
        )
        offsetAt = (
            self.epRecvCountsGM_ + self.combineInnerCntIndexOffset
            + self.globalBs_ * K * curServerId * 4
        )  # fmt: skip
        i32(offsetAt, realBS * K)[:] = torch.tensor(innerOffsetLt, dtype=torch.int32)

    def CreateOuterReduceInfo(self) -> None:
        N, S, NS, BS, K = (self.moeExpertNum_, self.serverNum, self.moeExpertNumInServer_,
                           self.axisBS_, self.axisK_)  # fmt: skip
        expertIds = i32(self.expertIdsGM_, BS * K).tolist()
        miniExpIds = [N] * BS
        miniServerExpIds = [N] * (BS * S)
        combineCnt_ = [0] * N
        combineOffset_ = [0] * N
        combineCntIdx_ = [0] * BS
        combineOffsetIdx_ = [0] * (BS * S)
        outerCntLt = [0] * BS
        outerOffsetLt = [0] * (BS * K)
        for expertIndex in range(self.expertIdsCnt_):
            tokenIdx = expertIndex // K
            expId = expertIds[expertIndex]
            expServerId = expId // NS
            miniExpId = miniExpIds[tokenIdx]
            miniExpIds[tokenIdx] = min(expId, miniExpId)
            if miniServerExpIds[tokenIdx * S + expServerId] > expId:
                miniServerExpIds[tokenIdx * S + expServerId] = expId
            if expertIndex % K != K - 1:
                continue
            combineCntIdx_[tokenIdx] = combineCnt_[miniExpId]
            combineCnt_[miniExpId] += 1
            for serverIdx in range(S):
                miniServerExpId = miniServerExpIds[tokenIdx * S + serverIdx]
                if miniServerExpId != N:
                    combineOffsetIdx_[tokenIdx * S + serverIdx] = combineOffset_[miniServerExpId]
                    combineOffset_[miniServerExpId] += 1
        for expertIndex in range(1, N):
            combineCnt_[expertIndex] += combineCnt_[expertIndex - 1]
            combineOffset_[expertIndex] += combineOffset_[expertIndex - 1]
        outerOffsetIdx = 0
        for tokenIdx in range(BS):
            for serverIdx in range(S):
                miniServerExpId = miniServerExpIds[tokenIdx * S + serverIdx]
                if miniServerExpId == N:
                    continue
                outerCntLt[tokenIdx] += 1
                preServerCnt = 0 if serverIdx == 0 else combineOffset_[serverIdx * NS - 1]
                serverBaseCnt = serverIdx * BS
                preTokenCnt = 0 if miniServerExpId == 0 else combineOffset_[miniServerExpId - 1]
                outerOffsetLt[outerOffsetIdx] = (
                    preTokenCnt - preServerCnt + combineOffsetIdx_[tokenIdx * S + serverIdx]
                    + serverBaseCnt
                )  # fmt: skip
                outerOffsetIdx += 1
        for tokenIdx in range(1, BS):
            outerCntLt[tokenIdx] += outerCntLt[tokenIdx - 1]
        i32(self.epRecvCountsGM_ + self.combineOuterCntOffset, BS)[:] = torch.tensor(outerCntLt)
        i32(self.epRecvCountsGM_ + self.combineOuterCntIndexOffset, BS * K)[:] = torch.tensor(
            outerOffsetLt
        )

    # ------------------------------------------------------------------ the end
    def CleanUp(self) -> None:
        cleanBuffSize = self.worldSize_ * self.localMoeExpertNum_ * TOKEN_COUNT_SIZE
        cleanBuffSize = max(cleanBuffSize, STATE_OFFSET * self.serverNum)
        i32(self.readStatusGM_, cleanBuffSize // 4)[:] = 0
        share = self.shareAddrs[self.rankId_ % SERVER_RANK_SIZE]
        i32(share + IPC_TOKEN_CNT_OFFSET, cleanBuffSize // 4)[:] = 0

    def Process(self) -> None:
        if hp.g_coreType != AIV:
            return
        self.ReorderTokens()
        hp.SyncAll[True]()
        self.GatherAndWriteCntInfo()
        self.DispatchBetweenServer()
        self.WaitWindow()
        hp.SyncAll[True]()
        if self.aivId_ < self.aivNum_ - self.serverNum:
            self.Win2Ipc()
        else:
            self.CreateInnerReduceInfo()
        hp.SyncAll[True]()
        self.SetIpcFlag(IPC_FLAG_STEP_1)
        self.WaitIpcFlag(IPC_FLAG_STEP_1)
        hp.SyncAll[True]()
        self.Ipc2Out()
        hp.SyncAll[True]()
        if self.aivId_ == 0:
            self.CleanUp()
        self.SetIpcFlag(IPC_FLAG_STEP_2)
        self.WaitIpcFlag(IPC_FLAG_STEP_2)
        hp.SyncAll[True]()
        self.hccl_.Finalize()


def moe_distribute_dispatch_v2(x, expertIds, scales, xActiveMask, expertScales, elasticInfo,
                               performanceInfo, expandXOut, dynamicScalesOut, assistInfoOut,
                               expertTokenNumsOut, epSendCountsOut, tpSendCountsOut,
                               expandScalesOut, workspaceGM, tilingGM,
                               CommMode=TILINGKEY_TPL_AICPU):  # fmt: skip
    """The A2 entry (``ArchTag`` TILINGKEY_TPL_A2): the MTE key runs the fullmesh kernel
    (samples/mc2_moe_distribute_a2.py), the AICPU key the layered one of the context's data
    plane."""
    if CommMode == TILINGKEY_TPL_MTE:
        op = MoeDistributeDispatchA2()
        op.Init(x, expertIds, expandXOut, assistInfoOut, expertTokenNumsOut, epSendCountsOut,
                workspaceGM, tilingGM)  # fmt: skip
        op.Process()
        return
    contextGM0 = hp.GetHcclContext(0)
    if GetDataplaneMode(contextGM0) != "AICPU":
        raise NotImplementedError("the AIV data plane (HcclAiRMA) is not ported")
    op = MoeDistributeDispatchA2LayeredAicpu()
    op.Init(x, expertIds, expertScales, expandXOut, expertTokenNumsOut, epSendCountsOut,
            expandScalesOut, workspaceGM, tilingGM, contextGM0)  # fmt: skip
    op.Process()


class MoeDistributeCombineA2LayeredAicpu:
    """``MoeDistributeCombineA2LayeredAicpu<half, int32_t>``."""

    def Init(self, expandX, expertIds, expandIdx, sendCount, scales, XOut, workspaceGM,
             tilingData, contextGM) -> None:  # fmt: skip
        self.expandXGM_, self.expertIdsGM_, self.expandIdxGM_ = expandX, expertIds, expandIdx
        self.sendCountGM_, self.scalesGM_, self.XOutGM_ = sendCount, scales, XOut
        info = tilingData.moeDistributeCombineInfo
        self.rankId_, self.axisBS_, self.axisH_, self.axisK_ = (
            info.epRankId,
            info.bs,
            info.h,
            info.k,
        )
        self.aivNum_, self.moeExpertNum_, self.worldSize_ = (
            info.aivNum,
            info.moeExpertNum,
            info.epWorldSize,
        )
        self.globalBs = info.globalBs
        self.maxLocalBs = min(self.globalBs, 256)
        self.winContext_ = contextGM
        self.hccl_ = Hccl()
        self.hccl_.InitV2(contextGM, tilingData)
        self.hccl_.SetCcTilingV2(offsetof(MoeDistributeCombineA2TilingData, "mc2CcTiling"))
        self.halfWinSize_ = RDMA_DATA_SIZE // 2
        self.IPC_DATA_SIZE = (self.winContext_.winSize - RDMA_DATA_SIZE - IPC_DATA_OFFSET) & U32
        self.dataSpaceSize_ = self.halfWinSize_ - STATUS_SIZE_LAYERED
        windowInGM = self.hccl_.GetWindowsInAddr(self.rankId_)
        chosenAt = windowInGM + self.dataSpaceSize_ + self.worldSize_ * STATE_OFFSET
        self.bufferIdGlobal_ = i32(chosenAt, 1)
        self.bufferId_ = int(self.bufferIdGlobal_[0])
        self.windowInGM_ = windowInGM + self.halfWinSize_ * self.bufferId_
        self.windowOutGM_ = (
            self.hccl_.GetWindowsOutAddr(self.rankId_) + self.halfWinSize_ * self.bufferId_
        )
        self.coreIdx_ = hp.GetBlockIdx()
        self.serverNum = self.worldSize_ // SERVER_RANK_SIZE
        self.readStateGM_ = self.windowOutGM_ + self.dataSpaceSize_
        self.workspaceGM_ = (
            self.windowOutGM_ + self.dataSpaceSize_ + COMBINE_BATCH_WRITE_ITEM_OFFSET
        )
        self.localMoeExpertNum_ = self.moeExpertNum_ // self.worldSize_
        self.rankSizeOnWin_ = self.dataSpaceSize_ // self.worldSize_ // UB_32B_ALIGN * UB_32B_ALIGN
        self.statusSpaceGm_ = self.windowInGM_ + self.dataSpaceSize_
        # each core's own toggle: the value this launch sends and waits for
        selfStatus = i32(
            self.statusSpaceGm_ + SELF_STATE_OFFSET + self.coreIdx_ * UB_32B_ALIGN * 4, 1
        )
        state = int(selfStatus[0])
        self.sumTarget_ = self.stateValue_ = 1 if state == 0 else 0
        selfStatus[0] = self.stateValue_
        self.SplitCoreCal()
        if self.coreIdx_ == 0:
            i32(self.readStateGM_, 1)[0] = self.stateValue_
        # the dispatch's reduce information behind the counts of epRecvCounts (int32 units)
        W, E, S, K = self.worldSize_, self.localMoeExpertNum_, self.serverNum, self.axisK_
        send_counts_inner_offset = W * E
        offset_inner_offset = send_counts_inner_offset + self.globalBs * S // 2
        send_counts_outer_offset = offset_inner_offset + self.globalBs * K * S
        offset_outer_offset = send_counts_outer_offset + self.axisBS_
        share_offset = offset_outer_offset + self.axisBS_ * S
        self.countInnerGM_ = sendCount + send_counts_inner_offset * 4
        self.offsetInnerGM_ = sendCount + offset_inner_offset * 4
        self.countOuterGM_ = sendCount + send_counts_outer_offset * 4
        self.offsetOuterGM_ = sendCount + offset_outer_offset * 4
        i32(sendCount + share_offset * 4, RoundUp(SERVER_RANK_SIZE * 2, B32_PER_BLOCK)).clone()
        server0 = self.rankId_ // SERVER_RANK_SIZE * SERVER_RANK_SIZE
        self.shareAddreRank = [
            self.hccl_.GetWindowsInAddr(server0 + i) + RDMA_DATA_SIZE
            for i in range(SERVER_RANK_SIZE)
        ]

    def SplitCoreCal(self) -> None:
        self.startRankId_, self.endRankId_ = split_to_core(
            self.worldSize_, self.aivNum_, self.coreIdx_
        )

    def ipcRow(self) -> int:
        """Halves of one IPC row: the row, then a 32-byte block with its scale first."""
        return self.axisH_ + 16

    def AlltoAllDispatch(self) -> None:
        W, H = self.worldSize_, self.axisH_
        self.ipcSliceSize = self.IPC_DATA_SIZE // W
        self.ipcSliceNodeSize = self.ipcSliceSize * SERVER_RANK_SIZE
        sendCountLocal = i32(self.sendCountGM_, RoundUp(self.moeExpertNum_, B32_PER_BLOCK)).tolist()
        for dstRankId in range(self.startRankId_, self.endRankId_):
            # the rank of this server with dstRankId's index forwards the rows
            targetRankShareAddr = self.shareAddreRank[dstRankId % SERVER_RANK_SIZE]
            targetRankAddr = targetRankShareAddr + (
                dstRankId // SERVER_RANK_SIZE * self.ipcSliceNodeSize
                + self.rankId_ % SERVER_RANK_SIZE * self.ipcSliceSize + IPC_DATA_OFFSET
            )  # fmt: skip
            rankTokenNum = 0
            for expertId in range(self.localMoeExpertNum_):
                preCount = 0
                if expertId != 0 or dstRankId != 0:
                    preCount = sendCountLocal[expertId * W + dstRankId - 1]
                tokenNum = sendCountLocal[expertId * W + dstRankId] - preCount
                startTokenAddr = preCount * H
                scales = f32(self.scalesGM_ + preCount * 4, (tokenNum + 31) // 32 * 32).tolist()
                for tokenId in range(tokenNum):
                    InUb = torch.zeros(self.ipcRow(), dtype=torch.float16)
                    InUb[H : H + 2] = torch.tensor([scales[tokenId]]).view(torch.float16)
                    InUb[:H] = f16(self.expandXGM_ + startTokenAddr * SIZEOF_HALF, H).cpu()
                    dst = targetRankAddr + rankTokenNum * self.ipcRow() * SIZEOF_HALF
                    f16(dst, self.ipcRow())[:] = InUb
                    startTokenAddr += H
                    rankTokenNum += 1
            InUb = torch.zeros(B64_PER_BLOCK, dtype=torch.int64)
            InUb[0] = COMBINE_IPC_FLAG
            flagOffset = (
                self.rankId_ % SERVER_RANK_SIZE + dstRankId // SERVER_RANK_SIZE * SERVER_RANK_SIZE
            )
            u64(targetRankShareAddr + flagOffset * 4 * 8, B64_PER_BLOCK)[:] = InUb
        hp.SyncAll[True]()

    def SumToWindow(self) -> None:
        H, K, c = self.axisH_, self.axisK_, self.coreIdx_
        self.countReL = self.axisBS_
        if c < self.serverNum:
            share = self.shareAddreRank[self.rankId_ % SERVER_RANK_SIZE]
            for i in range(SERVER_RANK_SIZE):
                flag = u64(share + (c * SERVER_RANK_SIZE + i) * 4 * 8, B64_PER_BLOCK)
                while int(flag[0]) != COMBINE_IPC_FLAG:
                    pass
            for i in range(SERVER_RANK_SIZE):
                u64(share + (c * SERVER_RANK_SIZE + i) * 4 * 8, B64_PER_BLOCK)[:] = 0
            offsetReduceLocal = i32(self.offsetInnerGM_ + self.globalBs * K * c * 4,
                                    RoundUp(self.maxLocalBs * K, 8)).tolist()  # fmt: skip
            countReduceLocal = hp.gm_tensor(self.countInnerGM_ + self.globalBs * c * 2, torch.int16,
                                            RoundUp(self.maxLocalBs, 16)).tolist()  # fmt: skip
            copyAddr = share + IPC_DATA_OFFSET + c * self.ipcSliceNodeSize
            localOutWindow = (
                self.hccl_.GetWindowsOutAddr(self.rankId_) + self.halfWinSize_ * self.bufferId_
                + c * self.rankSizeOnWin_ * SERVER_RANK_SIZE
            )  # fmt: skip
            offsetPre = 0
            offsetIndex = 0
            for i in range(self.maxLocalBs):
                offsetCur = countReduceLocal[i]
                sumFloatLocal = torch.zeros(H, dtype=torch.float32)
                if i != 0:
                    offsetPre = countReduceLocal[i - 1]
                copyNum = offsetCur - offsetPre
                if copyNum <= 0:
                    self.countReL = i
                    break
                for _ in range(copyNum):
                    off = offsetReduceLocal[offsetIndex]
                    offsetOnIpc = (
                        off // (self.globalBs * K) * self.ipcSliceSize
                        + off % (self.globalBs * K) * self.ipcRow() * SIZEOF_HALF
                    ) // SIZEOF_HALF
                    tmpUb = f16(copyAddr + offsetOnIpc * SIZEOF_HALF, self.ipcRow()).cpu()
                    scaleVal = float(tmpUb[H : H + 2].view(torch.float32)[0])
                    sumFloatLocal += tmpUb[:H].float() * scaleVal  # Cast, Muls, Add
                    offsetIndex += 1
                f16(localOutWindow + i * H * SIZEOF_HALF, H)[:] = sumFloatLocal.half()  # CAST_RINT
        hp.SyncAll[True]()

    def AlltoAllServerDispatch(self) -> None:
        c, myServer, half = (
            self.coreIdx_,
            self.rankId_ // SERVER_RANK_SIZE,
            self.halfWinSize_ * self.bufferId_,
        )
        slot = self.rankSizeOnWin_ * SERVER_RANK_SIZE
        if c < self.serverNum:
            tragRankId = self.rankId_ % SERVER_RANK_SIZE + c * SERVER_RANK_SIZE
            item = np.zeros(1, dtype=BatchWriteItem)
            item[0] = (
                int(self.hccl_.GetWindowsOutAddr(self.rankId_) + half + c * slot),
                int(self.hccl_.GetWindowsInAddr(tragRankId) + half + myServer * slot),
                0 if c == myServer else self.countReL * self.axisH_,
                HCCL_DATA_TYPE_FP16,
                tragRankId,
            )
            u8(self.workspaceGM_ + c * BW_ITEM_SIZE, BW_ITEM_SIZE)[:] = torch.from_numpy(
                item.view(np.uint8)
            )
        hp.SyncAll[True]()
        if c == 0:
            self.hccl_.BatchWrite[True](self.workspaceGM_, self.serverNum)
            self.bufferIdGlobal_[0] = self.bufferId_ ^ 1
        if c == myServer:
            src = self.hccl_.GetWindowsOutAddr(self.rankId_) + half + myServer * slot
            dst = self.hccl_.GetWindowsInAddr(self.rankId_) + half + myServer * slot
            for tokenId in range(self.countReL):
                row = f16(src + tokenId * self.axisH_ * SIZEOF_HALF, self.axisH_).clone()
                f16(dst + tokenId * self.axisH_ * SIZEOF_HALF, self.axisH_)[:] = row

    def SetStatus(self) -> None:
        if self.coreIdx_ != 0:
            hp.SyncAll[True]()
            return
        selfServerID = self.rankId_ // SERVER_RANK_SIZE
        items = np.zeros(self.serverNum, dtype=BatchWriteItem)
        for serverID in range(self.serverNum):
            targetRank = self.rankId_ % SERVER_RANK_SIZE + serverID * SERVER_RANK_SIZE
            dst = (
                self.hccl_.GetWindowsInAddr(targetRank) + self.halfWinSize_ * self.bufferId_
                + self.dataSpaceSize_ + selfServerID * STATE_OFFSET
            )  # fmt: skip
            items[serverID] = (
                int(self.readStateGM_),
                int(dst),
                8,
                HCCL_DATA_TYPE_INT32,
                targetRank,
            )
        at = self.workspaceGM_ + self.serverNum * BW_ITEM_SIZE
        u8(at, items.nbytes)[:] = torch.from_numpy(items.view(np.uint8))
        localState = self.windowInGM_ + self.dataSpaceSize_ + selfServerID * STATE_OFFSET
        i32(localState, 1)[0] = self.stateValue_
        self.hccl_.BatchWrite[True](at, self.serverNum)
        hp.SyncAll[True]()

    def WaitDispatch(self) -> None:
        if self.coreIdx_ < self.serverNum:
            status = i32(self.statusSpaceGm_ + self.coreIdx_ * STATE_OFFSET, B32_PER_BLOCK)
            while int(status[0]) != self.sumTarget_:
                pass
        hp.SyncAll[True]()

    def Preload(self) -> None:
        reduceCore = 8
        if self.coreIdx_ >= reduceCore:
            return
        self.startBs, self.endBs = split_to_core(self.axisBS_, reduceCore, self.coreIdx_)
        self.localInWindow_ = (
            self.hccl_.GetWindowsInAddr(self.rankId_) + self.halfWinSize_ * self.bufferId_
        )
        S = self.serverNum
        self.offsetReduceLocal_ = i32(self.offsetOuterGM_, RoundUp(self.axisBS_ * S, 8)).tolist()
        self.countReduceLocal_ = i32(self.countOuterGM_, RoundUp(self.axisBS_, 8)).tolist()
        self.offsetIndex = 0
        if self.startBs != 0:
            self.offsetIndex = self.countReduceLocal_[self.startBs - 1]

    def SumToServer(self) -> None:
        reduceCore, H = 8, self.axisH_
        if self.coreIdx_ >= reduceCore:
            hp.SyncAll[True]()
            return
        for i in range(self.startBs, self.endBs):
            offsetCur = self.countReduceLocal_[i]
            offsetPre = self.countReduceLocal_[i - 1] if i != 0 else 0
            copyNum = offsetCur - offsetPre
            if not copyNum:
                break
            sumFloatLocal = torch.zeros(H, dtype=torch.float32)
            for _ in range(copyNum):
                off = self.offsetReduceLocal_[self.offsetIndex]
                offsetOnIpc = (
                    off // self.axisBS_ * self.rankSizeOnWin_ * SERVER_RANK_SIZE
                    + off % self.axisBS_ * H * SIZEOF_HALF
                ) // SIZEOF_HALF
                sumFloatLocal += (
                    f16(self.localInWindow_ + offsetOnIpc * SIZEOF_HALF, H).float().cpu()
                )
                self.offsetIndex += 1
            f16(self.XOutGM_ + i * H * SIZEOF_HALF, H)[:] = sumFloatLocal.half()  # CAST_RINT
        hp.SyncAll[True]()

    def Process(self) -> None:
        if hp.g_coreType != AIV:
            return
        self.AlltoAllDispatch()
        self.SumToWindow()
        self.AlltoAllServerDispatch()
        self.SetStatus()
        self.Preload()
        self.WaitDispatch()
        self.SumToServer()
        self.hccl_.Finalize()


def moe_distribute_combine_v2(expandX, expertIds, assistInfoForCombine, epSendCount, scales,
                              tpSendCounts, xActiveMask, activationScale, weightScale, groupList,
                              expandScales, sharedExpertX, elasticInfo, oriX, constExpertAlpha1,
                              constExpertAlpha2, constExpertV, performanceInfo, XOut, workspaceGM,
                              tilingGM, LayeredMode=TILINGKEY_TPL_AICPU):  # fmt: skip
    """The A2 entry, no quantisation: the MTE key runs the fullmesh kernel
    (samples/mc2_moe_distribute_a2.py), the AICPU key the layered one of the context's data
    plane (``expandScales`` as its scales)."""
    if LayeredMode == TILINGKEY_TPL_MTE:
        op = MoeDistributeCombineA2()
        op.Init(expandX, expertIds, assistInfoForCombine, epSendCount, scales, XOut, workspaceGM,
                tilingGM)  # fmt: skip
        op.Process()
        return
    tilingData = hp.GET_TILING_DATA_WITH_STRUCT(MoeDistributeCombineA2TilingData, tilingGM)
    contextGM0 = hp.GetHcclContext(0)
    if GetDataplaneMode(contextGM0) != "AICPU":
        raise NotImplementedError("the AIV data plane (HcclAiRMA) is not ported")
    op = MoeDistributeCombineA2LayeredAicpu()
    op.Init(expandX, expertIds, assistInfoForCombine, epSendCount, expandScales, XOut, workspaceGM,
            tilingData, contextGM0)  # fmt: skip
    op.Process()


# ---------------------------------------------------------------------- host
def CheckCommAlg(epWorldSize: int, commAlg: str | None) -> bool:
    """``MoeDistributeDispatchA2CheckCommAlg``: whether the layered kernel runs."""
    if epWorldSize <= RANK_NUM_PER_NODE_A2:
        return False
    if not commAlg or commAlg == "0":
        pcie = os.environ.get("HCCL_INTRA_PCIE_ENABLE")
        roce = os.environ.get("HCCL_INTRA_ROCE_ENABLE")
        return pcie == "1" and roce == "0"
    if commAlg in ("fullmesh", "hierarchy"):
        return commAlg == "hierarchy"
    raise ValueError(f'comm_alg {commAlg!r}: expected "fullmesh" or "hierarchy"')


def GetAlgConfig(epWorldSize: int, isLayered: bool) -> str:
    """``MoeDistributeCombineA2GetAlgConfig`` of the dispatch host."""
    if epWorldSize <= RANK_NUM_PER_NODE_A2:
        return "BatchWrite=level0:fullmesh"
    return "BatchWrite=level1:hierarchy" if isLayered else "BatchWrite=level1:fullmesh"


def CheckWinSize(info, buffsize: int) -> bool:
    """The layered formula of ``MoeDistributeDispatchA2CheckWinSize`` (a warning there)."""
    maxBs = info.globalBs // info.epWorldSize
    extraTokenInfoSize = 4 * RoundUp(info.k, 8) * 4
    perTokenSize = info.h * 2 + extraTokenInfoSize
    maxRecvTokenSize = RoundUp(maxBs * perTokenSize, 512)
    serverBuffers = info.epWorldSize // RANK_NUM_PER_NODE_A2 * BUFFER_NUM
    return maxRecvTokenSize * (info.moeExpertNum + serverBuffers) + 8 * MB_SIZE <= buffsize


def dispatch_tiling(rank: int, n: int, commAlg: str | None = "hierarchy"):
    """Host: MoeDistributeDispatchTilingFuncImpl's A2 path; the tiling and its CommMode."""
    isLayered = CheckCommAlg(n, commAlg)
    tiling = MoeDistributeDispatchA2TilingData()
    info = tiling.moeDistributeDispatchInfo
    info.epWorldSize, info.epRankId, info.moeExpertNum = n, rank, LOCAL_EXPERTS * n
    assert info.moeExpertNum <= MAX_MOE_EXPERT_NUMS_A2_HIERARCHY
    assert n <= RANK_NUM_PER_NODE_A2 or n % RANK_NUM_PER_NODE_A2 == 0
    info.globalBs, info.bs, info.k, info.h = BS * n, BS, K, H
    info.expertTokenNumsType = EXPERT_TOKEN_NUMS_TYPE
    info.aivNum, info.totalUbSize = AIV_NUM, UB_SIZE
    assert CheckWinSize(info, BUFFSIZE_MB * MB_SIZE), "HCCL_BUFFSIZE is too small"
    cfg = Mc2CcTilingConfig(WORLD_GROUP, OP_TYPE_BATCH_WRITE, GetAlgConfig(n, isLayered))
    if cfg.GetTiling(tiling.mc2InitTiling) != 0 or cfg.GetTiling(tiling.mc2CcTiling) != 0:
        raise RuntimeError(f"tiling failed: {cfg.last_error}")
    return tiling, TILINGKEY_TPL_AICPU if isLayered else TILINGKEY_TPL_MTE


def combine_tiling(rank: int, n: int, commAlg: str | None = "hierarchy"):
    """Host: the combine's A2 tiling with the same attributes; the tiling and its LayeredMode."""
    isLayered = CheckCommAlg(n, commAlg)
    tiling = MoeDistributeCombineA2TilingData()
    info = tiling.moeDistributeCombineInfo
    info.epWorldSize, info.epRankId, info.moeExpertNum = n, rank, LOCAL_EXPERTS * n
    info.globalBs, info.bs, info.k, info.h = BS * n, BS, K, H
    info.aivNum, info.totalUbSize = AIV_NUM, UB_SIZE
    cfg = Mc2CcTilingConfig(WORLD_GROUP, OP_TYPE_BATCH_WRITE, GetAlgConfig(n, isLayered))
    if cfg.GetTiling(tiling.mc2InitTiling) != 0 or cfg.GetTiling(tiling.mc2CcTiling) != 0:
        raise RuntimeError(f"tiling failed: {cfg.last_error}")
    return tiling, TILINGKEY_TPL_AICPU if isLayered else TILINGKEY_TPL_MTE


# ---------------------------------------------------------------------- data and reference
def inputs(rank: int, launch: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Tokens, routing and weights of ``rank``.

    Token t's row is ``rank + 16 t + (column % 4) + launch``: exact FP16 integers naming
    rank, token and launch, small enough that the combine's weighted partial sums (casts to
    FP16 on the way) stay exact. Its K = 3 experts are rank + launch + (1 + 5t, 2 + 3t, 9 + t)
    mod 16: distinct, on one or both servers, and the pairs per (expert, source) change
    between launches. The weights are quarters.
    """
    n = hp.get_world_size()
    t = np.arange(BS)[:, None]
    x = (rank + 16 * t + np.arange(H) % 4 + launch).astype(np.float16)
    ids = (rank + launch + np.array([1, 2, 9]) + np.array([5, 3, 1]) * t) % (n * LOCAL_EXPERTS)
    k = np.arange(K)[None, :]
    weights = ((1 + (rank + launch + t + 2 * k) % 4) / 4).astype(np.float32)
    return x, ids.astype(np.int32), weights


def dispatch_reference(rank: int, launch: int) -> dict[str, np.ndarray]:
    """numpy: the dispatch's outputs on ``rank`` (one expert per rank)."""
    n = hp.get_world_size()
    rows, scales, counts = [], [], []
    for s in range(n):
        xs, ids, weights = inputs(s, launch)
        tokens, ks = np.nonzero(ids == rank)
        rows += [xs[t] for t in tokens]
        scales += list(weights[tokens, ks])
        counts.append(len(tokens))
    _, ids, _ = inputs(rank, launch)
    servers = [len(set((ids[t] // (SERVER_RANK_SIZE * LOCAL_EXPERTS)).tolist())) for t in range(BS)]
    recv = np.cumsum(counts)
    return {
        "ep_recv_counts": recv,
        "token_nums": recv[-1:],
        "outer_cnt": np.cumsum(servers),
        "expand_scales": np.array(scales),
        "expand_x": np.concatenate(rows).astype(np.float64).reshape(-1),
    }


def experts(expand_x: torch.Tensor, rows: int) -> torch.Tensor:
    """Stand-in for the expert between the kernels: this rank's expert adds its id (the rank)
    to each of its ``rows`` received rows."""
    out = expand_x.clone()
    out[: rows * H] += hp.get_rank()
    return out


def combine_reference(rank: int, launch: int) -> np.ndarray:
    """numpy: each token's K expert answers (x + expert id), weighted, summed."""
    x, ids, weights = inputs(rank, launch)
    answers = x.astype(np.float32)[:, None, :] + ids.astype(np.float32)[:, :, None]
    return (weights[:, :, None] * answers).sum(axis=1).astype(np.float16)


def ep_recv_counts_len(n: int) -> int:
    """int32s of ``epRecvCounts`` as the A2 infershape sizes it with expertScales:
    ``epWorldSize * localExperts + globalBs * 2 * K * servers``."""
    return n * LOCAL_EXPERTS + BS * n * 2 * K * (n // SERVER_RANK_SIZE)


def outer_cnt_at(n: int) -> int:
    """The int32 index of the combine's per-token server counts in ``epRecvCounts``."""
    servers = n // SERVER_RANK_SIZE
    return LOCAL_EXPERTS * n + BS * n * servers // 2 + BS * n * K * servers


def run_launch(rank: int, n: int, launch: int, tilings, keys, workspaces) -> list[str]:
    """One dispatch and one combine; the verdicts of both."""
    x, ids, weights = inputs(rank, launch)
    a = BS * n * min(LOCAL_EXPERTS, K)  # infershape's A: expandX and expandScales rows
    expand_x = zeros(a * H)
    token_nums = torch.zeros(LOCAL_EXPERTS, dtype=torch.int64, device=hp.device())
    recv_counts = torch.zeros(ep_recv_counts_len(n), dtype=torch.int32, device=hp.device())
    expand_scales = torch.zeros(a + EXPAND_SCALES_PAD, dtype=torch.float32, device=hp.device())
    entry = functools.partial(moe_distribute_dispatch_v2, CommMode=keys[0])
    hp.launch(entry, on_device(x), on_device(ids), None, None, on_device(weights), None, None,
              expand_x, None, None, token_nums, recv_counts, None, expand_scales, workspaces[0],
              tilings[0], block_dim=AIV_NUM, kernel_type="aiv")  # fmt: skip
    want = dispatch_reference(rank, launch)
    total = int(want["ep_recv_counts"][-1])
    outer = recv_counts.cpu()[outer_cnt_at(n) :][:BS]
    got = torch.cat([recv_counts[: LOCAL_EXPERTS * n].double().cpu(), token_nums.double().cpu(),
                     outer.double(), expand_scales[:total].double().cpu(),
                     expand_x[: total * H].double().cpu()])  # fmt: skip
    lines = [compare(f"dispatch-{launch}", got, np.concatenate(list(want.values())),
                     f"{total} rows received")]  # fmt: skip
    if not COMBINE:
        return lines
    x_out = zeros(BS, H)
    entry = functools.partial(moe_distribute_combine_v2, LayeredMode=keys[1])
    hp.launch(entry, experts(expand_x, total), on_device(ids), None, recv_counts, None,
              *[None] * 5, expand_scales, *[None] * 7, x_out, workspaces[1], tilings[1],
              block_dim=AIV_NUM, kernel_type="aiv")  # fmt: skip
    lines.append(compare(f"combine-{launch}", x_out, combine_reference(rank, launch)))
    return lines


def main() -> list[str]:
    """Three launches of dispatch + combine: each kernel flips the half of the RDMA area."""
    rank, n = hp.get_rank(), hp.get_world_size()
    (dispatch, dispatch_key), (combine, combine_key) = (
        dispatch_tiling(rank, n),
        combine_tiling(rank, n),
    )
    workspaces = (
        torch.zeros(1024, dtype=torch.uint8, device=hp.device()),
        torch.zeros(1024, dtype=torch.uint8, device=hp.device()),
    )
    lines = []
    for launch in (1, 2, 3):
        lines += run_launch(rank, n, launch, (dispatch, combine), (dispatch_key, combine_key),
                            workspaces)  # fmt: skip
    return lines


if __name__ == "__main__":
    run_sample(main, platform=PLATFORM, world_size=WORLD, **RUN_KWARGS)
