"""Port of ops-transformer's MatmulAllReduce on Ascend 950 (arch35, FP16, non-quantised), call for call.

Source: mirror-cann/ops-transformer at 3a280bcc (2026-07-21), ``mc2/matmul_all_reduce/``, every
file read at that commit: the kernel entry ``op_kernel/arch35/matmul_all_reduce_apt.cpp``
(``matmul_all_reduce``, ``fp_matmul_all_reduce`` with ``MATMUL_WITH_ADD`` false), the tiling key
``op_kernel/matmul_all_reduce_apt_tiling_key.h``, ``op_kernel/arch35/matmul_all_reduce_910_general.h``
(``MatmulAllReduce910General``: ``Process``, ``InnerProcess``, ``INVOKE_MC2_910_OP_IMPL``), its two
bases ``op_kernel/arch35/matmul_all_reduce_based_all_reduce.h`` (``MatmulAllReduceBase<...,
false, commMode>``) and ``op_kernel/arch35/matmul_all_reduce_based_a2a_rs_ag.h``
(``MatmulAllReduceBase<..., true, commMode>``: ``Init``, ``CalcNeededPad``, ``CalcGMAddr``,
``PrePareHCCL``, ``PostProcEachTurn``, ``WaitAlltoAllEachTurn``, ``ReduceSumAndAllGather``,
``HcclFinalize``), ``op_kernel/common.h`` (``MC2TilingHeader``, ``MC2GmAddrs``,
``HcclTypeSelector``, ``Mc2SyncAll``), the tiling struct ``MatmulAllReduce910TilingDataA5``
(``op_kernel/arch35/matmul_all_reduce_tiling_struct_ar35.h``), ``mc2/common/op_kernel/
gm_ub_gm_copy.h`` (``GmUbGmCopy``) and ``reduce_sum_cast_fp32.h`` (``ReduceSumForAlltoAll``,
imported from samples/mc2_matmul_a2a_vec_reduce_950.py), the matmul ``Mc2MatmulAswKernel`` with
``Mc2MatmulAswBlock`` (``mc2/3rd/mat_mul_v3/op_kernel/arch35/mat_mul_asw_kernel.h``,
``mat_mul_asw_block.h``), and the host ``MatmulAllReduceTilingA5``
(``op_host/op_tiling/arch35/matmul_all_reduce_tiling_950.cpp``: ``SetMc2HcommAllReduce``,
``SetMc2HcommTwoShot``, ``GetTilingKey``, ``GetWorkspaceSizeForA2ARSAG``, ``GetWorkspaceSize``)
on ``MatmulAllReduceTilingBase`` (``matmul_all_reduce_tiling_base.cpp``: ``DoRCSTiling``,
``GetAndConvertCommMode``, ``GetWorkspaceSize``) and ``IsUseA2APath``
(``mc2/common/op_host/op_tiling/mc2_tiling_utils.h``); described in docs/notes/mc2-kernels.md,
section 33.

What it computes: rank r holds x1 ``(M, K)``, every rank the same x2 ``(K, N)``; every rank gets
y = the sum over ranks of x1 @ x2.

Which path: ``IsUseA2APath`` (DAV_3510 and 4 or 8 ranks) sets the tiling key's ``TPL_A2A_RS_AG``
whatever ``comm_mode``; on other rank counts the kernel is cube-only (``MIX_AIC_1_0``) and
AllReduces, on 4 or 8 it is mixed (``MIX_AIC_1_2``) and builds the AllReduce from an AlltoAll, a
vector reduce and an AllGather. 2 ranks (gloo, the mutation suite) run the first, 4 emulated
ranks the second; each launches twice, with comm_mode "ccu" (``Hccl<CCU>``) and "ai_cpu".

What runs unchanged: ``InitV2(GetHcclContext<0>(), tilingData)`` and ``SetCcTilingV2(offsetof(
MC2TilingHeader, mc2CcTiling))`` on every core (the A2A path also ``mc2CcTilingComm``, the
AllGather's); the matmul output in the workspace (``cGM = workspaceGM + nd2NzWorkLen + biasLen``,
the raw workspace, not ``userWS``); per tile (tiles, then the tail) the ASW matmul on the AIC cores
below ``usedCoreNum``. AllReduce path: cube block 0 Prepares one ``AllReduce`` per group (repeat
``tileCnt`` / ``tailCnt``) from the workspace into y, Commits after each tile's ``Mc2SyncAll<ON_CUBE>``
(``CrossCoreSetFlag<0, PIPE_FIX>(3)`` + ``CrossCoreWaitFlag(3)``), Waits each handle once per repeat,
syncs and Finalizes. A2A path: AIV block 0 Prepares up front one ``AlltoAll<false>`` per tile
(``CeilDiv(tileM * N, rankDim)`` elements per peer, receive areas 512-element aligned) and one
``AllGather<false>`` per tile (repeat 1); per tile ``SyncAll<false>`` and its AlltoAll's Commit; on
the AIV cores a Wait per tile and ``SyncAll()``, the first tile's vector reduce overlapped with the
last AlltoAll, then per later tile ``SyncAll()``, the previous tile's AllGather Commit and the
tile's reduce, the last AllGather's Commit, a Wait per AllGather, and where a tile's rows are not
a multiple of rankDim (``needPad_``) the AllGather lands in the workspace and ``GmUbGmCopy`` copies
it into y between two ``SyncAll()``; AIV block 0 Finalizes. Host: ``Mc2CcTilingConfig(group,
HCCL_CMD_ALLREDUCE, "AllReduce=level0:fullmesh", SUM, FP16, FP16)`` or, two-shot,
``(group, HCCL_CMD_ALLTOALL, "AlltoAll=level0:fullmesh", ...)`` then ``SetOpType(ALLGATHER)``,
``SetAlgConfig("AllGather=level0:fullmesh")`` for ``mc2CcTilingComm``; ``SetCommEngine(2)`` (AI
CPU) or ``(6)`` (CCU); workspace ``softSyncSize + M * N * 2``, the A2A path's ``3 * commWorkSpace +
commWorkSpace / rankDim`` more; ``blockDim = aicCoreNum``.

Stand-ins: FP16, no bias, x2 not transposed, no ``isAdd`` (the ``MATMUL_WITH_ADD`` key); the M cut
(three tiles of 8 rows, then a "tail" of 10: the formulaic cut's long tile after the short ones) and
the matmul tilings (base blocks 4 x 2048, ``usedCoreNum`` 2 of 3 AIC cores, window 4, no split) are
fixed rather than computed by the formulaic and MatMulV3 tilings; N = 8192, so that on 4 ranks
every AlltoAll slice (16384 or 20480 elements) is two reduce blocks of 15360 and two AIV cores
reduce it, and the final copy is 19 blocks over all six; the tail's 10 rows are not a multiple of
rankDim, so ``needPad_`` holds; each base block is one torch matmul; UB queues are torch tensors;
no ``libApiWorkSpaceSize_`` (system workspace 0 bytes, so the raw and user workspaces coincide);
``OOMInit`` checks no address range.

Run: ``python samples/mc2_matmul_all_reduce_950.py`` (4 emulated ranks; ``python -m hccl_py run
-n 8`` for 8), ``python -m hccl_py run -n 2 --backend gloo samples/mc2_matmul_all_reduce_950.py``.
"""

