"""Port of ops-transformer's MoeDistributeDispatchV2 full-mesh kernel on Atlas A3 (windows only).

Source: ops-transformer, ``mc2/moe_distribute_dispatch_v2/op_kernel/moe_distribute_dispatch_v2_full_mesh.h``
(``MoeDistributeDispatchV2FullMesh``: ``SetDataStatus``, ``AllToAllDispatch``,
``CalAndSendCntByExp``, ``WaitDispatch``, ``CalRecvAndSetFlag``, ``LocalWindowCopy``,
``WaitAndFormatOutput``, ``CopyInAndOut``, ``Process``), the context helpers of
``mc2/common/op_kernel/moe_distribute_base.h`` (A3: ``HcclOpResParam``,
``GetStatusDataSpaceGm``, ``GetBaseWindAddrByRankId``, ``GetBaseWindStateAddrByRankId``),
``InitWinState`` in ``.../moe_distribute_v2_base.h`` and the constants of
``.../moe_distribute_v2_constant.h``. The kernel has no Hccl object: it reads the context
and its three windows, and (commEngine AIV) no AI CPU server runs, so there is no Finalize.

What runs unchanged: the context fields (``localWindowsIn``, ``localWindowsExp``,
``remoteRes[r].nextDevicePtr->windowsIn/windowsExp``, ``winSize``), the 0/1 data state in
this rank's Exp window (``FLAG_FIELD_OFFSET + aivId * 512``), flipped by every launch and
choosing the half of the In windows (``winDataSizeOffset_``) and of the state areas
(``dataState * WIN_STATE_OFFSET``); tokens written into the expert rank's In window at
``expertPerSizeOnWin * (epRankId * localExperts + expert % localExperts) + slot * hCommuSize``
in 512-byte split blocks whose last 32 bytes hold a 1.0f flag, with the (rank, token, k)
triple after the data; per-expert ``{1.0f, count}`` blocks into the expert rank's state area at
``STATE_OFFSET * epRankId + localExpert * epWorldSize * STATE_OFFSET``; the receiver's wait
for the flag sum, the status clean-up, ``sendCountsOut`` / ``expertTokenNumsOut``, and the
copy-out that polls each token's flag, writes ``expandXOut`` and ``expandIdxOut`` and clears
the flags. Cores: the first ``aivNum - aivUsedCumSum`` send tokens, the others counts.

Stand-ins: FP16 tokens; no quantisation, no shared experts, no token or expert mask, no
elastic info, no expert scales, no performance info; the soft synchronisation of the
copy-out cores through ``CUMSUM_FLAG_OFFSET`` flags in the window (``WaitCumSumFlag``) is a
``SyncAll``; numpy does the per-pair counting that the kernel does with vector compares.

The v3 entry (``v3-1``, ``v3-2``): ``mc2/moe_distribute_dispatch_v3/op_kernel/arch22/
moe_distribute_dispatch_v3_a3.cpp`` and the MTE builds of ``arch35/moe_distribute_dispatch_v3_apt.cpp``
run the same kernel with ``ContextHolder = Mc2MoeContextHolder``
(``moe_distribute_dispatch_v2/op_kernel/mc2_moe_context_holder.h``): rank and buffers from the
``mc2Context`` input (``Mc2MoeContext``, built on the host as aclnn does: samples/_mc2_context.py),
state area and status words at ``epHcclBuffer_[r]``, data at ``epHcclBuffer_[r] + STATE_SIZE``,
``totalWinSizeEp`` from the tiling (``ccl_buffer_size - 1 MiB - epWorldSize * 1024``). Its
buffers are the In windows of a communicator of its own. docs/notes/mc2-kernels.md, section 24.

Run: ``python samples/mc2_moe_distribute_dispatch_v2_full_mesh.py`` (4 emulated ranks),
``python -m hccl_py run -n 2 --backend gloo samples/mc2_moe_distribute_dispatch_v2_full_mesh.py``.
"""

