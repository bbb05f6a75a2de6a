"""Port of ops-transformer's MoeDistributeCombineSetup + MoeDistributeCombineTeardown on Atlas A3.

Source: mirror-cann/ops-transformer at 3a280bcc (2026-07-21), every file read at that commit:
``mc2/moe_distribute_combine_setup/op_kernel/``: the entry ``moe_distribute_combine_setup.cpp``
(``HasTp`` false), ``MoeDistributeCombineSetup`` of ``arch22/moe_distribute_combine_setup.h``
(``Init``, ``InitStatusTargetSum``, ``SplitCoreCal``, ``BuffInit``, ``Dispatch``,
``ExpertAlltoAllDispatch``, ``SetStatus``, ``Process``), the tiling structs and ``BatchWriteItem``
of ``moe_distribute_combine_setup_tiling_data.h`` (``moe_distribute_base.h`` holds the context
types and the URMA helpers of the arch35 build, none of which the arch22 kernels call); the host
``MoeDistributeCombineSetupTilingBase`` / ``...TilingA3`` of ``op_host/op_tiling/``
(``moe_distribute_combine_setup_tiling_base.cpp``, ``arch22/..._tiling_arch22.cpp``) and the
shapes of ``op_host/moe_distribute_combine_setup_infershape.cpp``;
``mc2/moe_distribute_combine_teardown/op_kernel/``: the entry ``moe_distribute_combine_teardown.cpp``
and ``MoeDistributeCombineTeardown`` of ``arch22/moe_distribute_combine_teardown.h`` (``Init``,
``SplitCoreCal``, ``AlltoAllBuffInit``, ``WaitDispatch``, ``LocalWindowCopy``, ``Process``), its
tiling struct and its host tiling (``..._tiling_base.cpp``, ``arch22/..._tiling_arch22.cpp``).
docs/notes/mc2-kernels.md, section 22.

What it does: the combine of an expert-parallel MoE layer in two launches. The setup kernel
(on each expert rank) sends, for every local expert and every source rank, the rows the experts
computed for that rank with one Hccl AI CPU ``BatchWrite`` (an A3 item: bytes, source, destination)
into the source rank's In window, at slot ``epRankId * moeExpertPerRankNum + expertIdx`` of the
data half ``dataState * totalWinSize / 2``; then, on the same queue, one more item per peer that
copies a 1.0f from its own Exp window (``1000 KB``) into the peer's Exp window at ``epRankId *
512`` of the state half ``dataState * 350 KB``; ``SyncAll``, ``Finalize<false>`` (nobody Waits:
the peers poll). The teardown kernel (no Hccl object: the window context only) flips each core's
0/1 state at ``950 KB + coreIdx * 512`` of the Exp window, polls the flags of its share of the
peers until they sum to their count, zeroes them, ``SyncAll``, and writes ``x[t] = sum_k
scale[t, k] * row(t, k)`` (FP32, rounded to half), ``row(t, k)`` being row ``expandIdx[t, k]`` of
expert ``expertIds[t, k]``'s slot of its own In window.

What runs unchanged: both kernels' context reads (``localWindowsIn/Exp``,
``remoteRes[r].nextDevicePtr->windowsIn/Exp``), every offset and constant, the state word the
setup reads and the teardown flips, the per-core split of the peers (the setup's rotated by the
rank, the teardown's not), the item fields as the kernels write them (the data items through a
64-byte UB copy with ``type`` = the HcclDataType, the status items field by field in GM), the
item addresses in ``commCmdInfoOut`` (see below), ``queueID = ep % (40 / aivNum)``, the flag sum
of ``WaitDispatch`` (element 0 of every 512-byte slot, within 0.5 of the target), and both host
tilings (checks, ``A``, the ``(A + epWorldSize) * 16`` int32 ``commCmdInfoOut``, the window
budget, ``SetQueueNum(40 / aivNum)``, ``SetCommBlockNum(aivNum)``).

Stand-ins: FP16 only, ``commQuantMode`` 0, no shared experts in the run (their code is ported;
the sample's configuration has ``sharedExpertRankNum`` 0), ``HasTp`` false, the arch35 (950)
build not ported; ``aivNum`` is 4 (A3 has 48 AIV cores); UB buffers are tensors and the pipe
barriers and cache flushes program order. The dispatch before the combine is numpy: it builds
``expandX`` (each expert adds its global id to the rows it got), the cumulative counts of
``assistInfoForCombine`` and ``expandIdx``. ``commCmdInfoOut`` is allocated with room for the
items ``SetStatus`` writes past the ``(A + epWorldSize)`` items that the infershape gives it:
``SetStatus`` starts from ``dataCmdInfoGM_``, which ``Dispatch`` left at item ``(L - 1) * W +
startRankId_``, and adds ``A + startRankId_`` to that (tests/test_combine_setup.py runs the exact
size and checks the bounds report).

Run: ``python samples/mc2_moe_distribute_combine_setup.py`` (4 emulated ranks),
``python -m hccl_py run -n 2 --backend gloo samples/mc2_moe_distribute_combine_setup.py``.
"""

