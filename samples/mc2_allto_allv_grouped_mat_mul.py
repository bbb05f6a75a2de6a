"""Port of ops-transformer's AlltoAllvGroupedMatMul (the MoE kernel, Atlas A3), call for call.

Source: ops-transformer, ``mc2/allto_allv_grouped_mat_mul/`` as of the snapshot of
2025-12-31 (cannmirror/ops-transformer 05c401f; hicann's 2025-11-15 snapshot differs only in
comments and a CCU client for ``__DAV_C310__``): the kernel entry
``op_kernel/allto_allv_grouped_mat_mul.cpp`` (``allto_allv_grouped_mat_mul``, template
``D_T_MM = ADD_TPL_FP16, TILINGKEY_MM = 1``, both weights not transposed), the class
``AlltoAllvGmmCoarseGrained`` of ``op_kernel/allto_allv_grouped_mat_mul_coarse_grained.h``
(``Init`` 89-123, ``Process`` 126-136, ``CalcMatmul`` 139-157, ``HcclAlltoAllvPrepare``
160-208, ``HcclAlltoAllvExec`` 211-258, ``HcclFinalize`` 261-266), the grouped matmul
helpers ``GMMProcess`` (``Init``, ``MnBlockIdxCompute``, ``Process``) and ``GMMCompute``
(``MMCompute``) of ``op_kernel/allto_allv_gmm.h``, the tiling struct
``AlltoAllvGmmTilingData`` of ``op_kernel/allto_allv_grouped_mat_mul_tiling.h`` and the host
tiling ``AlltoAllvGmmTiling`` of ``op_host/op_tiling/allto_allv_grouped_mat_mul_tiling.cpp``
(``GetShapeAndFormat`` 319, ``CheckAttrsShapeRelation`` 557: the counts copied into
``aicpuTiling``, ``SetHcclTiling`` 767-798, ``RunFusionKernelTiling`` 923-985: core numbers,
``commOut``, workspace); described in docs/notes/mc2-kernels.md.

Which path: this entry has a single path and it communicates through the Hccl client (the
op ships for ``ascend910_93`` only). Later revisions (mirror-cann/ops-transformer 3a280bcc,
2026-07-21) rebuilt the op on the templates of
``allto_allv_quant_grouped_mat_mul/op_kernel/mc2_templates/`` (``A2avGmmScheduler``,
``HcclA2avOp``: ``InitV2`` + ``SetCcTilingV2``, the AlltoAllV into the workspace, per expert
group ``Wait``, ``SyncAll<true>``, a mode-2 flag 8 to the AIC cores and an AIV permute into
``permuteOut``); that version is not this port. This one is the coarse-grained kernel as it
shipped until the end of 2025.

What runs unchanged: ``Hccl<HCCL_SERVER_TYPE_AICPU>`` on every core, the deprecated
``Init(context, &tiling->hcclInitTiling)`` and ``SetCcTiling(&tiling->alltoAllvCcTiling)``
(the tiling's unused ``allGatherCcTiling`` sits between them) and ``GetRankId``/``GetRankDim``
on every AIC and AIV core; AIV block 0 alone Prepares: per local expert ``e`` one
``AlltoAllV<true>`` of the token rows of every rank's expert ``e`` (counts
``sendCnt[i * E_ep + e] * H1``, send displacements the prefix sums over the rows sorted by
global expert, receive displacements running expert-major then source-rank), each committed
at once, into ``permuteOut``; the AIC cores meanwhile run the shared-expert matmul, then
``SyncAll<false>``; per expert: AIV block 0 ``Wait``s its handle, every core passes
``SyncAll<false>``, and the AIC cores run the expert's matmul on its received rows
(``GMMProcess``: baseM x baseN blocks dealt round robin to ``aicCoreNum`` cores, an expert
with no tokens skipped); ``SyncAll<false>``; ``Finalize`` on every AIV core (blocks 1..
prepared nothing) and on no AIC core. Idle cores: AIV blocks other than 0 only pass the
barriers and Finalize; the AIC cores never touch their Hccl object after ``GetRankDim``.

Stand-ins: FP16 only; the matmuls (``MatmulImpl`` with ``CFG_MDL``) are one torch call per
baseM x baseN block; ``TCubeTiling`` is cut after ``baseK`` (only ``baseM``/``baseN`` are
read outside the matmul object), with baseM = baseN = 16 set here rather than by
``DoAiCoreTiling``; the counts come as the ``send_counts``/``recv_counts`` attributes (the
optional count tensors stay null, as the host requires); ``permuteOut`` is requested, so the
AlltoAllV writes there (without it the kernel uses the start of ``workspaceGM``); the
workspace holds ``commOut`` only (``GetLibApiWorkSpaceSize`` taken as 0).

Run: ``python samples/mc2_allto_allv_grouped_mat_mul.py`` (4 emulated ranks),
``python -m hccl_py run -n 2 --backend gloo samples/mc2_allto_allv_grouped_mat_mul.py``.
"""

