"""Port of the 2026 AlltoAllvGroupedMatMul (MC2 templates, Atlas A3 ``ai_cpu``), call for call.

Source: ops-transformer as of the snapshot mirror-cann/ops-transformer 3a280bcc (2026-07-21),
every file read at that commit: the kernel entry
``mc2/allto_allv_grouped_mat_mul/op_kernel/allto_allv_grouped_mat_mul.cpp``
(``allto_allv_grouped_mat_mul<TILINGKEY_GMM_WEIGHT_TRANSPOSE = 0, TILINGKEY_MM_WEIGHT_TRANSPOSE
= 0, TILINGKEY_COMM_MODE = TILINGKEY_TPL_AICPU>``, 47-86), its tiling struct
``op_kernel/allto_allv_grouped_mat_mul_tiling.h`` (``AlltoAllvGmmTilingData``) and the
templates it includes from ``mc2/allto_allv_quant_grouped_mat_mul/op_kernel/mc2_templates/``:
the scheduler ``A2avGmmScheduler`` (``scheduler/a2av_gmm_scheduler.h``: ``Init`` 35-84,
``Process`` 86-93, ``End`` 96-101, ``ProcessCommRoundMode`` 104-138), the communication op
``HcclA2avOp<half, commBeforeComputeFlag = true, TILINGKEY_TPL_AICPU>``
(``communication/hccl_a2av_op.h``: ``Init`` 126-163, ``LaunchCommData`` 190-207, ``Wait``
231-235, ``PermuteData`` 248-266, ``End`` 269-274) with ``A2AV_AIV_ONLY``/``A2AV_AIV_ALL``
(``communication/a2av_comm_guard.h``), ``CalcA2avCommBeforeParams``
(``communication/a2av_comm_params.h`` 28-69) and ``PermuteImplParallel``/``ComputePrefixSum``/
``TileDataCopyLoopDoubleBuf`` (``communication/a2av_permute_engine.h``), the compute op
``QuantGroupedMatmul`` (``compute/quant_grouped_matmul.h``: ``Init`` 84-150, ``Process``
160-337, ``UpdateAddr`` 352-376) over ``Mc2GmmASWKernel`` (``mc2/3rd/grouped_matmul/op_kernel/
gqmm_cube_on_the_fly.h``, ``quant_block_sch.h``: ``UpdateGroupOffset``), the constants and
``HcclA2avTilingInfo``/``TaskTilingInfo`` of ``common/a2av_common_tiling.h``; the host tiling
``AlltoAllvGmmTilingStructA3``/``AlltoAllvGmmTilingA3`` (``op_host/op_tiling/arch22/
allto_allv_grouped_mat_mul_tiling_a3.cpp``) on ``AlltoAllvGmmTiling`` of
``op_host/op_tiling/allto_allv_grouped_mat_mul_tiling.cpp`` (``CalcExpertNum`` 35-63,
``SetHcclTiling`` 678-720, ``setNumBlocks`` 722-745, ``DoAiCoreTiling`` 876-922,
``GetWorkspaceSize`` 1185-1199, ``PostTiling`` 1201-1251) and ``mc2tiling::GetNumBlocks``
(``mc2/common/op_host/op_tiling/mc2_calc_num_blocks.h``); described in
docs/notes/mc2-kernels.md section 9.

Which path: the entry has two communication modes, chosen by the tiling key. The CCU one
(``Hccl<HCCL_SERVER_TYPE_CCU>``) exists only on ``DAV_3510`` (Ascend 950); on A3 the host
admits ``comm_mode = "ai_cpu"`` alone (``GetAndConvertCommMode``, ``GetTilingKey``), so this
is the A3 path, ``Hccl<HCCL_SERVER_TYPE_AICPU>``; the MX and per-tensor quantisation branches
of the templates (``LaunchScaleBeforeCompute``, ``WaitScale``) are compiled out for FP16.

What runs unchanged: ``InitV2(GetHcclContext<0>(), &tiling.hcclA2avTilingInfo.hcclInitTiling)``
and ``SetCcTilingV2(offsetof(AlltoAllvGmmTilingData, hcclA2avTilingInfo) +
offsetof(HcclA2avTilingInfo, a2avCcTiling))`` (return value unchecked, as in the source) and
``GetRankDim`` on every AIC and AIV core; the experts go in batches of ``expertNum``
(``CalcExpertNum``: 4 for 5 experts per rank, so a batch of 4 and a tail of 1); AIV block 0
alone Prepares, one ``AlltoAllV<true>`` per batch into the workspace (``commOut``: per batch,
rank-major, the batch's experts inside), counts and displacements from
``CalcA2avCommBeforeParams`` in ``uint64_t[128]`` arrays, the handle stored at the batch's
first expert; the AIC cores run the shared-expert matmul meanwhile (the AIV cores skip it);
per batch on the AIV cores: block 0 ``Wait``s, ``SyncAll<true>``, every AIV core
``CrossCoreSetFlag<2, PIPE_V>(8)`` to its AIC, then the permute of the batch's received rows
from ``commOut`` into ``permuteOut`` (expert-major), its (expert, rank) pairs split over
``aivCoreNum`` AIV cores; on the AIC cores ``CrossCoreWaitFlag(8)`` and the batch's grouped
matmul read straight from ``commOut`` (groups (expert, rank), a batch without tokens
skipped); ``End``: ``SyncAll<false>`` on every core, then ``Finalize`` on every AIV core
(blocks 1.. prepared nothing), none on the AIC cores.

The tiling structs of ``a2av_common_tiling.h`` and the ``QuantGroupedMatmul`` stand-in are
shared with the GroupedMatMulAlltoAllv port (samples/_mc2_templates.py), as the two kernels
share the templates.

Stand-ins: FP16 only, weights not transposed; ``Mc2GmmASWKernel`` is a torch call per
baseM x baseN block, the blocks of each ``Process`` call dealt round robin over
``usedCoreNum`` AIC cores (the ASW window order is not reproduced), and the group list and
offset tables it reads from the workspace are Python lists; ``GMMQuantTilingData``'s
``TCubeTiling`` is cut after ``baseK`` and its ``DoOpTiling`` is replaced by baseM = baseN = 16;
the workspace is the user workspace (``GetUserWorkspace`` with a system workspace of 0,
``GetLibApiWorkSpaceSize`` taken as 0); the host's ``epWorldSize`` check (A3 admits 8, 16,
32, 64 and 128) is not applied: the sample runs 2 or 4 ranks; the platform is 2 AIC and 4
AIV cores.

How it differs from the 2025 port (samples/mc2_allto_allv_grouped_mat_mul.py, the
coarse-grained kernel): ``InitV2``/``SetCcTilingV2`` instead of ``Init``/``SetCcTiling``;
one AlltoAllV per batch of up to ``expertNum`` experts instead of one per expert, received
into the workspace rank-major rather than into ``permuteOut`` expert-major; the AIV cores
copy the rows into ``permuteOut`` themselves; the hand-off to the AIC cores is
``SyncAll<true>`` plus a mode-2 flag per AI core instead of a ``SyncAll<false>`` of every
core; the shared-expert matmul has no barrier after it; the host sets ``SetCommEngine(2)``
and puts the counts (``int32_t``) into ``taskTilingInfo``.

Run: ``python samples/mc2_allto_allv_grouped_mat_mul_2026.py`` (4 emulated ranks),
``python -m hccl_py run -n 2 --backend gloo samples/mc2_allto_allv_grouped_mat_mul_2026.py``.
"""

