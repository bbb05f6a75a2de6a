"""Port of ops-transformer's MatmulReduceScatterV2 A2A path on Ascend 950 (CCU, 4 or 8 ranks).

Source: mirror-cann/ops-transformer at 3a280bcc (2026-07-21), every file read at that commit:
the kernel entry ``mc2/matmul_reduce_scatter_v2/op_kernel/arch35/matmul_reduce_scatter_v2_apt.cpp``
(FP16/BF16 branch: ``TPL_COMMALG == TPL_CCU_ALL2ALL_VEC_REDUCE`` instantiates
``MatmulA2AVecReduceFP16BF16``), the class of ``op_kernel/arch35/matmul_a2a_vec_reduce_fp16_bf16.h``
(``Init``, ``Process``, ``InnerProcess``, ``Compute``, ``MatMulV3Compute``, ``PostProcess``,
``ExecuteAicMatMulPipeline``, ``ExecuteAivCommReducePipeline``, ``CubeNotifyVector``,
``VecWaitCube``), ``ReduceSumForAlltoAll`` of ``mc2/common/op_kernel/reduce_sum_cast_fp32.h``
(``InitParams``, ``ExecuteReduceSum``, ``ReadDataBlockReduceSum``, ``CopyResultToOutput``,
``ComputeTailAivId``), and the host's A2A choices (``op_host/op_tiling/arch35/
matmul_reduce_scatter_v2_tiling.cpp``: ``SetMc2Hcomm`` with ``HCCL_CMD_ALLTOALL`` and
"AlltoAll=level0:fullmesh"; ``matmul_reduce_scatter_tiling_base.cpp``: ``IsUseA2APath`` on 4 or
8 ranks unless comm_mode is "ai_cpu", workspace ``2 * mmResultLen``, the tiling key); described
in docs/notes/mc2-kernels.md, section 12. The tiling struct, the ``HcclTypeSelector``, the ASW
matmul, the host and the other kernel are imported from samples/mc2_matmul_reduce_scatter_v2_950.py.

What it computes: as that sample, rank j gets row block j of the sum over ranks of x1 @ x2, but
through an AlltoAll of every tile's rank slices and a vector reduce of the rankDim slices received.

What runs unchanged: ``InitV2`` + ``SetCcTilingV2`` on every AIC and AIV core of
``Hccl<HCCL_SERVER_TYPE_CCU>``. AIC cores, per tile (tiles, then the tail): the matmul's base
blocks into the send half of the workspace, then ``CubeNotifyVector``
(``CrossCoreSetFlag<0, PIPE_FIX>(4)`` + ``CrossCoreWaitFlag(4)``, ``CrossCoreSetFlag<2,
PIPE_FIX>(8)``). AIV cores (``aicCoreNum * 2``), software-pipelined: ``VecWaitCube``
(``CrossCoreWaitFlag<2, PIPE_S>(8)``) and ``AlltoAll<true>(send + i * slice, recv + i * slice,
sliceM * N, FP16, strideCount = M / rankDim * N, repeat 1)`` on every AIV core (block 0, the
working core, sends); then per round i: AIV block 0 Waits it, ``SyncAll<true>()``, every AIV core
prepares round i + 1 and reduces round i (the rankDim slices at ``strideCount`` in the receive
half, summed in FP32, cast back, into y), its share of 15360-element blocks. ``PostProcess``:
AIV block 0 Finalizes.

Stand-ins: as the other sample (FP16, no bias, x2 not transposed, the fixed 4 + 4 + 2 cut, fixed
base blocks, one torch matmul per block), with N = 4096 so that a tile's slice (4 rows) is two
reduce blocks and a tail's (2 rows) one, and ``usedCoreNum`` = all 3 AIC cores (this class has
no idle-core branch); the cut keeps every slice a multiple of 32 bytes, as the host's does: the
reduce's last block reads 32-byte aligned, and past a slice's end it would read the next round's
pending receive range (an ``HcclRaceError``, docs/fidelity.md). UB queues are torch tensors.

Run: ``python samples/mc2_matmul_a2a_vec_reduce_950.py`` (4 emulated ranks; ``python -m hccl_py
run -n 8`` for 8).
"""

