"""Port of ops-transformer's MatmulAlltoAll, arch22 non-quantised path (Atlas A3), call for call.

Source: mirror-cann/ops-transformer at 3a280bcc (2026-07-21), ``mc2/matmul_allto_all/``, every
file read at that commit: the kernel entry ``op_kernel/arch22/matmul_allto_all.cpp``
(``matmul_allto_all``, its ``SOC_ASCEND910_93`` branch and the macro
``MATMUL_ALLTO_ALL_A3_FP_IMPL``, lines 33-80), the class ``MatmulAlltoAllArch35`` of
``op_kernel/matmul_allto_all_arch35.h`` (``Init``, ``Process``, ``ProcessTile``,
``ProcessTail``; A3 non-quantised and A5 share it), the scheduler ``MatmulAlltoAllPipeLine`` of
``op_kernel/matmul_allto_all_pipeline.h`` (``Init``, ``Process``, ``ProcessDefault`` at lines
92-113, ``End``), and the shared MC2 templates under ``mc2/common/op_kernel/mc2_templates/``:
``HcclCommunicator`` (``communication/communicator/hccl_communicator.h``: ``Init``,
``PrepareAll``, ``Process``, ``AddIndex``, ``End``), ``MC2AlltoAllPrimitives``
(``communication/primitives/hccl_primitives.h``: ``Prepare``), ``MC2VecTranspose``
(``computation/math/mc2_vec_transpose.h``) and ``MC2FpMatmul``
(``computation/matmul/mc2_fp_matmul.h``, ``DEFINE_MC2_MATMUL_FOR_MATMUL_COMPUTATION_A3_FP``);
the primitives, the transpose and the matmul are in samples/_mc2_templates.py, shared with
the AlltoAllMatmul port as the kernels share them.
The tiling struct is ``MatmulAlltoAllTilingDataA3``
(``op_kernel/arch22/matmul_allto_all_tiling_data_910_93.h``), the host tiling
``FpMatmulAllToAllTilingBaseA3`` of ``op_host/op_tiling/arch22/fp_matmul_allto_all_tiling_910_93.cpp``
(``IsCapable``, ``DoOpTiling``, ``SetHcclTiling``, ``SetUserWorkSpace``, ``GetWorkspaceSize``,
``PostTiling``, ``SetTilingInfo``) with ``MatmulAllToAllTilingBase`` of
``op_host/op_tiling/matmul_allto_all_tiling_base.cpp`` (``TileCommAndCompute``); described in
docs/notes/mc2-kernels.md, section 10.

What it computes: rank r holds x1 ``(BS, K)`` and x2 ``(K, N)``; it multiplies them and sends
column block j (``N / rankDim`` columns) of the product to rank j, which stacks the blocks of
every rank by source rank: y ``(BS * rankDim, N / rankDim)``. The compute-first mirror of
AlltoAllMatmul (samples/mc2_allto_all_matmul.py).

Which path: the same arch22 entry has a second, Atlas A2 (``SOC_ASCEND910B``) path, the class
``MatmulAlltoAll`` of ``op_kernel/arch22/matmul_allto_all.h`` (with ``matmul_allto_all_util.h``
and ``moe_distribute_base.h``, host ``matmul_allto_all_tiling_910b.cpp``); like AlltoAllMatmul's
A2 path it is a window kernel, not this port. This port is the path that communicates through
the Hccl client, the A3 one.

What runs unchanged: ``Hccl<HCCL_SERVER_TYPE_AICPU>`` on every core, ``InitV2`` with the init
tiling and ``SetCcTilingV2(offsetof(MatmulAlltoAllTilingDataA3, mc2CcTiling))`` on every core
(AIC and AIV); the communication core is AIV block 0 (``AICSync = false``), the only core that
Prepares, Commits, Waits and Finalizes; ``SendCnt = 1, RecvCnt = 0`` (the macro's ``1, 0``)
selects ``COMMUNICATION_SEND_ONE``: compute first. Per tile group (the tiles, then the tail)
``PrepareAll``: one ``AlltoAll<false>`` per tile, ``repeat = 1``, ``sendCount = tileM * N /
rankDim``, ``strideCount = BS * N / rankDim``, send (the transposed buffer) and receive (y)
addresses stepping by one tile, nothing committed yet; per tile on the AIC cores the tile's
matmul into the workspace, the mode-0 flag 8 barrier of all AIC cores and the mode-2 flag 9
that releases the AI core's two AIV cores; on the AIV cores ``CrossCoreWaitFlag(9)``, the
transpose of the tile's rank column blocks into the send buffer (64-row by 256-column pieces
dealt out to ``2 * GetBlockNum()`` AIV cores), ``SyncAll<true>`` and the communication core's
``Commit`` of the tile; ``End``: the communication core Waits every task (none was waited for
before) and ``Finalize``s, with no ``SyncAll`` before it (no other core uses its Hccl object
after ``InitV2``). The host: ``Mc2CcTilingConfig(group, HCCL_CMD_ALLTOALL,
"AlltoAll=level0:fullmesh;level1:pairwise")``, ``SetSkipBufferWindowCopy(MC2_BUFFER_TYPE_DEFAULT
= 0)``, ``GetTiling`` of ``mc2InitTiling`` and ``mc2CcTiling``; ``mmResultLen =
align512(BS * N * 2)`` and ``permuteLen = mmResultLen`` (the matmul result, then the transposed
send buffer, in the workspace); ``blockDim = aicCoreNum``, ``KERNEL_TYPE_MIX_AIC_1_2``.

Stand-ins: FP16, no bias, x2 not transposed; the matmul (``Mc2MatmulBaseKernel``) is one torch
call per tile and AIC core, each AIC core a share of the tile's rows, and the two
``Mc2MatmulV3TilingData`` members are left out of the tiling struct; the M cut (two tiles of 4
rows and a tail of 2) is fixed here rather than computed by the formulaic tiling
(``AlltoAllMM`` in ``GetTilingResult``); the workspace holds no ``libApiWorkSpaceSize_`` in
front (the kernel uses ``workspaceGM`` as it comes, so the port passes the user part only).

Run: ``python samples/mc2_matmul_allto_all.py`` (4 emulated ranks),
``python -m hccl_py run -n 2 --backend gloo samples/mc2_matmul_allto_all.py``.
"""

