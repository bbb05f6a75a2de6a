"""Port of ops-transformer's MoeDistributeCombineV2 on Ascend 950 (the CCU kernel), call for call.

Source: mirror-cann/ops-transformer at 3a280bcc (2026-07-21), every file read at that commit:
``mc2/moe_distribute_combine_v2/op_kernel/arch35/moe_distribute_combine_v2_a5_ccu.h``
(``MoeDistributeCombineA5``: ``CalculateRecvBufAndRecvOffset``, ``Init``, ``PrepareInit``,
``SplitRank``, ``HandleSharedAndMoeRank``, ``CopyAndPadData``, ``Communication``,
``CalculateInit``, ``CalculateMoeResult``, ``HandleCalculateToken``, ``Calculate``, ``Process``),
its entry ``op_kernel/arch35/moe_distribute_combine_v2_apt.cpp`` (``TILINGKEY_TPL_A5`` +
``TILINGKEY_TPL_CCU``), the tiling struct ``op_kernel/moe_distribute_combine_v2_tiling.h``
(imported from samples/mc2_moe_distribute_combine_v2.py) and the host
``op_host/op_tiling/arch35/moe_distribute_combine_tiling_arch35.cpp`` (``SetHcclTiling``,
``SetWorkSpace``, ``globalBs`` 0 read as ``bs * epWorldSize``). docs/notes/mc2-kernels.md,
section 34.

What it computes: the way back for samples/mc2_moe_distribute_dispatch_v2_950.py, whose kernel
runs first (imported). Each expert rank copies the rows it received back into a send buffer in
the workspace, one region per token rank (its experts' rows in order), writes the die-0/die-1
``sendSizes``/``sendOffsets`` and sends them with one ``AlltoAllvWrite<true>`` on AIV 0 into
the window half its status word picks (the status words are the dispatch's: a dispatch and
its combine use the two halves); then ``x[t] = sum_k scale[t, k] * row(t, k)`` in FP32,
rounded to half (``CAST_RINT``), where ``row(t, k)`` sits at slot ``assistInfo[t * K + k]``
of the region of the rank of expert ``expertIds[t, k]``. Between the kernels the "experts"
subtract ``16 * expert`` from each row (exact in FP16), so that every ``k`` reads a distinct row.

Stand-ins: those of the dispatch port (FP16, no quantisation, no shared experts, no token
mask, ``globalBs`` 0, two AIV cores); the ``assistInfoForCombine`` input is computed on the
host as the dispatch's ``SaveExpandIdx`` writes it (the dispatch port skips that output);
``SyncFunc``/``PipeBarrier`` are program order, ``DataCacheCleanAndInvalid`` is not needed,
UB buffers are torch tensors. With no token mask and ``bs >= aivNum`` the branch of
``Calculate`` that splits a token's columns over cores is not reached.

Run: ``python samples/mc2_moe_distribute_combine_v2_950.py`` (4 emulated ranks),
``python -m hccl_py run -n 2 --backend gloo samples/mc2_moe_distribute_combine_v2_950.py``.
"""

import numpy as np
import torch
from _common import WORLD_GROUP, compare, on_device, run_sample
from _mc2 import split_to_core
from mc2_moe_distribute_combine_v2 import MoeDistributeCombineV2TilingData
from mc2_moe_distribute_dispatch_v2_950 import (
    AIV_NUM,
    BS,
    CCU,
    COUNT_OFFSET,
    LOCAL_EXPERTS,
    PLATFORM,
    RUN_KWARGS,
    H,
    K,
    inputs,
    launch_dispatch,
    per_rank_data_size,
    u64_view,
)

import hccl_py as hp
from hccl_py import HCCL_CMD_HALF_ALLTOALLV, Hccl, Mc2CcTilingConfig, offsetof

UB_ALIGN = 32
SIZEOF_HALF = 2
STATUS_SIZE, COMM_ALIGN = 512, 512  # host: moe_distribute_combine_tiling_arch35.cpp
HCCL_BUFFSIZE = RUN_KWARGS["buffsize_mb"] << 20  # GetMaxWindowSize
SCALES = np.array([0.5, 1.0, 2.0], dtype=np.float32)


