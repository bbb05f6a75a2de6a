"""Port of ops-transformer's MegaMoe on Ascend 950 (arch35, the MTE path), call for call.

Source: ops-transformer, ``mc2/mega_moe/op_kernel/arch35/``: the entry ``mega_moe_apt.cpp``
(``KERNEL_TYPE_MIX_AIC_1_2``, ``TILINGKEY_TPL_MTE``, ``DISPATCH_QUANT_MODE_MXFP``), the class
``mega_moe.h`` (``MegaMoe``: ``Init``, ``SendAndQuantBuffInit``, ``ResetFlagList``,
``ExpertTokenNumCopyOut``, ``SendMaskCal``, ``QuantProcessInRank``, ``SendCntCal``,
``FetchTokenNLoadMetaInfo``, ``DispatchCopyMte3``, ``CopyGMToGMPerToken``,
``TripleInfoCalAndDispatch``, ``UpdateGroupParams``, ``UpdateGlobalBuffer``, ``Unpermute``,
``UnpermuteProcessToken``, ``CrossRankSyncInWorldSize``, ``Process``), the GEMM drivers of
``mega_moe_impl.h`` (``GroupMatmulImplGeneric``, ``AicComputeGeneric``,
``WaitForUpstreamReady``, ``AivGmm1PostGeneric``, ``AivGmm2PostGeneric``), ``CombineTokens`` of
``mega_moe_combine_send.h``, ``mega_moe_base.h`` (``Mc2MoeContext``, ``PeermemInfo``, the
mode-4 ``NotifyVector`` / ``WaitForCube`` / ``NotifyCube`` / ``WaitForVector``, ``EndSync``,
``EndGMM2Sync``, ``TilingByCore``, ``GmSignalWaitBarrier``), ``mega_moe_workspace_info.h``
(``WorkspaceInfo``), ``mega_moe_tiling.h``, the flag count of the swiglu epilogue
(``block_epilogue_swiglu_mx_quant.h``: one ``AtomicAdd`` per tile) and the host tiling
``op_host/op_tiling/arch35/mega_moe_tiling.cpp`` (``CheckAndSetInput``'s window size,
``SetAttrParams``, ``SetAdaptiveBufferConfigs``, the workspace), as of the 2026-07-21 snapshot
(mirror-cann 3a280bcc).

The kernel, per rank: the AIV cores quantise this rank's tokens (MX FP8) into its own window,
compute per global expert a bit mask of the (token, k) pairs routed to it and push
``[mask | count]`` into the expert's rank's window, reset the workspace flags; ``SyncAll<false>``,
then a cross-rank barrier through the windows (``CrossRankSyncInWorldSize``: a count per
rank and core, written into every peer's window, polled for equality). Then per local expert,
on each AI core's AIV1: ``SendCntCal`` (the counts from the own window, their prefix sums,
the count and an ``AtomicAdd`` flag to the AIC and AIV0 of its AI core) and the dispatch of its
share of each source rank's rows: the rows are *read* from the source's window (its
quantised tokens) into the workspace with a ``{rank, token, k}`` triple each, then one
``AtomicAdd`` of rows per 256-row wave. The AIC polls the wave counter, computes the GEMM1 tile
into AIV0's UB and raises a mode-4 flag; AIV0 runs SwiGLU and the MX quantisation, writes
them out, adds 1 to the expert's GEMM2 flag and answers. GEMM2 waits for that flag, then
ping-pongs tiles with AIV0, which writes each row straight into the window of the token's
rank at ``(token * K + k) * H``. ``SyncAll<true>``, the cross-rank barrier again, and every
AIV core sums its tokens' K rows from its own window, times the top-k weights, in FP32,
rounded to BF16 (``Unpermute``).

Window (``PeermemInfo``, at ``epHcclBuffer[r]`` of the ``Mc2MoeContext`` input): 60 KiB of
sync words (64 bytes per source rank; each core's count at ``48 KiB + core * 64``), the mask
slots ``[local expert][source rank]`` of ``CeilAlign(bs * K / 8, 32)`` bytes plus a 32-byte
count, the quantised tokens (``CeilAlign(CeilAlign(h, 256) + h / 32, 32)`` bytes each), the
combine rows (BF16, ``bs * K * h``). The context is built on the host as aclnn's
``Mc2Context::GetMc2ContextTensor`` does (samples/_mc2_context.py; the op takes it as an
input and does not say who builds it), on an EP communicator of its own.

What runs unchanged: every offset above and of the workspace (dispatch rows and scales,
SwiGLU rows and scales, per (expert, AI core) counts, triples, the three flag arrays with
their strides), the core splits (experts round robin over the AIV cores for the masks,
``TilingByCore`` for tokens and flag resets, ``(source rank, shard)`` over the AI cores for
the dispatch, ``startBlockIdx`` rotating the GEMM tiles over the AI cores), the mask bits and
counts, the prefix sums and ``maxOutputSize`` cap, the dispatch's buffer ring, the wave
flags, the sync counts, the mode-4 flags (``4 + pingpong`` to AIV0, ``6 + pingpong`` back) and
their ``EndSync`` / ``EndGMM2Sync`` balance, the combine offsets, ``expertTokenNums``.

Stand-ins: the GEMMs are numpy (FP32 weights of shape ``(E, h, hiddenDim)`` and
``(E, hiddenDim / 2, h)``, passed as tensors, not ``TensorList``; no weight scales); the MX
quantisation is torch's FP8 E4M3 cast with a power-of-two scale per 32 values (E8M0 byte);
SwiGLU is ``silu(first half) * second half`` in FP32, no clamp; the AIC's fixpipe write
into AIV0's UB is a GM scratch per AI core (the stand-in region after the workspace); the
tiles are row-major (the swizzle is moot: every expert has one tile here); UB buffers are
torch tensors, ``SetFlag``/``WaitFlag``/``PipeBarrier`` and cache maintenance are program
order; ``aicNum`` 2 (4 AIV cores); the UB budget configs are one batch of 256 route items, 2
buffers. No shared experts, no combine quantisation; the layered (URMA) variant is not
ported. Sizes: ``bs`` 4 tokens of ``h`` 64, ``K`` 2, 6 experts per rank (each AIC gets several
tiles of each GEMM), ``hiddenDim`` 64 (the host's checks of ``h`` (a multiple of 1024) and
``hiddenDim`` (1k to 7k) and of the weights' shapes are left out);
the tokens are multiples of 0.5 in [-1.5, 1.5] (exact in MX FP8) and the weights -1, 0, 1,
so that both GEMMs are exact and the only roundings are BF16 and FP8 ones, which the numpy
reference repeats.

Launches: 1 and 2 with different routings (the workspace flags and the sync counts carry
over from launch 1).

Run: ``python samples/mc2_mega_moe.py`` (4 emulated ranks). On gloo
(``python -m hccl_py run -n 2 --backend gloo samples/mc2_mega_moe.py``) it usually passes but may
hang: the cores are real threads there, and the source's barrier, which waits for its count to
*equal* a word that a peer one barrier ahead overwrites, then misses its value
(docs/notes/mc2-kernels.md, section 29); so the tests run it on the emulator only. The same
race hangs some explored schedules on the emulator (``python -m hccl_py run --explore 3`` stops
at schedule 1 with a deadlock report, as seed 3 at 2 ranks does in the tests).
"""

from ctypes import c_float, c_int32, c_int64, c_uint8, c_uint32

import numpy as np
import torch
from _common import Ceil, compare, i32, on_device, run_sample
from _mc2 import uint32_fields
from _mc2_context import EP_HCCL_BUFFER, GetMc2ContextTensor

import hccl_py as hp
from hccl_py import AIC, AIV, TilingData

PLATFORM = "A3"
RUN_KWARGS = {"buffsize_mb": 2}
BS, K, H, HIDDEN_DIM, LOCAL_EXPERTS, AIC_NUM = 4, 2, 64, 64, 6, 2
LAUNCHES = 2