from ctypes import Structure, c_uint64

import numpy as np
from _common import WORLD_GROUP, compare, on_device, random_ints, run_sample, zeros
from _mc2 import FP16, SIZEOF_HALF, uint32_fields
from _mc2_templates import MC2AlltoAllContext, MC2AlltoAllPrimitives, MC2FpMatmul, MC2VecTranspose

import hccl_py as hp
from hccl_py import (
    AIC,
    AIV,
    HCCL_CMD_ALLTOALL,
    HCCL_SERVER_TYPE_AICPU,
    PIPE_FIX,
    Hccl,
    Mc2CcTiling,
    Mc2CcTilingConfig,
    Mc2InitTiling,
    TilingData,
    offsetof,
)

PLATFORM = "A3"  # the tiling's IsCapable admits "Ascend910_93" only
BS, K, N_PER_RANK = 10, 16, 800  # x1's rows and K; the columns of y (N / rankDim)
TILE_M, TILE_CNT, TAIL_M, TAIL_CNT = 4, 2, 2, 1  # the host's cut of BS
AIC_CORE_NUM = 2  # blockDim: 2 AIC and 4 AIV cores; 800 columns give each AIV one piece
ALIGN_ADDR_LEN = 512  # SetUserWorkSpace's alignment of mmResultLen
MC2_BUFFER_TYPE_DEFAULT = 0  # mc2tiling::MC2_BUFFER_TYPE (matmul_formulaic_tiling.h)


