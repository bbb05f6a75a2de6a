"""Port of ops-transformer's MoeEpDispatch (the Hcomm window dispatch), call for call.

Source: ops-transformer, ``mc2/moe_ep_dispatch/op_kernel/moe_ep_dispatch.h``
(``MoeEpDispatch``: ``Init``, ``SplitToCore``, ``BufferInit``, ``ResetCounters``,
``CalSendCntPerRank``, ``CalSendCntPerExpert``, ``CalSendCnt``, ``Communication``,
``GetRecvCount``, ``SetRecvNumPerExpert``, ``SetRecvNumPerRank``, ``DedupAndSendDirect``,
``WriteSlotToLocal``, ``WriteToRemoteWindow``, ``GetSlotStartNum``, ``SendPhase``,
``ProcessDirect``, ``Process``), ``moe_ep_dispatch.cpp``, ``moe_ep_dispatch_base.h``
(``GetWinAddrByRankId``, ``GetCommHandle``), ``moe_ep_dispatch_tiling.h``, the context
``Mc2Aclnn::MoeCommContext`` of ``mc2/common/op_kernel/mc2_moe_context.h`` and the host
tiling ``op_host/op_tiling/moe_ep_dispatch_tiling.cpp`` (``CheckCommAttr``,
``CheckComputeAttr``, ``CheckInputTensor``'s ``perSlotBytes``, ``SetPlatformAndNetworkInfo``,
``CheckWinSize``, ``CalcDispatchWorkspace``). The kernel has no Hccl object: it reads the
context's table of window addresses and writes into peers' windows with
``Hcomm<COMM_PROTOCOL_UBC_CTP>::WriteNbi`` and ``Drain``.

What runs unchanged: the window layout of ``CheckWinSize`` (per-source 512-byte count
notify words and per-source per-expert counts at ``cntWinStateOffset``, per-source
512-byte slot notify words at ``slotWinStateOffset``, ``numMaxTokensPerRank`` slots of
``perSlotBytes`` per source rank at ``winDataOffset``), the workspace layout (per-core
per-rank counters, the ``{flag, count}`` blocks at a 512-byte stride, per-expert counts, the
slot stash), the counting split by tokens over the AIV cores with the status flag 1 added
by core 0 alone (atomic adds of every core), the count exchange split by ranks (counts,
``Drain``, then the 8-byte ``{1, count}`` notify; the own rank by MTE copies), the last
core's wait for the flag sum (int32 ones summed as float denormals, as the kernel's
``ReduceSum`` does), ``numRecvPerExpert`` / ``numRecvPerRank`` and the status clear, the
slot assignment (a core's first slot per rank is the sum of the earlier cores' counters;
one slot per (token, rank), shared by the token's experts on that rank; -1 for an invalid
expert), the slot contents (x, then at ``hAlignSize`` the top-k ids, the top-k weights and
``{epRankId, tokenId}``), own-rank slots straight into the own window and the others into
the workspace, then after ``SyncAll`` the data ``WriteNbi`` in ``CQE_MAX_WRITE_SIZE``
pieces, ``Drain`` and the slot notify (own rank: an int32 1). Both ``IsCached`` paths run:
odd launches assign slots, even launches replay the previous routing with its
``dstBufferSlotIdx`` as ``cachedSlotIdx`` (no top-k weights, as the tiling requires).

Stand-ins: FP16 tokens instead of BF16 (no FP8, no scales, ``IsMxQuant`` false), no
``DoCpuSync`` (no host-pinned counter), network mode DIRECT only; small sizes and three
AIV cores (``GetCoreNumAiv``); the vector counting of ``CalSendCntPerExpert`` /
``CalSendCntPerRank`` (histograms, compares, GatherMask) is torch over the core's tokens; UB
buffers are torch tensors; the workspace is its user part only (no 16 MiB system part).
``MoeCommContext`` is filled on the host as ``Mc2Context::GetHcclCommResource`` does
(``hp.HcclChannelAcquire``, ``hp.HcclChannelGetHcclBuffer``, ``hp.HcclGetHcclBuffer``) and
the kernel writes with ``hp.Hcomm[hp.COMM_PROTOCOL_UBC_CTP]`` (docs/hcomm.md): a write is in
flight until the scheduler lands it or ``Drain`` waits for it, and its source is read when
it lands, so the data ``Drain`` guards the next launch's rewrite of the slot stash (a
dropped one is caught by ``explore=16``). The count ``Drain`` is equivalent: the notify
follows on the same channel, which lands in order (URMA_DEFAULT_CFG). Ascend 950's UBC_CTP
runs here on the A3 platform's windows (the HCCL buffers). The receiver is ``MoeEpDispatchEpilogue.WaitDispatch`` of
``mc2/moe_ep_dispatch_epilogue/op_kernel/moe_ep_dispatch_epilogue.h`` (poll the slot notify
sum, clear it) followed by a plain copy of each source's slots, instead of the epilogue's
per-expert reordering: it gives the tokens the check compares.

Run: ``python samples/mc2_moe_ep_dispatch.py`` (4 emulated ranks),
``python -m hccl_py run -n 2 --backend gloo samples/mc2_moe_ep_dispatch.py``.
"""

from ctypes import c_uint64

