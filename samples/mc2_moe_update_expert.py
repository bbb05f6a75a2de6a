"""Port of ops-transformer's MoeUpdateExpert (the EPLB expert map and expert pruning), call for call.

Source: mirror-cann/ops-transformer at 3a280bcc (2026-07-21), every file read at that commit:
``mc2/moe_update_expert/op_kernel/moe_update_expert.h`` (``MoeUpdateExpert``: ``Init``,
``Calculate``, ``CalculateUnroll``, ``CalculateUnrollRest``, ``InitPruning``,
``ProcessEachTokenPruning``, ``ProcessPruning``, ``GetCoreRange``, ``Process``), the entry
``moe_update_expert.cpp``, ``moe_update_expert_tiling.h``, ``moe_update_expert_tiling_key.h``,
the op definition ``op_host/moe_update_expert_def.cpp`` and the host tiling
``op_host/op_tiling/moe_update_expert_tiling.cpp`` (``CheckAttrs``, the data type, shape and
optional-input checks, ``GetTilingKey``, ``RunFusionKernelTiling``). docs/notes/mc2-kernels.md,
section 28.

It communicates with nobody: no ``Hccl`` object, no context (``mc2Context_`` or
``GetHcclContext``), no window. Each rank maps its tokens' top-K logical experts to physical
expert instances through ``eplbTable`` (row ``e``: its instance count, then the instances), by the
rank's place in the world (``balance_mode`` 0) or by the token (1), and with ``expert_scales``
and ``pruning_threshold`` given also writes the pruning mask. It belongs here because its output
is the dispatch's input: the op's documentation fixes the order MoeUpdateExpert ->
MoeDistributeDispatchV2 -> MoeDistributeCombineV2, which the ``eplb-*`` launches run, on the A3
full-mesh ports (samples/mc2_moe_distribute_dispatch_v2_full_mesh.py and
samples/mc2_moe_distribute_combine_v2.py, imported) with the balanced ids.

What runs unchanged: the tiling checks and the tiling key (the key's balance mode says whether
pruning runs, the tiling's ``balanceMode`` which map: a pruning launch with ``balance_mode`` 0
maps by rank), the split of the ``bs`` tokens (pruning) and of the ``bs * K`` ids (the map) over
the AIV cores by ``GetCoreRange``, the map four ids at a time (``CalculateUnroll``) with its tail
(``CalculateUnrollRest``) or one by one under four (``Calculate``), the pruning mask
``scale >= threshold * sum(scales)`` per token (FP32 after the cast from FP16 / BF16), a token
whose ``active_mask`` is false written all false, and the int64 ids of the op's second data type.

Stand-ins: UB buffers are torch tensors; pipe barriers, ``SyncFunc`` events, queues and cache
maintenance are program order; ``Sum`` is ``torch.sum`` (the scales are eighths, so every order
sums exactly); ``aivNum`` is 5 (the UT's 48 would leave most cores idle at these sizes).

Run: ``python samples/mc2_moe_update_expert.py`` (4 emulated ranks),
``python -m hccl_py run -n 2 --backend gloo samples/mc2_moe_update_expert.py``.
"""

from ctypes import c_int32, c_int64, c_uint32

import numpy as np
import torch
from _common import Ceil, compare, f32, i32, on_device, run_sample, zeros
from _mc2 import typed_fields
from mc2_moe_distribute_combine_v2 import (
    MASK_CALC_NEED_WORKSPACE,
    expert_scales,
    experts,
    make_tiling,
    moe_distribute_combine_v2,
)
from mc2_moe_distribute_dispatch_v2_full_mesh import (
    BS,
    LOCAL_EXPERTS,
    PLATFORM,
    RUN_KWARGS,
    H,
    K,
    launch_dispatch,
)

import hccl_py as hp
from hccl_py import TilingData