class MatmulAlltoAllTilingInfoA3(Structure):
    """MatmulAlltoAllTilingInfoA3, member for member."""

    _fields_ = [
        *uint32_fields("rankDim", "tileM", "tileCnt", "tailM", "tailCnt"),
        *uint32_fields("rankM", "rankN", "rankK"),
        ("mmResultLen", c_uint64),
        ("permuteLen", c_uint64),
        *uint32_fields("biasLen", "aicCoreNum"),
        ("hcclDataType", c_uint64),
    ]


class MatmulAlltoAllTilingDataA3(TilingData):
    """The tiling struct without its two Mc2MatmulV3TilingData members (the matmul is torch)."""

    _fields_ = [
        ("mc2InitTiling", Mc2InitTiling),
        ("mc2CcTiling", Mc2CcTiling),
        ("matmulAlltoAllTilingInfo", MatmulAlltoAllTilingInfoA3),
    ]


# ---------------------------------------------------------------- hccl_communicator.h
class HcclCommunicator:
    """``HcclCommunicator<false, AICPU, MC2AlltoAllContext, MatmulAlltoAllTilingDataA3,
    MC2AlltoAllPrimitives, 1, 0>``: AIV block 0 communicates; every task is prepared in
    PrepareAll, committed in Process and waited for in End (COMMUNICATION_SEND_ONE)."""

    MAX_HCCL_HANDLE_ = 63

    def __init__(self, tiling: MatmulAlltoAllTilingDataA3, AICSync: bool = False) -> None:
        self.tiling_ = tiling
        self.AICSync = AICSync
        self.SendCnt, self.RecvCnt = 1, 0
        self.hccl_ = Hccl[HCCL_SERVER_TYPE_AICPU]()
        self.context_ = MC2AlltoAllContext()
        self.primitive_ = MC2AlltoAllPrimitives()
        self.startIndex_ = self.endIndex_ = 0
        self.waitOne = True  # communicationType_'s default, COMMUNICATION_WAIT_ONE
        self.hTasks_ = [-1] * self.MAX_HCCL_HANDLE_
        self.taskSuccess_ = [True] * self.MAX_HCCL_HANDLE_

    def Init(self) -> None:
        self.notifyFlag_ = False
        if hp.g_coreType == AIV:
            self.notifyFlag_ = not self.AICSync and hp.GetBlockIdx() == 0
        elif hp.g_coreType == AIC:
            self.notifyFlag_ = self.AICSync and hp.GetBlockIdx() == 0
        self.hccl_.InitV2(hp.GetHcclContext(0), self.tiling_.mc2InitTiling)
        self.hccl_.SetCcTilingV2(offsetof(MatmulAlltoAllTilingDataA3, "mc2CcTiling"))
        if self.SendCnt == 1 and self.RecvCnt == 0:
            self.waitOne = False  # COMMUNICATION_SEND_ONE: compute first
        elif self.SendCnt == 0 and self.RecvCnt == 1:
            self.waitOne = True
        self.taskSuccess_ = [True] * self.MAX_HCCL_HANDLE_

    def GetContextPtr(self) -> MC2AlltoAllContext:
        return self.context_

    def PrepareAll(self, taskCnt: int) -> None:
        if not self.notifyFlag_:  # only the communication core communicates
            return
        for i in range(taskCnt):
            self.hTasks_[self.endIndex_ + i] = self.primitive_.Prepare(self.hccl_, self.context_, i)
        self.AddIndex(taskCnt)
        if self.waitOne:  # communicate first: start every task now (not this kernel's mode)
            for i in range(taskCnt):
                self.hccl_.Commit(self.hTasks_[self.startIndex_ + i])
                self.taskSuccess_[self.startIndex_ + i] = False

    def Process(self, taskIndex: int) -> None:
        if not self.notifyFlag_:
            return
        if self.waitOne:
            self.hccl_.Wait(self.hTasks_[self.startIndex_ + taskIndex])
            self.taskSuccess_[self.startIndex_ + taskIndex] = True
        else:  # compute first: start the task whose send buffer is now written
            self.hccl_.Commit(self.hTasks_[self.startIndex_ + taskIndex])
            self.taskSuccess_[self.startIndex_ + taskIndex] = False

    def AddIndex(self, taskCnt: int) -> None:
        if not self.notifyFlag_:
            return
        self.startIndex_ = self.endIndex_
        self.endIndex_ += taskCnt

    def End(self) -> None:
        if self.notifyFlag_:  # wait for every task not waited for yet: all of them here
            for i in range(self.endIndex_):
                if not self.taskSuccess_[i]:
                    self.hccl_.Wait(self.hTasks_[i])
                    self.taskSuccess_[i] = True
        if self.notifyFlag_:
            self.hccl_.Finalize()