import numpy as np
from _a2av_templates import (
    CalcExpertNum,
    ComputePrefixSum,
    HcclA2avOpBase,
    PostTiling,
    routed_rows,
)
from _common import WORLD_GROUP, compare, on_device, run_sample, zeros
from _mc2 import FP16, SIZEOF_HALF, expert_recv_counts, gmm_inputs, gmm_reference
from _mc2_templates import (
    A2AV_GMM_TILING_FIELDS,
    PACK_FACTOR,
    PERMUTE_BUF_SIZE,
    TENSOR_LIST_SIZE,
    X_TYPE_SIZE,
    Align,
    CeilDiv,
    HcclA2avTilingInfo,
    QuantGroupedMatmul,
)

import hccl_py as hp
from hccl_py import (
    AIC,
    AIV,
    HCCL_CMD_ALLTOALLV,
    HCCL_SERVER_TYPE_AICPU,
    PIPE_MTE2,
    PIPE_V,
    Mc2CcTilingConfig,
    TilingData,
    offsetof,
)

PLATFORM = "A3"  # the ai_cpu communication mode; the CCU one is DAV_3510 only
E, H1, N1 = 5, 16, 32  # experts per rank, gmm x columns, gmm weight columns
BS, H2, N2 = 8, 16, 32  # the shared expert: mm x (BS, H2) @ mm weight (H2, N2)
BASE_M = BASE_N = 16  # the stand-in for the grouped matmul tiling's baseM, baseN
AIC_NUM, AIV_NUM = 2, 4  # GetCoreNumAic / GetCoreNumAiv of the sample's platform
ENGINE_AICPU = 2  # Mc2Comm::ENGINE_AICPU (mc2/common/utils/mc2_comm_utils.h)

