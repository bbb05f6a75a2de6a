"""Port of ops-transformer's MoeDistributeDispatchV2 + MoeDistributeCombineV2 on Atlas A2 (arch22).

Source: mirror-cann/ops-transformer at 3a280bcc (2026-07-21), every file read at that commit:
the entries ``mc2/moe_distribute_dispatch_v2/op_kernel/arch22/moe_distribute_dispatch_v2_a2.cpp``
and ``mc2/moe_distribute_combine_v2/op_kernel/arch22/moe_distribute_combine_v2_a2.cpp`` (the
``TILINGKEY_TPL_A2`` + ``TILINGKEY_TPL_MTE`` instances, BF16/FP16, no quantisation),
``MoeDistributeDispatchA2`` of ``op_kernel/arch22/moe_distribute_dispatch_a2.h``,
``MoeDistributeCombineA2`` of ``moe_distribute_combine_v2/op_kernel/arch22/moe_distribute_combine_a2.h``,
the constants of ``moe_distribute_a2_constant.h``, the tiling structs of
``op_kernel/moe_distribute_dispatch_tiling.h`` and ``moe_distribute_combine_tiling.h``, and the host
tilings ``op_host/op_tiling/arch22/moe_distribute_dispatch_v2_tiling_arch22.cpp`` and
``moe_distribute_combine_tiling_arch22.cpp`` (the attributes, ``GetAlgConfig``, the fullmesh
formula of ``CheckWinSize``; ``CheckCommAlg`` / ``CalcTilingKey`` give the MTE key to every
run here: ``commAlg`` unset, no ``HCCL_INTRA_*`` variables). docs/notes/mc2-kernels.md, section 25.

What it computes: the dispatch sends each (token, k) pair to the rank of its expert, grouped
by expert, and every rank writes its received rows to ``expandX`` by [local expert][source
rank], with ``assistInfo`` (the pair's index among this rank's pairs for the same expert),
``epRecvCounts`` (cumulative per (expert, source)) and ``expertTokenNums``; the combine sends
every row back to its token's rank and sums the K answers weighted by the router's scales.

What runs unchanged: the windows of ``HCCL_BUFFSIZE`` cut in two halves after a 1 MiB ADump
area, the half chosen by the word at ``FULLMESH_BUFFERID_ADDR`` of the own In window (read
by every core in Init, flipped by core 0 after the send), ``dataSizePerRank`` /
``rankSizeOnWin`` slots per source rank; the dispatch's per-rank status entry
(``RoundUp(localExperts + 1, 8)`` ints: the counts, the last one ``FLAG_VALUE``), its data
flag ``SKIP_OFFSET`` (512) bytes after the rows, the reorder of the pairs into the Out window
by expert, ``GetStatusCumSum``'s cumulative counts, ``LocalWindowCopy`` and ``CleanUpFlags``;
the combine's ``{tokenNum}`` word, rows at ``TOKEN_OFFSET`` and the flag ``SKIP_OFFSET`` (32)
bytes after them, its per-expert receive counts (the last core zeroes the workspace, every
core adds its histogram), the per-source offsets and the weighted sum. Both send paths are
ported: with ``epWorldSize <= 8`` (``isSingleServer_``) the cores copy into the peers' In
windows themselves; above, every core writes one 32-byte A2 ``BatchWriteItem``
``{localBuf, remoteBuf, count, dataType, remoteRankId}`` per destination rank, the own rank
included, and after ``SyncAll`` core 0 sends them all with one ``BatchWrite<true>`` while a
core copies the own rank's rows and flag itself; then every core polls its ranks' flags.

The multi-server path (16 ranks) breaks BatchWrite.md, which allows A2 items only towards
ranks on other servers and never the own rank, while these kernels address every rank of the
domain (section 25): hccl_py warns once per rank (``batch-write-server``) and copies the
items, as the op's documentation (fullmesh at 16 to 384 ranks) says the server does. ``main``
runs the single-server path; the 16-rank run is tests/test_samples.py's
``test_moe_distribute_a2_multi_server_runs_with_a_warning``.
With 4 experts per rank ``moeExpertNum`` is a multiple of 8: the combine copies
``RoundUp(moeExpertNum, 8)`` counts of ``epSendCount``, a tensor of ``moeExpertNum``, which
reads past its end otherwise (``test_moe_distribute_a2_combine_reads_past_ep_send_count``).
The routing alternates between launches (see ``inputs``) so that a flag left set would be
read by the launch after next.

Stand-ins: FP16; no ``xActiveMask``, zero/copy/const experts, smooth scales, performance info
or ADump (the DFX writes); the vector counting (``GatherMask``, ``Histograms``) is numpy; UB
buffers are tensors and ``SyncFunc`` / ``PipeBarrier`` / ``DataCacheCleanAndInvalid`` are
program order; the workspace is the user part only; ``aivNum`` is 3 (BS * K = 12 pairs over
three cores; with 4 ranks core 0 polls two of them). The experts between the kernels add their
global id to each row. Not ported: the layered (``TILINGKEY_TPL_AICPU``: ``commAlg``
"hierarchy") kernels and their AI CPU data plane variant.

Run: ``python samples/mc2_moe_distribute_a2.py`` (4 emulated ranks),
``python -m hccl_py run -n 2 --backend gloo samples/mc2_moe_distribute_a2.py``.
"""

from ctypes import Structure, c_bool, c_int8, c_int32, c_uint32, c_uint64

import numpy as np
import torch
from _common import WORLD_GROUP, compare, f16, i32, on_device, run_sample, zeros
from _mc2 import moe_inputs, moe_received, occurrence, split_to_core, typed_fields, uint32_fields

import hccl_py as hp
from hccl_py import (
    AIV,
    HCCL_CMD_BATCH_WRITE,
    HCCL_DATA_TYPE_FP16,
    HCCL_DATA_TYPE_INT8,
    Hccl,
    Mc2CcTiling,
    Mc2CcTilingConfig,
    Mc2InitTiling,
    TilingData,
    offsetof,
)