from ctypes import Structure, c_bool, c_uint64

import numpy as np
import torch
from _common import compare, f32, i32, on_device, run_sample
from _mc2 import moe_inputs, moe_received, split_to_core, uint32_fields
from _mc2_context import EP_RANK_OFFSET_STEP, MB_SIZE, GetMc2ContextTensor, Mc2MoeContextHolder

import hccl_py as hp

PLATFORM = "A3"
RUN_KWARGS = {"buffsize_mb": 2}
BS, K, H = 4, 3, 48  # tokens per rank, experts per token, hidden size (rows wider than a flag)
LOCAL_EXPERTS = 2  # moe experts per rank
AIV_NUM = 3
FLAG_FIELD_OFFSET = 768 * 1024
WIN_STATE_OFFSET = 384 * 1024
WIN_ADDR_ALIGN = 512
STATE_OFFSET = 32
SPLIT_BLOCK_SIZE, SPLIT_BLOCK_DATA_SIZE = 512, 480
COMBINE_IN_DATA_SIZE = 2
SCALE_EXPAND_IDX_BUFFER = 44  # moe_distribute_check_win_size.h
ONE = 1.0  # the flag value (0x3F800000)


class Context:
    """``HcclContextHolder`` over the A3 ``HcclOpResParam`` (moe_distribute_base.h)."""

    def __init__(self, ctx: hp.HcclContext) -> None:
        self.ctx = ctx

    def GetEpRankId(self) -> int:
        return self.ctx.localUsrRankId

    def GetEpWorldSize(self) -> int:
        return self.ctx.rankSize

    def GetStatusDataSpaceGm(self) -> hp.GmAddr:
        return self.ctx.localWindowsExp

    def GetWindAddrByRankId(self, rankId: int, curRankId: int) -> hp.GmAddr:
        if rankId == curRankId:
            return self.ctx.localWindowsIn
        return self.ctx.remoteRes[rankId].nextDevicePtr.windowsIn

    def GetWindStateAddrByRankId(self, rankId: int, curRankId: int) -> hp.GmAddr:
        if rankId == curRankId:
            return self.ctx.localWindowsExp
        return self.ctx.remoteRes[rankId].nextDevicePtr.windowsExp


class DispatchV3Info(Structure):
    """The fields of ``MoeDistributeDispatchV2Info`` that the v3 entry's kernel reads here."""

    _fields_ = [
        *uint32_fields("epWorldSize", "epRankId"),
        ("isMc2Context", c_bool),
        ("totalWinSizeEp", c_uint64),
    ]


