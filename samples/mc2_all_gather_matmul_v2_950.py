"""Port of ops-transformer's AllGatherMatmulV2 on Ascend 950 (arch35, FP16/BF16), call for call.

Source (mirror-cann/ops-transformer 3a280bcc): the entry
``mc2/all_gather_matmul_v2/op_kernel/arch35/all_gather_matmul_v2_apt.cpp`` (FP16 x FP16, FP16
out: ``INVOKE_ALLGATHERMM_FP16_BF16_V2_OP_IMPL(AllGatherMatmulFP16BF16, TRANS_B, HCCL_COMM_MODE)``),
the class ``AllGatherMatmulFP16BF16`` of ``op_kernel/arch35/all_gather_matmul_fp16_bf16.h``
(``Init``, ``StartNotify``, ``InnerProcessLocalMM``, ``InnerProcessGatherMM``,
``MatmulKernelComputeGather``, ``EndNotify``), the gather matmul
``MC2MatmulAswKernelDerive`` / ``MC2MatmulAswBlockDerive`` of ``mc2/common/op_kernel/
mc2_mat_mul_asw_kernel.h`` and ``mc2_mat_mul_asw_block.h``, the tiling struct
``AllGatherMatmulTilingDataV2`` (``op_kernel/all_gather_matmul_tiling_arch35.h``) and the host's
``AllGatherMatmulTilingV2`` (``op_host/op_tiling/arch35/all_gather_matmul_tiling_v2.cpp``) over
``AllGatherMatmulTilingBase`` (``op_host/op_tiling/all_gather_matmul_tiling_base.cpp``);
described in docs/notes/mc2-kernels.md.

What runs unchanged: ``HcclTypeSelector<HCCL_COMM_MODE>``, ``Hccl<HCCL_SERVER_TYPE_CCU>`` for
``comm_mode = "ccu"`` (the example's mode) and ``Hccl<HCCL_SERVER_TYPE_AICPU>`` for
``"ai_cpu"``; ``InitV2`` + ``SetCcTilingV2(offsetof(AllGatherMatmulTilingDataV2, mc2CcTiling))``
and ``GetRankId`` on every core, AIC and AIV; every AIC core ("全核通信") prepares one
``AllGather<true>`` per tile and per tail up front (repeat 1, ``sendCount = tilingM * Ka``,
``strideCount`` = one rank's x1); the local matmul on ``usedCoreNum`` of the local tiling; per
tile (then per tail) a ``Wait`` on every AIC core, the cores past the tiling's ``usedCoreNum``
included, then its slice of the gather matmul; ``EndNotify``: ``CrossCoreSetFlag<0,
PIPE_FIX>(3)`` + ``CrossCoreWaitFlag(3)`` on the AIC cores, ``Finalize`` on AIC block 0. The
host: ``Mc2CcTilingConfig(group, HCCL_CMD_ALLGATHER, "AllGather=level0:fullmesh", 0, FP16,
FP16)``, ``SetCommEngine`` (6 for ccu, 2 for ai_cpu), ``SetSkipBufferWindowCopy`` from a
``gatherLen`` not yet computed (0: ``SetMc2Hcomm`` runs before ``DoAllGatherTiling``),
``GetTiling`` of both tilings, the tile and tail tilings' ``M = tileM * (rankDim - 1)``, the
workspace ``gatherLen = rankDim * align512(rankM * K * 2)`` when no gather_out is wanted.

Stand-ins: FP16, no bias, x2 not transposed, a fixed M cut (the formulaic cut and
``AdjustCutResultForCCU`` are not run), ``Mc2MatMulV3TilingData`` filled by hand (baseM 4,
baseN 16, no tail split), the cube work in torch per baseM x baseN block (the local matmul's
blocks round robin, not ``Mc2MatmulAswKernel``'s window order), no system workspace.

Run: ``python samples/mc2_all_gather_matmul_v2_950.py`` (4 emulated ranks),
``python -m hccl_py run -n 2 --backend gloo samples/mc2_all_gather_matmul_v2_950.py``.
"""