# ---------------------------------------------------------------- matmul_allto_all_pipeline.h
class MatmulAlltoAllPipeLine:
    """MatmulAlltoAllPipeLine (IsKCQuantMode false): per task, matmul on AIC, then transpose
    and Commit on AIV."""

    def __init__(self, computeStage, transStage, commStage) -> None:
        self.computeStage_, self.transStage_, self.commStage_ = computeStage, transStage, commStage

    def Init(self) -> None:
        self.computeStage_.Init()
        self.commStage_.Init()

    def GetContext(self):
        return (
            self.computeStage_.GetContextPtr(),
            self.transStage_.GetContextPtr(),
            self.commStage_.GetContextPtr(),
        )

    def Process(self, taskCnt: int) -> None:
        self.ProcessDefault(taskCnt)  # ProcessKC is the KC-quantised (A5) schedule

    def ProcessDefault(self, taskCnt: int) -> None:
        self.commStage_.PrepareAll(taskCnt)
        for index in range(taskCnt):
            if hp.g_coreType == AIC:
                self.computeStage_.Process(index)
                hp.CrossCoreSetFlag[0, PIPE_FIX](8)  # every AIC core multiplied this task
                hp.CrossCoreWaitFlag(8)
                hp.CrossCoreSetFlag[2, PIPE_FIX](9)  # release this AI core's two AIV cores
            if hp.g_coreType == AIV:
                hp.CrossCoreWaitFlag(9)
                self.transStage_.Process(index)
                hp.SyncAll[True]()
                self.commStage_.Process(index)

    def End(self) -> None:
        self.computeStage_.End()
        self.commStage_.End()


