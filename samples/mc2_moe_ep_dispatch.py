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
runs here on the A3 platform's windows (the HCCL buffers).

Each dispatch is followed, as in the shipping pipeline, by a launch of its second kernel on
the same windows: MoeEpDispatchEpilogue (``mc2/moe_ep_dispatch_epilogue``:
``op_kernel/moe_ep_dispatch_epilogue.h``, ``Init``, ``SplitToCore``, ``WaitDispatch``,
``Process``, ``ComputePrefixSums``, ``CountHits``, ``CopyFromWindowByExpert``,
``CopyFromWindowByCachedMeta``; ``moe_ep_dispatch_epilogue.cpp``,
``moe_ep_dispatch_epilogue_tiling.h`` and the host tiling
``op_host/op_tiling/moe_ep_dispatch_epilogue_tiling.cpp``: ``CheckAttrParams``,
``CheckInputTensorShape``, ``CheckOutputTensors``, ``perSlotBytes``, ``CheckWinSize``, the
workspace). Its last AIV core polls the slot notify words (32 bytes every 512, an int32
``ReduceSum`` over the sources, the flag column) until they sum to ``epWorldSize`` and zeroes
them; after ``SyncAll`` every core counts, for its share of each source's slots, the hits per
local expert (top-k ids padded with -1; ``Sub``, ``Abs``, ``Mins`` 1, ``ReduceSum``: the
misses) into the workspace; after another ``SyncAll`` a core's rows of an expert start after
the expert's prefix and the earlier cores' hits, and each slot with a hit is read once and
written to ``recvX`` once per hit, with ``recvSrcMetadata`` ``{srcRank, tokenIdx, topkIdx,
slotIdx}`` and the top-k weight. The cached path (even launches) splits the rows of the
previous ``recvSrcMetadata`` over the cores and reads each row's slot again. The check
compares ``dstBufferSlotIdx``, ``numRecvPerRank``, ``numRecvPerExpert``, ``recvX``,
``recvSrcMetadata`` and ``recvTopkWeights`` with numpy. The epilogue's stand-ins: FP16 (no
``recv_scales``, ``IsMxQuant`` false); ``HasTopkWeights`` (a tiling key) is whether
``recvTopkWeights`` is given; the host sizes the outputs from ``numRecvPerExpert`` (A rows).

