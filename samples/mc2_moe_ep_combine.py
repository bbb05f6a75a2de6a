"""Port of ops-transformer's MoeEpCombine (the Hcomm window combine), call for call.

Source: ops-transformer, ``mc2/moe_ep_combine/op_kernel/moe_ep_combine.h`` (``MoeEpCombine``:
``Init``, ``SplitToCore``, ``SendToken``, ``SetStatus``, ``SendPhaseExpertToToken``,
``BuffInit``, ``WaitDispatch``, ``ProcessTopKToken``, ``RecvPhaseReduce``, ``Process``,
``GetCommHandle``, ``GetUrmaWinAddrByRankId``, ``GetLocalWorkspaceDataAddr`` /
``StateAddr``), ``moe_ep_combine.cpp``, ``moe_ep_combine_tiling.h``, the context
``Mc2Aclnn::MoeCommContext`` of ``mc2/common/op_kernel/mc2_moe_context.h`` and the host tiling
``op_host/op_tiling/moe_ep_combine_tiling.cpp`` (``CheckAttrParams``,
``CheckInputTensorShape``, ``perSlotBytes``, ``CheckWinSize``, the workspace). Its partner,
samples/mc2_moe_ep_dispatch.py, runs first (imported), and so does the epilogue port that sample
holds (``MoeEpDispatchEpilogue``, imported as ``launch_epilogue``): it turns the received
slots into ``recvX`` rows grouped by local expert with their ``recvSrcMetadata``
``{srcRank, tokenIdx, topkIdx, slotIdx}``, the combine's inputs.

What runs unchanged: the window layout of ``CheckWinSize`` (the combine status area at
``winStateOffset``, right after the dispatch's count and slot notify words: one 32-byte status
of eight 1.0f per (token, k); the combine data area at ``winDataOffset``, after the dispatch's
slots: one ``perSlotBytes`` slot per (token, k), the row and at ``hAlignSize`` the top-k
weight), the workspace (per destination rank its statuses, then per rank its data stash), the
send split by destination ranks over the AIV cores (each core scans every ``recvSrcMetadata``
row in chunks and takes those of its ranks), the row (and weight) staged in the stash or, for
the own rank, copied straight into the own window, ``WriteNbi`` of the slot, then the status:
``Drain``, ``WriteNbi`` of the 32 bytes, ``Drain`` (own rank: an MTE copy); the receive split
by tokens, the round-robin ``WaitDispatch`` (one read of the token's K statuses, their FP32 sum
within 0.5 of ``8 * K``, then the reset), the FP32 sum of the K rows cast back with
``CAST_RINT`` and the copy of the weights into ``combinedTopkWeights``. Both templates run:
launch 1 with ``HasTopkWeight`` (the dispatch numbered slots and carried weights), launch 2
without (the dispatch replayed the routing with ``IsCached``, so did the epilogue).

Stand-ins: FP16 rows instead of BF16, no bias inputs (the kernel ignores them), no
``MaskCheck``/``MaskAlign`` (declared, never defined); the routing has no invalid (-1) expert,
because the kernel waits for all K statuses of a token (see docs/notes/mc2-kernels.md, section
19); small sizes and the dispatch port's three AIV cores; UB buffers are torch tensors, pipe
barriers and cache maintenance are program order; the workspaces are their user parts only.
The "experts" between the epilogue and the combine add their global expert id to each row
(FP16, exact). ``MoeCommContext`` is the dispatch port's:
``hp.HcclChannelAcquire`` / ``hp.HcclChannelGetHcclBuffer`` on the host, writes through
``hp.Hcomm[hp.COMM_PROTOCOL_UBC_CTP]`` (docs/hcomm.md), Ascend 950's UBC_CTP on the A3
platform's windows.

Run: ``python samples/mc2_moe_ep_combine.py`` (4 emulated ranks),
``python -m hccl_py run -n 2 --backend gloo samples/mc2_moe_ep_combine.py``.
"""

from ctypes import c_uint64

import numpy as np
import torch
from _common import Ceil, compare, f32, on_device, run_sample
from _mc2 import moe_inputs, split_to_core, uint32_fields
from mc2_moe_ep_dispatch import (
    AIV_NUM,
    BS,
    CCL_BUFFER_SIZE,
    LOCAL_EXPERTS,
    NUM_MAX_TOKENS_PER_RANK,
    PLATFORM,
    RUN_KWARGS,
    UB_ALIGN,
    WIN_ADDR_ALIGN,
    H,
    K,
    MoeCommContext,
    MoeEpCommonTilingData,
    i32,
    launch_dispatch,
    launch_epilogue,
)