import torch
from _common import compare, on_device, run_sample, skip, zeros
from _mc2 import FP16, SIZEOF_HALF
from mc2_matmul_reduce_scatter_v2_950 import (
    AIC_CORE_NUM,
    BLOCK_M,
    EIGHT_P_8P,
    STANDARD_CARD_4P,
    TPL_CCU_ALL2ALL_VEC_REDUCE,
    HcclTypeSelector,
    MatmulReduceScatterFP16BF16,
    MatmulReduceScatterV2TilingData,
    MC2MatmulAswKernelDerive,
    inputs,
    make_tiling,
    reference,
)

import hccl_py as hp
from hccl_py import AIV, PIPE_FIX, PIPE_S, offsetof

PLATFORM = "950"
N, BASE_N = 4096, 1024  # a tile's slice, 4 x 4096 elements, is two reduce blocks of 15360
SYNC_AIC_ONLY_ALL_DET_FLAG, SYNC_AIC_AIV_DET_FLAG = 4, 8
SYNC_MODE0, SYNC_MODE2 = 0, 2
# reduce_sum_cast_fp32.h / reduce_sum_utils.h
UB_BUFFER_NUM, MAX_PER_BLOCK_NUM, UB_ALIGN_BYTES = 6, 1024 * 15, 32
TOTAL_UB_SIZE = 248 * 1024  # the 950's UB


def CeilDiv(a: int, b: int) -> int:
    return 0 if b == 0 else (a + b - 1) // b


def CeilAlign(a: int, b: int) -> int:
    return a if b == 0 else CeilDiv(a, b) * b


def FloorAlign(a: int, b: int) -> int:
    return a if b == 0 else a // b * b


def BlockAlignMod(a: int, b: int) -> int:
    """The size of the last of the ``b``-sized blocks of ``a`` (``b`` when they divide it)."""
    if b == 0:
        return 0
    return a % b or b


