"""Port of ops-transformer's DistributeBarrier on Atlas A3 (windows only, no Hccl object).

Source: mirror-cann/ops-transformer at 3a280bcc (2026-07-21): ``mc2/distribute_barrier/op_kernel/``
``distribute_barrier.h`` (``DistributeBarrier``: ``Init``, ``InitContextAndRankInfo``,
``InitElasticInfo``, ``InitStatus``, ``SplitToCore``, ``GeWindowAddr``, ``Process``,
``TimeOutTest``, ``BarrierProcess``, ``SetStatus``, ``WaitStatus``, ``CleanStatus``), the A3
entry ``arch22/distribute_barrier_a3.cpp``, the tiling struct ``distribute_barrier_tiling.h``,
the host ``DistributeBarrierTilingFunc`` / ``DistributeBarrierExtendTilingFuncNew`` of
``op_host/op_tiling/distribute_barrier_tiling.cpp`` (constants from
``distribute_barrier_tiling_helper.h``), and the A3 context helpers of
``mc2/common/op_kernel/moe_distribute_base.h`` (``GetRankId``, ``GetStatusDataSpaceGm``,
``GetBaseWindStateAddrByRankId``). docs/notes/mc2-kernels.md, last section.

What it does: every rank's AIV cores 1.. write a 32-byte block of eight 1.0f into each peer's
Exp window at ``512 * rankId`` of the state half ``dataState * 512 KB``; each core then polls the
blocks of its share of the peers until they sum to ``8 * sendRankNum``, raises its finish
flag (a 1.0f every 128 bytes after the per-core state words, ``900 KB + aivNum * 128``) and
zeroes the blocks it read; AIV core 0 polls the finish flags of the sending cores, zeroes them,
and every core meets at ``SyncAll``. The 0/1 ``dataState`` of each core, at ``900 KB + aivId *
128`` of the Exp window, flips at every launch, so consecutive barriers use the two halves.

What runs unchanged: the A3 context fields (``localUsrRankId``, ``localWindowsExp``,
``remoteRes[r].nextDevicePtr->windowsExp``), every offset and constant above, the split of
the peers over ``aivNum - 1`` sending cores (the first ``worldSize % sendAivNum`` take one
more; with fewer peers than cores the extra cores return after ``SetStatus``, and core 0 then
waits for ``worldSize`` finish flags), the elastic info (``[0] == 1``: ``worldSize = [1]``,
this rank's id ``[4 + rankId]``, the peer of logical id ``i`` at ``[4 + worldSize + i]``),
the timeout input (core 0 gives up with an assertion after ``timeOut`` microseconds), the
strided reads (``DataCopyParams``) and their sums, and the host tiling (world size checks,
the ``Mc2CcTilingConfig`` with op type 8 and ``AIV_ENGINE``, ``aivNum`` as ``blockDim``).
Launches 5-8 repeat the four cases through DistributeBarrierExtend
(``mc2/distribute_barrier_extend/op_kernel/arch35/distribute_barrier_extend_apt.cpp``, host
``op_host/op_tiling/distribute_barrier_extend_tiling.cpp``): the same kernel with the tiling's
``isMc2Context`` set, which reads the rank and every rank's HCCL buffer from its ``mc2Context``
input (``Mc2MoeContext``, built on the host as aclnn does: samples/_mc2_context.py) and keeps its
state words, status blocks and finish flags at ``epHcclBuffer_[r]`` instead of the Exp window;
its tiling has no Hccl config. docs/notes/mc2-kernels.md, section 24.

Stand-ins: ``aivNum`` is 4 (A3 has 48 AIV cores); the UB buffers are torch tensors and the
pipe barriers program order; ``GetSystemCycle() / 50`` is ``time.monotonic_ns() // 1000``;
the extend op ships for Ascend 950 alone: its launches run on the A3 platform, the HCCL
buffers being the In windows of a communicator of their own (``hp.new_group``). The barrier's
effect is checked with two kernels of the sample around it: before it, every rank writes a
256-byte row into each peer's In window; after it, every rank reads the rows it received
(a real use: a kernel that may only read what peers wrote before the barrier).

Launches: 1 and 2 plain (the state flips, the second uses the other half), 3 with the timeout
input and an elastic info that renumbers the ranks (rotation), 4 (with 3 or more ranks) with
an elastic info that leaves the last rank out; it does not launch. 5-8: the same through the
extend entry (rows in two more parts of the In window, so that the rank left out by launch 4,
racing ahead into launch 5, writes none that a peer is still reading).

Run: ``python samples/mc2_distribute_barrier.py`` (4 emulated ranks),
``python -m hccl_py run -n 2 --backend gloo samples/mc2_distribute_barrier.py``.
"""