from ctypes import Structure, c_bool, c_uint64

import numpy as np
import torch
from _common import WORLD_GROUP, compare, f32, i32, on_device, run_sample, zeros
from _mc2 import member_addresses, moe_inputs, typed_fields, uint32_fields

import hccl_py as hp
from hccl_py import Hccl, HcclDataType, Mc2CcTiling, Mc2CcTilingConfig, Mc2InitTiling, TilingData

PLATFORM = "A3"
RUN_KWARGS = {"buffsize_mb": 2}
# arch22/moe_distribute_combine_setup.h, arch22/moe_distribute_combine_teardown.h
STATE_OFFSET = 512
UB_ALIGN = 32
WIN_STATE_OFFSET = 350 * 1024
STATE_WIN_OFFSET = 950 * 1024
COMBINE_STATE_OFFSET = 0
SDMA_STATUS_WIN_OFFSET = 1000 * 1024
LOCAL_STREAM_MAX_NUM = 40
ITEM = 64  # sizeof(BatchWriteItem)
FLOAT_ONE = 0x3F800000
# host: the tilings' constants
OP_TYPE_BATCH_WRITE = 18
OP_TYPE_ALL_TO_ALL = 8  # the value of HCCL_CMD_ALLTOALLV, whatever the name says
MIN_GROUP_EP_SIZE, MAX_GROUP_EP_SIZE, MAX_MOE_EXPERT_NUM = 2, 384, 512
MAX_SHARED_EXPERT_NUM, MIN_H, MAX_H, MAX_BS, MAX_K = 4, 1024, 8192, 512, 16
COMM_CMD_INFO_SIZE, ASSIST_INFO_NUM_PER_A, HCCL_BUFFER_SIZE = 16, 128, 44
MIN_AVAILABLE_BUFF_SIZE = 2
HCCL_BUFFSIZE = RUN_KWARGS["buffsize_mb"] << 20  # GetMaxWindowSize()
AIV_NUM = 4  # stand-in for GetCoreNumAiv()
UB_SIZE = 192 * 1024
# the sample's shapes
BS, K, H, LOCAL_EXPERTS = 4, 3, MIN_H, 2


class MoeDistributeCombineSetupInfo(Structure):
    _fields_ = [
        *uint32_fields("epWorldSize", "epRankId", "expertShardType", "sharedExpertNum"),
        *uint32_fields("sharedExpertRankNum", "moeExpertNum", "moeExpertPerRankNum"),
        *uint32_fields("commQuantMode", "globalBs", "bs", "k", "h", "a", "aivNum"),
        *typed_fields(c_uint64, "totalUbSize", "totalWinSize"),
    ]


class MoeDistributeCombineSetupTilingData(TilingData):
    _fields_ = [
        ("mc2InitTiling", Mc2InitTiling),
        ("mc2CcTiling", Mc2CcTiling),
        ("moeDistributeCombineSetupInfo", MoeDistributeCombineSetupInfo),
    ]


class MoeDistributeCombineTeardownInfo(Structure):
    _fields_ = [
        *uint32_fields("epWorldSize", "epRankId", "expertShardType", "sharedExpertNum"),
        *uint32_fields("sharedExpertRankNum", "moeExpertNum", "moeExpertPerRankNum"),
        *uint32_fields("globalBs", "bs", "k", "h", "aivNum"),
        *typed_fields(c_bool, "isActiveMask", "hasSharedExpertX"),
        *typed_fields(c_uint64, "totalUbSize", "totalWinSize"),
    ]


class MoeDistributeCombineTeardownTilingData(TilingData):
    _fields_ = [
        ("mc2InitTiling", Mc2InitTiling),
        ("mc2CcTiling", Mc2CcTiling),
        ("moeDistributeCombineTeardownInfo", MoeDistributeCombineTeardownInfo),
    ]


def SetValue(addr: hp.GmAddr, value: int, nbytes: int) -> None:
    """``GlobalTensor<uint32_t / uint64_t>::SetValue(0, value)``: an unsigned scalar store to GM."""
    raw = np.frombuffer(int(value).to_bytes(nbytes, "little"), dtype=np.uint8).copy()
    hp.gm_tensor(addr, torch.uint8, nbytes)[:] = torch.from_numpy(raw)


