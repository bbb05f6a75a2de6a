"""Port of ops-transformer's AlltoAllMatmul, arch22 non-quantised path (Atlas A3), call for call.

Source: ops-transformer, ``mc2/allto_all_matmul/``: the kernel entry
``op_kernel/arch22/allto_all_matmul.cpp`` (``allto_all_matmul``, its
``SOC_ASCEND910_93`` branch and the macro ``ALLTO_ALL_MATMUL_A3_FP_IMPL``), the class
``AlltoAllMatmulKernelBase`` of ``op_kernel/allto_all_matmul_kernel_base.h`` (``Init``,
``Process``, ``ProcessTile``, ``ProcessTail``), the scheduler ``AlltoAllMatmulPipeLine`` of
``op_kernel/allto_all_matmul_pipeline.h``, and the shared MC2 templates under
``mc2/common/op_kernel/mc2_templates/``: ``HcclCommunication`` (``communicator/hccl_impl.h``:
``Init``, ``PrepareAll``, ``Process``, ``AddIndex``, ``End``), ``MC2AlltoAllPrimitives``
(``primitives/hccl_primitives.h``: ``Prepare``), ``MC2VecTranspose``
(``computation/math/mc2_vec_transpose.h``) and ``MC2FpMatmul``
(``computation/matmul/mc2_fp_matmul.h``), as yuanfang-chen/ops-transformer holds them (in
mirror-cann's 2026-07-21 snapshot the communicator is ``HcclCommunicator`` of
``communicator/hccl_communicator.h``, the same code); the primitives, the transpose and the
matmul are in samples/_mc2_templates.py, shared with the MatmulAlltoAll port as the kernels
share them. The tiling struct is
``AlltoAllMatmulTilingDataA3`` (``op_kernel/arch22/allto_all_matmul_tiling_data_910_93.h``),
the host tiling ``AllToAllFpMatmulTilingBaseA3`` of
``op_host/op_tiling/arch22/allto_all_fp_matmul_tiling_910_93.cpp`` (``SetHcclTiling``,
``SetTilingInfo``) with ``AllToAllMatmulTilingBase`` of
``op_host/op_tiling/allto_all_matmul_tiling_base.cpp`` (``SetUserWorkSpace``,
``TileCommAndCompute``, ``SetAlltoAllMatmulShapeInfo``); described in
docs/notes/mc2-kernels.md.

Which path: the same arch22 entry has a second, Atlas A2 (``SOC_ASCEND910B``) path, the class
``AlltoAllMatmul`` of ``op_kernel/arch22/allto_all_matmul.h`` with
``allto_all_matmul_util.h`` and the host ``allto_all_matmul_tiling_910b.cpp``. It makes no
call of the Hccl class: its host fills a cc tiling of opType 18 ("MultiPut=level0:fullmesh")
that the kernel never reads, and its AIV cores copy tokens straight into the peers'
``windowsIn`` and poll flags there. This port is the path that communicates through the Hccl
client, the A3 one.

What runs unchanged: ``Hccl<HCCL_SERVER_TYPE_AICPU>`` on every core, ``InitV2`` with the
init tiling and ``SetCcTilingV2(offsetof(AlltoAllMatmulTilingDataA3, mc2CcTiling))`` on every
core (AIC and AIV); the communication core is AIV block 0 (``AICSync = false``), the only core
that Prepares, Commits, Waits and Finalizes; per tile group (the tiles, then the tail)
``PrepareAll``: one ``AlltoAll<false>`` per tile, ``repeat = 1``, ``sendCount = tileM * rankK``,
``strideCount = rankM * rankK / rankDim``, send and receive addresses stepping by one tile,
every handle committed at once (``SendCnt = 0, RecvCnt = 1``: communicate first); per tile on
the AIV cores ``Wait`` (the communication core), ``SyncAll<true>``, the transpose of the
received blocks into ``all2all_out`` (64-row by 256-column pieces dealt out to
``2 * GetBlockNum()`` AIV cores), the mode-0 flag 8 barrier of all AIV cores and the mode-2
flag 9 that releases the AI core's AIC; on the AIC cores ``CrossCoreWaitFlag(9)`` and the
tile's matmul; ``End``: the communication core Waits any task not yet waited for and
``Finalize``s, with no ``SyncAll`` before it (no other core uses its Hccl object after
``InitV2``).

Stand-ins: FP16, no bias, x2 not transposed; the matmul (``Mc2MatmulBaseKernel``) is one
torch call per tile and AIC core, each AIC core a share of the tile's rows, and the two
``Mc2MatmulV3TilingData`` members are left out of the tiling struct; the M cut (two tiles of
4 rows and a tail of 2 per rank block) is fixed here rather than computed by the formulaic
tiling (``AlltoAllMM``); the ``Mc2CcTilingConfigBuilder`` is written out as the config
calls its ``build`` makes (``SetReduceType(SUM, FP16, FP16)``); ``all2all_out`` is given, so
the transpose writes there (without it the kernel puts it in the workspace after ``commLen``).

Run: ``python samples/mc2_allto_all_matmul.py`` (4 emulated ranks),
``python -m hccl_py run -n 2 --backend gloo samples/mc2_allto_all_matmul.py``.
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
    HCCL_REDUCE_SUM,
    HCCL_SERVER_TYPE_AICPU,
    PIPE_MTE3,
    Hccl,
    Mc2CcTiling,
    Mc2CcTilingConfig,
    Mc2InitTiling,
    TilingData,
    offsetof,
)

PLATFORM = "A3"  # the tiling's IsCapable admits "Ascend910_93" only
BLOCK_M, K, N = 10, 800, 32  # rows of y per rank (rankM / rankDim), x1's K, x2's N
TILE_M, TILE_CNT, TAIL_M, TAIL_CNT = 4, 2, 2, 1  # the host's cut of BLOCK_M
AIC_CORE_NUM = 2  # blockDim: 2 AIC and 4 AIV cores; K = 800 gives each AIV one transpose piece
ALIGN_ADDR_LEN = 512  # SetUserWorkSpace's alignment of commLen


class AlltoAllMatmulTilingInfoA3(Structure):
    """AlltoAllMatmulTilingInfoA3, member for member."""

    _fields_ = [
        *uint32_fields("rankDim", "tileM", "tileCnt", "tailM", "tailCnt", "biasLen"),
        *uint32_fields("rankM", "rankN", "rankK", "aicCoreNum"),
        ("commLen", c_uint64),
        ("permuteLen", c_uint64),
        ("hcclDataType", c_uint64),
    ]


class AlltoAllMatmulTilingDataA3(TilingData):
    """The tiling struct without its two Mc2MatmulV3TilingData members (the matmul is torch)."""

    _fields_ = [
        ("mc2InitTiling", Mc2InitTiling),
        ("mc2CcTiling", Mc2CcTiling),
        ("alltoAllMatmulTilingInfo", AlltoAllMatmulTilingInfoA3),
    ]


class HcclCommunication:
    """``HcclCommunication<AICSync = false, ServerType, MC2AlltoAllContext, TilingDataType,
    MC2AlltoAllPrimitives, SendCnt = 0, RecvCnt = 1>``: AIV block 0 communicates, every task
    is committed when it is prepared and waited for in Process (COMMUNICATION_WAIT_ONE). The
    A3 kernel takes it with AICPU and AlltoAllMatmulTilingDataA3, the 950 one
    (samples/mc2_allto_all_matmul_950.py) with CCU or AICPU and its own tiling struct."""

    MAX_HCCL_HANDLE_ = 63

    def __init__(self, tiling, ServerType=HCCL_SERVER_TYPE_AICPU, AICSync: bool = False) -> None:
        self.tiling_ = tiling
        self.TilingDataType = type(tiling)
        self.AICSync = AICSync
        self.hccl_ = Hccl[ServerType]()
        self.context_ = MC2AlltoAllContext()
        self.primitive_ = MC2AlltoAllPrimitives()
        self.startIndex_ = self.endIndex_ = 0
        self.hTasks_ = [-1] * self.MAX_HCCL_HANDLE_
        self.taskSuccess_ = [True] * self.MAX_HCCL_HANDLE_

    def Init(self) -> None:
        self.notifyFlag_ = False
        if hp.g_coreType == AIV:
            self.notifyFlag_ = not self.AICSync and hp.GetBlockIdx() == 0
        elif hp.g_coreType == AIC:
            self.notifyFlag_ = self.AICSync and hp.GetBlockIdx() == 0
        self.hccl_.InitV2(hp.GetHcclContext(0), self.tiling_)
        self.hccl_.SetCcTilingV2(offsetof(self.TilingDataType, "mc2CcTiling"))
        self.waitOne = True  # SendCnt == 0 and RecvCnt == 1: COMMUNICATION_WAIT_ONE
        self.taskSuccess_ = [True] * self.MAX_HCCL_HANDLE_

    def GetContextPtr(self) -> MC2AlltoAllContext:
        return self.context_

    def PrepareAll(self, taskCnt: int) -> None:
        if not self.notifyFlag_:  # only the communication core communicates
            return
        for i in range(taskCnt):
            self.hTasks_[self.endIndex_ + i] = self.primitive_.Prepare(self.hccl_, self.context_, i)
        self.AddIndex(taskCnt)
        if self.waitOne:  # communicate first: start every task now
            for i in range(taskCnt):
                self.hccl_.Commit(self.hTasks_[self.startIndex_ + i])
                self.taskSuccess_[self.startIndex_ + i] = False

    def Process(self, taskIndex: int) -> None:
        if not self.notifyFlag_:
            return
        if self.waitOne:
            self.hccl_.Wait(self.hTasks_[self.startIndex_ + taskIndex])
            self.taskSuccess_[self.startIndex_ + taskIndex] = True
        else:
            self.hccl_.Commit(self.hTasks_[self.startIndex_ + taskIndex])
            self.taskSuccess_[self.startIndex_ + taskIndex] = False

    def AddIndex(self, taskCnt: int) -> None:
        if not self.notifyFlag_:
            return
        self.startIndex_ = self.endIndex_
        self.endIndex_ += taskCnt

    def End(self) -> None:
        if self.notifyFlag_:  # wait for every task not waited for yet
            for i in range(self.endIndex_):
                if not self.taskSuccess_[i]:
                    self.hccl_.Wait(self.hTasks_[i])
                    self.taskSuccess_[i] = True
        if self.notifyFlag_:
            self.hccl_.Finalize()


# ---------------------------------------------------------------- allto_all_matmul_pipeline.h
class AlltoAllMatmulPipeLine:
    """AlltoAllMatmulPipeLine: per task, Wait and transpose on AIV, then matmul on AIC."""

    def __init__(self, commStage, transStage, computeStage) -> None:
        self.commStage_, self.transStage_, self.computeStage_ = commStage, transStage, computeStage

    def Init(self) -> None:
        self.commStage_.Init()
        self.computeStage_.Init()

    def GetContext(self):
        return (
            self.commStage_.GetContextPtr(),
            self.transStage_.GetContextPtr(),
            self.computeStage_.GetContextPtr(),
        )

    def Process(self, taskCnt: int) -> None:
        self.commStage_.PrepareAll(taskCnt)
        for index in range(taskCnt):
            if hp.g_coreType == AIV:
                self.commStage_.Process(index)
                hp.SyncAll[True]()
                self.transStage_.Process(index)
                hp.CrossCoreSetFlag[0, PIPE_MTE3](8)  # every AIV core transposed this task
                hp.CrossCoreWaitFlag(8)
                hp.CrossCoreSetFlag[2, PIPE_MTE3](9)  # release this AI core's AIC
            if hp.g_coreType == AIC:
                hp.CrossCoreWaitFlag(9)
                self.computeStage_.Process(index)

    def End(self) -> None:
        self.commStage_.End()
        self.computeStage_.End()


# ---------------------------------------------------------------- allto_all_matmul_kernel_base.h
class AlltoAllMatmulKernelBase:
    """AlltoAllMatmulKernelBase: the addresses and steps of the tiles, then of the tail."""

    def __init__(self, pipeLine: AlltoAllMatmulPipeLine) -> None:
        self.pipeLine_ = pipeLine

    def Init(self, x1, x2, bias, y, all2all_out, workspaceGM, tilingData) -> None:
        self.tilingData_ = tilingData
        info = tilingData.alltoAllMatmulTilingInfo
        self.x1_, self.x2_, self.y_, self.bias_ = x1, x2, y, bias
        self.commOutGM_ = workspaceGM
        self.transOutGM_ = all2all_out
        if all2all_out == hp.NULL:
            self.transOutGM_ = self.commOutGM_ + info.commLen
        self.pipeLine_.Init()
        self.comm, self.trans, self.compute = self.pipeLine_.GetContext()

    def Process(self) -> None:
        info = self.tilingData_.alltoAllMatmulTilingInfo
        if info.tileCnt > 0:
            self.ProcessTile(info.tileCnt)
        if info.tailCnt > 0:
            self.ProcessTail(info.tailCnt)
        self.pipeLine_.End()

    def ProcessTile(self, taskCnt: int) -> None:
        info = self.tilingData_.alltoAllMatmulTilingInfo
        tileMMultiRankK = info.tileM * info.rankK
        mm = self.compute.baseData
        mm.aGM, mm.bGM, mm.cGM, mm.biasGM = self.transOutGM_, self.x2_, self.y_, self.bias_
        mm.aOffset = tileMMultiRankK * info.rankDim * SIZEOF_HALF
        mm.bOffset = 0
        mm.cOffset = info.tileM * info.rankN * SIZEOF_HALF
        self.compute.rows = info.tileM  # tilingDataPtr = &mc2MmV3TileTilingData

        t = self.trans
        t.transposeSrcAddr, t.transposeDstAddr = self.commOutGM_, self.transOutGM_
        t.transposeSrcOffset = tileMMultiRankK * SIZEOF_HALF
        t.transposeDstOffset = tileMMultiRankK * info.rankDim * SIZEOF_HALF
        t.nextSrcBlockOffset = info.rankM * info.rankK // info.rankDim
        t.nextDstBlockOffset = info.rankK
        t.rankCnt = info.rankDim
        t.innerAxis = info.rankK
        t.transM = info.tileM
        t.innerOffsetIn = info.rankK
        t.innerOffsetOut = info.rankK * info.rankDim

        c = self.comm
        c.taskCnt = info.tileCnt
        c.sendBuffer, c.recvBuffer = self.x1_, self.commOutGM_
        c.sendOffset = tileMMultiRankK * SIZEOF_HALF
        c.recvOffset = c.sendOffset
        c.sendCount = tileMMultiRankK
        c.strideCount = t.nextSrcBlockOffset
        c.hcclDataType = info.hcclDataType
        self.pipeLine_.Process(taskCnt)

    def ProcessTail(self, taskCnt: int) -> None:
        info = self.tilingData_.alltoAllMatmulTilingInfo
        tailMMultiRankK = info.tailM * info.rankK
        tileCntMultitileMMultiRankK = info.tileCnt * info.tileM * info.rankK
        tilesBytes = tileCntMultitileMMultiRankK * SIZEOF_HALF
        mm = self.compute.baseData
        mm.aGM = self.transOutGM_ + tilesBytes * info.rankDim
        mm.bGM = self.x2_
        mm.cGM = self.y_ + info.tileCnt * info.tileM * info.rankN * SIZEOF_HALF
        mm.aOffset = tailMMultiRankK * info.rankDim * SIZEOF_HALF
        mm.bOffset = 0
        mm.cOffset = info.tailM * info.rankN * SIZEOF_HALF
        self.compute.rows = info.tailM  # tilingDataPtr = &mc2MmV3TailTilingData

        t = self.trans
        t.transposeSrcAddr = self.commOutGM_ + tilesBytes
        t.transposeDstAddr = self.transOutGM_ + tilesBytes * info.rankDim
        t.transposeSrcOffset = tailMMultiRankK * SIZEOF_HALF
        t.transposeDstOffset = tailMMultiRankK * info.rankDim * SIZEOF_HALF
        t.transM = info.tailM

        c = self.comm
        c.taskCnt = info.tailCnt
        c.sendBuffer = self.x1_ + tilesBytes
        c.recvBuffer = self.commOutGM_ + tilesBytes
        c.sendOffset = tailMMultiRankK * SIZEOF_HALF
        c.recvOffset = c.sendOffset
        c.sendCount = tailMMultiRankK
        self.pipeLine_.Process(taskCnt)


def allto_all_matmul(
    x1,
    x2,
    bias,
    x1_scale,
    x2_scale,
    comm_scale,
    x1_offset,
    x2_offset,
    y,
    all2all_out,
    workspaceGM,
    tilingGM,
):
    """The kernel entry, ``SOC_ASCEND910_93`` and FP16 bias: ALLTO_ALL_MATMUL_A3_FP_IMPL."""
    tilingData = hp.GET_TILING_DATA_WITH_STRUCT(AlltoAllMatmulTilingDataA3, tilingGM)
    commImplName = HcclCommunication(tilingData)
    transposeImplName = MC2VecTranspose()
    info = tilingData.alltoAllMatmulTilingInfo
    matmulImplName = MC2FpMatmul(info, info.rankK * info.rankDim)
    SchedulerImpl = AlltoAllMatmulPipeLine(commImplName, transposeImplName, matmulImplName)
    op = AlltoAllMatmulKernelBase(SchedulerImpl)
    op.Init(x1, x2, bias, y, all2all_out, workspaceGM, tilingData)
    op.Process()


def make_tiling(rankDim: int) -> AlltoAllMatmulTilingDataA3:
    """Host side: SetUserWorkSpace, the M cut (TileCommAndCompute), SetTilingInfo, SetHcclTiling."""
    tiling = AlltoAllMatmulTilingDataA3()
    info = tiling.alltoAllMatmulTilingInfo
    info.rankDim, info.rankM, info.rankN, info.rankK = rankDim, rankDim * BLOCK_M, N, K
    info.tileM, info.tileCnt, info.tailM, info.tailCnt = TILE_M, TILE_CNT, TAIL_M, TAIL_CNT
    info.aicCoreNum = AIC_CORE_NUM
    commBytes = info.rankM * info.rankK * SIZEOF_HALF
    info.commLen = -(-commBytes // ALIGN_ADDR_LEN) * ALIGN_ADDR_LEN
    info.permuteLen = 0  # all2all_out is given (allToAllOutFlag): no permute buffer
    info.hcclDataType = FP16

    # Mc2CcTilingConfigBuilder::create(group, HCCL_CMD_ALLTOALL, ALL_TO_ALL)
    #   .withReduceType(opName, SUM, x1 type, x1 type).build()
    allToAllTilingConfig = Mc2CcTilingConfig(
        WORLD_GROUP, HCCL_CMD_ALLTOALL, "AlltoAll=level0:fullmesh;level1:pairwise"
    )
    allToAllTilingConfig.SetReduceType(HCCL_REDUCE_SUM, FP16, FP16)
    allToAllTilingConfig.GetTiling(tiling.mc2InitTiling)
    allToAllTilingConfig.GetTiling(tiling.mc2CcTiling)
    return tiling


def inputs(rank: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """x1 (rankM, K) and x2 (K * rankDim, N) of ``rank``: small integers, exact products."""
    return random_ints(rank, (n * BLOCK_M, K)), random_ints(1000 + rank, (K * n, N))


def reference(rank: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """numpy: rank j gets rows j of every rank's x1, side by side along K, then one matmul."""
    rows = slice(rank * BLOCK_M, (rank + 1) * BLOCK_M)
    gathered = np.concatenate([inputs(r, n)[0][rows] for r in range(n)], axis=1)
    y = gathered.astype(np.float32) @ inputs(rank, n)[1].astype(np.float32)
    return gathered, y.astype(np.float16)


def main() -> list[str]:
    """One launch on every rank; all2all_out and y against the numpy reference."""
    rank, n = hp.get_rank(), hp.get_world_size()
    x1, x2 = inputs(rank, n)
    tiling = make_tiling(n)
    y, all2all_out = zeros(BLOCK_M, N), zeros(BLOCK_M, K * n)
    workspace = zeros(tiling.alltoAllMatmulTilingInfo.commLen // SIZEOF_HALF)
    hp.launch(
        allto_all_matmul,
        on_device(x1),
        on_device(x2),
        None,
        None,
        None,
        None,
        None,
        None,
        y,
        all2all_out,
        workspace,
        tiling,
        block_dim=tiling.alltoAllMatmulTilingInfo.aicCoreNum,
        kernel_type="mix_aic_1_2",
    )
    gathered, y_ref = reference(rank, n)
    return [compare("all2all_out", all2all_out, gathered), compare("y", y, y_ref)]


if __name__ == "__main__":
    run_sample(main, platform=PLATFORM)