PEERMEM_DATA_OFFSET = 1024 * 60
SYNC_COUNT_OFFSET = 48 * 1024
ALIGN_32, ALIGN_256, ALIGN_512 = 32, 256, 512
INT_CACHELINE = 16
INT32_PER_256B = 8
DISPATCH_WAVE_TILE_M = 256
L1_TILE_M_256, L1_TILE_M_128, L1_TILE_N = 256, 128, 256
MXFP_SCALE_GROUP_NUM, MXFP_DIVISOR_SIZE, MXFP_MULTI_BASE_SIZE = 32, 64, 2
SWIGLU_N_HALF = 2
SYNC_AIC_AIV_MODE = 4
AIC_SYNC_AIV_FLAG, AIV_SYNC_AIC_FLAG = 4, 6
TOPO_TYPE_MTE = 0
FP8_MAX = 448.0
E8M0_BIAS = 127
FP8_EMAX = 8


def CeilAlign(a: int, b: int) -> int:
    return Ceil(a, b) * b


class MegaMoeDispatchBufferConfig(TilingData):
    _fields_ = [
        *[(f, c_int32) for f in ("routeItemsPerBatch", "routeBatchCount", "bufferCount")],
        ("copyBufferBytes", c_uint32),
    ]


class MegaMoeSendMaskBufferConfig(TilingData):
    _fields_ = [
        *[(f, c_int32) for f in ("routeItemsPerBatch", "routeBatchCount", "bufferCount")],
        ("bufferBytes", c_uint32),
    ]


class MegaMoeUnpermuteBufferConfig(TilingData):
    _fields_ = [
        ("tokensPerBatch", c_int32),
        ("inputBufferCount", c_int32),
        *uint32_fields("bf16SlotElementCount", "fp32SlotElementCount"),
        *uint32_fields("topKWeightsBufferBytes", "topKWeightsConversionBufferBytes"),
    ]


class MegaMoeTilingData(TilingData):
    _fields_ = [
        *uint32_fields("expertPerRank", "moeExpertPerRank", "bs", "h", "hiddenDim"),
        *uint32_fields("epWorldSize", "blockNumPerEP", "maxOutputSize", "topK", "aicNum"),
        ("blockAivNum", c_uint32),
        ("combineQuantMode", c_int64),
        ("clampLimit", c_float),
        ("groupedMatmulMode", c_uint8),
        ("topoType", c_int64),
        ("sharedExpertNum", c_uint32),
        ("dispatchBufferConfig", MegaMoeDispatchBufferConfig),
        ("sendMaskConfigForCoreWithExtraExpert", MegaMoeSendMaskBufferConfig),
        ("sendMaskConfigForCoreWithoutExtraExpert", MegaMoeSendMaskBufferConfig),
        ("sendMaskCoreCountWithExtraExpert", c_uint32),
        ("unpermuteConfigForFullTokenChunk", MegaMoeUnpermuteBufferConfig),
        ("unpermuteConfigForTailTokenChunk", MegaMoeUnpermuteBufferConfig),
        ("unpermuteFullTokenChunkCoreCount", c_uint32),
    ]


# ---------------------------------------------------------------- layouts (host and kernel)