import numpy as np
import torch
from _common import Ceil, compare, i32, on_device, run_sample
from _mc2 import moe_inputs, split_to_core, uint32_fields

import hccl_py as hp
from hccl_py import TilingData

PLATFORM = "A3"
RUN_KWARGS = {"buffsize_mb": 2}
BS, K, H = 4, 3, 48  # tokens per rank, experts per token, hidden size
NUM_MAX_TOKENS_PER_RANK = 5  # numMaxTokensPerRank: the window's slots per source rank
LOCAL_EXPERTS = 2  # numLocalExperts
AIV_NUM = 3  # GetCoreNumAiv stand-in
CCL_BUFFER_SIZE = 2 * 1024 * 1024  # the ccl_buffer_size attribute (HCCL_BUFFSIZE)

UB_ALIGN = 32
WIN_ADDR_ALIGN = 512
ALIGNED_LEN_256 = 256
TOPK_INFO_SIZE = 4
UB_STRIDE = 8
PER_GROUP_SIZE = 40 * 1024
CQE_MAX_WRITE_SIZE = 256 * 1024 * 1024
MAX_OUT_DTYPE_SIZE = 2
METADATA_DTYPE_SIZE = 4
SIZEOF_X = 2  # FP16


class MoeEpCommonTilingData(TilingData):
    _fields_ = uint32_fields(
        "epWorldSize",
        "epRankId",
        "numExperts",
        "numLocalExperts",
        "numTokens",
        "hidden",
        "topK",
        "numMaxTokensPerRank",
        "scalesBytes",
        "perSlotBytes",
        "expertAlignment",
    )


class MoeEpDispatchInfo(TilingData):
    _fields_ = [
        ("cfg", MoeEpCommonTilingData),
        *uint32_fields(
            "doCpuSync",
            "isCached",
            "isTopkWeights",
            "isMxQuant",
            "networkMode",
            "numScaleupRanks",
            "numScaleoutRanks",
            "numAivStage1",
            "numAivStage2",
            "aivNum",
        ),
        *[
            (name, c_uint64)
            for name in (
                "hostPinnedCounterAddr",
                "cntWinStateOffset",
                "slotWinStateOffset",
                "winDataOffset",
                "totalWinSizeEp",
                "totalUbSize",
            )
        ],
    ]


class MoeEpDispatchTilingData(TilingData):
    _fields_ = [("moeEpDispatchInfo", MoeEpDispatchInfo)]


# ---------------------------------------------------------------- host tiling


def AlignUpWin(data: int) -> int:
    return Ceil(data, WIN_ADDR_ALIGN) * WIN_ADDR_ALIGN


def MoeEpDispatchTilingFunc(
    epWorldSize: int,
    epRankId: int,
    numExperts: int,
    x: tuple,
    topkIdx: tuple,
    weights: bool,
    cached: bool,
) -> tuple[MoeEpDispatchTilingData, int]:
    """The host tiling: the tiling data and the workspace size (its user part)."""
    tiling = MoeEpDispatchTilingData()
    info = tiling.moeEpDispatchInfo
    # CheckCommAttr
    assert 2 <= epWorldSize <= 128 and 0 <= epRankId < epWorldSize
    info.cfg.epWorldSize, info.cfg.epRankId = epWorldSize, epRankId
    # CheckComputeAttr (expert_alignment 1, do_cpu_sync false)
    assert numExperts % epWorldSize == 0 and not (cached and weights)
    info.cfg.numExperts = numExperts
    info.cfg.numLocalExperts = numExperts // epWorldSize
    info.cfg.numMaxTokensPerRank = NUM_MAX_TOKENS_PER_RANK
    info.cfg.expertAlignment = 1
    info.doCpuSync, info.isCached = 0, int(cached)
    # CheckInputTensor
    assert 0 < x[0] <= NUM_MAX_TOKENS_PER_RANK and x[0] == topkIdx[0] and 0 < topkIdx[1] <= 32
    info.cfg.numTokens, info.cfg.hidden, info.cfg.topK = x[0], x[1], topkIdx[1]
    hAlign32 = Ceil(info.cfg.hidden * MAX_OUT_DTYPE_SIZE, UB_ALIGN) * UB_ALIGN
    kAlign32 = Ceil(info.cfg.topK * METADATA_DTYPE_SIZE, UB_ALIGN) * UB_ALIGN
    info.cfg.perSlotBytes = AlignUpWin(hAlign32 + 0 + kAlign32 * 2 + UB_ALIGN)
    info.isTopkWeights = int(weights)
    # SetPlatformAndNetworkInfo
    info.networkMode = int(epWorldSize > 128)
    info.numScaleupRanks, info.numScaleoutRanks = epWorldSize, 1
    info.aivNum = AIV_NUM
    info.totalUbSize = 248 * 1024
    # CheckWinSize
    nmt, perSlotBytes = info.cfg.numMaxTokensPerRank, info.cfg.perSlotBytes
    cntWinStateSize = (
        epWorldSize * AlignUpWin(info.cfg.numLocalExperts * 4) + epWorldSize * WIN_ADDR_ALIGN
    )
    dispatchWinStateSize = cntWinStateSize + epWorldSize * WIN_ADDR_ALIGN
    combineWinStateSize = nmt * info.cfg.topK * WIN_ADDR_ALIGN + epWorldSize * WIN_ADDR_ALIGN
    dispatchWinDataSize = epWorldSize * nmt * perSlotBytes
    hiddenAlign = Ceil(info.cfg.hidden * MAX_OUT_DTYPE_SIZE, UB_ALIGN) * UB_ALIGN
    combineWinDataSize = nmt * info.cfg.topK * AlignUpWin(hiddenAlign + UB_ALIGN)
    totalStateWinSizeEp = dispatchWinStateSize + combineWinStateSize
    assert dispatchWinDataSize + combineWinDataSize + totalStateWinSizeEp <= CCL_BUFFER_SIZE
    info.totalWinSizeEp = CCL_BUFFER_SIZE
    info.cntWinStateOffset = 0
    info.slotWinStateOffset = cntWinStateSize
    info.winDataOffset = totalStateWinSizeEp
    # CalcDispatchWorkspace (without SYSTEM_NEED_WORKSPACE)
    counterBytes = info.aivNum * AlignUpWin(epWorldSize * 4)
    sendCntBytes = counterBytes + epWorldSize * WIN_ADDR_ALIGN + AlignUpWin(numExperts * 4)
    workspace = sendCntBytes + UB_ALIGN + epWorldSize * nmt * perSlotBytes
    return tiling, workspace


