"""Port of ops-transformer's MatmulReduceScatterV2 on Ascend 950 (arch35, FP16), call for call.

Source: mirror-cann/ops-transformer at 3a280bcc (2026-07-21), ``mc2/matmul_reduce_scatter_v2/``,
every file read at that commit: the kernel entry ``op_kernel/arch35/matmul_reduce_scatter_v2_apt.cpp``
(``matmul_reduce_scatter_v2``, its FP16/BF16 branch and ``INVOKE_MMREDUCESCATTER_FP16_BF16_OP_IMPL``),
the class ``MatmulReduceScatterFP16BF16`` of ``op_kernel/arch35/matmul_reduce_scatter_fp16_bf16.h``
(``Init``, ``Process``, ``InnerProcess``, ``Compute``, ``MatMulV3Compute``, ``PostProcess``),
``op_kernel/common_def.h`` (``HcclTypeSelector``, ``MAX_HANDLE``), the tiling struct
``MatmulReduceScatterV2TilingData`` (``op_kernel/matmul_reduce_scatter_v2_c_tiling.h``, with
``RCSTiling`` of ``mc2/common/op_kernel/mc2_tiling_struct.h`` and ``Mc2MatMulV3TilingData`` of
``mc2/3rd/mat_mul_v3/op_kernel/arch35/mat_mul_tiling_data.h``), the tiling key
(``op_kernel/matmul_reduce_scatter_v2_apt_tiling_key.h``), the matmul
``MC2MatmulAswKernelDerive`` / ``MC2MatmulAswBlockDerive`` (``mc2/common/op_kernel/
mc2_mat_mul_asw_kernel.h``, ``mc2_mat_mul_asw_block.h``), and the host
``MatmulReduceScatterV2Tiling`` (``op_host/op_tiling/arch35/matmul_reduce_scatter_v2_tiling.cpp``:
``SetMc2Hcomm``, ``DoOpTiling``, ``PostTiling``) on ``MatmulReduceScatterTilingBase``
(``op_host/op_tiling/matmul_reduce_scatter_tiling_base.cpp``: ``GetPlatformInfo``,
``SetRcsTilingData``, ``SetStorageAWorkSpaceSize``, ``GetWorkspaceSize``, ``GetTilingKey``) and
``IsUseA2APath`` (``mc2/common/op_host/op_tiling/mc2_tiling_utils.h``); described in
docs/notes/mc2-kernels.md, section 12.

What it computes: rank r holds x1 ``(M, K)`` and x2 ``(K, N)``; rank j gets the sum over ranks
of row block j (``M / rankDim`` rows) of x1 @ x2: y ``(M / rankDim, N)``.

Which path: the host takes this kernel (``TPL_CCU_REDUCESUM``: the client's ReduceScatter) when
``comm_mode`` is "ai_cpu" (``Hccl<HCCL_SERVER_TYPE_AICPU>``, any rank count) or "ccu" on 2, 16,
32 or 64 ranks (``Hccl<HCCL_SERVER_TYPE_CCU>``); "ccu" on 4 or 8 ranks takes
``MatmulA2AVecReduceFP16BF16`` (an AlltoAll and a vector reduce), ported in
samples/mc2_matmul_a2a_vec_reduce_950.py on this file's matmul, tiling struct and host. The
sample asks for "ccu" and falls back to "ai_cpu" where the CCU would take the other kernel: 2
ranks (gloo, torchrun, the mutation suite) run the CCU client, 4 emulated ranks the 950 AI CPU
one.

What runs unchanged: the selected ``Hccl`` type on every core (``KERNEL_TYPE_MIX_AIC_1_2``),
``InitV2(context, &mc2InitTiling)`` + ``SetCcTilingV2(offsetof(..., mc2CcTiling))`` on every AIC
and AIV core and ``context->rankId``; the AIV cores return from ``Compute``; AIC cores at or
beyond the matmul's ``usedCoreNum`` only join ``CrossCoreSetFlag<0, PIPE_FIX>(3)`` +
``CrossCoreWaitFlag(3)`` once per tile; the others, per tile: the tile's matmul (``tileM`` rows
of every rank block) into the workspace, the flag 3 barrier, then **every** such AIC core calls
``ReduceScatter<true>(cWork, recvBuffer, tileM * N, dataType, SUM, strideCount = M / rankDim *
N, repeat 1)`` (the server type's working core, block 0, is the one that sends), tiles then the
tail, handles ``0 .. tileCnt + tailCnt - 1``; ``PostProcess``: AIC block 0 Waits every handle and
Finalizes, no barrier anywhere else. Host: ``Mc2CcTilingConfig(group, HCCL_CMD_REDUCE_SCATTER,
"ReduceScatter=level0:fullmesh", SUM, FP16, FP16)``, ``SetCommEngine(2)`` (AI CPU) or ``(6)``
(CCU), ``GetTiling`` x2; workspace ``align512(M * N * 2)``; ``blockDim = aicCoreNum``.

Stand-ins: FP16, no bias, x2 not transposed; the M cut (two tiles of 4 rows and a tail of 2 per
rank block) and the matmul tilings (base blocks 2 x 16, ``usedCoreNum`` 2 of 3 AIC cores, no
last-round split) are fixed rather than computed by the formulaic and MatMulV3 tilings, whose
``TCubeTiling`` is cut after ``baseK``; each base block is one torch matmul, dealt to the AIC
cores in the ASW window order of ``MC2MatmulAswBlockDerive``; no ``libApiWorkSpaceSize_``.

Run: ``python samples/mc2_matmul_reduce_scatter_v2_950.py`` (4 emulated ranks),
``python -m hccl_py run -n 2 --backend gloo samples/mc2_matmul_reduce_scatter_v2_950.py``.
"""