class WindowAddresses:
    """The two kernels' ``GetWinAddrByRankId`` / ``GetWinStateAddrByRankId`` (the same code)."""

    def GetWinAddrByRankId(self, rankId, expertLocalId=0):
        if self.epRankId_ == rankId:
            base = self.epWinContext_.localWindowsIn
        else:
            base = self.epWinContext_.remoteRes[rankId].nextDevicePtr.windowsIn
        return base + self.winDataSizeOffset_ + expertLocalId * self.expertPerSizeOnWin_

    def GetWinStateAddrByRankId(self, rankId):
        if self.epRankId_ == rankId:
            base = self.epWinContext_.localWindowsExp
        else:
            base = self.epWinContext_.remoteRes[rankId].nextDevicePtr.windowsExp
        return base + COMBINE_STATE_OFFSET + self.dataState_ * WIN_STATE_OFFSET


class MoeDistributeCombineSetup(WindowAddresses):
    """``MoeDistributeCombineSetup<half, int32_t>`` (arch22), one object per AIV core."""

    def Init(self, expandX, expertIds, assistInfoForCombine, quantExpandX, commCmdInfoOut,
             workspaceGM, tilingData, mc2InitTiling, mc2CcTiling):  # fmt: skip
        info = tilingData.moeDistributeCombineSetupInfo
        self.coreIdx_ = hp.GetBlockIdx()
        self.epRankId_ = info.epRankId
        self.hcclContext_ = hp.GetHcclContext(0)
        self.epWinContext_ = hp.GetHcclContext(0)
        statusDataSpaceGm = self.epWinContext_.localWindowsExp
        selfDataStatusTensor = i32(statusDataSpaceGm + STATE_WIN_OFFSET + self.coreIdx_ * 512, 1)
        self.sdmaStateGM_ = statusDataSpaceGm + SDMA_STATUS_WIN_OFFSET
        self.sdmaStatusGlobal_ = i32(self.sdmaStateGM_, 1)
        self.InitStatusTargetSum()
        self.dataState_ = int(selfDataStatusTensor[0])
        self.commCmdInfoOutGM_ = commCmdInfoOut
        self.expandXGM_ = expandX
        self.assistInfoForCombineGM_ = assistInfoForCombine
        self.axisH_, self.axisA_, self.aivNum_ = info.h, info.a, info.aivNum
        self.sharedExpertRankNum_ = info.sharedExpertRankNum
        self.moeExpertPerRankNum_ = info.moeExpertPerRankNum
        self.worldSize_ = info.epWorldSize
        self.axisMaxBS_ = info.globalBs // self.worldSize_
        self.moeSendNum_ = self.worldSize_ * self.moeExpertPerRankNum_
        self.totalWinSize_ = info.totalWinSize
        self.stateOffset_ = STATE_OFFSET // 2 if self.moeSendNum_ > 512 else STATE_OFFSET
        self.expertPerSizeOnWin_ = self.axisMaxBS_ * self.axisH_ * 2
        self.winDataSizeOffset_ = self.dataState_ * (info.totalWinSize // 2)
        self.epWindowGM_ = self.GetWinAddrByRankId(self.epRankId_)
        self.epStatusSpaceGm_ = self.GetWinStateAddrByRankId(self.epRankId_)
        self.epDataOffsetOnWin_ = (
            self.epRankId_ * self.moeExpertPerRankNum_ * self.expertPerSizeOnWin_
        )
        self.epStateOffsetOnWin_ = self.epRankId_ * self.stateOffset_
        self.isShardExpert_ = self.epRankId_ < self.sharedExpertRankNum_
        self.axisHExpandXTypeSize_ = self.axisH_ * 2
        self.queuePerCore_ = LOCAL_STREAM_MAX_NUM // self.aivNum_
        self.batchWriteInfoCnt_ = 0
        self.hccl_ = Hccl()  # Hccl<HCCL_SERVER_TYPE_AICPU>
        self.hccl_.Init(self.hcclContext_, mc2InitTiling)
        self.hccl_.SetCcTiling(mc2CcTiling)
        self.SplitCoreCal()

    def InitStatusTargetSum(self):
        """The 1.0f that every status item copies, at 1000 KB of this rank's Exp window."""
        self.epStateValue_ = FLOAT_ONE
        self.sdmaStatusGlobal_[0] = self.epStateValue_

    def SplitCoreCal(self):
        coreIdxNew = (self.coreIdx_ + self.epRankId_) % self.aivNum_  # rotated by the rank
        self.sendRankNum_ = self.worldSize_ // self.aivNum_
        remainderRankNum = self.worldSize_ % self.aivNum_
        self.startRankId_ = self.sendRankNum_ * coreIdxNew
        if coreIdxNew < remainderRankNum:
            self.sendRankNum_ += 1
            self.startRankId_ += coreIdxNew
        else:
            self.startRankId_ += remainderRankNum
        self.endRankId_ = self.startRankId_ + self.sendRankNum_

    def BuffInit(self):
        """The UB buffers; ``batchItemInfoBuf_`` holds two items (stand-in: zeroed bytes)."""
        self.batchItemInfoBuf_ = np.zeros(2 * ITEM, dtype=np.uint8)

    def Dispatch(self):
        if self.startRankId_ >= self.worldSize_:  # an idle core
            return
        if self.isShardExpert_:
            curRankExpertNum, n = 1, self.worldSize_
        else:
            curRankExpertNum, n = self.moeExpertPerRankNum_, self.moeSendNum_
        assistInfoForCombineLocal_ = i32(self.assistInfoForCombineGM_, n).tolist()
        preCount = 0
        for expertIdx in range(curRankExpertNum):
            self.dataCmdInfoGM_ = (
                self.commCmdInfoOutGM_ + (expertIdx * self.worldSize_ + self.startRankId_) * ITEM
            )
            for ep in range(self.startRankId_, self.endRankId_):
                batchWriteItemStartCnt = self.batchWriteInfoCnt_
                if ep > 0 or expertIdx > 0:
                    preCount = assistInfoForCombineLocal_[expertIdx * self.worldSize_ + ep - 1]
                curTokenNum = (
                    assistInfoForCombineLocal_[expertIdx * self.worldSize_ + ep] - preCount
                )
                if curTokenNum == 0:
                    continue
                self.ExpertAlltoAllDispatch(curTokenNum, preCount, ep, expertIdx)
                sendInfo = self.dataCmdInfoGM_ + batchWriteItemStartCnt * ITEM
                self.hccl_.BatchWrite[True](
                    sendInfo,
                    self.batchWriteInfoCnt_ - batchWriteItemStartCnt,
                    ep % self.queuePerCore_,
                )

    def ExpertAlltoAllDispatch(self, tokenNumLoop, srcStartTokenIdx, ep, expertIdx):
        """One item: rows ``[srcStartTokenIdx, + tokenNumLoop)`` into ``ep``'s slot for us."""
        rankGM = self.GetWinAddrByRankId(ep, expertIdx) + self.epDataOffsetOnWin_
        batchWriteItemAddr = self.dataCmdInfoGM_ + self.batchWriteInfoCnt_ * ITEM
        sourceAddr = self.expandXGM_ + srcStartTokenIdx * self.axisHExpandXTypeSize_
        batchItemInfo = self.batchItemInfoBuf_.view(np.uint32)
        batchItemInfoU64 = self.batchItemInfoBuf_.view(np.uint64)
        batchItemInfo[0] = int(HcclDataType.HCCL_DATA_TYPE_FP16)
        batchItemInfo[7] = tokenNumLoop * self.axisH_ * 2
        batchItemInfoU64[4] = int(sourceAddr)
        batchItemInfoU64[5] = int(rankGM)
        item = torch.from_numpy(self.batchItemInfoBuf_[:ITEM].copy())
        hp.gm_tensor(batchWriteItemAddr, torch.uint8, ITEM)[:] = item  # DataCopyPad
        self.batchWriteInfoCnt_ += 1

    def SetStatus(self):
        if self.startRankId_ >= self.worldSize_:  # an idle core
            return
        batchWriteItemAddr = self.dataCmdInfoGM_ + (self.axisA_ + self.startRankId_) * ITEM
        for i, epIdx in enumerate(range(self.startRankId_, self.endRankId_)):
            self.stateGM_ = self.GetWinStateAddrByRankId(epIdx) + self.epStateOffsetOnWin_
            item = batchWriteItemAddr + i * ITEM
            sourceAddr, dstAddr = int(self.sdmaStateGM_), int(self.stateGM_)
            SetValue(item + 4 * 8, sourceAddr & 0xFFFFFFFF, 4)
            SetValue(item + 4 * 9, sourceAddr >> 32, 4)
            SetValue(item + 4 * 10, dstAddr & 0xFFFFFFFF, 4)
            SetValue(item + 4 * 11, dstAddr >> 32, 4)
            SetValue(item + 4 * 7, 4, 4)  # sizeof(float)
            SetValue(item, int(HcclDataType.HCCL_DATA_TYPE_FP32), 8)
            # the queue of this peer's data items, so that the flag lands after them
            self.hccl_.BatchWrite[True](item, 1, epIdx % self.queuePerCore_)

    def Process(self):
        self.BuffInit()
        self.Dispatch()
        self.SetStatus()  # after AlltoAllBuffInit, which only carves UB
        hp.SyncAll()
        self.hccl_.Finalize[False]()


class MoeDistributeCombineTeardown(WindowAddresses):
    """``MoeDistributeCombineTeardown<half, int32_t>`` (arch22), one object per AIV core."""

    def Init(self, expandX, quantExpandX, expertIds, expandIdx, expertScales, commCmdInfo,
             xActiveMask, sharedExpertX, XOut, workspaceGM, tilingData):  # fmt: skip
        info = tilingData.moeDistributeCombineTeardownInfo
        self.coreIdx_ = hp.GetBlockIdx()
        self.epRankId_ = info.epRankId
        self.epWinContext_ = hp.GetHcclContext(0)
        statusDataSpaceGm = self.epWinContext_.localWindowsExp
        selfDataStatusTensor = i32(statusDataSpaceGm + STATE_WIN_OFFSET + self.coreIdx_ * 512, 1)
        self.dataState_ = int(selfDataStatusTensor[0])
        selfDataStatusTensor[0] = 1 if self.dataState_ == 0 else 0
        self.expertIdsGM_, self.expandIdxGM_ = expertIds, expandIdx
        self.expandScalesGM_, self.expandOutGlobal_ = expertScales, XOut
        self.axisBS_, self.axisH_, self.axisK_ = info.bs, info.h, info.k
        self.sharedExpertNum_ = info.sharedExpertNum
        self.sharedExpertRankNum_ = info.sharedExpertRankNum
        self.moeExpertNum_ = info.moeExpertNum
        self.epWorldSize_ = info.epWorldSize
        self.axisMaxBS_ = info.globalBs // self.epWorldSize_
        self.aivNum_ = info.aivNum
        self.moeExpertPerRankNum_ = 1  # whatever the tiling says
        self.moeSendNum_ = self.epWorldSize_ * self.moeExpertPerRankNum_
        self.stateOffset_ = STATE_OFFSET // 2 if self.moeSendNum_ > 512 else STATE_OFFSET
        self.expertPerSizeOnWin_ = self.axisMaxBS_ * self.axisH_ * 2
        self.winDataSizeOffset_ = self.dataState_ * (info.totalWinSize // 2)
        self.epWindowGM_ = self.GetWinAddrByRankId(self.epRankId_)
        self.epStatusSpaceGm_ = self.GetWinStateAddrByRankId(self.epRankId_)
        self.axisHExpandXTypeSize_ = self.axisH_ * 2
        self.bsKNum_ = self.axisBS_ * self.axisK_
        self.sumTarget_ = 1.0
        self.SplitCoreCal()

    def SplitCoreCal(self):
        self.sendRankNum_ = self.epWorldSize_ // self.aivNum_
        remainderRankNum = self.epWorldSize_ % self.aivNum_
        self.startRankId_ = self.sendRankNum_ * self.coreIdx_
        if self.coreIdx_ < remainderRankNum:
            self.sendRankNum_ += 1
            self.startRankId_ += self.coreIdx_
        else:
            self.startRankId_ += remainderRankNum
        self.endRankId_ = self.startRankId_ + self.sendRankNum_

    def StatusBlocks(self):
        """``sendRankNum_`` 32-byte blocks every ``stateOffset_`` bytes from this core's first
        peer's slot, as WaitDispatch's DataCopyParams (src/dst stride 15 or 7 blocks) reach them."""
        start = self.epStatusSpaceGm_ + self.startRankId_ * self.stateOffset_
        rows = f32(start, self.sendRankNum_ * self.stateOffset_ // 4).view(self.sendRankNum_, -1)
        return rows[:, : UB_ALIGN // 4]

    def FlagSum(self):
        """One pass of the poll: DataCopy, GatherMask of element 0 of each block, Sum."""
        return float(self.StatusBlocks()[:, 0].sum())

    def WaitDispatch(self):
        if self.startRankId_ >= self.epWorldSize_:
            hp.SyncAll()
            return
        minTarget = self.sumTarget_ * self.sendRankNum_ - 0.5
        maxTarget = self.sumTarget_ * self.sendRankNum_ + 0.5
        while not minTarget <= self.FlagSum() <= maxTarget:
            pass
        self.StatusBlocks()[:] = 0  # Duplicate 0, DataCopy back: the next use starts clean
        hp.SyncAll()

    def LocalWindowCopy(self):
        tokenPerAivNum = self.axisBS_ // self.aivNum_
        remainderToken = self.axisBS_ % self.aivNum_
        beginIndex = tokenPerAivNum * self.coreIdx_
        if self.coreIdx_ < remainderToken:
            tokenPerAivNum += 1
            beginIndex = tokenPerAivNum * self.coreIdx_
        else:
            beginIndex += remainderToken
        endIndex = beginIndex + tokenPerAivNum
        tokenOffset = 0
        indexCountsLocal = i32(self.expandIdxGM_, self.bsKNum_).tolist()
        expertIdsLocal = i32(self.expertIdsGM_, self.bsKNum_).tolist()
        expandScalesLocal = f32(self.expandScalesGM_, self.bsKNum_).tolist()
        for tokenIndex in range(beginIndex, endIndex):
            index = tokenIndex * self.axisK_
            sumFloatBufLocal = torch.zeros(self.axisH_, dtype=torch.float32, device=hp.device())
            for _ in range(self.axisK_):
                moeExpert = expertIdsLocal[index]
                scaleVal = expandScalesLocal[index]
                wAddr = (
                    self.epWindowGM_
                    + self.expertPerSizeOnWin_
                    * self.moeExpertPerRankNum_
                    * self.sharedExpertRankNum_
                    + self.expertPerSizeOnWin_ * moeExpert
                    + indexCountsLocal[index] * self.axisHExpandXTypeSize_
                    + tokenOffset * 2
                )
                tmpUb = hp.gm_tensor(wAddr, torch.float16, self.axisH_).clone()
                sumFloatBufLocal += tmpUb.float() * scaleVal
                index += 1
            if self.sharedExpertRankNum_ > 0:
                # the shared expert rank that got this token, and the token's row there
                S, bs, r = self.sharedExpertRankNum_, self.axisBS_, self.epRankId_
                temp = r * bs // S
                moeOnShareRank = -(-(tokenIndex + 1 + temp) * S // bs) - 1 - r
                preCnt = (moeOnShareRank + r) * bs // S - r * bs // S
                shareAddr = (
                    self.epWindowGM_
                    + moeOnShareRank * self.expertPerSizeOnWin_ * self.moeExpertPerRankNum_
                    + ((tokenIndex - preCnt) * self.axisH_ + tokenOffset) * 2
                )
                sumFloatBufLocal += hp.gm_tensor(shareAddr, torch.float16, self.axisH_).float()
            outGM = self.expandOutGlobal_ + (tokenIndex * self.axisH_ + tokenOffset) * 2
            hp.gm_tensor(outGM, torch.float16, self.axisH_)[:] = sumFloatBufLocal.half()

    def Process(self):
        self.WaitDispatch()  # after AlltoAllBuffInit, which only carves UB
        self.LocalWindowCopy()


def moe_distribute_combine_setup(expandX, expertIds, assistInfoForCombine, quantExpandX,
                                 commCmdInfoOut, workspaceGM, tilingGM):  # fmt: skip
    tilingData = hp.GET_TILING_DATA_WITH_STRUCT(MoeDistributeCombineSetupTilingData, tilingGM)
    mc2InitTiling, mc2CcTiling = member_addresses(
        tilingGM, MoeDistributeCombineSetupTilingData, "mc2InitTiling", "mc2CcTiling"
    )
    op = MoeDistributeCombineSetup()
    op.Init(expandX, expertIds, assistInfoForCombine, quantExpandX, commCmdInfoOut, workspaceGM,
            tilingData, mc2InitTiling, mc2CcTiling)  # fmt: skip
    op.Process()


def moe_distribute_combine_teardown(expandX, quantExpandX, expertIds, expandIdx, expertScales,
                                    commCmdInfo, xActiveMask, sharedExpertX, XOut, workspaceGM,
                                    tilingGM):  # fmt: skip
    tilingData = hp.GET_TILING_DATA_WITH_STRUCT(MoeDistributeCombineTeardownTilingData, tilingGM)
    op = MoeDistributeCombineTeardown()
    op.Init(expandX, quantExpandX, expertIds, expandIdx, expertScales, commCmdInfo, xActiveMask,
            sharedExpertX, XOut, workspaceGM, tilingData)  # fmt: skip
    op.Process()


# ---------------------------------------------------------------- host tilings
def CheckHcclBuffSize(info) -> int:
    """Both tilings: the window half that the ops may use, checked against their layout."""
    hcclBuffSize = HCCL_BUFFSIZE // 2
    localExpertNum = info.moeExpertNum // (info.epWorldSize - info.sharedExpertRankNum)
    maxBs = info.globalBs // info.epWorldSize if info.globalBs else info.bs
    align = -(-(-(-2 * info.h // 32) * 32 + HCCL_BUFFER_SIZE) // 512) * 512
    golden = MIN_AVAILABLE_BUFF_SIZE * localExpertNum * maxBs * info.epWorldSize * align
    golden += (info.k + info.sharedExpertNum) * maxBs * (-(-2 * info.h // 512) * 512)
    assert hcclBuffSize >= golden, f"HCCL_BUFFSIZE [{hcclBuffSize}] < [{golden}]"
    return hcclBuffSize


def CheckAttrs(info, epWorldSize, epRankId, moeExpertNum, sharedExpertNum, sharedExpertRankNum):
    """The attribute checks both tilings make (A3: expertShardType 0, commQuantMode 0)."""
    assert MIN_GROUP_EP_SIZE <= epWorldSize <= MAX_GROUP_EP_SIZE, epWorldSize
    assert 0 <= epRankId < epWorldSize and 0 < moeExpertNum <= MAX_MOE_EXPERT_NUM
    assert 0 <= sharedExpertNum <= MAX_SHARED_EXPERT_NUM
    assert 0 <= sharedExpertRankNum <= epWorldSize // 2
    assert moeExpertNum % (epWorldSize - sharedExpertRankNum) == 0
    info.epWorldSize, info.epRankId, info.moeExpertNum = epWorldSize, epRankId, moeExpertNum
    info.expertShardType = 0
    info.sharedExpertNum, info.sharedExpertRankNum = sharedExpertNum, sharedExpertRankNum
    moe_rank = epRankId >= sharedExpertRankNum
    info.moeExpertPerRankNum = (
        moeExpertNum // (epWorldSize - sharedExpertRankNum) if moe_rank else 1
    )


def MoeDistributeCombineSetupTilingFunc(rank, n, a, globalBs, assistLen, cmdLen):
    """MoeDistributeCombineSetupTilingFuncImpl with the A3 checks; returns (tiling, blockDim)."""
    tiling = MoeDistributeCombineSetupTilingData()
    info = tiling.moeDistributeCombineSetupInfo
    CheckAttrs(info, n, rank, LOCAL_EXPERTS * n, 0, 0)
    info.commQuantMode, info.globalBs = 0, globalBs
    assert MIN_H <= H <= MAX_H and 0 < BS <= MAX_BS and 0 < K <= min(MAX_K, info.moeExpertNum)
    assert globalBs == 0 or BS * n <= globalBs <= MAX_BS * n
    info.h, info.bs, info.k = H, BS, K
    # CheckTensorShapeSizeAInMoeRank (no shared expert rank here)
    L = info.moeExpertPerRankNum
    assert a >= (globalBs * min(L, K) if globalBs else BS * n * min(L, K))
    info.a = a
    # CheckCalcTensorShapeSizeAndSetTilingData: the infershape's sizes
    assert assistLen == a * ASSIST_INFO_NUM_PER_A
    assert cmdLen == (a + n) * COMM_CMD_INFO_SIZE, "commCmdInfoOut must be (A + epWorldSize) * 16"
    info.totalWinSize = CheckHcclBuffSize(info)
    info.totalUbSize, info.aivNum = UB_SIZE, AIV_NUM  # SetPlatformInfo: blockDim = aivNum
    # SetHcommCfg (arch22)
    mc2CcTilingConfig = Mc2CcTilingConfig(
        WORLD_GROUP, OP_TYPE_BATCH_WRITE, "BatchWrite=level0:fullmesh", 0
    )
    assert mc2CcTilingConfig.SetQueueNum(LOCAL_STREAM_MAX_NUM // AIV_NUM) == 0
    assert mc2CcTilingConfig.SetCommBlockNum(AIV_NUM) == 0
    assert mc2CcTilingConfig.GetTiling(tiling.mc2InitTiling) == 0
    assert mc2CcTilingConfig.GetTiling(tiling.mc2CcTiling) == 0
    return tiling, AIV_NUM


def MoeDistributeCombineTeardownTilingFunc(rank, n, globalBs):
    """MoeDistributeCombineTeardownTilingFuncImpl with the A3 checks; returns (tiling, blockDim)."""
    tiling = MoeDistributeCombineTeardownTilingData()
    info = tiling.moeDistributeCombineTeardownInfo
    CheckAttrs(info, n, rank, LOCAL_EXPERTS * n, 0, 0)
    info.globalBs, info.bs, info.k, info.h = globalBs, BS, K, H
    info.isActiveMask = info.hasSharedExpertX = False
    info.totalWinSize = CheckHcclBuffSize(info)
    info.totalUbSize, info.aivNum = UB_SIZE, AIV_NUM
    mc2CcTilingConfig = Mc2CcTilingConfig(
        WORLD_GROUP, OP_TYPE_ALL_TO_ALL, "AlltoAll=level0:fullmesh;level1:pairwise"
    )
    assert mc2CcTilingConfig.GetTiling(tiling.mc2InitTiling) == 0
    assert mc2CcTilingConfig.GetTiling(tiling.mc2CcTiling) == 0
    return tiling, AIV_NUM


# ---------------------------------------------------------------- what a dispatch gave (numpy)
def inputs(rank: int, launch: int) -> tuple[np.ndarray, np.ndarray]:
    """Rank ``rank``'s tokens (BS, H) and expert ids (BS, K) of ``L * n`` experts."""
    return moe_inputs(rank, launch, BS, K, H, LOCAL_EXPERTS)


def expert_scales(rank: int, launch: int) -> np.ndarray:
    """The router's weights (BS, K): quarters, so every product and sum is exact in FP32."""
    t, k = np.meshgrid(np.arange(BS), np.arange(K), indexing="ij")
    return ((1 + (rank + launch + t + 2 * k) % 4) / 4).astype(np.float32)


def expand_idx(ids: np.ndarray) -> np.ndarray:
    """Each (token, k)'s position among this rank's pairs routed to the same expert."""
    flat = ids.reshape(-1)
    same = flat[:, None] == flat[None, :]
    return np.tril(same, -1).sum(axis=1).astype(np.int32)


def combine_inputs(rank: int, n: int, launch: int, a: int) -> tuple[np.ndarray, np.ndarray]:
    """This expert rank's expandX (A, H), rows by [local expert][source rank] after the
    experts (expert g adds g), and assistInfoForCombine (A * 128): the cumulative counts."""
    rows, counts = [], []
    for e in range(LOCAL_EXPERTS):
        g = rank * LOCAL_EXPERTS + e
        for s in range(n):
            x, ids = inputs(s, launch)
            pairs = np.flatnonzero(ids.reshape(-1) == g)
            rows.append(x[pairs // K].astype(np.float32) + g)
            counts.append(len(pairs))
    expand_x = np.zeros((a, H), dtype=np.float16)
    got = np.concatenate(rows)
    expand_x[: len(got)] = got
    assist = np.zeros(a * ASSIST_INFO_NUM_PER_A, dtype=np.int32)
    assist[: len(counts)] = np.cumsum(counts)
    return expand_x, assist


def reference(rank: int, launch: int) -> np.ndarray:
    """numpy: each token's K expert answers (x + expert id), weighted by the scales, summed."""
    x, ids = inputs(rank, launch)
    answers = x.astype(np.float32)[:, None, :] + ids.astype(np.float32)[:, :, None]
    return (expert_scales(rank, launch)[:, :, None] * answers).sum(axis=1).astype(np.float16)


def launch_combine(launch: int, cmd_items: int | None = None) -> torch.Tensor:
    """One setup and one teardown launch of this rank; its XOut. ``cmd_items``: the items
    ``commCmdInfoOut`` has room for (default: what the kernel writes, past the infershape's)."""
    rank, n = hp.get_rank(), hp.get_world_size()
    globalBs = BS * n
    a = globalBs * min(LOCAL_EXPERTS, K)
    expand_x, assist = combine_inputs(rank, n, launch, a)
    cmd_len = (a + n) * COMM_CMD_INFO_SIZE
    tiling, blockDim = MoeDistributeCombineSetupTilingFunc(
        rank, n, a, globalBs, assist.size, cmd_len
    )
    items = a + (LOCAL_EXPERTS + 1) * n if cmd_items is None else cmd_items
    comm_cmd_info = zeros(items * COMM_CMD_INFO_SIZE, dtype=torch.int32)
    token_msg = -(-(-(-H // 32) * 32 + -(-H // 8) * 4) // 512) * 512
    quant_expand_x = zeros(a, token_msg, dtype=torch.int8)
    x, ids = inputs(rank, launch)
    expand_x_t, ids_t = on_device(expand_x), on_device(ids)
    hp.launch(moe_distribute_combine_setup, expand_x_t, ids_t, on_device(assist),
              quant_expand_x, comm_cmd_info, None, tiling, block_dim=blockDim,
              kernel_type="aiv")  # fmt: skip
    tiling, blockDim = MoeDistributeCombineTeardownTilingFunc(rank, n, globalBs)
    x_out = zeros(BS, H)
    hp.launch(moe_distribute_combine_teardown, expand_x_t, quant_expand_x, ids_t,
              on_device(expand_idx(ids)), on_device(expert_scales(rank, launch)), comm_cmd_info,
              None, None, x_out, None, tiling, block_dim=blockDim, kernel_type="aiv")  # fmt: skip
    return x_out


def main() -> list[str]:
    rank = hp.get_rank()
    lines = []
    for launch in (1, 2):  # the state flips: the second launch uses the other halves
        x_out = launch_combine(launch)
        lines.append(compare(f"launch-{launch}", x_out, reference(rank, launch)))
    return lines


if __name__ == "__main__":
    run_sample(main, platform=PLATFORM, **RUN_KWARGS)
