"""Host and kernel helpers of ``mc2/allto_allv_quant_grouped_mat_mul/op_kernel/mc2_templates/``
that the AlltoAllV grouped-matmul ports share, as their kernels share the templates: the
batch's counts and displacements both ways (``communication/a2av_comm_params.h``), the
permute's prefix sums (``communication/a2av_permute_engine.h``), the host's experts per batch
(``CalcExpertNum``), the way back's tiling struct and workspace (``QuantGmmA2avTilingData``,
``SetGmmA2avWorkspaceInfo``) and the MX stand-in of one group's matmul. None of them orders work.
"""

from __future__ import annotations

from ctypes import c_bool, c_uint64

import numpy as np
import torch
from _mc2 import typed_fields
from _mc2_templates import (
    MAX_EXPERT_SIZE,
    MAX_HANDLE_ID_NUM,
    TENSOR_LIST_SIZE,
    A2avCommParams,
    Align,
    CeilDiv,
    GMMQuantTilingData,
    HcclA2avTilingInfo,
    TaskTilingInfo,
)

import hccl_py as hp
from hccl_py import AIC, Hccl, TilingData

DEFAULT_MERGED_EXPERT_NUM, SMALL_EXPERT_THRESHOLD, ORIGINAL_LOOP_THRESHOLD = 4, 4, 4
PER_RANK_TOTAL_MN_THRESHOLD, GMM_ARRAY_MAX_NUM, MIN_LOOP_COUNT = 20 * 1024 * 1024, 128, 2


# ---------------------------------------------------------------- a2av_comm_params.h
def CalcA2avCommBeforeParams(p, rawSend, rawRecv, rankDim, e, start, expertNum, axis, lastSum):
    """The batch's counts per rank, send displacements over the rows sorted by global expert,
    receive displacements running on from the previous batch (``lastSum``: the one-element
    list standing for the ``uint64_t &recvOffsetLastSum``)."""
    batch = range(start, start + expertNum)
    for i in range(rankDim):
        p.sendCnt[i] = sum(rawSend[x + i * e] * axis for x in batch)
        p.recvCnt[i] = sum(rawRecv[x + i * e] * axis for x in batch)
    p.sendOffset[0] = sum(rawSend[j] * axis for j in range(start))
    for i in range(1, rankDim):
        before = sum(rawSend[j + k * e] * axis for k in range(i) for j in range(e))
        p.sendOffset[i] = before + sum(rawSend[j + i * e] * axis for j in range(start))
    for i in range(rankDim):
        if start == 0 and i == 0:
            p.recvOffset[i] = 0
            lastSum[0] += p.recvCnt[0]
        else:
            p.recvOffset[i] = lastSum[0]
            lastSum[0] += p.recvCnt[i]


def CalcA2avCommAfterParams(p, rawSend, rawRecv, rankDim, e, start, expertNum, axis) -> None:
    """Counts of the batch's experts per rank; the send buffer is, per batch, rank-major (the
    batch starts after every row of the earlier batches), and ``y`` is rank-major over all
    experts (rank i's rows for the batch start after rank i's earlier experts)."""
    batch = range(start, start + expertNum)
    for i in range(rankDim):
        p.sendCnt[i] = sum(rawSend[x + i * e] * axis for x in batch)
        p.recvCnt[i] = sum(rawRecv[x + i * e] * axis for x in batch)
    batchStartOffset = sum(rawSend[x + j * e] for x in range(start) for j in range(rankDim))
    batchStartOffset *= axis
    p.sendOffset[0] = batchStartOffset
    rankRunningOffset = 0
    for i in range(1, rankDim):
        rankRunningOffset += sum(rawSend[x + (i - 1) * e] * axis for x in batch)
        p.sendOffset[i] = batchStartOffset + rankRunningOffset
    p.recvOffset[0] = sum(rawRecv[x] * axis for x in range(start))
    for i in range(1, rankDim):
        p.recvOffset[i] = p.recvOffset[i - 1] + sum(
            rawRecv[start + (i - 1) * e + j] * axis for j in range(e)
        )