from ctypes import c_uint32

import numpy as np
from _common import WORLD_GROUP, compare, on_device, random_ints, run_sample, zeros
from _mc2 import FP16, SIZEOF_HALF, matmul
from _mc2_templates import AswBasicIndex, Mc2MatMulV3TilingData, RCSTiling

import hccl_py as hp
from hccl_py import (
    AIC,
    AIV,
    HCCL_CMD_ALLTOALL,
    HCCL_CMD_REDUCE_SCATTER,
    HCCL_REDUCE_SUM,
    HCCL_SERVER_TYPE_AICPU,
    HCCL_SERVER_TYPE_CCU,
    PIPE_FIX,
    Hccl,
    Mc2CcTiling,
    Mc2CcTilingConfig,
    Mc2InitTiling,
    TilingData,
    offsetof,
)

PLATFORM = "950"  # IsCapable: NpuArch::DAV_3510 with FP16 or BF16 x1
BLOCK_M, K, N = 10, 256, 32  # rows of one rank block (M / rankDim); K >= 256 (CheckAttrInfoValid)
TILE_M, TILE_CNT, TAIL_M, TAIL_CNT = 4, 2, 2, 1  # the host's cut of a rank block
AIC_CORE_NUM, USED_CORE_NUM = 3, 2  # blockDim; the matmul tilings' usedCoreNum (one AIC idle)
BASE_M, BASE_N = 2, 16
MC2_DEBUG_ONLY_CUBE = 1  # common_def.h; the host's debugMode is 0
TPL_CCU_REDUCESUM, TPL_CCU_ALL2ALL_VEC_REDUCE = 0, 1  # TPL_COMMALG
TPL_CCU_COMM_MODE, TPL_AICPU_COMM_MODE = 0, 1  # TPL_COMM_MODE
A5_AICPU_TS_ENGINE, A5_CCU_ENGINE = 2, 6  # mc2_tiling_utils.h
STANDARD_CARD_4P, EIGHT_P_8P = 4, 8


class MatmulReduceScatterV2TilingData(TilingData):
    _fields_ = [
        ("mc2InitTiling", Mc2InitTiling),
        ("mc2CcTiling", Mc2CcTiling),
        ("param", RCSTiling),
        ("dataType", c_uint32),
        ("debugMode", c_uint32),
        ("mC2Mmv3TileTilingData", Mc2MatMulV3TilingData),
        ("mC2Mmv3TailTilingData", Mc2MatMulV3TilingData),
    ]