import hccl_py as hp
from hccl_py import TilingData

HCOMM_INIT_SIZE = 512
RECV_META_FIELDS = 4
STATE_OFFSET = 32
FLOAT_PER_UB_ALIGN = 8
DCCI_OFFSET = 64
MAX_OUT_DTYPE_SIZE = 2
METADATA_DTYPE_SIZE = 4
SIZEOF_X = 2  # FP16


class MoeEpCombineInfo(TilingData):
    _fields_ = [
        ("cfg", MoeEpCommonTilingData),
        *uint32_fields("hasTopkWeights", "aivNum"),
        *[
            (name, c_uint64)
            for name in (
                "totalWinSizeEp",
                "totalUbSize",
                "localWsSizeDataPerRank",
                "localWsSizeStatusPerRank",
                "winStateOffset",
                "winDataOffset",
            )
        ],
    ]


class MoeEpCombineTilingData(TilingData):
    _fields_ = [("moeEpCombineInfo", MoeEpCombineInfo)]


# ---------------------------------------------------------------- host tiling


def AlignUpWin(data: int) -> int:
    return Ceil(data, WIN_ADDR_ALIGN) * WIN_ADDR_ALIGN


def MoeEpCombineTilingFunc(epWorldSize, epRankId, numExperts, nmt, cclBufferSize, x, topkIdx,
                           recvSrcMetadata, numRecvPerExpert, topkWeights):  # fmt: skip
    """The host tiling: the tiling data and the workspace size (its user part)."""
    tiling = MoeEpCombineTilingData()
    info = tiling.moeEpCombineInfo
    # CheckAttrParams
    assert 2 <= epWorldSize <= 128 and 0 <= epRankId < epWorldSize
    assert 2 <= numExperts <= 2048 and numExperts % epWorldSize == 0 and nmt > 0
    info.cfg.epWorldSize, info.cfg.epRankId, info.cfg.numExperts = epWorldSize, epRankId, numExperts
    info.cfg.numLocalExperts = numExperts // epWorldSize
    info.cfg.numMaxTokensPerRank = nmt
    # CheckInputTensorShape
    assert x[0] > 0 and 1 <= x[1] <= 8192 and topkIdx[0] > 0 and 0 < topkIdx[1] <= 32
    assert x[0] <= epWorldSize * nmt * min(topkIdx[1], info.cfg.numLocalExperts)
    info.cfg.hidden, info.cfg.numTokens, info.cfg.topK = x[1], topkIdx[0], topkIdx[1]
    assert tuple(recvSrcMetadata) == (x[0], RECV_META_FIELDS)
    assert tuple(numRecvPerExpert) == (info.cfg.numLocalExperts,)
    assert topkWeights is None or tuple(topkWeights) == (x[0],)
    info.hasTopkWeights = int(topkWeights is not None)
    hAlign32 = Ceil(info.cfg.hidden * MAX_OUT_DTYPE_SIZE, UB_ALIGN) * UB_ALIGN
    info.cfg.perSlotBytes = AlignUpWin(hAlign32 + UB_ALIGN)
    # CheckWinSize
    L, K_ = info.cfg.numLocalExperts, info.cfg.topK
    perWinDataNeed = K_ * nmt * info.cfg.perSlotBytes
    dispatchWinStateSize = epWorldSize * AlignUpWin(L * 4) + 2 * epWorldSize * WIN_ADDR_ALIGN
    combineWinStateSize = K_ * nmt * WIN_ADDR_ALIGN + epWorldSize * WIN_ADDR_ALIGN
    topKAlign = Ceil(K_ * METADATA_DTYPE_SIZE, UB_ALIGN) * UB_ALIGN
    dispatchWinDataSize = epWorldSize * nmt * AlignUpWin(hAlign32 + topKAlign * 2 + UB_ALIGN)
    winNeedTotal = dispatchWinStateSize + combineWinStateSize + dispatchWinDataSize + perWinDataNeed
    assert winNeedTotal <= cclBufferSize, "HCCL_BUFFSIZE too small"
    info.totalWinSizeEp = cclBufferSize
    info.winStateOffset = dispatchWinStateSize
    info.winDataOffset = dispatchWinStateSize + combineWinStateSize + dispatchWinDataSize
    # the workspace (without SYSTEM_NEED_WORKSPACE)
    info.localWsSizeDataPerRank = nmt * K_ * info.cfg.perSlotBytes
    info.localWsSizeStatusPerRank = nmt * K_ * UB_ALIGN
    workspace = epWorldSize * (info.localWsSizeDataPerRank + info.localWsSizeStatusPerRank)
    info.aivNum = AIV_NUM  # GetCoreNumAiv stand-in
    info.totalUbSize = 248 * 1024
    return tiling, workspace