SYNC_MODE_AIV_TO_AIC = 2  # not DAV_3510 (a2av_common_tiling.h)
SYNC_FLAG_AIV1_OFFSET = 0
SYNC_FLAG_ID_COMM_DONE = 8


class AlltoAllvGmmTilingData(TilingData):
    """AlltoAllvGmmTilingData (pack 8); its two TCubeTiling members cut after baseK."""

    _fields_ = A2AV_GMM_TILING_FIELDS


# ---------------------------------------------------------------- a2av_permute_engine.h
def TileDataCopyLoopDoubleBuf(src, dst, srcBaseOffset, dstBaseOffset, totalCnt, bufferLen):
    """DataCopyPad GM -> UB -> GM in pieces of ``bufferLen`` bytes (element offsets in)."""
    tileNum = CeilDiv(totalCnt, bufferLen)
    for tile in range(tileNum):
        realLength = totalCnt - tile * bufferLen if tile == tileNum - 1 else bufferLen
        elemOffset = CeilDiv(tile * bufferLen, SIZEOF_HALF)
        count = realLength // SIZEOF_HALF
        ub = hp.gm_tensor(src + (srcBaseOffset + elemOffset) * SIZEOF_HALF, FP16, count).clone()
        hp.gm_tensor(dst + (dstBaseOffset + elemOffset) * SIZEOF_HALF, FP16, count).copy_(ub)


def PermuteImplParallel(src, dst, counts, e, rankDim, start, expertNum, axis, base, aivCoreNum):
    """Rank-major rows of one batch (src) to expert-major (dst), (expert, rank) pairs split
    over the AIV cores; returns the new ``permuteBaseOffset`` (a ``uint64_t &`` in C++)."""
    totalPos = rankDim * expertNum
    sumCntSrc = ComputePrefixSum(False, totalPos, counts, e, start, expertNum, rankDim)
    sumCntDst = ComputePrefixSum(True, totalPos, counts, e, start, expertNum, rankDim)
    myBlockIdx = hp.GetBlockIdx()
    pairsPerCore = CeilDiv(totalPos, aivCoreNum)
    myStartPair = myBlockIdx * pairsPerCore
    myEndPair = min(myStartPair + pairsPerCore, totalPos)
    for pairIdx in range(myStartPair, myEndPair):
        rankIndex, local = divmod(pairIdx, expertNum)  # SrcIsExpertFirst = false
        srcPos = rankIndex * expertNum + local
        dstPos = local * rankDim + rankIndex  # DstIsExpertFirst = true
        srcOffset = base + (sumCntSrc[srcPos - 1] * axis if srcPos else 0)
        dstOffset = base + (sumCntDst[dstPos - 1] * axis if dstPos else 0)
        totalCnt = counts[rankIndex * e + start + local] * axis * SIZEOF_HALF
        if totalCnt == 0:
            continue
        TileDataCopyLoopDoubleBuf(src, dst, srcOffset, dstOffset, totalCnt, PERMUTE_BUF_SIZE)
    current = sum(
        counts[r * e + x] for x in range(start, start + expertNum) for r in range(rankDim)
    )
    return base + current * axis