def HcclTypeSelector(commMode: int):
    """common_def.h: CCU for every mode but AICPU_COMM_MODE."""
    return Hccl[HCCL_SERVER_TYPE_AICPU if commMode == TPL_AICPU_COMM_MODE else HCCL_SERVER_TYPE_CCU]


# ---------------------------------------------------------------- mc2_mat_mul_asw_{kernel,block}.h
class MC2MatmulAswKernelDerive(AswBasicIndex):
    """MC2MatmulAswKernelDerive with MC2MatmulAswBlockDerive (isGather false): the tile's base
    blocks, ``tileM`` rows of every rank block, dealt to the AIC cores in the ASW window order;
    one torch matmul per block stands in for the cube's Iterate/GetTensorC."""

    SLIDING_WINDOW_LEN = 4

    def Init(self, aGM, bGM, cGM, tiling: Mc2MatMulV3TilingData, cfg: RCSTiling, isTail: bool):
        self.cube, self.cfg = tiling.tCubeTiling, cfg
        self.rankM_, self.rankN_, self.rankK_ = cfg.rankM // cfg.rankDim, cfg.rankN, cfg.rankK
        self.a = hp.gm_tensor(aGM, FP16, cfg.rankM * cfg.rankK).view(cfg.rankM, cfg.rankK)
        self.b = hp.gm_tensor(bGM, FP16, cfg.rankK * cfg.rankN).view(cfg.rankK, cfg.rankN)
        self.c = hp.gm_tensor(cGM, FP16, cfg.rankM * cfg.rankN).view(cfg.rankM, cfg.rankN)
        headSliceM = (self.rankM_ - cfg.tailM * cfg.tailCnt) // cfg.tileCnt
        self.headSliceM_, self.curSliceM_ = headSliceM, cfg.tailM if isTail else headSliceM
        self.mSliceCnt_ = -(-self.curSliceM_ // self.cube.baseM)
        self.nCnt = -(-self.cube.N // self.cube.baseN)
        self.mCnt = self.mSliceCnt_ * cfg.rankDim
        self.mBaseTail = self.curSliceM_ - (self.mSliceCnt_ - 1) * self.cube.baseM
        self.nBaseTail = self.cube.N - (self.nCnt - 1) * self.cube.baseN
        self.mainWindow = min(self.SLIDING_WINDOW_LEN, self.mCnt)
        self.mainRow = self.mCnt // self.mainWindow - 1
        self.tailWindow = self.mCnt - self.mainRow * self.mainWindow
        self.preCoreNum_ = 0

    def UpdateSlice(self, idx: int, isTail: bool) -> None:
        """UpdateOffset: the first row of this tile in every rank block."""
        cfg = self.cfg
        offset = (
            cfg.tileCnt * self.headSliceM_ + idx * cfg.tailM if isTail else idx * self.headSliceM_
        )
        self.offsetsM_ = [i * self.rankM_ + offset for i in range(cfg.rankDim)]

    def Process(self, isLast: bool) -> None:
        if hp.g_coreType == AIV:
            return
        usedCoreNum, blockIdx = self.cube.usedCoreNum, hp.GetBlockIdx()
        totalCnt = self.mCnt * self.nCnt + self.preCoreNum_  # Update
        for j in range(-(-totalCnt // usedCoreNum)):
            if j == 0 and blockIdx < self.preCoreNum_:
                continue
            index = blockIdx + j * usedCoreNum - self.preCoreNum_
            if index >= totalCnt - self.preCoreNum_:
                continue
            mIdx, nIdx = self.UpdateBasicIndex(index)
            rest = mIdx % self.mSliceCnt_  # UpdateBlockParams (mTailCnt = nTailCnt = 1: no split)
            rows = self.cube.baseM if rest != self.mSliceCnt_ - 1 else self.mBaseTail
            cols = self.cube.baseN if nIdx != self.nCnt - 1 else self.nBaseTail
            m0 = self.offsetsM_[mIdx // self.mSliceCnt_] + rest * self.cube.baseM  # CalcGMOffset
            n0 = nIdx * self.cube.baseN
            matmul(
                self.c[m0 : m0 + rows, n0 : n0 + cols],
                self.a[m0 : m0 + rows],
                self.b[:, n0 : n0 + cols],
            )
        self.preCoreNum_ = totalCnt % usedCoreNum

    def End(self) -> None:
        pass


# ---------------------------------------------------------------- matmul_reduce_scatter_fp16_bf16.h
class MatmulReduceScatterFP16BF16:
    """MatmulReduceScatterFP16BF16<AType, BType, BiasType, CType, TPL_COMM_MODE>."""

    MAX_HANDLE = 64

    def __init__(self, TPL_COMM_MODE: int) -> None:
        self.hccl_ = HcclTypeSelector(TPL_COMM_MODE)()
        self.handles_ = [-1] * self.MAX_HANDLE

    def Init(self, aGM, bGM, biasGM, cGM, contextGM, workspaceGM, tilingData) -> None:
        self.tilingData_ = tilingData
        hcclCcTilingOffset = offsetof(MatmulReduceScatterV2TilingData, "mc2CcTiling")
        self.hccl_.InitV2(contextGM, tilingData.mc2InitTiling)
        self.hccl_.SetCcTilingV2(hcclCcTilingOffset)
        self.context_ = contextGM
        self.dataType_ = tilingData.dataType
        self.debugMode_ = tilingData.debugMode
        self.aGM_, self.bGM_, self.cGM_, self.biasGM_ = aGM, bGM, cGM, biasGM
        self.rankId_ = self.context_.rankId
        self.gmToFloat_ = workspaceGM  # the whole workspace: x1 @ x2 before the ReduceScatter

    def PostProcess(self) -> None:
        cfg = self.tilingData_.param
        if hp.GetBlockIdx() == 0 and hp.g_coreType == AIC:
            for i in range(cfg.tileCnt + cfg.tailCnt):
                self.hccl_.Wait(self.handles_[i])
            self.hccl_.Finalize()

    def Process(self) -> None:
        self.InnerProcess()
        self.PostProcess()

    def InnerProcess(self) -> None:
        tiling = self.tilingData_.mC2Mmv3TileTilingData.tCubeTiling
        cfg = self.tilingData_.param
        tileData = self.tilingData_.mC2Mmv3TileTilingData
        self.Compute(self.cGM_, tileData, cfg.tileCnt, self.gmToFloat_, not cfg.tailM, False)
        if cfg.tailM:
            tileSize = tiling.M * tiling.N // cfg.rankDim
            tileOffset = tileSize * cfg.tileCnt * SIZEOF_HALF
            cGMTail, gmToFloatTail = self.cGM_ + tileOffset, self.gmToFloat_ + tileOffset
            tailData = self.tilingData_.mC2Mmv3TailTilingData
            self.Compute(cGMTail, tailData, cfg.tailCnt, gmToFloatTail, True, True)

    def Compute(self, cGM, tiling, count: int, gmToFloat, isLast: bool, isTail: bool) -> None:
        if hp.g_coreType == AIV:
            return
        if hp.GetBlockIdx() >= tiling.tCubeTiling.usedCoreNum:
            for _ in range(count):
                hp.CrossCoreSetFlag[0, PIPE_FIX](3)
                hp.CrossCoreWaitFlag(3)
            return
        self.MatMulV3Compute(cGM, tiling, count, gmToFloat, isLast, isTail)

    def MatMulV3Compute(self, cGM, tiling, count: int, gmToFloat, isLast, isTail) -> None:
        cfg = self.tilingData_.param
        cfg.rankID = self.rankId_
        mmv3 = MC2MatmulAswKernelDerive()
        onlyCube = self.debugMode_ == MC2_DEBUG_ONLY_CUBE
        tempGM = cGM if onlyCube else self.gmToFloat_
        mmv3.Init(self.aGM_, self.bGM_, tempGM, tiling, cfg, isTail)
        sliceM = tiling.tCubeTiling.M // cfg.rankDim
        recvCount = sliceM * tiling.tCubeTiling.N
        cOffset = recvCount * SIZEOF_HALF
        cWork = cGM if onlyCube else gmToFloat
        recvBuffer = gmToFloat if onlyCube else cGM
        shift = cfg.tileCnt if isTail else 0
        stride = (cfg.rankM // cfg.rankDim) * cfg.rankN
        repeat = 1
        for i in range(count):
            mmv3.UpdateSlice(i, isTail)
            mmv3.Process(isLast and i == count - 1)
            hp.CrossCoreSetFlag[0, PIPE_FIX](3)  # every AIC core wrote its blocks of this tile
            hp.CrossCoreWaitFlag(3)
            recvCount = 1 if onlyCube else recvCount
            self.handles_[i + shift] = self.hccl_.ReduceScatter[True](
                cWork, recvBuffer, recvCount, self.dataType_, HCCL_REDUCE_SUM, stride, repeat
            )
            cWork += cOffset
            recvBuffer += cOffset
        mmv3.End()


def matmul_reduce_scatter_v2(
    aGM, bGM, biasGM, x1ScaleGM, x2ScaleGM, quantScaleGM, cGM, amaxOutGM, workspaceGM, tilingGM,
    TPL_COMMALG, TPL_COMM_MODE,
):  # fmt: skip
    """The kernel entry, FP16 x1 and x2; the last two arguments are its template parameters
    (the tiling key's TPL_COMMALG and TPL_COMM_MODE)."""
    context = hp.GetHcclContext(0)
    tilingData = hp.GET_TILING_DATA_WITH_STRUCT(MatmulReduceScatterV2TilingData, tilingGM)
    if TPL_COMMALG == TPL_CCU_ALL2ALL_VEC_REDUCE:
        # the A2A path's entry, which takes both kernels, is mc2_matmul_a2a_vec_reduce_950's
        raise NotImplementedError("MatmulA2AVecReduceFP16BF16: mc2_matmul_a2a_vec_reduce_950.py")
    op = MatmulReduceScatterFP16BF16(TPL_COMM_MODE)
    op.Init(aGM, bGM, biasGM, cGM, context, workspaceGM, tilingData)
    op.Process()


def make_tiling(
    rankDim: int, commMode: str, n: int = N, baseN: int = BASE_N, usedCoreNum: int = USED_CORE_NUM
):
    """Host side: GetPlatformInfo, DoOpTiling (SetMc2Hcomm, SetRcsTilingData, the cut, the
    matmul tilings, SetTilingResult), GetWorkspaceSize, GetTilingKey and PostTiling; ``n``
    columns of x2, and the stand-in matmul tilings' ``baseN`` and ``usedCoreNum``."""
    tiling = MatmulReduceScatterV2TilingData()
    isA2APath = rankDim in (STANDARD_CARD_4P, EIGHT_P_8P)  # IsUseA2APath on DAV_3510
    tplCommMode = TPL_AICPU_COMM_MODE if commMode == "ai_cpu" else TPL_CCU_COMM_MODE
    if tplCommMode == TPL_AICPU_COMM_MODE:
        isA2APath = False
    # SetMc2Hcomm
    opType = HCCL_CMD_ALLTOALL if isA2APath else HCCL_CMD_REDUCE_SCATTER
    rsConfig = "AlltoAll=level0:fullmesh" if isA2APath else "ReduceScatter=level0:fullmesh"
    mc2CcTilingConfig = Mc2CcTilingConfig(
        WORLD_GROUP, opType, rsConfig, HCCL_REDUCE_SUM, FP16, FP16
    )
    if tplCommMode == TPL_AICPU_COMM_MODE:
        mc2CcTilingConfig.SetCommEngine(A5_AICPU_TS_ENGINE)
    else:
        mc2CcTilingConfig.SetCommEngine(A5_CCU_ENGINE)
    assert mc2CcTilingConfig.GetTiling(tiling.mc2InitTiling) == 0
    assert mc2CcTilingConfig.GetTiling(tiling.mc2CcTiling) == 0
    # SetRcsTilingData + SetStorageAWorkSpaceSize
    cfg = tiling.param
    cfg.rankDim, cfg.subtype, cfg.commtype = rankDim, HCCL_REDUCE_SUM, HCCL_CMD_REDUCE_SCATTER
    cfg.rankM, cfg.rankN, cfg.rankK, cfg.aicCoreNum = BLOCK_M * rankDim, n, K, AIC_CORE_NUM
    mmResultLen = -(-cfg.rankM * cfg.rankN * SIZEOF_HALF // 512) * 512
    cfg.nd2NzWorkLen, cfg.cToFloatLen, cfg.biasLen = 0, mmResultLen, 0
    # DoSplitMTiling (the formulaic cut, fixed here) and DoAllMatmulTiling (fixed base blocks)
    cfg.tileCnt, cfg.tailM, cfg.tailCnt = TILE_CNT, TAIL_M, TAIL_CNT
    for mm, rows in (
        (tiling.mC2Mmv3TileTilingData, TILE_M),
        (tiling.mC2Mmv3TailTilingData, TAIL_M),
    ):
        cube = mm.tCubeTiling
        cube.usedCoreNum, cube.M, cube.N, cube.Ka, cube.Kb = usedCoreNum, rows * rankDim, n, K, K
        cube.baseM, cube.baseN, cube.baseK = BASE_M, baseN, K
        mm.mTailCnt = mm.nTailCnt = mm.kTailCnt = mm.mBaseTailSplitCnt = mm.nBaseTailSplitCnt = 1
    tiling.debugMode, tiling.dataType = 0, FP16  # SetTilingResult
    workspaceSize = mmResultLen + (mmResultLen if isA2APath else 0)  # + libApiWorkSpaceSize_
    commAlg = TPL_CCU_ALL2ALL_VEC_REDUCE if isA2APath else TPL_CCU_REDUCESUM  # GetTilingKey
    return tiling, workspaceSize, (commAlg, tplCommMode), AIC_CORE_NUM  # SetBlockDim


def inputs(rank: int, n: int, cols: int = N) -> tuple[np.ndarray, np.ndarray]:
    """x1 (M, K) and x2 (K, cols) of ``rank``: small integers, exact products and sums."""
    return random_ints(rank, (BLOCK_M * n, K)), random_ints(1000 + rank, (K, cols))


def reference(rank: int, n: int, cols: int = N) -> np.ndarray:
    """numpy: row block ``rank`` of the sum over ranks of x1 @ x2."""
    total = sum(np.matmul(*(m.astype(np.float32) for m in inputs(r, n, cols))) for r in range(n))
    return total[rank * BLOCK_M : (rank + 1) * BLOCK_M].astype(np.float16)


def main() -> list[str]:
    """One launch on every rank; y against the numpy reference."""
    rank, n = hp.get_rank(), hp.get_world_size()
    commMode = "ai_cpu" if n in (STANDARD_CARD_4P, EIGHT_P_8P) else "ccu"
    tiling, workspaceSize, tilingKey, blockDim = make_tiling(n, commMode)
    x1, x2 = inputs(rank, n)
    y, workspace = zeros(BLOCK_M, N), zeros(workspaceSize // SIZEOF_HALF)
    hp.launch(
        matmul_reduce_scatter_v2,
        on_device(x1),
        on_device(x2),
        None,
        None,
        None,
        None,
        y,
        None,
        workspace,
        tiling,
        *tilingKey,
        block_dim=blockDim,
        kernel_type="mix_aic_1_2",
    )
    return [compare("y", y, reference(rank, n), f"comm_mode {commMode}")]


if __name__ == "__main__":
    run_sample(main, platform=PLATFORM)