PLATFORM = "A2"
BUFFSIZE_MB = 6
RUN_KWARGS = {"buffsize_mb": BUFFSIZE_MB}
BS, K, H = 4, 3, 32  # tokens per rank, experts per token, hidden size (a multiple of 32)
LOCAL_EXPERTS = 4  # moe experts per rank (moeExpertNum a multiple of 8, see the docstring)
AIV_NUM = 3  # GetCoreNumAiv()
EXPERT_TOKEN_NUMS_TYPE = 0  # cumulative
SIZEOF_HALF = 2
# moe_distribute_a2_constant.h
ADUMP_WIN_SIZE = 1024 * 1024
WIN_ADDR_ALIGN = 512
FULLMESH_BUFFERID_ADDR = ADUMP_WIN_SIZE - WIN_ADDR_ALIGN
BATCH_WRITE_ITEM_OFFSET = 768 * 1024 + 50 * 1024 * 2
# moe_distribute_dispatch_a2.h / moe_distribute_combine_a2.h
BUFFER_NUM = 2
UB_ALIGN = 32
BITS32_PER_BLOCK = 8
BW_ITEM_SIZE = 32  # sizeof(BatchWriteItem) on A2
DISPATCH_SKIP_OFFSET = 512
FLAG_VALUE = -1  # 0xFFFFFFFF
A2_RANK_NUM_PER_SERVER = 8
TOKEN_OFFSET = 32  # combine: the {tokenNum} block before the rows
COMBINE_SKIP_OFFSET = 32
# host: moe_distribute_dispatch_v2_tiling_arch22.cpp
MAX_MOE_EXPERT_NUMS_A2_FULLMESH = 1024
OP_TYPE_BATCH_WRITE = 18
UB_SIZE = 192 * 1024
#: The A2 ``BatchWriteItem`` as the kernels fill it (u64 words 0-2, u32 words 6-7).
BatchWriteItem = np.dtype(
    [
        ("localBuf", "<u8"),
        ("remoteBuf", "<u8"),
        ("count", "<u8"),
        ("dataType", "<u4"),
        ("remoteRankId", "<u4"),
    ]
)


class MoeDistributeDispatchA2Info(Structure):
    _fields_ = [
        *uint32_fields("epWorldSize", "tpWorldSize", "epRankId", "tpRankId", "expertSharedType"),
        *uint32_fields("sharedExpertRankNum", "moeExpertNum", "quantMode", "globalBs", "bs", "k"),
        *uint32_fields("h", "aivNum"),
        *typed_fields(c_bool, "isTokenMask", "isExpertMask", "isMc2Context", "reserved2"),
        ("reserved3", c_bool),
        ("totalUbSize", c_uint64),
        ("expertTokenNumsType", c_uint32),
        ("zeroComputeExpertNum", c_int32),
        ("maxMoeExpertNum", c_uint32),
    ]


class MoeDistributeDispatchA2TilingData(TilingData):
    _fields_ = [
        ("mc2InitTiling", Mc2InitTiling),
        ("mc2CcTiling", Mc2CcTiling),
        ("moeDistributeDispatchInfo", MoeDistributeDispatchA2Info),
    ]


class MoeDistributeCombineA2Info(Structure):
    _fields_ = [
        *uint32_fields("epWorldSize", "tpWorldSize", "epRankId", "tpRankId", "expertSharedType"),
        *uint32_fields("sharedExpertRankNum", "moeExpertNum", "zeroExpertNum", "copyExpertNum"),
        *uint32_fields("constExpertNum", "globalBs", "bs", "k", "h", "aivNum"),
        ("totalUbSize", c_uint64),
        *typed_fields(c_bool, "isTokenMask", "isExpertMask"),
        ("reserved", c_int8 * 7),
    ]


class MoeDistributeCombineA2TilingData(TilingData):
    _fields_ = [
        ("mc2InitTiling", Mc2InitTiling),
        ("mc2CcTiling", Mc2CcTiling),
        ("moeDistributeCombineInfo", MoeDistributeCombineA2Info),
    ]