from ctypes import Structure, c_bool, c_int32, c_int64, c_uint64

import numpy as np
from _common import WORLD_GROUP, compare, on_device, run_sample, zeros
from _mc2 import (
    FP16,
    SIZEOF_HALF,
    expert_recv_counts,
    gmm_inputs,
    gmm_reference,
    matmul,
    member_addresses,
    typed_fields,
)

import hccl_py as hp
from hccl_py import (
    AIC,
    AIV,
    HCCL_CMD_ALLTOALLV,
    HCCL_SERVER_TYPE_AICPU,
    Hccl,
    Mc2CcTiling,
    Mc2CcTilingConfig,
    Mc2InitTiling,
    TilingData,
)

PLATFORM = "A3"  # the op's binaries are built for ascend910_93 only
E_EP, H1, N1 = 2, 16, 32  # experts per rank, gmm x columns (K), gmm weight columns
BS, H2, N2 = 8, 16, 32  # the shared expert's matmul: mm x (BS, H2) @ mm weight (H2, N2)
BASE_M = BASE_N = 16  # gmmTilingData / mmTilingData baseM, baseN
AIC_CORE_NUM = 2  # blockDim: 2 AIC and 4 AIV cores
MAX_EXPERT_SIZE = 256  # aicpuTiling's count arrays
MAX_EP_RANK_SIZE = 128  # the kernel's AlltoAllV count and displacement arrays
MAX_HANDLE_ID_NUM = 64


class AlltoAllvGmmCommonTilingInfo(Structure):
    """AlltoAllvGmmCommonTilingInfo, member for member."""

    _fields_ = [
        *typed_fields(c_uint64, "BSK", "BS", "K", "H1", "H2", "A", "N1", "N2", "epWorldSize"),
        *typed_fields(c_uint64, "stepSize", "E_ep", "commOut", "aivCoreNum", "aicCoreNum"),
        ("totalUbSize", c_uint64),
        *typed_fields(c_bool, "isGmmWeightTrans", "isMmWeightTrans", "isSendCntsTensor"),
        *typed_fields(c_bool, "isRecvCntsTensor", "isPermuteOut", "isNeedMM", "isFp16"),
    ]


class TCubeTiling(Structure):
    """The leading members of TCubeTiling, up to baseK (the kernel reads baseM and baseN)."""

    _fields_ = typed_fields(
        c_int32, "usedCoreNum", "M", "N", "Ka", "Kb", "singleCoreM", "singleCoreN"
    ) + typed_fields(c_int32, "singleCoreK", "baseM", "baseN", "baseK")


class AlltoAllvGmmAicpuTiling(Structure):
    """AlltoAllvGmmAicpuTiling: the send_counts and recv_counts attributes."""

    _fields_ = [
        ("sendCnt", c_int64 * MAX_EXPERT_SIZE),
        ("recvCnt", c_int64 * MAX_EXPERT_SIZE),
    ]


class AlltoAllvGmmTilingData(TilingData):
    """AlltoAllvGmmTilingData, with the two TCubeTiling members cut after baseK."""

    _fields_ = [
        ("hcclInitTiling", Mc2InitTiling),
        ("allGatherCcTiling", Mc2CcTiling),
        ("alltoAllvCcTiling", Mc2CcTiling),
        ("commonTilingInfo", AlltoAllvGmmCommonTilingInfo),
        ("gmmTilingData", TCubeTiling),
        ("mmTilingData", TCubeTiling),
        ("aicpuTiling", AlltoAllvGmmAicpuTiling),
    ]