def mask_sizes(t: MegaMoeTilingData) -> tuple[int, int]:
    """``maskAlignSize`` and ``maskSlotSize``: the bit mask of ``bs * K`` pairs, then a count."""
    compareCount = CeilAlign(t.bs * t.topK * 4, ALIGN_256) // 4
    maskAlignSize = CeilAlign(compareCount // 8, ALIGN_32)
    return maskAlignSize, maskAlignSize + ALIGN_32


def token_bytes(h: int) -> int:
    """One quantised token in the window: FP8 data (256-aligned), then its E8M0 scales."""
    return CeilAlign(CeilAlign(h, ALIGN_256) + Ceil(h, ALIGN_32), ALIGN_32)


class PeermemInfo:
    """mega_moe_base.h: the regions of a rank's window (``TOPO_TYPE_MTE``)."""

    def __init__(self, base: hp.GmAddr, t: MegaMoeTilingData) -> None:
        self.rankSyncInWorldPtr = base
        offset = PEERMEM_DATA_OFFSET
        self.maskRecvPtr = base + offset
        offset += CeilAlign(t.expertPerRank * t.epWorldSize * mask_sizes(t)[1], ALIGN_512)
        self.quantTokenScalePtr = base + offset
        offset += CeilAlign(t.bs * token_bytes(t.h), ALIGN_512)
        self.combineSendPtr = base + offset


class WorkspaceInfo:
    """mega_moe_workspace_info.h, the MTE path without A8W4 or combine quantisation; then the
    stand-in of each AI core's UB that its AIC writes (two 256 x 256 FP32 tiles)."""

    def __init__(self, base: hp.GmAddr, t: MegaMoeTilingData) -> None:
        size = 0

        def take(n: int, align: int = 1) -> hp.GmAddr:
            nonlocal size
            at = base + size
            size += CeilAlign(n, align)
            return at

        self.dispatchRevDataPtr = take(t.maxOutputSize * t.h, ALIGN_512)
        self.dispatchRevScalePtr = take(t.maxOutputSize * t.h // MXFP_SCALE_GROUP_NUM, ALIGN_512)
        half = t.hiddenDim // SWIGLU_N_HALF
        self.swigluQuantDataPtr = take(t.maxOutputSize * half, ALIGN_512)
        self.swigluQuantScalePtr = take(t.maxOutputSize * half // MXFP_SCALE_GROUP_NUM, ALIGN_512)
        self.expertRevTokenNumsPtr = take(t.expertPerRank * ALIGN_32 * t.aicNum, ALIGN_512)
        self.tripleInfoPtr = take(t.maxOutputSize * ALIGN_32, ALIGN_512)
        self.flagSwiGluToGmm2Ptr = take(4 * t.expertPerRank * INT_CACHELINE)
        slots = CeilAlign(Ceil(t.maxOutputSize, DISPATCH_WAVE_TILE_M), INT_CACHELINE)
        self.flagDispatchToGmm1Ptr = take(4 * t.expertPerRank * slots)
        self.flagSendCntCalToUpdParamsPtr = take(4 * INT_CACHELINE * t.expertPerRank * t.aicNum)
        self.workspaceSize = size
        self.ubStandInPtr = take(t.aicNum * 2 * L1_TILE_M_256 * L1_TILE_N * 4)
        self.totalSize = size


# ---------------------------------------------------------------- host tiling


def MegaMoeTilingFunc(epWorldSize: int, moeExpertNum: int, cclBufferSize: int, x: tuple,
                      topkIds: tuple, weight1: tuple) -> tuple[MegaMoeTilingData, int]:  # fmt: skip
    """The host tiling: the tiling data and the workspace size (user part and the stand-in)."""
    t = MegaMoeTilingData()
    bs, h = x
    topK = topkIds[1]
    expertPerRank, _, hiddenDim = weight1
    assert topkIds[0] == bs and moeExpertNum % epWorldSize == 0
    moeExpertPerRank = moeExpertNum // epWorldSize
    assert expertPerRank >= moeExpertPerRank
    t.bs, t.h, t.topK, t.hiddenDim, t.expertPerRank = bs, h, topK, hiddenDim, expertPerRank
    t.epWorldSize = epWorldSize
    # CheckAndSetInput: the window
    maskRecvSize = CeilAlign(expertPerRank * epWorldSize * mask_sizes(t)[1], ALIGN_512)
    quantTokenScaleSize = CeilAlign(bs * token_bytes(h), ALIGN_512)
    combineSendSize = CeilAlign(bs * h * topK * 2, ALIGN_512)
    leastCclBufferSize = PEERMEM_DATA_OFFSET + maskRecvSize + quantTokenScaleSize + combineSendSize
    assert cclBufferSize >= leastCclBufferSize, f"cclBufferSize should >= {leastCclBufferSize}"
    # platform: GetCoreNumAic / GetCoreNumAiv stand-ins
    t.aicNum, t.blockAivNum = AIC_NUM, 2 * AIC_NUM
    t.topoType = TOPO_TYPE_MTE
    # SetAttrParams (maxRecvTokenNum 0)
    t.maxOutputSize = bs * epWorldSize * min(topK, expertPerRank)
    t.blockNumPerEP = max(1, t.aicNum // epWorldSize)
    t.moeExpertPerRank = moeExpertPerRank
    t.clampLimit = 0.0
    # SetAdaptiveBufferConfigs: one batch of route items, two buffers (the UB budget stand-in)
    items = CeilAlign(bs * topK, ALIGN_256)
    d = t.dispatchBufferConfig
    d.routeItemsPerBatch, d.routeBatchCount, d.bufferCount = items, 1, 2
    d.copyBufferBytes = token_bytes(h)
    for s in (t.sendMaskConfigForCoreWithExtraExpert, t.sendMaskConfigForCoreWithoutExtraExpert):
        s.routeItemsPerBatch, s.routeBatchCount, s.bufferCount = items, 1, 2
        s.bufferBytes = items // 8 + ALIGN_32
    t.sendMaskCoreCountWithExtraExpert = (epWorldSize * moeExpertPerRank) % t.blockAivNum
    full = Ceil(bs, t.blockAivNum)
    active = Ceil(bs, full)
    tail = bs - (active - 1) * full
    t.unpermuteFullTokenChunkCoreCount = active if tail == full else active - 1
    for u, chunk in ((t.unpermuteConfigForFullTokenChunk, full),
                     (t.unpermuteConfigForTailTokenChunk, tail)):  # fmt: skip
        u.tokensPerBatch, u.inputBufferCount = chunk, 2
        u.bf16SlotElementCount = u.fp32SlotElementCount = h
    return t, WorkspaceInfo(hp.NULL, t).totalSize


# ---------------------------------------------------------------- compute stand-ins


def MxQuant(rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """MX FP8 E4M3 per 32 values (Quant::ComputeMaxExp / ComputeScale / ComputeFp8Data):
    the E8M0 scale ``floor(log2(amax)) - 8``, the data cast with round to nearest even."""
    v = rows.float().reshape(rows.shape[0], -1, MXFP_SCALE_GROUP_NUM)
    amax = v.abs().amax(-1)
    exp = torch.where(amax > 0, torch.floor(torch.log2(amax)), torch.full_like(amax, -127.0))
    exp = (exp - FP8_EMAX).clamp(min=-E8M0_BIAS)
    data = (v / torch.exp2(exp)[..., None]).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    scale = (exp + E8M0_BIAS).to(torch.uint8)
    return data.reshape(rows.shape[0], -1).view(torch.uint8), scale


def MxDequant(data: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """The GEMMs' view of MX FP8 rows: data times two to the scale."""
    v = data.view(torch.float8_e4m3fn).float().reshape(data.shape[0], -1, MXFP_SCALE_GROUP_NUM)
    return (v * torch.exp2(scale.float() - E8M0_BIAS)[..., None]).reshape(data.shape[0], -1)


def gm(addr: hp.GmAddr, dtype: torch.dtype, n: int) -> torch.Tensor:
    return hp.gm_tensor(addr, dtype, n)


# ---------------------------------------------------------------- mode-4 flags (mega_moe_base.h)


def NotifyCube(value: int = 0) -> None:
    hp.CrossCoreSetFlag[SYNC_AIC_AIV_MODE, hp.PIPE_V](AIV_SYNC_AIC_FLAG + value)


def WaitForVector(value: int = 0) -> None:
    hp.CrossCoreWaitFlag[SYNC_AIC_AIV_MODE, hp.PIPE_FIX](AIV_SYNC_AIC_FLAG + value)


def NotifyVector(value: int = 0) -> None:
    hp.CrossCoreSetFlag[SYNC_AIC_AIV_MODE, hp.PIPE_FIX](AIC_SYNC_AIV_FLAG + value)


def WaitForCube(value: int = 0) -> None:
    hp.CrossCoreWaitFlag[SYNC_AIC_AIV_MODE, hp.PIPE_V](AIC_SYNC_AIV_FLAG + value)


def EndSync(vecSetSyncCom: int) -> None:
    if vecSetSyncCom == 0:
        return
    if hp.g_coreType == AIC:
        WaitForVector()


def EndGMM2Sync(vecSetSyncCom: int, gmm2PingPongIdx: int) -> None:
    if hp.g_coreType == AIV:
        return
    if vecSetSyncCom <= 0:
        return
    if vecSetSyncCom == 1:
        WaitForVector()
    else:
        WaitForVector(gmm2PingPongIdx)
        WaitForVector(1 - gmm2PingPongIdx)


def TilingByCore(totalLen: int, align: int = ALIGN_32) -> tuple[int, int]:
    """``coreLen, coreOffset`` of this AIV core (``GetBlockIdx()`` among ``2 * GetBlockNum()``)."""
    coreIdx, coreNum = hp.GetBlockIdx(), hp.GetBlockNum() * 2
    lenPerCoreAlign = CeilAlign(Ceil(totalLen, coreNum), align)
    coreLen, coreOffset = lenPerCoreAlign, coreIdx * lenPerCoreAlign
    if coreOffset + coreLen >= totalLen:
        coreLen = totalLen - coreOffset
    if coreOffset >= totalLen:
        coreLen = 0
    return coreLen, coreOffset


def GmSignalWaitBarrier(sig_addr: hp.GmAddr, cmp_val: int) -> None:
    while int(i32(sig_addr, 1)[0]) != cmp_val:
        pass


def tile_shape(m: int, n: int, tileM: int, loopIdx: int) -> tuple[int, int, int, int]:
    """``(mLoc, nLoc, rows, cols)`` of tile ``loopIdx`` (row-major: the swizzle stand-in)."""
    nTiles = Ceil(n, L1_TILE_N)
    mLoc, nLoc = (loopIdx // nTiles) * tileM, (loopIdx % nTiles) * L1_TILE_N
    return mLoc, nLoc, min(tileM, m - mLoc), min(L1_TILE_N, n - nLoc)


class ExpertLoopState:
    """The problem shape ``(m, n, k)`` and the base offsets the expert loop moves on."""

    def __init__(self, n: int, k: int) -> None:
        self.m, self.n, self.k = 0, n, k
        self.aOffset = self.aScaleOffset = self.cOffset = self.cScaleOffset = 0
        self.flagOffset = self.bOffset = self.b2Offset = 0
        self.expertBeforeCnt = 0


class GMMAddrInfo:
    pass


# ---------------------------------------------------------------- the kernel


class MegaMoe:
    def Init(self, context, x, topkIds, topkWeights, weight1, weight2, yOut, expertTokenNumsOut,
             workspaceGM, t: MegaMoeTilingData) -> None:  # fmt: skip
        self.m_, self.k_, self.aicNum_, self.topK_ = t.bs, t.h, t.aicNum, t.topK
        self.sendTotalNum_ = self.m_ * self.topK_
        self.worldSize_, self.expertPerRank_ = t.epWorldSize, t.expertPerRank
        self.moeExpertPerRank_ = t.moeExpertPerRank
        self.blockNumPerRank_, self.maxOutputSize_ = t.blockNumPerEP, t.maxOutputSize
        maxWaves = Ceil(self.maxOutputSize_, DISPATCH_WAVE_TILE_M)
        self.dispatchFlagSlotsPerExpert_ = CeilAlign(maxWaves, INT_CACHELINE)
        self.hiddenDim_ = t.hiddenDim
        self.blockNum_ = hp.GetBlockNum()
        self.blockAivNum_ = hp.GetBlockNum() * 2
        self.blockIdx_ = hp.GetBlockIdx() // hp.GetTaskRatio()
        self.aivCoreIdx_ = hp.GetBlockIdx()
        self.subBlockIdx_ = hp.GetSubBlockIdx()
        self.mc2Context_ = context
        self.rankId_ = int(i32(context, 1)[0])  # mc2Context_->epRankId
        self.winRankAddr_ = [
            hp.GmAddr.from_int(int(gm(context + EP_HCCL_BUFFER + 8 * i, torch.int64, 1)[0]))
            for i in range(self.worldSize_)
        ]  # mc2Context_->epHcclBuffer[i]
        self.xGm, self.expertIdxGm, self.probsGm = x, topkIds, topkWeights
        self.bGm, self.b2Gm, self.y2Gm = weight1, weight2, yOut
        self.expertTokenNumsOut_ = expertTokenNumsOut
        self.tiling = t
        self.workspaceInfo = WorkspaceInfo(workspaceGM, t)
        self.peermemInfo = PeermemInfo(self.winRankAddr_[self.rankId_], t)
        base = self.peermemInfo.rankSyncInWorldPtr
        self.maskWinOffset_ = self.peermemInfo.maskRecvPtr - base
        self.quantWinOffset_ = self.peermemInfo.quantTokenScalePtr - base
        self.maskAlignSize_, self.maskSlotSize_ = mask_sizes(t)
        self.mxQuantTokenAlignBytes_ = CeilAlign(self.k_, ALIGN_256)
        self.mxQuantScaleAlignBytes_ = Ceil(self.k_, ALIGN_32)
        self.mxQuantTokenScaleAlignBytes_ = token_bytes(self.k_)
        self.cumsumRevCntInRank_ = 0
        self.startBlockIdx_ = 0
        self.gmm2PingPongIdx_ = 0

    def GetRankWinAddrWithOffset(self, rankId: int, offset: int) -> hp.GmAddr:
        return self.winRankAddr_[rankId] + offset

    # ------------------------------------------------------------ phase 1

    def SendAndQuantBuffInit(self) -> MegaMoeSendMaskBufferConfig | None:
        if hp.g_coreType == AIC:
            return None
        t = self.tiling
        cfg = (
            t.sendMaskConfigForCoreWithExtraExpert
            if self.aivCoreIdx_ < t.sendMaskCoreCountWithExtraExpert
            else t.sendMaskConfigForCoreWithoutExtraExpert
        )
        self.sendRouteItemsPerBatch_, self.sendRouteBatchCount_ = (
            cfg.routeItemsPerBatch,
            cfg.routeBatchCount,
        )
        self.topkIdsTensor_ = torch.zeros(self.sendRouteItemsPerBatch_, dtype=torch.int32)
        return cfg

    def QuantProcessInRank(self) -> None:
        if hp.g_coreType == AIC:
            return
        currentNum, currentOffset = TilingByCore(self.m_, 1)
        H_ = self.k_
        for index in range(currentNum):
            token = currentOffset + index
            xInTensor = gm(self.xGm + token * H_ * 2, torch.bfloat16, H_).clone()
            data, scale = MxQuant(xInTensor[None])
            xOutTensor = torch.zeros(self.mxQuantTokenScaleAlignBytes_, dtype=torch.uint8)
            xOutTensor[:H_] = data[0]
            at = self.mxQuantTokenAlignBytes_
            xOutTensor[at : at + self.mxQuantScaleAlignBytes_] = scale[0]
            dst = self.peermemInfo.quantTokenScalePtr + token * self.mxQuantTokenScaleAlignBytes_
            n = self.mxQuantTokenAlignBytes_ + self.mxQuantScaleAlignBytes_
            gm(dst, torch.uint8, n)[:] = xOutTensor[:n]

    def SendMaskCal(self, cfg: MegaMoeSendMaskBufferConfig) -> None:
        if hp.g_coreType == AIC:
            return
        totalExperts = self.worldSize_ * self.moeExpertPerRank_
        coreIdx = self.aivCoreIdx_
        ownedExpertNum = (
            Ceil(totalExperts - coreIdx, self.blockAivNum_) if coreIdx < totalExperts else 0
        )
        if ownedExpertNum <= 0:
            return
        maskSliceBytesFull = self.sendRouteItemsPerBatch_ // 8
        sendCntAccTensor = [0] * ownedExpertNum
        for batchIdx in range(self.sendRouteBatchCount_):
            batchStart = batchIdx * self.sendRouteItemsPerBatch_
            isLastBatch = batchIdx == self.sendRouteBatchCount_ - 1
            validLen, sliceBytes = self.sendRouteItemsPerBatch_, maskSliceBytesFull
            pushBytes = sliceBytes
            if isLastBatch:
                validLen = self.sendTotalNum_ - batchStart
                if batchStart // 8 + sliceBytes > self.maskAlignSize_:
                    sliceBytes = self.maskAlignSize_ - batchStart // 8
                pushBytes = sliceBytes + 4
            self.topkIdsTensor_[:validLen] = i32(self.expertIdxGm + batchStart * 4, validLen)
            for ownedIdx in range(ownedExpertNum):
                globalExpertId = coreIdx + ownedIdx * self.blockAivNum_
                dstRank = globalExpertId // self.moeExpertPerRank_
                localExpertId = globalExpertId % self.moeExpertPerRank_
                maskBuf = torch.zeros(cfg.bufferBytes, dtype=torch.uint8)
                bits = (self.topkIdsTensor_ == globalExpertId).to(torch.uint8)  # CompareScalar
                packed = np.packbits(bits.numpy(), bitorder="little")
                maskBuf[: packed.size] = torch.from_numpy(packed)
                batchMatchedRouteCount = int(bits[:validLen].sum())  # GatherMask's count
                sendCntAccTensor[ownedIdx] += batchMatchedRouteCount
                if isLastBatch:
                    maskBuf[sliceBytes : sliceBytes + 4].view(torch.int32)[0] = sendCntAccTensor[
                        ownedIdx
                    ]
                dstOffset = (
                    self.maskWinOffset_
                    + (localExpertId * self.worldSize_ + self.rankId_) * self.maskSlotSize_
                    + batchStart // 8
                )
                dst = self.GetRankWinAddrWithOffset(dstRank, dstOffset)
                gm(dst, torch.uint8, pushBytes)[:] = maskBuf[:pushBytes]

    def ResetFlagList(self) -> None:
        if hp.g_coreType == AIC:
            return
        flagNum = self.moeExpertPerRank_ * (
            INT_CACHELINE + self.dispatchFlagSlotsPerExpert_ + INT_CACHELINE * self.aicNum_
        )
        coreLen, coreOffset = TilingByCore(flagNum, 1)
        if coreLen > 0:
            i32(self.workspaceInfo.flagSwiGluToGmm2Ptr + coreOffset * 4, coreLen)[:] = 0

    def CrossRankSyncInWorldSize(self) -> None:
        if hp.g_coreType == AIC:
            return
        syncRank = self.peermemInfo.rankSyncInWorldPtr
        syncCount = syncRank + SYNC_COUNT_OFFSET + self.aivCoreIdx_ * 64
        count = int(i32(syncCount, 1)[0]) + 1
        for i in range(self.aivCoreIdx_, self.worldSize_, self.blockAivNum_):
            syncRemoteAddr = self.winRankAddr_[i] + self.rankId_ * 16 * 4
            i32(syncRemoteAddr, 1)[0] = count  # WriteGmByPassDCache
            GmSignalWaitBarrier(syncRank + i * 16 * 4, count)
        i32(syncCount, 1)[0] = count
        hp.SyncAll()

    # ------------------------------------------------------------ dispatch (AIV1)

    def DispatchBuffInit(self) -> MegaMoeDispatchBufferConfig | None:
        if hp.g_coreType == AIC:
            return None
        self.revTokenElemCnt_ = self.k_
        self.revScaleElemCnt_ = Ceil(self.k_, MXFP_DIVISOR_SIZE) * MXFP_MULTI_BASE_SIZE
        cfg = self.tiling.dispatchBufferConfig
        self.recvRouteItemsPerBatch_, self.recvRouteBatchCount_ = (
            cfg.routeItemsPerBatch,
            cfg.routeBatchCount,
        )
        self.cumsumInfoTensor_ = [0] * (self.worldSize_ * self.expertPerRank_)
        self.tripleTensor_ = torch.zeros(cfg.bufferCount * INT32_PER_256B, dtype=torch.int32)
        self.copyTmp_ = torch.zeros(
            cfg.bufferCount, self.mxQuantTokenScaleAlignBytes_, dtype=torch.uint8
        )
        return cfg

    def SendCntCal(self, localExpertId: int) -> int:
        cntSrc = (
            self.peermemInfo.maskRecvPtr
            + localExpertId * self.worldSize_ * self.maskSlotSize_
            + self.maskAlignSize_
        )
        sendCntTensor = [
            int(i32(cntSrc + r * self.maskSlotSize_, 1)[0]) for r in range(self.worldSize_)
        ]  # one strided DataCopyPad
        sendCnt = 0
        for calRankId in range(self.worldSize_):
            perRankCnt = sendCntTensor[calRankId]
            sendCnt += perRankCnt
            self.cumsumRevCntInRank_ += perRankCnt
            self.cumsumInfoTensor_[localExpertId * self.worldSize_ + calRankId] = (
                self.cumsumRevCntInRank_
            )
        at = localExpertId * INT32_PER_256B * self.aicNum_ + INT32_PER_256B * self.blockIdx_
        expertTokenCntTensor = torch.zeros(INT32_PER_256B, dtype=torch.int32)
        expertTokenCntTensor[0] = sendCnt
        i32(self.workspaceInfo.expertRevTokenNumsPtr + at * 4, INT32_PER_256B)[:] = (
            expertTokenCntTensor
        )
        sendCntFlag = self.workspaceInfo.flagSendCntCalToUpdParamsPtr + 4 * (
            localExpertId * self.aicNum_ * INT_CACHELINE + self.blockIdx_ * INT_CACHELINE
        )
        i32(sendCntFlag, 1).add_(1)  # AtomicAdd
        return sendCnt

    def FetchTokenNLoadMetaInfo(self, bufferIdx: int, topkIndex: int, remoteRankIdx: int,
                                remoteRank: hp.GmAddr, copyInNum: int) -> None:  # fmt: skip
        tokenIndex = topkIndex // self.topK_
        src = remoteRank + tokenIndex * copyInNum
        self.copyTmp_[bufferIdx] = gm(src, torch.uint8, copyInNum)  # DataCopy from the peer
        triple = self.tripleTensor_[bufferIdx * INT32_PER_256B :]
        triple[0], triple[1], triple[2] = remoteRankIdx, tokenIndex, topkIndex % self.topK_

    def DispatchCopyMte3(self, bufferIdx: int, dstIdx: int, tokenRev: hp.GmAddr,
                         scaleRev: hp.GmAddr, triple: hp.GmAddr) -> None:  # fmt: skip
        buf = self.copyTmp_[bufferIdx]
        n, s = self.revTokenElemCnt_, self.revScaleElemCnt_
        gm(tokenRev + dstIdx * n, torch.uint8, n)[:] = buf[:n]
        at = self.mxQuantTokenAlignBytes_
        gm(scaleRev + dstIdx * s, torch.uint8, s)[:] = buf[at : at + s]
        ring = self.tripleTensor_[bufferIdx * INT32_PER_256B : (bufferIdx + 1) * INT32_PER_256B]
        i32(triple + dstIdx * INT32_PER_256B * 4, INT32_PER_256B)[:] = ring

    def CopyGMToGMPerToken(self, rowDstOffsetInCore: int, remoteRankIdx: int, copyStartIdx: int,
                           copyNum: int, cfg: MegaMoeDispatchBufferConfig) -> None:  # fmt: skip
        bufferCount, copyInNum = cfg.bufferCount, self.mxQuantTokenScaleAlignBytes_
        ws = self.workspaceInfo
        tokenRev = ws.dispatchRevDataPtr + rowDstOffsetInCore * self.revTokenElemCnt_
        scaleRev = ws.dispatchRevScalePtr + rowDstOffsetInCore * self.revScaleElemCnt_
        remoteRank = self.GetRankWinAddrWithOffset(remoteRankIdx, self.quantWinOffset_)
        triple = ws.tripleInfoPtr + rowDstOffsetInCore * INT32_PER_256B * 4
        valid = self.validTopkIndexTensor_
        self.FetchTokenNLoadMetaInfo(0, valid[copyStartIdx], remoteRankIdx, remoteRank, copyInNum)
        firstUseEnd = min(copyNum, bufferCount)
        for issueIdx in range(1, firstUseEnd):
            copyIdx = issueIdx - 1
            self.FetchTokenNLoadMetaInfo(
                issueIdx, valid[copyStartIdx + issueIdx], remoteRankIdx, remoteRank, copyInNum
            )
            self.DispatchCopyMte3(copyIdx, copyIdx, tokenRev, scaleRev, triple)
        for issueIdx in range(bufferCount, copyNum):
            copyIdx = issueIdx - 1
            self.FetchTokenNLoadMetaInfo(
                issueIdx % bufferCount, valid[copyStartIdx + issueIdx], remoteRankIdx,
                remoteRank, copyInNum,
            )  # fmt: skip
            self.DispatchCopyMte3(copyIdx % bufferCount, copyIdx, tokenRev, scaleRev, triple)
        self.DispatchCopyMte3((copyNum - 1) % bufferCount, copyNum - 1, tokenRev, scaleRev, triple)

    def TripleInfoCalAndDispatch(self, info: GMMAddrInfo, localExpertId: int,
                                 cfg: MegaMoeDispatchBufferConfig) -> None:  # fmt: skip
        cumsum, W = self.cumsumInfoTensor_, self.worldSize_
        expertGlobalRowBegin = 0 if localExpertId == 0 else cumsum[localExpertId * W - 1]
        for dispatchShardIdx in range(self.blockIdx_, W * self.blockNumPerRank_, self.blockNum_):
            remoteRankIdx = dispatchShardIdx // self.blockNumPerRank_
            rankShardIdx = dispatchShardIdx % self.blockNumPerRank_
            first = remoteRankIdx == 0 and localExpertId == 0
            rankSegmentDstRowBegin = 0 if first else cumsum[localExpertId * W + remoteRankIdx - 1]
            coreMatchOrdinalBegin = coreMatchOrdinalEnd = coreDstRowBegin = 0
            if rankSegmentDstRowBegin < self.maxOutputSize_:
                rankTokenCount = cumsum[localExpertId * W + remoteRankIdx] - rankSegmentDstRowBegin
                rankDispatchRowCount = min(
                    rankTokenCount, self.maxOutputSize_ - rankSegmentDstRowBegin
                )
                rowsPerRankShard = Ceil(rankDispatchRowCount, self.blockNumPerRank_)
                rankShardRowBegin = rankShardIdx * rowsPerRankShard
                coreDstRowBegin = rankSegmentDstRowBegin + rankShardRowBegin
                coreDispatchRowCount = min(
                    rowsPerRankShard,
                    rankSegmentDstRowBegin + rankDispatchRowCount - coreDstRowBegin,
                )
                if coreDispatchRowCount > 0:
                    coreMatchOrdinalBegin = rankShardRowBegin
                    coreMatchOrdinalEnd = rankShardRowBegin + coreDispatchRowCount
            matchedRouteCount = dispatchedRowCount = 0
            batchIdx = 0
            while batchIdx < self.recvRouteBatchCount_ and matchedRouteCount < coreMatchOrdinalEnd:
                batchRouteBegin = batchIdx * self.recvRouteItemsPerBatch_
                isLastBatch = batchIdx == self.recvRouteBatchCount_ - 1
                validRouteCount = self.recvRouteItemsPerBatch_
                maskSliceBytes = self.recvRouteItemsPerBatch_ // 8
                if isLastBatch:
                    validRouteCount = self.sendTotalNum_ - batchRouteBegin
                    if batchRouteBegin // 8 + maskSliceBytes > self.maskAlignSize_:
                        maskSliceBytes = self.maskAlignSize_ - batchRouteBegin // 8
                maskAddr = (
                    self.peermemInfo.maskRecvPtr
                    + (localExpertId * W + remoteRankIdx) * self.maskSlotSize_
                    + batchRouteBegin // 8
                )
                maskBatch = gm(maskAddr, torch.uint8, maskSliceBytes).numpy().copy()
                bits = np.unpackbits(maskBatch, bitorder="little")[:validRouteCount]
                topkIndex = batchRouteBegin + np.arange(validRouteCount)  # CreateVecIndex
                self.validTopkIndexTensor_ = topkIndex[bits == 1].tolist()  # GatherMask
                batchMatchOrdinalBegin = matchedRouteCount
                batchMatchOrdinalEnd = matchedRouteCount + len(self.validTopkIndexTensor_)
                dispatchBegin = max(batchMatchOrdinalBegin, coreMatchOrdinalBegin)
                dispatchEnd = min(batchMatchOrdinalEnd, coreMatchOrdinalEnd)
                if dispatchEnd > dispatchBegin:
                    self.CopyGMToGMPerToken(
                        rankSegmentDstRowBegin + dispatchBegin, remoteRankIdx,
                        dispatchBegin - batchMatchOrdinalBegin, dispatchEnd - dispatchBegin, cfg,
                    )  # fmt: skip
                    dispatchedRowCount += dispatchEnd - dispatchBegin
                matchedRouteCount = batchMatchOrdinalEnd
                batchIdx += 1
            if dispatchedRowCount > 0:
                rowBegin = coreDstRowBegin - expertGlobalRowBegin
                rowEnd = rowBegin + dispatchedRowCount
                for waveIdx in range(rowBegin // L1_TILE_M_256, (rowEnd - 1) // L1_TILE_M_256 + 1):
                    lo = max(rowBegin, waveIdx * L1_TILE_M_256)
                    hi = min(rowEnd, (waveIdx + 1) * L1_TILE_M_256)
                    i32(info.dispatchToGmm1Flag + waveIdx * 4, 1).add_(hi - lo)  # AtomicAdd

    # ------------------------------------------------------------ expert loop state

    def UpdateGroupParams(self, state: ExpertLoopState, expertIdx: int, gmm1: bool,
                          sendCnt: int = 0) -> bool:  # fmt: skip
        if expertIdx != 0:
            m, n, k = state.m, state.n, state.k
            state.expertBeforeCnt += m
            state.aOffset += m * k
            state.aScaleOffset += m * Ceil(k, MXFP_DIVISOR_SIZE) * MXFP_MULTI_BASE_SIZE
            state.cOffset += m * n // SWIGLU_N_HALF
            state.cScaleOffset += m * Ceil(n // SWIGLU_N_HALF, MXFP_DIVISOR_SIZE) * 2
            state.flagOffset += 1
            state.bOffset += 1  # the expert's weights (whole matrices in the stand-in)
            state.b2Offset += 1
        offsetInCnt = expertIdx * 8 * self.aicNum_ + 8 * self.blockIdx_
        counts = self.workspaceInfo.expertRevTokenNumsPtr + offsetInCnt * 4
        if gmm1:
            if self.subBlockIdx_ == 0:
                sendCntFlag = self.workspaceInfo.flagSendCntCalToUpdParamsPtr + 4 * (
                    expertIdx * self.aicNum_ * INT_CACHELINE + self.blockIdx_ * INT_CACHELINE
                )
                while int(i32(sendCntFlag, 1)[0]) == 0:
                    pass
                state.m = int(i32(counts, 1)[0])
            else:
                state.m = sendCnt
        else:
            state.m = int(i32(counts, 1)[0])
        return state.m != 0

    def UpdateGlobalBuffer(self, info: GMMAddrInfo, state: ExpertLoopState, gmm1: bool) -> None:
        ws = self.workspaceInfo
        half = state.n // SWIGLU_N_HALF
        if gmm1:
            info.aGlobal = ws.dispatchRevDataPtr + state.aOffset
            info.aScaleGlobal = ws.dispatchRevScalePtr + state.aScaleOffset
            info.bGlobal = self.bGm + state.bOffset * state.k * state.n * 4
        else:
            info.aGlobal = ws.swigluQuantDataPtr + state.cOffset
            info.aScaleGlobal = ws.swigluQuantScalePtr + state.cScaleOffset
            info.bGlobal = self.b2Gm + state.b2Offset * half * state.k * 4
        info.cGlobal = ws.swigluQuantDataPtr + state.cOffset  # the epilogue's outputs
        info.cScaleGlobal = ws.swigluQuantScalePtr + state.cScaleOffset
        info.swigluToGmm2Flag = ws.flagSwiGluToGmm2Ptr + 4 * state.flagOffset * INT_CACHELINE
        info.dispatchToGmm1Flag = (
            ws.flagDispatchToGmm1Ptr + 4 * state.flagOffset * self.dispatchFlagSlotsPerExpert_
        )

    # ------------------------------------------------------------ the GEMMs (mega_moe_impl.h)

    def UbTile(self, pingpong: int) -> hp.GmAddr:
        """This AI core's UB tile ``pingpong`` that its AIC writes (the GM stand-in)."""
        per = L1_TILE_M_256 * L1_TILE_N * 4
        return self.workspaceInfo.ubStandInPtr + (self.blockIdx_ * 2 + pingpong) * per

    def LoadA(self, info: GMMAddrInfo, mLoc: int, rows: int, k: int) -> torch.Tensor:
        nScale = Ceil(k, MXFP_DIVISOR_SIZE) * MXFP_MULTI_BASE_SIZE
        data = gm(info.aGlobal + mLoc * k, torch.uint8, rows * k).reshape(rows, k)
        scale = gm(info.aScaleGlobal + mLoc * nScale, torch.uint8, rows * nScale)
        return MxDequant(data, scale.reshape(rows, nScale)[:, : k // MXFP_SCALE_GROUP_NUM])

    def GroupMatmulImplGeneric(self, state: ExpertLoopState, info: GMMAddrInfo, gmm1: bool,
                               args: dict) -> None:  # fmt: skip
        m = state.m
        n, k = (state.n, state.k) if gmm1 else (state.k, state.n // SWIGLU_N_HALF)
        outputN = n // SWIGLU_N_HALF if gmm1 else n
        tileM = L1_TILE_M_256 if gmm1 else L1_TILE_M_128
        tileNum = Ceil(m, tileM) * Ceil(outputN, L1_TILE_N)
        blockNum, blockIdx = self.blockNum_, self.blockIdx_
        start = self.startBlockIdx_
        startLoopIdx = (blockIdx + blockNum if blockIdx < start else blockIdx) - start
        if gmm1 and hp.GetSubBlockIdx() != 0:
            self.startBlockIdx_ = (self.startBlockIdx_ + tileNum) % blockNum
            return
        if not gmm1 and hp.GetSubBlockIdx() != 0:
            return
        for loopIdx in range(startLoopIdx, tileNum, blockNum):
            tile = tile_shape(m, outputN, tileM, loopIdx)
            if hp.g_coreType == AIC:
                self.AicComputeGeneric(
                    state, info, gmm1, tile, loopIdx == startLoopIdx, k, outputN, args
                )
            elif gmm1:
                self.AivGmm1PostGeneric(info, tile, outputN)
            else:
                self.AivGmm2PostGeneric(state, tile, outputN, args)
        self.startBlockIdx_ = (self.startBlockIdx_ + tileNum) % blockNum

    def AicComputeGeneric(self, state, info, gmm1: bool, tile, first: bool, k: int, outputN: int,
                          args: dict) -> None:  # fmt: skip
        mLoc, nLoc, rows, cols = tile
        if gmm1:
            waveIdx = mLoc // L1_TILE_M_256
            if waveIdx != args["lastWaveWaited"]:  # WaitForUpstreamReady, GMM1
                targetValue = min(L1_TILE_M_256, state.m - mLoc)
                while int(i32(info.dispatchToGmm1Flag + waveIdx * 4, 1)[0]) != targetValue:
                    pass
                args["lastWaveWaited"] = waveIdx
            if args["vecSetSyncCom"]:
                WaitForVector()
        else:
            if first:  # WaitForUpstreamReady, GMM2: every GEMM1 tile's SwiGLU is out
                targetLoops = Ceil(state.m, L1_TILE_M_256) * Ceil(k, L1_TILE_N)
                while int(i32(info.swigluToGmm2Flag, 1)[0]) != targetLoops:
                    pass
            if args["vecSetSyncCom"] >= 2:
                WaitForVector(args["pingpong"])
        a = self.LoadA(info, mLoc, rows, k).numpy()
        n = 2 * outputN if gmm1 else outputN
        b = gm(info.bGlobal, torch.float32, k * n).reshape(k, n).numpy()
        if gmm1:
            for weightBlock in range(SWIGLU_N_HALF):
                cols_ = slice(nLoc + weightBlock * outputN, nLoc + weightBlock * outputN + cols)
                c = torch.from_numpy(a @ b[:, cols_]).to(torch.bfloat16).float()
                gm(self.UbTile(weightBlock), torch.float32, rows * cols)[:] = c.reshape(-1)
            NotifyVector()
            args["vecSetSyncCom"] = 1
        else:
            pp = args["pingpong"]
            c = torch.from_numpy(a @ b[:, nLoc : nLoc + cols]).to(torch.bfloat16).float()
            gm(self.UbTile(pp), torch.float32, rows * cols)[:] = c.reshape(-1)
            NotifyVector(pp)
            args["vecSetSyncCom"] += 1
            args["pingpong"] = 1 - pp

    def AivGmm1PostGeneric(self, info: GMMAddrInfo, tile, outputN: int) -> None:
        mLoc, nLoc, rows, cols = tile
        WaitForCube()
        gate = gm(self.UbTile(0), torch.float32, rows * cols).reshape(rows, cols).numpy()
        up = gm(self.UbTile(1), torch.float32, rows * cols).reshape(rows, cols).numpy()
        with np.errstate(over="ignore"):  # exp(-gate) may be inf: silu is then -0
            glu = (gate / (np.float32(1) + np.exp(-gate))) * up  # SwiGLU, FP32
        data, scale = MxQuant(torch.from_numpy(glu).to(torch.bfloat16))
        nScale = Ceil(outputN, MXFP_DIVISOR_SIZE) * MXFP_MULTI_BASE_SIZE
        for r in range(rows):
            row = mLoc + r
            gm(info.cGlobal + row * outputN + nLoc, torch.uint8, cols)[:] = data[r]
            at = info.cScaleGlobal + row * nScale + nLoc // MXFP_SCALE_GROUP_NUM
            gm(at, torch.uint8, scale.shape[1])[:] = scale[r]
        i32(info.swigluToGmm2Flag, 1).add_(1)  # the epilogue's AtomicAdd
        NotifyCube()

    def AivGmm2PostGeneric(self, state: ExpertLoopState, tile, n: int, args: dict) -> None:
        mLoc, nLoc, rows, cols = tile
        pp = args["pingpong"]
        WaitForCube(pp)
        at = self.workspaceInfo.tripleInfoPtr + (state.expertBeforeCnt + mLoc) * INT32_PER_256B * 4
        tripleTensor = i32(at, rows * INT32_PER_256B).reshape(rows, INT32_PER_256B).tolist()
        out = gm(self.UbTile(pp), torch.float32, rows * cols).reshape(rows, cols)
        self.CombineTokens(nLoc, n, tripleTensor, out.to(torch.bfloat16), cols)
        NotifyCube(pp)
        args["pingpong"] = 1 - pp

    def CombineTokens(self, nLoc: int, n: int, tripleTensor: list, ub: torch.Tensor,
                      cols: int) -> None:  # fmt: skip
        base = self.peermemInfo.combineSendPtr - self.peermemInfo.rankSyncInWorldPtr
        for tileIdx, (toRankId, tokenIdx, topkIdx, *_) in enumerate(tripleTensor):
            gmDstOffset = (tokenIdx * self.topK_ + topkIdx) * n + nLoc
            dst = self.GetRankWinAddrWithOffset(toRankId, base) + gmDstOffset * 2
            gm(dst, torch.bfloat16, cols)[:] = ub[tileIdx]  # DataCopyPad into the peer

    # ------------------------------------------------------------ phase 3

    def ExpertTokenNumCopyOut(self) -> None:
        W, last = self.worldSize_, self.worldSize_ - 1
        out = [self.cumsumInfoTensor_[last]]
        for e in range(1, self.moeExpertPerRank_):
            out.append(
                self.cumsumInfoTensor_[e * W + last] - self.cumsumInfoTensor_[(e - 1) * W + last]
            )
        i32(self.expertTokenNumsOut_, self.moeExpertPerRank_)[:] = torch.tensor(out)

    def Unpermute(self) -> None:
        coreLen, coreOffset = TilingByCore(self.m_, 1)
        if coreLen == 0:
            return
        K_, H_ = self.topK_, self.k_
        weights = gm(self.probsGm + coreOffset * K_ * 4, torch.float32, coreLen * K_).clone()
        expandedX = self.peermemInfo.combineSendPtr
        for localIdx in range(coreLen):
            tokenIdx = coreOffset + localIdx
            acc = torch.zeros(H_, dtype=torch.float32)
            for expId in range(K_):
                expScale = weights[localIdx * K_ + expId]
                row = gm(expandedX + (tokenIdx * K_ + expId) * H_ * 2, torch.bfloat16, H_).float()
                acc = row * expScale if expId == 0 else acc + row * expScale  # Muls, Add
            gm(self.y2Gm + tokenIdx * H_ * 2, torch.bfloat16, H_)[:] = acc.to(torch.bfloat16)

    # ------------------------------------------------------------ Process

    def Process(self) -> None:
        sendMaskBufferConfig = self.SendAndQuantBuffInit()
        self.QuantProcessInRank()
        self.SendMaskCal(sendMaskBufferConfig)
        self.ResetFlagList()
        hp.SyncAll[False]()  # the AIC waits for the flag reset
        self.CrossRankSyncInWorldSize()

        dispatchBufferConfig = self.DispatchBuffInit()
        n1, k1 = self.hiddenDim_, self.k_
        dispatchAddrInfo, gmm1AddrInfo = GMMAddrInfo(), GMMAddrInfo()
        dispatchState, gmm1State = ExpertLoopState(n1, k1), ExpertLoopState(n1, k1)
        nextSendCnt = 0
        args = {"vecSetSyncCom": 0, "lastWaveWaited": -1}
        dispatcher = hp.g_coreType == AIV and self.subBlockIdx_ == 1
        if dispatcher:  # expert 0 ahead of the loop
            nextSendCnt = self.SendCntCal(0)
            if self.UpdateGroupParams(dispatchState, 0, True, nextSendCnt):
                self.UpdateGlobalBuffer(dispatchAddrInfo, dispatchState, True)
                self.TripleInfoCalAndDispatch(dispatchAddrInfo, 0, dispatchBufferConfig)
        for localExpertId in range(self.moeExpertPerRank_):
            curSendCnt = nextSendCnt
            if dispatcher and localExpertId + 1 < self.moeExpertPerRank_:
                nextSendCnt = self.SendCntCal(localExpertId + 1)
                if self.UpdateGroupParams(dispatchState, localExpertId + 1, True, nextSendCnt):
                    self.UpdateGlobalBuffer(dispatchAddrInfo, dispatchState, True)
                    self.TripleInfoCalAndDispatch(
                        dispatchAddrInfo, localExpertId + 1, dispatchBufferConfig
                    )
            if not self.UpdateGroupParams(gmm1State, localExpertId, True, curSendCnt):
                continue
            self.UpdateGlobalBuffer(gmm1AddrInfo, gmm1State, True)
            args["lastWaveWaited"] = -1
            self.GroupMatmulImplGeneric(gmm1State, gmm1AddrInfo, True, args)
        EndSync(args["vecSetSyncCom"])
        if dispatcher:
            self.ExpertTokenNumCopyOut()

        args2 = {"vecSetSyncCom": 0, "pingpong": self.gmm2PingPongIdx_}
        gmm2AddrInfo, gmm2State = GMMAddrInfo(), ExpertLoopState(n1, k1)
        for expertIdx in range(self.moeExpertPerRank_):
            if not self.UpdateGroupParams(gmm2State, expertIdx, False):
                continue
            self.UpdateGlobalBuffer(gmm2AddrInfo, gmm2State, False)
            self.GroupMatmulImplGeneric(gmm2State, gmm2AddrInfo, False, args2)
        EndGMM2Sync(args2["vecSetSyncCom"], args2["pingpong"])

        if hp.g_coreType == AIV:
            hp.SyncAll()
        if hp.g_coreType == AIV:
            self.CrossRankSyncInWorldSize()  # every rank's combine rows are in
            self.Unpermute()


def mega_moe(context, x, topkIds, topkWeights, weight1, weight2, yOut, expertTokenNumsOut,
             workspaceGM, tilingGM) -> None:  # fmt: skip
    tilingData = hp.GET_TILING_DATA_WITH_STRUCT(MegaMoeTilingData, tilingGM)
    op = MegaMoe()
    op.Init(context, x, topkIds, topkWeights, weight1, weight2, yOut, expertTokenNumsOut,
            workspaceGM, tilingData)  # fmt: skip
    op.Process()


# ---------------------------------------------------------------- host side and the check


def inputs(rank: int, launch: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Tokens (multiples of 0.5 in [-1.5, 1.5]), routing (K distinct experts per token) and
    top-k weights (powers of two)."""
    rng = np.random.default_rng(100 * launch + rank)
    x = (rng.integers(-3, 4, size=(BS, H)) / 2).astype(np.float32)
    n_experts = LOCAL_EXPERTS * hp.get_world_size()
    ids = np.stack([rng.permutation(n_experts)[:K] for _ in range(BS)]).astype(np.int32)
    w = (2.0 ** -rng.integers(0, 3, size=(BS, K))).astype(np.float32)
    return x, ids, w


def expert_weights(g: int) -> tuple[np.ndarray, np.ndarray]:
    """Global expert ``g``'s W1 ``(H, HIDDEN_DIM)`` and W2 ``(HIDDEN_DIM / 2, H)``: -1, 0, 1."""
    rng = np.random.default_rng(7000 + g)
    w1 = rng.integers(-1, 2, size=(H, HIDDEN_DIM)).astype(np.float32)
    w2 = rng.integers(-1, 2, size=(HIDDEN_DIM // 2, H)).astype(np.float32)
    return w1, w2


def to_bf16(a: np.ndarray) -> np.ndarray:
    """Round FP32 to BF16 (nearest even), as FP32."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return r.astype(np.uint32).view(np.float32)


def to_mx_fp8(a: np.ndarray) -> np.ndarray:
    """MX FP8 E4M3 and back: per 32 values a power-of-two scale ``floor(log2(amax)) - 8``,
    each value rounded to 3 mantissa bits (nearest even; subnormals below 2**-6)."""
    g = a.astype(np.float64).reshape(a.shape[0], -1, MXFP_SCALE_GROUP_NUM)
    amax = np.abs(g).max(-1, keepdims=True)
    e = np.maximum(np.floor(np.log2(np.where(amax > 0, amax, 1.0))) - FP8_EMAX, -E8M0_BIAS)
    q = g / 2.0**e
    ex = np.floor(np.log2(np.where(q != 0, np.abs(q), 1.0)))
    step = 2.0 ** (np.maximum(ex, -6) - 3)
    r = np.clip(np.round(q / step) * step, -FP8_MAX, FP8_MAX)
    return (r * 2.0**e).reshape(a.shape)


def reference(rank: int, launch: int) -> tuple[np.ndarray, np.ndarray]:
    """numpy: y[t] = sum over k of w[t, k] * FFN_{ids[t, k]}(x[t]), FFN(x) = (q(swiglu(x W1))) W2,
    with the kernel's BF16 and MX FP8 roundings; and this rank's per-expert token counts."""
    x, ids, w = inputs(rank, launch)
    y = np.zeros((BS, H), dtype=np.float32)
    for t in range(BS):
        for k in range(K):
            w1, w2 = expert_weights(int(ids[t, k]))
            h1 = to_bf16(x[t : t + 1] @ w1)
            gate, up = h1[:, : HIDDEN_DIM // 2], h1[:, HIDDEN_DIM // 2 :]
            with np.errstate(over="ignore"):
                glu = to_mx_fp8(to_bf16((gate / (np.float32(1) + np.exp(-gate))) * up))
            out = to_bf16((glu @ w2).astype(np.float32))[0]
            y[t] = out * w[t, k] if k == 0 else y[t] + out * w[t, k]
    counts = np.zeros(LOCAL_EXPERTS, dtype=np.int64)
    for s in range(hp.get_world_size()):
        ids_s = inputs(s, launch)[1].reshape(-1)
        for e in range(LOCAL_EXPERTS):
            counts[e] += int((ids_s == rank * LOCAL_EXPERTS + e).sum())
    return to_bf16(y).reshape(-1), counts


def main(spare_experts: int = 0) -> list[str]:
    """Two launches; ``spare_experts`` more weights per rank than routed experts (the weights'
    dim 0, ``expertPerRank``, may exceed ``moeExpertNum / epWorldSize``)."""
    rank, n, dev = hp.get_rank(), hp.get_world_size(), hp.device()
    groupEp = hp.new_group(list(range(n)))  # the EP communicator of the context
    mc2Context, hcclBuffSize = GetMc2ContextTensor(groupEp)
    local = [expert_weights(rank * LOCAL_EXPERTS + e) for e in range(LOCAL_EXPERTS)]
    local += [expert_weights(-1 - e) for e in range(spare_experts)]
    weight1 = on_device(np.stack([w1 for w1, _ in local]))
    weight2 = on_device(np.stack([w2 for _, w2 in local]))
    lines, workspace = [], None
    for launch in range(1, LAUNCHES + 1):
        x, ids, w = inputs(rank, launch)
        tiling, wsSize = MegaMoeTilingFunc(
            n, LOCAL_EXPERTS * n, hcclBuffSize, x.shape, ids.shape, tuple(weight1.shape)
        )
        if workspace is None:  # the workspace outlives a launch, as the framework's does
            workspace = torch.zeros(wsSize, dtype=torch.uint8, device=dev)
        yOut = torch.zeros(BS, H, dtype=torch.bfloat16, device=dev)
        expertTokenNums = torch.zeros(LOCAL_EXPERTS, dtype=torch.int32, device=dev)
        xBf16 = torch.from_numpy(x).to(torch.bfloat16).to(dev)
        hp.launch(
            mega_moe, mc2Context, xBf16, on_device(ids), on_device(w), weight1, weight2, yOut,
            expertTokenNums, workspace, tiling, block_dim=tiling.aicNum, kernel_type="mix_aic_1_2",
        )  # fmt: skip
        want_y, want_counts = reference(rank, launch)
        got = torch.cat([yOut.float().reshape(-1), expertTokenNums.float()])
        lines.append(
            compare(
                f"launch-{launch}",
                got,
                np.concatenate([want_y, want_counts]),
                f"y and expertTokenNums, {int(want_counts.sum())} rows",
            )  # fmt: skip
        )
    return lines


if __name__ == "__main__":
    run_sample(main, platform=PLATFORM, **RUN_KWARGS)