# ---------------------------------------------------------------- matmul_allto_all_arch35.h
class MatmulAlltoAllArch35:
    """MatmulAlltoAllArch35: the addresses and steps of the tiles, then of the tail."""

    def __init__(self, pipeLine: MatmulAlltoAllPipeLine) -> None:
        self.pipeLine_ = pipeLine

    def Init(self, x1, x2, bias, y, workspaceGM, tilingData) -> None:
        self.tilingData_ = tilingData
        info = tilingData.matmulAlltoAllTilingInfo
        self.x1_, self.x2_, self.y_, self.bias_ = x1, x2, y, bias
        self.workspaceGM_ = workspaceGM
        self.tempComputeOutGM_ = workspaceGM
        self.transOutGM_ = self.tempComputeOutGM_ + info.mmResultLen
        self.pipeLine_.Init()
        self.compute, self.trans, self.comm = self.pipeLine_.GetContext()

    def Process(self) -> None:
        info = self.tilingData_.matmulAlltoAllTilingInfo
        if info.tileCnt > 0:
            self.ProcessTile(info.tileCnt)
        if info.tailCnt > 0:
            self.ProcessTail(info.tailCnt)
        self.pipeLine_.End()

    def ProcessTile(self, taskCnt: int) -> None:
        info = self.tilingData_.matmulAlltoAllTilingInfo
        tileMMultiRankN = info.tileM * info.rankN
        rankNDivRankDim = info.rankN // info.rankDim
        mm = self.compute.baseData
        mm.aGM, mm.bGM, mm.cGM, mm.biasGM = self.x1_, self.x2_, self.tempComputeOutGM_, self.bias_
        mm.aOffset = info.tileM * info.rankK * SIZEOF_HALF
        mm.bOffset = 0
        mm.cOffset = tileMMultiRankN * SIZEOF_HALF
        self.compute.rows = info.tileM  # tilingDataPtr = &mc2MmV3TileTilingData

        t = self.trans
        t.transposeSrcAddr, t.transposeDstAddr = self.tempComputeOutGM_, self.transOutGM_
        t.transposeSrcOffset = tileMMultiRankN * SIZEOF_HALF
        t.nextSrcBlockOffset = rankNDivRankDim
        t.nextDstBlockOffset = info.rankM * rankNDivRankDim
        t.transposeDstOffset = t.transposeSrcOffset // info.rankDim
        t.rankCnt = info.rankDim
        t.innerAxis = rankNDivRankDim
        t.transM = info.tileM
        t.innerOffsetIn = info.rankN
        t.innerOffsetOut = rankNDivRankDim

        c = self.comm
        c.taskCnt = info.tileCnt
        c.sendBuffer, c.recvBuffer = t.transposeDstAddr, self.y_
        c.sendOffset = info.tileM * rankNDivRankDim * SIZEOF_HALF
        c.recvOffset = c.sendOffset
        c.sendCount = info.tileM * t.innerAxis
        c.strideCount = t.nextDstBlockOffset
        c.hcclDataType = info.hcclDataType
        self.pipeLine_.Process(taskCnt)

    def ProcessTail(self, taskCnt: int) -> None:
        info = self.tilingData_.matmulAlltoAllTilingInfo
        tileCntMultitileM = info.tileCnt * info.tileM
        rankNDivRankDim = info.rankN // info.rankDim
        mm = self.compute.baseData
        mm.aGM = self.x1_ + tileCntMultitileM * info.rankK * SIZEOF_HALF
        mm.bGM = self.x2_
        mm.cGM = self.tempComputeOutGM_ + tileCntMultitileM * info.rankN * SIZEOF_HALF
        mm.aOffset = info.tailM * info.rankK * SIZEOF_HALF
        mm.bOffset = 0
        mm.cOffset = info.tailM * info.rankN * SIZEOF_HALF
        self.compute.rows = info.tailM  # tilingDataPtr = &mc2MmV3TailTilingData

        t = self.trans
        t.transposeSrcAddr = self.tempComputeOutGM_ + tileCntMultitileM * info.rankN * SIZEOF_HALF
        t.transposeDstAddr = self.transOutGM_ + tileCntMultitileM * rankNDivRankDim * SIZEOF_HALF
        t.transposeSrcOffset = info.tailM * info.rankN * SIZEOF_HALF
        t.transposeDstOffset = info.tailM * rankNDivRankDim * SIZEOF_HALF
        t.transM = info.tailM

        c = self.comm
        c.taskCnt = info.tailCnt
        c.sendBuffer = t.transposeDstAddr
        c.recvBuffer = self.y_ + tileCntMultitileM * rankNDivRankDim * SIZEOF_HALF
        c.sendOffset = info.tailM * rankNDivRankDim * SIZEOF_HALF
        c.recvOffset = c.sendOffset
        c.sendCount = info.tailM * t.innerAxis
        self.pipeLine_.Process(taskCnt)