# ---------------------------------------------------------------- allto_allv_gmm.h
THRESHOLD_BLOCK_NUM = 8
THRESHOLD_DIM_M = 5  # __CCE_AICORE__ 220


class MNConfig:
    """MNConfig: one matmul's shape, its block grid and the block being computed."""

    def __init__(self) -> None:
        self.m = self.k = self.n = self.baseM = self.baseN = self.mIdx = self.nIdx = 0
        self.blockDimM = self.blockDimN = self.singleM = self.singleN = 0
        self.xBaseOffset = self.yBaseOffset = self.wBaseOffset = 0


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


class GMMCompute:
    """GMMCompute: one baseM x baseN block of ``y = x @ w[wIndex]`` (stand-in: torch)."""

    def __init__(self) -> None:
        self.xTensorPtr = self.weightTensorPtr = self.yTensorPtr = hp.NULL

    def Init(self, x, weight, y) -> None:
        self.xTensorPtr, self.weightTensorPtr, self.yTensorPtr = x, weight, y

    def MMCompute(self, mn: MNConfig, wIndex: int, rankId: int) -> None:
        curSingleN = mn.singleN
        if mn.nIdx == mn.blockDimN - 1:
            curSingleN = mn.n - mn.nIdx * curSingleN
        curSingleM = mn.singleM
        if mn.mIdx >= mn.blockDimM - 1:
            curSingleM = mn.m - mn.mIdx * curSingleM
        xOffset = mn.mIdx * mn.singleM * mn.k
        wOffset = mn.nIdx * mn.singleN  # weight not transposed
        outOffset = mn.mIdx * mn.singleM * mn.n + mn.nIdx * mn.singleN
        xGm = self.xTensorPtr + mn.xBaseOffset * SIZEOF_HALF
        weightGm = self.weightTensorPtr + wIndex * mn.wBaseOffset * SIZEOF_HALF
        yGm = self.yTensorPtr + mn.yBaseOffset * SIZEOF_HALF
        # SetOrgShape(m, n, k), SetSingleShape, SetTensorA/B, IterateAll into yGm[outOffset]
        a = hp.gm_tensor(xGm + xOffset * SIZEOF_HALF, FP16, curSingleM * mn.k)
        b = hp.gm_tensor(weightGm + wOffset * SIZEOF_HALF, FP16, (mn.k - 1) * mn.n + curSingleN)
        c = hp.gm_tensor(yGm + outOffset * SIZEOF_HALF, FP16, (curSingleM - 1) * mn.n + curSingleN)
        matmul(
            c.as_strided((curSingleM, curSingleN), (mn.n, 1)),
            a.view(curSingleM, mn.k),
            b.as_strided((mn.k, curSingleN), (mn.n, 1)),
        )


