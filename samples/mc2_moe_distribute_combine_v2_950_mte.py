"""Port of ops-transformer's MoeDistributeCombineV2A5Mte: the Ascend 950 MTE combine, v3 entry.

Source: mirror-cann/ops-transformer at 3a280bcc (2026-07-21):
``mc2/moe_distribute_combine_v2/op_kernel/arch35/moe_distribute_combine_v2_a5_mte.h``
(``MoeDistributeCombineV2A5Mte``: ``InitAttrs``, ``Init``, ``SplitCoreCal``,
``ExpertAlltoAllDispatchCopyAdd``, ``ExpertAlltoAllDispatchInnerCopyAdd``,
``CheckPackedFlagRangeArrive``, ``CheckPackedTokenArriveBatch``, ``ClearPackedTokenFlags``,
``ProcessMoeExpert``, ``LocalWindowCopy``, ``Process``) launched by
``mc2/moe_distribute_combine_v3/op_kernel/arch35/moe_distribute_combine_v3_apt.cpp`` with the
``mc2Context`` input; the tiling of the v3 host (``MoeDistributeCombineV2TilingFuncNew``,
``isMc2Context``), imported from samples/mc2_moe_distribute_combine_v2.py, whose A3 kernel
``MoeDistributeCombineV2`` this one extends (imported, not copied). docs/notes/mc2-kernels.md,
section 35.

What it computes: after the dispatch v3 MTE port (samples/mc2_moe_distribute_dispatch_v2_full_mesh.py,
on a ``Mc2MoeContext`` over buffers of twice ``HCCL_BUFFSIZE``, as samples/mc2_context_950.py
runs it), every row goes back into slot ``token * K + k`` of its token rank's data area
(``epHcclBuffer_[r] + 1 MiB``, the half ``InitWinState`` picks), packed: each 512-byte block
holds 480 bytes of the row and 32 bytes of 1.0f flags, written with one copy (no separate status
area as on A3). Each rank polls a token's ``K * blockCnt`` flags (a strided read, all equal to
1.0), sums ``scale * row`` in FP32, rounds to half (``CAST_RINT``) and clears the flags.

Stand-ins: those of the A3 combine port (FP16, no quantisation, shared experts, masks, special
experts, elastic or performance info, AddRmsNorm; UB as tensors, program order for the pipe
barriers and queues); the vector ``CompareScalar`` + ``ScalarGetSFFValue`` count is a torch
comparison; ``H`` is the dispatch port's 16, so a token is one packed block.

Run: ``python samples/mc2_moe_distribute_combine_v2_950_mte.py`` (4 emulated ranks),
``python -m hccl_py run -n 2 --backend gloo samples/mc2_moe_distribute_combine_v2_950_mte.py``.
"""

import torch
from _common import compare, f32, i32, on_device, run_sample, zeros
from _mc2 import split_to_core
from _mc2_context import GetMc2ContextTensor, Mc2MoeContextHolder
from mc2_moe_distribute_combine_v2 import (
    EXPAND_IDX_INFO,
    MASK_CALC_NEED_WORKSPACE,
    OPOSITION_POS,
    MoeDistributeCombineV2,
    MoeDistributeCombineV2TilingData,
    expert_scales,
    experts,
    make_tiling,
    reference,
)
from mc2_moe_distribute_dispatch_v2_full_mesh import (
    BS,
    DispatchV3Tiling,
    H,
    inputs,
    launch_dispatch,
)

import hccl_py as hp
from hccl_py import AIV

PLATFORM = "950"
RUN_KWARGS = {"buffsize_mb": 2}
SPLIT_BLOCK_SIZE, SPLIT_BLOCK_DATA_SIZE, SPLIT_BLOCK_FLAG_SIZE = 512, 480, 32
SPLIT_BLOCK_FLAG_COUNT = SPLIT_BLOCK_FLAG_SIZE // 4