# ---------------------------------------------------------------- reduce_sum_cast_fp32.h
class ReduceSumForAlltoAll:
    """ReduceSumForAlltoAll<half>: the AIV cores split a slice into ``perBlockNum_`` blocks, in
    order, the lower cores one more; each block sums rankDim slices at ``stride`` in FP32."""

    def Init(self, outputSize, stride, rankDim, aivNum, srcAddr, dstAddr) -> None:
        self.InitParams(outputSize, stride, rankDim, aivNum)
        self.srcAddr_, self.dstAddr_ = srcAddr, dstAddr  # InitBuffers' GlobalTensors

    def InitParams(self, outputSize, stride, rankDim, aivNum) -> None:
        self.rankDim_, self.aivNum_ = rankDim, aivNum
        maxPerBlockNum_ = FloorAlign(TOTAL_UB_SIZE // UB_BUFFER_NUM, UB_ALIGN_BYTES) // SIZEOF_HALF
        self.perBlockNum_ = min(MAX_PER_BLOCK_NUM, maxPerBlockNum_)
        self.sliceSize_ = outputSize
        self.strideSize_ = self.sliceSize_ if stride == 0 else stride
        self.totalBlockNums_ = CeilDiv(self.sliceSize_, self.perBlockNum_)
        self.tailBytes_ = BlockAlignMod(self.sliceSize_, self.perBlockNum_) * SIZEOF_HALF
        self.tailPerBlockNumAlign_ = CeilAlign(self.tailBytes_, UB_ALIGN_BYTES) // SIZEOF_HALF
        self.round_ = self.totalBlockNums_ // aivNum
        self.tailBlockNums_ = self.totalBlockNums_ % aivNum
        self.aivId_ = hp.GetBlockIdx()
        lower = self.aivId_ < self.tailBlockNums_
        self.assignedBlockNums_ = self.round_ + 1 if lower else self.round_
        self.blockIdx_ = self.aivId_ * self.round_ + min(self.aivId_, self.tailBlockNums_)
        self.curAivOffset_ = self.blockIdx_ * self.perBlockNum_
        self.ComputeTailAivId()

    def ComputeTailAivId(self) -> None:
        self.lastAivId_ = self.tailBlockNums_ - 1 if self.round_ == 0 else self.aivNum_ - 1

    def ExecuteReduceSum(self) -> None:
        lastAivBlockIdx = self.assignedBlockNums_ - 1
        isLastAiv = self.aivId_ == self.lastAivId_
        for curBlock in range(self.assignedBlockNums_):
            isTailBlock = isLastAiv and curBlock == lastAivBlockIdx
            copyBlockNum = self.tailPerBlockNumAlign_ if isTailBlock else self.perBlockNum_
            curBlockOffset = self.curAivOffset_ + curBlock * self.perBlockNum_
            sumTensor = torch.zeros(copyBlockNum, dtype=torch.float32)  # Duplicate(0)
            for curRank in range(self.rankDim_):
                curOffset = curRank * self.strideSize_ + curBlockOffset
                self.ReadDataBlockReduceSum(sumTensor, curOffset, copyBlockNum)
            self.CopyResultToOutput(curBlockOffset, sumTensor, copyBlockNum, isTailBlock)

    def ReadDataBlockReduceSum(self, sumTensor, curOffset, count) -> None:
        """DataCopy of ``count`` elements (32-byte aligned), Cast to FP32, Add."""
        sumTensor += hp.gm_tensor(self.srcAddr_ + curOffset * SIZEOF_HALF, FP16, count).float()

    def CopyResultToOutput(self, outOffsetGM, sumTensor, count, isTail) -> None:
        """Cast (CAST_RINT) to FP16; DataCopyPad of ``tailBytes_`` for the tail block."""
        count = self.tailBytes_ // SIZEOF_HALF if isTail else count
        out = hp.gm_tensor(self.dstAddr_ + outOffsetGM * SIZEOF_HALF, FP16, count)
        out.copy_(sumTensor[:count].to(torch.float16))


# ---------------------------------------------------------------- matmul_a2a_vec_reduce_fp16_bf16.h
class MatmulA2AVecReduceFP16BF16:
    """MatmulA2AVecReduceFP16BF16<AType, BType, BiasType, CType, TPL_COMM_MODE>."""

    MAX_HANDLE = 64

    def __init__(self, TPL_COMM_MODE: int) -> None:
        self.hccl_ = HcclTypeSelector(TPL_COMM_MODE)()
        self.handles_ = [-1] * self.MAX_HANDLE
        self.reduceSum_ = ReduceSumForAlltoAll()
        self.tileOffset_ = 0

    def Init(self, aGM, bGM, biasGM, cGM, contextGM, workspaceGM, tilingData) -> None:
        self.tilingData_ = tilingData
        cfg = tilingData.param
        hcclCcTilingOffset = offsetof(MatmulReduceScatterV2TilingData, "mc2CcTiling")
        self.hccl_.InitV2(contextGM, tilingData.mc2InitTiling)
        self.hccl_.SetCcTilingV2(hcclCcTilingOffset)
        self.context_ = contextGM
        self.dataType_ = tilingData.dataType
        self.debugMode_ = tilingData.debugMode
        self.aGM_, self.bGM_, self.cGM_, self.biasGM_ = aGM, bGM, cGM, biasGM
        self.rankId_ = self.context_.rankId
        self.aivNum_ = cfg.aicCoreNum * hp.GetTaskRatio()  # every AIV core of the launch
        self.fullMN_ = cfg.rankM * cfg.rankN
        self.sendBuf_ = workspaceGM  # [0, fullMN): the matmul's output, AlltoAll's send buffer
        self.recvBuf_ = self.sendBuf_ + self.fullMN_ * SIZEOF_HALF  # [fullMN, 2 * fullMN)

    def PostProcess(self) -> None:
        if hp.GetBlockIdx() == 0 and hp.g_coreType == AIV:
            self.hccl_.Finalize()

    def Process(self) -> None:
        self.InnerProcess()
        self.PostProcess()

    def InnerProcess(self) -> None:
        tiling = self.tilingData_.mC2Mmv3TileTilingData.tCubeTiling
        cfg = self.tilingData_.param
        tileData = self.tilingData_.mC2Mmv3TileTilingData
        self.Compute(self.recvBuf_, tileData, cfg.tileCnt, self.sendBuf_, not cfg.tailM, False)
        if cfg.tailM:
            tileSize = tiling.M * tiling.N // cfg.rankDim
            self.tileOffset_ = tileSize * cfg.tileCnt * SIZEOF_HALF
            recvGMTail = self.recvBuf_ + self.tileOffset_
            sendBufTail = self.sendBuf_ + self.tileOffset_
            tailData = self.tilingData_.mC2Mmv3TailTilingData
            self.Compute(recvGMTail, tailData, cfg.tailCnt, sendBufTail, True, True)

    def Compute(self, recvGMAddr, tiling, count, sendGMAddr, isLast, isTail) -> None:
        self.MatMulV3Compute(recvGMAddr, tiling, count, sendGMAddr, isLast, isTail)

    def ExecuteAicMatMulPipeline(self, tiling, count, isLast, isTail) -> None:
        cfg = self.tilingData_.param
        cfg.rankID = self.rankId_
        mmv3 = MC2MatmulAswKernelDerive()
        mmv3.Init(self.aGM_, self.bGM_, self.sendBuf_, tiling, cfg, isTail)
        for i in range(count):
            mmv3.UpdateSlice(i, isTail)
            mmv3.Process(isLast and i == count - 1)
            self.CubeNotifyVector()  # this tile's blocks are in the send buffer
        mmv3.End()

    def ExecuteAivCommReducePipeline(self, recvGMAddr, sendGMAddr, tiling, count, isTail) -> None:
        cfg = self.tilingData_.param
        sliceM = tiling.tCubeTiling.M // cfg.rankDim
        rankSliceElems = sliceM * tiling.tCubeTiling.N
        rankSliceBytes = rankSliceElems * SIZEOF_HALF
        stride = (cfg.rankM // cfg.rankDim) * cfg.rankN
        repeat = 1
        handleShift = cfg.tileCnt if isTail else 0
        currSendPtr, currRecvPtr = sendGMAddr, recvGMAddr
        currOutPtr = self.cGM_ + self.tileOffset_ if isTail else self.cGM_
        # prologue: round 0
        self.VecWaitCube()
        self.handles_[0 + handleShift] = self.hccl_.AlltoAll[True](
            currSendPtr, currRecvPtr, rankSliceElems, self.dataType_, stride, repeat
        )
        currSendPtr += rankSliceBytes
        currRecvPtr += rankSliceBytes
        currOutPtr += rankSliceBytes
        # wait for round i, start round i + 1, reduce round i
        for i in range(count - 1):
            if hp.GetBlockIdx() == 0:
                self.hccl_.Wait(self.handles_[i + handleShift])
            hp.SyncAll[True]()
            self.VecWaitCube()
            self.handles_[i + 1 + handleShift] = self.hccl_.AlltoAll[True](
                currSendPtr, currRecvPtr, rankSliceElems, self.dataType_, stride, repeat
            )
            calcRecvPtr = currRecvPtr - rankSliceBytes
            calcOutPtr = currOutPtr - rankSliceBytes
            self.reduceSum_.Init(
                rankSliceElems, stride, cfg.rankDim, self.aivNum_, calcRecvPtr, calcOutPtr
            )
            self.reduceSum_.ExecuteReduceSum()
            currSendPtr += rankSliceBytes
            currRecvPtr += rankSliceBytes
            currOutPtr += rankSliceBytes
        # epilogue: the last round
        lastIdx = count - 1
        if hp.GetBlockIdx() == 0:
            self.hccl_.Wait(self.handles_[lastIdx + handleShift])
        hp.SyncAll[True]()
        calcRecvPtr = currRecvPtr - rankSliceBytes
        calcOutPtr = currOutPtr - rankSliceBytes
        self.reduceSum_.Init(
            rankSliceElems, stride, cfg.rankDim, self.aivNum_, calcRecvPtr, calcOutPtr
        )
        self.reduceSum_.ExecuteReduceSum()

    def MatMulV3Compute(self, recvGMAddr, tiling, count, sendGMAddr, isLast, isTail) -> None:
        if hp.g_coreType != AIV:
            self.ExecuteAicMatMulPipeline(tiling, count, isLast, isTail)
        if hp.g_coreType == AIV:
            self.ExecuteAivCommReducePipeline(recvGMAddr, sendGMAddr, tiling, count, isTail)

    def CubeNotifyVector(self) -> None:
        hp.CrossCoreSetFlag[SYNC_MODE0, PIPE_FIX](SYNC_AIC_ONLY_ALL_DET_FLAG)  # every AIC core
        hp.CrossCoreWaitFlag(SYNC_AIC_ONLY_ALL_DET_FLAG)
        hp.CrossCoreSetFlag[SYNC_MODE2, PIPE_FIX](SYNC_AIC_AIV_DET_FLAG)  # its two AIV cores

    def VecWaitCube(self) -> None:
        hp.CrossCoreWaitFlag[SYNC_MODE2, PIPE_S](SYNC_AIC_AIV_DET_FLAG)


def matmul_reduce_scatter_v2(
    aGM, bGM, biasGM, x1ScaleGM, x2ScaleGM, quantScaleGM, cGM, amaxOutGM, workspaceGM, tilingGM,
    TPL_COMMALG, TPL_COMM_MODE,
):  # fmt: skip
    """The kernel entry, FP16 x1 and x2, both kernels of its FP16/BF16 branch; the last two
    arguments are its template parameters (the tiling key's TPL_COMMALG and TPL_COMM_MODE)."""
    context = hp.GetHcclContext(0)
    tilingData = hp.GET_TILING_DATA_WITH_STRUCT(MatmulReduceScatterV2TilingData, tilingGM)
    if TPL_COMMALG == TPL_CCU_ALL2ALL_VEC_REDUCE:
        op = MatmulA2AVecReduceFP16BF16(TPL_COMM_MODE)
    else:
        op = MatmulReduceScatterFP16BF16(TPL_COMM_MODE)
    op.Init(aGM, bGM, biasGM, cGM, context, workspaceGM, tilingData)
    op.Process()


def main() -> list[str]:
    """One launch on every rank with comm_mode "ccu"; y against the numpy reference."""
    rank, n = hp.get_rank(), hp.get_world_size()
    if n not in (STANDARD_CARD_4P, EIGHT_P_8P):
        return [skip("y", f"the host takes the A2A path on 4 or 8 ranks, not {n}")]
    tiling, workspaceSize, tilingKey, blockDim = make_tiling(
        n, "ccu", n=N, baseN=BASE_N, usedCoreNum=AIC_CORE_NUM
    )
    assert tilingKey[0] == TPL_CCU_ALL2ALL_VEC_REDUCE
    x1, x2 = inputs(rank, n, N)
    y, workspace = zeros(BLOCK_M, N), zeros(workspaceSize // SIZEOF_HALF)
    hp.launch(
        matmul_reduce_scatter_v2,
        on_device(x1), on_device(x2), None, None, None, None, y, None, workspace, tiling,
        *tilingKey,
        block_dim=blockDim,
        kernel_type="mix_aic_1_2",
    )  # fmt: skip
    return [compare("y", y, reference(rank, n, N), f"AlltoAll + vector reduce, {n} ranks")]


if __name__ == "__main__":
    run_sample(main, platform=PLATFORM)