import time
from ctypes import Structure, c_bool, c_uint64

import numpy as np
import torch
from _common import WORLD_GROUP, compare, f32, i32, run_sample
from _mc2 import typed_fields, uint32_fields
from _mc2_context import GetMc2ContextTensor, Mc2MoeContextHolder

import hccl_py as hp
from hccl_py import HCCL_SUCCESS, Mc2CcTiling, Mc2CcTilingConfig, Mc2InitTiling, TilingData

PLATFORM = "A3"
RUN_KWARGS = {"buffsize_mb": 2}
# distribute_barrier.h
UB_ALIGN = 32
STATE_OFFSET = 512
ELASTIC_METAINFO_OFFSET = 4
RANK_LIST_NUM = 2
LOCAL_STATUS_PADDING = 3
WIN_STATE_OFFSET = 512 * 1024
STATE_WIN_OFFSET = 900 * 1024
CYCLES_PER_US = 50
# distribute_barrier_tiling_helper.h, mc2_tiling_utils.h
OP_TYPE_ALL_TO_ALL = 8  # the value of HCCL_CMD_ALLTOALLV, whatever the name says
MIN_WORLD_SIZE, MAX_WORLD_SIZE_A3, MAX_WORLD_SIZE_A5 = 2, 384, 1024
AIV_ENGINE = 3
UB_SIZE_A3 = 192 * 1024
AIV_NUM = 4  # stand-in for GetCoreNumAiv()
# the sample's own kernels around the barrier
ROW = 64  # float32 values per row: 256 bytes, data rather than a flag
HALF = 64 * 1024  # rows of odd and even launches go to different parts of the In window


class DistributeBarrierInfo(Structure):
    _fields_ = [
        *uint32_fields("worldSize", "rankId", "aivNum"),
        *typed_fields(c_uint64, "totalUbSize", "totalWinSize"),
        *typed_fields(c_bool, "isInputTimeOut", "isInputElasticInfo", "isMc2Context", "reserved1"),
    ]


class DistributeBarrierTilingData(TilingData):
    _fields_ = [
        ("mc2InitTiling", Mc2InitTiling),
        ("mc2CcTiling1", Mc2CcTiling),
        ("distributeBarrierInfo", DistributeBarrierInfo),
    ]


def GetSystemCycle() -> int:
    """The system counter, 50 cycles per microsecond (stand-in: the monotonic clock)."""
    return time.monotonic_ns() * CYCLES_PER_US // 1000


