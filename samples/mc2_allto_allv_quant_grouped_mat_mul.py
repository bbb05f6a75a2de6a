"""Port of ops-transformer's AlltoAllvQuantGroupedMatMul, MX path (Ascend 950, CCU), call for call.

Source: mirror-cann/ops-transformer at 3a280bcc (2026-07-21), ``mc2/allto_allv_quant_grouped_mat_mul/``,
every file read at that commit: the kernel entry ``op_kernel/arch35/allto_allv_quant_grouped_mat_mul_apt.cpp``
(``allto_allv_quant_grouped_mat_mul<TILINGKEY_GMM_WEIGHT_TRANSPOSE = 0, TILINGKEY_MM_WEIGHT_TRANSPOSE
= 0, TILINGKEY_COMM_MODE = TILINGKEY_TPL_CCU>``, ``KERNEL_TYPE_MIX_AIC_1_2``), its tiling struct
``op_kernel/allto_allv_quant_grouped_mat_mul_tiling.h`` (``QuantAlltoAllvGroupedMatmulTilingData``),
the MC2 templates ``op_kernel/mc2_templates/``: ``A2avGmmScheduler`` (``scheduler/a2av_gmm_scheduler.h``:
``Init``, ``Process``, ``End``, ``ProcessCommRoundMode``), ``HcclA2avOp<fp8_e4m3fn_t, true,
TILINGKEY_TPL_CCU>`` (``communication/hccl_a2av_op.h``: ``Init``, ``InitScaleBuffer``,
``LaunchCommScale``, ``LaunchCommData``, ``LaunchScaleBeforeCompute``, ``WaitScale``, ``Wait``,
``PermuteData``, ``End``), ``CalcA2avCommBeforeParams`` (``communication/a2av_comm_params.h``),
``PermuteImplParallel`` (``communication/a2av_permute_engine.h``), ``MX_QUANT_MODE``/``PACK_FACTOR``/
``X_TYPE_SIZE`` (``a2av_gmm_utils.h``, ``ORIG_DTYPE_GMM_X = DT_FLOAT8_E4M3FN``, ``ORIG_DTYPE_GMM_X_SCALE
= DT_FLOAT8_E8M0``) and the arch35 constants of ``common/a2av_common_tiling.h``; the host tiling
``AlltoAllvQuantGmmTilingCommon`` (``op_host/op_tiling/arch35/allto_allv_quant_grouped_mat_mul_tiling_common``:
``DoOpTiling``, ``DoLibApiTiling``, ``GetWorkspaceSize``, ``PostTiling``, ``SetHcclTiling``,
``CalcExpertNum`` of the ``.h``) and ``AlltoAllvMXQuantGmmTiling`` (``arch35/allto_allv_mx_quant_grouped_mat_mul_tiling.cpp``:
``DoGmmTiling``, ``GetPermuteOutSize``); described in docs/notes/mc2-kernels.md.

How its communication differs from the FP16 AlltoAllvGroupedMatMul (samples/mc2_allto_allv_grouped_mat_mul_2026.py,
the same templates): every batch of experts is two AlltoAllVs on one communicator and one cc
tiling: first the MX scales (``LaunchScaleBeforeCompute``: ``HCCL_DATA_TYPE_FP8E8M0``,
``CeilDiv(H1, 64) * 2`` bytes per row, into the workspace after ``commOut``, its own running
receive sum), then the FP8 rows (``HCCL_DATA_TYPE_FP8E4M3``); all 2 x batches are prepared with
``commit = true`` before the first Wait, on the CCU (8 in flight for 4 batches, of its 64 message
slots); per batch AIV block 0 waits for the scale handle, then the data handle. The cc tiling is
built for FP8E4M3 (``Mc2CcTilingConfig(group, 8, ..., 0, FP8E4M3, FP8E4M3)``, ``SetCommEngine(6)``),
and the CCU client's Prepare takes the tiling's ``srcDataType`` for every task
(``platform_v310/hccl_ccu_v0.h`` ``InitCcuParam``), so on hardware the scale AlltoAllV runs as
FP8E4M3: the same byte count, the same result (hccl_py does the same, without a warning: an
op that moves bytes cannot tell the two types apart). On the 950 the AIV to AIC hand-off is mode 4
(``CrossCoreSetFlag<4, PIPE_V>(8 + 16 * GetSubBlockIdx())``) and each AIC waits for both of its
AIVs (flags 8 and 24). The scales stay rank-major in the workspace; only the rows are permuted.

Stand-ins: the shared expert is off (``mmX``/``mmWeight``/``mmY`` null: ``isNeedMM = false``);
``Mc2GmmASWKernel`` (MX grouped matmul) is a torch dequantise-and-multiply per group, the groups
dealt round robin over the AIC cores; the weight is ``(E, H1, N1)`` FP8 with ``(E, H1 / 64, N1, 2)``
E8M0 scales; gmmY is FP16; the grouped matmul tiling is reduced to its group count; a system
workspace and ``GetLibApiWorkSpaceSize`` of 0; the platform is 2 AIC and 4 AIV cores.

Run: ``python samples/mc2_allto_allv_quant_grouped_mat_mul.py`` (4 emulated ranks),
``python -m hccl_py run -n 2 --backend gloo samples/mc2_allto_allv_quant_grouped_mat_mul.py``.
"""