# ---------------------------------------------------------------- hccl_a2av_op.h
class HcclA2avOpBase:
    """``HcclA2avOp<T, commBeforeComputeFlag, mode>`` up to its Prepares: the communicator's
    set-up on every core and one ``AlltoAllV<true>`` per batch from AIV block 0. Its Waits,
    ``End`` and the permute order work, so they stay in each port's subclass, where the
    mutation suite removes them. A subclass sets the template arguments: ``SERVER`` (mode),
    ``DATA_TYPE`` (T) and ``COMM_BEFORE`` (commBeforeComputeFlag: the batch's counts from
    ``CalcA2avCommBeforeParams`` over H1, else ``CalcA2avCommAfterParams`` over N1)."""

    SERVER: int
    DATA_TYPE: int
    COMM_BEFORE: bool
    PACK_FACTOR = 1

    def __init__(self) -> None:
        self.hccl_ = Hccl[self.SERVER]()
        self.dataCommParams_ = A2avCommParams()
        self.dataRecvOffsetLastSum_ = [0]
        self.alltoAllvHandleId_ = [hp.INVALID_HANDLE_ID] * MAX_HANDLE_ID_NUM

    def Init(self, hcclInitTiling, hcclCcTilingOffset, taskTilingInfo, send, recv, aiv) -> None:
        self.taskTilingInfo_ = taskTilingInfo
        self.aivCoreNum_ = aiv
        hcclContextGm = hp.GetHcclContext(0)
        self.hccl_.InitV2(hcclContextGm, hcclInitTiling)
        self.hccl_.SetCcTilingV2(hcclCcTilingOffset)
        self.rankDim_ = self.hccl_.GetRankDim()
        self.e_, self.H1_, self.N1_ = taskTilingInfo.e, taskTilingInfo.H1, taskTilingInfo.N1
        self.sendGlobalBuffer_, self.recvGlobalBuffer_ = send, recv
        n = self.e_ * self.rankDim_
        self.recvCounts_ = list(taskTilingInfo.recvCnt[:n]) + [0] * (MAX_EXPERT_SIZE - n)
        self.sendCounts_ = list(taskTilingInfo.sendCnt[:n]) + [0] * (MAX_EXPERT_SIZE - n)
        self.hcclDataType_ = self.DATA_TYPE

    def aiv_only(self) -> bool:
        """A2AV_AIV_ONLY(): True where the macro returns (AIC cores, AIV blocks 1..)."""
        return hp.g_coreType == AIC or hp.GetBlockIdx() != 0

    def LaunchCommData(self, startExpertIdx: int, expertNum: int) -> None:
        if self.aiv_only():
            return
        p, counts = self.dataCommParams_, (self.sendCounts_, self.recvCounts_)
        batch = (self.rankDim_, self.e_, startExpertIdx, expertNum)
        if self.COMM_BEFORE:
            axis = CeilDiv(self.H1_, self.PACK_FACTOR)
            CalcA2avCommBeforeParams(p, *counts, *batch, axis, self.dataRecvOffsetLastSum_)
        else:
            CalcA2avCommAfterParams(p, *counts, *batch, self.N1_)
        self.alltoAllvHandleId_[startExpertIdx] = self.hccl_.AlltoAllV[True](
            self.sendGlobalBuffer_, p.sendCnt, p.sendOffset, self.hcclDataType_,
            self.recvGlobalBuffer_, p.recvCnt, p.recvOffset, self.hcclDataType_,
        )  # fmt: skip