def RoundUp(val: int, align: int) -> int:
    return -(-val // align) * align


def u32_as_i32(value: int) -> int:
    """A uint32 word as the int32 a GlobalTensor<int32_t> reads."""
    return value - (1 << 32) if value >= 1 << 31 else value


class MoeDistributeDispatchA2:
    """``MoeDistributeDispatchA2<half, half, false, false, false>``."""

    def Init(self, x, expertIds, expandXOut, expandIdxOut, expertTokenNumsOut, epRecvCountsOut,
             workspaceGM, tilingGM) -> None:  # fmt: skip
        T = MoeDistributeDispatchA2TilingData
        tilingData = hp.GET_TILING_DATA_WITH_STRUCT(T, tilingGM)
        contextGM0 = hp.GetHcclContext(0)
        self.hccl_ = Hccl()
        self.hccl_.InitV2(contextGM0, tilingData)
        self.hccl_.SetCcTilingV2(offsetof(T, "mc2CcTiling"))
        self.winContext_ = contextGM0
        info = tilingData.moeDistributeDispatchInfo
        self.rankId_ = info.epRankId
        self.windowInGM_ = self.hccl_.GetWindowsInAddr(self.rankId_)
        self.windowOutGM_ = self.hccl_.GetWindowsOutAddr(self.rankId_)
        self.axisBS_, self.axisH_, self.axisK_ = info.bs, info.h, info.k
        self.aivNum_, self.worldSize_ = info.aivNum, info.epWorldSize
        self.expertTokenNumsType_ = info.expertTokenNumsType
        self.maxMoeExpertNum_ = info.maxMoeExpertNum
        self.totalSize_ = self.winContext_.winSize // BUFFER_NUM
        self.dataSize_ = self.totalSize_ - ADUMP_WIN_SIZE
        self.dataSizePerRank_ = self.dataSize_ // self.worldSize_ // UB_ALIGN * UB_ALIGN
        self.moeExpertNum_ = info.moeExpertNum
        self.localMoeExpertNum_ = self.moeExpertNum_ // self.worldSize_
        self.aivId_ = hp.GetBlockIdx()
        self.expertIdsCnt_ = self.axisBS_ * self.axisK_
        # the half of the windows this launch uses: the word core 0 flips after its send
        self.bufferChosenGlobal_ = i32(self.windowInGM_ + FULLMESH_BUFFERID_ADDR, 1)
        self.bufferChosen_ = int(self.bufferChosenGlobal_[0])
        self.windowInGM_ = self.windowInGM_ + ADUMP_WIN_SIZE + self.totalSize_ * self.bufferChosen_
        self.windowOutGM_ = (
            self.windowOutGM_ + ADUMP_WIN_SIZE + self.totalSize_ * self.bufferChosen_
        )
        self.x, self.expertIds = x, expertIds
        self.expandXOutGM_, self.expandIdxOutGM_ = expandXOut, expandIdxOut
        self.expertTokenNumsOutGM_, self.epRecvCountsGM_ = expertTokenNumsOut, epRecvCountsOut
        self.hCommuSize_ = self.axisH_ * SIZEOF_HALF  # no quantisation: no scale block
        self.axisHCommu_ = self.hCommuSize_ // SIZEOF_HALF
        self.batchWriteInfo_ = workspaceGM
        self.isSingleServer_ = self.worldSize_ <= A2_RANK_NUM_PER_SERVER
        self.startTask, self.endTask = split_to_core(self.worldSize_, self.aivNum_, self.aivId_)
        self.taskNum = self.endTask - self.startTask

    def windowInStatus(self, intOffset: int, n: int) -> torch.Tensor:
        """``windowInstatusTensor_[intOffset:]``: int32s of this launch's half of the In window."""
        return i32(self.windowInGM_ + intOffset * 4, n)

    def sendStatus(self, intOffset: int, n: int) -> torch.Tensor:
        """``sendStatusTensor_[intOffset:]``: int32s of this launch's half of the Out window."""
        return i32(self.windowOutGM_ + intOffset * 4, n)

    def AllocTensor(self) -> None:
        # the status entry: the counts of each local expert, then a flag in its last int
        self.statusEntryCount_ = RoundUp(self.localMoeExpertNum_ + 1, BITS32_PER_BLOCK)
        self.dataOffset_ = self.statusEntryCount_ * 4

    def InitStatusTensor(self) -> None:
        self.statusTensor_ = np.zeros((self.worldSize_, self.statusEntryCount_), dtype=np.int32)
        self.statusTensor_[:, -1] = FLAG_VALUE  # Duplicate with the last-element mask

    def IndexSort(self) -> None:
        E, W = self.localMoeExpertNum_, self.worldSize_
        self.sendToMoeExpTokenCnt_ = self.expertIdsCnt_  # no mask: every pair is sent
        self.expertIdsTensor_ = i32(self.expertIds, self.expertIdsCnt_).tolist()
        self.expertCountTensor_ = [0] * self.expertIdsCnt_
        self.InitStatusTensor()
        for tokenIndex in range(self.sendToMoeExpTokenCnt_):
            expertIdx = tokenIndex  # validExpIndexTensor_: CreateVecIndex, no GatherMask
            expertId = self.expertIdsTensor_[expertIdx]
            rankId, expertOffsetInRank = expertId // E, expertId % E
            self.expertCountTensor_[expertIdx] = int(self.statusTensor_[rankId, expertOffsetInRank])
            self.statusTensor_[rankId, expertOffsetInRank] += 1
        cumsum = [0] * (self.moeExpertNum_ + 1)
        for expertId in range(1, self.moeExpertNum_):
            count = int(self.statusTensor_[(expertId - 1) // E, (expertId - 1) % E])
            cumsum[expertId] = count + cumsum[expertId - 1]
        cumsum[self.moeExpertNum_] = self.sendToMoeExpTokenCnt_
        self.expertCumsumTensor_ = cumsum
        if self.aivId_ == self.aivNum_ - 1:
            i32(self.expandIdxOutGM_, self.expertIdsCnt_)[:] = torch.tensor(self.expertCountTensor_)
            # the own status straight into the own In window
            own = self.windowInStatus(
                self.rankId_ * self.dataSizePerRank_ // 4, self.statusEntryCount_
            )
            own[:] = torch.from_numpy(self.statusTensor_[self.rankId_].copy())
            for rankId in range(W):
                rankOffset = rankId * self.dataSizePerRank_ // 4
                entry = self.sendStatus(rankOffset, self.statusEntryCount_)
                entry[:] = torch.from_numpy(self.statusTensor_[rankId].copy())
                startExpertId = rankId * E
                tokenCount = cumsum[startExpertId + E] - cumsum[startExpertId]
                dataFlagOffset = (
                    rankOffset
                    + (self.dataOffset_ + tokenCount * self.hCommuSize_ + DISPATCH_SKIP_OFFSET) // 4
                )
                self.sendStatus(dataFlagOffset, 1)[0] = FLAG_VALUE

    def ReorderTokens(self) -> None:
        E = self.localMoeExpertNum_
        start, end = split_to_core(self.sendToMoeExpTokenCnt_, self.aivNum_, self.aivId_)
        xGM = f16(self.x, self.axisBS_ * self.axisH_)
        for tokenIndex in range(start, end):
            expertIdx = tokenIndex
            expertId = self.expertIdsTensor_[expertIdx]
            rankId = expertId // E
            startExpertId = rankId * E
            expertOffset = (
                self.expertCumsumTensor_[expertId] - self.expertCumsumTensor_[startExpertId]
            )
            tokenOffset = self.expertCountTensor_[expertIdx]
            sendTokensGlobal = self.windowOutGM_ + rankId * self.dataSizePerRank_ + self.dataOffset_
            row = (expertIdx // self.axisK_) * self.axisH_
            xTensor = xGM[row : row + self.axisH_].clone()
            dst = sendTokensGlobal + (expertOffset + tokenOffset) * self.axisHCommu_ * SIZEOF_HALF
            f16(dst, self.axisHCommu_)[:] = xTensor

    def rankTokenCount(self, rankIndex: int) -> int:
        startExpertId = rankIndex * self.localMoeExpertNum_
        cumsum = self.expertCumsumTensor_
        return cumsum[startExpertId + self.localMoeExpertNum_] - cumsum[startExpertId]

    def peerSlot(self, rankIndex: int) -> hp.GmAddr:
        """This rank's slot in ``rankIndex``'s In window (this launch's half)."""
        base = self.hccl_.GetWindowsInAddr(rankIndex) + ADUMP_WIN_SIZE
        return base + self.totalSize_ * self.bufferChosen_ + self.dataSizePerRank_ * self.rankId_

    def SingleServerSendToMoeExpert(self) -> None:
        if self.aivId_ == 0:
            self.bufferChosenGlobal_[0] = self.bufferChosen_ ^ 1
        for rankIndex in range(self.startTask, self.endTask):
            tokenCount = self.rankTokenCount(rankIndex)
            rankGM = self.peerSlot(rankIndex)
            localBuf = self.windowOutGM_ + self.dataSizePerRank_ * rankIndex
            status = i32(localBuf, self.statusEntryCount_).clone()
            i32(rankGM, self.statusEntryCount_)[:] = status
            rows = tokenCount * self.axisHCommu_
            tokens = f16(localBuf + self.dataOffset_, rows).clone()
            f16(rankGM + self.dataOffset_, rows)[:] = tokens
            flagAt = self.dataOffset_ + tokenCount * self.hCommuSize_ + DISPATCH_SKIP_OFFSET
            flag = i32(localBuf + flagAt, 1).clone()
            i32(rankGM + flagAt, 1)[:] = flag

    def ConstructBatchWriteInfo(self) -> None:
        items = np.zeros(self.taskNum, dtype=BatchWriteItem)
        for rankIndex in range(self.startTask, self.endTask):
            currentIndex = rankIndex - self.startTask
            tokenCount = self.rankTokenCount(rankIndex)
            rankGM = self.peerSlot(rankIndex)
            localBuf = self.windowOutGM_ + self.dataSizePerRank_ * rankIndex
            batchWriteDataSize = (
                self.dataOffset_ + tokenCount * self.hCommuSize_ + 4 + DISPATCH_SKIP_OFFSET
            )
            items[currentIndex] = (int(localBuf), int(rankGM), batchWriteDataSize,
                                   HCCL_DATA_TYPE_INT8, rankIndex)  # fmt: skip
        at = self.batchWriteInfo_ + self.startTask * BW_ITEM_SIZE
        hp.gm_tensor(at, torch.uint8, items.nbytes)[:] = torch.from_numpy(items.view(np.uint8))

    def SendToMoeExpert(self) -> None:
        if self.aivId_ == 0:
            self.hccl_.BatchWrite[True](self.batchWriteInfo_, self.worldSize_)
            self.bufferChosenGlobal_[0] = self.bufferChosen_ ^ 1
        if self.aivId_ == self.aivNum_ - 1:
            tokenCount = self.rankTokenCount(self.rankId_)
            slot = self.rankId_ * self.dataSizePerRank_ + self.dataOffset_
            rows = tokenCount * self.axisHCommu_
            tokens = f16(self.windowOutGM_ + slot, rows).clone()
            f16(self.windowInGM_ + slot, rows)[:] = tokens
            dataFlagOffset = (slot + tokenCount * self.hCommuSize_ + DISPATCH_SKIP_OFFSET) // 4
            self.windowInStatus(dataFlagOffset, 1)[0] = FLAG_VALUE

    def WaitDispatch(self) -> None:
        if self.taskNum == 0:
            hp.SyncAll[True]()
            return
        E, SEC = self.localMoeExpertNum_, self.statusEntryCount_
        isVisited = [False] * self.taskNum
        recvFlagNum = 0
        while recvFlagNum < self.taskNum:
            for rankId in range(self.startTask, self.endTask):
                if isVisited[rankId - self.startTask]:
                    continue
                rankOffset = rankId * self.dataSizePerRank_ // 4
                status = self.windowInStatus(rankOffset, SEC).clone().tolist()  # one 32-byte read
                if status[SEC - 1] != FLAG_VALUE:
                    continue
                tokenCount = sum(status[:E])
                dataFlagOffset = (
                    rankOffset
                    + (self.dataOffset_ + tokenCount * self.hCommuSize_ + DISPATCH_SKIP_OFFSET) // 4
                )
                dataFlag = self.windowInStatus(dataFlagOffset, 1)
                if int(dataFlag[0]) != FLAG_VALUE:
                    continue
                isVisited[rankId - self.startTask] = True
                recvFlagNum += 1
                dataFlag[0] = 0
        hp.SyncAll[True]()

    def GetStatusCumSum(self) -> None:
        E, W, SEC = self.localMoeExpertNum_, self.worldSize_, self.statusEntryCount_
        status = [
            self.windowInStatus(r * self.dataSizePerRank_ // 4, SEC).tolist() for r in range(W)
        ]
        self.statusTensor_ = np.array(status, dtype=np.int64)
        # epRecvCountsTemp[r][j]: the pairs of ranks 0..r for local expert j
        temp = np.cumsum(self.statusTensor_[:, :E], axis=0)
        out = np.zeros((E, W), dtype=np.int64)
        previousSum = 0
        for expertIndex in range(E):  # GatherMask of column j, then Adds of the running sum
            out[expertIndex] = temp[:, expertIndex] + previousSum
            previousSum = int(out[expertIndex, W - 1])
        self.epRecvCountsOut_ = out.reshape(-1)  # j * W + r
        if self.aivId_ == self.aivNum_ - 1:
            if self.expertTokenNumsType_ == 0:
                tokenNums = [int(self.epRecvCountsOut_[(i + 1) * W - 1]) for i in range(E)]
            else:
                tokenNums = [int(temp[W - 1, i]) for i in range(E)]
            nums = hp.gm_tensor(self.expertTokenNumsOutGM_, torch.int64, E)
            nums[:] = torch.tensor(tokenNums, dtype=torch.int64)
            counts = i32(self.epRecvCountsGM_, self.moeExpertNum_)
            counts[:] = torch.from_numpy(self.epRecvCountsOut_.astype(np.int32))

    def LocalWindowCopy(self) -> None:
        W = self.worldSize_
        expandX = f16(self.expandXOutGM_, W * self.axisBS_ * self.localMoeExpertNum_ * self.axisH_)
        for rankId in range(self.startTask, self.endTask):
            wAddr = self.windowInGM_ + rankId * self.dataSizePerRank_ + self.dataOffset_
            currRankDataOffset = 0
            for j in range(self.localMoeExpertNum_):
                currTokensCount = int(self.statusTensor_[rankId, j])
                currTokensOffset = int(self.epRecvCountsOut_[j * W + rankId]) - currTokensCount
                rows = currTokensCount * self.axisHCommu_
                src = wAddr + currRankDataOffset * self.axisHCommu_ * SIZEOF_HALF
                tokens = f16(src, rows).clone()
                first = currTokensOffset * self.axisH_
                expandX[first : first + rows] = tokens
                currRankDataOffset += currTokensCount

    def CleanUpFlags(self) -> None:
        if self.aivId_ != 0:
            return
        multiMachineMaxStatusSize = 512
        singleMachineMaxStatusSize = RoundUp(
            (self.maxMoeExpertNum_ // self.worldSize_ + 1) * 4, UB_ALIGN
        )
        statusSize = (
            singleMachineMaxStatusSize if self.isSingleServer_ else multiMachineMaxStatusSize
        )
        for rankId in range(self.worldSize_):
            self.windowInStatus(rankId * self.dataSizePerRank_ // 4, statusSize // 4)[:] = 0

    def Process(self) -> None:
        if hp.g_coreType != AIV:
            return
        self.AllocTensor()
        self.IndexSort()
        self.ReorderTokens()
        if self.isSingleServer_:
            hp.SyncAll[True]()
            self.SingleServerSendToMoeExpert()
        else:
            self.ConstructBatchWriteInfo()
            hp.SyncAll[True]()
            self.SendToMoeExpert()
        self.WaitDispatch()
        self.GetStatusCumSum()
        self.LocalWindowCopy()
        hp.SyncAll[True]()
        self.CleanUpFlags()
        self.hccl_.Finalize()


def moe_distribute_dispatch_v2(x, expertIds, scales, xActiveMask, expertScales, elasticInfo,
                               performanceInfo, expandXOut, dynamicScalesOut, assistInfoOut,
                               expertTokenNumsOut, epSendCountsOut, tpSendCountsOut,
                               expandScalesOut, workspaceGM, tilingGM):  # fmt: skip
    """The A2 entry: ``ArchTag`` TILINGKEY_TPL_A2, ``CommMode`` TILINGKEY_TPL_MTE."""
    op = MoeDistributeDispatchA2()
    op.Init(x, expertIds, expandXOut, assistInfoOut, expertTokenNumsOut, epSendCountsOut,
            workspaceGM, tilingGM)  # fmt: skip
    op.Process()


class MoeDistributeCombineA2:
    """``MoeDistributeCombineA2<half, int32_t>``."""

    def Init(self, expandX, expertIds, expandIdx, sendCount, scales, XOut, workspaceGM,
             tilingGM) -> None:  # fmt: skip
        T = MoeDistributeCombineA2TilingData
        tilingData = hp.GET_TILING_DATA_WITH_STRUCT(T, tilingGM)
        info = tilingData.moeDistributeCombineInfo
        self.rankId_, self.axisBS_, self.axisH_, self.axisK_ = (
            info.epRankId,
            info.bs,
            info.h,
            info.k,
        )
        self.aivNum_, self.moeExpertNum_ = info.aivNum, info.moeExpertNum
        self.worldSize_ = info.epWorldSize
        self.isSingleServer_ = self.worldSize_ <= A2_RANK_NUM_PER_SERVER
        contextGM = hp.GetHcclContext(0)
        self.hccl_ = Hccl()
        self.hccl_.InitV2(contextGM, tilingData)
        self.hccl_.SetCcTilingV2(offsetof(T, "mc2CcTiling"))
        self.halfWinSize_ = contextGM.winSize // 2
        self.dataSpaceSize_ = self.halfWinSize_ - ADUMP_WIN_SIZE
        windowInGM = self.hccl_.GetWindowsInAddr(self.rankId_)
        self.bufferIdGlobal_ = i32(windowInGM + FULLMESH_BUFFERID_ADDR, 1)
        self.bufferId_ = int(self.bufferIdGlobal_[0])
        half = ADUMP_WIN_SIZE + self.halfWinSize_ * self.bufferId_
        self.windowInGM_ = windowInGM + half
        self.windowOutGM_ = self.hccl_.GetWindowsOutAddr(self.rankId_) + half
        self.coreIdx_ = hp.GetBlockIdx()
        self.expandXGM, self.expertIdsGM, self.expandIdxGM = expandX, expertIds, expandIdx
        self.sendCountGM, self.topkWeightsGM, self.expandOutGM = sendCount, scales, XOut
        # the BatchWrite items: in the ADump area of this half of the Out window
        self.workspaceGlobal_ = (
            self.hccl_.GetWindowsOutAddr(self.rankId_)
            + self.halfWinSize_ * self.bufferId_
            + BATCH_WRITE_ITEM_OFFSET
        )
        self.expertRecvCountGM = workspaceGM
        self.expertWindowOffsetGM = workspaceGM + self.moeExpertNum_ * 4
        self.localMoeExpertNum_ = self.moeExpertNum_ // self.worldSize_
        self.rankSizeOnWin_ = self.dataSpaceSize_ // self.worldSize_ // UB_ALIGN * UB_ALIGN
        self.dataOffsetOnWin_ = self.rankId_ * self.rankSizeOnWin_
        self.axisHExpandXTypeSize_ = self.axisH_ * SIZEOF_HALF
        self.startTask, self.endTask = split_to_core(self.worldSize_, self.aivNum_, self.coreIdx_)
        self.taskNum = self.endTask - self.startTask

    def peerSlot(self, dstRankId: int) -> hp.GmAddr:
        """This rank's slot in ``dstRankId``'s In window (this launch's half)."""
        base = self.hccl_.GetWindowsInAddr(dstRankId) + ADUMP_WIN_SIZE
        return base + self.halfWinSize_ * self.bufferId_ + self.dataOffsetOnWin_

    def GetRankTokenNumAndDataCopy2WindowOut(self, sendCountInfo, rankWindowOut, rankId) -> int:
        """The rows of every local expert for ``rankId``, one after the other into the Out window."""
        W, rowBytes = self.worldSize_, self.axisHExpandXTypeSize_
        rankTokenNum = 0
        for expertId in range(self.localMoeExpertNum_):
            preCount = 0
            if expertId != 0 or rankId != 0:
                preCount = sendCountInfo[expertId * W + rankId - 1]
            tokenNum = sendCountInfo[expertId * W + rankId] - preCount
            for tokenId in range(tokenNum):
                xLocal = f16(self.expandXGM + (preCount + tokenId) * rowBytes, self.axisH_).clone()
                f16(rankWindowOut + rankTokenNum * rowBytes, self.axisH_)[:] = xLocal
                rankTokenNum += 1
        return rankTokenNum

    def SingleServerDispatch(self, sendCountInfo) -> None:
        rowBytes = self.axisHExpandXTypeSize_
        for dstRankId in range(self.startTask, self.endTask):
            localOutWindow = self.windowOutGM_ + dstRankId * self.rankSizeOnWin_ + TOKEN_OFFSET
            tokenNumInWindow = i32(self.peerSlot(dstRankId), 1)
            rankTokenNum = self.GetRankTokenNumAndDataCopy2WindowOut(
                sendCountInfo, localOutWindow, dstRankId
            )
            tokenNumInWindow[0] = rankTokenNum
            dstGlobal = self.peerSlot(dstRankId) + TOKEN_OFFSET
            for tokenId in range(rankTokenNum):
                xLocal = f16(localOutWindow + tokenId * rowBytes, self.axisH_).clone()
                f16(dstGlobal + tokenId * rowBytes, self.axisH_)[:] = xLocal
            # PipeBarrier<PIPE_MTE3>: the rows are out before the flag
            flagGlobal = i32(dstGlobal + rankTokenNum * rowBytes + COMBINE_SKIP_OFFSET, 1)
            flagGlobal[0] = FLAG_VALUE

    def ConstructBatchWriteInfo(self, sendCountInfo) -> None:
        rowBytes = self.axisHExpandXTypeSize_
        self.batchWriteLocal_ = np.zeros(self.taskNum, dtype=BatchWriteItem)
        for dstRankId in range(self.startTask, self.endTask):
            tokenNumOutWindow = self.windowOutGM_ + dstRankId * self.rankSizeOnWin_
            localOutWindow = tokenNumOutWindow + TOKEN_OFFSET
            rankTokenNum = self.GetRankTokenNumAndDataCopy2WindowOut(
                sendCountInfo, localOutWindow, dstRankId
            )
            i32(tokenNumOutWindow, 1)[0] = rankTokenNum
            flagAt = localOutWindow + rankTokenNum * rowBytes + COMBINE_SKIP_OFFSET
            i32(flagAt, 1)[0] = FLAG_VALUE
            # count: FP16 elements from the {tokenNum} word to the flag's end
            count = rankTokenNum * self.axisH_ + (COMBINE_SKIP_OFFSET + TOKEN_OFFSET) // 2 + 2
            self.batchWriteLocal_[dstRankId - self.startTask] = (
                int(tokenNumOutWindow), int(self.peerSlot(dstRankId)), count,
                HCCL_DATA_TYPE_FP16, dstRankId,
            )  # fmt: skip
        items = self.batchWriteLocal_
        at = self.workspaceGlobal_ + self.startTask * BW_ITEM_SIZE
        hp.gm_tensor(at, torch.uint8, items.nbytes)[:] = torch.from_numpy(items.view(np.uint8))

    def MultiServerDispatch(self) -> None:
        if self.coreIdx_ == 0:
            self.hccl_.BatchWrite[True](self.workspaceGlobal_, self.worldSize_)
            self.bufferIdGlobal_[0] = self.bufferId_ ^ 1
        if self.startTask <= self.rankId_ < self.endTask:
            rowBytes = self.axisHExpandXTypeSize_
            localOutWindow = self.windowOutGM_ + self.dataOffsetOnWin_ + TOKEN_OFFSET
            localInWindow = self.windowInGM_ + self.dataOffsetOnWin_ + TOKEN_OFFSET
            count = int(self.batchWriteLocal_[self.rankId_ - self.startTask]["count"])
            rankTokenNum = (count - (COMBINE_SKIP_OFFSET + TOKEN_OFFSET) // 2 - 2) // self.axisH_
            i32(self.windowInGM_ + self.dataOffsetOnWin_, 1)[0] = rankTokenNum
            for tokenId in range(rankTokenNum):
                xLocal = f16(localOutWindow + tokenId * rowBytes, self.axisH_).clone()
                f16(localInWindow + tokenId * rowBytes, self.axisH_)[:] = xLocal
            flagAt = localInWindow + rankTokenNum * rowBytes + COMBINE_SKIP_OFFSET
            i32(flagAt, 1)[0] = FLAG_VALUE

    def AlltoAllDispatch(self) -> None:
        if self.taskNum == 0:
            hp.SyncAll[True]()
            return
        sendCountLocal = i32(self.sendCountGM, RoundUp(self.moeExpertNum_, 8)).tolist()
        if self.isSingleServer_:
            self.SingleServerDispatch(sendCountLocal)
            hp.SyncAll[True]()
            if self.coreIdx_ == 0:
                self.bufferIdGlobal_[0] = self.bufferId_ ^ 1
        else:
            self.ConstructBatchWriteInfo(sendCountLocal)
            hp.SyncAll[True]()
            self.MultiServerDispatch()

    def CalRecvCountsAndOffsets(self) -> None:
        E, N = self.localMoeExpertNum_, self.moeExpertNum_
        start, end = split_to_core(self.axisBS_ * self.axisK_, self.aivNum_, self.coreIdx_)
        recvCountLocal = np.zeros(N, dtype=np.int32)
        expertRecvCountGlobal = i32(self.expertRecvCountGM, N)
        if self.coreIdx_ == self.aivNum_ - 1:
            expertRecvCountGlobal[:] = 0
        hp.SyncAll[True]()
        expertIdsLocal = i32(self.expertIdsGM + start * 4, end - start).cpu().numpy()
        for value in expertIdsLocal:  # Histograms<false>: the pairs below moeExpertNum
            if value < N:
                recvCountLocal[value] += 1
        expertRecvCountGlobal += torch.from_numpy(recvCountLocal).to(expertRecvCountGlobal.device)
        hp.SyncAll[True]()
        recvCount = expertRecvCountGlobal.tolist()
        expertWindowOffsetLocal = np.zeros(self.taskNum * E, dtype=np.int32)
        self.numRecvTokensPerRankLocal_ = [0] * self.taskNum
        for i in range(self.taskNum):
            prefixSum = 0
            for j in range(E):
                expertWindowOffsetLocal[i * E + j] = prefixSum
                prefixSum += recvCount[(self.startTask + i) * E + j]
            self.numRecvTokensPerRankLocal_[i] = prefixSum
        offsets = i32(self.expertWindowOffsetGM + self.startTask * E * 4, self.taskNum * E)
        offsets[:] = torch.from_numpy(expertWindowOffsetLocal)
        hp.SyncAll[True]()

    def WaitDispatch(self) -> None:
        waitFlagNum = 0
        isVisitedLocal = [False] * self.taskNum
        while waitFlagNum < self.taskNum:
            for rankId in range(self.startTask, self.endTask):
                if isVisitedLocal[rankId - self.startTask]:
                    continue  # (the source re-reads a visited rank's zeroed flag)
                wAddr = (
                    self.windowInGM_ + self.rankSizeOnWin_ * rankId + COMBINE_SKIP_OFFSET
                    + TOKEN_OFFSET
                    + self.numRecvTokensPerRankLocal_[rankId - self.startTask]
                    * self.axisHExpandXTypeSize_
                )  # fmt: skip
                flagGlobal = i32(wAddr, 1)
                if int(flagGlobal[0]) != FLAG_VALUE:
                    continue
                isVisitedLocal[rankId - self.startTask] = True
                waitFlagNum += 1
                flagGlobal[0] = 0
        hp.SyncAll[True]()

    def LocalWindowCopy(self) -> None:
        start, end = split_to_core(self.axisBS_, self.aivNum_, self.coreIdx_)
        if end == start:
            return
        K, rowBytes = self.axisK_, self.axisHExpandXTypeSize_
        offsets = i32(self.expertWindowOffsetGM, self.moeExpertNum_).tolist()
        topkWeights = hp.gm_tensor(self.topkWeightsGM, torch.float32, self.axisBS_ * K).tolist()
        expandIdx = i32(self.expandIdxGM, self.axisBS_ * K).tolist()
        expertIds = i32(self.expertIdsGM, self.axisBS_ * K).tolist()
        for tokenIdx in range(start, end):
            topkSumFloatLocal = torch.zeros(self.axisH_, dtype=torch.float32, device=hp.device())
            for k in range(K):
                expertOffset = tokenIdx * K + k
                expertId = expertIds[expertOffset]
                if expertId >= self.moeExpertNum_:
                    continue  # no copy experts in this port
                rank = expertId // self.localMoeExpertNum_
                wAddr = (
                    self.windowInGM_ + self.rankSizeOnWin_ * rank + TOKEN_OFFSET
                    + (offsets[expertId] + expandIdx[expertOffset]) * rowBytes
                )  # fmt: skip
                tokenFloatLocal = f16(wAddr, self.axisH_).float()
                topkSumFloatLocal += tokenFloatLocal * topkWeights[expertOffset]
            out = f16(self.expandOutGM + tokenIdx * rowBytes, self.axisH_)
            out[:] = topkSumFloatLocal.half()  # Cast CAST_RINT

    def Process(self) -> None:
        if hp.g_coreType != AIV:
            return
        self.AlltoAllDispatch()
        self.CalRecvCountsAndOffsets()
        self.WaitDispatch()
        self.LocalWindowCopy()
        self.hccl_.Finalize()


def moe_distribute_combine_v2(expandX, expertIds, assistInfoForCombine, epSendCount, scales,
                              tpSendCounts, xActiveMask, activationScale, weightScale, groupList,
                              expandScales, sharedExpertX, elasticInfo, oriX, constExpertAlpha1,
                              constExpertAlpha2, constExpertV, performanceInfo, XOut, workspaceGM,
                              tilingGM):  # fmt: skip
    """The A2 entry: ``ArchTag`` TILINGKEY_TPL_A2, ``LayeredMode`` TILINGKEY_TPL_MTE, no quant."""
    op = MoeDistributeCombineA2()
    op.Init(expandX, expertIds, assistInfoForCombine, epSendCount, scales, XOut, workspaceGM,
            tilingGM)  # fmt: skip
    op.Process()


def GetAlgConfig(epWorldSize: int) -> str:
    """``MoeDistributeCombineA2GetAlgConfig`` (both hosts), not layered."""
    if epWorldSize <= A2_RANK_NUM_PER_SERVER:
        return "BatchWrite=level0:fullmesh"
    return "BatchWrite=level1:fullmesh"


def CheckWinSize(n: int) -> None:
    """The dispatch host's fullmesh formula (a warning there; the sample insists)."""
    maxRecvTokenNum = BS * n * min(LOCAL_EXPERTS, K)
    minHcclBuffSize = BUFFER_NUM * (maxRecvTokenNum * H * 2 + 2 * 1024 * 1024)
    assert minHcclBuffSize <= BUFFSIZE_MB << 20, "HCCL_BUFFSIZE is too small"


def set_hccl_tiling(tiling, n: int) -> None:
    """Section 3 of both hosts: opType 18 (BatchWrite) with the algConfig of the world size."""
    cfg = Mc2CcTilingConfig(WORLD_GROUP, OP_TYPE_BATCH_WRITE, GetAlgConfig(n))
    assert HCCL_CMD_BATCH_WRITE == OP_TYPE_BATCH_WRITE
    if cfg.GetTiling(tiling.mc2InitTiling) != 0 or cfg.GetTiling(tiling.mc2CcTiling) != 0:
        raise RuntimeError(f"tiling failed: {cfg.last_error}")


def dispatch_tiling(rank: int, n: int) -> MoeDistributeDispatchA2TilingData:
    """Host: MoeDistributeDispatchTilingFuncImpl's A2 path (fullmesh: commAlg unset)."""
    tiling = MoeDistributeDispatchA2TilingData()
    info = tiling.moeDistributeDispatchInfo
    info.epWorldSize, info.epRankId, info.moeExpertNum = n, rank, LOCAL_EXPERTS * n
    info.maxMoeExpertNum = MAX_MOE_EXPERT_NUMS_A2_FULLMESH
    info.globalBs, info.bs, info.k, info.h = BS * n, BS, K, H  # globalBs 0: epWorldSize * bs
    info.expertTokenNumsType = EXPERT_TOKEN_NUMS_TYPE
    info.aivNum, info.totalUbSize = AIV_NUM, UB_SIZE
    CheckWinSize(n)
    set_hccl_tiling(tiling, n)
    return tiling


def combine_tiling(rank: int, n: int) -> MoeDistributeCombineA2TilingData:
    """Host: the combine's A2 tiling with the same attributes."""
    tiling = MoeDistributeCombineA2TilingData()
    info = tiling.moeDistributeCombineInfo
    info.epWorldSize, info.epRankId, info.moeExpertNum = n, rank, LOCAL_EXPERTS * n
    info.globalBs, info.bs, info.k, info.h = BS * n, BS, K, H
    info.aivNum, info.totalUbSize = AIV_NUM, UB_SIZE
    set_hccl_tiling(tiling, n)
    return tiling


def inputs(rank: int, launch: int) -> tuple[np.ndarray, np.ndarray]:
    """Rank ``rank``'s tokens (exact FP16 integers naming rank, token, column, launch) and
    routing: odd launches send two of each token's K = 3 pairs to the next rank and one to
    the own rank, even launches the other way round. A launch thus finds its flags where the
    launch before last, in the same halves of the windows, left its own, past the rows of
    the launch between: a flag left set would be read."""
    n = hp.get_world_size()
    x, _ = moe_inputs(rank, launch, BS, K, H, LOCAL_EXPERTS)
    near, far = rank, (rank + 1) % n
    targets = [far, far, near] if launch % 2 else [near, near, far]
    ids = [[targets[k] * LOCAL_EXPERTS + (t + k) % LOCAL_EXPERTS for k in range(K)]
           for t in range(BS)]  # fmt: skip
    return x, np.array(ids, dtype=np.int32)


def expert_scales(rank: int, launch: int) -> np.ndarray:
    """The router's weights (BS, K): quarters, so every product and sum is exact in FP32."""
    t, k = np.meshgrid(np.arange(BS), np.arange(K), indexing="ij")
    return ((1 + (rank + launch + t + 2 * k) % 4) / 4).astype(np.float32)


def dispatch_reference(rank: int, launch: int) -> dict[str, np.ndarray]:
    """numpy: the dispatch's outputs on ``rank``."""
    n = hp.get_world_size()
    received = moe_received(inputs, rank, launch, LOCAL_EXPERTS)
    rows = [x[pairs // K].astype(np.float64).reshape(-1) for x, pairs in received]
    recv = np.cumsum([len(pairs) for _, pairs in received])
    return {
        "assist_info": occurrence(inputs(rank, launch)[1]),
        "ep_recv_counts": recv,
        "token_nums": recv.reshape(LOCAL_EXPERTS, n)[:, -1],
        "expand_x": np.concatenate(rows),
    }


def experts(expand_x: torch.Tensor, recv_counts: torch.Tensor) -> torch.Tensor:
    """Stand-in for the experts between the kernels: expert e adds e to its rows (grouped by
    [local expert][source rank], ``recv_counts`` their cumulative counts)."""
    rows = torch.arange(expand_x.numel() // H, dtype=recv_counts.dtype, device=expand_x.device)
    slot = torch.searchsorted(recv_counts, rows, right=True)
    expert = hp.get_rank() * LOCAL_EXPERTS + slot // hp.get_world_size()
    return (expand_x.view(-1, H) + expert[:, None].to(expand_x.dtype)).view(-1)


def combine_reference(rank: int, launch: int) -> np.ndarray:
    """numpy: each token's K expert answers (x + expert id), weighted by the scales, summed."""
    x, ids = inputs(rank, launch)
    answers = x.astype(np.float32)[:, None, :] + ids.astype(np.float32)[:, :, None]
    return (expert_scales(rank, launch)[:, :, None] * answers).sum(axis=1).astype(np.float16)


def run_launch(rank: int, n: int, launch: int, tilings, workspaces) -> list[str]:
    """One dispatch and one combine; the verdicts of both."""
    x, ids = inputs(rank, launch)
    expand_x = zeros(n * BS * LOCAL_EXPERTS * H)
    assist_info = torch.zeros(BS * K, dtype=torch.int32, device=hp.device())
    token_nums = torch.zeros(LOCAL_EXPERTS, dtype=torch.int64, device=hp.device())
    recv_counts = torch.zeros(LOCAL_EXPERTS * n, dtype=torch.int32, device=hp.device())
    hp.launch(moe_distribute_dispatch_v2, on_device(x), on_device(ids), None, None, None, None,
              None, expand_x, None, assist_info, token_nums, recv_counts, None, None,
              workspaces[0], tilings[0], block_dim=AIV_NUM, kernel_type="aiv")  # fmt: skip
    want = dispatch_reference(rank, launch)
    total = int(want["ep_recv_counts"][-1])
    got = torch.cat([assist_info.double().cpu(), recv_counts.double().cpu(),
                     token_nums.double().cpu(), expand_x[: total * H].double().cpu()])  # fmt: skip
    lines = [compare(f"dispatch-{launch}", got, np.concatenate(list(want.values())),
                     f"{total} rows received")]  # fmt: skip
    x_out = zeros(BS, H)
    hp.launch(moe_distribute_combine_v2, experts(expand_x, recv_counts), on_device(ids),
              assist_info, recv_counts, on_device(expert_scales(rank, launch)), *[None] * 13,
              x_out, workspaces[1], tilings[1], block_dim=AIV_NUM, kernel_type="aiv")  # fmt: skip
    lines.append(compare(f"combine-{launch}", x_out, combine_reference(rank, launch)))
    return lines


def main() -> list[str]:
    """Two launches of dispatch + combine: each one flips the half of the windows in use."""
    rank, n = hp.get_rank(), hp.get_world_size()
    tilings = (dispatch_tiling(rank, n), combine_tiling(rank, n))
    workspaces = (
        torch.zeros(n * BW_ITEM_SIZE, dtype=torch.uint8, device=hp.device()),
        torch.zeros(2 * LOCAL_EXPERTS * n, dtype=torch.int32, device=hp.device()),
    )
    lines = []
    for launch in (1, 2):
        lines += run_launch(rank, n, launch, tilings, workspaces)
    return lines


if __name__ == "__main__":
    run_sample(main, platform=PLATFORM, **RUN_KWARGS)