import numpy as np
from _common import WORLD_GROUP, compare, on_device, random_ints, run_sample, zeros
from _mc2 import FP16, SIZEOF_HALF, matmul
from _mc2_templates import AswBasicIndex, Mc2MatMulV3TilingData, RCSTiling
from mc2_matmul_a2a_vec_reduce_950 import (
    TOTAL_UB_SIZE,
    CeilAlign,
    CeilDiv,
    FloorAlign,
    ReduceSumForAlltoAll,
)

import hccl_py as hp
from hccl_py import (
    AIV,
    HCCL_CMD_ALLGATHER,
    HCCL_CMD_ALLREDUCE,
    HCCL_CMD_ALLTOALL,
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

PLATFORM = "950"
M, K, N = 34, 64, 8192  # a tile's AlltoAll slice, 8 x 8192 / 4 elements, is two reduce blocks
TILE_M, TILE_CNT, TAIL_M, TAIL_CNT = 8, 3, 10, 1  # the host's M cut, the long tile last
AIC_CORE_NUM, USED_CORE_NUM, BASE_M, BASE_N, ASW_WINDOW_LEN = 3, 2, 4, 2048, 4
ON_CUBE = 0  # Mc2CoreType
TPL_COMM_MODE_CCU, TPL_COMM_MODE_AICPU = 0, 1  # matmul_all_reduce_apt_tiling_key.h
ENGINE_AICPU, ENGINE_CCU_SCHED = 2, 6  # mc2_comm_utils.h
STANDARD_CARD_4P, EIGHT_P_8P, AC_MAX_AIV, FIVE_ONE_TWO = 4, 8, 64, 512
HCCL_DATA_TYPE = FP16  # DTYPE_Y


class MC2TilingHeader(TilingData):
    """common.h, ``__NPU_ARCH__ == 3510``: the Hccl tilings, then the RCSTiling."""

    _fields_ = [
        ("mc2InitTiling", Mc2InitTiling),
        ("mc2CcTiling", Mc2CcTiling),
        ("mc2CcTilingComm", Mc2CcTiling),
        ("param", RCSTiling),
    ]


class MatmulAllReduce910TilingDataA5(MC2TilingHeader):
    _fields_ = [
        ("mC2Mmv3TileTilingData", Mc2MatMulV3TilingData),
        ("mC2Mmv3TailTilingData", Mc2MatMulV3TilingData),
    ]


class MC2GmAddrs:
    def __init__(self, aGM, bGM, biasGM, addGM, cGM, workspaceGM, outputGM) -> None:
        self.aGM, self.bGM, self.biasGM, self.addGM = aGM, bGM, biasGM, addGM
        self.cGM, self.workspaceGM, self.outputGM = cGM, workspaceGM, outputGM


class MC2TileInfo:
    def __init__(self, mmTiling) -> None:
        self.mmTiling = mmTiling
        self.aOffset = self.aAddrOffset = self.cOffset = self.cAddrOffset = 0
        self.hcclHandleId = 0


def HcclTypeSelector(commMode: int):
    return Hccl[HCCL_SERVER_TYPE_AICPU if commMode == TPL_COMM_MODE_AICPU else HCCL_SERVER_TYPE_CCU]


def Mc2SyncAll() -> None:
    """common.h's ``Mc2SyncAll<ON_CUBE>``, the core type of both keys ported (the
    ``MATMUL_WITH_ADD`` key's ``ON_CUBE_AND_VECTOR`` is ``SyncAll<false>``): ``PipeBarrier<PIPE_ALL>``
    (program order here), then a mode-0 barrier of the AIC cores on flag 3."""
    hp.CrossCoreSetFlag[0, PIPE_FIX](3)
    hp.CrossCoreWaitFlag(3)


def tile_offsets(info: MC2TileInfo, mVal: int) -> None:
    """Init: a turn's offsets into x1 and into the matmul output (elements and bytes)."""
    info.aOffset = mVal * info.mmTiling.Ka
    info.aAddrOffset = info.aOffset * SIZEOF_HALF
    info.cOffset = mVal * info.mmTiling.N
    info.cAddrOffset = info.cOffset * SIZEOF_HALF


# ---------------------------------------------------------------- mat_mul_asw_{kernel,block}.h
class Mc2MatmulAswKernel(AswBasicIndex):
    """Mc2MatmulAswKernel with Mc2MatmulAswBlock: the turn's M x N output in baseM x baseN
    blocks, block ``blockIdx + j * usedCoreNum`` in round j, in the ASW window order."""

    def Init(self, aGM, bGM, cGM, tiling: Mc2MatMulV3TilingData) -> None:
        cube = self.cube = tiling.tCubeTiling
        self.a = hp.gm_tensor(aGM, FP16, cube.M * cube.Ka).view(cube.M, cube.Ka)
        self.b = hp.gm_tensor(bGM, FP16, cube.Kb * cube.N).view(cube.Kb, cube.N)
        self.c = hp.gm_tensor(cGM, FP16, cube.M * cube.N).view(cube.M, cube.N)
        self.mCnt, self.nCnt = CeilDiv(cube.M, cube.baseM), CeilDiv(cube.N, cube.baseN)
        self.totalCnt = self.mCnt * self.nCnt
        self.round = CeilDiv(self.totalCnt, cube.usedCoreNum)
        self.mainWindow = min(tiling.aswWindowLen, self.mCnt)
        self.mainRow = self.mCnt // self.mainWindow - 1
        self.tailWindow = self.mCnt - self.mainRow * self.mainWindow

    def Process(self) -> None:
        if hp.g_coreType == AIV:
            return
        cube = self.cube
        for j in range(self.round):
            index = hp.GetBlockIdx() + j * cube.usedCoreNum
            if index >= self.totalCnt:
                continue
            mIdx, nIdx = self.UpdateBasicIndex(index)
            m0, n0 = mIdx * cube.baseM, nIdx * cube.baseN
            matmul(
                self.c[m0 : m0 + cube.baseM, n0 : n0 + cube.baseN],
                self.a[m0 : m0 + cube.baseM],
                self.b[:, n0 : n0 + cube.baseN],
            )

    def End(self) -> None:
        pass


# ---------------------------------------------------------------- gm_ub_gm_copy.h
class GmUbGmCopy(ReduceSumForAlltoAll):
    """GmUbGmCopy<half>: the same block split over the AIV cores as ReduceSumForAlltoAll (whose
    InitParams and ComputeTailAivId it shares, with two UB buffers), each block copied through UB."""

    def Init(self, dataSize, aivNum, srcAddr, dstAddr) -> None:
        self.InitParams(dataSize, 0, 1, aivNum)
        maxPerBlockNum_ = FloorAlign(TOTAL_UB_SIZE // 2, 32) // SIZEOF_HALF  # UB_BUFFER_NUM 2
        assert self.perBlockNum_ == min(1024 * 15, maxPerBlockNum_)
        self.srcAddr_, self.dstAddr_ = srcAddr, dstAddr

    def Process(self) -> None:
        lastAivBlockIdx = self.assignedBlockNums_ - 1
        isLastAiv = self.aivId_ == self.lastAivId_
        for curBlock in range(self.assignedBlockNums_):
            isTailBlock = isLastAiv and curBlock == lastAivBlockIdx
            copyBlockNum = self.tailPerBlockNumAlign_ if isTailBlock else self.perBlockNum_
            curBlockOffset = self.curAivOffset_ + curBlock * self.perBlockNum_
            self.GmUbGmDataBlockCopy(curBlockOffset, copyBlockNum, isTailBlock)

    def GmUbGmDataBlockCopy(self, curOffset, elemsPerBlock, isTail) -> None:
        tmp = hp.gm_tensor(self.srcAddr_ + curOffset * SIZEOF_HALF, FP16, elemsPerBlock).clone()
        count = self.tailBytes_ // SIZEOF_HALF if isTail else elemsPerBlock  # DataCopyPad
        hp.gm_tensor(self.dstAddr_ + curOffset * SIZEOF_HALF, FP16, count).copy_(tmp[:count])


# ---------------------------------------------------------------- matmul_all_reduce_based_all_reduce.h
class MatmulAllReduceBaseAllReduce:
    """MatmulAllReduceBase<XType, YType, CoreType, false, commMode>."""

    def __init__(self, addrs: MC2GmAddrs, tilingData, coreType: int, commMode: int) -> None:
        self.addrs_, self.tilingData_ = addrs, tilingData
        if coreType == ON_CUBE:
            self.notifyFlag_ = hp.GetBlockIdx() == 0
        else:
            self.notifyFlag_ = hp.g_coreType == AIV and hp.GetBlockIdx() == 0
        self.paramInTiling_ = tilingData.param
        self.hccl_ = HcclTypeSelector(commMode)()

    def Init(self) -> None:
        p, addrs = self.paramInTiling_, self.addrs_
        self.hccl_.InitV2(hp.GetHcclContext(0), self.tilingData_)
        self.hccl_.SetCcTilingV2(offsetof(MC2TilingHeader, "mc2CcTiling"))
        addrs.cGM = addrs.workspaceGM + p.nd2NzWorkLen + p.biasLen  # __NPU_ARCH__ == 3510
        self.addFlag_ = p.isAdd != 0
        self.tailFlag_ = p.tailCnt != 0
        self.isOneTileFlag_ = p.tileCnt == 1 and p.tailCnt == 0
        tile, tail = self.tileInfo_, self.tailInfo_
        tile_offsets(tile, p.rankM if self.isOneTileFlag_ else tile.mmTiling.M)
        if self.tailFlag_:
            tile_offsets(tail, tail.mmTiling.M)
        if self.notifyFlag_:
            tile.hcclHandleId = self.hccl_.AllReduce(
                addrs.cGM, addrs.outputGM, tile.cOffset, HCCL_DATA_TYPE, HCCL_REDUCE_SUM, p.tileCnt
            )
            if self.tailFlag_:
                offset = tile.cAddrOffset * p.tileCnt
                tail.hcclHandleId = self.hccl_.AllReduce(
                    addrs.cGM + offset,
                    addrs.outputGM + offset,
                    tail.cOffset,
                    HCCL_DATA_TYPE,
                    HCCL_REDUCE_SUM,
                    p.tailCnt,
                )

    def PostProcEachTurn(self, handleId, aOffset, cOffset, index=0) -> None:
        # the addFlag_ branch (MatmulAllReduceAddX3Kernel) is the MATMUL_WITH_ADD key's
        self.addrs_.aGM += aOffset
        self.addrs_.cGM += cOffset
        Mc2SyncAll()
        if self.notifyFlag_:
            self.hccl_.Commit(handleId)

    def HcclFinalize(self) -> None:
        p = self.paramInTiling_
        if self.notifyFlag_:
            for _ in range(p.tileCnt):
                self.hccl_.Wait(self.tileInfo_.hcclHandleId)
            if self.tailFlag_:
                for _ in range(p.tailCnt):
                    self.hccl_.Wait(self.tailInfo_.hcclHandleId)
        Mc2SyncAll()
        if self.notifyFlag_:
            self.hccl_.Finalize()


# ---------------------------------------------------------------- matmul_all_reduce_based_a2a_rs_ag.h
class MatmulAllReduceBaseA2aRsAg:
    """MatmulAllReduceBase<XType, YType, CoreType, true, commMode>: AlltoAll, vector reduce,
    AllGather; the AIV cores do everything after the matmuls."""

    A2A_VSUM_AG_MAX_HANDLE_ID_NUM = 16

    def __init__(self, addrs: MC2GmAddrs, tilingData, coreType: int, commMode: int) -> None:
        self.addrs_, self.tilingData_ = addrs, tilingData
        self.paramInTiling_ = tilingData.param
        self.rankNum_ = self.paramInTiling_.rankDim
        self.hccl_ = HcclTypeSelector(commMode)()
        n = self.A2A_VSUM_AG_MAX_HANDLE_ID_NUM
        self.all2allHandleId_, self.allgatherHandleId_ = [0] * n, [0] * n
        self.all2allSendGM_, self.all2allRecvGM_ = [None] * n, [None] * n
        self.allgatherSendGM_, self.allgatherRecvGM_ = [None] * n, [None] * n
        self.reduceSum_, self.dataCopy_ = ReduceSumForAlltoAll(), GmUbGmCopy()

    def Init(self) -> None:
        p, addrs = self.paramInTiling_, self.addrs_
        self.notifyFlag_ = hp.g_coreType == AIV and hp.GetBlockIdx() == 0
        self.hccl_.InitV2(hp.GetHcclContext(0), self.tilingData_)
        self.hccl_.SetCcTilingV2(offsetof(MC2TilingHeader, "mc2CcTiling"))
        self.hccl_.SetCcTilingV2(offsetof(MC2TilingHeader, "mc2CcTilingComm"))
        addrs.cGM = addrs.workspaceGM + p.nd2NzWorkLen + p.biasLen  # __DAV_C310__
        self.tailFlag_ = p.tailCnt != 0
        self.addFlag_ = p.isAdd != 0
        self.isOneTileFlag_ = p.tileCnt == 1 and p.tailCnt == 0
        tile, tail = self.tileInfo_, self.tailInfo_
        mVal = p.rankM if self.isOneTileFlag_ else tile.mmTiling.M
        tile_offsets(tile, mVal)
        if self.tailFlag_:
            tile_offsets(tail, tail.mmTiling.M)
        self.CalcNeededPad(mVal, tail.mmTiling.M)
        self.CalcGMAddr()

    def CalcCeilAlignGMSize(self, mnValue: int, count: int) -> int:
        return (CeilAlign(mnValue, FIVE_ONE_TWO) - mnValue) * count

    def CalcGMAddr(self) -> None:
        p, tile, tail = self.paramInTiling_, self.tileInfo_, self.tailInfo_
        self.tileAndTailNum_ = p.tileCnt + p.tailCnt
        padLen = self.CalcCeilAlignGMSize(tile.cOffset, p.tileCnt) + self.CalcCeilAlignGMSize(
            tail.cOffset, p.tailCnt
        )
        padAddrSize = padLen * SIZEOF_HALF
        self.cgmAddr_ = tile.cAddrOffset * p.tileCnt + tail.cAddrOffset * p.tailCnt
        self.cgmLen_ = tile.cOffset * p.tileCnt + tail.cOffset * p.tailCnt
        self.all2allInGM_ = self.addrs_.cGM
        self.all2allOutGM_ = self.all2allInGM_ + self.cgmAddr_ + padAddrSize  # the matmul's result
        self.reduceSumInGM_ = self.all2allOutGM_
        self.reduceSumOutGM_ = self.reduceSumInGM_ + self.cgmAddr_ + padAddrSize
        self.allgatherInGM_ = self.reduceSumOutGM_
        if not self.needPad_:
            self.allgatherOutGM_ = self.addrs_.outputGM
        else:
            self.allgatherOutGM_ = (
                self.reduceSumOutGM_ + (self.cgmAddr_ + padAddrSize) // self.rankNum_
            )
        self.tileAlign_ = CeilAlign(tile.cOffset, FIVE_ONE_TWO)
        self.tailAlign_ = CeilAlign(tail.cOffset, FIVE_ONE_TWO)
        self.tileAddrAlign_ = self.tileAlign_ * SIZEOF_HALF
        self.tailAddrAlign_ = self.tailAlign_ * SIZEOF_HALF
        self.aivNum_ = hp.GetBlockNum() * hp.GetTaskRatio()
        if self.notifyFlag_:
            self.PrePareHCCL()

    def PrePareHCCL(self) -> None:
        p, tile, tail, hccl = self.paramInTiling_, self.tileInfo_, self.tailInfo_, self.hccl_
        groups = [(i, tile.cAddrOffset * i, self.tileAddrAlign_ * i) for i in range(p.tileCnt)]
        groups += [
            (
                p.tileCnt + i,
                tile.cAddrOffset * p.tileCnt + tail.cAddrOffset * i,
                self.tileAddrAlign_ * p.tileCnt + self.tailAddrAlign_ * i,
            )
            for i in range(p.tailCnt)
        ]
        for index, indexOffset, alignedIndexOffset in groups:
            self.all2allSendGM_[index] = self.all2allInGM_ + indexOffset  # contiguous tiles
            self.all2allRecvGM_[index] = self.all2allOutGM_ + alignedIndexOffset  # aligned tiles
            self.allgatherSendGM_[index] = self.allgatherInGM_ + alignedIndexOffset // self.rankNum_
            self.allgatherRecvGM_[index] = self.allgatherOutGM_ + indexOffset
            cOffset = tile.cOffset if index < p.tileCnt else tail.cOffset
            ceilDataCount = CeilDiv(cOffset, self.rankNum_)
            self.all2allHandleId_[index] = hccl.AlltoAll[False](
                self.all2allSendGM_[index],
                self.all2allRecvGM_[index],
                ceilDataCount,
                HCCL_DATA_TYPE,
            )
        for index, _, _ in groups:
            cOffset = tile.cOffset if index < p.tileCnt else tail.cOffset
            ceilDataCount = CeilDiv(cOffset, self.rankNum_)
            self.allgatherHandleId_[index] = hccl.AllGather[False](
                self.allgatherSendGM_[index],
                self.allgatherRecvGM_[index],
                ceilDataCount,
                HCCL_DATA_TYPE,
                0,
                1,
            )

    def CalcNeededPad(self, mTileValue: int, mTailValue: int) -> None:
        tilePad = (self.rankNum_ - mTileValue % self.rankNum_) % self.rankNum_
        tailPad = (self.rankNum_ - mTailValue % self.rankNum_) % self.rankNum_
        self.needPad_ = tilePad != 0 or tailPad != 0

    def PostProcEachTurn(self, handleId, aOffset, cOffset, index=0) -> None:
        # the addFlag_ branch (MatmulAllReduceAddX3Kernel) is the MATMUL_WITH_ADD key's
        self.addrs_.aGM += aOffset
        self.addrs_.cGM += cOffset
        hp.SyncAll[False]()
        if self.notifyFlag_:
            self.hccl_.Commit(self.all2allHandleId_[index])

    def ReduceSum(self, cOffset: int, addrAlign: int) -> None:
        """``reduceSum_.Init(CeilDiv(cOffset, rankNum_), 0, ...)``, ``ExecuteReduceSum``, and the
        advance of both addresses, as written at each of the source's three call sites."""
        ceilDataCount = CeilDiv(cOffset, self.rankNum_)
        self.reduceSum_.Init(
            ceilDataCount, 0, self.rankNum_, self.aivNum_, self.reduceSumInGM_, self.reduceSumOutGM_
        )
        self.reduceSum_.ExecuteReduceSum()
        self.reduceSumInGM_ += addrAlign  # reduceSumIn: tiles apart
        self.reduceSumOutGM_ += addrAlign // self.rankNum_

    def WaitAlltoAllEachTurn(self, tailFlag: bool, turnCnt: int) -> None:
        if hp.g_coreType != AIV:
            return
        for i in range(turnCnt):
            index = i + self.paramInTiling_.tileCnt if tailFlag else i
            if not self.isOneTileFlag_ and index == self.tileAndTailNum_ - 1:
                self.ReduceSum(self.tileInfo_.cOffset, self.tileAddrAlign_)  # the first tile's
            if self.notifyFlag_:
                self.hccl_.Wait(self.all2allHandleId_[index])
            hp.SyncAll()  # the other cores wait for the round's AlltoAll

    def ReduceSumAndAllGather(self) -> None:
        if hp.g_coreType != AIV:
            return
        p = self.paramInTiling_
        for i in range(p.tileCnt):
            hp.SyncAll()  # the reduce is done before the AllGather
            if self.notifyFlag_ and i >= 1:
                self.hccl_.Commit(self.allgatherHandleId_[i - 1])
            if self.isOneTileFlag_ or i >= 1:
                self.ReduceSum(self.tileInfo_.cOffset, self.tileAddrAlign_)
        for i in range(p.tailCnt):
            hp.SyncAll()
            if self.notifyFlag_:
                self.hccl_.Commit(self.allgatherHandleId_[p.tileCnt + i - 1])
            self.ReduceSum(self.tailInfo_.cOffset, self.tailAddrAlign_)
        hp.SyncAll()
        if self.notifyFlag_:
            self.hccl_.Commit(self.allgatherHandleId_[self.tileAndTailNum_ - 1])

    def HcclFinalize(self) -> None:
        if self.notifyFlag_:
            for i in range(self.tileAndTailNum_):
                self.hccl_.Wait(self.allgatherHandleId_[i])
        if self.needPad_ and hp.g_coreType == AIV:
            hp.SyncAll()
            self.dataCopy_.Init(
                self.cgmLen_, self.aivNum_, self.allgatherOutGM_, self.addrs_.outputGM
            )
            self.dataCopy_.Process()
            hp.SyncAll()
        if self.notifyFlag_:
            self.hccl_.Finalize()


# ---------------------------------------------------------------- matmul_all_reduce_910_general.h
class MatmulAllReduce910General:
    """MatmulAllReduce910General<..., MmType, CoreType, basedA2aRsAg, commMode>; the two
    subclasses below are the two values of ``basedA2aRsAg``, which picks the base."""

    basedA2aRsAg: bool

    def __init__(self, addrs: MC2GmAddrs, tilingData, coreType: int, commMode: int) -> None:
        super().__init__(addrs, tilingData, coreType, commMode)
        self.mc2TilingData_ = tilingData
        self.tileInfo_ = MC2TileInfo(tilingData.mC2Mmv3TileTilingData.tCubeTiling)
        self.tailInfo_ = MC2TileInfo(tilingData.mC2Mmv3TailTilingData.tCubeTiling)

    def Process(self) -> None:
        p = self.paramInTiling_
        self.InnerProcess(False, p.tileCnt, self.tileInfo_)
        if self.tailFlag_:
            self.InnerProcess(True, p.tailCnt, self.tailInfo_)
        if self.basedA2aRsAg:
            self.ReduceSumAndAllGather()
        self.HcclFinalize()

    def InnerProcess(self, tailFlag: bool, turnCnt: int, tileInfo: MC2TileInfo) -> None:
        t = self.mc2TilingData_
        tiling = t.mC2Mmv3TailTilingData if tailFlag else t.mC2Mmv3TileTilingData
        mmOp = Mc2MatmulAswKernel()
        for i in range(turnCnt):
            if hp.GetBlockIdx() < tiling.tCubeTiling.usedCoreNum:
                mmOp.Init(self.addrs_.aGM, self.addrs_.bGM, self.addrs_.cGM, tiling)
                mmOp.Process()
                mmOp.End()
            index = i + self.paramInTiling_.tileCnt if tailFlag else i
            self.PostProcEachTurn(
                tileInfo.hcclHandleId, tileInfo.aAddrOffset, tileInfo.cAddrOffset, index
            )
        if self.basedA2aRsAg:
            self.WaitAlltoAllEachTurn(tailFlag, turnCnt)


class MatmulAllReduce910GeneralAllReduce(MatmulAllReduce910General, MatmulAllReduceBaseAllReduce):
    basedA2aRsAg = False


class MatmulAllReduce910GeneralA2aRsAg(MatmulAllReduce910General, MatmulAllReduceBaseA2aRsAg):
    basedA2aRsAg = True


# ---------------------------------------------------------------- matmul_all_reduce_apt.cpp
def matmul_all_reduce(
    aGM, bGM, biasGM, addGM, antiquantScaleGM, antiquantOffsetGM, dequantGM, pertokenGM,
    commQuantScale1GM, commQuantScale2GM, cGM, workspaceGM, tilingGM, TPL_A2A_RS_AG, TPL_COMM_MODE,
):  # fmt: skip
    """The kernel entry with ``APT_MM_TYPE == MMTYPE_FP_MM``, FP16 x1 and x2, no add; the last two
    arguments are its template parameters (the tiling key's TPL_A2A_RS_AG and TPL_COMM_MODE)."""
    if workspaceGM is None:
        return
    # fp_matmul_all_reduce<false, ...>: INVOKE_MC2_910_OP_IMPL(..., ON_CUBE, ...), x2 not transposed
    tilingData = hp.GET_TILING_DATA_WITH_STRUCT(MatmulAllReduce910TilingDataA5, tilingGM)
    addrs = MC2GmAddrs(aGM, bGM, biasGM, addGM, cGM, workspaceGM, cGM)
    cls = MatmulAllReduce910GeneralA2aRsAg if TPL_A2A_RS_AG else MatmulAllReduce910GeneralAllReduce
    op = cls(addrs, tilingData, ON_CUBE, TPL_COMM_MODE)
    op.Init()
    op.Process()


def make_tiling(rankDim: int, commMode: str):
    """Host side: SetMc2Hcomm, DoRCSTiling, the cut, the matmul tilings, GetWorkspaceSize and
    GetTilingKey; returns the tiling, the workspace size, the key's two values, blockDim and the
    kernel type."""
    tiling = MatmulAllReduce910TilingDataA5()
    isUseA2APath = rankDim in (STANDARD_CARD_4P, EIGHT_P_8P)  # IsUseA2APath on DAV_3510
    tplCommMode = TPL_COMM_MODE_AICPU if commMode == "ai_cpu" else TPL_COMM_MODE_CCU
    opType = HCCL_CMD_ALLTOALL if isUseA2APath else HCCL_CMD_ALLREDUCE
    algConfig = "AlltoAll=level0:fullmesh" if isUseA2APath else "AllReduce=level0:fullmesh"
    config = Mc2CcTilingConfig(WORLD_GROUP, opType, algConfig, HCCL_REDUCE_SUM, FP16, FP16)
    config.SetCommEngine(ENGINE_AICPU if tplCommMode == TPL_COMM_MODE_AICPU else ENGINE_CCU_SCHED)
    assert config.GetTiling(tiling.mc2InitTiling) == 0
    assert config.GetTiling(tiling.mc2CcTiling) == 0
    if isUseA2APath:  # SetMc2HcommTwoShot: the AllGather's tiling
        config.SetGroupName(WORLD_GROUP)
        config.SetOpType(HCCL_CMD_ALLGATHER)
        config.SetAlgConfig("AllGather=level0:fullmesh")
        config.SetReduceType(HCCL_REDUCE_SUM, FP16, FP16)
        assert config.GetTiling(tiling.mc2CcTilingComm) == 0
    p = tiling.param  # DoRCSTiling
    p.rankDim, p.commtype, p.subtype = rankDim, HCCL_CMD_ALLREDUCE, HCCL_REDUCE_SUM
    p.rankM, p.rankN, p.rankK, p.aicCoreNum = M, N, K, AIC_CORE_NUM
    p.tileCnt, p.tailM, p.tailCnt = TILE_CNT, TAIL_M, TAIL_CNT  # DoSplitMTiling (fixed)
    for mm, rows in (
        (tiling.mC2Mmv3TileTilingData, TILE_M),
        (tiling.mC2Mmv3TailTilingData, TAIL_M),
    ):
        cube = mm.tCubeTiling  # Do910Tiling (fixed)
        cube.usedCoreNum, cube.M, cube.N, cube.Ka, cube.Kb = USED_CORE_NUM, rows, N, K, K
        cube.baseM, cube.baseN, cube.baseK = BASE_M, BASE_N, K
        mm.mTailCnt = mm.nTailCnt = mm.kTailCnt = mm.mBaseTailSplitCnt = mm.nBaseTailSplitCnt = 1
        mm.aswWindowLen = ASW_WINDOW_LEN
    p.nd2NzWorkLen = p.biasLen = 0  # GetWorkspaceSize: no BF16 bias
    workspaceSize = AC_MAX_AIV * 32 + M * N * SIZEOF_HALF  # softSyncSize + gmcFloat
    if isUseA2APath:  # GetWorkspaceSizeForA2ARSAG
        cgmPadLen = (TILE_CNT + TAIL_CNT) * FIVE_ONE_TWO
        commWorkSpace = (TILE_M * N * TILE_CNT + TAIL_M * N * TAIL_CNT + cgmPadLen) * SIZEOF_HALF
        workspaceSize += commWorkSpace * 3 + commWorkSpace // rankDim
    kernelType = "mix_aic_1_2" if isUseA2APath else "mix_aic_1_0"
    return tiling, workspaceSize, (isUseA2APath, tplCommMode), AIC_CORE_NUM, kernelType


def inputs(rank: int) -> tuple[np.ndarray, np.ndarray]:
    """x1 of ``rank`` and the shared x2: small integers, exact products and sums."""
    return random_ints(rank, (M, K)), random_ints(1000, (K, N))


def reference(n: int) -> np.ndarray:
    """numpy: the sum over ``n`` ranks of x1 @ x2."""
    total = sum(np.matmul(*(m.astype(np.float32) for m in inputs(r))) for r in range(n))
    return total.astype(np.float16)


def main() -> list[str]:
    """One launch per comm_mode on every rank; y against the numpy reference."""
    rank, n = hp.get_rank(), hp.get_world_size()
    lines = []
    for commMode in ("ccu", "ai_cpu"):
        tiling, workspaceSize, tilingKey, blockDim, kernelType = make_tiling(n, commMode)
        x1, x2 = inputs(rank)
        y, workspace = zeros(M, N), zeros(workspaceSize // SIZEOF_HALF)
        hp.launch(
            matmul_all_reduce,
            on_device(x1), on_device(x2), None, None, None, None, None, None, None, None,
            y, workspace, tiling, *tilingKey,
            block_dim=blockDim,
            kernel_type=kernelType,
        )  # fmt: skip
        path = "AlltoAll + reduce + AllGather" if tilingKey[0] else "AllReduce"
        lines.append(compare(commMode, y, reference(n), f"{path}, {n} ranks"))
    return lines


if __name__ == "__main__":
    run_sample(main, platform=PLATFORM)
