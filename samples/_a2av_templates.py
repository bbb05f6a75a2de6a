"""Host and kernel helpers of ``mc2/allto_allv_quant_grouped_mat_mul/op_kernel/mc2_templates/``
that the AlltoAllV grouped-matmul ports share, as their kernels share the templates: the
batch's counts and displacements (``communication/a2av_comm_params.h``), the permute's prefix
sums (``communication/a2av_permute_engine.h``) and the host's experts per batch
(``CalcExpertNum``). None of them orders work.
"""

from __future__ import annotations

from _mc2_templates import CeilDiv

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