# ---------------------------------------------------------------- the kernel


class MoeEpCombine:
    def Init(self, context, x, topkIdx, recvSrcMetadata, numRecvPerExpert, topkWeightsOptional,
             bias0, bias1, combinedX, combinedTopkWeightsOptional, workspace, tilingData) -> None:  # fmt: skip
        info = tilingData.moeEpCombineInfo
        self.aivId_ = hp.GetBlockIdx()
        self.localUrmaWorkspace_ = workspace
        self.HasTopkWeight = bool(info.hasTopkWeights)  # the template argument
        self.epWorldSize_ = info.cfg.epWorldSize
        self.numMaxTokensPerRank_ = info.cfg.numMaxTokensPerRank
        self.numTokens_, self.topK_, self.axisH_ = (
            info.cfg.numTokens,
            info.cfg.topK,
            info.cfg.hidden,
        )
        self.perSlotBytes_ = info.cfg.perSlotBytes
        self.aivNum_ = info.aivNum
        self.localmoeNum_ = info.cfg.numLocalExperts
        self.localWsSizeDataPerRank_ = info.localWsSizeDataPerRank
        self.localWsSizeStatusPerRank_ = info.localWsSizeStatusPerRank
        self.hAlignSize_ = Ceil(self.axisH_ * SIZEOF_X, UB_ALIGN) * UB_ALIGN
        self.hWeightAlignSize_ = self.hAlignSize_ + UB_ALIGN
        self.stateOffset_ = STATE_OFFSET

        self.hcomm_ = hp.Hcomm[hp.COMM_PROTOCOL_UBC_CTP]()
        self.hcomm_.Init(torch.zeros(HCOMM_INIT_SIZE, dtype=torch.uint8), HCOMM_INIT_SIZE)

        self.mc2Context_ = context
        self.rankId_ = self.mc2Context_.epRankId
        self.winRankAddr_ = list(self.mc2Context_.epHcclBuffer[: self.epWorldSize_])
        self.hcommHandle_ = list(self.mc2Context_.hcommHandle)

        self.workspaceStateSize_ = (
            self.numMaxTokensPerRank_ * self.topK_ * UB_ALIGN * self.epWorldSize_
        )
        self.CombineStateAddr_ = info.winStateOffset
        self.CombineDataAddr_ = info.winDataOffset

        self.xGm_ = x
        self.recvSrcMetadataGm_ = recvSrcMetadata
        self.combinedXGm_ = combinedX
        # actualA_: the received rows, numRecvPerExpert summed (a cache line clean every 8)
        self.actualA_ = int(hp.gm_tensor(numRecvPerExpert, torch.int64, self.localmoeNum_).sum())
        self.ubXBytes_ = self.hAlignSize_
        self.XTypeAlign32Size_ = self.hAlignSize_
        if self.HasTopkWeight:
            self.XTypeAlign32Size_ = self.hWeightAlignSize_
            self.topkWeightsOptionalGm_ = topkWeightsOptional
            self.combinedTopkWeightsGm_ = combinedTopkWeightsOptional

    def GetCommHandle(self, rankId: int) -> int:
        index = rankId - 1 if rankId > self.rankId_ else rankId
        return self.hcommHandle_[index]

    def GetUrmaWinAddrByRankId(self, rankId: int, offset: int) -> hp.GmAddr:
        return self.winRankAddr_[rankId] + offset

    def GetUrmaStateAddrByRankId(self, rankId: int, offset: int) -> hp.GmAddr:
        return self.winRankAddr_[rankId] + offset

    def GetLocalWorkspaceDataAddr(self, rankId: int, offset: int) -> hp.GmAddr:
        return self.localUrmaWorkspace_ + offset + self.localWsSizeDataPerRank_ * rankId

    def GetLocalWorkspaceStateAddr(self, rankId: int) -> hp.GmAddr:
        return self.localUrmaWorkspace_ + self.localWsSizeStatusPerRank_ * rankId

    def SplitToCore(self, curSendCnt: int, curUseAivNum: int) -> tuple[int, int, int]:
        start, end = split_to_core(curSendCnt, curUseAivNum, self.aivId_)
        return start, end, end - start

    def SendToken(
        self, localWorkspaceAddr, remoteRankWinAddr, tokenIndex: int, dstRankId: int
    ) -> None:
        outTokenGT = localWorkspaceAddr
        if dstRankId == self.rankId_:  # the own rank: straight into the own window
            outTokenGT = remoteRankWinAddr
        H_ = self.axisH_
        xTmpTensor = torch.zeros(self.XTypeAlign32Size_, dtype=torch.uint8)  # xQueue_
        row = hp.gm_tensor(self.xGm_ + tokenIndex * H_ * SIZEOF_X, torch.uint8, H_ * SIZEOF_X)
        xTmpTensor[: H_ * SIZEOF_X] = row
        hCommuCopyOutLen = self.hAlignSize_
        if self.HasTopkWeight:
            weight = hp.gm_tensor(self.topkWeightsOptionalGm_ + tokenIndex * 4, torch.uint8, 4)
            xTmpTensor[self.hAlignSize_ : self.hAlignSize_ + 4] = weight
            hCommuCopyOutLen = self.hWeightAlignSize_
        hp.gm_tensor(outTokenGT, torch.uint8, hCommuCopyOutLen)[:] = xTmpTensor[:hCommuCopyOutLen]
        if dstRankId != self.rankId_:
            self.hcomm_.WriteNbi(
                self.GetCommHandle(dstRankId),
                remoteRankWinAddr,
                localWorkspaceAddr,
                self.XTypeAlign32Size_,
            )

    def SetStatus(
        self, localRankStateAddr, remoteRankStateAddr, tokenIndex: int, dstRankId: int
    ) -> None:
        outStateTensor = localRankStateAddr
        if dstRankId == self.rankId_:  # the own rank: straight into the own window
            outStateTensor = remoteRankStateAddr
        f32(outStateTensor, FLOAT_PER_UB_ALIGN)[:] = self.statusTensor_
        if dstRankId != self.rankId_:
            commHandle = self.GetCommHandle(dstRankId)
            self.hcomm_.Drain(commHandle)
            self.hcomm_.WriteNbi(commHandle, remoteRankStateAddr, localRankStateAddr, UB_ALIGN)
            self.hcomm_.Drain(commHandle)

    def SendPhaseExpertToToken(self) -> None:
        startRankId, endRankId, sendRankNum = self.SplitToCore(self.epWorldSize_, self.aivNum_)
        if startRankId >= endRankId or sendRankNum == 0 or self.actualA_ == 0:
            return
        self.statusTensor_ = torch.ones(FLOAT_PER_UB_ALIGN, dtype=torch.float32)
        metaChunkTokens = min(self.actualA_, 8192)
        K_ = self.topK_
        for chunkStart in range(0, self.actualA_, metaChunkTokens):
            chunkEnd = min(chunkStart + metaChunkTokens, self.actualA_)
            curChunkTokens = chunkEnd - chunkStart
            metadataLocal = i32(
                self.recvSrcMetadataGm_ + chunkStart * RECV_META_FIELDS * 4,
                curChunkTokens * RECV_META_FIELDS,
            ).clone()
            for i in range(curChunkTokens):
                tokenIndex = chunkStart + i
                src_rank, src_token_idx, src_topK_idx = metadataLocal[i * 4 : i * 4 + 3].tolist()
                if src_rank < 0 or src_rank < startRankId or src_rank >= endRankId:
                    continue
                slotOffset = (src_token_idx * K_ + src_topK_idx) * self.perSlotBytes_
                localRankWorkSpaceAddr = (
                    self.GetLocalWorkspaceDataAddr(src_rank, self.workspaceStateSize_) + slotOffset
                )
                remoteRankWinAddr = (
                    self.GetUrmaWinAddrByRankId(src_rank, self.CombineDataAddr_) + slotOffset
                )
                self.SendToken(localRankWorkSpaceAddr, remoteRankWinAddr, tokenIndex, src_rank)
                stateSlot = (src_token_idx * K_ + src_topK_idx) * self.stateOffset_
                localRankStateAddr = self.GetLocalWorkspaceStateAddr(src_rank) + stateSlot
                remoteRankStateAddr = (
                    self.GetUrmaStateAddrByRankId(src_rank, self.CombineStateAddr_) + stateSlot
                )
                self.SetStatus(localRankStateAddr, remoteRankStateAddr, tokenIndex, src_rank)

    def BuffInit(self) -> None:
        self.tStart_, self.tEnd_, self.tPerCore_ = self.SplitToCore(self.numTokens_, self.aivNum_)
        if self.tStart_ >= self.numTokens_:
            return
        if self.HasTopkWeight:
            self.ubWeighted_ = torch.zeros(1, dtype=torch.float32)
        self.ubAccFp32_ = torch.zeros(self.axisH_, dtype=torch.float32)

    def WaitDispatch(self, tokenIndex: int, copyCount: int, beginIndex: int) -> bool:
        target = 1.0 * copyCount
        minTarget, maxTarget = target - 0.5, target + 0.5
        stateGM = (
            self.GetUrmaStateAddrByRankId(self.rankId_, self.CombineStateAddr_)
            + tokenIndex * self.topK_ * self.stateOffset_
        )
        stateTensor = f32(stateGM, copyCount).clone()
        localState = float(stateTensor.sum())  # Sum, FP32
        if minTarget < localState < maxTarget:
            f32(stateGM, copyCount)[:] = self.stateResetTensor_[:copyCount]
            return True
        return False

    def ProcessTopKToken(self, tokenIndex: int) -> None:
        self.ubAccFp32_.zero_()
        H_, K_ = self.axisH_, self.topK_
        for topkId in range(K_):
            slotOffset = (tokenIndex * K_ + topkId) * self.perSlotBytes_
            wAddr = self.GetUrmaWinAddrByRankId(self.rankId_, self.CombineDataAddr_) + slotOffset
            ubX = hp.gm_tensor(wAddr, torch.float16, self.hAlignSize_ // SIZEOF_X).clone()
            self.ubAccFp32_ += ubX[:H_].float()  # Cast, Add
            if self.HasTopkWeight:
                self.ubWeighted_[:] = f32(wAddr + self.hAlignSize_, 1)
                f32(self.combinedTopkWeightsGm_ + (tokenIndex * K_ + topkId) * 4, 1)[:] = (
                    self.ubWeighted_
                )

    def RecvPhaseReduce(self) -> None:
        K_, H_ = self.topK_, self.axisH_
        self.stateResetTensor_ = torch.zeros(K_ * FLOAT_PER_UB_ALIGN, dtype=torch.float32)
        tokenStatusTensor = [0] * self.tPerCore_
        CompletedtokenNum = 0
        copyCount = K_ * FLOAT_PER_UB_ALIGN
        while CompletedtokenNum != self.tPerCore_:
            for tokenIdx in range(self.tStart_, self.tEnd_):
                if tokenStatusTensor[tokenIdx - self.tStart_] == 1:
                    continue
                if not self.WaitDispatch(tokenIdx, copyCount, self.tStart_):
                    continue
                CompletedtokenNum += 1
                tokenStatusTensor[tokenIdx - self.tStart_] = 1
                self.ProcessTopKToken(tokenIdx)
                ubResultBf16 = self.ubAccFp32_.half()  # Cast, CAST_RINT
                out = self.combinedXGm_ + tokenIdx * H_ * SIZEOF_X
                hp.gm_tensor(out, torch.float16, H_)[:] = ubResultBf16

    def Process(self) -> None:
        self.SendPhaseExpertToToken()
        self.BuffInit()
        self.RecvPhaseReduce()


def moe_ep_combine(context, x, topkIdx, recvSrcMetadata, numRecvPerExpert, topkWeights, bias0,
                   bias1, combinedX, combinedTopkWeightsOptional, workspace, tilingGM):  # fmt: skip
    tilingData = hp.GET_TILING_DATA_WITH_STRUCT(MoeEpCombineTilingData, tilingGM)
    op = MoeEpCombine()
    op.Init(context, x, topkIdx, recvSrcMetadata, numRecvPerExpert, topkWeights, bias0, bias1,
            combinedX, combinedTopkWeightsOptional, workspace, tilingData)  # fmt: skip
    op.Process()


# ---------------------------------------------------------------- host side and the check


def inputs(rank: int, launch: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Tokens, routing (every id valid) and top-k weights; an even launch replays the previous
    routing."""
    x, _ = moe_inputs(rank, launch, BS, K, H, LOCAL_EXPERTS)
    _, ids = moe_inputs(rank, launch - 1 + launch % 2, BS, K, H, LOCAL_EXPERTS)
    weights = ((np.arange(BS * K) + 1 + rank) / 8).astype(np.float32).reshape(BS, K)
    return x, ids, weights


def experts(recvX: torch.Tensor, numRecvPerExpert: torch.Tensor) -> torch.Tensor:
    """The experts between the kernels: each adds its global id to its rows (FP16, exact)."""
    rank, out = hp.get_rank(), recvX.clone()
    first = 0
    for e, count in enumerate(numRecvPerExpert.tolist()):
        out[first : first + count] += rank * LOCAL_EXPERTS + e
        first += count
    return out


def reference(rank: int, launch: int) -> np.ndarray:
    """numpy: combined_x[t] = sum over k of (x[t] + ids[t, k]) in FP32, rounded to FP16; then
    (odd launches) the top-k weights as they went out."""
    x, ids, w = inputs(rank, launch)
    rows = (x[:, None, :] + ids[:, :, None].astype(np.float16)).astype(np.float32)
    combined = rows.sum(axis=1, dtype=np.float32).astype(np.float16).astype(np.float64)
    parts = [combined.reshape(-1)] + ([w.astype(np.float64).reshape(-1)] if launch % 2 else [])
    return np.concatenate(parts)


def main() -> list[str]:
    rank, n, dev = hp.get_rank(), hp.get_world_size(), hp.device()
    context = MoeCommContext()  # the host's Mc2Context, once per communicator
    lines, cachedSlots, cachedMeta = [], None, None
    dispatchWs, epilogueWs, combineWs = None, None, None
    for launch in (1, 2):  # odd: slots numbered, weights; even: IsCached, no weights
        x, ids, weights = inputs(rank, launch)
        isCached = launch % 2 == 0
        _, dispatchWs, numRecvPerRank, numRecvPerExpert, dstSlotIdx = launch_dispatch(
            context, x, ids, None if isCached else weights, cachedSlots if isCached else None,
            dispatchWs,
        )  # fmt: skip
        recvX, recvSrcMetadata, recvTopkWeights, epilogueWs = launch_epilogue(
            context, dstSlotIdx, numRecvPerRank, numRecvPerExpert,
            cachedMeta if isCached else None, not isCached, epilogueWs,
        )  # fmt: skip
        A = recvX.shape[0]
        expertX = experts(recvX, numRecvPerExpert)
        cTiling, wsSize = MoeEpCombineTilingFunc(
            n, rank, LOCAL_EXPERTS * n, NUM_MAX_TOKENS_PER_RANK, CCL_BUFFER_SIZE, expertX.shape,
            ids.shape, recvSrcMetadata.shape, numRecvPerExpert.shape,
            None if recvTopkWeights is None else recvTopkWeights.shape,
        )  # fmt: skip
        if combineWs is None:  # the workspace outlives a launch
            combineWs = torch.zeros(wsSize, dtype=torch.uint8, device=dev)
        combinedX = torch.zeros(BS, H, dtype=torch.float16, device=dev)
        combinedW = None if isCached else torch.zeros(BS * K, dtype=torch.float32, device=dev)
        hp.launch(
            moe_ep_combine, context, expertX, on_device(ids), recvSrcMetadata, numRecvPerExpert,
            recvTopkWeights, None, None, combinedX, combinedW, combineWs, cTiling,
            block_dim=cTiling.moeEpCombineInfo.aivNum, kernel_type="aiv",
        )  # fmt: skip
        got = [combinedX.double().reshape(-1)] + ([] if combinedW is None else [combinedW.double()])
        mode = "cached, no weights" if isCached else "weights"
        lines.append(
            compare(
                f"launch-{launch}", torch.cat(got), reference(rank, launch), f"{mode}, {A} rows"
            )
        )
        cachedSlots, cachedMeta = dstSlotIdx.clone(), recvSrcMetadata.clone()
    return lines


if __name__ == "__main__":
    run_sample(main, platform=PLATFORM, **RUN_KWARGS)