from ctypes import c_uint32

import numpy as np
from _common import WORLD_GROUP, compare, on_device, random_ints, run_sample, zeros
from _mc2 import FP16, SIZEOF_HALF, matmul
from _mc2_templates import AswBasicIndex, Mc2MatMulV3TilingData, RCSTiling

import hccl_py as hp
from hccl_py import (
    AIC,
    HCCL_CMD_ALLGATHER,
    PIPE_FIX,
    Hccl,
    HcclServerType,
    Mc2CcTiling,
    Mc2CcTilingConfig,
    Mc2InitTiling,
    TilingData,
    offsetof,
)

PLATFORM = "950"
RANK_M, K, N = 20, 256, 32  # x1 (RANK_M, K) per rank, x2 (K, N); the host wants K in [256, 65535)
TILE_M, TILE_CNT, TAIL_M, TAIL_CNT = 8, 2, 4, 1  # the cut of one rank's M
AIC_CORE_NUM = 3  # blockDim; the tail's matmul uses 2 of them, so AIC core 2 only Waits there
BASE_M, BASE_N = 4, 16
HCCL_COMM_MODE_CCU, HCCL_COMM_MODE_AICPU = 0, 1  # the tiling key's HCCL_COMM_MODE
ENGINE_AICPU, ENGINE_CCU_SCHED = 2, 6  # Mc2Comm:: (mc2_comm_utils.h)
MC2_BUFFER_TYPE_DEFAULT, MC2_BUFFER_TYPE_OUTPUT = 0, 1
MC2_DEBUG_ONLY_CUBE = 1
MAX_HANDLE = 63
SLIDING_WINDOW_LEN = 4


class AllGatherMatmulTilingDataV2(TilingData):
    _fields_ = [
        ("mc2InitTiling", Mc2InitTiling),
        ("mc2CcTiling", Mc2CcTiling),
        ("param", RCSTiling),
        ("dataType", c_uint32),
        ("debugMode", c_uint32),
        ("mc2MmV3LocalTilingData", Mc2MatMulV3TilingData),
        ("mc2MmV3TileTilingData", Mc2MatMulV3TilingData),
        ("mc2MmV3TailTilingData", Mc2MatMulV3TilingData),
    ]


def HcclTypeSelector(commMode: int):
    """``HcclTypeSelector<commMode>::type``: the CCU client for 0, the AI CPU one for 1."""
    if commMode == HCCL_COMM_MODE_AICPU:
        return Hccl[HcclServerType.HCCL_SERVER_TYPE_AICPU]
    return Hccl[HcclServerType.HCCL_SERVER_TYPE_CCU]


def block_matmul(aGM, bGM, cGM, offsetA, offsetB, offsetC, m, n, k, ldc) -> None:
    """One cube block: ``m`` rows of A (pitch k) times ``n`` columns of B into C (pitch ldc)."""
    a = hp.gm_tensor(aGM + offsetA * SIZEOF_HALF, FP16, m * k).view(m, k)
    b = hp.gm_tensor(bGM + offsetB * SIZEOF_HALF, FP16, (k - 1) * ldc + n)
    c = hp.gm_tensor(cGM + offsetC * SIZEOF_HALF, FP16, (m - 1) * ldc + n)
    matmul(c.as_strided((m, n), (ldc, 1)), a, b.as_strided((k, n), (ldc, 1)))