# ---------------------------------------------------------------- the kernel


class MoeCommContext:
    """``Mc2Aclnn::MoeCommContext``, filled on the host as ``Mc2Context::GetHcclCommResource``
    does: a channel per peer (``HcclChannelAcquire``) and every rank's HCCL buffer."""

    def __init__(self) -> None:
        self.epRankId = hp.get_rank()
        n = hp.get_world_size()
        descs = [hp.HcclChannelDesc(r) for r in range(n) if r != self.epRankId]
        self.hcommHandle = hp.HcclChannelAcquire(None, hp.COMM_ENGINE_AIV, descs, len(descs))
        self.epHcclBuffer = [None] * n
        for desc, channel in zip(descs, self.hcommHandle, strict=True):
            self.epHcclBuffer[desc.remoteRank] = hp.HcclChannelGetHcclBuffer(None, channel)[0]
        self.epHcclBuffer[self.epRankId] = hp.HcclGetHcclBuffer()[0]


def GetWinAddrByRankId(ctx: MoeCommContext, rankId: int, offset: int) -> hp.GmAddr:
    return ctx.epHcclBuffer[rankId] + offset


def GetCommHandle(ctx: MoeCommContext, localRankId: int, rankId: int) -> int:
    index = rankId - 1 if rankId > localRankId else rankId
    return ctx.hcommHandle[index]


