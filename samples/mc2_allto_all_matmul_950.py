"""Port of ops-transformer's AlltoAllMatmul on Ascend 950 (arch35, non-quantised), call for call.

Source: mirror-cann/ops-transformer at 3a280bcc (2026-07-21), every file read at that commit,
under ``mc2/allto_all_matmul/``: the kernel entry ``op_kernel/arch35/allto_all_matmul_apt.cpp``
(``allto_all_matmul<QUANTMODE, X2TRANSPOSE, DTYPEBIAS, ISSMALLK, COMMTYPE>``; FP16/BF16 x1 and
x2 take the macro ``ALLTO_ALL_MATMUL_APT_FP_IMPL`` with ``Hccl<HCCL_SERVER_TYPE_CCU>`` for
``COMMTYPE == ALL2ALL_COMM_TYPE_CCU`` and ``Hccl<HCCL_SERVER_TYPE_AICPU>`` otherwise), the class
``AlltoAllMatmulArch35`` of ``op_kernel/allto_all_matmul_arch35.h``, the scheduler
``AlltoAllMatmulPipeLine`` of ``op_kernel/allto_all_matmul_pipeline.h``, the tiling struct
``AlltoAllMatmulTilingData`` (``op_kernel/arch35/allto_all_matmul_tiling_data.h``) and key
(``allto_all_matmul_tiling_key.h``), the shared templates ``HcclCommunicator``
(``mc2/common/op_kernel/mc2_templates/communication/communicator/hccl_communicator.h``),
``MC2AlltoAllPrimitives``, ``MC2VecTranspose`` and ``MC2FpMatmul``, and the host
``AllToAllFpMatmulTilingBase`` (``op_host/op_tiling/arch35/allto_all_fp_matmul_tiling_base.cpp``:
``DoOpTiling``, ``SetHcclTiling``, ``GetTilingKey``, ``PostTiling``, ``SetTilingInfo``) over
``AllToAllMatmulTilingBase`` (``op_host/op_tiling/allto_all_matmul_tiling_base.cpp``:
``SetUserWorkSpace``, ``TileCommAndCompute``, ``GetWorkspaceSize``) and
``MatmulAlltoAllTilingUtil::GetAndConvertCommMode`` with ``Mc2CcTilingConfigBuilder``
(``mc2/matmul_allto_all/op_host/op_tiling/common/matmul_allto_all_util_tiling.cpp``); described
in docs/notes/mc2-kernels.md, section 37.

What it computes: section 7's operation (samples/mc2_allto_all_matmul.py, the A3 path): rank j
gets row block j of every rank's x1, side by side along K (``all2all_out``), times its x2.
``AlltoAllMatmulArch35`` is ``AlltoAllMatmulKernelBase`` line for line (``Init``, ``Process``,
``ProcessTile``, ``ProcessTail``), and the communicator and the pipeline are the same templates
with the server type and the tiling struct as parameters, so all three are imported from that
sample with its inputs and reference (its mutation sites cover the ordering calls; they gave
this kernel the same verdicts on both 950 clients).

What runs unchanged: ``HcclCommunicator<false, serverType, MC2AlltoAllContext,
AlltoAllMatmulTilingData, MC2AlltoAllPrimitives, 0, 1>``: ``InitV2`` + ``SetCcTilingV2`` on every
AIC and AIV core, AIV block 0 the only core that Prepares (``AlltoAll<false>``, one per tile,
repeat 1), Commits them all at once, Waits one per task and Finalizes; per task on the AIV cores
``Wait`` (block 0), ``SyncAll<true>``, the transpose, the mode-0 flag 8 barrier and the mode-2
flag 9; on the AIC cores ``CrossCoreWaitFlag(9)`` and the tile's matmul.

Stand-ins: section 7's (FP16, no bias, x2 not transposed, the fixed 4 + 4 + 2 cut of the
formulaic tiling - ``AlltoAllMatmulFitBalanceTiling`` on 4 and 8 ranks -, one torch matmul per
tile and AIC core); the two ``Mc2MatMulV3TilingData`` carry only M, N, K. Two launches:
``comm_mode`` "ccu" with ``all2all_out``, "ai_cpu" without it (the transpose then writes into
the workspace after ``commLen``, ``permuteLen`` bytes).

Run: ``python samples/mc2_allto_all_matmul_950.py`` (4 emulated ranks),
``python -m hccl_py run -n 2 --backend gloo samples/mc2_allto_all_matmul_950.py``.
"""