class MC2MatmulAswKernelDerive(AswBasicIndex):
    """MC2MatmulAswKernelDerive with MC2MatmulAswBlockDerive (isGather): the base blocks of one
    slice of every other rank's rows, dealt over usedCoreNum cores in sliding windows; a slice
    continues where the last one's partial round stopped (preCoreNum_)."""

    def Init(self, aGM, bGM, cGM, tiling: Mc2MatMulV3TilingData, cfg: RCSTiling, isTail: bool):
        self.aGM_, self.bGM_, self.cGM_, self.cube_, self.cfg_ = (
            aGM,
            bGM,
            cGM,
            tiling.tCubeTiling,
            cfg,
        )
        self.preCoreNum_ = 0
        self.rankMK_, self.rankMN_ = cfg.rankM * cfg.rankK, cfg.rankM * cfg.rankN  # InitForMC2
        headSliceM = (cfg.rankM - cfg.tailM * cfg.tailCnt) // cfg.tileCnt
        self.curSliceM_ = cfg.tailM if isTail else headSliceM
        self.headSliceM_ = headSliceM
        self.mSliceCnt_ = -(-self.curSliceM_ // self.cube_.baseM)
        self.nCnt = -(-self.cube_.N // self.cube_.baseN)
        self.mCnt = self.mSliceCnt_ * (cfg.rankDim - 1)
        self.mBaseTail = self.curSliceM_ - (self.mSliceCnt_ - 1) * self.cube_.baseM
        self.nBaseTail = self.cube_.N - (self.nCnt - 1) * self.cube_.baseN
        self.mainWindow = min(SLIDING_WINDOW_LEN, self.mCnt)
        self.mainRow = self.mCnt // self.mainWindow - 1
        self.tailWindow = self.mCnt - self.mainRow * self.mainWindow

    def UpdateSlice(self, idx: int, isTail: bool) -> None:
        """UpdateOffset: where slice ``idx`` of each other rank starts in A (gathered) and C."""
        cfg = self.cfg_
        if isTail:
            rows = cfg.tileCnt * self.headSliceM_ + idx * cfg.tailM
        else:
            rows = idx * self.headSliceM_
        others = [i for i in range(cfg.rankDim) if i != cfg.rankID]
        self.offsetsA_ = [i * self.rankMK_ + rows * cfg.rankK for i in others]
        self.offsetsC_ = [i * self.rankMN_ + rows * cfg.rankN for i in others]

    def Process(self, isLast: bool) -> None:
        if hp.g_coreType != AIC:
            return
        cube, blockIdx = self.cube_, hp.GetBlockIdx()
        totalCnt = self.mCnt * self.nCnt + self.preCoreNum_  # Update
        for j in range(-(-totalCnt // cube.usedCoreNum)):
            if j == 0 and blockIdx < self.preCoreNum_:
                continue  # this core already took a block of the last round
            index = blockIdx + j * cube.usedCoreNum - self.preCoreNum_
            if index >= totalCnt - self.preCoreNum_:
                continue
            mIdx, nIdx = self.UpdateBasicIndex(index)
            rankIdx, mRest = divmod(mIdx, self.mSliceCnt_)  # CalcGMOffset
            m = self.mBaseTail if mRest == self.mSliceCnt_ - 1 else cube.baseM
            n = self.nBaseTail if nIdx == self.nCnt - 1 else cube.baseN
            offsetA = self.offsetsA_[rankIdx] + mRest * cube.baseM * self.cfg_.rankK
            offsetC = self.offsetsC_[rankIdx] + nIdx * cube.baseN + mRest * cube.baseM * cube.N
            block_matmul(
                self.aGM_, self.bGM_, self.cGM_, offsetA, nIdx * cube.baseN, offsetC, m, n,
                cube.Ka, cube.N,
            )  # fmt: skip
        self.preCoreNum_ = totalCnt % cube.usedCoreNum

    def End(self) -> None:
        pass


class AllGatherMatmulFP16BF16:
    """AllGatherMatmulFP16BF16<AType, BType, BiasType, CType, ServerMode>."""

    def __init__(self, ServerMode: int) -> None:
        self.hccl_ = HcclTypeSelector(ServerMode)()
        self.notifyFlag_ = False
        self.hHandles_ = [0] * MAX_HANDLE  # at most 63 handle ids

    def Init(self, aGM, bGM, biasGM, cGM, contextGM, workspaceGM, gatherOut, tilingData) -> None:
        self.tilingData_ = tilingData
        cfg = tilingData.param
        self.context_ = contextGM
        self.hccl_.InitV2(self.context_, tilingData.mc2InitTiling)
        self.hccl_.SetCcTilingV2(offsetof(AllGatherMatmulTilingDataV2, "mc2CcTiling"))
        self.debugMode_ = tilingData.debugMode
        self.dataType_ = tilingData.dataType
        self.aGM_, self.bGM_, self.cGM_, self.biasGM_ = aGM, bGM, cGM, biasGM
        self.rankId_ = self.hccl_.GetRankId()
        self.workspaceGM_ = workspaceGM
        self.gatherAddr_ = gatherOut
        if cfg.gatherLen != 0 or not gatherOut:
            self.gatherAddr_ = self.workspaceGM_
            self.workspaceGM_ += cfg.gatherLen
        if hp.g_coreType == AIC and self.debugMode_ != MC2_DEBUG_ONLY_CUBE:
            self.notifyFlag_ = True  # every AIC core communicates

    def StartNotify(self) -> None:
        if not self.notifyFlag_:
            return
        t, cfg = self.tilingData_, self.tilingData_.param
        tilingM = t.mc2MmV3TileTilingData.tCubeTiling.M // (cfg.rankDim - 1)
        tilingka = t.mc2MmV3TileTilingData.tCubeTiling.Ka
        tailM = t.mc2MmV3TailTilingData.tCubeTiling.M // (cfg.rankDim - 1)
        if cfg.rankN == 0:
            tilingka = cfg.rankK  # x2 empty: communication only
        tileSendCount, tailSendCount = tilingM * tilingka, tailM * tilingka
        stride = tileSendCount * cfg.tileCnt + tailSendCount * cfg.tailCnt
        repeat = 1
        for i in range(cfg.tileCnt):
            sendBuff = self.aGM_ + i * tileSendCount * SIZEOF_HALF
            recvBuffer = self.gatherAddr_ + i * tileSendCount * SIZEOF_HALF
            self.hHandles_[i] = self.hccl_.AllGather[True](
                sendBuff, recvBuffer, tileSendCount, self.dataType_, stride, repeat
            )
        for i in range(cfg.tileCnt, cfg.tileCnt + cfg.tailCnt):
            offset = (cfg.tileCnt * tileSendCount + (i - cfg.tileCnt) * tailSendCount) * SIZEOF_HALF
            self.hHandles_[i] = self.hccl_.AllGather[True](
                self.aGM_ + offset, self.gatherAddr_ + offset, tailSendCount, self.dataType_,
                stride, repeat,
            )  # fmt: skip

    def EndNotify(self) -> None:
        if hp.g_coreType == AIC:
            # so that block 0 does not clear the receive counts while another core still Waits
            hp.CrossCoreSetFlag[0, PIPE_FIX](3)
            hp.CrossCoreWaitFlag(3)
            if self.notifyFlag_ and hp.GetBlockIdx() == 0:
                self.hccl_.Finalize()

    def Process(self) -> None:
        if hp.g_coreType == AIC:
            self.StartNotify()
            self.InnerProcess()
            self.EndNotify()

    def InnerProcess(self) -> None:
        self.InnerProcessLocalMM()
        self.InnerProcessGatherMM()

    def InnerProcessLocalMM(self) -> None:
        """Mc2MatmulAswKernel over this rank's own x1 into its rows of y (no communication)."""
        cube = self.tilingData_.mc2MmV3LocalTilingData.tCubeTiling
        if hp.GetBlockIdx() >= cube.usedCoreNum:
            return
        cfg = self.tilingData_.param
        cLocalGM = self.cGM_ + self.rankId_ * cfg.rankM * cube.N * SIZEOF_HALF
        if cfg.rankN == 0:
            return
        mCnt, nCnt = -(-cube.M // cube.baseM), -(-cube.N // cube.baseN)
        for index in range(hp.GetBlockIdx(), mCnt * nCnt, cube.usedCoreNum):
            m0, n0 = index // nCnt * cube.baseM, index % nCnt * cube.baseN
            m, n = min(cube.baseM, cube.M - m0), min(cube.baseN, cube.N - n0)
            block_matmul(
                self.aGM_, self.bGM_, cLocalGM, m0 * cube.Ka, n0, m0 * cube.N + n0, m, n,
                cube.Ka, cube.N,
            )  # fmt: skip

    def InnerProcessGatherMM(self) -> None:
        t, cfg = self.tilingData_, self.tilingData_.param
        isLastTile = not cfg.tailM
        if self.debugMode_ == MC2_DEBUG_ONLY_CUBE:
            self.MatmulKernelComputeGather(
                self.aGM_, self.cGM_, t.mc2MmV3TileTilingData, cfg.tileCnt, isLastTile, False
            )
        else:
            self.MatmulKernelComputeGather(
                self.gatherAddr_, self.cGM_, t.mc2MmV3TileTilingData, cfg.tileCnt, isLastTile, False
            )
        if cfg.tailM:  # (MC2_DEBUG_ONLY_CUBE's tail addresses are not ported: debugMode is 0)
            self.MatmulKernelComputeGather(
                self.gatherAddr_, self.cGM_, t.mc2MmV3TailTilingData, cfg.tailCnt, True, True
            )

    def MatmulKernelComputeGather(
        self, aGM, cGM, tiling, count: int, isLast: bool, isTail: bool
    ) -> None:
        cfg = self.tilingData_.param
        cfg.rankID = self.rankId_
        shift = cfg.tileCnt if isTail else 0
        if hp.GetBlockIdx() >= tiling.tCubeTiling.usedCoreNum or cfg.rankN == 0:
            for i in range(count):  # idle cores Wait too
                if self.debugMode_ != MC2_DEBUG_ONLY_CUBE:
                    self.hccl_.Wait(self.hHandles_[i + shift])
            return
        mmv3 = MC2MatmulAswKernelDerive()
        mmv3.Init(aGM, self.bGM_, cGM, tiling, cfg, isTail)
        for i in range(count):
            if self.debugMode_ != MC2_DEBUG_ONLY_CUBE:
                self.hccl_.Wait(self.hHandles_[i + shift])
            mmv3.UpdateSlice(i, isTail)
            mmv3.Process(isLast and i == count - 1)
        mmv3.End()


def all_gather_matmul_v2(HCCL_COMM_MODE: int):
    """``all_gather_matmul_v2<..., HCCL_COMM_MODE>``: the kernel instance the tiling key picks."""

    def kernel(
        aGM, bGM, biasGM, scaleInv1, scaleInv2, scale, cGM, gatherOut, amax, workspaceGM, tilingGM
    ):
        context = hp.GetHcclContext(0)
        tilingData = hp.GET_TILING_DATA_WITH_STRUCT(AllGatherMatmulTilingDataV2, tilingGM)
        op = AllGatherMatmulFP16BF16(HCCL_COMM_MODE)
        op.Init(aGM, bGM, biasGM, cGM, context, workspaceGM, gatherOut, tilingData)
        op.Process()

    return kernel


def set_cube_tiling(mm: Mc2MatMulV3TilingData, m: int, usedCoreNum: int) -> None:
    """The matmul tiling the host's Mc2MMTilingRegistry would give (stand-in values)."""
    c = mm.tCubeTiling
    c.usedCoreNum, c.M, c.N, c.Ka, c.Kb = usedCoreNum, m, N, K, K
    c.singleCoreM, c.singleCoreN, c.singleCoreK, c.baseM, c.baseN, c.baseK = (
        BASE_M,
        BASE_N,
        K,
        BASE_M,
        BASE_N,
        K,
    )
    mm.mTailCnt = mm.nTailCnt = mm.kTailCnt = mm.mBaseTailSplitCnt = mm.nBaseTailSplitCnt = 1


def make_tiling(rankDim: int, commMode: str, isGatherOut: bool) -> AllGatherMatmulTilingDataV2:
    """Host side (AllGatherMatmulTilingV2::DoOpTiling and GetWorkspaceSize)."""
    tiling = AllGatherMatmulTilingDataV2()
    p = tiling.param
    # SetMc2Hcomm: runs before DoAllGatherTiling has computed gatherLen
    cfg = Mc2CcTilingConfig(
        WORLD_GROUP, HCCL_CMD_ALLGATHER, "AllGather=level0:fullmesh", 0, FP16, FP16
    )
    cfg.SetCommEngine(ENGINE_CCU_SCHED if commMode == "ccu" else ENGINE_AICPU)
    cfg.SetSkipBufferWindowCopy(
        MC2_BUFFER_TYPE_DEFAULT if p.gatherLen == 0 else MC2_BUFFER_TYPE_OUTPUT
    )
    if cfg.GetTiling(tiling.mc2InitTiling) != 0 or cfg.GetTiling(tiling.mc2CcTiling) != 0:
        raise RuntimeError(f"tiling failed: {cfg.last_error}")
    # SetRcsTilingData
    p.rankDim, p.isTransposeA, p.isTransposeB, p.commtype = rankDim, 0, 0, HCCL_CMD_ALLGATHER
    p.rankM, p.rankN, p.rankK, p.aicCoreNum = RANK_M, N, K, AIC_CORE_NUM
    p.storageGather, p.biasLen = int(isGatherOut), 0
    # DoSplitMTiling (stand-in cut), DoVersion2Tiling: M of a tile covers every other rank
    p.tileCnt, p.tailM, p.tailCnt = TILE_CNT, TAIL_M, TAIL_CNT
    set_cube_tiling(tiling.mc2MmV3LocalTilingData, RANK_M, AIC_CORE_NUM)
    set_cube_tiling(tiling.mc2MmV3TileTilingData, TILE_M * (rankDim - 1), AIC_CORE_NUM)
    set_cube_tiling(tiling.mc2MmV3TailTilingData, TAIL_M * (rankDim - 1), AIC_CORE_NUM - 1)
    # DoAllGatherTiling: debug mode, data type, GetStorageA
    tiling.debugMode, tiling.dataType = 0, FP16
    if not isGatherOut:
        p.gatherLen = rankDim * (-(-(RANK_M * K * SIZEOF_HALF) // 512) * 512)
    return tiling


def main() -> list[str]:
    """Two launches: comm_mode "ccu" with gather_out, "ai_cpu" gathering into the workspace."""
    rank, n = hp.get_rank(), hp.get_world_size()
    x2 = random_ints(1000, (K, N))
    gathered = np.concatenate([random_ints(r, (RANK_M, K)) for r in range(n)])
    y_ref = (gathered.astype(np.float32) @ x2.astype(np.float32)).astype(np.float16)
    lines = []
    for commMode, isGatherOut in (("ccu", True), ("ai_cpu", False)):
        tiling = make_tiling(n, commMode, isGatherOut)
        y, gather_out = zeros(n * RANK_M, N), zeros(n * RANK_M, K) if isGatherOut else None
        workspace = zeros(tiling.param.gatherLen // SIZEOF_HALF) if not isGatherOut else None
        mode = HCCL_COMM_MODE_CCU if commMode == "ccu" else HCCL_COMM_MODE_AICPU  # GetTilingKey
        hp.launch(
            all_gather_matmul_v2(mode),
            on_device(random_ints(rank, (RANK_M, K))),
            on_device(x2),
            *(None,) * 4,
            y,
            gather_out,
            None,
            workspace,
            tiling,
            block_dim=AIC_CORE_NUM,  # PostTiling: SetBlockDim(aicCoreNum)
            kernel_type="mix_aic_1_2",
        )
        if isGatherOut:
            lines.append(compare("gather_out", gather_out, gathered, f"{n} ranks' x1"))
        lines.append(compare(f"y-{commMode}", y, y_ref, f"gathered x1 @ x2, {n * RANK_M} rows"))
    return lines


if __name__ == "__main__":
    run_sample(main, platform=PLATFORM)