# ---------------------------------------------------------------- hccl_a2av_op.h
class HcclA2avOp(HcclA2avOpBase):
    """HcclA2avOp<half, commBeforeComputeFlag = true, TILINGKEY_TPL_AICPU>."""

    SERVER, COMM_BEFORE = HCCL_SERVER_TYPE_AICPU, True
    DATA_TYPE = FP16  # IsSameType<half>

    def __init__(self) -> None:
        super().__init__()
        self.permuteBaseOffset_ = 0

    def Init(self, hcclInitTiling, hcclCcTilingOffset, taskTilingInfo, send, recv, permute, aiv):
        super().Init(hcclInitTiling, hcclCcTilingOffset, taskTilingInfo, send, recv, aiv)
        self.permuteOutBuffer_ = permute

    def Launch(self, startExpertIdx: int, expertNum: int) -> None:
        self.LaunchCommData(startExpertIdx, expertNum)

    def Wait(self, startExpertIdx: int) -> None:
        if self.aiv_only():
            return
        self.hccl_.Wait(self.alltoAllvHandleId_[startExpertIdx])

    def PermuteData(self, startExpertIdx: int, expertNum: int, dstBuffer) -> None:
        if hp.g_coreType == AIC:  # A2AV_AIV_ALL()
            return
        self.permuteBaseOffset_ = PermuteImplParallel(
            self.recvGlobalBuffer_,
            dstBuffer,
            self.recvCounts_,
            self.e_,
            self.rankDim_,
            startExpertIdx,
            expertNum,
            CeilDiv(self.H1_, PACK_FACTOR),
            self.permuteBaseOffset_,
            self.aivCoreNum_,
        )

    def End(self) -> None:
        hp.SyncAll[False]()
        if hp.g_coreType == AIC:
            return
        self.hccl_.Finalize()


# ---------------------------------------------------------------- a2av_gmm_scheduler.h
class A2avGmmScheduler:
    """A2avGmmScheduler<HcclA2avOp, QuantGroupedMatmul (gmm), QuantGroupedMatmul (local mm)>."""

    def __init__(self) -> None:
        self.commOp = HcclA2avOp()
        self.computeOp = QuantGroupedMatmul(isLocal=False, isA2avGmm=True)
        self.localComputeOp = QuantGroupedMatmul(isLocal=True, isA2avGmm=True)

    def Init(self, gmmx, gmmw, mmx, mmw, gmmy, mmy, permuteOut, workspaceGM, tilingGM) -> None:
        tilingData = hp.GET_TILING_DATA_WITH_STRUCT(AlltoAllvGmmTilingData, tilingGM)
        self.tilingData_ = tilingData
        info = tilingData.taskTilingInfo
        self.e_, self.expertNum_ = info.e, info.expertNum
        workspaceOffset = 0
        commOutLen = Align(CeilDiv(info.A * info.H1, PACK_FACTOR) * X_TYPE_SIZE, TENSOR_LIST_SIZE)
        self.commOutGm_ = workspaceGM + workspaceOffset
        workspaceOffset += commOutLen
        self.permuteOutGm_ = permuteOut
        hcclInitTiling = tilingData.hcclA2avTilingInfo.hcclInitTiling  # &...->hcclInitTiling
        hcclCcTilingOffset = offsetof(AlltoAllvGmmTilingData, "hcclA2avTilingInfo") + offsetof(
            HcclA2avTilingInfo, "a2avCcTiling"
        )
        self.commOp.Init(
            hcclInitTiling,
            hcclCcTilingOffset,
            info,
            gmmx,
            self.commOutGm_,
            self.commOutGm_,
            info.aivCoreNum,
        )
        self.computeWorkspaceGm_ = workspaceGM + workspaceOffset
        self.isPermuteOut_ = tilingData.isPermuteOut
        if tilingData.isNeedMM:
            self.localComputeOp.Init(mmx, mmw, mmy, tilingData, tilingData.mmQuantTilingData, True)
        self.computeOp.Init(
            self.commOutGm_, gmmw, gmmy, tilingData, tilingData.gmmQuantTilingData, True
        )

    def Process(self) -> None:
        if self.tilingData_.isNeedMM:
            self.localComputeOp.Process(0)
        self.ProcessCommRoundMode()
        self.End()

    def End(self) -> None:
        self.commOp.End()
        self.computeOp.End()
        self.localComputeOp.End()

    def ProcessCommRoundMode(self) -> None:
        batches = [
            (start, min(self.expertNum_, self.e_ - start))
            for start in range(0, self.e_, self.expertNum_)
        ]
        for start, actualExpertNum in batches:
            self.commOp.Launch(start, actualExpertNum)
        for start, actualExpertNum in batches:
            if hp.g_coreType == AIV:
                if hp.GetBlockIdx() == 0:
                    self.commOp.Wait(start)
                hp.SyncAll[True]()
                hp.CrossCoreSetFlag[SYNC_MODE_AIV_TO_AIC, PIPE_V](
                    SYNC_FLAG_ID_COMM_DONE + SYNC_FLAG_AIV1_OFFSET * hp.GetSubBlockIdx()
                )
                if self.isPermuteOut_:
                    self.commOp.PermuteData(start, actualExpertNum, self.permuteOutGm_)
            if hp.g_coreType == AIC:
                hp.CrossCoreWaitFlag[SYNC_MODE_AIV_TO_AIC, PIPE_MTE2](SYNC_FLAG_ID_COMM_DONE)
                self.computeOp.Process(start, actualExpertNum)