# moe_update_expert_tiling_key.h
TILINGKEY_FLOAT, TILINGKEY_HALF, TILINGKEY_BFLOAT16 = 0, 1, 2
RANK_ID_BALANCING_MODE, TOKEN_ID_BALANCING_MODE = 0, 1
# moe_update_expert.h
UB_ALIGN = 32
FLOAT_BYTES = 4
ALIGN_256_BYTES = 256
UNROLL_NUM = 4
BUFFER_SIZE = 512
# moe_update_expert_tiling.cpp
K_MAX, BS_MAX, MAX_MOE_EXPERT_NUM = 16, 512, 1024
MAX_WORLD_SIZE, MIN_WORLD_SIZE = 768, 2
EXPERT_SCALES_INDEX, PRUNING_THRESHOLD_INDEX, ACTIVE_MASK_INDEX = 2, 3, 4
TAILOR_NONE = 0x0
#: tailorCfg_ values the tiling refuses: a pruning input given without its partners
TAILOR_REFUSED = {
    0x04: "expert_scales has been set, pruning_threshold must be set",
    0x08: "pruning_threshold has been set, expert_scales must be set",
    0x10: "active_mask has been set, pruning_threshold and expert_scales must be set",
    0x14: "active_mask and expert_scales have been set, pruning_threshold must be set",
    0x18: "active_mask and pruning_threshold have been set, expert_scales must be set",
}
KEY_OF_SCALES = {
    torch.float32: TILINGKEY_FLOAT,
    torch.float16: TILINGKEY_HALF,
    torch.bfloat16: TILINGKEY_BFLOAT16,
}
AIV_NUM = 5  # GetCoreNumAiv of the stand-in platform


class MoeUpdateExpertTilingData(TilingData):
    _fields_ = [
        *typed_fields(c_int32, "bs", "k", "moeExpertNum", "f"),
        ("aivCoreNum", c_uint32),
        *typed_fields(c_int64, "localRankId", "worldSize", "balanceMode"),
        ("isActiveMask", c_int32),
    ]


# ---------------------------------------------------------------- host tiling


def OP_TILING_CHECK(failed: bool, message: str) -> None:
    """The host's check: a failed one ends the tiling with its message (GRAPH_FAILED)."""
    if failed:
        raise ValueError(f"MoeUpdateExpert Tiling: {message}")


def CheckAttrs(tilingData, localRankId: int, worldSize: int, balanceMode: int) -> None:
    OP_TILING_CHECK(not 0 <= balanceMode <= 1, f"balanceMode {balanceMode} not in [0, 1]")
    tilingData.balanceMode = balanceMode
    rank, size = -1, -1
    if balanceMode == 0:  # only the rank map reads the world
        OP_TILING_CHECK(not MIN_WORLD_SIZE <= worldSize <= MAX_WORLD_SIZE,
                        f"worldSize {worldSize} not in [{MIN_WORLD_SIZE}, {MAX_WORLD_SIZE}]")  # fmt: skip
        OP_TILING_CHECK(not 0 <= localRankId < worldSize,
                        f"localRankId {localRankId} not in [0, {worldSize})")  # fmt: skip
        rank, size = localRankId, worldSize
    tilingData.localRankId, tilingData.worldSize = rank, size


def CheckShape(tilingData, expertIds, eplbTable, expertScales, pruningThreshold, activeMask) -> int:
    """CheckInputShape and CheckOptionalInputShape: the sizes, and the tailor bits of the
    optional inputs given."""
    worldSize = MAX_WORLD_SIZE if tilingData.worldSize == -1 else tilingData.worldSize
    OP_TILING_CHECK(expertIds.ndim != 2, "expert_ids must be 2-D")
    tilingData.bs, tilingData.k = expertIds.shape
    OP_TILING_CHECK(not 0 < tilingData.bs <= BS_MAX, f"expert_ids dim0 not in (0, {BS_MAX}]")
    OP_TILING_CHECK(not 0 < tilingData.k <= K_MAX, f"expert_ids dim1 not in (0, {K_MAX}]")
    OP_TILING_CHECK(eplbTable.ndim != 2, "eplb_table must be 2-D")
    tilingData.moeExpertNum, tilingData.f = eplbTable.shape
    OP_TILING_CHECK(not tilingData.k <= tilingData.moeExpertNum <= MAX_MOE_EXPERT_NUM,
                    f"eplb_table dim0 not in (0, {MAX_MOE_EXPERT_NUM}] and >= k")  # fmt: skip
    OP_TILING_CHECK(not 1 < tilingData.f <= worldSize + 1,
                    f"eplb_table dim1 {tilingData.f} not in (1, {worldSize + 1}]")  # fmt: skip
    tailorCfg = TAILOR_NONE
    bs, k = tilingData.bs, tilingData.k
    if expertScales is not None:
        OP_TILING_CHECK(tuple(expertScales.shape) != (bs, k), "expert_scales must be [bs, k]")
        tailorCfg += 1 << EXPERT_SCALES_INDEX
    if pruningThreshold is not None:
        OP_TILING_CHECK(tuple(pruningThreshold.shape) not in ((k,), (1, k)),
                        "pruning_threshold must be [k] or [1, k]")  # fmt: skip
        tailorCfg += 1 << PRUNING_THRESHOLD_INDEX
    tilingData.isActiveMask = int(activeMask is not None)
    if activeMask is not None:
        OP_TILING_CHECK(tuple(activeMask.shape) != (bs,), "active_mask must be [bs]")
        tailorCfg += 1 << ACTIVE_MASK_INDEX
    OP_TILING_CHECK(tailorCfg in TAILOR_REFUSED, TAILOR_REFUSED.get(tailorCfg, ""))
    return tailorCfg