class GMMProcess:
    """GMMProcess: deals the baseM x baseN blocks of each matmul to the AIC cores."""

    def __init__(self, computeOp: GMMCompute) -> None:
        self.computeOp = computeOp

    def Init(self, curBaseM: int, curBaseN: int, curCoreNum: int) -> None:
        self.blockIdx = hp.GetBlockIdx()
        self.baseM, self.baseN, self.coreNum = curBaseM, curBaseN, curCoreNum

    def MnBlockIdxCompute(self, mn: MNConfig, curBlock: int, count: int, thrMDimN: int) -> None:
        relativeBlock = curBlock - count
        if mn.blockDimM <= THRESHOLD_DIM_M:
            mn.mIdx, mn.nIdx = divmod(relativeBlock, mn.blockDimN)
            return
        # the swizzled order of tall matrices (more than 5 block rows)
        tail = relativeBlock >= (mn.blockDimM * mn.blockDimN) // thrMDimN * thrMDimN
        curThresholdM = mn.blockDimM % THRESHOLD_BLOCK_NUM if tail else THRESHOLD_BLOCK_NUM
        curThrMThrN = curThresholdM * THRESHOLD_BLOCK_NUM
        inBand = relativeBlock % thrMDimN
        lastN = inBand >= (curThresholdM * mn.blockDimN) // curThrMThrN * curThrMThrN
        curThresholdN = mn.blockDimN % THRESHOLD_BLOCK_NUM if lastN else THRESHOLD_BLOCK_NUM
        local = inBand % curThrMThrN
        lcm = np.lcm(curThresholdM, curThresholdN)
        mn.mIdx = local % curThresholdM + relativeBlock // thrMDimN * THRESHOLD_BLOCK_NUM
        mn.nIdx = (
            local + local // lcm
        ) % curThresholdN + inBand // curThrMThrN * THRESHOLD_BLOCK_NUM

    def Process(self, rankId, mmH, mmN, inOffset, outOffset, tokenNum, computerNum, wIndex) -> None:
        mn = MNConfig()
        mn.baseM, mn.baseN = self.baseM, self.baseN
        mn.k, mn.n = mmH, mmN
        mn.wBaseOffset = mn.k * mn.n
        mn.singleM, mn.singleN = mn.baseM, mn.baseN
        count = 0
        for computerIdx in range(computerNum):
            mn.m = tokenNum[computerIdx]
            mn.xBaseOffset, mn.yBaseOffset = inOffset[computerIdx], outOffset[computerIdx]
            if mn.m == 0 or mn.k == 0 or mn.n == 0:
                return
            mn.blockDimM = ceil_div(mn.m, mn.singleM)
            mn.blockDimN = ceil_div(mn.n, mn.singleN)
            curCount = count + mn.blockDimM * mn.blockDimN
            curBlock = self.blockIdx if self.blockIdx >= count else self.blockIdx + self.coreNum
            thresholdM_dimN = THRESHOLD_BLOCK_NUM * mn.blockDimN
            while curBlock < curCount:
                self.MnBlockIdxCompute(mn, curBlock, count, thresholdM_dimN)
                self.computeOp.MMCompute(mn, wIndex, rankId)
                curBlock += self.coreNum
            count = curCount % self.coreNum