def matmul_allto_all(
    x1, x2, bias, x1_scale, x2_scale, comm_scale, x1_offset, x2_offset, y, workspaceGM, tilingGM
):
    """The kernel entry, ``SOC_ASCEND910_93`` and FP16 bias: MATMUL_ALLTO_ALL_A3_FP_IMPL."""
    tilingData = hp.GET_TILING_DATA_WITH_STRUCT(MatmulAlltoAllTilingDataA3, tilingGM)
    info = tilingData.matmulAlltoAllTilingInfo
    matmulImplName = MC2FpMatmul(info, info.rankK)
    transposeImplName = MC2VecTranspose()
    commImplName = HcclCommunicator(tilingData)
    SchedulerImpl = MatmulAlltoAllPipeLine(matmulImplName, transposeImplName, commImplName)
    op = MatmulAlltoAllArch35(SchedulerImpl)
    op.Init(x1, x2, bias, y, workspaceGM, tilingData)
    op.Process()


def make_tiling(rankDim: int) -> MatmulAlltoAllTilingDataA3:
    """Host side: TileCommAndCompute's cut, SetHcclTiling, SetUserWorkSpace, SetTilingInfo."""
    tiling = MatmulAlltoAllTilingDataA3()
    # SetHcclTiling: comm_mode "ai_cpu", opType HCCL_CMD_ALLTOALL
    mc2CcTilingConfig = Mc2CcTilingConfig(
        WORLD_GROUP, HCCL_CMD_ALLTOALL, "AlltoAll=level0:fullmesh;level1:pairwise"
    )
    assert mc2CcTilingConfig.SetSkipBufferWindowCopy(MC2_BUFFER_TYPE_DEFAULT) == 0
    assert mc2CcTilingConfig.GetTiling(tiling.mc2InitTiling) == 0
    assert mc2CcTilingConfig.GetTiling(tiling.mc2CcTiling) == 0

    info = tiling.matmulAlltoAllTilingInfo  # PostTiling's SetTilingInfo
    info.tileM, info.tileCnt, info.tailM, info.tailCnt = TILE_M, TILE_CNT, TAIL_M, TAIL_CNT
    info.rankM, info.rankN, info.rankK = BS, N_PER_RANK * rankDim, K  # orgMValue, nValue, K
    mmBytes = info.rankM * info.rankN * SIZEOF_HALF
    info.mmResultLen = -(-mmBytes // ALIGN_ADDR_LEN) * ALIGN_ADDR_LEN
    info.permuteLen = info.mmResultLen  # the transposed send buffer, as large
    info.biasLen = 0  # no bias
    info.aicCoreNum = AIC_CORE_NUM
    info.rankDim = rankDim
    info.hcclDataType = FP16
    return tiling


def inputs(rank: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """x1 (BS, K) and x2 (K, N) of ``rank``: small integers, exact products."""
    return random_ints(rank, (BS, K)), random_ints(1000 + rank, (K, N_PER_RANK * n))


def reference(rank: int, n: int) -> np.ndarray:
    """numpy: rank j gets column block j of every rank's x1 @ x2, stacked by source rank."""
    cols = slice(rank * N_PER_RANK, (rank + 1) * N_PER_RANK)
    blocks = []
    for r in range(n):
        x1, x2 = inputs(r, n)
        blocks.append((x1.astype(np.float32) @ x2.astype(np.float32))[:, cols])
    return np.concatenate(blocks, axis=0).astype(np.float16)


def main() -> list[str]:
    """One launch on every rank; y against the numpy reference."""
    rank, n = hp.get_rank(), hp.get_world_size()
    x1, x2 = inputs(rank, n)
    tiling = make_tiling(n)
    info = tiling.matmulAlltoAllTilingInfo
    y = zeros(BS * n, N_PER_RANK)
    workspace = zeros((info.mmResultLen + info.permuteLen + info.biasLen) // SIZEOF_HALF)
    hp.launch(
        matmul_allto_all,
        on_device(x1),
        on_device(x2),
        None,
        None,
        None,
        None,
        None,
        None,
        y,
        workspace,
        tiling,
        block_dim=info.aicCoreNum,
        kernel_type="mix_aic_1_2",
    )
    return [compare("y", y, reference(rank, n))]


if __name__ == "__main__":
    run_sample(main, platform=PLATFORM)
