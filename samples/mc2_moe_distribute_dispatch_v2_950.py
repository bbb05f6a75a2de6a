"""Port of ops-transformer's MoeDistributeDispatchV2 on Ascend 950 (the CCU kernel), call for call.

Source: ops-transformer, ``mc2/moe_distribute_dispatch_v2/op_kernel/arch35/moe_distribute_dispatch_v2_a5_ccu.h``
(``MoeDistributeDispatchA5``: ``InitCommAndStatus``, ``TokenScatter``, ``MoeScatterCopyTokens``,
``MoeScatter``, ``Communication``, ``TokenGatherProcess``, ``UpdateMoeRankOutput``, ``Process``),
the tiling struct ``.../moe_distribute_dispatch_v2_tiling.h`` and the host's ``SetCommTiling``
in ``op_host/op_tiling/arch35/moe_distribute_dispatch_v2_tiling_arch35.cpp`` (algConfig
``"AlltoAll=level0:fullmesh;level1:pairwise"`` for HCCL_CMD_HALF_ALLTOALLV, commEngine CCU).
docs/notes/fidelity-ii.md explains the window it reads.

What runs unchanged: ``Hccl<HCCL_SERVER_TYPE_CCU>``, ``InitV2`` + ``SetCcTilingV2`` on the
context, the receive buffer and the per-core status words at ``context->windowsOut[0]``
(the status word picks one half of the window and flips on every launch, so the sample
launches the kernel twice), ``context->winSize``, the send buffer layout in the workspace
(per destination rank: a 512-byte header of per-expert counts, then the tokens sorted by
expert), the die-0/die-1 ``sendSizes``/``sendOffsets`` arrays, ``AlltoAllvWrite<true>`` with
``localDataSize = 512 + this rank's own-expert bytes`` on AIV 0, ``Wait`` on AIV 0 between
two ``SyncAll``, ``Finalize`` on AIV 0, and the gather into ``expandXOut``, ``sendCountsOut``
and ``expertTokenNumsOut`` (cumsum mode).

Stand-ins: FP16 tokens instead of BF16, no quantisation (``UNQUANT``, no smooth scales), no
shared experts, no token mask, ``globalBs`` 0, ``expandIdxOut`` and the dynamic scales are
not produced (``SaveExpandIdx`` and ``CopyScalesToOut`` are skipped); the vector Sort is a
stable numpy argsort of the expert ids (the kernel sorts ascending, ties by token index);
two AIV cores.

Run: ``python samples/mc2_moe_distribute_dispatch_v2_950.py`` (4 emulated ranks),
``python -m hccl_py run -n 2 --backend gloo samples/mc2_moe_distribute_dispatch_v2_950.py``.
"""

from ctypes import c_bool, c_int32, c_uint32, c_uint64

import numpy as np
import torch
from _common import WORLD_GROUP, compare, on_device, run_sample
from _mc2 import moe_inputs, moe_received, split_to_core

import hccl_py as hp
from hccl_py import (
    HCCL_CMD_HALF_ALLTOALLV,
    HCCL_DATA_TYPE_FP16,
    Hccl,
    HcclServerType,
    Mc2CcTiling,
    Mc2CcTilingConfig,
    Mc2InitTiling,
    TilingData,
    offsetof,
)

PLATFORM = "950"
RUN_KWARGS = {"buffsize_mb": 2}
BS, K, H = 3, 2, 16  # tokens per rank, experts per token, hidden size
LOCAL_EXPERTS = 2  # moe experts per rank
AIV_NUM = 2
COUNT_OFFSET = STATUS_OFFSET = 512
CCU = HcclServerType.HCCL_SERVER_TYPE_CCU


class MoeDistributeDispatchV2Info(TilingData):
    """The host's per-op facts (moe_distribute_dispatch_v2_tiling.h), field for field."""

    _fields_ = (
        [
            (name, c_uint32)
            for name in [
                "epWorldSize",
                "tpWorldSize",
                "epRankId",
                "tpRankId",
                "expertShardType",
                "sharedExpertNum",
                "sharedExpertRankNum",
                "moeExpertNum",
                "quantMode",
                "globalBs",
                "bs",
                "k",
                "h",
                "a",
                "aivNum",
            ]
        ]
        + [
            (name, c_bool)
            for name in [
                "isTokenMask",
                "isExpertMask",
                "hasElasticInfo",
                "isPerformance",
                "isQuant",
                "isMc2Context",
                "hasExpertScales",
                "reserved1",
            ]
        ]
        + [
            ("totalUbSize", c_uint64),
            ("totalWinSizeEp", c_uint64),
            ("expertTokenNumsType", c_uint32),
            ("zeroComputeExpertNum", c_int32),
            ("maxSizeForUbBuffer", c_uint32),
            ("scalesRow", c_uint64),
            ("scalesCol", c_uint64),
            ("scalesTypeSize", c_uint32),
            ("scalesCount", c_uint64),
        ]
    )