def moe_distribute_combine_v2(
    expandXGM, expertIdsGM, assistInfoGM, epSendCountGM, scalesGM, XOutGM, workspaceGM, tilingGM
):
    tiling = hp.GET_TILING_DATA_WITH_STRUCT(MoeDistributeCombineV2TilingData, tilingGM)
    info = tiling.moeDistributeCombineV2Info
    # Init
    aivId, epRankId, aivNum = hp.GetBlockIdx(), info.epRankId, info.aivNum
    axisBS, axisH, axisK, epWorldSize = info.bs, info.h, info.k, info.epWorldSize
    sharedExpertRankNum = info.sharedExpertRankNum
    moeExpertRankNum = epWorldSize - sharedExpertRankNum
    axisMaxBS = info.globalBs // epWorldSize
    localExpertNum = info.moeExpertNum // moeExpertRankNum
    isShareExpertRank = epRankId < sharedExpertRankNum
    bskNum = axisMaxBS * axisK
    perTokenSize = axisH * SIZEOF_HALF
    perRankDataSize = perTokenSize * axisMaxBS * localExpertNum
    sendBufGM = workspaceGM
    sendSizeGM = sendBufGM + epWorldSize * perRankDataSize
    sendOffsetGM = sendSizeGM + epWorldSize * 8 * 2

    # CalculateRecvBufAndRecvOffset
    context = hp.GetHcclContext(0)
    hccl = Hccl[CCU]()
    hccl.InitV2(context, tiling)
    hccl.SetCcTilingV2(offsetof(MoeDistributeCombineV2TilingData, "mc2CcTiling1"))
    cclBuf = context.windowsOut[0]
    statusSize = aivNum * COUNT_OFFSET
    status = hp.gm_tensor(cclBuf + aivId * COUNT_OFFSET, torch.int32, 1)
    if int(status[0]) == 0:
        recvBufGM = cclBuf + statusSize
        recvOffset = statusSize + epRankId * perRankDataSize
        status[0] = 1
    else:
        halfDataSize = (context.winSize - statusSize) // 2
        recvBufGM = cclBuf + statusSize + halfDataSize
        recvOffset = statusSize + halfDataSize + epRankId * perRankDataSize
        status[0] = 0

    # PrepareSendData: PrepareInit, then SharedAndMoePrepare over this core's ranks
    inputCount = hp.gm_tensor(epSendCountGM, torch.int32, localExpertNum * epWorldSize)
    inputCount = inputCount.cpu().numpy().astype(np.int64)
    startRank, endRank = split_to_core(epWorldSize, aivNum, aivId)  # SplitRank
    rankNum = endRank - startRank
    if rankNum > 0:
        # HandleSharedAndMoeRank: per local expert, each rank's rows after the earlier experts'
        sizes, offsets = np.zeros((2, rankNum), np.int64), np.zeros((2, rankNum), np.int64)
        offset = np.zeros(rankNum, np.int64)
        expandX = hp.gm_tensor(expandXGM, torch.float16, int(inputCount[-1]) * axisH)
        sendHalfs = hp.gm_tensor(sendBufGM, torch.float16, epWorldSize * perRankDataSize // 2)
        inPreExpertCount = 0
        for k in range(1 if isShareExpertRank else localExpertNum):
            expertOffset = k * epWorldSize
            inPreCount = (
                inputCount[expertOffset + startRank - 1] if startRank > 0 else inPreExpertCount
            )
            for i in range(rankNum):
                curRankId = startRank + i
                curSumNum = int(inputCount[expertOffset + curRankId])
                curTokenNum = curSumNum - int(inPreCount)
                dst = (curRankId * perRankDataSize + int(offset[i]) * perTokenSize) // 2
                src, halfs = int(inPreCount) * axisH, curTokenNum * axisH  # the rows, in order
                sendHalfs[dst : dst + halfs] = expandX[src : src + halfs]
                offset[i] += curTokenNum
                inPreCount = curSumNum
                countByte = curTokenNum * perTokenSize
                sizes[0, i] += countByte // 2
                sizes[1, i] += countByte - countByte // 2
                offsets[0, i] = curRankId * perRankDataSize
                offsets[1, i] = curRankId * perRankDataSize + sizes[0, i]
            inPreExpertCount = inputCount[(k + 1) * epWorldSize - 1]
        # CopyAndPadData: die 0 at [startRank, endRank), die 1 epWorldSize entries later
        for gm, values in ((sendSizeGM, sizes), (sendOffsetGM, offsets)):
            out = u64_view(gm, 2 * epWorldSize)
            for die in range(2):
                at = die * epWorldSize + startRank
                out[at : at + rankNum] = torch.from_numpy(values[die])

    # Communication
    hp.SyncAll()
    if aivId == 0:
        idx = np.arange(localExpertNum) * epWorldSize + epRankId
        if isShareExpertRank:
            idx = idx[:1]
        count = inputCount[idx] - np.where(idx > 0, inputCount[idx - 1], 0)
        localDataSize = int(count.sum()) * perTokenSize
        handle = hccl.AlltoAllvWrite[True](
            sendBufGM, sendOffsetGM, sendSizeGM, recvOffset, localDataSize
        )
    # CalculateInit: overlapped with the communication
    expertIds = hp.gm_tensor(expertIdsGM, torch.int32, bskNum).cpu().numpy()
    expandIdx = hp.gm_tensor(assistInfoGM, torch.int32, bskNum).cpu().numpy()
    expandScales = hp.gm_tensor(scalesGM, torch.float32, bskNum).cpu()
    activeMaskBsCnt = axisBS  # no token mask
    if aivId == 0:
        hccl.Wait(handle)
    hp.SyncAll()

    # Calculate
    if activeMaskBsCnt < aivNum:
        aivNumPerToken = aivNum // activeMaskBsCnt
        if aivId >= activeMaskBsCnt * aivNumPerToken:
            beginIndex = endIndex = processLen = tokenOffset = 0  # return
        else:
            beginIndex = aivId // aivNumPerToken
            endIndex = beginIndex + 1
            blockCnt = UB_ALIGN // SIZEOF_HALF
            processLen = axisH // aivNumPerToken // blockCnt * blockCnt
            tokenOffset = processLen * (aivId % aivNumPerToken)
            if aivId % aivNumPerToken == aivNumPerToken - 1:
                processLen = axisH - (aivNumPerToken - 1) * processLen
    else:
        beginIndex, endIndex = split_to_core(activeMaskBsCnt, aivNum, aivId)
        processLen, tokenOffset = axisH, 0
    recvHalfs = hp.gm_tensor(recvBufGM, torch.float16, epWorldSize * perRankDataSize // 2)
    xOut = hp.gm_tensor(XOutGM, torch.float16, axisBS * axisH)
    for tokenIndex in range(beginIndex, endIndex) if processLen else ():
        # HandleCalculateToken: CalculateMoeResult (no shared experts, no shared expert x)
        sumLT = torch.zeros(processLen, dtype=torch.float32)
        for index in range(tokenIndex * axisK, (tokenIndex + 1) * axisK):
            dataSrcRank = int(expertIds[index]) // localExpertNum + sharedExpertRankNum
            src = (dataSrcRank * perRankDataSize + int(expandIdx[index]) * perTokenSize) // 2
            src += tokenOffset
            castLT = recvHalfs[src : src + processLen].cpu().float()
            sumLT = sumLT + castLT * expandScales[index]
        out = tokenIndex * axisH + tokenOffset
        xOut[out : out + processLen] = sumLT.half().to(xOut.device)  # CAST_RINT
    if aivId == 0:
        hccl.Finalize()


def CheckCommAttrs(info, localMoeExpertNum: int) -> None:
    """The host's window check: both halves within twice HCCL_BUFFSIZE ("A5 实际物理分配为
    HCCL_BUFFSIZE 的 2 倍"); hccl_py's 950 window is HCCL_BUFFSIZE (section 34)."""
    maxWindowSize = HCCL_BUFFSIZE * 2
    maxBs = info.globalBs // info.epWorldSize
    perToken = -(-info.h * 2 // COMM_ALIGN) * COMM_ALIGN
    actualSize = (
        info.aivNum * STATUS_SIZE + info.epWorldSize * maxBs * perToken * 2 * localMoeExpertNum
    )
    if actualSize > maxWindowSize:
        raise ValueError(f"HCCL_BUFFSIZE is too SMALL: {actualSize} > {maxWindowSize} bytes")


def make_combine_tiling(rank: int, n: int) -> MoeDistributeCombineV2TilingData:
    """Host side: the attributes, ``globalBs`` 0 as ``bs * epWorldSize``, CheckCommAttrs,
    ``totalWinSizeEp``, SetHcclTiling."""
    tiling = MoeDistributeCombineV2TilingData()
    info = tiling.moeDistributeCombineV2Info
    info.epWorldSize, info.epRankId, info.tpWorldSize = n, rank, 1
    info.moeExpertNum, info.bs, info.k, info.h = LOCAL_EXPERTS * n, BS, K, H
    info.globalBs, info.aivNum = BS * n, AIV_NUM
    CheckCommAttrs(info, LOCAL_EXPERTS)
    info.totalWinSizeEp = HCCL_BUFFSIZE * 2
    algConfig = "AlltoAll=level0:fullmesh;level1:pairwise"
    config = Mc2CcTilingConfig(WORLD_GROUP, HCCL_CMD_HALF_ALLTOALLV, algConfig)
    config.SetCommEngine(6)  # mc2tiling::A5_CCU_ENGINE
    config.GetTiling(tiling.mc2InitTiling)
    config.GetTiling(tiling.mc2CcTiling1)
    return tiling


def expand_idx(ids: np.ndarray) -> np.ndarray:
    """The dispatch's ``SaveExpandIdx``: each pair's slot among the pairs to its expert's rank."""
    flat = ids.reshape(-1)
    position = np.empty(flat.size, np.int64)
    position[np.argsort(flat, kind="stable")] = np.arange(flat.size)
    before = np.cumsum(np.bincount(flat, minlength=LOCAL_EXPERTS * hp.get_world_size()))
    rankStart = flat // LOCAL_EXPERTS * LOCAL_EXPERTS
    return (position - np.where(rankStart > 0, before[rankStart - 1], 0)).astype(np.int32)


def scales(rank: int, launch: int) -> np.ndarray:
    return np.random.default_rng(7000 + 100 * launch + rank).choice(SCALES, (BS, K))


def reference(rank: int, launch: int) -> np.ndarray:
    """numpy: ``x[t] = half(sum_k f32(x[t] - 16 * expert) * scale)``, FP32 in k order."""
    x, ids = inputs(rank, launch)
    acc = np.zeros((BS, H), np.float32)
    for k in range(K):
        row = (x - np.float16(16) * ids[:, k, None].astype(np.float16)).astype(np.float32)
        acc = acc + row * scales(rank, launch)[:, k, None]
    return acc.astype(np.float16)


def main() -> list[str]:
    rank, n = hp.get_rank(), hp.get_world_size()
    dispatch_ws = torch.zeros(per_rank_data_size(H) * n + 4 * 8 * n, dtype=torch.uint8)
    # SetWorkSpace: the send buffer (BS rows per local expert per rank), sizes and offsets
    combine_ws = torch.zeros(n * BS * H * 2 * LOCAL_EXPERTS + 4 * 8 * n, dtype=torch.uint8)
    lines = []
    for launch in (1, 2):
        x, ids = inputs(rank, launch)
        expand_x, token_nums, send_counts = launch_dispatch(rank, n, x, ids, dispatch_ws)
        # the experts: expert e's rows minus 16 * e
        per_expert = np.diff(token_nums.cpu().numpy(), prepend=0)  # cumsum mode
        expert = torch.from_numpy(
            rank * LOCAL_EXPERTS + np.repeat(np.arange(LOCAL_EXPERTS), per_expert)
        )
        rows = len(expert)
        expand_x[:rows] -= (16 * expert[:, None]).to(torch.float16).to(expand_x.device)
        x_out = torch.zeros(BS, H, dtype=torch.float16, device=hp.device())
        hp.launch(
            moe_distribute_combine_v2,
            expand_x,
            on_device(ids),
            on_device(expand_idx(ids)),
            send_counts,
            on_device(scales(rank, launch)),
            x_out,
            combine_ws.to(hp.device()),
            make_combine_tiling(rank, n),
            block_dim=AIV_NUM,
            kernel_type="aiv",
        )
        detail = f"{BS} tokens of {K} experts"
        lines.append(compare(f"launch-{launch}", x_out, reference(rank, launch), detail))
    return lines


if __name__ == "__main__":
    run_sample(main, platform=PLATFORM, **RUN_KWARGS)