def blocks(addr: hp.GmAddr, n: int) -> torch.Tensor:
    """``n`` 32-byte blocks at a 512-byte stride (the DataCopyParams of the status words)."""
    return i32(addr, n * WIN_ADDR_ALIGN // 4).view(n, WIN_ADDR_ALIGN // 4)[:, :UB_STRIDE]


class MoeEpDispatch:
    def Init(self, context, x, topkIdx, topkWeights, scales, cachedSlotIdx, numRecvPerRank,
             numRecvPerExpert, dstBufferSlotIdx, workspaceGM, tilingData) -> None:  # fmt: skip
        self.aivId_ = hp.GetBlockIdx()
        self.mc2Context_ = context
        self.epRankId_ = self.mc2Context_.epRankId
        info = tilingData.moeEpDispatchInfo
        self.IsCached, self.IsTopkWeights = bool(info.isCached), bool(info.isTopkWeights)
        self.axisBS_, self.axisH_, self.axisK_ = info.cfg.numTokens, info.cfg.hidden, info.cfg.topK
        self.epWorldSize_ = info.cfg.epWorldSize
        self.moeExpertNum_ = info.cfg.numExperts
        self.moeExpertNumPerRank_ = info.cfg.numLocalExperts
        self.axisMaxBS_ = info.cfg.numMaxTokensPerRank
        self.perSlotBytes_ = info.cfg.perSlotBytes
        self.aivNum_ = info.aivNum
        self.cntWinStateOffset_ = info.cntWinStateOffset
        self.slotWinStateOffset_ = info.slotWinStateOffset
        self.winDataOffset_ = info.winDataOffset

        self.hAlignSize_ = Ceil(self.axisH_ * SIZEOF_X, UB_ALIGN) * UB_ALIGN
        kAlignSize = Ceil(self.axisK_ * TOPK_INFO_SIZE, UB_ALIGN) * UB_ALIGN
        self.axisKAlign_ = kAlignSize // TOPK_INFO_SIZE
        self.metaOffset_ = self.hAlignSize_
        n = self.epWorldSize_
        self.epWorldSizeAlign_ = Ceil(n * 4, UB_ALIGN) * UB_ALIGN
        self.perGroupTokenNum_ = PER_GROUP_SIZE // 2 // self.axisK_
        self.perGroupSizeAlign_ = (
            Ceil(self.perGroupTokenNum_ * self.axisK_ * 2, ALIGNED_LEN_256) * ALIGNED_LEN_256
        )
        self.epWorldSizeAlign512_ = Ceil(n * 4, WIN_ADDR_ALIGN) * WIN_ADDR_ALIGN
        self.counterCnt_ = self.epWorldSizeAlign_ // 4
        self.counterAlign512_ = self.epWorldSizeAlign512_ // 4
        self.moeNumPerRankAlign_ = Ceil(self.moeExpertNumPerRank_ * 4, UB_ALIGN) * UB_ALIGN
        self.moeExpertNumAlign_ = Ceil(self.moeExpertNum_ * 4, UB_ALIGN) * UB_ALIGN
        self.moeNumPerRankAlign512_ = (
            Ceil(self.moeExpertNumPerRank_ * 4, WIN_ADDR_ALIGN) * WIN_ADDR_ALIGN
        )
        moeExpertNumAlign512 = Ceil(self.moeExpertNum_ * 4, WIN_ADDR_ALIGN) * WIN_ADDR_ALIGN

        self.xGMTensor_ = hp.gm_tensor(x, torch.float16, self.axisBS_ * self.axisH_)
        self.topkIdxGMTensor_ = i32(topkIdx, self.axisBS_ * self.axisK_)
        if self.IsTopkWeights:
            self.topkWeightsGMTensor_ = hp.gm_tensor(
                topkWeights, torch.float32, self.axisBS_ * self.axisK_
            )
        if self.IsCached:
            self.cachedSlotIdxGMTensor_ = i32(cachedSlotIdx, self.axisBS_ * self.axisK_)
        self.numRecvPerRankGM_ = numRecvPerRank
        self.numRecvPerExpertGM_ = numRecvPerExpert
        self.dstSlotIdxGMTensor_ = i32(dstBufferSlotIdx, self.axisBS_ * self.axisK_)

        self.scaleupCounterAddr_ = workspaceGM
        self.sendCntWorkspaceAddr_ = (
            self.scaleupCounterAddr_ + self.aivNum_ * self.epWorldSizeAlign512_
        )
        self.slotWorkspaceAddr_ = (
            self.sendCntWorkspaceAddr_ + n * WIN_ADDR_ALIGN + moeExpertNumAlign512
        )
        ctx = self.mc2Context_
        self.localCntStateWinAddr_ = GetWinAddrByRankId(
            ctx, self.epRankId_, self.cntWinStateOffset_
        )
        self.localWinAddr_ = GetWinAddrByRankId(ctx, self.epRankId_, self.winDataOffset_)
        self.scaleupCounterGMTensor_ = i32(
            self.scaleupCounterAddr_, self.aivNum_ * self.counterAlign512_
        )
        self.sendCntPerExpertAddr_ = self.sendCntWorkspaceAddr_ + n * WIN_ADDR_ALIGN

    def SplitToCore(self, curSendCnt: int, curUseAivNum: int) -> tuple[int, int, int]:
        startId, endId = split_to_core(curSendCnt, curUseAivNum, self.aivId_)
        return startId, endId, endId - startId

    def BufferInit(self) -> None:
        self.hcomm_ = hp.Hcomm[hp.COMM_PROTOCOL_UBC_CTP]()
        self.hcomm_.Init(torch.zeros(512, dtype=torch.uint8), 512)  # hcommTensor_
        n = self.epWorldSize_
        self.sendCntPerRankTensor_ = torch.zeros(n * UB_STRIDE, dtype=torch.int32)
        self.sendCntPerExpertTensor_ = torch.zeros(self.moeExpertNumAlign_ // 4, dtype=torch.int32)
        if self.aivId_ == 0:  # the status flag is added once, by core 0
            self.sendCntPerRankTensor_[::UB_STRIDE] = 1
        self.ResetCounters()
        hp.SyncAll()

    def ResetCounters(self) -> None:
        if self.aivId_ != self.aivNum_ - 1:
            return
        i32(self.sendCntPerExpertAddr_, self.moeExpertNum_)[:] = self.sendCntPerExpertTensor_[
            : self.moeExpertNum_
        ]
        n = self.epWorldSize_
        blocks(self.sendCntWorkspaceAddr_, n)[:] = self.sendCntPerRankTensor_.view(n, UB_STRIDE)

    def CalSendCntPerRank(self, expertIds: torch.Tensor) -> None:
        """Tokens (not pairs) of the group with an expert on each rank; -1 ids count nowhere."""
        rankIds = torch.where(expertIds >= 0, expertIds // self.moeExpertNumPerRank_, -1)
        for dstRankId in range(self.epWorldSize_):
            rsvdCnt = int((rankIds == dstRankId).any(dim=1).sum())
            if rsvdCnt == 0:
                continue
            self.sendCntPerRankTensor_[dstRankId * UB_STRIDE + 1] += rsvdCnt

    def CalSendCntPerExpert(self, expertIds: torch.Tensor) -> None:
        valid = expertIds[expertIds >= 0].long()
        freq = torch.bincount(valid, minlength=self.moeExpertNum_).to(torch.int32)
        self.sendCntPerExpertTensor_[: self.moeExpertNum_] += freq

    def CalSendCnt(self) -> None:
        self.startTokenId_, self.endTokenId_, self.sendTokenNum_ = self.SplitToCore(
            self.axisBS_, self.aivNum_
        )
        if self.startTokenId_ >= self.axisBS_:
            return
        groupCnt = Ceil(self.sendTokenNum_, self.perGroupTokenNum_)
        for group in range(groupCnt):
            first = self.startTokenId_ + group * self.perGroupTokenNum_
            last = min(first + self.perGroupTokenNum_, self.endTokenId_)
            ids = self.topkIdxGMTensor_[first * self.axisK_ : last * self.axisK_]
            ids = ids.view(-1, self.axisK_).to(torch.int16)
            self.CalSendCntPerExpert(ids)
            self.CalSendCntPerRank(ids)
        # SetAtomicAdd: every core adds its counts (core 0 also the flag 1)
        n = self.epWorldSize_
        blocks(self.sendCntWorkspaceAddr_, n).add_(self.sendCntPerRankTensor_.view(n, UB_STRIDE))
        i32(self.sendCntPerExpertAddr_, self.moeExpertNum_).add_(
            self.sendCntPerExpertTensor_[: self.moeExpertNum_]
        )
        # this core's per-rank counts (element 1 of each block) for GetSlotStartNum
        row = self.aivId_ * self.counterAlign512_
        self.scaleupCounterGMTensor_[row : row + n] = self.sendCntPerRankTensor_[1::UB_STRIDE]

    def Communication(self) -> None:
        self.startRankId_, self.endRankId_, self.rankNumPerCore_ = self.SplitToCore(
            self.epWorldSize_, self.aivNum_
        )
        if self.startRankId_ >= self.epWorldSize_:
            return
        n, L = self.epWorldSize_, self.moeExpertNumPerRank_
        sendCntPerRankU64 = (
            blocks(self.sendCntWorkspaceAddr_ + self.startRankId_ * WIN_ADDR_ALIGN, self.rankNumPerCore_)
            .clone()
        )  # fmt: skip
        for dstRankId in range(self.startRankId_, self.endRankId_):
            srcOffset = dstRankId * L
            remoteStateAddr = GetWinAddrByRankId(
                self.mc2Context_, dstRankId, self.cntWinStateOffset_
            )
            notifyAddr = remoteStateAddr + self.epRankId_ * WIN_ADDR_ALIGN
            remoteCountAddr = (
                remoteStateAddr + n * WIN_ADDR_ALIGN + self.epRankId_ * self.moeNumPerRankAlign512_
            )
            srcWorkspaceAddr = self.sendCntPerExpertAddr_ + srcOffset * 4
            if dstRankId != self.epRankId_:  # remote: counts, then the {flag, count} notify
                commHandle = GetCommHandle(self.mc2Context_, self.epRankId_, dstRankId)
                self.hcomm_.WriteNbi(commHandle, remoteCountAddr, srcWorkspaceAddr, L * 4)
                self.hcomm_.Drain(commHandle)
                self.hcomm_.WriteNbi(
                    commHandle,
                    notifyAddr,
                    self.sendCntWorkspaceAddr_ + dstRankId * WIN_ADDR_ALIGN,
                    8,
                )
            else:  # own rank: MTE copies, the counts first
                i32(remoteCountAddr, L)[:] = i32(srcWorkspaceAddr, L)
                i32(notifyAddr, UB_STRIDE)[:] = sendCntPerRankU64[dstRankId - self.startRankId_]

    def SumOfFlags(self) -> int:
        """One look at the count notify words: element 0 of each, summed as FP32 (ReduceSum)."""
        self.recvCounterTensor_[:] = blocks(self.localCntStateWinAddr_, self.epWorldSize_)
        flags = self.recvCounterTensor_[:, 0].contiguous().view(torch.float32)
        return int(flags.sum().view(torch.int32))  # n denormal ones add up to the int n

    def GetRecvCount(self) -> None:
        if self.aivId_ != self.aivNum_ - 1:
            return
        commpareFlag = self.epWorldSize_
        self.recvCounterTensor_ = torch.zeros(self.epWorldSize_, UB_STRIDE, dtype=torch.int32)
        while self.SumOfFlags() != commpareFlag:
            pass
        self.SetRecvNumPerExpert()
        self.SetRecvNumPerRank(self.recvCounterTensor_)
        blocks(self.localCntStateWinAddr_, self.epWorldSize_)[:] = 0  # status clear

    def SetRecvNumPerExpert(self) -> None:
        n, L = self.epWorldSize_, self.moeExpertNumPerRank_
        stride = self.moeNumPerRankAlign512_ // 4
        recv = i32(self.localCntStateWinAddr_ + n * WIN_ADDR_ALIGN, n * stride).view(n, stride)
        numRecvPerExpert = recv[:, :L].to(torch.int64).sum(dim=0)
        hp.gm_tensor(self.numRecvPerExpertGM_, torch.int64, L)[:] = numRecvPerExpert

    def SetRecvNumPerRank(self, recvTmpTensor: torch.Tensor) -> None:
        i32(self.numRecvPerRankGM_, self.epWorldSize_)[:] = recvTmpTensor[:, 1]

    def DedupAndSendDirect(self, srcTokenId: int) -> None:
        for k in range(self.axisK_):
            expertId = int(self.topkIdxTensor_[k])
            if expertId < 0:
                self.dstSlotIdxTensor_[k] = -1
                continue
            dstRankId = expertId // self.moeExpertNumPerRank_
            hit = int(self.hitPerRankTensor_[dstRankId])
            if hit >= 0:
                self.dstSlotIdxTensor_[k] = hit
                continue
            slot = int(self.slotIdxPerRankTensor_[dstRankId])
            self.dstSlotIdxTensor_[k] = slot
            self.hitPerRankTensor_[dstRankId] = slot
            self.slotIdxPerRankTensor_[dstRankId] = slot + 1
            self.WriteSlotToLocal(dstRankId, slot)

    def WriteSlotToLocal(self, dstRankId: int, slot: int) -> None:
        rankGM = self.localWinAddr_ if dstRankId == self.epRankId_ else self.slotWorkspaceAddr_
        slotAddr = rankGM + (dstRankId * self.axisMaxBS_ + slot) * self.perSlotBytes_
        hp.gm_tensor(slotAddr, torch.uint8, self.perSlotBytes_)[:] = self.tokenSlotTensor_

    def WriteToRemoteWindow(self) -> None:
        if self.startRankId_ >= self.epWorldSize_:
            return
        sendNumPerRankTensor = blocks(
            self.sendCntWorkspaceAddr_ + self.startRankId_ * WIN_ADDR_ALIGN, self.rankNumPerCore_
        ).clone()
        for dstRankId in range(self.startRankId_, self.endRankId_):
            sendTokenNum = int(sendNumPerRankTensor[dstRankId - self.startRankId_, 1])
            notifyAddr = (
                GetWinAddrByRankId(self.mc2Context_, dstRankId, self.slotWinStateOffset_)
                + self.epRankId_ * WIN_ADDR_ALIGN
            )
            if dstRankId == self.epRankId_:  # own slots are in the window already
                i32(notifyAddr, 1)[0] = 1
                continue
            commHandle = GetCommHandle(self.mc2Context_, self.epRankId_, dstRankId)
            if sendTokenNum > 0:
                sendDataSize = self.perSlotBytes_ * sendTokenNum
                srcWorkspaceOffset = dstRankId * self.axisMaxBS_ * self.perSlotBytes_
                dstRankWinOffset = self.epRankId_ * self.axisMaxBS_ * self.perSlotBytes_
                remoteWinAddr = (
                    GetWinAddrByRankId(self.mc2Context_, dstRankId, self.winDataOffset_)
                    + dstRankWinOffset
                )
                localWorkspaceAddr = self.slotWorkspaceAddr_ + srcWorkspaceOffset
                splitCnt = Ceil(sendDataSize, CQE_MAX_WRITE_SIZE)
                dataSize = CQE_MAX_WRITE_SIZE
                for index in range(splitCnt):
                    if index == splitCnt - 1:
                        dataSize = sendDataSize - index * CQE_MAX_WRITE_SIZE
                    self.hcomm_.WriteNbi(commHandle, remoteWinAddr, localWorkspaceAddr, dataSize)
                    localWorkspaceAddr += dataSize
                    remoteWinAddr += dataSize
                self.hcomm_.Drain(commHandle)
            self.hcomm_.WriteNbi(
                commHandle, notifyAddr, self.sendCntWorkspaceAddr_ + dstRankId * WIN_ADDR_ALIGN, 8
            )

    def GetSlotStartNum(self) -> None:
        """This core's first slot per rank: the sum of the earlier cores' counters."""
        groupCnt = Ceil(self.aivId_ * self.epWorldSizeAlign_, self.perGroupSizeAlign_ * 2)
        copyNumPerGroup = self.perGroupSizeAlign_ * 2 // self.epWorldSizeAlign_
        n = self.epWorldSize_
        self.slotIdxPerRankTensor_ = torch.zeros(n, dtype=torch.int32)
        counters = self.scaleupCounterGMTensor_.view(self.aivNum_, self.counterAlign512_)
        for i in range(groupCnt):
            copyNum = self.aivId_ - copyNumPerGroup * i if i == groupCnt - 1 else copyNumPerGroup
            first = i * copyNumPerGroup
            self.slotIdxPerRankTensor_ += counters[first : first + copyNum, :n].sum(dim=0)

    def SendPhase(self) -> None:
        if self.startTokenId_ >= self.axisBS_:
            return
        K, H, Ka = self.axisK_, self.axisH_, self.axisKAlign_
        self.GetSlotStartNum()
        for tokenId in range(self.startTokenId_, self.endTokenId_):
            topkOffset = tokenId * K
            self.hitPerRankTensor_ = torch.full((self.epWorldSize_,), -1, dtype=torch.int32)
            xLocalTensor = torch.zeros(self.perSlotBytes_, dtype=torch.uint8)  # perSlotQueue_
            xLocalTensor[: H * SIZEOF_X] = self.xGMTensor_[tokenId * H : (tokenId + 1) * H].view(
                torch.uint8
            )
            metaLocalTensor = xLocalTensor[self.metaOffset_ :].view(torch.int32)
            metaLocalTensor[:K] = self.topkIdxGMTensor_[topkOffset : topkOffset + K]
            if self.IsTopkWeights:
                metaLocalTensor[Ka : Ka + K] = self.topkWeightsGMTensor_[
                    topkOffset : topkOffset + K
                ].view(torch.int32)
            metaLocalTensor[2 * Ka] = self.epRankId_
            metaLocalTensor[2 * Ka + 1] = tokenId
            self.tokenSlotTensor_ = xLocalTensor
            self.topkIdxTensor_ = metaLocalTensor
            self.dstSlotIdxTensor_ = torch.zeros(K, dtype=torch.int32)  # dstSlotQueue_
            if not self.IsCached:
                self.DedupAndSendDirect(tokenId)
            else:
                self.dstSlotIdxTensor_[:] = self.cachedSlotIdxGMTensor_[topkOffset : topkOffset + K]
                for k in range(K):
                    slot = int(self.dstSlotIdxTensor_[k])
                    if slot == -1:
                        continue
                    expertId = int(self.topkIdxTensor_[k])
                    dstRankId = expertId // self.moeExpertNumPerRank_
                    if int(self.hitPerRankTensor_[dstRankId]) == slot:
                        continue
                    self.WriteSlotToLocal(dstRankId, slot)
                    self.hitPerRankTensor_[dstRankId] = slot
            self.dstSlotIdxGMTensor_[topkOffset : topkOffset + K] = self.dstSlotIdxTensor_

    def ProcessDirect(self) -> None:
        self.BufferInit()
        self.CalSendCnt()
        hp.SyncAll()
        self.Communication()
        self.GetRecvCount()
        self.SendPhase()
        hp.SyncAll()
        self.WriteToRemoteWindow()

    def Process(self) -> None:
        if hp.g_coreType == hp.AIV:
            self.ProcessDirect()


def moe_ep_dispatch(context, x, topkIdx, topkWeights, scales, cachedSlotIdx, numRecvPerRank,
                    numRecvPerExpert, dstBufferSlotIdx, workspaceGM, tilingGM):  # fmt: skip
    tilingData = hp.GET_TILING_DATA_WITH_STRUCT(MoeEpDispatchTilingData, tilingGM)
    op = MoeEpDispatch()
    op.Init(context, x, topkIdx, topkWeights, scales, cachedSlotIdx, numRecvPerRank,
            numRecvPerExpert, dstBufferSlotIdx, workspaceGM, tilingData)  # fmt: skip
    op.Process()


# ---------------------------------------------------------------- the receiver (stand-in)


def moe_ep_dispatch_epilogue(ctx, numRecvPerRank, recvSlots, tilingGM):
    """MoeEpDispatchEpilogue's WaitDispatch, then each source's slots copied out in order."""
    info = hp.GET_TILING_DATA_WITH_STRUCT(MoeEpDispatchTilingData, tilingGM).moeEpDispatchInfo
    aivId, aivNum, n = hp.GetBlockIdx(), info.aivNum, info.cfg.epWorldSize
    localSlotStateWinAddr = GetWinAddrByRankId(ctx, ctx.epRankId, info.slotWinStateOffset)
    localWinAddr = GetWinAddrByRankId(ctx, ctx.epRankId, info.winDataOffset)
    perSlotBytes, nmt = info.cfg.perSlotBytes, info.cfg.numMaxTokensPerRank
    if aivId == aivNum - 1:  # WaitDispatch: the column sums of the notify words, flag column
        while int(blocks(localSlotStateWinAddr, n).sum(dim=0)[0]) != n:
            pass
        blocks(localSlotStateWinAddr, n)[:] = 0
    hp.SyncAll()
    counts = i32(numRecvPerRank, n).tolist()
    first, last = split_to_core(n, aivNum, aivId)
    for src in range(first, last):
        row = sum(counts[:src])
        size = counts[src] * perSlotBytes
        hp.gm_tensor(recvSlots + row * perSlotBytes, torch.uint8, size)[:] = hp.gm_tensor(
            localWinAddr + src * nmt * perSlotBytes, torch.uint8, size
        )


# ---------------------------------------------------------------- host side and the check


def inputs(rank: int, launch: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Tokens, routing and top-k weights; an even launch replays the previous routing."""
    x, _ = moe_inputs(rank, launch, BS, K, H, LOCAL_EXPERTS)
    routed = launch - 1 + launch % 2
    _, ids = moe_inputs(rank, routed, BS, K, H, LOCAL_EXPERTS)
    ids[0, K - 1] = -1  # an invalid expert: no slot, -1 in dstBufferSlotIdx
    weights = ((np.arange(BS * K) + 1 + rank) / 8).astype(np.float32).reshape(BS, K)
    return x, ids, weights


def reference_slots(ids: np.ndarray, n: int) -> np.ndarray:
    """dstBufferSlotIdx: per token, one slot per destination rank, numbered in token order."""
    slots, nxt = np.full(ids.shape, -1, dtype=np.int64), [0] * n
    for t in range(ids.shape[0]):
        hit: dict[int, int] = {}
        for k, e in enumerate(ids[t]):
            if e < 0:
                continue
            r = int(e) // LOCAL_EXPERTS
            if r not in hit:
                hit[r], nxt[r] = nxt[r], nxt[r] + 1
            slots[t, k] = hit[r]
    return slots


def reference(rank: int, launch: int) -> np.ndarray:
    """numpy: dstBufferSlotIdx, numRecvPerRank, numRecvPerExpert, then every received slot's
    x row, top-k ids, top-k weights (odd launches) and {source rank, token}."""
    n = hp.get_world_size()
    _, ids, _ = inputs(rank, launch)
    parts = [reference_slots(ids, n).reshape(-1)]
    per_rank, per_expert, rows = [], np.zeros(LOCAL_EXPERTS, dtype=np.int64), []
    for s in range(n):
        x, sids, w = inputs(s, launch)
        tokens = [
            t for t in range(BS) if any(e >= 0 and e // LOCAL_EXPERTS == rank for e in sids[t])
        ]
        per_rank.append(len(tokens))
        for e in range(LOCAL_EXPERTS):
            per_expert[e] += np.count_nonzero(sids == rank * LOCAL_EXPERTS + e)
        for t in tokens:
            rows += [x[t].astype(np.float64), sids[t].astype(np.float64)]
            rows += [w[t].astype(np.float64)] if launch % 2 else []
            rows.append(np.array([s, t], dtype=np.float64))
    parts += [np.array(per_rank), per_expert, *rows]
    return np.concatenate([p.astype(np.float64).reshape(-1) for p in parts])


def decode(slots: torch.Tensor, launch: int, tiling: MoeEpDispatchTilingData) -> list[torch.Tensor]:
    """The check's view of received slots: x, ids, weights (odd launches), {rank, token}."""
    cfg = tiling.moeEpDispatchInfo.cfg
    hAlign = Ceil(cfg.hidden * SIZEOF_X, UB_ALIGN) * UB_ALIGN
    Ka = Ceil(cfg.topK * TOPK_INFO_SIZE, UB_ALIGN) * UB_ALIGN // TOPK_INFO_SIZE
    out = []
    for slot in slots.view(-1, cfg.perSlotBytes):
        meta = slot[hAlign:].view(torch.int32)
        out += [slot[: H * SIZEOF_X].view(torch.float16).double(), meta[:K].double()]
        out += [meta[Ka : Ka + K].view(torch.float32).double()] if launch % 2 else []
        out.append(meta[2 * Ka : 2 * Ka + 2].double())
    return out


def launch_dispatch(context, x, ids, weights, cached, workspace):
    """One MoeEpDispatch launch as the host runs it (aclnn): the tiling, the outputs, the
    launch; ``cached`` is a previous ``dstBufferSlotIdx`` (IsCached) or None, ``workspace``
    the previous launch's (None: a new one). Returns the tiling, the workspace,
    ``numRecvPerRank``, ``numRecvPerExpert`` and ``dstBufferSlotIdx``."""
    rank, n, dev = hp.get_rank(), hp.get_world_size(), hp.device()
    isCached = cached is not None
    tiling, wsSize = MoeEpDispatchTilingFunc(n, rank, LOCAL_EXPERTS * n, x.shape, ids.shape,
                                             weights is not None, isCached)  # fmt: skip
    if workspace is None:  # the workspace outlives a launch (stale counters included)
        workspace = torch.zeros(wsSize, dtype=torch.uint8, device=dev)
    numRecvPerRank = torch.zeros(n, dtype=torch.int32, device=dev)
    numRecvPerExpert = torch.zeros(LOCAL_EXPERTS, dtype=torch.int64, device=dev)
    dstSlotIdx = torch.zeros(ids.shape, dtype=torch.int32, device=dev)
    hp.launch(
        moe_ep_dispatch,
        context,
        on_device(x),
        on_device(ids),
        None if weights is None else on_device(weights),
        None,
        cached,
        numRecvPerRank,
        numRecvPerExpert,
        dstSlotIdx,
        workspace,
        tiling,
        block_dim=tiling.moeEpDispatchInfo.aivNum,
        kernel_type="aiv",
    )
    return tiling, workspace, numRecvPerRank, numRecvPerExpert, dstSlotIdx


def main() -> list[str]:
    rank, n = hp.get_rank(), hp.get_world_size()
    lines, dev = [], hp.device()
    workspace, cached = None, None
    context = MoeCommContext()  # the host's Mc2Context, once per communicator
    for launch in (1, 2):  # odd: slots assigned; even: the previous routing, cached slots
        x, ids, weights = inputs(rank, launch)
        isCached = launch % 2 == 0
        tiling, workspace, numRecvPerRank, numRecvPerExpert, dstSlotIdx = launch_dispatch(
            context, x, ids, None if isCached else weights, cached if isCached else None, workspace
        )
        aivNum = tiling.moeEpDispatchInfo.aivNum
        perSlot = tiling.moeEpDispatchInfo.cfg.perSlotBytes
        recvSlots = torch.zeros(
            n * NUM_MAX_TOKENS_PER_RANK * perSlot, dtype=torch.uint8, device=dev
        )
        hp.launch(
            moe_ep_dispatch_epilogue, context, numRecvPerRank, recvSlots, tiling, block_dim=aivNum,
            kernel_type="aiv",
        )  # fmt: skip
        total = int(numRecvPerRank.sum())
        got = torch.cat(
            [
                dstSlotIdx.double().reshape(-1),
                numRecvPerRank.double(),
                numRecvPerExpert.double(),
                *decode(recvSlots[: total * perSlot].cpu(), launch, tiling),
            ]
        )
        mode = "cached" if isCached else "dedup"
        lines.append(
            compare(f"launch-{launch}", got, reference(rank, launch), f"{mode}, {total} slots")
        )
        cached = dstSlotIdx.clone()
    return lines


if __name__ == "__main__":
    run_sample(main, platform=PLATFORM, **RUN_KWARGS)