import numpy as np
import torch
from _a2av_templates import (
    MX_BLOCK,
    CalcA2avCommBeforeParams,
    CalcExpertNum,
    ComputePrefixSum,
    HcclA2avOpBase,
    PostTiling,
    dequant,
    e8m0_scales,
    fp8_values,
    mx_group_matmul,
    routed_rows,
)
from _common import WORLD_GROUP, compare, on_device, run_sample, zeros
from _mc2 import expert_recv_counts
from _mc2_templates import (
    A2AV_GMM_TILING_FIELDS,
    MAX_HANDLE_ID_NUM,
    PERMUTE_BUF_SIZE,
    TENSOR_LIST_SIZE,
    A2avCommParams,
    Align,
    CeilDiv,
    HcclA2avTilingInfo,
)

import hccl_py as hp
from hccl_py import (
    AIC,
    AIV,
    HCCL_CMD_ALLTOALLV,
    PIPE_MTE2,
    PIPE_V,
    HcclDataType,
    HcclServerType,
    Mc2CcTilingConfig,
    TilingData,
    offsetof,
)

PLATFORM = "950"  # DAV_3510: the CCU communication mode
CCU = HcclServerType.HCCL_SERVER_TYPE_CCU
FP8E4M3, FP8E8M0 = HcclDataType.HCCL_DATA_TYPE_FP8E4M3, HcclDataType.HCCL_DATA_TYPE_FP8E8M0
E, H1, N1 = 4, 128, 32  # experts per rank, gmm x columns (K), gmm weight columns
AIC_NUM, AIV_NUM = 2, 4  # GetCoreNumAic / GetCoreNumAiv of the sample's platform
ENGINE_CCU_SCHED = 6  # Mc2Comm::ENGINE_CCU_SCHED (mc2/common/utils/mc2_comm_utils.h)
PACK_FACTOR, X_TYPE_SIZE = 1, 1  # FP8 E4M3 gmm x (a2av_gmm_utils.h)
SCALE_ALIGNMENT_BLOCK_SIZE = 64  # a2av_common_tiling.h

SYNC_MODE_AIV_TO_AIC = 4  # __NPU_ARCH__ == 3510 (a2av_common_tiling.h)
SYNC_FLAG_AIV1_OFFSET = 16
SYNC_FLAG_ID_COMM_DONE = 8


class QuantAlltoAllvGroupedMatmulTilingData(TilingData):
    """QuantAlltoAllvGroupedMatmulTilingData (pack 8); its TCubeTilings cut after baseK."""

    _fields_ = A2AV_GMM_TILING_FIELDS