def MoeUpdateExpertTilingFunc(expertIds, eplbTable, expertScales=None, pruningThreshold=None,
                              activeMask=None, localRankId=-1, worldSize=-1, balanceMode=0):  # fmt: skip
    """The host tiling: tiling data, tiling key (BalanceMode, ExpertScalesDataType) and block
    dim. The tensors are the op's inputs (their dtype and shape are what it reads)."""
    tilingData = MoeUpdateExpertTilingData()
    CheckAttrs(tilingData, localRankId, worldSize, balanceMode)
    # CheckDataType: int32 / int64 ids, int32 table, fp32 / fp16 / bf16 scales, fp32 threshold
    OP_TILING_CHECK(expertIds.dtype not in (torch.int32, torch.int64), "expertIds: int32 or int64")
    OP_TILING_CHECK(eplbTable.dtype != torch.int32, "eplbTable: int32")
    OP_TILING_CHECK(expertScales is not None and expertScales.dtype not in KEY_OF_SCALES,
                    "expertScales: fp16/bf16/float")  # fmt: skip
    OP_TILING_CHECK(pruningThreshold is not None and pruningThreshold.dtype != torch.float32,
                    "pruningThreshold: float")  # fmt: skip
    OP_TILING_CHECK(activeMask is not None and activeMask.dtype != torch.bool, "activeMask: bool")
    tailorCfg = CheckShape(tilingData, expertIds, eplbTable, expertScales, pruningThreshold,
                           activeMask)  # fmt: skip
    # RunFusionKernelTiling: a vector-only kernel on every AIV core
    tilingData.aivCoreNum = AIV_NUM
    numBlocks = AIV_NUM  # CalcTschBlockDim(aivNum, 0, aivNum)
    # GetTilingKey: any pruning input selects the pruning template, whatever balance_mode says
    tilingKeyBalanceMode = (
        RANK_ID_BALANCING_MODE if tailorCfg == TAILOR_NONE else TOKEN_ID_BALANCING_MODE
    )
    tilingKeyDataType = (
        TILINGKEY_FLOAT if expertScales is None else KEY_OF_SCALES[expertScales.dtype]
    )
    return tilingData, (tilingKeyBalanceMode, tilingKeyDataType), numBlocks


# ---------------------------------------------------------------- kernel


def GetValue(tensor: torch.Tensor, index: int) -> int:
    """A scalar read of a GlobalTensor element (through the data cache on the device)."""
    return int(tensor[index])


