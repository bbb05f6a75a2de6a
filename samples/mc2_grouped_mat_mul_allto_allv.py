"""Port of GroupedMatMulAlltoAllv (MC2 templates, Atlas A3 ``ai_cpu``), call for call.

Source: ops-transformer as of the snapshot mirror-cann/ops-transformer 3a280bcc (2026-07-21),
every file read at that commit: the kernel entry
``mc2/grouped_mat_mul_allto_allv/op_kernel/grouped_mat_mul_allto_allv.cpp``
(``grouped_mat_mul_allto_allv<TILINGKEY_COMPUTE_MATMUL = 1, TILINGKEY_GMM_WEIGHT_TRANS = 0,
TILINGKEY_SHARED_MM_WEIGHT_TRANS = 0, TILINGKEY_COMM_MODE = TILINGKEY_TPL_AICPU>``, 47-110), its
tiling struct ``QuantGmmA2avTilingData`` with ``GmmA2avWorkspaceInfo``
(``mc2/quant_grouped_mat_mul_allto_allv/op_kernel/quant_grouped_mat_mul_allto_allv_tiling.h``,
included by ``op_kernel/grouped_mat_mul_allto_allv_tiling.h``) and the templates it includes
from ``mc2/allto_allv_quant_grouped_mat_mul/op_kernel/mc2_templates/``: the scheduler
``GmmA2avScheduler`` (``scheduler/gmm_a2av_scheduler.h``: ``Process``, ``End``), the
communication op ``HcclA2avOp<half, commBeforeComputeFlag = false, TILINGKEY_TPL_AICPU>``
(``communication/hccl_a2av_op.h``: ``Init``, ``LaunchCommData``, ``Wait``, ``End``) with
``A2AV_AIV_ONLY`` (``communication/a2av_comm_guard.h``) and ``CalcA2avCommAfterParams``
(``communication/a2av_comm_params.h``), the compute op ``QuantGroupedMatmul`` (routed experts
``isLocal = false, isA2avGmm = false``: the ``cGroupOffsetTable`` branch; the shared expert
``isLocal = true``) over ``Mc2GmmASWKernel`` (``mc2/3rd/grouped_matmul/op_kernel/``,
``QuantASWBlockSch::UpdateGroupOffset``), ``common/a2av_common_tiling.h``; the host tiling
``GroupedMatmulAllToAllvTiling`` (``op_host/op_tiling/grouped_mat_mul_allto_allv_tiling.cpp``,
registered for A3 by ``arch22/grouped_mat_mul_allto_allv_tiling_a3.cpp``) on
``QuantGroupedMatmulAllToAllvTilingCommon`` (``mc2/quant_grouped_mat_mul_allto_allv/op_host/
op_tiling/quant_grouped_mat_mul_allto_allv_tiling_common.cpp``: ``CheckAndSetSendRecvCountsAttr``,
``SetTilingCommonInfo``, ``SetGmmA2avWorkspaceInfo``, ``DoQuantGMMTiling``, ``SetHcclTiling``,
``PostTiling``); described in docs/notes/mc2-kernels.md section 11.

The reverse of AlltoAllvGroupedMatMul: each rank holds the tokens its local experts received
(``gmmX``, expert-major, then by source rank), multiplies each expert's rows by its weight and
sends every row back to the rank it came from, which stacks them by expert owner and expert
(``y``, the token order of the forward dispatch). Which path: A3 admits ``comm_mode =
"ai_cpu"`` alone (``GetAndConvertCommMode``), so ``Hccl<HCCL_SERVER_TYPE_AICPU>``.

What runs unchanged: ``InitV2(GetHcclContext<0>(), &tiling.hcclA2avTiling.hcclInitTiling)``,
``SetCcTilingV2(offsetof(QuantGmmA2avTilingData, hcclA2avTiling) + offsetof(HcclA2avTilingInfo,
a2avCcTiling))`` (unchecked) and ``GetRankDim`` on every AIC and AIV core; the experts go in
batches of ``expertNum = CeilDiv(e, 4)`` (2 for 5 experts: batches of 2, 2 and 1); per batch
the AIC cores run its grouped matmul into the workspace (rank-major inside the batch through
``cGroupOffsetTable``, a batch without tokens skipped), meet at ``CrossCoreSetFlag<0,
PIPE_FIX>(8)`` + ``CrossCoreWaitFlag(8)`` and release their AIV cores with ``CrossCoreSetFlag<2,
PIPE_FIX>(9)``; every AIV core ``CrossCoreWaitFlag(9)``s and AIV block 0 alone Prepares the
batch's ``AlltoAllV<true>`` from the workspace into ``y`` (counts and displacements from
``CalcA2avCommAfterParams`` in ``uint64_t[128]`` arrays, the handle kept at the batch's first
expert); then the AIC cores run the shared-expert matmul, AIV block 0 ``Wait``s every batch,
and ``End``: ``SyncAll<false>`` on every core, ``Finalize`` on every AIV core.

Stand-ins: FP16 only, weights not transposed; ``Mc2GmmASWKernel`` is a torch call per baseM x
baseN block dealt round robin over ``usedCoreNum`` AIC cores, its group list and offset tables
Python lists rather than workspace writes (samples/_mc2_templates.py, shared with the 2026
AlltoAllvGroupedMatMul port); ``GMMQuantTilingData``'s ``TCubeTiling`` cut after ``baseK``,
the adapter's tiling replaced by baseM = baseN = 16; a system workspace and
``libApiWorkSpaceSize_`` of 0; the host's rank-size check (A3 admits 8, 16, 32, 64, 128) and
its ``BSK = K * BS`` check are not applied: the sample runs 2 or 4 ranks; the platform is 2 AIC
and 4 AIV cores.

Run: ``python samples/mc2_grouped_mat_mul_allto_allv.py`` (4 emulated ranks),
``python -m hccl_py run -n 2 --backend gloo samples/mc2_grouped_mat_mul_allto_allv.py``.
"""