# ---------------------------------------------------------------- a2av_permute_engine.h
def PermuteImplParallel(src, dst, counts, e, rankDim, start, expertNum, axis, base, aivCoreNum):
    """Rank-major rows of one batch (src) to expert-major (dst), one-byte elements, the
    (expert, rank) pairs split over the AIV cores, copied through the UB in 32 KiB pieces;
    returns the new ``permuteBaseOffset``."""
    totalPos = rankDim * expertNum
    sumCntSrc = ComputePrefixSum(False, totalPos, counts, e, start, expertNum, rankDim)
    sumCntDst = ComputePrefixSum(True, totalPos, counts, e, start, expertNum, rankDim)
    pairsPerCore = CeilDiv(totalPos, aivCoreNum)
    myStartPair = hp.GetBlockIdx() * pairsPerCore
    for pairIdx in range(myStartPair, min(myStartPair + pairsPerCore, totalPos)):
        rankIndex, local = divmod(pairIdx, expertNum)
        srcPos, dstPos = rankIndex * expertNum + local, local * rankDim + rankIndex
        srcOffset = base + (sumCntSrc[srcPos - 1] * axis if srcPos else 0)
        dstOffset = base + (sumCntDst[dstPos - 1] * axis if dstPos else 0)
        totalCnt = counts[rankIndex * e + start + local] * axis
        for tile in range(0, totalCnt, PERMUTE_BUF_SIZE):  # TileDataCopyLoopDoubleBuf
            n = min(PERMUTE_BUF_SIZE, totalCnt - tile)
            ub = hp.gm_tensor(src + srcOffset + tile, torch.uint8, n).clone()
            hp.gm_tensor(dst + dstOffset + tile, torch.uint8, n).copy_(ub)
    batch = range(start, start + expertNum)
    return base + sum(counts[r * e + x] for x in batch for r in range(rankDim)) * axis


# ---------------------------------------------------------------- hccl_a2av_op.h
class HcclA2avOp(HcclA2avOpBase):
    """HcclA2avOp<fp8_e4m3fn_t, commBeforeComputeFlag = true, TILINGKEY_TPL_CCU>."""

    SERVER, COMM_BEFORE = CCU, True
    DATA_TYPE = FP8E4M3  # IsSameType<fp8_e4m3fn_t>, __NPU_ARCH__ == 3510

    def __init__(self) -> None:
        super().__init__()
        self.scaleCommParams_ = A2avCommParams()
        self.scaleRecvOffsetLastSum_ = [0]
        self.alltoAllvScaleHandleId_ = [hp.INVALID_HANDLE_ID] * MAX_HANDLE_ID_NUM
        self.permuteBaseOffset_ = 0

    def Init(self, hcclInitTiling, hcclCcTilingOffset, taskTilingInfo, send, recv, permute, aiv):
        super().Init(hcclInitTiling, hcclCcTilingOffset, taskTilingInfo, send, recv, aiv)
        self.permuteOutBuffer_ = permute

    def InitScaleBuffer(self, sendBuffer, commOutBuffer, permuteOutBuffer) -> None:
        self.sendScaleGlobalBuffer_ = sendBuffer
        self.recvScaleGlobalBuffer_ = commOutBuffer
        self.scalePermuteOutBuffer_ = permuteOutBuffer

    def LaunchCommScale(self, startExpertIdx: int, expertNum: int) -> None:
        if self.aiv_only():
            return
        p, axis = self.scaleCommParams_, CeilDiv(self.H1_, SCALE_ALIGNMENT_BLOCK_SIZE) * 2
        CalcA2avCommBeforeParams(
            p, self.sendCounts_, self.recvCounts_, self.rankDim_, self.e_, startExpertIdx,
            expertNum, axis, self.scaleRecvOffsetLastSum_,
        )  # fmt: skip
        self.alltoAllvScaleHandleId_[startExpertIdx] = self.hccl_.AlltoAllV[True](
            self.sendScaleGlobalBuffer_, p.sendCnt, p.sendOffset, FP8E8M0,
            self.recvScaleGlobalBuffer_, p.recvCnt, p.recvOffset, FP8E8M0,
        )  # fmt: skip

    def Launch(self, startExpertIdx: int, expertNum: int) -> None:
        self.LaunchCommData(startExpertIdx, expertNum)

    def LaunchScaleBeforeCompute(self, startExpertIdx: int, expertNum: int) -> None:
        self.LaunchCommScale(startExpertIdx, expertNum)

    def WaitScale(self, startExpertIdx: int) -> None:
        if self.aiv_only():
            return
        self.hccl_.Wait(self.alltoAllvScaleHandleId_[startExpertIdx])

    def Wait(self, startExpertIdx: int) -> None:
        if self.aiv_only():
            return
        self.hccl_.Wait(self.alltoAllvHandleId_[startExpertIdx])

    def PermuteData(self, startExpertIdx: int, expertNum: int, dstBuffer) -> None:
        if hp.g_coreType == AIC:  # A2AV_AIV_ALL()
            return
        self.permuteBaseOffset_ = PermuteImplParallel(
            self.recvGlobalBuffer_, dstBuffer, self.recvCounts_, self.e_, self.rankDim_,
            startExpertIdx, expertNum, CeilDiv(self.H1_, PACK_FACTOR), self.permuteBaseOffset_,
            self.aivCoreNum_,
        )  # fmt: skip

    def End(self) -> None:
        hp.SyncAll[False]()
        if hp.g_coreType == AIC:
            return
        self.hccl_.Finalize()