class MoeUpdateExpert:
    """``MoeUpdateExpert<DataType, ScalesDataType, EnablePruning>``, one object per core."""

    def __init__(self, DataType: torch.dtype, ScalesDataType: torch.dtype, EnablePruning: bool):
        self.DataType, self.ScalesDataType = DataType, ScalesDataType
        self.EnablePruning = EnablePruning

    def Init(self, expertIdsGM, eplbTableGM, expertScalesGM, pruningThresholdGM, activeMaskGM,
             balancedExpertIdsOutGM, balancedActiveMaskOutGM, workspaceGM, tilingData):  # fmt: skip
        self.bs_, self.k_ = tilingData.bs, tilingData.k
        self.moeExpertNum_, self.f_ = tilingData.moeExpertNum, tilingData.f
        self.aivCoreNum_ = tilingData.aivCoreNum
        self.balanceMode_ = tilingData.balanceMode
        if self.balanceMode_ == 0:
            self.localRankId_, self.worldSize_ = tilingData.localRankId, tilingData.worldSize
        total = self.bs_ * self.k_
        self.expertIdsTensor_ = hp.gm_tensor(expertIdsGM, self.DataType, total)
        self.balancedExpertIdsTensor_ = hp.gm_tensor(balancedExpertIdsOutGM, self.DataType, total)
        self.eplbTableTensor_ = i32(eplbTableGM, self.moeExpertNum_ * self.f_)
        if self.EnablePruning:
            k = self.k_
            newKCount = Ceil(k * FLOAT_BYTES, ALIGN_256_BYTES) * ALIGN_256_BYTES // FLOAT_BYTES
            # the InitBuffer calls: UB tensors
            self.localScalesFp32Buf_ = torch.zeros(newKCount, dtype=torch.float32)
            self.localThresholdsBuf_ = torch.zeros(k, dtype=torch.float32)
            self.localActiveMaskBuf_ = torch.zeros(k, dtype=torch.float16)
            self.localOriginActiveMaskBuf_ = torch.zeros(self.bs_, dtype=torch.uint8)
            self.localAllFalseMaskUint8Buf_ = torch.zeros(k, dtype=torch.uint8)
            self.isActiveMask_ = bool(tilingData.isActiveMask)
            if self.isActiveMask_:
                self.activeMaskInTensor_ = hp.gm_tensor(activeMaskGM, torch.uint8, self.bs_)
            self.expertScalesTensor_ = hp.gm_tensor(expertScalesGM, self.ScalesDataType, total)
            self.preTuningThresholdTensor_ = f32(pruningThresholdGM, k)
            self.balancedActiveMaskTensor_ = hp.gm_tensor(
                balancedActiveMaskOutGM, torch.uint8, total
            )

    def NewExpertId(self, tableOffset: int, tokenId: int) -> int:
        """The body the three Calculate loops share: one logical id to its instance."""
        table = self.eplbTableTensor_
        if GetValue(table, tableOffset) == 1:
            return GetValue(table, tableOffset + 1)
        if self.balanceMode_ == 0:  # rank_id mode
            modeValue = Ceil(self.worldSize_, GetValue(table, tableOffset))
            rankId = self.localRankId_ // modeValue + 1
            return GetValue(table, tableOffset + rankId)
        expertCount = GetValue(table, tableOffset)  # token_id mode
        selectedId = tokenId % expertCount + 1
        return GetValue(table, tableOffset + selectedId)

    def Calculate(self, start: int, end: int, computeLen: int) -> None:
        for i in range(start, end):
            # DataCacheCleanAndInvalid of expertIdsTensor_[i] and eplbTableTensor_[i]
            expertId = GetValue(self.expertIdsTensor_, i)
            self.outTensor_[i - start] = self.NewExpertId(expertId * self.f_, i // self.k_)
        # SyncFunc<S_MTE3>, then DataCopyPad of computeLen ids
        self.balancedExpertIdsTensor_[start : start + computeLen] = self.outTensor_[:computeLen]

    def CalculateUnrollRest(self, start: int, loopNum: int, restNum: int) -> None:
        # SyncFunc<MTE3_S>: the last unrolled copy has read outTensor_
        base = start + loopNum * UNROLL_NUM
        for i in range(restNum):
            expertId = GetValue(self.expertIdsTensor_, base + i)
            self.outTensor_[i] = self.NewExpertId(expertId * self.f_, (base + i) // self.k_)
        self.balancedExpertIdsTensor_[base : base + restNum] = self.outTensor_[:restNum]

    def CalculateUnroll(self, start: int, computeLen: int) -> None:
        loopNum, restNum = divmod(computeLen, UNROLL_NUM)
        for i in range(loopNum):
            # SyncFunc<MTE3_S> from the second group on; DataCacheCleanAndInvalid of the first id
            base = start + i * UNROLL_NUM
            expertIds = [GetValue(self.expertIdsTensor_, base + j) for j in range(UNROLL_NUM)]
            tableOffsetList = [expertId * self.f_ for expertId in expertIds]
            for j in range(UNROLL_NUM):
                self.outTensor_[j] = self.NewExpertId(tableOffsetList[j], (base + j) // self.k_)
            # SyncFunc<S_MTE3>, then DataCopyPad of the four ids
            self.balancedExpertIdsTensor_[base : base + UNROLL_NUM] = self.outTensor_[:UNROLL_NUM]
        if restNum != 0:
            self.CalculateUnrollRest(start, loopNum, restNum)

    def ProcessEachTokenPruning(self, tokenIdx: int) -> None:
        k = self.k_
        # DataCopyPad of the token's K scales into the queue, then Cast to FP32 (CAST_NONE)
        localScales = self.expertScalesTensor_[tokenIdx * k : (tokenIdx + 1) * k].clone()
        localScalesFp32 = localScales.to(torch.float32)
        scaleSum = torch.sum(localScalesFp32)  # Sum, one row of k
        localThresholdProducts = self.localThresholds_ * scaleSum  # Muls
        localCompareResult = localScalesFp32 >= localThresholdProducts  # Compare, CMPMODE::GE
        self.localActiveMaskBuf_.fill_(1)  # Duplicate<half>(.., 1, k)
        zero = torch.zeros((), dtype=torch.float16)  # Select, VSEL_TENSOR_SCALAR_MODE
        selected = torch.where(localCompareResult, self.localActiveMaskBuf_, zero)
        localresultMaskUint8 = selected.to(torch.uint8)  # Cast half -> uint8, read as bool
        self.balancedActiveMaskTensor_[tokenIdx * k : (tokenIdx + 1) * k] = localresultMaskUint8

    def ProcessPruning(self, tokenStart: int, tokenEnd: int) -> None:
        # InitPruning, then the thresholds (all tokens share them) and this core's active_mask
        self.localThresholds_ = self.localThresholdsBuf_
        self.localThresholds_[:] = self.preTuningThresholdTensor_[: self.k_]
        if self.isActiveMask_:
            count = tokenEnd - tokenStart
            self.localOriginActiveMaskBuf_[:count] = self.activeMaskInTensor_[tokenStart:tokenEnd]
        self.localActiveMaskBuf_.fill_(0)  # Duplicate<half>(.., 0, k), Cast to uint8
        localAllFalseMaskBool = self.localActiveMaskBuf_.to(torch.uint8)
        for tokenIdx in range(tokenStart, tokenEnd):
            active = True
            if self.isActiveMask_:
                active = bool(self.localOriginActiveMaskBuf_[tokenIdx - tokenStart])
            if not active:  # SyncFunc<V_MTE3>, then the all-false mask of the token
                at = tokenIdx * self.k_
                self.balancedActiveMaskTensor_[at : at + self.k_] = localAllFalseMaskBool
                continue
            self.ProcessEachTokenPruning(tokenIdx)

    @staticmethod
    def GetCoreRange(coreIndex: int, coreNum: int, totalData: int) -> tuple[int, int]:
        perCore, remainder = divmod(totalData, coreNum)
        if coreIndex < remainder:
            start = (perCore + 1) * coreIndex
            end = start + perCore + 1
        else:
            start = (perCore + 1) * remainder + perCore * (coreIndex - remainder)
            end = start + perCore
        return start, min(end, totalData)

    def Process(self) -> None:
        aivIndex = hp.GetBlockIdx()
        if self.EnablePruning:  # the pruning, split by tokens
            self.ProcessPruning(*self.GetCoreRange(aivIndex, self.aivCoreNum_, self.bs_))
        # the map, split by ids
        startIndex, endIndex = self.GetCoreRange(aivIndex, self.aivCoreNum_, self.bs_ * self.k_)
        computeLen = endIndex - startIndex
        self.outTensor_ = torch.zeros(BUFFER_SIZE // self.DataType.itemsize, dtype=self.DataType)
        if computeLen >= UNROLL_NUM:
            self.CalculateUnroll(startIndex, computeLen)
        else:
            self.Calculate(startIndex, endIndex, computeLen)


def moe_update_expert(expertIdsGM, eplbTableGM, expertScalesGM, pruningThresholdGM, activeMaskGM,
                      balancedExpertIdsOutGM, balancedActiveMaskOutGM, workspaceGM, tilingGM,
                      BalanceMode=RANK_ID_BALANCING_MODE, ExpertScalesDataType=TILINGKEY_FLOAT,
                      DTYPE_EXPERT_IDS=torch.int32):  # fmt: skip
    """The entry: the template instance of the tiling key (and of the ids' data type)."""
    tilingData = hp.GET_TILING_DATA_WITH_STRUCT(MoeUpdateExpertTilingData, tilingGM)
    if ExpertScalesDataType == TILINGKEY_FLOAT:
        if BalanceMode == RANK_ID_BALANCING_MODE:  # no pruning
            op = MoeUpdateExpert(DTYPE_EXPERT_IDS, torch.float32, False)
        else:
            op = MoeUpdateExpert(DTYPE_EXPERT_IDS, torch.float32, True)
    elif ExpertScalesDataType == TILINGKEY_HALF:
        op = MoeUpdateExpert(DTYPE_EXPERT_IDS, torch.float16, True)
    else:
        op = MoeUpdateExpert(DTYPE_EXPERT_IDS, torch.bfloat16, True)
    op.Init(expertIdsGM, eplbTableGM, expertScalesGM, pruningThresholdGM, activeMaskGM,
            balancedExpertIdsOutGM, balancedActiveMaskOutGM, workspaceGM, tilingData)  # fmt: skip
    op.Process()


def launch_update_expert(expertIds, eplbTable, expertScales=None, pruningThreshold=None,
                         activeMask=None, balanceMode=0) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """aclnnMoeUpdateExpert on this rank (localRankId and worldSize its own): the tiling, then
    the launch. Returns balancedExpertIds and balancedActiveMask."""
    inputs = (expertIds, eplbTable, expertScales, pruningThreshold, activeMask)
    args = [a if a is None or isinstance(a, torch.Tensor) else on_device(a) for a in inputs]
    tiling, (balance, scalesKey), numBlocks = MoeUpdateExpertTilingFunc(
        *args, hp.get_rank(), hp.get_world_size(), balanceMode
    )
    balanced = torch.zeros(expertIds.shape, dtype=args[0].dtype, device=hp.device())
    mask = torch.ones(expertIds.shape, dtype=torch.bool, device=hp.device())  # see the reference
    workspace = zeros(16, dtype=torch.uint8)  # GetLibApiWorkSpaceSize: the kernel uses none
    hp.launch(moe_update_expert, *args, balanced, mask, workspace, tiling, balance, scalesKey,
              args[0].dtype, block_dim=numBlocks, kernel_type="aiv")  # fmt: skip
    return balanced, mask


# ---------------------------------------------------------------- inputs and numpy reference


def eplb_table(n: int, instances: int) -> np.ndarray:
    """The EPLB table of ``instances`` physical experts over ``instances - 1`` logical ones: each
    logical expert e on instance e, and logical 0 also on the last instance (``f`` = 3)."""
    logical = instances - 1
    table = np.zeros((logical, 3), dtype=np.int32)
    table[:, 0], table[:, 1] = 1, np.arange(logical)
    table[0] = (2, 0, instances - 1)
    return table


def big_table(n: int) -> np.ndarray:
    """The standalone launches' table: 12 logical experts, expert e with ``1 + e % 3`` of the
    ``min(n, 3) + 1`` columns' instances (``100 * e + column``), the rest of the row zero."""
    f = min(n, 3) + 1
    table = np.zeros((12, f), dtype=np.int32)
    for e in range(12):
        count = min(1 + e % 3, f - 1)
        table[e, 0] = count
        table[e, 1 : 1 + count] = 100 * e + np.arange(1, count + 1)
    return table


def update_reference(ids, table, rank, n, balanceMode, scales=None, threshold=None, active=None):
    """numpy: the balanced ids (int64) and the pruning mask (bool) of the op's definition;
    without pruning inputs the kernel leaves the mask as the host allocated it (here all true)."""
    bs, k = ids.shape
    count = table[ids, 0].astype(np.int64)
    by_rank = rank // -(-n // count) + 1  # the rank's group of ceil(n / count) ranks
    by_token = np.arange(bs)[:, None] % count + 1
    column = np.where(count == 1, 1, by_rank if balanceMode == 0 else by_token)
    balanced = table[ids, column].astype(np.int64)
    mask = np.ones((bs, k), dtype=bool)
    if scales is not None:
        s = scales.astype(np.float64)
        mask = s >= threshold.reshape(1, k) * s.sum(axis=1, keepdims=True)
        if active is not None:
            mask &= active[:, None]
    return balanced, mask


def standalone_case(case: str, rank: int, n: int):
    """Inputs of a standalone launch: (ids, table, scales, threshold, active, balanceMode)."""
    shapes = {"rank": (6, 3), "token": (7, 5), "half": (3, 4), "bf16": (9, 2)}
    bs, k = shapes[case]
    rng = np.random.default_rng(100 * rank + len(case))
    table = big_table(n)
    ids = np.stack([rng.permutation(len(table))[:k] for _ in range(bs)])
    ids = ids.astype(np.int64 if case == "token" else np.int32)
    if case == "rank":
        return ids, table, None, None, None, 0
    eighths = rng.integers(1, 9, size=(bs, k)) / 8
    threshold = (rng.integers(0, 24 // k + 1, size=k) / 16).astype(np.float32)
    eighths[0], eighths[0, 0], threshold[0] = 1 / 8, (k - 1) / 8, 0.5  # a tie: kept (GE)
    dtype = {"token": np.float32, "half": np.float16, "bf16": np.float32}[case]
    scales = eighths.astype(dtype)
    # active_mask: the documentation wants the true tokens first
    active = np.arange(bs) < max(bs - 1 - rank % 2, 1) if case != "bf16" else None
    return ids, table, scales, threshold, active, int(case == "token")


def standalone(case: str) -> list[str]:
    """One launch of MoeUpdateExpert alone, checked against the numpy reference."""
    rank, n = hp.get_rank(), hp.get_world_size()
    ids, table, scales, threshold, active, mode = standalone_case(case, rank, n)
    scales_in = scales
    if case == "bf16":  # numpy has no bfloat16: the eighths go in as a torch tensor
        scales_in = torch.from_numpy(scales).to(torch.bfloat16)
    if case == "half":
        threshold = threshold.reshape(1, -1)  # the [1, k] form of pruning_threshold
    balanced, mask = launch_update_expert(ids, table, scales_in, threshold, active, mode)
    want_ids, want_mask = update_reference(ids, table, rank, n, mode, scales, threshold, active)
    got = torch.cat([balanced.reshape(-1).long(), mask.reshape(-1).long()])
    want = np.concatenate([want_ids.reshape(-1), want_mask.reshape(-1).astype(np.int64)])
    kept = "mask untouched" if scales is None else f"{int(want_mask.sum())} kept"
    return [compare(case, got, want, f"{ids.size} ids, {kept}")]


def eplb(launch: int) -> str:
    """The documented order: MoeUpdateExpert, then the dispatch and the combine with its ids."""
    rank, n = hp.get_rank(), hp.get_world_size()
    instances = LOCAL_EXPERTS * n
    table = eplb_table(n, instances)
    rng = np.random.default_rng(1000 * launch + rank)
    ids = np.stack([rng.permutation(len(table))[:K] for _ in range(BS)]).astype(np.int32)
    x = (100 * rank + 10 * np.arange(BS)[:, None] + np.arange(H) + launch).astype(np.float16)
    mode = launch - 1  # launch 1 maps by rank, launch 2 by token
    balanced, _ = launch_update_expert(ids, table, balanceMode=mode)
    expand_x, expand_idx, _, send_counts = launch_dispatch(x, balanced.cpu().numpy())
    x_out = zeros(BS, H)
    tiling = make_tiling(rank, n)
    workspace = zeros(tiling.moeDistributeCombineV2Info.aivNum * MASK_CALC_NEED_WORKSPACE // 2)
    scales = expert_scales(rank, launch)
    hp.launch(moe_distribute_combine_v2, experts(expand_x, send_counts), balanced, expand_idx,
              send_counts, on_device(scales), *[None] * 13, x_out, workspace, tiling,
              block_dim=tiling.moeDistributeCombineV2Info.aivNum, kernel_type="aiv")  # fmt: skip
    physical, _ = update_reference(ids, table, rank, n, mode)
    answers = x.astype(np.float32)[:, None, :] + physical.astype(np.float32)[:, :, None]
    want = (scales[:, :, None] * answers).sum(axis=1).astype(np.float16)
    return compare(f"eplb-{launch}", x_out, want, f"{BS * K} pairs")


def main() -> list[str]:
    """Four launches alone (rank map; token map with FP32 pruning, int64 ids; FP16 pruning
    under the rank map; BF16 pruning without active_mask), then two EPLB rounds of update,
    dispatch and combine."""
    lines = []
    for case in ("rank", "token", "half", "bf16"):
        lines += standalone(case)
    for launch in (1, 2):
        lines.append(eplb(launch))
    return lines


if __name__ == "__main__":
    run_sample(main, platform=PLATFORM, **RUN_KWARGS)