def allto_allv_grouped_mat_mul(
    gmmxGM,
    gmmweightGM,
    sendCountsTensorOptionalGM,
    recvCountsTensorOptionalGM,
    mmxOptionalGM,
    mmweightOptionalGM,
    gmmyGM,
    mmyOptionalGM,
    permuteOutOptionalGM,
    workspaceGM,
    tilingGM,
):
    """The kernel entry: the workspace check, GET_TILING_DATA, the scheduler's Init and Process."""
    if workspaceGM == hp.NULL:
        return
    userWorkspace = workspaceGM  # GetUserWorkspace: a system workspace of 0 bytes here
    a2avGmmScheduler = A2avGmmScheduler()
    a2avGmmScheduler.Init(
        gmmxGM,
        gmmweightGM,
        mmxOptionalGM,
        mmweightOptionalGM,
        gmmyGM,
        mmyOptionalGM,
        permuteOutOptionalGM,
        userWorkspace,
        tilingGM,
    )
    a2avGmmScheduler.Process()


# ---------------------------------------------------------------- host
def send_counts(rank: int, n: int) -> list[int]:
    return routed_rows(rank, n, E)


def recv_counts(rank: int, n: int) -> list[int]:
    """``recv_counts[i * E + e]``: rows that rank i sends to this rank's expert e."""
    return expert_recv_counts(send_counts, rank, n, E)