class MoeDistributeCombineV2A5Mte(MoeDistributeCombineV2):
    """``MoeDistributeCombineV2A5Mte<half, half, int32_t, UNQUANT, false>``, ``isMc2Context``."""

    def __init__(self) -> None:
        super().__init__(Mc2MoeContextHolder)

    def InitAttrs(self, info) -> None:
        super().InitAttrs(info)  # InitTilingAttrs, InitCommContext (InitWinState), the sizes
        self.commDataBytes = self.hExpandXTypeSize
        self.blockCntPerToken = -(-self.commDataBytes // SPLIT_BLOCK_DATA_SIZE)
        self.hAlignWinSize = self.blockCntPerToken * SPLIT_BLOCK_SIZE  # packed rows

    def ExpertAlltoAllDispatchCopyAdd(self) -> None:
        if self.sendCntNum == 0:
            return  # an idle core
        triples = i32(
            self.expandIdxGM + self.startTokenId * EXPAND_IDX_INFO * 4,
            self.sendCntNum * EXPAND_IDX_INFO,
        ).tolist()
        if self.sendCntNum <= 2:
            permStride = 1
        else:  # a stride coprime with sendCntNum visits every row once
            permStride = self.sendCntNum // 2 + 1
            if self.sendCntNum % 2 == 0 and permStride % 2 == 0:
                permStride += 1
        rankOffset = (self.epRankId * self.sendCntNum) // self.epWorldSize
        permIdx = rankOffset % self.sendCntNum
        for _ in range(self.sendCntNum):
            tkIndex = self.startTokenId + permIdx
            toRankId, tokenId, topkId = triples[permIdx * EXPAND_IDX_INFO : (permIdx + 1) * 3]
            self.ExpertAlltoAllDispatchInnerCopyAdd(toRankId, tokenId, topkId, tkIndex)
            permIdx += permStride
            if permIdx >= self.sendCntNum:
                permIdx -= self.sendCntNum

    def ExpertAlltoAllDispatchInnerCopyAdd(self, toRankId, tokenId, topkId, tkIndex) -> None:
        epOffset = tokenId * (self.axisK + self.sharedExpertNum) + topkId
        rankGM = self.GetWinAddrByRankId(toRankId) + epOffset * self.hAlignWinSize
        floats = self.blockCntPerToken * SPLIT_BLOCK_DATA_SIZE // 4
        expandXInTensor = torch.zeros(floats * 2, dtype=torch.float16, device=hp.device())
        tokenGM = self.expandXGM + tkIndex * self.hExpandXTypeSize
        expandXInTensor[: self.axisH] = hp.gm_tensor(tokenGM, torch.float16, self.axisH)
        srcfloat = expandXInTensor.view(torch.float32).view(self.blockCntPerToken, -1)
        packedfloat = torch.ones(self.hAlignWinSize // 4, dtype=torch.float32, device=hp.device())
        # Copy 64 + 56 floats per repeat: 480 bytes into each 512-byte block, flags left 1.0f
        packedfloat.view(self.blockCntPerToken, -1)[:, : SPLIT_BLOCK_DATA_SIZE // 4] = srcfloat
        f32(rankGM, self.hAlignWinSize // 4)[:] = packedfloat  # one DataCopy: rows and flags

    def flags(self, slot: int, slots: int) -> torch.Tensor:
        """The flag words of ``slots`` packed rows from ``slot`` of this rank's data half."""
        base = f32(self.epWindowGM + slot * self.hAlignWinSize, slots * self.hAlignWinSize // 4)
        blocks = base.view(slots * self.blockCntPerToken, SPLIT_BLOCK_SIZE // 4)
        return blocks[:, SPLIT_BLOCK_DATA_SIZE // 4 :]  # blockLen 32, srcStride 480

    def WaitDispatch(self, tokenIndex: int, copyCount: int) -> bool:
        """CheckPackedTokenArriveBatch (no mask, no special expert): one strided read."""
        flagTensor = self.flags(tokenIndex * self.flagRcvCount, self.flagRcvCount).clone()
        return bool((flagTensor == 1.0).all())  # CompareScalar EQ, the first zero bit

    def ClearPackedTokenFlags(self, tokenIndex: int) -> None:
        self.flags(tokenIndex * self.flagRcvCount, self.flagRcvCount)[:] = 0.0

    def ProcessMoeExpert(self, tokenIndexOffset, topkId, scaleVal, sumFloatBufLocal) -> None:
        wAddr = self.epWindowGM + (tokenIndexOffset + topkId) * self.hAlignWinSize
        packed = f32(wAddr, self.hAlignWinSize // 4).view(self.blockCntPerToken, -1)
        tmpUb = packed[:, : SPLIT_BLOCK_DATA_SIZE // 4].clone().reshape(-1)  # the data blocks
        rowTmpFloatLocal = tmpUb.view(torch.float16)[: self.axisH].float()
        sumFloatBufLocal += (
            rowTmpFloatLocal * scaleVal if self.hasExpertScalesFlag else rowTmpFloatLocal
        )

    def LocalWindowCopy(self) -> None:
        if self.activeMaskBsCnt == 0:
            return
        statePos = 1
        beginIndex, endIndex = split_to_core(self.activeMaskBsCnt, self.aivNum, self.coreIdx)
        tokenPerAivNum = endIndex - beginIndex
        if tokenPerAivNum == 0:
            return
        self.ExpertScaleCopy(beginIndex, tokenPerAivNum)
        tokenStatusTensor = [0] * tokenPerAivNum
        tokenNumCompleted = 0
        while tokenNumCompleted != tokenPerAivNum:
            for curIdx in range(beginIndex, endIndex):
                if tokenStatusTensor[curIdx - beginIndex] == 1:
                    continue
                tokenIndex = curIdx
                if not self.WaitDispatch(tokenIndex, 0):
                    continue
                tokenNumCompleted += 1
                tokenStatusTensor[curIdx - beginIndex] = 1
                statePos += 1
                self.selfDataStatusGMTensor[OPOSITION_POS] = statePos  # selfDataStatusGMTensor_[1]
                sumFloatBufLocal = self.ProcessExpert(tokenIndex)
                self.ClearPackedTokenFlags(curIdx)
                outGM = self.expandOutGlobal + tokenIndex * self.hExpandXTypeSize
                hp.gm_tensor(outGM, torch.float16, self.axisH)[:] = sumFloatBufLocal.half()

    def Process(self) -> None:
        if hp.g_coreType == AIV:
            if self.coreIdx < self.selfSendCnt:  # SetWaitTpStatusAndDisPatch
                self.ExpertAlltoAllDispatchCopyAdd()
            self.AlltoAllBuffInitAndMaskCal()
            self.LocalWindowCopy()


def moe_distribute_combine_v3(mc2Context, expandX, expertIds, assistInfoForCombine, epSendCount,
                              scales, tpSendCount, xActiveMask, activationScale, weightScale,
                              groupList, expandScales, sharedExpertX, elasticInfo, oriX,
                              constExpertAlpha1, constExpertAlpha2, constExpertV, performanceInfo,
                              XOut, workspaceGM, tilingGM):  # fmt: skip
    """arch35/moe_distribute_combine_v3_apt.cpp, ``ArchTag`` TILINGKEY_TPL_A5."""
    tilingData = hp.GET_TILING_DATA_WITH_STRUCT(MoeDistributeCombineV2TilingData, tilingGM)
    op = MoeDistributeCombineV2A5Mte()
    op.Init(mc2Context, expandX, expertIds, assistInfoForCombine, epSendCount, scales, XOut,
            workspaceGM, tilingData)  # fmt: skip
    op.Process()


def main() -> list[str]:
    """Dispatch v3 then combine v3 twice on one context (aclnn's cache per op name aside: the
    two ops' state words sit apart, at the dispatch's and the combine's offsets)."""
    rank, n = hp.get_rank(), hp.get_world_size()
    mc2Context, hcclBuffSize = GetMc2ContextTensor(hp.new_group(list(range(n))))
    assert hcclBuffSize == 2 * RUN_KWARGS["buffsize_mb"] * 2**20  # twice HCCL_BUFFSIZE
    dispatchTiling = DispatchV3Tiling(n, rank, hcclBuffSize)
    tiling = make_tiling(rank, n, hcclBuffSize)
    info = tiling.moeDistributeCombineV2Info
    workspace = zeros(info.aivNum * MASK_CALC_NEED_WORKSPACE // 2)
    lines = []
    for launch in (1, 2):  # the data states flip: the second launch uses the other halves
        x, ids = inputs(rank, launch)
        expand_x, expand_idx, _, send_counts = launch_dispatch(x, ids, (mc2Context, dispatchTiling))
        x_out = zeros(BS, H)
        args = (
            experts(expand_x, send_counts),
            on_device(ids),
            expand_idx,
            send_counts,
            on_device(expert_scales(rank, launch)),
            *[None] * 13,  # tpSendCount .. performanceInfo: not given
            x_out,
            workspace,
            tiling,
        )
        hp.launch(moe_distribute_combine_v3, mc2Context, *args, block_dim=info.aivNum,
                  kernel_type="aiv")  # fmt: skip
        lines.append(compare(f"v3-{launch}", x_out, reference(rank, launch)))
    return lines


if __name__ == "__main__":
    run_sample(main, platform=PLATFORM, **RUN_KWARGS)