from ctypes import Structure, c_uint64

from _common import WORLD_GROUP, compare, on_device, run_sample, zeros
from _mc2 import FP16, SIZEOF_HALF, uint32_fields
from _mc2_templates import (
    MC2FpMatmul,
    Mc2MatMulV3TilingData,
    MC2VecTranspose,
)
from mc2_allto_all_matmul import (
    AIC_CORE_NUM,
    ALIGN_ADDR_LEN,
    BLOCK_M,
    TAIL_CNT,
    TAIL_M,
    TILE_CNT,
    TILE_M,
    AlltoAllMatmulKernelBase,
    AlltoAllMatmulPipeLine,
    HcclCommunication,
    K,
    N,
    inputs,
    reference,
)

import hccl_py as hp
from hccl_py import (
    HCCL_CMD_ALLTOALL,
    HCCL_REDUCE_SUM,
    HCCL_SERVER_TYPE_AICPU,
    HCCL_SERVER_TYPE_CCU,
    Mc2CcTiling,
    Mc2CcTilingConfig,
    Mc2InitTiling,
    TilingData,
)

PLATFORM = "950"  # REGISTER_TILING_TEMPLATE_WITH_ARCH(..., NpuArch::DAV_3510)
ALL2ALL_COMM_TYPE_CCU, ALL2ALL_COMM_TYPE_AICPU = 0, 1  # the tiling key's COMMTYPE
A5_AICPU_TS_ENGINE, A5_CCU_ENGINE = 2, 6  # mc2_tiling_utils.h
ALL_TO_ALL = "AlltoAll=level0:fullmesh;level1:pairwise"  # Mc2CcTilingConfigBuilder::AlgConfigType


class AlltoAllMatmulTilingInfo(Structure):
    """AlltoAllMatmulTilingInfo (arch35), member for member."""

    _fields_ = [
        *uint32_fields("rankDim", "tileM", "tileCnt", "tailM", "tailCnt", "biasLen"),
        *uint32_fields("rankM", "rankN", "rankK", "aicCoreNum"),
        *[(name, c_uint64) for name in ("commLen", "permuteLen", "hcclDataType")],
        *[(name, c_uint64) for name in ("x1ScaleOptionalLen", "dynamicExtraSpace", "x1QuantDtype")],
    ]


class AlltoAllMatmulTilingData(TilingData):
    _fields_ = [
        ("mc2InitTiling", Mc2InitTiling),
        ("mc2CcTiling", Mc2CcTiling),
        ("alltoAllMatmulTilingInfo", AlltoAllMatmulTilingInfo),
        ("mc2MmV3TileTilingData", Mc2MatMulV3TilingData),
        ("mc2MmV3TailTilingData", Mc2MatMulV3TilingData),
    ]


def allto_all_matmul(COMMTYPE: int):
    """``allto_all_matmul<NON_QUANT_MODE, false, DTYPE_BIAS_SAME_WITH_X, false, COMMTYPE>``."""
    hcclServerType = HCCL_SERVER_TYPE_CCU
    if COMMTYPE != ALL2ALL_COMM_TYPE_CCU:
        hcclServerType = HCCL_SERVER_TYPE_AICPU

    def kernel(x1, x2, bias, x1_scale, x2_scale, comm_scale, x1_offset, x2_offset, y, all2all_out,
               workspaceGM, tilingGM):  # fmt: skip
        tilingData = hp.GET_TILING_DATA_WITH_STRUCT(AlltoAllMatmulTilingData, tilingGM)
        # ALLTO_ALL_MATMUL_APT_FP_IMPL(tilingData, pipe, hcclServerType)
        commImplName = HcclCommunication(tilingData, hcclServerType)  # HcclCommunicator
        transposeImplName = MC2VecTranspose()
        info = tilingData.alltoAllMatmulTilingInfo
        matmulImplName = MC2FpMatmul(info, info.rankK * info.rankDim)
        SchedulerImpl = AlltoAllMatmulPipeLine(commImplName, transposeImplName, matmulImplName)
        op = AlltoAllMatmulKernelBase(SchedulerImpl)  # AlltoAllMatmulArch35
        op.Init(x1, x2, bias, y, all2all_out, workspaceGM, tilingData)
        op.Process()

    return kernel