class DistributeBarrier:
    """``DistributeBarrierImpl::DistributeBarrier``, one object per core."""

    def Init(self, mc2Context, timeOut, elasticInfo, workspaceGM, tilingData):
        self.aivId_ = hp.GetBlockIdx()
        info = tilingData.distributeBarrierInfo
        self.InitContextAndRankInfo(mc2Context, tilingData)
        self.aivNum_ = info.aivNum
        self.worldSizeOriginal_ = info.worldSize
        self.worldSize_ = info.worldSize
        self.isInputTimeout_ = info.isInputTimeOut
        self.isInputElasticInfo_ = info.isInputElasticInfo
        self.isElasticTrueFlag_ = False
        if self.isInputTimeout_:
            self.timeOut_ = int(i32(timeOut, 1)[0])
        if self.isInputElasticInfo_:
            self.InitElasticInfo(elasticInfo)
        self.sendAivNum_ = self.aivNum_ - 1
        self.stateOffset_ = STATE_OFFSET
        self.InitStatus()
        self.SplitToCore()  # the range of peers this core signals and waits for
        self.statusSpaceGm_ = self.GeWindowAddr(self.rankIdOriginal_, self.rankIdOriginal_)
        self.finishGm_ = self.statusSpaceGm_ + STATE_WIN_OFFSET + self.aivNum_ * UB_ALIGN * 4

    def InitContextAndRankInfo(self, mc2Context, tilingData):
        self.isMc2Context_ = bool(tilingData.distributeBarrierInfo.isMc2Context)
        if self.isMc2Context_:  # DistributeBarrierExtend: the Mc2MoeContext input
            self.mc2Context_ = Mc2MoeContextHolder()
            self.mc2Context_.InitAndCheck(mc2Context, 0, 0)
            self.rankIdOriginal_ = self.mc2Context_.GetEpRankId()  # mc2Context_->epRankId
            self.rankId_ = self.rankIdOriginal_
            self.statusDataSpaceGm_ = self.mc2Context_.epHcclBuffer(self.rankId_)
        else:
            self.winContext_ = hp.GetHcclContext(0)  # HcclOpResParam
            self.rankIdOriginal_ = self.winContext_.localUsrRankId  # Mc2Kernel::GetRankId
            self.rankId_ = self.winContext_.localUsrRankId
            self.statusDataSpaceGm_ = self.winContext_.localWindowsExp  # GetStatusDataSpaceGm

    def InitElasticInfo(self, elasticInfo):
        n = ELASTIC_METAINFO_OFFSET + RANK_LIST_NUM * self.worldSizeOriginal_
        self.elasticInfoTensor_ = i32(elasticInfo, n).tolist()  # DataCopyPad into UB
        if self.elasticInfoTensor_[0] == 1:
            self.isElasticTrueFlag_ = True
            self.worldSize_ = self.elasticInfoTensor_[1]
            if self.rankId_ < self.worldSizeOriginal_:
                self.rankId_ = self.elasticInfoTensor_[ELASTIC_METAINFO_OFFSET + self.rankId_]

    def InitStatus(self):
        # this core's 0/1 state word at STATE_WIN_OFFSET of the status data space, flipped
        selfDataStatus = i32(self.statusDataSpaceGm_ + STATE_WIN_OFFSET + self.aivId_ * 128, 1)
        self.dataState_ = int(selfDataStatus[0])
        selfDataStatus[0] = 1 if self.dataState_ == 0 else 0

    def SplitToCore(self):
        self.sendRankNum_ = self.worldSize_ // self.sendAivNum_
        remainderRankNum = self.worldSize_ % self.sendAivNum_
        self.sendAivId_ = self.startRankId_ = self.endRankId_ = 0
        if self.aivId_ > 0:
            self.sendAivId_ = self.aivId_ - 1
            self.startRankId_ = self.sendRankNum_ * self.sendAivId_
            if self.sendAivId_ < remainderRankNum:  # the first cores take one peer more
                self.sendRankNum_ += 1
                self.startRankId_ += self.sendAivId_
            else:
                self.startRankId_ += remainderRankNum
            self.endRankId_ = self.startRankId_ + self.sendRankNum_

    def GeWindowAddr(self, toRankId, curRankID):
        if self.isMc2Context_:  # epHcclBuffer_[toRankId], this launch's half
            return self.mc2Context_.epHcclBuffer(toRankId) + self.dataState_ * WIN_STATE_OFFSET
        # Mc2Kernel::GetBaseWindStateAddrByRankId (A3): the Exp window, this launch's half
        if toRankId == curRankID:
            base = self.winContext_.localWindowsExp
        else:
            base = self.winContext_.remoteRes[toRankId].nextDevicePtr.windowsExp
        return base + self.dataState_ * WIN_STATE_OFFSET

    def TimeOutTest(self):
        systemCntBegin = GetSystemCycle()
        usedAivNum = self.sendAivNum_ if self.sendRankNum_ > 0 else self.worldSize_
        targetNum = usedAivNum * 1.0
        while self.FinishSum(usedAivNum, systemCntBegin) < targetNum:
            pass
        # clean the finish flags: usedAivNum blocks of 32 bytes every 128 bytes
        finish = f32(self.finishGm_, usedAivNum * UB_ALIGN)
        finish.view(usedAivNum, UB_ALIGN)[:, : UB_ALIGN // 4] = 0

    def FinishSum(self, usedAivNum, systemCntBegin):
        """One pass of TimeOutTest's loop: DataCopy (stride 3 blocks), ReduceSum of element 0
        of each block, and the timeout check."""
        blocks = f32(self.finishGm_, usedAivNum * UB_ALIGN).view(usedAivNum, UB_ALIGN)
        curRank = float(blocks[:, : UB_ALIGN // 4][:, 0].sum())
        if self.isInputTimeout_:
            duration = (GetSystemCycle() - systemCntBegin) // CYCLES_PER_US
            assert duration < self.timeOut_, "Operator execution timed out"
        return curRank

    def SetStatus(self):
        offset = self.stateOffset_ * self.rankId_
        for rankIndex in range(self.startRankId_, self.endRankId_):
            if rankIndex < self.worldSize_:
                toRankId = rankIndex
                if self.isElasticTrueFlag_:
                    i = ELASTIC_METAINFO_OFFSET + self.worldSizeOriginal_ + rankIndex
                    toRankId = self.elasticInfoTensor_[i]
                rankGM = self.GeWindowAddr(toRankId, self.rankIdOriginal_) + offset
                f32(rankGM, UB_ALIGN // 4)[:] = 1.0  # eight 1.0f, one 32-byte block

    def StatusBlocks(self):
        """``sendRankNum`` blocks of 32 bytes every ``STATE_OFFSET`` bytes from this core's
        first peer, as WaitStatus's and CleanStatus's DataCopyParams reach them."""
        start = self.statusSpaceGm_ + self.startRankId_ * self.stateOffset_
        rows = f32(start, self.sendRankNum_ * STATE_OFFSET // 4).view(self.sendRankNum_, -1)
        return rows[:, : UB_ALIGN // 4]

    def WaitStatus(self):
        compareTarget = 1.0 * self.sendRankNum_ * UB_ALIGN / 4
        while float(self.StatusBlocks().sum()) != compareTarget:
            pass

    def CleanStatus(self):
        f32(self.finishGm_ + self.sendAivId_ * UB_ALIGN * 4, 1)[0] = 1.0
        self.StatusBlocks()[:] = 0

    def BarrierProcess(self):
        self.SetStatus()
        if self.startRankId_ >= self.worldSize_:
            return
        self.WaitStatus()
        self.CleanStatus()  # so that the next launch on this half reads fresh blocks

    def Process(self):
        if self.aivId_ == 0:
            self.TimeOutTest()
        else:
            self.BarrierProcess()
        hp.SyncAll()  # every core leaves at the same time


def distribute_barrier(xRef, timeOut, elasticInfo, xRefOut, workspaceGM, tilingGM):
    tilingData = hp.GET_TILING_DATA_WITH_STRUCT(DistributeBarrierTilingData, tilingGM)
    op = DistributeBarrier()
    op.Init(hp.NULL, timeOut, elasticInfo, workspaceGM, tilingData)
    op.Process()


def distribute_barrier_extend(
    mc2Context, xRef, timeOut, elasticInfo, xRefOut, workspaceGM, tilingGM
):
    """arch35/distribute_barrier_extend_apt.cpp: the same kernel, given the context."""
    tilingData = hp.GET_TILING_DATA_WITH_STRUCT(DistributeBarrierTilingData, tilingGM)
    op = DistributeBarrier()
    op.Init(mc2Context, timeOut, elasticInfo, workspaceGM, tilingData)
    op.Process()


# ---------------------------------------------------------------- host tiling
def DistributeBarrierTilingFunc(worldSize, group, isInputTimeOut, isInputElasticInfo,
                                isMc2Context=False):  # fmt: skip
    """DistributeBarrierExtendTilingFuncNew with DistributeBarrier's config (``isMc2Context``
    false) or DistributeBarrierExtend's (true: the context input, no Hccl tiling)."""
    tilingData = DistributeBarrierTilingData()
    info = tilingData.distributeBarrierInfo
    info.isInputTimeOut = isInputTimeOut
    info.isInputElasticInfo = isInputElasticInfo
    info.isMc2Context = isMc2Context
    # CheckAndSetAttrs (the extend op ships for Ascend 950 alone: MAX_WORLD_SIZE_A5)
    maxWorldSize = MAX_WORLD_SIZE_A5 if isMc2Context else MAX_WORLD_SIZE_A3
    assert MIN_WORLD_SIZE <= worldSize <= maxWorldSize, f"worldSize={worldSize}"
    info.worldSize = worldSize
    if not isMc2Context:
        # SetHcommCfg
        algConfigAllToAllStr = "AlltoAll=level0:fullmesh;level1:pairwise"
        mc2CcTilingConfig = Mc2CcTilingConfig(group, OP_TYPE_ALL_TO_ALL, algConfigAllToAllStr)
        assert mc2CcTilingConfig.SetCommEngine(AIV_ENGINE) == 0  # no AI CPU is started
        assert mc2CcTilingConfig.GetTiling(tilingData.mc2InitTiling) == HCCL_SUCCESS
        assert mc2CcTilingConfig.GetTiling(tilingData.mc2CcTiling1) == HCCL_SUCCESS
    # numBlocks = CalcTschBlockDim(aivNum, 0, aivNum): every AIV core
    info.totalUbSize = UB_SIZE_A3
    info.aivNum = AIV_NUM
    return tilingData, AIV_NUM


# ---------------------------------------------------------------- the sample around it
def row(launch: int, src: int, dst: int) -> np.ndarray:
    """The row that rank ``src`` writes into rank ``dst``'s In window before barrier ``launch``."""
    return (1000 * launch + 100 * src + 10 * dst + np.arange(ROW) % 7).astype(np.float32)


def write_rows(rowsGM, peersGM):
    """Before the barrier: row ``peer`` of ``rowsGM`` into the In window of each listed peer,
    at this rank's slot of the launch's half."""
    ctx = hp.GetHcclContext(0)
    me, half = ctx.localUsrRankId, int(i32(peersGM, 1)[0])
    peers = i32(peersGM + 4, ctx.rankSize).tolist()
    rows = f32(rowsGM, ctx.rankSize * ROW).view(ctx.rankSize, ROW)
    for peer in peers[hp.GetBlockIdx() :: hp.GetBlockNum()]:
        if peer < 0:
            continue
        window = ctx.localWindowsIn if peer == me else ctx.remoteRes[peer].nextDevicePtr.windowsIn
        f32(window + half * HALF + me * ROW * 4, ROW)[:] = rows[peer]


def read_rows(outGM, peersGM):
    """After the barrier: the rows the listed peers wrote into this rank's In window."""
    ctx = hp.GetHcclContext(0)
    half = int(i32(peersGM, 1)[0])
    peers = i32(peersGM + 4, ctx.rankSize).tolist()
    out = f32(outGM, ctx.rankSize * ROW).view(ctx.rankSize, ROW)
    for peer in peers[hp.GetBlockIdx() :: hp.GetBlockNum()]:
        if peer >= 0:
            out[peer] = f32(ctx.localWindowsIn + half * HALF + peer * ROW * 4, ROW)


def read_state(outGM, launchGM, mc2Context):
    """After the barrier: the per-core state words, and the status blocks and finish flags of
    the half this launch used, in this rank's Exp window (the extend entry's: its
    ``epHcclBuffer_`` entry), what a later launch starts from. The other half is not read: a
    peer's next barrier may be writing it already."""
    ctx = hp.GetHcclContext(0)
    n, exp = ctx.rankSize, ctx.localWindowsExp
    if mc2Context:
        holder = Mc2MoeContextHolder()
        holder.InitAndCheck(mc2Context, n, 0)
        exp = holder.GetStatusDataSpaceGm()
    out = i32(outGM, AIV_NUM + (n + AIV_NUM) * 8)
    out[:AIV_NUM] = i32(exp + STATE_WIN_OFFSET, AIV_NUM * 32)[::32]
    base = exp + (int(i32(launchGM, 1)[0]) - 1) % 2 * WIN_STATE_OFFSET
    out[AIV_NUM : AIV_NUM + n * 8] = i32(base, n * 128).view(n, 128)[:, :8].reshape(-1)
    finish = i32(base + STATE_WIN_OFFSET + AIV_NUM * 128, AIV_NUM * 32).view(AIV_NUM, 32)
    out[AIV_NUM + n * 8 :] = finish[:, :8].reshape(-1)


def half_of(launch: int) -> int:
    """The In window half (of ``HALF`` bytes) of launch ``launch``'s rows: odd and even launches
    alternate; the extend launches use two more, so that a rank the fourth launch left out,
    racing ahead into the fifth, does not write rows a peer is still reading."""
    return (launch + 1) % 2 + (2 if launch > 4 else 0)


def elastic_info(launch: int, n: int) -> np.ndarray | None:
    """Launch 3: every rank, renumbered (physical p is logical p + 1); launch 4: ranks
    0 .. n - 2, the last rank left out. [2] and [3] are not read by this kernel."""
    if launch < 3:
        return None
    size = n if launch == 3 else n - 1
    logical = [(p + 1) % n for p in range(n)] if launch == 3 else list(range(n))
    physical = [(i - 1) % n for i in range(n)] if launch == 3 else list(range(n))
    return np.array([1, size, 0, 0, *logical, *physical], dtype=np.int32)


def members(launch: int, n: int) -> list[int]:
    """The physical ranks that take part in barrier ``launch``."""
    return list(range(n - 1)) if launch == 4 else list(range(n))


def expected_state(launch: int, n: int) -> np.ndarray:
    """numpy: every core's state word is launch % 2; status blocks and finish flags are 0."""
    return np.concatenate([np.full(AIV_NUM, launch % 2), np.zeros((n + AIV_NUM) * 8)])


def left_out(launch: int, n: int, mc2Context: torch.Tensor | None) -> list[str]:
    """The rank that barrier ``launch`` leaves out: its In window half still holds the rows
    of launch ``launch - 2`` and its state is that of launch ``launch - 1``."""
    rank, dev = hp.get_rank(), hp.device()
    peers = torch.tensor([half_of(launch), *range(n)], dtype=torch.int32, device=dev)
    got = torch.zeros(n * ROW, dtype=torch.float32, device=dev)
    hp.launch(read_rows, got, peers, block_dim=2, kernel_type="aiv")
    state = torch.zeros(AIV_NUM + (n + AIV_NUM) * 8, dtype=torch.int32, device=dev)
    launch_t = torch.tensor([launch - 1], dtype=torch.int32, device=dev)
    hp.launch(read_state, state, launch_t, mc2Context, block_dim=1, kernel_type="aiv")
    want = np.stack([row(launch - 2, s, rank) for s in range(n)])
    return [
        compare(f"rows-{launch}", got, want, "left out"),
        compare(f"state-{launch}", state, expected_state(launch - 1, n), "left out"),
    ]


def main() -> list[str]:
    """Launches 1-4 through DistributeBarrier, 5-8 (the same four cases) through
    DistributeBarrierExtend, whose state lives in the HCCL buffers of its own communicator."""
    rank, n = hp.get_rank(), hp.get_world_size()
    dev = hp.device()
    groupEp = hp.new_group(list(range(n)))  # the extend op's EP communicator
    mc2Context, _ = GetMc2ContextTensor(groupEp)  # aclnn: Mc2Context::GetMc2ContextTensor
    lines = []
    for launch in (1, 2, 3, 4, 5, 6, 7, 8):
        case, extend = (launch - 1) % 4 + 1, launch > 4
        if case == 4 and n < 3:
            continue  # the elastic shrink needs a world of two left
        context = mc2Context if extend else None
        group = members(case, n)
        if rank not in group:  # left out by the elastic info: it does not launch, and no
            lines += left_out(launch, n, context)  # peer's barrier touches its windows
            continue
        peers = torch.tensor([half_of(launch), *(p if p in group else -1 for p in range(n))])
        peers = peers.to(torch.int32).to(dev)
        rows = torch.from_numpy(np.stack([row(launch, rank, d) for d in range(n)])).to(dev)
        hp.launch(write_rows, rows, peers, block_dim=2, kernel_type="aiv")

        x_ref = torch.arange(16, dtype=torch.float16, device=dev)
        elastic = elastic_info(case, n)
        time_out = torch.tensor([60_000_000], dtype=torch.int32, device=dev)  # 60 s, in us
        tiling, numBlocks = DistributeBarrierTilingFunc(
            n, WORLD_GROUP, case == 3, elastic is not None, extend
        )
        args = (
            x_ref,
            time_out if case == 3 else None,
            None if elastic is None else torch.from_numpy(elastic).to(dev),
            x_ref,
            None,
            tiling,
        )
        kernel = distribute_barrier_extend if extend else distribute_barrier
        hp.launch(kernel, *(mc2Context, *args) if extend else args, block_dim=numBlocks,
                  kernel_type="aiv")  # fmt: skip

        got = torch.zeros(n * ROW, dtype=torch.float32, device=dev)
        hp.launch(read_rows, got, peers, block_dim=2, kernel_type="aiv")
        state = torch.zeros(AIV_NUM + (n + AIV_NUM) * 8, dtype=torch.int32, device=dev)
        launch_t = torch.tensor([launch], dtype=torch.int32, device=dev)
        hp.launch(read_state, state, launch_t, context, block_dim=1, kernel_type="aiv")
        want = np.stack(
            [row(launch, s, rank) if s in group else np.zeros(ROW, np.float32) for s in range(n)]
        )
        detail = f"{len(group)} ranks" + (", extend" if extend else "")
        lines.append(compare(f"rows-{launch}", got, want, detail))
        # xRefOut is xRef, which the kernel never touches: it is there to order the graph
        got_state = torch.cat([state.double(), x_ref.double()])
        want_state = np.concatenate([expected_state(launch, n), np.arange(16)])
        lines.append(compare(f"state-{launch}", got_state, want_state))
    return lines


if __name__ == "__main__":
    run_sample(main, platform=PLATFORM, **RUN_KWARGS)