# ---------------------------------------------------------------- allto_allv_grouped_mat_mul_coarse_grained.h
class AlltoAllvGmmCoarseGrained:
    """AlltoAllvGmmCoarseGrained<half, IsNeedMM = true, false, false>."""

    def Init(
        self,
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
        contextGM,
        tilingData: AlltoAllvGmmTilingData,
        hcclInitTiling,
        alltoAllvCcTiling,
    ) -> None:
        self.gmmxGM_, self.gmmwGM_ = gmmxGM, gmmweightGM
        self.sendCntsGM_, self.recvCntsGM_ = sendCountsTensorOptionalGM, recvCountsTensorOptionalGM
        self.mmxGM_, self.mmwGM_ = mmxOptionalGM, mmweightOptionalGM
        self.gmmyGM_, self.mmyGM_ = gmmyGM, mmyOptionalGM
        self.tilingData_ = tilingData
        info = tilingData.commonTilingInfo
        self.permuteOutGM_ = permuteOutOptionalGM if info.isPermuteOut else workspaceGM

        self.hccl_ = Hccl[HCCL_SERVER_TYPE_AICPU]()
        self.hccl_.Init(contextGM, hcclInitTiling)
        self.hccl_.SetCcTiling(alltoAllvCcTiling)

        self.rankId_ = self.hccl_.GetRankId()
        self.rankDim_ = self.hccl_.GetRankDim()
        self.expertNumInOneRank_ = info.E_ep
        self.expertNumAll_ = self.expertNumInOneRank_ * self.rankDim_
        self.axisH1_, self.axisN1_ = info.H1, info.N1
        self.hcclDataType_ = FP16  # HCCL_DATA_TYPE_BFP16 for bfloat16_t
        self.alltoAllvHandleId_ = [hp.INVALID_HANDLE_ID] * MAX_HANDLE_ID_NUM

    def Process(self) -> None:
        self.HcclAlltoAllvPrepare()
        if self.tilingData_.commonTilingInfo.isNeedMM:
            self.CalcMatmul()
            hp.SyncAll[False]()
        self.HcclAlltoAllvExec()
        hp.SyncAll[False]()
        self.HcclFinalize()

    def CalcMatmul(self) -> None:
        """The shared expert: mm y = mm x @ mm weight on the AIC cores, during the AlltoAllVs."""
        info, mmTiling = self.tilingData_.commonTilingInfo, self.tilingData_.mmTilingData
        computeOp = GMMCompute()
        computeOp.Init(self.mmxGM_, self.mmwGM_, self.mmyGM_)
        mmOp = GMMProcess(computeOp)
        mmOp.Init(mmTiling.baseM, mmTiling.baseN, info.aicCoreNum)
        if hp.g_coreType == AIC:
            mmOp.Process(self.rankId_, info.H2, info.N2, [0], [0], [info.BS], 1, 0)

    def HcclAlltoAllvPrepare(self) -> None:
        """AIV block 0: one AlltoAllV<true> per local expert, the counts scaled to elements."""
        if hp.g_coreType != AIV:
            return
        if hp.GetBlockIdx() != 0:
            return
        sendCnt = self.tilingData_.aicpuTiling.sendCnt
        recvCnt = self.tilingData_.aicpuTiling.recvCnt
        E, H, ranks = self.expertNumInOneRank_, self.axisH1_, self.rankDim_
        recvOffsetLastSum = 0
        sendCounts = [0] * MAX_EP_RANK_SIZE
        sendOffsets = [0] * MAX_EP_RANK_SIZE
        recvCounts = [0] * MAX_EP_RANK_SIZE
        recvOffsets = [0] * MAX_EP_RANK_SIZE
        for e in range(E):
            for i in range(ranks):  # rank i's expert e: global expert i * E + e
                sendCounts[i] = sendCnt[i * E + e] * H
                recvCounts[i] = recvCnt[i * E + e] * H
            # the rows sent to global expert i * E + e start after every earlier expert's
            sendOffsets[0] = sum(sendCnt[j] * H for j in range(e))
            for i in range(1, ranks):
                sendOffsets[i] = sendOffsets[i - 1] + sum(
                    sendCnt[e + (i - 1) * E + j] * H for j in range(E)
                )
            # received rows: expert-major, then source rank
            for i in range(ranks):
                if e == 0 and i == 0:
                    recvOffsets[i] = 0
                    recvOffsetLastSum += recvCounts[0]
                else:
                    recvOffsets[i] = recvOffsetLastSum
                    recvOffsetLastSum += recvCounts[i]
            self.alltoAllvHandleId_[e] = self.hccl_.AlltoAllV[True](
                self.gmmxGM_,
                sendCounts,
                sendOffsets,
                self.hcclDataType_,
                self.permuteOutGM_,
                recvCounts,
                recvOffsets,
                self.hcclDataType_,
            )

    def HcclAlltoAllvExec(self) -> None:
        """Per expert: AIV block 0 Waits, every core syncs, the AIC cores multiply its rows."""
        info, gmmTiling = self.tilingData_.commonTilingInfo, self.tilingData_.gmmTilingData
        computeOp = GMMCompute()
        computeOp.Init(self.permuteOutGM_, self.gmmwGM_, self.gmmyGM_)
        gmmOp = GMMProcess(computeOp)
        gmmOp.Init(gmmTiling.baseM, gmmTiling.baseN, info.aicCoreNum)
        recvCnt = self.tilingData_.aicpuTiling.recvCnt
        E, H, N = self.expertNumInOneRank_, self.axisH1_, self.axisN1_
        mmInOffset, mmOutOffset, tokenNum = [0, 0], [0, 0], [0, 0]
        processNum = 1
        gmmTokennum = [sum(recvCnt[e + i * E] for i in range(self.rankDim_)) for e in range(E)]
        expertoffset = [0] * MAX_HANDLE_ID_NUM
        for i in range(1, E):
            expertoffset[i] = expertoffset[i - 1] + gmmTokennum[i - 1] * H
        for e in range(E):
            if hp.g_coreType == AIV and hp.GetBlockIdx() == 0:
                self.hccl_.Wait(self.alltoAllvHandleId_[e])
            hp.SyncAll[False]()
            mmInOffset[0] = expertoffset[e]
            mmOutOffset[0] = expertoffset[e] // H * N
            tokenNum[0] = gmmTokennum[e]
            if hp.g_coreType == AIC:
                gmmOp.Process(self.rankId_, H, N, mmInOffset, mmOutOffset, tokenNum, processNum, e)

    def HcclFinalize(self) -> None:
        if hp.g_coreType == AIV:  # every AIV core, whether it prepared or not
            self.hccl_.Finalize()


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
    """The kernel entry: the tilings' addresses, GET_TILING_DATA, the FP16 template, Init, Process."""
    hcclInitTiling, alltoAllvCcTiling = member_addresses(
        tilingGM, AlltoAllvGmmTilingData, "hcclInitTiling", "alltoAllvCcTiling"
    )
    tilingData = hp.GET_TILING_DATA_WITH_STRUCT(AlltoAllvGmmTilingData, tilingGM)
    contextGM = hp.GetHcclContext(0)
    op = AlltoAllvGmmCoarseGrained()
    op.Init(
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
        contextGM,
        tilingData,
        hcclInitTiling,
        alltoAllvCcTiling,
    )
    op.Process()