import numpy as np
from _a2av_templates import (
    HcclA2avOpBase,
    QuantGmmA2avTilingData,
    SetGmmA2avWorkspaceInfo,
)
from _common import WORLD_GROUP, compare, on_device, run_sample, zeros
from _mc2 import FP16, SIZEOF_HALF, expert_recv_counts, gmm_inputs
from _mc2_templates import (
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
    PIPE_FIX,
    Mc2CcTilingConfig,
    offsetof,
)

PLATFORM = "A3"  # the ai_cpu communication mode; the CCU one is DAV_3510 only
E, H1, N1 = 5, 16, 32  # experts per rank, gmm x columns, gmm weight columns
BS, H2, N2 = 8, 16, 32  # the shared expert: mm x (BS, H2) @ mm weight (H2, N2)
BASE_M = BASE_N = 16  # the stand-in for the grouped matmul tiling's baseM, baseN
AIC_NUM, AIV_NUM = 2, 4  # GetCoreNumAic / GetCoreNumAiv of the sample's platform
ENGINE_AICPU = 2  # Mc2Comm::ENGINE_AICPU (mc2/common/utils/mc2_comm_utils.h)
TARGET_COMM_ROUNDS = 4  # SetTilingCommonInfo: at most 4 batches
#: The tiling key's TILINGKEY_COMPUTE_MATMUL (hasSharedMm): the scheduler's IsNeedMM.
TILINGKEY_COMPUTE_MATMUL = True


# ---------------------------------------------------------------- hccl_a2av_op.h
class HcclA2avOp(HcclA2avOpBase):
    """HcclA2avOp<half, commBeforeComputeFlag = false, TILINGKEY_TPL_AICPU>."""

    SERVER, COMM_BEFORE = HCCL_SERVER_TYPE_AICPU, False
    DATA_TYPE = FP16  # IsSameType<half>

    def Wait(self, startExpertIdx: int) -> None:
        if self.aiv_only():
            return
        self.hccl_.Wait(self.alltoAllvHandleId_[startExpertIdx])

    def End(self) -> None:
        hp.SyncAll[False]()
        if hp.g_coreType == AIC:
            return
        self.hccl_.Finalize()


# ---------------------------------------------------------------- gmm_a2av_scheduler.h
class GmmA2avScheduler:
    """GmmA2avScheduler<HcclA2avOp, QuantGroupedMatmul (gmm), QuantGroupedMatmul (shared mm),
    IsNeedMM>: per batch the grouped matmul, then its AlltoAllV; the shared expert; the Waits."""

    def __init__(self, hcclOp, computeOp, shareComputeOp, taskTilingInfo, IsNeedMM) -> None:
        self.hcclOp_, self.computeOp_ = hcclOp, computeOp
        self.shareComputeOp_, self.taskTilingInfo_ = shareComputeOp, taskTilingInfo
        self.IsNeedMM = IsNeedMM

    def Process(self) -> None:
        e, expertNum = self.taskTilingInfo_.e, self.taskTilingInfo_.expertNum
        for start in range(0, e, expertNum):
            actualExpertNum = e - start if start + expertNum > e else expertNum
            if hp.g_coreType == AIC:
                self.computeOp_.Process(start, actualExpertNum)
                hp.CrossCoreSetFlag[0, PIPE_FIX](8)  # every AIC core multiplied this batch
                hp.CrossCoreWaitFlag(8)
                hp.CrossCoreSetFlag[2, PIPE_FIX](9)  # release this AI core's two AIV cores
            if hp.g_coreType == AIV:
                hp.CrossCoreWaitFlag(9)
                self.hcclOp_.LaunchCommData(start, actualExpertNum)
        if self.IsNeedMM:
            self.shareComputeOp_.Process(0, 1)
        for start in range(0, e, expertNum):
            self.hcclOp_.Wait(start)
        self.End()

    def End(self) -> None:
        self.hcclOp_.End()