# ---------------------------------------------------------------- quant_grouped_matmul.h (stand-in)
class MxGroupedMatmul:
    """QuantGroupedMatmul<..., FP8 E4M3, MX scales, isLocal = false, isA2avGmm = true>: a
    batch's groups (expert, rank) read from the rank-major receive buffers through their
    offset tables, written one after the other to gmmY (stand-in for Mc2GmmASWKernel)."""

    def Init(self, xGM, weightGM, xScaleGM, weightScaleGM, yGM, tilingData) -> None:
        if hp.g_coreType == AIV:
            return
        self.xGM_, self.wGM_, self.xsGM_, self.wsGM_, self.yGM_ = (
            xGM, weightGM, xScaleGM, weightScaleGM, yGM,
        )  # fmt: skip
        info = self.info_ = tilingData.taskTilingInfo
        self.e_, self.ranks_ = info.e, info.epWorldSize
        self.expertTokenNum_ = [
            sum(info.recvCnt[x + i * self.e_] for i in range(self.ranks_)) for x in range(self.e_)
        ]
        self.expertTokenOffset_ = 0  # rows of the batches before, in gmmY and the buffers

    def Process(self, start: int, expertNum: int) -> None:
        if hp.g_coreType == AIV:
            return
        batch = range(start, start + expertNum)
        tokens = sum(self.expertTokenNum_[x] for x in batch)
        if tokens == 0:
            return
        e, ranks, info = self.e_, self.ranks_, self.info_
        k, n, sAxis = info.H1, info.N1, CeilDiv(info.H1, SCALE_ALIGNMENT_BLOCK_SIZE) * 2
        # aGroupOffsetTable / xScaleOffsetTable: rows of group (x, r) in the rank-major buffers
        rowOf, row = {}, self.expertTokenOffset_
        for r in range(ranks):
            for x in batch:
                rowOf[x, r], row = row, row + info.recvCnt[x + r * e]
        yRow = self.expertTokenOffset_
        for g, (x, r) in enumerate((x, r) for x in batch for r in range(ranks)):
            m = info.recvCnt[x + r * e]
            if m and g % AIC_NUM == hp.GetBlockIdx():
                self.group(rowOf[x, r], yRow, m, x, k, n, sAxis)
            yRow += m
        self.expertTokenOffset_ += tokens

    def group(self, aRow, yRow, m, x, k, n, sAxis) -> None:
        mx_group_matmul(
            self.xGM_ + aRow * k, self.xsGM_ + aRow * sAxis, self.wGM_ + x * k * n,
            self.wsGM_ + x * (k // MX_BLOCK) * n, self.yGM_ + yRow * n * 2, m, k, n,
        )  # fmt: skip

    def End(self) -> None:
        pass


# ---------------------------------------------------------------- a2av_gmm_scheduler.h
class A2avGmmScheduler:
    """A2avGmmScheduler<HcclA2avOp, QuantGroupedMatmul (gmm), QuantGroupedMatmul (local mm)>."""

    def __init__(self) -> None:
        self.commOp = HcclA2avOp()
        self.computeOp = MxGroupedMatmul()

    def Init(self, gmmx, gmmw, gmmxScale, gmmwScale, gmmy, permuteOut, workspaceGM, tilingGM):
        tilingData = hp.GET_TILING_DATA_WITH_STRUCT(QuantAlltoAllvGroupedMatmulTilingData, tilingGM)
        self.tilingData_ = tilingData
        info = tilingData.taskTilingInfo
        self.e_, self.expertNum_ = info.e, info.expertNum
        workspaceOffset = 0
        commOutLen = Align(CeilDiv(info.A * info.H1, PACK_FACTOR) * X_TYPE_SIZE, TENSOR_LIST_SIZE)
        self.commOutGm_ = workspaceGM + workspaceOffset
        workspaceOffset += commOutLen
        self.permuteOutGm_ = permuteOut
        self.computeScaleGm_ = gmmxScale
        hcclInitTiling = tilingData.hcclA2avTilingInfo.hcclInitTiling
        hcclCcTilingOffset = offsetof(
            QuantAlltoAllvGroupedMatmulTilingData, "hcclA2avTilingInfo"
        ) + offsetof(HcclA2avTilingInfo, "a2avCcTiling")
        self.commOp.Init(
            hcclInitTiling, hcclCcTilingOffset, info, gmmx, self.commOutGm_, self.commOutGm_,
            info.aivCoreNum,
        )  # fmt: skip
        # MX_QUANT_MODE: the scales' receive buffer follows commOut
        scaleAxis = CeilDiv(info.H1, SCALE_ALIGNMENT_BLOCK_SIZE) * 2
        permuteScaleOutSize = Align(info.A * scaleAxis, TENSOR_LIST_SIZE)
        self.gmmxScaleCommOutGm_ = workspaceGM + workspaceOffset
        workspaceOffset += permuteScaleOutSize
        self.gmmxScalePermuteOutGm_ = self.gmmxScaleCommOutGm_
        self.commOp.InitScaleBuffer(
            gmmxScale, self.gmmxScaleCommOutGm_, self.gmmxScalePermuteOutGm_
        )
        self.computeScaleGm_ = self.gmmxScalePermuteOutGm_
        self.isPermuteOut_ = tilingData.isPermuteOut
        self.computeOp.Init(
            self.commOutGm_, gmmw, self.computeScaleGm_, gmmwScale, gmmy, tilingData
        )

    def Process(self) -> None:
        self.ProcessCommRoundMode()  # isNeedMM == 0: no local compute
        self.End()

    def End(self) -> None:
        self.commOp.End()
        self.computeOp.End()

    def ProcessCommRoundMode(self) -> None:
        batches = [
            (start, min(self.expertNum_, self.e_ - start))
            for start in range(0, self.e_, self.expertNum_)
        ]
        for start, actualExpertNum in batches:
            self.commOp.LaunchScaleBeforeCompute(start, actualExpertNum)  # MX_QUANT_MODE
            self.commOp.Launch(start, actualExpertNum)
        for start, actualExpertNum in batches:
            if hp.g_coreType == AIV:
                if hp.GetBlockIdx() == 0:
                    self.commOp.WaitScale(start)
                    self.commOp.Wait(start)
                hp.SyncAll[True]()
                hp.CrossCoreSetFlag[SYNC_MODE_AIV_TO_AIC, PIPE_V](
                    SYNC_FLAG_ID_COMM_DONE + SYNC_FLAG_AIV1_OFFSET * hp.GetSubBlockIdx()
                )
                if self.isPermuteOut_:
                    self.commOp.PermuteData(start, actualExpertNum, self.permuteOutGm_)
            if hp.g_coreType == AIC:
                hp.CrossCoreWaitFlag[SYNC_MODE_AIV_TO_AIC, PIPE_MTE2](SYNC_FLAG_ID_COMM_DONE)
                hp.CrossCoreWaitFlag[SYNC_MODE_AIV_TO_AIC, PIPE_MTE2](
                    SYNC_FLAG_ID_COMM_DONE + SYNC_FLAG_AIV1_OFFSET
                )  # __NPU_ARCH__ == 3510
                self.computeOp.Process(start, actualExpertNum)


def allto_allv_quant_grouped_mat_mul(
    gmmxGM, gmmweightGM, gmmxScaleGM, gmmWeightScaleGM, sendCountsTensorOptionalGM,
    recvCountsTensorOptionalGM, mmxOptionalGM, mmweightOptionalGM, mmxScaleGM, mmWeightScaleGM,
    gmmyGM, mmyOptionalGM, permuteOutOptionalGM, workspaceGM, tilingGM,
):  # fmt: skip
    """The kernel entry: the workspace check, the scheduler's Init and Process."""
    userWorkspace = workspaceGM  # GetUserWorkspace: a system workspace of 0 bytes here
    if userWorkspace == hp.NULL:
        return
    a2avGmmScheduler = A2avGmmScheduler()
    a2avGmmScheduler.Init(
        gmmxGM, gmmweightGM, gmmxScaleGM, gmmWeightScaleGM, gmmyGM, permuteOutOptionalGM,
        userWorkspace, tilingGM,
    )  # fmt: skip
    a2avGmmScheduler.Process()


# ---------------------------------------------------------------- host
def send_counts(rank: int, n: int) -> list[int]:
    return routed_rows(rank, n, E)


def recv_counts(rank: int, n: int) -> list[int]:
    return expert_recv_counts(send_counts, rank, n, E)


def CalcTschBlockDim(sliceNum: int, aicCoreNum: int, aivCoreNum: int) -> int:
    if aicCoreNum == 0 or aivCoreNum == 0 or aicCoreNum == aivCoreNum:
        return sliceNum
    ratio = aivCoreNum // aicCoreNum
    return (sliceNum + ratio - 1) // ratio


def make_tiling(rank: int, n: int) -> tuple[QuantAlltoAllvGroupedMatmulTilingData, int, int]:
    """Host side: DoOpTiling (block dim, SetHcclTiling), DoLibApiTiling, GetWorkspaceSize and
    PostTiling. Returns the tiling, the block dim and the workspace size in bytes."""
    tiling = QuantAlltoAllvGroupedMatmulTilingData()
    task = tiling.taskTilingInfo
    sends, recvs = send_counts(rank, n), recv_counts(rank, n)
    bsk, a = sum(sends), sum(recvs)
    blockDim = CalcTschBlockDim(AIV_NUM, AIC_NUM, AIV_NUM)

    # SetHcclTiling: cmd 8 (ALLTOALLV), reduce type 0, the gmm x type both ways, comm_mode "ccu"
    hcclCcTilingConfig = Mc2CcTilingConfig(
        WORLD_GROUP, HCCL_CMD_ALLTOALLV, "AlltoAll=level0:fullmesh;level1:pairwise", 0,
        FP8E4M3, FP8E4M3,
    )  # fmt: skip
    hcclCcTilingConfig.SetCommEngine(ENGINE_CCU_SCHED)
    if hcclCcTilingConfig.GetTiling(tiling.hcclA2avTilingInfo.hcclInitTiling) != 0:
        raise RuntimeError("mc2CcTilingConfig GetTiling hcclInitTiling failed")
    if hcclCcTilingConfig.GetTiling(tiling.hcclA2avTilingInfo.a2avCcTiling) != 0:
        raise RuntimeError("mc2CcTilingConfig GetTiling a2avCcTiling failed")

    # DoLibApiTiling -> DoGmmTiling (the helper reduced to the group count), GetPermuteOutSize
    expertNum = CalcExpertNum(E, n, bsk, N1, PACK_FACTOR)
    if max(sum(recvs[r * E + x] for r in range(n)) for x in range(E)):
        tiling.gmmQuantTilingData.gmmQuantParams.groupNum = expertNum * n
    permuteOutSize = Align(a * H1, 512)
    permuteScaleOutSize = Align(a * CeilDiv(H1, 64) * 2 * 1, 512)

    # GetWorkspaceSize: libApi (0), the two receive areas, group list, offset tables, repeats
    workspace = permuteOutSize + permuteScaleOutSize + 3 * 8 * E * n + TENSOR_LIST_SIZE + 4 * E * 2

    # PostTiling
    shape = dict(BSK=bsk, BS=0, H1=H1, H2=0, A=a, N1=N1, N2=0, epWorldSize=n, e=E)
    PostTiling(task, sends, recvs, expertNum, AIV_NUM, AIC_NUM, **shape)
    tiling.isPermuteOut, tiling.isNeedMM = True, False
    return tiling, blockDim, workspace


def inputs(rank: int, n: int) -> tuple[np.ndarray, ...]:
    """gmm x (BSK, H1) FP8 bytes sorted by global expert and its E8M0 scales (BSK, H1 / 64, 2);
    gmm weight (E, H1, N1) FP8 bytes and its scales (E, H1 / 64, N1, 2). Values in [-2, 2],
    scales 2 ** -1 .. 2 ** 1: every product and sum is exact in FP32 and FP16."""
    rng = np.random.default_rng(rank)
    bsk = sum(send_counts(rank, n))
    x, xs = fp8_values(rng, bsk, H1), e8m0_scales(rng, bsk, H1 // 64, 2)
    return x, xs, fp8_values(rng, E, H1, N1), e8m0_scales(rng, E, H1 // 64, N1, 2)


def reference(rank: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """numpy: permuteOut (each local expert's FP8 rows from every rank in rank order) and gmmY
    (their dequantised product with the expert's dequantised weight, FP16)."""
    _, _, w, ws = inputs(rank, n)
    rows, y = [], []
    for e in range(E):
        g = rank * E + e
        for src in range(n):
            x, xs, _, _ = inputs(src, n)
            start, cnt = sum(send_counts(src, n)[:g]), send_counts(src, n)[g]
            rows.append(x[start : start + cnt])
            xsF = np.repeat(xs[start : start + cnt].reshape(cnt, H1 // 32), 32, 1)
            xd = dequant(x[start : start + cnt], xsF)
            wsF = np.repeat(ws[e].transpose(0, 2, 1).reshape(H1 // 32, N1), 32, 0)
            y.append((xd @ dequant(w[e], wsF)).astype(np.float16))
    return np.concatenate(rows), np.concatenate(y)


def main() -> list[str]:
    """One launch on every rank; permuteOut and gmmY against the numpy reference."""
    rank, n = hp.get_rank(), hp.get_world_size()
    tiling, blockDim, workspaceSize = make_tiling(rank, n)
    a = tiling.taskTilingInfo.A
    x, xs, w, ws = inputs(rank, n)
    gmm_y, permute_out = zeros(a, N1), zeros(a, H1, dtype=torch.uint8)
    workspace = zeros(workspaceSize, dtype=torch.uint8)
    hp.launch(
        allto_allv_quant_grouped_mat_mul,
        on_device(x), on_device(w), on_device(xs), on_device(ws),
        None, None, None, None, None, None,
        gmm_y, None, permute_out, workspace, tiling,
        block_dim=blockDim, kernel_type="mix_aic_1_2",
    )  # fmt: skip
    permute_ref, gmm_y_ref = reference(rank, n)
    return [compare("permuteOut", permute_out, permute_ref), compare("gmmY", gmm_y, gmm_y_ref)]


if __name__ == "__main__":
    run_sample(main, platform=PLATFORM)