# ---------------------------------------------------------------- host
def send_counts(rank: int, n: int) -> list[int]:
    """Tokens ``rank`` routes to each global expert (1..3; none to the last expert)."""
    last = E_EP * n - 1
    return [0 if g == last else 1 + (rank + 2 * g) % 3 for g in range(E_EP * n)]


def recv_counts(rank: int, n: int) -> list[int]:
    """``recv_counts[i * E_ep + e]``: tokens that rank i sends to this rank's expert e."""
    return expert_recv_counts(send_counts, rank, n, E_EP)


def make_tiling(rank: int, n: int) -> AlltoAllvGmmTilingData:
    """Host side: GetShapeAndFormat, the counts (CheckAttrsShapeRelation), SetHcclTiling,
    RunFusionKernelTiling's core numbers and commOut."""
    tiling = AlltoAllvGmmTilingData()
    info = tiling.commonTilingInfo
    sends, recvs = send_counts(rank, n), recv_counts(rank, n)
    info.epWorldSize, info.E_ep = n, E_EP
    info.isGmmWeightTrans = info.isMmWeightTrans = False
    info.isSendCntsTensor = info.isRecvCntsTensor = False
    info.isPermuteOut, info.isNeedMM, info.isFp16 = True, True, True
    info.BSK, info.H1, info.N1, info.A = sum(sends), H1, N1, sum(recvs)
    info.BS, info.H2, info.N2 = BS, H2, N2
    for i, (s, r) in enumerate(zip(sends, recvs, strict=True)):
        tiling.aicpuTiling.sendCnt[i], tiling.aicpuTiling.recvCnt[i] = s, r

    # SetHcclTiling: opType 8 (HCCL_CMD_ALLTOALLV), reduce type 0, dst and src FP16
    hcclCcTilingConfig = Mc2CcTilingConfig(
        WORLD_GROUP, HCCL_CMD_ALLTOALLV, "AlltoAll=level0:fullmesh;level1:pairwise", 0, FP16, FP16
    )
    hcclCcTilingConfig.GetTiling(tiling.hcclInitTiling)
    hcclCcTilingConfig.GetTiling(tiling.alltoAllvCcTiling)

    info.aicCoreNum = AIC_CORE_NUM
    for cube in (tiling.gmmTilingData, tiling.mmTilingData):
        cube.usedCoreNum, cube.baseM, cube.baseN = AIC_CORE_NUM, BASE_M, BASE_N
    info.commOut = info.A * info.H1 * SIZEOF_HALF
    return tiling


def inputs(rank: int, n: int) -> tuple[np.ndarray, ...]:
    """gmm x (BSK, H1) sorted by global expert, gmm weight (E_ep, H1, N1), mm x, mm weight."""
    return gmm_inputs(rank, sum(send_counts(rank, n)), E_EP, H1, N1, BS, H2, N2)


def reference(rank: int, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """numpy: permuteOut, gmmY and mmY (:func:`_mc2.gmm_reference`)."""
    return gmm_reference(rank, n, send_counts, inputs, E_EP)


def main() -> list[str]:
    """One launch on every rank; permuteOut, gmmY and mmY against the numpy reference."""
    rank, n = hp.get_rank(), hp.get_world_size()
    tiling = make_tiling(rank, n)
    info = tiling.commonTilingInfo
    gmm_x, gmm_w, mm_x, mm_w = inputs(rank, n)
    gmm_y, mm_y, permute_out = zeros(info.A, N1), zeros(BS, N2), zeros(info.A, H1)
    workspace = zeros(info.commOut // SIZEOF_HALF)
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
        block_dim=info.aicCoreNum,
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