class MoeDistributeDispatchV2TilingData(TilingData):
    _fields_ = [
        ("mc2InitTiling", Mc2InitTiling),
        ("mc2CcTiling1", Mc2CcTiling),
        ("moeDistributeDispatchV2Info", MoeDistributeDispatchV2Info),
    ]


def align(value: int, to: int) -> int:
    return -(-value // to) * to


def per_rank_data_size(h: int) -> int:
    """``perRankDataSize_``: a 512-byte count header, then BS x localExpertNum token slots."""
    return COUNT_OFFSET + align(align(h, 32) * 2, 512) * BS * LOCAL_EXPERTS


def u64_view(addr: hp.GmAddr, n: int) -> torch.Tensor:
    return hp.gm_tensor(addr, torch.int64, n)


def moe_distribute_dispatch_v2(
    xGM, expertIdsGM, expandXOutGM, expertTokenNumsOutGM, sendCountsOutGM, workspaceGM, tilingGM
):
    tiling = hp.GET_TILING_DATA_WITH_STRUCT(MoeDistributeDispatchV2TilingData, tilingGM)
    info = tiling.moeDistributeDispatchV2Info
    # Init / InitGlobalAttrs / QuantInit (UNQUANT)
    epRankId, aivId, aivNum = info.epRankId, hp.GetBlockIdx(), info.aivNum
    epWorldSize, axisBS, axisK, axisH = info.epWorldSize, info.bs, info.k, info.h
    localExpertNum = info.moeExpertNum // (epWorldSize - info.sharedExpertRankNum)
    axisMaxBs = axisBS  # globalBs == 0
    perTokenCommSize = align(align(axisH, 32) * 2, 512)
    perRankDataSize = COUNT_OFFSET + perTokenCommSize * axisMaxBs * localExpertNum
    tokenHalfs = perTokenCommSize // 2

    # InitCommAndStatus
    context = hp.GetHcclContext(0)
    hccl = Hccl[CCU]()
    hccl.InitV2(context, tiling)
    hccl.SetCcTilingV2(offsetof(MoeDistributeDispatchV2TilingData, "mc2CcTiling1"))
    sendBufGM = workspaceGM
    sendSizeGM = sendBufGM + perRankDataSize * epWorldSize
    sendOffsetGM = sendSizeGM + epWorldSize * 8 * 2
    cclBuf = context.windowsOut[0]
    statusSize = aivNum * STATUS_OFFSET
    status = hp.gm_tensor(cclBuf + aivId * STATUS_OFFSET, torch.int32, 1)
    if int(status[0]) == 0:
        recvBufGM = cclBuf + statusSize
        recvOffset = statusSize + epRankId * perRankDataSize
        status[0] = 1
    else:
        halfDataSize = (context.winSize - statusSize) // 2
        recvBufGM = cclBuf + statusSize + halfDataSize
        recvOffset = statusSize + halfDataSize + epRankId * perRankDataSize
        status[0] = 0

    # TokenScatter: sort the (token, k) pairs by expert, count tokens per expert
    bsk = axisBS * axisK
    expertIds = hp.gm_tensor(expertIdsGM, torch.int32, bsk).cpu().numpy()
    sortedIndex = np.argsort(expertIds, kind="stable")
    sortedIds = expertIds[sortedIndex]
    expertFreq = np.bincount(expertIds, minlength=info.moeExpertNum)
    expertCumSum = np.cumsum(expertFreq)
    # MoeScatterCopyTokens: this core's share of the sorted pairs into the send buffer
    start, end = split_to_core(bsk, aivNum, aivId)
    ids = sortedIds[start:end]
    toRank = ids // localExpertNum
    rankStart = toRank * localExpertNum
    preCount = np.arange(start, end) - np.where(rankStart > 0, expertCumSum[rankStart - 1], 0)
    slot = (toRank * perRankDataSize + COUNT_OFFSET + preCount * perTokenCommSize) // 2
    sendHalfs = hp.gm_tensor(sendBufGM, torch.float16, perRankDataSize * epWorldSize // 2)
    x = hp.gm_tensor(xGM, HCCL_DATA_TYPE_FP16, axisBS * axisH).view(axisBS, axisH)
    rows = torch.from_numpy(slot[:, None] + np.arange(axisH)).to(sendHalfs.device)
    sendHalfs[rows.reshape(-1)] = x[torch.from_numpy(sortedIndex[start:end] // axisK)].reshape(-1)
    # MoeScatter: this core's ranks: counts header, die-0/die-1 sizes and offsets
    r0, r1 = split_to_core(epWorldSize, aivNum, aivId)
    counts = expertFreq.reshape(epWorldSize, localExpertNum)[r0:r1]
    sendSize = counts.sum(axis=1) * perTokenCommSize + COUNT_OFFSET
    halfSize = sendSize // 2
    base = np.arange(r0, r1) * perRankDataSize
    sizes, offsets = u64_view(sendSizeGM, 2 * epWorldSize), u64_view(sendOffsetGM, 2 * epWorldSize)
    for die, (size, offset) in enumerate(
        ((halfSize, base), (sendSize - halfSize, base + halfSize))
    ):
        sizes[die * epWorldSize + r0 : die * epWorldSize + r1] = torch.from_numpy(size)
        offsets[die * epWorldSize + r0 : die * epWorldSize + r1] = torch.from_numpy(offset)
    headers = hp.gm_tensor(sendBufGM, torch.int32, perRankDataSize * epWorldSize // 4)
    header_at = (base // 4)[:, None] + np.arange(localExpertNum)
    headers[torch.from_numpy(header_at.reshape(-1))] = torch.from_numpy(
        counts.reshape(-1).astype(np.int32)
    )

    # Communication
    hp.SyncAll()
    if aivId == 0:
        own = expertFreq[epRankId * localExpertNum : (epRankId + 1) * localExpertNum]
        localDataSize = COUNT_OFFSET + int(own.sum()) * perTokenCommSize
        handle = hccl.AlltoAllvWrite[True](
            sendBufGM, sendOffsetGM, sendSizeGM, recvOffset, localDataSize
        )
        hccl.Wait(handle)
    hp.SyncAll()

    # TokenGather / TokenGatherProcess(0, localExpertNum): expert-major, then source rank
    recvHeaders = hp.gm_tensor(recvBufGM, torch.int32, perRankDataSize * epWorldSize // 4)
    at = (np.arange(epWorldSize) * perRankDataSize // 4)[None, :] + np.arange(localExpertNum)[
        :, None
    ]
    recvCnt = recvHeaders[torch.from_numpy(at.reshape(-1))].cpu().numpy().reshape(at.shape)
    cumSum = np.cumsum(recvCnt.reshape(-1)).reshape(recvCnt.shape)  # [expert, rank]
    before = cumSum - recvCnt
    inRank = np.cumsum(recvCnt, axis=0) - recvCnt  # tokens of earlier experts in a rank's slot
    recvHalfs = hp.gm_tensor(recvBufGM, torch.float16, perRankDataSize * epWorldSize // 2)
    expandX = hp.gm_tensor(expandXOutGM, torch.float16, int(cumSum[-1, -1]) * axisH)
    g0, g1 = split_to_core(epWorldSize, aivNum, aivId)
    for k in range(localExpertNum):
        for r in range(g0, g1):
            n = int(recvCnt[k, r])
            first = (r * perRankDataSize + COUNT_OFFSET + int(inRank[k, r]) * perTokenCommSize) // 2
            src = (first + np.arange(n)[:, None] * tokenHalfs + np.arange(axisH)).reshape(-1)
            out = int(before[k, r]) * axisH
            expandX[out : out + n * axisH] = recvHalfs[torch.from_numpy(src)]
        # UpdateMoeRankOutput
        hp.gm_tensor(sendCountsOutGM, torch.int32, epWorldSize * localExpertNum)[
            epWorldSize * k + g0 : epWorldSize * k + g1
        ] = torch.from_numpy(cumSum[k, g0:g1].astype(np.int32))
    if aivId == 0:
        tokenNums = recvCnt.sum(axis=1)
        if info.expertTokenNumsType == 0:
            tokenNums = np.cumsum(tokenNums)
        hp.gm_tensor(expertTokenNumsOutGM, torch.int64, localExpertNum)[:] = torch.from_numpy(
            tokenNums.astype(np.int64)
        )
        hccl.Finalize()


def make_tiling(rank: int, n: int) -> MoeDistributeDispatchV2TilingData:
    """Host side: the op's attributes and SetCommTiling's HCCL tilings."""
    tiling = MoeDistributeDispatchV2TilingData()
    info = tiling.moeDistributeDispatchV2Info
    info.epWorldSize, info.epRankId, info.tpWorldSize = n, rank, 1
    info.moeExpertNum, info.bs, info.k, info.h = LOCAL_EXPERTS * n, BS, K, H
    info.aivNum, info.expertTokenNumsType = AIV_NUM, 0
    algConfig = "AlltoAll=level0:fullmesh;level1:pairwise"
    config = Mc2CcTilingConfig(WORLD_GROUP, HCCL_CMD_HALF_ALLTOALLV, algConfig)
    config.SetCommEngine(6)  # mc2tiling::A5_CCU_ENGINE
    config.GetTiling(tiling.mc2InitTiling)
    config.GetTiling(tiling.mc2CcTiling1)
    return tiling


def inputs(rank: int, launch: int) -> tuple[np.ndarray, np.ndarray]:
    """Rank ``rank``'s tokens (exact FP16 integers naming rank, token, column) and routing."""
    return moe_inputs(rank, launch, BS, K, H, LOCAL_EXPERTS)


def reference(rank: int, launch: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """numpy: (expandX rows, sendCounts, expertTokenNums) that rank ``rank`` receives."""
    received = moe_received(inputs, rank, launch, LOCAL_EXPERTS)
    counts = np.array([len(pairs) for _, pairs in received]).reshape(LOCAL_EXPERTS, -1)
    rows = np.concatenate([x[pairs // K] for x, pairs in received])
    return rows, np.cumsum(counts.reshape(-1)), np.cumsum(counts.sum(axis=1))


def launch_dispatch(rank: int, n: int, x, ids, workspace: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """One launch of the dispatch on ``x`` and ``ids``: (expandX, expertTokenNums, sendCounts)."""
    expand_x = torch.zeros(BS * K * n, H, dtype=torch.float16, device=hp.device())
    token_nums = torch.zeros(LOCAL_EXPERTS, dtype=torch.int64, device=hp.device())
    send_counts = torch.zeros(LOCAL_EXPERTS * n, dtype=torch.int32, device=hp.device())
    hp.launch(
        moe_distribute_dispatch_v2,
        on_device(x),
        on_device(ids),
        expand_x,
        token_nums,
        send_counts,
        workspace.to(hp.device()),
        make_tiling(rank, n),
        block_dim=AIV_NUM,
        kernel_type="aiv",
    )
    return expand_x, token_nums, send_counts


def main() -> list[str]:
    rank, n = hp.get_rank(), hp.get_world_size()
    # the workspace: send buffer, then the die-0/die-1 sizes and offsets (uint64 each)
    workspace = torch.zeros(per_rank_data_size(H) * n + 4 * 8 * n, dtype=torch.uint8)
    lines = []
    for launch in (1, 2):  # the status words flip: the second launch uses the other half
        x, ids = inputs(rank, launch)
        want_x, want_counts, want_nums = reference(rank, launch)
        expand_x, token_nums, send_counts = launch_dispatch(rank, n, x, ids, workspace)
        got = torch.cat(
            [expand_x[: len(want_x)].flatten().double(), send_counts.double(), token_nums.double()]
        )
        want = np.concatenate([want_x.reshape(-1), want_counts, want_nums]).astype(np.float64)
        first = rank * LOCAL_EXPERTS
        detail = f"{len(want_x)} tokens for experts {first}..{first + LOCAL_EXPERTS - 1}"
        lines.append(compare(f"launch-{launch}", got, want, detail))
    return lines


if __name__ == "__main__":
    run_sample(main, platform=PLATFORM, **RUN_KWARGS)