# ---------------------------------------------------------------- a2av_permute_engine.h
def ComputePrefixSum(isExpertFirst, totalPos, counts, e, start, expertNum, rankDim):
    sumCnt, running = [], 0
    for pos in range(totalPos):
        rank, local = divmod(pos, expertNum)
        if isExpertFirst:
            local, rank = divmod(pos, rankDim)
        running += counts[rank * e + start + local]
        sumCnt.append(running)
    return sumCnt


# ---------------------------------------------------------------- host
def CalcExpertNum(e: int, epWorldSize: int, bsk: int, n1: int, packFactor: int = 1) -> int:
    """AlltoAllvQuantGmmTilingCommon::CalcExpertNum: experts per AlltoAllV and grouped matmul."""
    if e <= SMALL_EXPERT_THRESHOLD:
        return 1
    if CeilDiv(e, DEFAULT_MERGED_EXPERT_NUM) <= ORIGINAL_LOOP_THRESHOLD:
        return DEFAULT_MERGED_EXPERT_NUM
    perRankTokens = bsk // epWorldSize if epWorldSize else bsk
    if perRankTokens * n1 // (packFactor or 1) >= PER_RANK_TOTAL_MN_THRESHOLD:
        return DEFAULT_MERGED_EXPERT_NUM
    upperByArray = GMM_ARRAY_MAX_NUM // epWorldSize if epWorldSize else GMM_ARRAY_MAX_NUM
    return max(min(e, upperByArray, e // MIN_LOOP_COUNT), 1)


def routed_rows(rank: int, n: int, experts: int) -> list[int]:
    """The ports' routing (an input, not the kernel's): rows ``rank`` sends to each global
    expert ``i * experts + e``, 0..3, none to the last one."""
    last = experts * n - 1
    return [0 if g == last else (rank + 3 * g) % 4 for g in range(experts * n)]


def PostTiling(task, sends, recvs, expertNum, aivCoreNum, aicCoreNum, **shape) -> None:
    """AlltoAllvQuantGmmTilingCommon::PostTiling into ``taskTilingInfo``: ``shape`` gives BSK,
    BS, H1, H2, A, N1, N2, epWorldSize and e; the batches follow from ``expertNum``."""
    for field, value in shape.items():
        setattr(task, field, value)
    task.aivCoreNum, task.aicCoreNum = aivCoreNum, aicCoreNum
    task.expertNum = task.mainLoopExpertNum = expertNum
    task.tailLoopExpertNum = task.e % expertNum
    task.totalLoopCount = CeilDiv(task.e, expertNum)
    for i, (s, r) in enumerate(zip(sends, recvs, strict=True)):
        task.sendCnt[i], task.recvCnt[i] = s, r


# ---------------------------------------------------------------- quant_grouped_mat_mul_allto_allv_tiling.h
class GmmA2avWorkspaceInfo(TilingData):
    _fields_ = typed_fields(
        c_uint64, "wsGmmOutputSize", "wsGmmComputeWorkspaceSize", "wsSharedGmmComputeWorkspaceSize"
    )


class QuantGmmA2avTilingData(TilingData):
    """QuantGmmA2avTilingData (the way back: grouped matmul, then AlltoAllV); its two
    TCubeTiling members cut after baseK."""

    _fields_ = [
        ("hcclA2avTiling", HcclA2avTilingInfo),
        ("workspaceInfo", GmmA2avWorkspaceInfo),
        ("taskTilingInfo", TaskTilingInfo),
        ("sharedGmmTiling", GMMQuantTilingData),
        ("gmmBaseTiling", GMMQuantTilingData),
        ("isPermuteOut", c_bool),
    ]


def SetGmmA2avWorkspaceInfo(tiling: QuantGmmA2avTilingData, gmmYDtypeSize: int) -> int:
    """QuantGroupedMatmulAllToAllvTilingCommon::SetGmmA2avWorkspaceInfo: the gmm output (the
    send buffer), the two compute workspaces; returns the workspace size (libApi's 0)."""
    alignAddrLen, tensorListSize = 512, TENSOR_LIST_SIZE
    task, ws = tiling.taskTilingInfo, tiling.workspaceInfo
    ws.wsGmmOutputSize = Align(task.A * task.N1 * gmmYDtypeSize, alignAddrLen)
    groupListSize = cGroupOffsetTableSize = task.e * task.epWorldSize * 8
    ttScaleRepeatSize = 4 * task.e * 2  # sizeof(float) * ep * 2
    gmmComputeWsSize = groupListSize + cGroupOffsetTableSize + tensorListSize + ttScaleRepeatSize
    ws.wsGmmComputeWorkspaceSize = Align(gmmComputeWsSize, alignAddrLen)
    sharedGmmComputeWsSize = task.e * 8 + tensorListSize + ttScaleRepeatSize
    ws.wsSharedGmmComputeWorkspaceSize = Align(sharedGmmComputeWsSize, alignAddrLen)
    return ws.wsGmmOutputSize + ws.wsGmmComputeWorkspaceSize + ws.wsSharedGmmComputeWorkspaceSize


# ---------------------------------------------------------------- Mc2GmmASWKernel, MX (stand-in)
MX_BLOCK = 32  # one E8M0 scale per 32 elements of K


def e8m0(raw: torch.Tensor) -> torch.Tensor:
    """E8M0 bytes to float32 powers of two (2 ** (byte - 127))."""
    return torch.pow(2.0, raw.to(torch.float32) - 127.0)


def mx_group_matmul(a, sa, w, sw, y, m: int, k: int, n: int) -> None:
    """One group of the MX grouped matmul: ``a`` (m, k) FP8 E4M3 with E8M0 scales ``sa``
    (m, k / 64, 2), weight ``w`` (k, n) FP8 with scales ``sw`` (k / 64, n, 2), both dequantised
    in float32 and multiplied, written to ``y`` (m, n) FP16; addresses in GM."""
    aF = hp.gm_tensor(a, torch.uint8, m * k).view(torch.float8_e4m3fn).float().view(m, k)
    saF = e8m0(hp.gm_tensor(sa, torch.uint8, m * k // MX_BLOCK)).view(m, k // MX_BLOCK)
    wF = hp.gm_tensor(w, torch.uint8, k * n).view(torch.float8_e4m3fn).float().view(k, n)
    swF = e8m0(hp.gm_tensor(sw, torch.uint8, k // MX_BLOCK * n))
    swF = swF.view(k // (2 * MX_BLOCK), n, 2).permute(0, 2, 1).reshape(k // MX_BLOCK, n)
    aF = aF * saF.repeat_interleave(MX_BLOCK, 1)
    wF = wF * swF.repeat_interleave(MX_BLOCK, 0)
    hp.gm_tensor(y, torch.float16, m * n).copy_((aF @ wF).to(torch.float16).view(-1))


def dequant(x: np.ndarray, s: np.ndarray) -> np.ndarray:
    """numpy: FP8 E4M3 bytes times E8M0 scale bytes (one per element), as float32."""
    values = torch.from_numpy(x).view(torch.float8_e4m3fn).float().numpy()
    return values * np.exp2(s.astype(np.float32) - 127)


def fp8_values(rng: np.random.Generator, *shape: int) -> np.ndarray:
    """FP8 E4M3 bytes of the integers -2..2: with scales of 2 ** -1 .. 2 ** 1 every product and
    sum of the ports' sizes is exact in float32, so one rounding to FP16 matches numpy's."""
    values = rng.integers(-2, 3, size=shape).astype(np.float32)
    return torch.from_numpy(values).to(torch.float8_e4m3fn).view(torch.uint8).numpy()


def e8m0_scales(rng: np.random.Generator, *shape: int) -> np.ndarray:
    """E8M0 scale bytes 126..128 (2 ** -1 .. 2 ** 1)."""
    return rng.integers(126, 129, size=shape).astype(np.uint8)