def grouped_mat_mul_allto_allv(
    gmmxGM,
    gmmweightGM,
    sendCountsTensorOptionalGM,
    recvCountsTensorOptionalGM,
    mmxOptionalGM,
    mmweightOptionalGM,
    yGM,
    mmyOptionalGM,
    workspaceGM,
    tilingGM,
):
    """The kernel entry: the workspace's three parts, the three ops' Init, the scheduler."""
    if workspaceGM == hp.NULL:
        return
    userWorkspace = workspaceGM  # GetUserWorkspace: a system workspace of 0 bytes here
    tilingData = hp.GET_TILING_DATA_WITH_STRUCT(QuantGmmA2avTilingData, tilingGM)
    hcclInitTiling = tilingData.hcclA2avTiling.hcclInitTiling  # &tilingData_->...hcclInitTiling
    hcclCcTilingOffset = offsetof(QuantGmmA2avTilingData, "hcclA2avTiling") + offsetof(
        HcclA2avTilingInfo, "a2avCcTiling"
    )
    # the workspace: the gmm output (the send buffer), then the two compute ops' group lists
    # and offset tables (wsGmmComputeWorkspaceSize, wsSharedGmmComputeWorkspaceSize), which
    # the QuantGroupedMatmul stand-in keeps in Python
    gmmOutputGM = userWorkspace + 0

    sendBufferAddr = gmmOutputGM
    hcclOp = HcclA2avOp()
    info = tilingData.taskTilingInfo
    hcclOp.Init(hcclInitTiling, hcclCcTilingOffset, info, sendBufferAddr, yGM, info.aivCoreNum)
    computeOp = QuantGroupedMatmul(isLocal=False, isA2avGmm=False)
    computeOp.Init(gmmxGM, gmmweightGM, gmmOutputGM, tilingData, tilingData.gmmBaseTiling)
    shareComputeOp = QuantGroupedMatmul(isLocal=True, isA2avGmm=False)
    shareComputeOp.Init(
        mmxOptionalGM, mmweightOptionalGM, mmyOptionalGM, tilingData, tilingData.sharedGmmTiling
    )
    gmmA2avScheduler = GmmA2avScheduler(
        hcclOp, computeOp, shareComputeOp, info, TILINGKEY_COMPUTE_MATMUL
    )
    gmmA2avScheduler.Process()


# ---------------------------------------------------------------- host
def dispatch_counts(rank: int, n: int) -> list[int]:
    """The forward dispatch's rows from ``rank`` to each global expert ``i * E + e``: 0..3, none
    to the last one (so the last rank's last batch has no tokens)."""
    last = E * n - 1
    return [0 if g == last else (rank + 3 * g) % 4 for g in range(E * n)]


def send_counts(rank: int, n: int) -> list[int]:
    """``sendCounts[i * E + e]``: rows of this rank's expert e that go back to rank i."""
    return expert_recv_counts(dispatch_counts, rank, n, E)


def recv_counts(rank: int, n: int) -> list[int]:
    """``recvCounts[i * E + e]``: rows that rank i's expert e returns to this rank."""
    return dispatch_counts(rank, n)