def make_tiling(rank: int, n: int) -> tuple[AlltoAllvGmmTilingData, int, int]:
    """Host side: SetHcclTiling, setNumBlocks, DoAiCoreTiling, GetWorkspaceSize and PostTiling.
    Returns the tiling, the block dim and the workspace size in bytes."""
    tiling = AlltoAllvGmmTilingData()
    task = tiling.taskTilingInfo
    sends, recvs = send_counts(rank, n), recv_counts(rank, n)
    bsk, a = sum(sends), sum(recvs)

    # SetHcclTiling: alltoAllvCmd 8 (HCCL_CMD_ALLTOALLV), reduce type 0, the gmm x type both
    # ways, the AICPU engine
    hcclCcTilingConfig = Mc2CcTilingConfig(
        WORLD_GROUP, HCCL_CMD_ALLTOALLV, "AlltoAll=level0:fullmesh;level1:pairwise", 0, FP16, FP16
    )
    hcclCcTilingConfig.SetCommEngine(ENGINE_AICPU)
    if hcclCcTilingConfig.GetTiling(tiling.hcclA2avTilingInfo.hcclInitTiling) != 0:
        raise RuntimeError("HCCL init tiling config failed")
    if hcclCcTilingConfig.GetTiling(tiling.hcclA2avTilingInfo.a2avCcTiling) != 0:
        raise RuntimeError("HCCL alltoallv tiling config failed")

    numBlocks = min(AIC_NUM, AIV_NUM // 2)  # mc2tiling::GetNumBlocks

    # DoAiCoreTiling (the grouped matmul tiling helper replaced by fixed base blocks)
    expertNum = CalcExpertNum(E, n, bsk, N1)
    maxMSize = max(sum(recvs[r * E + x] for r in range(n)) for x in range(E))
    if maxMSize:
        gmm = tiling.gmmQuantTilingData
        gmm.gmmQuantParams.groupNum = expertNum * n
        cube = gmm.mmTilingData
        cube.usedCoreNum, cube.M, cube.N, cube.Ka = AIC_NUM, maxMSize, N1, H1
        cube.baseM, cube.baseN = BASE_M, BASE_N
    mm = tiling.mmQuantTilingData
    mm.gmmQuantParams.groupNum = 1
    cube = mm.mmTilingData
    cube.usedCoreNum, cube.M, cube.N, cube.Ka, cube.baseM, cube.baseN = (
        AIC_NUM,
        BS,
        N2,
        H2,
        BASE_M,
        BASE_N,
    )

    # GetWorkspaceSize: libApi (0 here), commOut, group list and the two offset tables
    commOutSize = Align(a * H1 * SIZEOF_HALF, TENSOR_LIST_SIZE)
    workspace = commOutSize + 3 * 8 * E * n + TENSOR_LIST_SIZE

    # PostTiling
    shape = dict(BSK=bsk, BS=BS, H1=H1, H2=H2, A=a, N1=N1, N2=N2, epWorldSize=n, e=E)
    PostTiling(task, sends, recvs, expertNum, AIV_NUM, AIC_NUM, **shape)
    tiling.isPermuteOut, tiling.isNeedMM = True, True
    return tiling, numBlocks, workspace


def inputs(rank: int, n: int) -> tuple[np.ndarray, ...]:
    """gmm x (BSK, H1) sorted by global expert, gmm weight (E, H1, N1), mm x, mm weight."""
    return gmm_inputs(rank, sum(send_counts(rank, n)), E, H1, N1, BS, H2, N2)


def reference(rank: int, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """numpy: permuteOut, gmmY and mmY (:func:`_mc2.gmm_reference`)."""
    return gmm_reference(rank, n, send_counts, inputs, E)


def main() -> list[str]:
    """One launch on every rank; permuteOut, gmmY and mmY against the numpy reference."""
    rank, n = hp.get_rank(), hp.get_world_size()
    tiling, numBlocks, workspaceSize = make_tiling(rank, n)
    a = tiling.taskTilingInfo.A
    gmm_x, gmm_w, mm_x, mm_w = inputs(rank, n)
    gmm_y, mm_y, permute_out = zeros(a, N1), zeros(BS, N2), zeros(a, H1)
    workspace = zeros(workspaceSize // SIZEOF_HALF)
    hp.launch(
        allto_allv_grouped_mat_mul,
        on_device(gmm_x),
        on_device(gmm_w),
        None,
        None,
        on_device(mm_x),
        on_device(mm_w),
        gmm_y,
        mm_y,
        permute_out,
        workspace,
        tiling,
        block_dim=numBlocks,
        kernel_type="mix_aic_1_2",
    )
    permute_ref, gmm_y_ref, mm_y_ref = reference(rank, n)
    return [
        compare("permuteOut", permute_out, permute_ref),
        compare("gmmY", gmm_y, gmm_y_ref),
        compare("mmY", mm_y, mm_y_ref),
    ]


if __name__ == "__main__":
    run_sample(main, platform=PLATFORM)