def make_tiling(rankDim: int, commMode: str, allToAllOutFlag: bool):
    """Host side: DoOpTiling (the cut, the matmul tilings, SetHcclTiling), GetWorkspaceSize
    (SetUserWorkSpace), GetTilingKey, PostTiling (SetTilingInfo, SetBlockDim)."""
    tiling = AlltoAllMatmulTilingData()
    info = tiling.alltoAllMatmulTilingInfo
    info.rankDim, info.rankM, info.rankN, info.rankK = rankDim, rankDim * BLOCK_M, N, K
    # TileCommAndCompute (the cut is fixed here) and DoMMTiling (only the shapes are kept)
    info.tileM, info.tileCnt, info.tailM, info.tailCnt = TILE_M, TILE_CNT, TAIL_M, TAIL_CNT
    for mm, rows in (
        (tiling.mc2MmV3TileTilingData, TILE_M),
        (tiling.mc2MmV3TailTilingData, TAIL_M),
    ):
        cube = mm.tCubeTiling
        cube.usedCoreNum, cube.M, cube.N, cube.Ka, cube.Kb = (
            AIC_CORE_NUM,
            rows,
            N,
            K * rankDim,
            K * rankDim,
        )
    # SetHcclTiling: Mc2CcTilingConfigBuilder::create(group, HCCL_CMD_ALLTOALL, ALL_TO_ALL)
    #   .withCommEngine(GetAndConvertCommMode).withReduceType(SUM, x1 type, x1 type).build()
    if commMode == "ai_cpu":
        hcclServerEngine = A5_AICPU_TS_ENGINE
    elif commMode == "ccu":
        hcclServerEngine = A5_CCU_ENGINE
    else:
        raise ValueError("The value of comm_mode must be 'ai_cpu' or 'ccu'")
    allToAllTilingConfig = Mc2CcTilingConfig(WORLD_GROUP, HCCL_CMD_ALLTOALL, ALL_TO_ALL)
    assert allToAllTilingConfig.SetReduceType(HCCL_REDUCE_SUM, FP16, FP16) == 0
    assert allToAllTilingConfig.SetCommEngine(hcclServerEngine) == 0
    allToAllTilingConfig.GetTiling(tiling.mc2InitTiling)
    allToAllTilingConfig.GetTiling(tiling.mc2CcTiling)
    # SetUserWorkSpace
    commBytes = info.rankM * info.rankK * SIZEOF_HALF
    info.commLen = -(-commBytes // ALIGN_ADDR_LEN) * ALIGN_ADDR_LEN
    info.permuteLen = 0 if allToAllOutFlag else info.commLen
    info.biasLen = 0
    info.hcclDataType = FP16
    info.aicCoreNum = AIC_CORE_NUM
    workspaceSize = info.commLen + info.permuteLen + info.biasLen  # + libApiWorkSpaceSize_
    commType = (
        ALL2ALL_COMM_TYPE_CCU if hcclServerEngine == A5_CCU_ENGINE else ALL2ALL_COMM_TYPE_AICPU
    )
    return tiling, workspaceSize, commType, info.aicCoreNum


def main() -> list[str]:
    """Two launches: comm_mode "ccu" with all2all_out, "ai_cpu" without it."""
    rank, n = hp.get_rank(), hp.get_world_size()
    x1, x2 = inputs(rank, n)
    gathered, y_ref = reference(rank, n)
    lines = []
    for commMode, allToAllOutFlag in (("ccu", True), ("ai_cpu", False)):
        tiling, workspaceSize, commType, blockDim = make_tiling(n, commMode, allToAllOutFlag)
        y = zeros(BLOCK_M, N)
        all2all_out = zeros(BLOCK_M, K * n) if allToAllOutFlag else None
        workspace = zeros(workspaceSize // SIZEOF_HALF)
        hp.launch(
            allto_all_matmul(commType),
            on_device(x1),
            on_device(x2),
            *(None,) * 6,
            y,
            all2all_out,
            workspace,
            tiling,
            block_dim=blockDim,
            kernel_type="mix_aic_1_2",
        )
        if all2all_out is None:  # the transpose's output: the workspace after commLen
            commLen = tiling.alltoAllMatmulTilingInfo.commLen // SIZEOF_HALF
            all2all_out = workspace[commLen : commLen + BLOCK_M * K * n].view(BLOCK_M, K * n)
        lines.append(compare(f"all2all_out-{commMode}", all2all_out, gathered))
        lines.append(compare(f"y-{commMode}", y, y_ref))
    return lines


if __name__ == "__main__":
    run_sample(main, platform=PLATFORM)