def make_tiling(rank: int, n: int) -> tuple[QuantGmmA2avTilingData, int, int]:
    """Host side: the counts, SetTilingCommonInfo, DoQuantGMMTiling, SetHcclTiling,
    SetGmmA2avWorkspaceInfo and PostTiling. Returns the tiling, block dim and workspace size."""
    tiling = QuantGmmA2avTilingData()
    task = tiling.taskTilingInfo
    sends, recvs = send_counts(rank, n), recv_counts(rank, n)
    a, bsk = sum(sends), sum(recvs)  # gmmX rows, y rows (the checks of the attrs' sums)
    for i, (s, r) in enumerate(zip(sends, recvs, strict=True)):
        task.sendCnt[i], task.recvCnt[i] = s, r

    # SetTilingCommonInfo (aicCoreNum is not set there)
    task.BSK, task.BS, task.H1, task.H2, task.A, task.N1, task.N2 = bsk, BS, H1, H2, a, N1, N2
    task.epWorldSize, task.e, task.aivCoreNum = n, E, AIV_NUM
    expertNum = CeilDiv(E, TARGET_COMM_ROUNDS) or 1
    task.expertNum = task.mainLoopExpertNum = expertNum
    task.tailLoopExpertNum = E % expertNum
    task.totalLoopCount = CeilDiv(E, expertNum)

    # DoQuantGMMTiling (the adapter's tiling replaced by fixed base blocks)
    mMaxSize = max(sum(sends[i * E + x] for i in range(n)) for x in range(E))
    gmm = tiling.gmmBaseTiling
    gmm.gmmQuantParams.groupNum = expertNum * n
    cube = gmm.mmTilingData
    cube.usedCoreNum, cube.M, cube.N, cube.Ka = AIC_NUM, mMaxSize, N1, H1
    cube.baseM, cube.baseN = BASE_M, BASE_N
    shared = tiling.sharedGmmTiling
    shared.gmmQuantParams.groupNum = 1
    cube = shared.mmTilingData
    cube.usedCoreNum, cube.M, cube.N, cube.Ka = AIC_NUM, BS, N2, H2
    cube.baseM, cube.baseN = BASE_M, BASE_N

    # SetHcclTiling: alltoAllvCmd 8 (HCCL_CMD_ALLTOALLV), reduce type 0, y's type both ways,
    # the AICPU engine (A3 is always COMM_MODE_AICPU)
    hcclCcTilingConfig = Mc2CcTilingConfig(
        WORLD_GROUP, HCCL_CMD_ALLTOALLV, "AlltoAll=level0:fullmesh;level1:pairwise", 0, FP16, FP16
    )
    hcclCcTilingConfig.SetCommEngine(ENGINE_AICPU)
    if hcclCcTilingConfig.GetTiling(tiling.hcclA2avTiling.hcclInitTiling) != 0:
        raise RuntimeError("mc2CcTilingConfig GetTiling hcclInitTiling failed")
    if hcclCcTilingConfig.GetTiling(tiling.hcclA2avTiling.a2avCcTiling) != 0:
        raise RuntimeError("mc2CcTilingConfig GetTiling alltoAllvCcTiling failed")

    # SetGmmA2avWorkspaceInfo: the gmm output (the send buffer), the two compute workspaces
    workSpaceSize = SetGmmA2avWorkspaceInfo(tiling, SIZEOF_HALF)

    return tiling, AIC_NUM, workSpaceSize  # PostTiling: SetBlockDim(aicCoreNum)


def inputs(rank: int, n: int) -> tuple[np.ndarray, ...]:
    """gmm x (A, H1) by local expert then source rank, gmm weight (E, H1, N1), mm x, mm weight."""
    return gmm_inputs(rank, sum(send_counts(rank, n)), E, H1, N1, BS, H2, N2)


def reference(rank: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """numpy: y (for each expert owner i, each of its experts e: the rows this rank sent to
    (i, e) in the dispatch, multiplied by that expert's weight) and mmY."""
    blocks = []
    for i in range(n):
        x, w = inputs(i, n)[:2]
        counts = send_counts(i, n)  # rank i's gmm x: expert e, then source rank r
        for e in range(E):
            start = sum(counts[r * E + xe] for xe in range(e) for r in range(n))
            start += sum(counts[r * E + e] for r in range(rank))
            rows = x[start : start + counts[rank * E + e]].astype(np.float32)
            blocks.append((rows @ w[e].astype(np.float32)).astype(np.float16))
    _, _, mm_x, mm_w = inputs(rank, n)
    mm_y = (mm_x.astype(np.float32) @ mm_w.astype(np.float32)).astype(np.float16)
    return np.concatenate(blocks), mm_y


def main() -> list[str]:
    """One launch on every rank; y and mmY against the numpy reference."""
    rank, n = hp.get_rank(), hp.get_world_size()
    tiling, blockDim, workspaceSize = make_tiling(rank, n)
    gmm_x, gmm_w, mm_x, mm_w = inputs(rank, n)
    y, mm_y = zeros(tiling.taskTilingInfo.BSK, N1), zeros(BS, N2)
    workspace = zeros(workspaceSize // SIZEOF_HALF)
    hp.launch(
        grouped_mat_mul_allto_allv,
        on_device(gmm_x),
        on_device(gmm_w),
        None,
        None,
        on_device(mm_x),
        on_device(mm_w),
        y,
        mm_y,
        workspace,
        tiling,
        block_dim=blockDim,
        kernel_type="mix_aic_1_2",
    )
    y_ref, mm_y_ref = reference(rank, n)
    return [compare("y", y, y_ref), compare("mmY", mm_y, mm_y_ref)]


if __name__ == "__main__":
    run_sample(main, platform=PLATFORM)