def dispatch(xGM, expertIdsGM, expandXOutGM, expandIdxOutGM, expertTokenNumsOutGM, sendCountsOutGM,
             mc2Context=hp.NULL, tilingData=None):  # fmt: skip
    """The kernel; ``moe_distribute_dispatch_v3`` passes its context input and tiling."""
    aivId, aivNum = hp.GetBlockIdx(), AIV_NUM
    if tilingData is not None and tilingData.isMc2Context:  # Mc2MoeContextHolder
        context = Mc2MoeContextHolder()
        context.InitAndCheck(mc2Context, tilingData.epWorldSize, tilingData.totalWinSizeEp)
        totalWinSize = tilingData.totalWinSizeEp
    else:  # HcclContextHolder: the window size is the context's
        context = Context(hp.GetHcclContext(0))
        totalWinSize = context.ctx.winSize
    epRankId, epWorldSize = context.GetEpRankId(), context.GetEpWorldSize()
    moeExpertNum = LOCAL_EXPERTS * epWorldSize
    hOutSize = H * 2
    blockCntPerToken = -(-hOutSize // SPLIT_BLOCK_DATA_SIZE)
    hCommuSize = blockCntPerToken * SPLIT_BLOCK_SIZE
    expertPerSizeOnWin = BS * hCommuSize  # axisMaxBS_ * hCommuSize_
    rscvStatusNum = LOCAL_EXPERTS * epWorldSize
    aivUsedCumSum = min(max(moeExpertNum // 32, 1), aivNum // 2, rscvStatusNum)
    aivUsedAllToAll = aivNum - aivUsedCumSum

    # SetDataStatus / InitWinState: flip this core's 0/1 state in the Exp window
    statusDataSpaceGM = context.GetStatusDataSpaceGm()
    selfDataStatus = i32(statusDataSpaceGM + FLAG_FIELD_OFFSET + aivId * WIN_ADDR_ALIGN, 1)
    dataState = int(selfDataStatus[0])
    selfDataStatus[0] = 1 - dataState
    hSizeAlignCombine = -(-H * COMBINE_IN_DATA_SIZE // WIN_ADDR_ALIGN) * WIN_ADDR_ALIGN
    winDataSizeOffset = dataState * (totalWinSize // 2) + BS * K * hSizeAlignCombine

    def GetWindAddrByRankId(rankId):
        return context.GetWindAddrByRankId(rankId, epRankId) + winDataSizeOffset

    def GetWindStateAddrByRankId(rankId):
        return context.GetWindStateAddrByRankId(rankId, epRankId) + dataState * WIN_STATE_OFFSET

    expertIds = i32(expertIdsGM, BS * K).cpu().numpy()
    x = hp.gm_tensor(xGM, torch.float16, BS * H).view(BS, H)
    if aivId < aivUsedAllToAll:
        # AllToAllDispatch: pairs index = aivId, aivId + moeUsedAivNum, ...
        for index in range(aivId, BS * K, aivUsedAllToAll):
            tokenId, topKId, expertId = index // K, index % K, int(expertIds[index])
            toRankId = expertId // LOCAL_EXPERTS
            dstTokenIdx = int(np.count_nonzero(expertIds[:index] == expertId))
            dst = (
                GetWindAddrByRankId(toRankId)
                + expertPerSizeOnWin * (epRankId * LOCAL_EXPERTS + expertId % LOCAL_EXPERTS)
                + dstTokenIdx * hCommuSize
            )
            hp.gm_tensor(dst, torch.float16, H)[:] = x[tokenId]
            i32(dst + hOutSize, 3)[:] = torch.tensor([epRankId, tokenId, topKId])  # FillTriple
            f32(dst + SPLIT_BLOCK_DATA_SIZE, 1)[0] = ONE  # the block's flag, after its data
    else:
        # CalAndSendCntByExp: {1.0f, count} per expert into the expert rank's state area
        start, end = split_to_core(moeExpertNum, aivUsedCumSum, aivId - aivUsedAllToAll)
        for curExpertId in range(start, end):
            count = int(np.count_nonzero(expertIds == curExpertId))
            dstRankId = curExpertId // LOCAL_EXPERTS
            offset = STATE_OFFSET * epRankId
            offset += curExpertId % LOCAL_EXPERTS * epWorldSize * STATE_OFFSET
            block = GetWindStateAddrByRankId(dstRankId) + offset
            i32(block + 4, 1)[0] = count
            f32(block, 1)[0] = ONE
        # WaitDispatch: this core's share of the status slots, until every flag is 1.0
        s0, s1 = split_to_core(rscvStatusNum, aivUsedCumSum, aivId - aivUsedAllToAll)
        statusSpace = GetWindStateAddrByRankId(epRankId)
        for index in range(s0, s1):
            while float(f32(statusSpace + index * STATE_OFFSET, 1)[0]) != ONE:
                pass
        recv = i32(statusSpace, rscvStatusNum * STATE_OFFSET // 4).view(-1, STATE_OFFSET // 4)
        counts = recv[:, 1].cpu().numpy().copy()
        f32(statusSpace + s0 * STATE_OFFSET, (s1 - s0) * STATE_OFFSET // 4)[:] = 0  # clean
        # CalRecvAndSetFlag / SetExpertTokenNums (the counts of every slot, [expert][rank])
        cumSum = np.cumsum(counts)
        i32(sendCountsOutGM, rscvStatusNum)[s0:s1] = torch.from_numpy(
            cumSum[s0:s1].astype(np.int32)
        )
        if s0 == 0:
            tokenNums = np.cumsum(counts.reshape(LOCAL_EXPERTS, epWorldSize).sum(axis=1))
            hp.gm_tensor(expertTokenNumsOutGM, torch.int64, LOCAL_EXPERTS)[:] = torch.from_numpy(
                tokenNums
            )
    hp.SyncAll()  # stands in for WaitCumSumFlag's soft synchronisation

    # LocalWindowCopy / WaitAndFormatOutput: poll each token's flag, copy out, clear
    cumSum = i32(sendCountsOutGM, rscvStatusNum).cpu().numpy()
    start, end = split_to_core(rscvStatusNum, aivNum, aivId)
    windowGM = GetWindAddrByRankId(epRankId)
    expandX = hp.gm_tensor(expandXOutGM, torch.float16, int(cumSum[-1]) * H)
    for srcExpertId in range(start, end):
        n = int(cumSum[srcExpertId]) - (int(cumSum[srcExpertId - 1]) if srcExpertId else 0)
        srcDataBlockIdx = srcExpertId % epWorldSize * LOCAL_EXPERTS + srcExpertId // epWorldSize
        wAddr = windowGM + srcDataBlockIdx * expertPerSizeOnWin
        dstPosition = int(cumSum[srcExpertId]) - n
        for i in range(n):
            token = wAddr + i * hCommuSize
            while float(f32(token + SPLIT_BLOCK_DATA_SIZE, 1)[0]) != ONE:
                pass
            row = dstPosition + i
            expandX[row * H : (row + 1) * H] = hp.gm_tensor(token, torch.float16, H)
            i32(expandIdxOutGM + 12 * row, 3)[:] = i32(token + hOutSize, 3)
            f32(token + SPLIT_BLOCK_DATA_SIZE, 1)[0] = 0.0


def moe_distribute_dispatch_v3(mc2Context, xGM, expertIdsGM, expandXOutGM, expandIdxOutGM,
                               expertTokenNumsOutGM, sendCountsOutGM, tilingGM):  # fmt: skip
    """arch22/moe_distribute_dispatch_v3_a3.cpp (and arch35's MTE build): the same kernel,
    ``MoeDistributeDispatchV2FullMesh<Mc2MoeContextHolder, ...>``, given the context."""
    tilingData = hp.GET_TILING_DATA_WITH_STRUCT(DispatchV3Info, tilingGM)
    dispatch(xGM, expertIdsGM, expandXOutGM, expandIdxOutGM, expertTokenNumsOutGM,
             sendCountsOutGM, mc2Context, tilingData)  # fmt: skip


def DispatchV3Tiling(n: int, rank: int, cclBufferSize: int) -> DispatchV3Info:
    """Host: MoeDistributeDispatchV3TilingFunc's window size (CheckWinSize, the mc2 context
    path): the ``ccl_buffer_size`` attribute less the 1 MiB state area and the ranks' steps."""
    info = DispatchV3Info(epWorldSize=n, epRankId=rank, isMc2Context=True)
    maxWindowSizeEp = cclBufferSize - MB_SIZE
    tokenNeedSizeCombine = -(-H * 2 // WIN_ADDR_ALIGN) * WIN_ADDR_ALIGN
    tokenNeedSizeDispatch = -(-(-(-H * 2 // 32) * 32 + SCALE_EXPAND_IDX_BUFFER) // 480) * 512
    actualSize = BS * tokenNeedSizeDispatch * n * LOCAL_EXPERTS + BS * tokenNeedSizeCombine * K
    assert actualSize * 2 <= maxWindowSizeEp, "HCCL_BUFFSIZE_EP is too SMALL"
    info.totalWinSizeEp = maxWindowSizeEp - n * EP_RANK_OFFSET_STEP
    return info


def inputs(rank: int, launch: int) -> tuple[np.ndarray, np.ndarray]:
    """Rank ``rank``'s tokens (exact FP16 integers naming rank, token, column) and routing."""
    return moe_inputs(rank, launch, BS, K, H, LOCAL_EXPERTS)


def reference(rank: int, launch: int) -> np.ndarray:
    """numpy: expandX rows, expandIdx triples, sendCounts and expertTokenNums of ``rank``."""
    n = hp.get_world_size()
    received = moe_received(inputs, rank, launch, LOCAL_EXPERTS)
    rows = [x[pairs // K].astype(np.float64).reshape(-1) for x, pairs in received]
    idx = [
        np.stack([np.full(len(pairs), i % n), pairs // K, pairs % K], 1).reshape(-1)
        for i, (_, pairs) in enumerate(received)
    ]
    counts = np.array([len(pairs) for _, pairs in received]).reshape(LOCAL_EXPERTS, n)
    flat = counts.reshape(-1)
    return np.concatenate([*rows, *idx, np.cumsum(flat), np.cumsum(counts.sum(axis=1))]).astype(
        np.float64
    )


def launch_dispatch(
    x: np.ndarray, ids: np.ndarray, v3: tuple | None = None
) -> tuple[torch.Tensor, ...]:
    """One dispatch of this rank's tokens: expandX, expandIdx, expertTokenNums, sendCounts;
    ``v3``: (context tensor, tiling) to launch through ``moe_distribute_dispatch_v3``."""
    n = hp.get_world_size()
    expand_x = torch.zeros(BS * K * n * H, dtype=torch.float16, device=hp.device())
    expand_idx = torch.zeros(BS * K * n * 3, dtype=torch.int32, device=hp.device())
    token_nums = torch.zeros(LOCAL_EXPERTS, dtype=torch.int64, device=hp.device())
    send_counts = torch.zeros(LOCAL_EXPERTS * n, dtype=torch.int32, device=hp.device())
    args = (on_device(x), on_device(ids), expand_x, expand_idx, token_nums, send_counts)
    if v3 is None:
        hp.launch(dispatch, *args, block_dim=AIV_NUM, kernel_type="aiv")
    else:
        mc2Context, tiling = v3
        hp.launch(moe_distribute_dispatch_v3, mc2Context, *args, tiling, block_dim=AIV_NUM,
                  kernel_type="aiv")  # fmt: skip
    return expand_x, expand_idx, token_nums, send_counts


def v3_context() -> tuple[torch.Tensor, DispatchV3Info]:
    """Host of the v3 entry: its own EP communicator, the context tensor (aclnn's
    ``GetMc2ContextTensor``) and the tiling with ``ccl_buffer_size`` its HCCL buffer size."""
    n = hp.get_world_size()
    mc2Context, hcclBuffSize = GetMc2ContextTensor(hp.new_group(list(range(n))))
    return mc2Context, DispatchV3Tiling(n, hp.get_rank(), hcclBuffSize)


def main() -> list[str]:
    """Two launches through the v2 entry (the HCCL context), then two through the v3 entry
    (the ``mc2Context`` input over its own communicator's HCCL buffers)."""
    rank = hp.get_rank()
    v3 = v3_context()
    lines = []
    for entry in ("launch", "v3"):  # the v2 launches, then the v3 ones
        for launch in (1, 2):  # the data state flips: the second launch uses the other halves
            outputs = launch_dispatch(*inputs(rank, launch), v3 if entry == "v3" else None)
            expand_x, expand_idx, token_nums, send_counts = outputs
            total = int(send_counts[-1])
            got = torch.cat(
                [
                    expand_x[: total * H].double(),
                    expand_idx[: total * 3].double(),
                    send_counts.double(),
                    token_nums.double(),
                ]
            )
            want = reference(rank, launch)
            lines.append(compare(f"{entry}-{launch}", got, want, f"{total} tokens"))
    return lines


if __name__ == "__main__":
    run_sample(main, platform=PLATFORM, **RUN_KWARGS)