Run: ``python samples/mc2_moe_ep_dispatch.py`` (4 emulated ranks),
``python -m hccl_py run -n 2 --backend gloo samples/mc2_moe_ep_dispatch.py``.
"""

from ctypes import c_uint64

import numpy as np
import torch
from _common import Ceil, compare, f32, i32, on_device, run_sample
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


# ---------------------------------------------------------------- the epilogue: host tiling

ELEM_ALIGN = 8
RECV_META_FIELDS = 4
META_TOPK_SECTION = 2
META_EXTRA_FIELDS = 2
META_SRC_RANK_OFFSET, META_TOKEN_IDX_OFFSET, META_TOPK_IDX_OFFSET, META_SLOT_IDX_OFFSET = 0, 1, 2, 3
HIT_ROW_OFFSET, HIT_TOPK_OFFSET, HIT_ENTRY_SIZE = 0, 1, 2
K_MAX, H_MAX = 32, 8192


class MoeEpDispatchEpilogueInfo(TilingData):
    _fields_ = [
        ("cfg", MoeEpCommonTilingData),
        *uint32_fields("aivNum"),
        *[(name, c_uint64) for name in ("totalUbSize", "winDataOffset", "slotWinStateOffset")],
        *uint32_fields("cached", "isMxQuant"),
    ]


class MoeEpDispatchEpilogueTilingData(TilingData):
    _fields_ = [("moeEpDispatchEpilogueInfo", MoeEpDispatchEpilogueInfo)]


def MoeEpDispatchEpilogueTilingFunc(epWorldSize, epRankId, numExperts, nmt, cclBufferSize,
                                    dstBufferSlotIdx, numRecvPerRank, numRecvPerExpert,
                                    cachedRecvSrcMetadata, recvX, recvSrcMetadata,
                                    recvTopkWeights):  # fmt: skip
    """The epilogue's host tiling (shapes as tuples, None for an absent optional tensor): the
    tiling data and the workspace size (its user part, the per-core hit counts)."""
    tiling = MoeEpDispatchEpilogueTilingData()
    info = tiling.moeEpDispatchEpilogueInfo
    # CheckAttrParams (expert_alignment 1)
    assert 2 <= epWorldSize <= 128 and 0 <= epRankId < epWorldSize
    assert 2 <= numExperts <= 2048 and numExperts % epWorldSize == 0 and nmt > 0
    assert cclBufferSize > 0
    info.cfg.epWorldSize, info.cfg.epRankId, info.cfg.numExperts = epWorldSize, epRankId, numExperts
    info.cfg.numLocalExperts = numExperts // epWorldSize
    info.cfg.numMaxTokensPerRank, info.cfg.expertAlignment = nmt, 1
    cached = cachedRecvSrcMetadata is not None
    info.cached = int(cached)
    # CheckInputTensorShape
    numTokens, topK = dstBufferSlotIdx
    assert numTokens > 0 and 0 < topK <= K_MAX
    minTopKLocalExperts = min(topK, info.cfg.numLocalExperts)
    upper = epWorldSize * nmt * minTopKLocalExperts
    if cached:
        assert 0 <= cachedRecvSrcMetadata[0] <= upper
        assert cachedRecvSrcMetadata[1] == RECV_META_FIELDS
    assert tuple(numRecvPerRank) == (epWorldSize,)
    assert tuple(numRecvPerExpert) == (info.cfg.numLocalExperts,)
    info.cfg.numTokens, info.cfg.topK = numTokens, topK
    # CheckOutputTensors (FP16 recv_x: no recv_scales)
    aAlloc, hidden = recvX
    assert 0 <= aAlloc <= upper and 0 < hidden <= H_MAX
    assert recvTopkWeights is None or tuple(recvTopkWeights) == (aAlloc,)
    assert tuple(recvSrcMetadata) == (aAlloc, RECV_META_FIELDS)
    info.cfg.hidden = hidden
    hAlign32 = Ceil(hidden * MAX_OUT_DTYPE_SIZE, UB_ALIGN) * UB_ALIGN
    kAlign32 = Ceil(topK * METADATA_DTYPE_SIZE, UB_ALIGN) * UB_ALIGN
    info.cfg.perSlotBytes = AlignUpWin(hAlign32 + 0 + kAlign32 * 2 + UB_ALIGN)
    # CheckWinSize: the dispatch's layout, so the same offsets
    n, L, K_ = epWorldSize, info.cfg.numLocalExperts, topK
    cntWinStateSize = n * AlignUpWin(L * 4) + n * WIN_ADDR_ALIGN
    dispatchWinStateSize = cntWinStateSize + n * WIN_ADDR_ALIGN
    combineWinStateSize = nmt * K_ * WIN_ADDR_ALIGN + n * WIN_ADDR_ALIGN
    dispatchWinDataSize = n * nmt * info.cfg.perSlotBytes
    combineWinDataSize = nmt * K_ * AlignUpWin(hAlign32 + UB_ALIGN)
    totalStateWinSizeEp = dispatchWinStateSize + combineWinStateSize
    winNeed = dispatchWinDataSize + combineWinDataSize + totalStateWinSizeEp
    assert winNeed <= cclBufferSize, "ccl_buffer_size is not enough"
    info.winDataOffset, info.slotWinStateOffset = totalStateWinSizeEp, cntWinStateSize
    info.aivNum, info.totalUbSize = AIV_NUM, 248 * 1024  # GetCoreNumAiv, GetCoreMemSize
    # the workspace (without SYSTEM_NEED_WORKSPACE)
    hitCountBytes = info.aivNum * Ceil(L, ELEM_ALIGN) * ELEM_ALIGN * 4
    return tiling, AlignUpWin(hitCountBytes)


# ---------------------------------------------------------------- the epilogue: the kernel


def slot_rows(addr: hp.GmAddr, count: int, elems: int, stride: int) -> torch.Tensor:
    """``count`` rows of ``elems`` int32 ``stride`` bytes apart (a DataCopyPad of
    ``count`` blocks with a source stride), each row a read of its own bytes only."""
    return torch.stack([i32(addr + i * stride, elems) for i in range(count)])


class MoeEpDispatchEpilogue:
    def Init(self, context, dstBufferSlotIdx, numRecvPerRank, numRecvPerExpert,
             cachedRecvSrcMetadata, recvX, recvSrcMetadata, recvTopkWeights, recvScales,
             workspace, tilingData) -> None:  # fmt: skip
        info = tilingData.moeEpDispatchEpilogueInfo
        self.IsCached = bool(info.cached)
        self.HasTopkWeights = bool(recvTopkWeights)  # the tiling key: recv_topk_weights given
        self.aivId_ = hp.GetBlockIdx()
        self.workspaceGM_ = workspace
        self.numLocalExperts_ = info.cfg.numLocalExperts
        self.aivNum_ = info.aivNum
        self.axisK_, self.axisH_ = info.cfg.topK, info.cfg.hidden
        self.epWorldSize_ = info.cfg.epWorldSize
        self.numMaxTokensPerRank_ = info.cfg.numMaxTokensPerRank
        self.perSlotBytes_ = info.cfg.perSlotBytes
        self.winDataOffset_ = info.winDataOffset
        self.slotWinStateOffset_ = info.slotWinStateOffset

        self.mc2Context_ = context
        self.epRankId_ = self.mc2Context_.epRankId
        self.localSlotStateWinAddr_ = GetWinAddrByRankId(
            self.mc2Context_, self.epRankId_, self.slotWinStateOffset_
        )
        self.localWinAddr_ = GetWinAddrByRankId(
            self.mc2Context_, self.epRankId_, self.winDataOffset_
        )
        self.metaOffset_ = Ceil(self.axisH_ * SIZEOF_X, UB_ALIGN) * UB_ALIGN

        n, L, K_ = self.epWorldSize_, self.numLocalExperts_, self.axisK_
        self.numRecvPerRankGm_ = i32(numRecvPerRank, n)
        self.numRecvPerExpertGm_ = hp.gm_tensor(numRecvPerExpert, torch.int64, L)
        self.cachedRecvSrcMetadataGm_ = cachedRecvSrcMetadata
        self.recvXGm_ = recvX
        self.recvSrcMetadataGm_ = recvSrcMetadata
        if self.HasTopkWeights:
            self.recvTopkWeightsGm_ = recvTopkWeights
        self.hitCountGm_ = workspace

        self.axisKAlign_ = Ceil(K_, ELEM_ALIGN) * ELEM_ALIGN
        self.metaBytes_ = META_TOPK_SECTION * self.axisKAlign_ * 4 + UB_ALIGN
        self.ubExpertPfx_ = torch.zeros(Ceil(L * 8, UB_ALIGN) * UB_ALIGN // 8, dtype=torch.int64)
        self.ubWaitStatus_ = torch.zeros(n, UB_ALIGN // 4, dtype=torch.int32)
        self.ubWaitSum_ = torch.zeros(UB_ALIGN // 4, dtype=torch.int32)

        if not self.IsCached:
            self.hitCountStride_ = Ceil(L, ELEM_ALIGN) * ELEM_ALIGN
            self.paddedMetaElems_ = (
                Ceil(META_TOPK_SECTION * self.axisKAlign_ + META_EXTRA_FIELDS, ELEM_ALIGN)
                * ELEM_ALIGN
            )
            self.paddedTopkElems_ = self.axisKAlign_
            maxSlotsPerAiv = Ceil(self.numMaxTokensPerRank_, self.aivNum_)
            self.ubRecvCnt_ = torch.zeros(Ceil(n * 4, UB_ALIGN) * UB_ALIGN // 4, dtype=torch.int32)
            self.ubHitCount_ = torch.zeros(Ceil(L * 4, UB_ALIGN) * UB_ALIGN // 4, dtype=torch.int32)
            self.ubRowStart_ = torch.zeros(Ceil(L * 8, UB_ALIGN) * UB_ALIGN // 8, dtype=torch.int64)
            self.ubMeta_ = torch.zeros(maxSlotsPerAiv * self.paddedMetaElems_, dtype=torch.int32)
            topkElems = maxSlotsPerAiv * self.paddedTopkElems_
            self.ubTopkIds_ = torch.zeros(topkElems, dtype=torch.int32)
            self.ubTargetExpertId_ = torch.zeros(topkElems, dtype=torch.int32)
            self.ubSubExpertId_ = torch.zeros(topkElems, dtype=torch.int32)
            self.ubHitCountRowI64_ = torch.zeros_like(self.ubRowStart_)
            self.ubStageWeights_ = torch.zeros(K_ * UB_ALIGN // 4, dtype=torch.float32)
            self.ubStageMeta_ = torch.zeros(K_ * UB_ALIGN // 4, dtype=torch.int32)
            self.ubHitList_ = torch.zeros(K_ * HIT_ENTRY_SIZE, dtype=torch.int64)
            self.ubLocalCursor_ = torch.zeros_like(self.ubHitCount_)

        self.tokenQueueBufBytes_ = self.metaOffset_  # tokenQueue_ (no scales: FP16)

        self.ubExpertPfx_[:L] = self.numRecvPerExpertGm_
        expertSum = 0
        for localExpertIdx in range(L):
            expertSum += int(self.ubExpertPfx_[localExpertIdx])
        self.expertSum_ = expertSum

    def SplitToCore(self, curSendCnt: int, curUseAivNum: int) -> tuple[int, int, int]:
        startId, endId = split_to_core(curSendCnt, curUseAivNum, self.aivId_)
        return startId, endId, endId - startId

    def SumOfSlotFlags(self) -> int:
        """One look at the slot notify words (DataCopy of 32 bytes every 512): their column
        sums (int32 ReduceSum, pattern RA), of which the first is the flags'."""
        self.ubWaitStatus_[:] = blocks(self.localSlotStateWinAddr_, self.epWorldSize_)
        self.ubWaitSum_[:] = self.ubWaitStatus_.sum(dim=0)
        return int(self.ubWaitSum_[0])

    def WaitDispatch(self) -> None:
        if self.aivId_ != self.aivNum_ - 1:
            return
        commpareFlag = self.epWorldSize_
        while self.SumOfSlotFlags() != commpareFlag:
            pass
        self.ubWaitStatus_[:] = 0  # Duplicate
        blocks(self.localSlotStateWinAddr_, self.epWorldSize_)[:] = self.ubWaitStatus_

    def Process(self) -> None:
        if not self.IsCached:
            self.ComputePrefixSums()
            self.WaitDispatch()
            hp.SyncAll()
            self.CountHits()
            hp.SyncAll()
            totalHits = 0  # this core's hits
            for localExpertIdx in range(self.numLocalExperts_):
                totalHits += int(self.ubHitCount_[localExpertIdx])
            if totalHits != 0:
                self.CopyFromWindowByExpert()
        else:
            self.WaitDispatch()
            hp.SyncAll()
            self.CopyFromWindowByCachedMeta()

    def ComputePrefixSums(self) -> None:
        cumulativeRowOffset = 0
        for localExpertIdx in range(self.numLocalExperts_):
            expertTokenCnt = int(self.ubExpertPfx_[localExpertIdx])
            self.ubExpertPfx_[localExpertIdx] = cumulativeRowOffset
            cumulativeRowOffset += expertTokenCnt

    def CountHits(self) -> None:
        n, L, K_ = self.epWorldSize_, self.numLocalExperts_, self.axisK_
        nmt, perSlotBytes = self.numMaxTokensPerRank_, self.perSlotBytes_
        self.ubRecvCnt_[:n] = self.numRecvPerRankGm_
        self.ubHitCount_[:L] = 0
        for rankId in range(n):
            slotCnt = int(self.ubRecvCnt_[rankId])
            if slotCnt == 0:
                continue
            slotStart, slotEnd, slotCntPerAiv = self.SplitToCore(slotCnt, self.aivNum_)
            if slotStart >= slotEnd:
                continue
            srcRankBase = self.localWinAddr_ + rankId * nmt * perSlotBytes
            firstSlotAddrThisAiv = srcRankBase + slotStart * perSlotBytes
            # DataCopyPad: K ids per slot, each row padded with -1 to paddedTopkElems_
            rows = self.ubTopkIds_[: slotCntPerAiv * self.paddedTopkElems_].view(slotCntPerAiv, -1)
            rows[:, K_:] = -1
            rows[:, :K_] = slot_rows(
                firstSlotAddrThisAiv + self.metaOffset_, slotCntPerAiv, K_, perSlotBytes
            )
            calCnt = slotCntPerAiv * self.paddedTopkElems_
            for localExpertId in range(L):
                targetExpertId = self.epRankId_ * L + localExpertId
                self.ubTargetExpertId_[:calCnt] = targetExpertId  # Duplicate
                torch.sub(self.ubTopkIds_[:calCnt], self.ubTargetExpertId_[:calCnt],
                          out=self.ubSubExpertId_[:calCnt])  # fmt: skip
                torch.abs(self.ubSubExpertId_[:calCnt], out=self.ubTargetExpertId_[:calCnt])
                torch.clamp(
                    self.ubTargetExpertId_[:calCnt], max=1, out=self.ubSubExpertId_[:calCnt]
                )
                self.ubTargetExpertId_[0] = self.ubSubExpertId_[:calCnt].sum()  # ReduceSum AR
                curOtherExpertCnt = int(self.ubTargetExpertId_[0])
                curExpertCnt = calCnt - curOtherExpertCnt if calCnt >= curOtherExpertCnt else 0
                currentHits = int(self.ubHitCount_[localExpertId])
                self.ubHitCount_[localExpertId] = currentHits + curExpertCnt
        row = self.aivId_ * self.hitCountStride_
        i32(self.hitCountGm_ + row * 4, L)[:] = self.ubHitCount_[:L]

    def CopyFromWindowByExpert(self) -> None:
        n, L, K_, H_ = self.epWorldSize_, self.numLocalExperts_, self.axisK_, self.axisH_
        nmt, perSlotBytes, Ka = self.numMaxTokensPerRank_, self.perSlotBytes_, self.axisKAlign_
        self.ubRowStart_[:L] = self.ubExpertPfx_[:L]  # Adds 0
        for aiv in range(self.aivId_):  # the earlier cores' hits come first in each expert
            self.ubHitCount_[:L] = i32(self.hitCountGm_ + aiv * self.hitCountStride_ * 4, L)
            self.ubHitCountRowI64_[:L] = self.ubHitCount_[:L]  # Cast
            self.ubRowStart_[:L] += self.ubHitCountRowI64_[:L]  # Add
        self.ubLocalCursor_[:L] = 0
        tokenBytes = H_ * SIZEOF_X
        rankExpertBase = self.epRankId_ * L
        rankExpertEnd = rankExpertBase + L
        for rankId in range(n):
            slotCnt = int(self.ubRecvCnt_[rankId])
            if slotCnt == 0:
                continue
            slotStart, slotEnd, slotCntPerAiv = self.SplitToCore(slotCnt, self.aivNum_)
            if slotStart >= slotEnd:
                continue
            srcRankBase = self.localWinAddr_ + rankId * nmt * perSlotBytes
            firstSlotAddrThisAiv = srcRankBase + slotStart * perSlotBytes
            metaRows = self.ubMeta_[: slotCntPerAiv * self.paddedMetaElems_].view(slotCntPerAiv, -1)
            metaRows[:] = slot_rows(
                firstSlotAddrThisAiv + self.metaOffset_, slotCntPerAiv, self.metaBytes_ // 4,
                perSlotBytes,
            )  # fmt: skip
            for localSlot in range(slotCntPerAiv):
                metaBase = localSlot * self.paddedMetaElems_
                hitCnt = 0
                srcRankMeta = int(self.ubMeta_[metaBase + META_TOPK_SECTION * Ka])
                tokenIdxMeta = int(self.ubMeta_[metaBase + META_TOPK_SECTION * Ka + 1])
                slotAddr = srcRankBase + (slotStart + localSlot) * perSlotBytes
                for topkIdx in range(K_):
                    expertId = int(self.ubMeta_[metaBase + topkIdx])
                    if expertId < rankExpertBase or expertId >= rankExpertEnd:
                        continue
                    localExpertId = expertId - rankExpertBase
                    expertRowStart = int(self.ubRowStart_[localExpertId])
                    cursor = int(self.ubLocalCursor_[localExpertId])
                    self.ubLocalCursor_[localExpertId] = cursor + 1
                    globalRow = expertRowStart + cursor
                    self.ubHitList_[hitCnt * HIT_ENTRY_SIZE + HIT_ROW_OFFSET] = globalRow
                    self.ubHitList_[hitCnt * HIT_ENTRY_SIZE + HIT_TOPK_OFFSET] = topkIdx
                    hitCnt += 1
                if hitCnt == 0:
                    continue
                tokenTensor = torch.zeros(
                    self.tokenQueueBufBytes_, dtype=torch.uint8
                )  # AllocTensor
                tokenTensor[:tokenBytes] = hp.gm_tensor(slotAddr, torch.uint8, tokenBytes)
                tokenOut = tokenTensor  # EnQue, DeQue
                for i in range(hitCnt):
                    globalRow = int(self.ubHitList_[i * HIT_ENTRY_SIZE + HIT_ROW_OFFSET])
                    topkIdx = int(self.ubHitList_[i * HIT_ENTRY_SIZE + HIT_TOPK_OFFSET])
                    hp.gm_tensor(self.recvXGm_ + globalRow * tokenBytes, torch.uint8, tokenBytes)[
                        :
                    ] = tokenOut[:tokenBytes]
                    if self.HasTopkWeights:
                        weights = self.ubMeta_.view(torch.float32)[metaBase + Ka + topkIdx]
                        self.ubStageWeights_[i * ELEM_ALIGN] = weights
                    stage = i * ELEM_ALIGN
                    self.ubStageMeta_[stage + META_SRC_RANK_OFFSET] = srcRankMeta
                    self.ubStageMeta_[stage + META_TOKEN_IDX_OFFSET] = tokenIdxMeta
                    self.ubStageMeta_[stage + META_TOPK_IDX_OFFSET] = topkIdx
                    self.ubStageMeta_[stage + META_SLOT_IDX_OFFSET] = slotStart + localSlot
                for i in range(hitCnt):
                    globalRow = int(self.ubHitList_[i * HIT_ENTRY_SIZE + HIT_ROW_OFFSET])
                    if self.HasTopkWeights:
                        f32(self.recvTopkWeightsGm_ + globalRow * 4, 1)[:] = self.ubStageWeights_[
                            i * ELEM_ALIGN
                        ]
                    i32(self.recvSrcMetadataGm_ + globalRow * RECV_META_FIELDS * 4,
                        RECV_META_FIELDS)[:] = self.ubStageMeta_[i * ELEM_ALIGN : i * ELEM_ALIGN + 4]  # fmt: skip

    def CopyFromWindowByCachedMeta(self) -> None:
        if self.expertSum_ == 0:
            return
        startId, endId, cnt = self.SplitToCore(self.expertSum_, self.aivNum_)
        if startId >= endId:
            return
        H_, nmt, perSlotBytes = self.axisH_, self.numMaxTokensPerRank_, self.perSlotBytes_
        tokenBytes = H_ * SIZEOF_X
        self.ubMeta_ = torch.zeros(
            Ceil(self.metaBytes_, UB_ALIGN) * UB_ALIGN // 4, dtype=torch.int32
        )
        self.ubStageWeights_ = torch.zeros(Ceil(cnt * 4, UB_ALIGN) * UB_ALIGN // 4)
        self.ubStageMeta_ = torch.zeros(
            Ceil(cnt * RECV_META_FIELDS * 4, UB_ALIGN) * UB_ALIGN // 4, dtype=torch.int32
        )
        metaStart = self.cachedRecvSrcMetadataGm_ + startId * RECV_META_FIELDS * 4
        self.ubStageMeta_[: cnt * RECV_META_FIELDS] = i32(metaStart, cnt * RECV_META_FIELDS)
        for i in range(cnt):
            metaBase = i * RECV_META_FIELDS
            srcRankId = int(self.ubStageMeta_[metaBase + META_SRC_RANK_OFFSET])
            srcTopkIdx = int(self.ubStageMeta_[metaBase + META_TOPK_IDX_OFFSET])
            slotIdx = int(self.ubStageMeta_[metaBase + META_SLOT_IDX_OFFSET])
            slotAddr = self.localWinAddr_ + srcRankId * nmt * perSlotBytes + slotIdx * perSlotBytes
            tokenTensor = torch.zeros(self.tokenQueueBufBytes_, dtype=torch.uint8)  # AllocTensor
            tokenTensor[:tokenBytes] = hp.gm_tensor(slotAddr, torch.uint8, tokenBytes)
            if self.HasTopkWeights:
                self.ubMeta_[: self.metaBytes_ // 4] = i32(
                    slotAddr + self.metaOffset_, self.metaBytes_ // 4
                )
                weight = self.ubMeta_.view(torch.float32)[self.axisKAlign_ + srcTopkIdx]
                self.ubStageWeights_[i] = weight
            tokenOut = tokenTensor  # EnQue, DeQue
            globalRow = startId + i
            hp.gm_tensor(self.recvXGm_ + globalRow * tokenBytes, torch.uint8, tokenBytes)[:] = (
                tokenOut[:tokenBytes]
            )
        if self.HasTopkWeights:
            f32(self.recvTopkWeightsGm_ + startId * 4, cnt)[:] = self.ubStageWeights_[:cnt]
        i32(self.recvSrcMetadataGm_ + startId * RECV_META_FIELDS * 4, cnt * RECV_META_FIELDS)[:] = (
            self.ubStageMeta_[: cnt * RECV_META_FIELDS]
        )


def moe_ep_dispatch_epilogue(context, dstBufferSlotIdx, numRecvPerRank, numRecvPerExpert,
                             cachedRecvSrcMetadata, recvX, recvSrcMetadata, recvTopkWeights,
                             recvScales, workspace, tilingGM):  # fmt: skip
    tilingData = hp.GET_TILING_DATA_WITH_STRUCT(MoeEpDispatchEpilogueTilingData, tilingGM)
    op = MoeEpDispatchEpilogue()
    op.Init(context, dstBufferSlotIdx, numRecvPerRank, numRecvPerExpert, cachedRecvSrcMetadata,
            recvX, recvSrcMetadata, recvTopkWeights, recvScales, workspace, tilingData)  # fmt: skip
    op.Process()


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
    """numpy: dstBufferSlotIdx, numRecvPerRank, numRecvPerExpert, then the epilogue's recvX,
    recvSrcMetadata and (odd launches) recvTopkWeights.

    Slots of each source are numbered in its token order. The epilogue's rows are grouped by
    local expert; within one, AIV core c's hits come before core c + 1's, and a core walks its
    share of each source's slots (SplitToCore), source by source, slot by slot, k by k. An
    even launch replays the previous routing, so its rows keep the previous launch's order.
    """
    n, base = hp.get_world_size(), rank * LOCAL_EXPERTS
    _, ids, _ = inputs(rank, launch)
    parts = [reference_slots(ids, n).reshape(-1)]
    per_rank, per_expert = [], np.zeros(LOCAL_EXPERTS, dtype=np.int64)
    received = []  # per source: its tokens with an expert here, in slot order
    for s in range(n):
        _, sids, _ = inputs(s, launch)
        tokens = [
            t for t in range(BS) if any(e >= 0 and e // LOCAL_EXPERTS == rank for e in sids[t])
        ]
        received.append(tokens)
        per_rank.append(len(tokens))
        for e in range(LOCAL_EXPERTS):
            per_expert[e] += np.count_nonzero(sids == base + e)
    rows: list[list[tuple[int, int, int, int]]] = [[] for _ in range(LOCAL_EXPERTS)]
    for core in range(AIV_NUM):
        for s, tokens in enumerate(received):
            _, sids, _ = inputs(s, launch)
            first, last = split_to_core(len(tokens), AIV_NUM, core)
            for slot in range(first, last):
                t = tokens[slot]
                for k in range(K):
                    if base <= sids[t, k] < base + LOCAL_EXPERTS:
                        rows[sids[t, k] - base].append((s, t, k, slot))
    meta = [row for expert in rows for row in expert]
    sources = [inputs(s, launch) for s in range(n)]
    recv_x = [sources[s][0][t] for s, t, _, _ in meta]
    parts += [np.array(per_rank), per_expert, *recv_x, np.array(meta).reshape(-1)]
    if launch % 2:
        parts.append(np.array([sources[s][2][t, k] for s, t, k, _ in meta]))
    return np.concatenate([np.asarray(p, dtype=np.float64).reshape(-1) for p in parts])


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


def launch_epilogue(context, dstSlotIdx, numRecvPerRank, numRecvPerExpert, cachedMeta,
                    weights, workspace):  # fmt: skip
    """One MoeEpDispatchEpilogue launch as the host runs it, after its dispatch: recvX and
    recvSrcMetadata sized by the dispatch's per-expert counts (A rows), recvTopkWeights when
    ``weights``, ``cachedMeta`` a previous recvSrcMetadata (IsCached) or None, ``workspace``
    the previous launch's (None: a new one). Returns recvX, recvSrcMetadata,
    recvTopkWeights (or None) and the workspace."""
    rank, n, dev = hp.get_rank(), hp.get_world_size(), hp.device()
    A = int(numRecvPerExpert.sum())  # the host's look at the dispatch's counts
    recvX = torch.zeros(A, H, dtype=torch.float16, device=dev)
    recvSrcMetadata = torch.zeros(A, RECV_META_FIELDS, dtype=torch.int32, device=dev)
    recvTopkWeights = torch.zeros(A, dtype=torch.float32, device=dev) if weights else None
    tiling, wsSize = MoeEpDispatchEpilogueTilingFunc(
        n, rank, LOCAL_EXPERTS * n, NUM_MAX_TOKENS_PER_RANK, CCL_BUFFER_SIZE,
        tuple(dstSlotIdx.shape), tuple(numRecvPerRank.shape), tuple(numRecvPerExpert.shape),
        None if cachedMeta is None else tuple(cachedMeta.shape), tuple(recvX.shape),
        tuple(recvSrcMetadata.shape), None if recvTopkWeights is None else (A,),
    )  # fmt: skip
    if workspace is None:  # the workspace outlives a launch (stale hit counts included)
        workspace = torch.zeros(wsSize, dtype=torch.uint8, device=dev)
    hp.launch(
        moe_ep_dispatch_epilogue, context, dstSlotIdx, numRecvPerRank, numRecvPerExpert,
        cachedMeta, recvX, recvSrcMetadata, recvTopkWeights, None, workspace, tiling,
        block_dim=tiling.moeEpDispatchEpilogueInfo.aivNum, kernel_type="aiv",
    )  # fmt: skip
    return recvX, recvSrcMetadata, recvTopkWeights, workspace


def main() -> list[str]:
    rank = hp.get_rank()
    lines, workspace, epiWorkspace, cached, cachedMeta = [], None, None, None, None
    context = MoeCommContext()  # the host's Mc2Context, once per communicator
    for launch in (1, 2):  # odd: slots assigned; even: the previous routing, cached slots
        x, ids, weights = inputs(rank, launch)
        isCached = launch % 2 == 0
        tiling, workspace, numRecvPerRank, numRecvPerExpert, dstSlotIdx = launch_dispatch(
            context, x, ids, None if isCached else weights, cached if isCached else None, workspace
        )
        recvX, recvSrcMetadata, recvTopkWeights, epiWorkspace = launch_epilogue(
            context, dstSlotIdx, numRecvPerRank, numRecvPerExpert,
            cachedMeta if isCached else None, not isCached, epiWorkspace,
        )  # fmt: skip
        got = [dstSlotIdx, numRecvPerRank, numRecvPerExpert, recvX, recvSrcMetadata]
        got += [] if recvTopkWeights is None else [recvTopkWeights]
        got = torch.cat([t.double().reshape(-1) for t in got])
        mode = "cached" if isCached else "dedup, weights"
        detail = f"{mode}, {int(numRecvPerRank.sum())} slots, {recvX.shape[0]} rows"
        lines.append(compare(f"launch-{launch}", got, reference(rank, launch), detail))
        cached, cachedMeta = dstSlotIdx.clone(), recvSrcMetadata.clone()
    return lines


if __name__ == "__main__":
    run_sample(main, platform=PLATFORM, **RUN_KWARGS)
