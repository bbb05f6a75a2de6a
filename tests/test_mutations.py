"""A mutation suite over the kernel samples (issue 25 item 8).

For every kernel sample, each ordering statement (Wait, SyncAll,
InterHcclGroupSync, CrossCoreSetFlag/WaitFlag, QueueBarrier, Hcomm's Drain, a barrier helper
made of them, a flag write, a flag poll) is removed in turn, and the mutant
must be reported by the default schedule or by ``hp.run(..., explore=16)``,
exactly as :data:`EXPECTED` says, or be listed there as not catchable with the
reason. tests/mutants.py finds the sites, builds the mutants and judges them;
``python tests/mutants.py`` prints every verdict next to the table's.
docs/sanitizer.md shows the score per sample, generated from :data:`EXPECTED`.

Not mutated: the framework-only samples, which have no kernel code
(:data:`SKIPPED`), the two deliberately wrong debugging samples, whose own check
fails on purpose, and the hardware smoke test.
"""

from __future__ import annotations

import ast
import re
from dataclasses import replace
from pathlib import Path

import pytest
from hccl_py.backends.emu.runners import RUNNERS_ENV
from launch_helpers import SLOW, VERDICT
from mutants import (
    EXPLORE,
    SAMPLES_DIR,
    SampleSpec,
    barrier_helpers,
    find_sites,
    judge,
    missed_explore,
    mutant,
    mutant_tree,
    prepared_cache_clear,
    run,
    samples_on_path,
    score_rows,
    uncatchable_lines,
)

#: Each test is a unit of its own under xdist (conftest.py): none shares a module's jobs.
pytestmark = pytest.mark.spread

DOC = Path(__file__).resolve().parent.parent / "docs" / "sanitizer.md"
#: The moe_distribute_window sample's flag writes: {count, epoch} written directly, staged
#: for BatchWrite, or sent as a BatchWrite item.
WINDOW_FLAGS = (r"\] = status$", r"^items\.append\(\s*\(int\(stage \+ STAGE_STATUS")
#: The layered A2 combine's own race: nothing orders a rank's SumToWindow (it reads the IPC
#: area) before the next dispatch of a peer of its server writes rows there
#: (docs/notes/mc2-kernels.md, section 27); seeds 1, 11 and 13 show it unmutated.
LAYERED_IPC_RACE = "the combine's IPC race fails some explored schedules unmutated"
#: MatmulAllReduceAddRmsNorm's round count: AIV block 0 may publish the next count before a
#: slower core reads the current one, which then leaves the loop one SyncAll early
#: (docs/notes/mc2-kernels.md, section 28); seed 4 of 16 deadlocks unmutated at 2 ranks.
ARN_COUNT_RACE = "the ARN path's round-count handshake deadlocks some explored schedules unmutated"
#: MegaMoe A3: the last mode-0 wait of CrossRankSyncV2Set / CrossRankSyncV2Wait is implied by
#: the other one (every AIV0 sets 10 before 9, every AIV1 sets 9 before 10), or ends the core.
MEGA_MOE_A3_LAST_WAIT = (
    "the barrier's last mode-0 wait is implied by the one before it or ends AIV0"
)
#: GMM1's final loop only consumes the dispatch flags of experts this AIC had no tile of.
MEGA_MOE_A3_GMM1_DRAIN = "GMM1's final waits only consume dispatch flags; nothing after them reads"
#: ResetTokenPerExpert: launch 2's exchange rewrites every peer row before it is read; a stale
#: row passes the poll early only where launch 1's first polled count is non-zero and the
#: poller gets there before the peer's push, which no explored schedule at 2 ranks does.
MEGA_MOE_A3_RESET = "a stale count row needs a poller ahead of its peer's push; not explored"
MEGA_MOE_END_DRAIN = (
    "EndGMM2Sync's waits only consume AIV0's last flags: nothing after them reads the UB "
    "tiles, and a flag completion left at the kernel's end is not reported"
)
MEGA_MOE_SYNC_HANG = (
    "CrossRankSyncInWorldSize waits for its count to equal the peer's word, which a peer "
    "already past the barrier may overwrite with the next barrier's count: some explored "
    "schedules of the unmutated sample hang (docs/notes/mc2-kernels.md, section 29)"
)
#: The combines' token check: all K status blocks of the token arrived (their sum is K).
TOKEN_ARRIVED = r"^minTarget < localState < maxTarget$"
SPECS: dict[str, SampleSpec] = {
    s.name: s
    for s in [
        SampleSpec("all_gather_custom"),
        SampleSpec("all_reduce_custom"),
        SampleSpec("alltoall_custom"),
        SampleSpec("alltoallv_custom", world_sizes=(4,)),  # the documented uneven tables need 4
        SampleSpec("reduce_scatter_custom"),
        # 4 ranks: domain 1 (pairs of ranks) has fewer ranks than the world, so its AllGather
        # can be ready before the AlltoAll; with 2 ranks both domains hold the same ranks
        SampleSpec("alltoall_allgather_custom", world_sizes=(4,)),
        SampleSpec("matmul_reduce_scatter"),
        SampleSpec("all_gather_matmul"),
        SampleSpec("compute_then_allreduce"),
        SampleSpec("mc2_all_gather_matmul_full_mesh"),
        SampleSpec("mc2_matmul_all_reduce"),
        # the race of its round count deadlocks some explored schedules unmutated. Its count
        # write is not marked as a flag: without it every core keeps passing the loop's SyncAll
        # with a count of 0, a loop that never ends and that hccl_py does not report
        SampleSpec("mc2_matmul_all_reduce_add_rms_norm", source_race=ARN_COUNT_RACE),
        SampleSpec("mc2_matmul_reduce_scatter_full_mesh"),
        # three launches: the third reuses the first one's half of the window, so the writes
        # that reset a half (status word, state area, token flags) are read again
        SampleSpec("mc2_moe_distribute_dispatch_v2_950", flags=(r"^status\[0\] = ",), launches=3),
        # its dispatch runs first in each launch (imported): the status words are shared, so
        # a dispatch and its combine take the two halves of the window
        SampleSpec("mc2_moe_distribute_combine_v2_950", flags=(r"^status\[0\] = ",), launches=3),
        SampleSpec(
            "mc2_moe_distribute_dispatch_v2_full_mesh",
            flags=(r"selfDataStatus\[0\] = ", r"\] = ONE$", r"\] = 0(\.0)?$"),
            launches=3,
        ),
        # A3 BatchWrite over queues: data, QueueBarrier on every queue, status, Finalize<false>;
        # three launches so that the first one's halves (state word, status flags) come back
        SampleSpec(
            "mc2_moe_distribute_dispatch_setup",
            flags=(r"selfDataStatus\[0\] = ", r"^blocks\(\)\[:\] = status"),
            launches=3,
        ),
        # 4 ranks, 2 per server: the A2 path reaches the other server through BatchWrite
        SampleSpec("moe_distribute_window", world_sizes=(4,), flags=WINDOW_FLAGS),
        SampleSpec("moe_dispatch_combine"),  # framework collectives only: no site
        # 4 ranks (ep = 2: AllGather<false> committed after a transpose) and 8 (ep = 4:
        # InterHcclGroupSync both ways); its block_dim is the port's own
        SampleSpec("mc2_allto_all_all_gather_batch_mat_mul", world_sizes=(4, 8), block_dim=None),
        # 4 ranks (ep = 2) only: 8 take every path too, at twice the cost; the source finalizes
        # without a SyncAll, so the default schedule alone judges (explore hangs the sample)
        SampleSpec(
            "mc2_batch_mat_mul_reduce_scatter_allto_all",
            world_sizes=(4,),
            block_dim=None,
            warnings=("finalize-unordered",),
        ),
        # 2 ranks; its block_dim is the tiling's aicCoreNum (2: four AIV cores, one transpose
        # piece each, so the flag 8 barrier orders pieces of both AI cores)
        SampleSpec("mc2_allto_all_matmul", block_dim=None),
        # 2 ranks; its block_dim is the tiling's aicCoreNum (2: each expert's matmul has two
        # baseN blocks, one per AIC core)
        # 2 ranks; its block_dim is the tiling's aicCoreNum (2); two launches, comm_mode "ccu"
        # (the CCU client, all2all_out given) and "ai_cpu" (the 950 AI CPU client, no all2all_out)
        SampleSpec("mc2_allto_allv_grouped_mat_mul", block_dim=None),
        # 2 ranks; its block_dim is GetNumBlocks of the port's 2 AIC and 4 AIV cores (2: the
        # permute splits each batch's (expert, rank) pairs over all four AIV cores)
        SampleSpec("mc2_allto_allv_grouped_mat_mul_2026", block_dim=None),
        # 2 ranks, comm_mode "ccu"; its block_dim is CalcTschBlockDim of 2 AIC and 4 AIV cores;
        # the scales' AlltoAllV runs with the rows' cc tiling type (the CCU client's override)
        SampleSpec("mc2_allto_allv_quant_grouped_mat_mul", block_dim=None),
        # 2 ranks; its block_dim is the tiling's aicCoreNum (2: both AIC cores multiply rows of
        # every tile, so the flag 8 barrier orders them, and four AIV cores, one transpose
        # piece each)
        SampleSpec("mc2_matmul_allto_all", block_dim=None),
        # 2 ranks; its block_dim is the tiling's aicCoreNum (2: each expert's matmul has two
        # baseN blocks, one per AIC core, so the flag 8 barrier orders them)
        SampleSpec("mc2_grouped_mat_mul_allto_allv", block_dim=None),
        # 2 ranks, comm_mode "ccu"; its block_dim is the tiling's aicCoreNum (2: the groups of
        # every batch are dealt over both AIC cores, so the flag 8 barrier orders them)
        SampleSpec("mc2_quant_grouped_mat_mul_allto_allv", block_dim=None),
        # 2 ranks: comm_mode "ccu", the CCU client; its block_dim is the tiling's aicCoreNum
        # (3: two AIC cores multiply base blocks of every tile, so the flag 3 barrier orders
        # them before block 0's ReduceScatter, and the third is idle)
        SampleSpec("mc2_matmul_reduce_scatter_v2_950", block_dim=None),
        # 4 ranks: comm_mode "ccu" takes the A2A path on 4 or 8 only; its block_dim is the
        # tiling's aicCoreNum (3: all three AIC cores multiply every tile, so the flag 4 barrier
        # orders them, and six AIV cores share the reduce)
        SampleSpec("mc2_matmul_a2a_vec_reduce_950", world_sizes=(4,), block_dim=None),
        # 2 ranks: the AllReduce path (cube only); the two-shot path's sites at 4 ranks, where
        # IsUseA2APath takes it; its block_dim is the tiling's aicCoreNum (3: two AIC cores
        # multiply, the third joins the flag 3 barriers); two launches, "ccu" and "ai_cpu"
        SampleSpec(
            "mc2_matmul_all_reduce_950",
            block_dim=None,
            site_sizes=tuple(
                (site, (4,))
                for site in (
                    "PostProcEachTurn:SyncAll#1",
                    "WaitAlltoAllEachTurn:Wait#1",
                    "WaitAlltoAllEachTurn:SyncAll#1",
                    "ReduceSumAndAllGather:SyncAll#1",
                    "ReduceSumAndAllGather:SyncAll#2",
                    "ReduceSumAndAllGather:SyncAll#3",
                    "HcclFinalize:Wait#3",
                    "HcclFinalize:SyncAll#1",
                    "HcclFinalize:SyncAll#2",
                )
            ),
        ),
        # 2 ranks; its block_dim is the tiling's aicCoreNum (3: the tail's matmul uses 2 AIC
        # cores, so AIC core 2 only Waits there, and the flag 3 barrier orders three cores);
        # two launches, comm_mode "ccu" (CCU client) and "ai_cpu" (AI CPU client)
        SampleSpec("mc2_all_gather_matmul_v2_950", block_dim=None),
        # the dispatch port runs first; three launches, so that the third combine reuses the
        # first one's half; its block_dim is the tiling's aivNum (3: core 0 waits for two
        # tokens round robin)
        SampleSpec(
            "mc2_moe_distribute_combine_v2",
            flags=(
                r"^selfDataStatusGMTensor\[: UB_ALIGN // 4\] = ",
                r"\] = statusTensor$",
                r"\] = self\.stateResetTensor$",
            ),
            checks=(TOKEN_ARRIVED,),
            launches=3,
            block_dim=None,
        ),
        # the 950 MTE combine: rows and 1.0f flags packed in one copy per 512-byte block; the
        # dispatch port runs first; three launches, so that the third combine polls the flags
        # of the first one's half, which ClearPackedTokenFlags reset; its block_dim is the
        # tiling's aivNum
        SampleSpec(
            "mc2_moe_distribute_combine_v2_950_mte",
            flags=(
                r"^f32\(rankGM, ",
                r"^self\.flags\(tokenIndex \* self\.flagRcvCount, self\.flagRcvCount\)\[:\] = 0\.0$",
            ),
            checks=(r"^not self\.WaitDispatch\(tokenIndex, 0\)$",),
            launches=3,
            block_dim=None,
        ),
        # three launches, so that the third setup and teardown reuse the first one's halves;
        # its block_dim is the tiling's aivNum (4: with 2 ranks cores 2 and 3 have no peer)
        SampleSpec(
            "mc2_moe_distribute_combine_setup",
            flags=(
                r"^self\.sdmaStatusGlobal_\[0\] = ",
                r"^selfDataStatusTensor\[0\] = ",
                r"^self\.StatusBlocks\(\)\[:\] = 0$",
            ),
            launches=3,
            block_dim=None,
        ),
        # three launches: the third assigns slots again over the window and workspace the
        # first two left; its block_dim is the tiling's aivNum (3: with 2 ranks the third core
        # has no rank to send to)
        SampleSpec(
            "mc2_moe_ep_dispatch",
            flags=(
                r"\[::UB_STRIDE\] = 1$",
                r"WriteNbi\(\s*commHandle,\s*notifyAddr",
                r"^i32\(notifyAddr",
                r"\)\[:\] = 0$",
                r"\)\[:\] = self\.ubWaitStatus_$",
            ),
            launches=3,
        ),
        # the dispatch port and the epilogue run first; three launches, so that the third
        # combine rewrites the stash and the statuses the first two sent from; its block_dim is
        # the tiling's aivNum (3: with 2 ranks the third core sends to no rank)
        SampleSpec(
            "mc2_moe_ep_combine",
            flags=(
                r"\] = self\.statusTensor_$",
                r"WriteNbi\(commHandle, remoteRankStateAddr",
                r"\] = self\.stateResetTensor_\[:copyCount\]$",
            ),
            checks=(TOKEN_ARRIVED,),
            launches=3,
        ),
        # no ordering statement: the kernel communicates with nobody; the dispatch and combine
        # it feeds run from their own samples (imported) and are mutated there
        SampleSpec("mc2_moe_update_expert"),
        # 2 ranks: cores 2..5 are beyond numRanks and help copy the own rows; its block_dim is
        # the tiling's aivNum (6); three rounds of (fetch, wait), round 2 from one peer only
        SampleSpec("mc2_engram_fetch", block_dim=None),
        # 2 ranks, two launches (the flags and sync counts of launch 1 are still there in
        # launch 2); its block_dim is the tiling's aicNum (2: 4 AIV cores)
        SampleSpec(
            "mc2_mega_moe",
            flags=(
                r"\] = xOutTensor\[:n\]$",
                r"pushBytes\)\[:\] = maskBuf\[:pushBytes\]$",
                r"^i32\(self\.workspaceInfo\.flagSwiGluToGmm2Ptr",
                r"^i32\(syncRemoteAddr, 1\)\[0\] = count",
                r"^i32\(syncCount, 1\)\[0\] = count$",
                r"\.add_\(",
                r"= ub\[tileIdx\]",
            ),
            block_dim=None,
            source_race=MEGA_MOE_SYNC_HANG,
        ),
        # 2 ranks, two launches (the sense words and the count matrix's reset carry over);
        # its block_dim is AIC_NUM (2: 4 AIV cores)
        SampleSpec(
            "mc2_mega_moe_a3",
            flags=(
                r"\.copy_\(i32\(sh\(local\), padded\)\.clone\(\) \+ 0x800000\)$",
                r"^word\[0\] = self\.epState$",
                r"\.copy_\(state\)$",
                r"\.zero_\(\)$",
            ),
            block_dim=None,
        ),
        # 3 ranks: one attention worker, two FFN workers, so that the second FFN gets session
        # 0's flag but no token in launch 1 and the check of launch 2 waits for it; its block
        # dims are the tiling's aivNum (4) and the stand-ins' one core
        SampleSpec(
            "mc2_attention_ffn",
            world_sizes=(3,),
            flags=(r"= self\.statusTensor_\[", r"\] = 1$", r"\] = INT_MAX$", r"\] = 0$"),
            block_dim=None,
        ),
        # three ranks, so that the fourth launch's elastic info leaves one out; its block_dim
        # is the tiling's aivNum (4: with two or three peers, the sending cores 1..3 split
        # them, and with two the third returns after SetStatus)
        SampleSpec(
            "mc2_distribute_barrier",
            world_sizes=(2, 3),
            flags=(r"^selfDataStatus\[0\] = ", r"\] = 1\.0$", r"\] = 0$"),
            block_dim=None,
        ),
        # 2 ranks; its block_dim is the tiling's aivNum (4: three blocks, the tail on core 2,
        # core 3 idle); three launches, so that the third reuses the first one's partition
        SampleSpec(
            "mc2_quant_all_reduce",
            flags=(
                r"\] = winFlagLocalTensor$",
                r"\] = statusTensor$",
                r"\] = self\.stateResetTensor$",
            ),
            block_dim=None,
        ),
        # three launches: the third is back in the first one's half of the windows, so the
        # flag flip and the state area's reset are read again
        SampleSpec(
            "mc2_quant_reduce_scatter",
            flags=(
                r"^selfWinFlagGMTensor\[:\] = ",
                r"^stateGMTensor\[:\] = statusTensor$",
                r"^selfStatusWinTensor\[:\] = ",
            ),
        ),
        # 2 ranks (the single-server path: 16 ranks take the BatchWrite path, where hccl_py
        # copies the own-server items with a batch-write-server warning, 1 to 25 CPU-seconds
        # a run: only the multi-server sites that the default schedule reports there are
        # judged on 16 too); its block_dim is the tiling's aivNum (3: core 2 has no rank to
        # send to or poll); one launch, and three for the five sites whose removal shows only
        # when the third dispatch and combine find the halves the first ones left (on
        # 2026-11-30 one launch changed the verdict of exactly these five)
        SampleSpec(
            "mc2_moe_distribute_a2",
            site_sizes=tuple(
                (site, (2, 16))
                for site in (
                    "SendToMoeExpert:flag#1",
                    "Process:SyncAll#2",
                    "ConstructBatchWriteInfo:flag#1",
                    "AlltoAllDispatch:SyncAll#3",
                )
            ),
            flags=(
                r"\[0\] = self\.buffer(Chosen|Id)_ \^ 1$",
                r"\[0\] = FLAG_VALUE$",
                r"\[0\] = 0$",
                r"^i32\(rankGM( \+ flagAt)?, (1|self\.statusEntryCount_)\)\[:\] = (flag|status)$",
                r"^(own|entry)\[:\] = ",
                r"\)\[:\] = 0$",
                r"^expertRecvCountGlobal\[:\] = 0$",
            ),
            checks=(r" != FLAG_VALUE$",),
            warnings=("batch-write-server",),  # on 16 ranks: own-server items (section 27)
            launches=1,
            site_launches=tuple(
                (site, 3)
                for site in (
                    "Process:SyncAll#3",
                    "AlltoAllDispatch:flag#1",
                    "CalRecvCountsAndOffsets:flag#1",
                    "CalRecvCountsAndOffsets:SyncAll#1",
                    "WaitDispatch:flag#2",
                )
            ),
            block_dim=None,
        ),
        # 16 ranks, two servers of 8 (the layered kernel needs two); block_dim is the
        # tiling's aivNum (8, one core per rank of a server for the IPC barrier). One launch,
        # two for the four writes that only the next launch reads (the token counts' reset,
        # the cleanup's flags, the IPC flag's epoch): on 2026-11-30 one launch changed the
        # verdict of exactly these four, and the sample's third launch (back in the first
        # one's half of the RDMA area) changed none
        SampleSpec(
            "mc2_moe_distribute_a2_layered",
            world_sizes=(16,),
            flags=(
                r"^i32\(self\.sendStatusGM_, 1\)\[0\] = FLAG_VALUE$",
                r"\[0\] = self\.bufferId_ \^ 1$",
                r"^u64\(at, B64_PER_BLOCK\)\[:\] = localSet$",
                r"^magicGt\[:\] = tempLocal$",
                r"\)\[:\] = 0$",
                r"^i32\(self\.windowOutGM_ \+ destOffset, EXP_TOKEN_COUNT_FLAG_CNT\)\[:\] = ",
                r"\[0\] = self\.stateValue_$",
                r"^u64\(targetRankShareAddr \+ flagOffset \* 4 \* 8, B64_PER_BLOCK\)\[:\] = InUb$",
            ),
            launches=1,
            site_launches=tuple(
                (site, 2)
                for site in (
                    "Init:flag#2",
                    "CleanUp:flag#1",
                    "CleanUp:flag#2",
                    "SumToWindow:flag#1",
                )
            ),
            block_dim=None,
            warnings=("batch-write-server",),  # items towards the own rank (section 27)
            source_race=LAYERED_IPC_RACE,
        ),
    ]
}


@pytest.fixture(autouse=True)
def _greenlet_runners(monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel samples run on greenlet runners here: the same schedules as the default
    thread runners (the table holds either way), faster, and so both kinds see every sample."""
    monkeypatch.setenv(RUNNERS_ENV, "greenlets")


FRAMEWORK_ONLY = "framework API only: no kernel code"
WRONG_ON_PURPOSE = "wrong on purpose: its own check fails, so it cannot judge a mutant"
#: Samples in samples/ that are not mutated, and why.
SKIPPED = {
    "mindspore_all_gather_into_tensor": FRAMEWORK_ONLY,
    "paddle_alltoall_single": FRAMEWORK_ONLY,
    "paddle_global_gather": FRAMEWORK_ONLY,
    "debug_stride_mistake": WRONG_ON_PURPOSE,
    "debug_send_stride_mistake": WRONG_ON_PURPOSE,
    "npu_smoke": "the hardware smoke test, a table of every op rather than a kernel sample",
    "mc2_context_950": "ordering sites are the v2 port's",
    "mc2_allto_all_matmul_950": "ordering sites are the A3 port's (its communicator and pipeline)",
}

ARN_COMMIT_NOT_EXPLORED = (
    "caught only by explore=16 (HcclRaceError: AIV 0 commits a round before the cube cores "
    "wrote it), which this sample cannot use: its source race fails explored schedules"
)
ARN_LAST_COMMIT_ORDERS = (
    "equivalent: the last turn's SyncAll<false> already ordered every matmul before the last "
    "Commit, and the AIV cores read only rounds that Query reports finished"
)
ARN_FINALIZE = (
    "equivalent: the AIV cores still at work read only rounds that Query reported finished, "
    "and Finalize changes none of those bytes"
)
FINALIZE_WAITS = (
    "equivalent: the kernel never reads what the Wait orders; Finalize waits for every "
    "round and the host reads the output after the launch"
)
NOTIFY_CORE_ONLY = (
    "equivalent: only the notify core Waits and it is the core that Finalizes, so the "
    "barrier has no other core's Wait to order"
)
OWN_WAIT = (
    "equivalent in this port: every AIV core Waits itself before its share of the transpose "
    "that follows, and the AIC cores, which do not Wait, touch that data only after a later "
    "SyncAll"
)
DISJOINT_TILES = (
    "equivalent in this port: each tile's AlltoAllV writes its own range of the workspace, "
    "which no earlier AllGather reads, so the sync only keeps the two domains' tasks apart "
    "in time"
)
LOCAL_RS_ORDERS_ALLTOALLV = (
    "equivalent: the local ReduceScatter runs only after the last AlltoAllV (its "
    "InterHcclGroupSync), so its Wait, before the local rows of y are written, orders every "
    "AlltoAllV too; Finalize waits for the last one"
)
WAIT_ONE_END = (
    "equivalent in this port: in the communicate-first mode (SendCnt 0, RecvCnt 1) Process "
    "already waited for every task, so End's loop finds none left and never calls this Wait "
    "(it serves the send-first mode, whose Process only commits)"
)
SHARED_MM_APART = (
    "equivalent in this port: the shared expert's matmul reads mm x and mm weight and writes "
    "mm y, which no later statement of any core touches, and the AIC cores' next reads "
    "(the received rows) are ordered by the first expert's Wait and SyncAll<false>"
)
GMM_WAITED_ALL = (
    "equivalent: AIV block 0, the only core that Waits, has waited for every expert's "
    "AlltoAllV before this barrier, and the other AIV cores' Finalize sends nothing, so "
    "no Finalize can overtake a Wait; the AIC cores' last matmul reads rows that its own "
    "expert's SyncAll<false> already ordered"
)
MODE4_EITHER_AIV = (
    "equivalent: both AIV cores of an AI core set their mode-4 flag after the same "
    "SyncAll<true>, which follows AIV block 0's Waits, so the AIC's wait for either one orders "
    "its matmul after the batch's AlltoAllVs; the other flag's counts stay pending (4 batches, "
    "under the 15 a flag may hold)"
)
A2AV_END_AFTER_WAITS = (
    "equivalent: AIV block 0, the only core that Waits, has waited for every batch's "
    "AlltoAllV in the loop before End, the other AIV cores' Finalize sends nothing and the "
    "AIC cores make no Hccl call after GetRankDim, so no Finalize can overtake a Wait; every "
    "read of received rows (the AIV permute, the AIC matmul) is already ordered after its "
    "batch's Wait by SyncAll<true> and flag 8"
)
SEND_ONE_PROCESS = (
    "equivalent in this port: in the compute-first mode (SendCnt 1, RecvCnt 0) Process "
    "commits the task and never reaches this Wait (it serves the communicate-first mode, "
    "whose Process waits)"
)
SEND_ONE_END = (
    "equivalent: the kernel reads nothing the AlltoAlls write (y is read by the host after "
    "the launch) and writes no send buffer after its Commit (each tile has its own rows of "
    "the transposed buffer), and Finalize waits for the last task, so these Waits order "
    "nothing"
)
GMM_A2AV_WAITS = (
    "equivalent: the kernel reads nothing the AlltoAllVs write (y is read by the host after "
    "the launch), nothing writes a batch's rows of the send buffer after its AlltoAllV (each "
    "batch has its own), and Finalize waits for the last task, so these Waits order nothing"
)
GMM_A2AV_END = (
    "equivalent: AIV block 0, the only core that Waits, has waited for every batch before End "
    "and Finalizes itself; the other AIV cores' Finalize sends nothing and the AIC cores make "
    "no Hccl call after GetRankDim, so the barrier keeps no Finalize behind another core's use"
)
LAST_SYNC_AFTER_FINALIZE = (
    "equivalent: the setup's SyncAll follows every core's Finalize<false>; no core reads or "
    "writes anything after it, and the launch ends when the last core returns"
)
IDLE_FLAG_WAIT = (
    "equivalent in this port: the idle AIC core (blockIdx >= usedCoreNum) reads and writes "
    "nothing; without its Wait its Sets still complete the other cores' flag 3 barriers, and "
    "it is left with one pending count per tile (3, under the 15 a flag holds) when the "
    "kernel returns"
)
AGMM_V2_IDLE_WAITS = (
    "equivalent: the cores past the tiling's usedCoreNum read nothing the AllGathers write; "
    "their Waits only keep their own counts (the CCU client's free message slots, the AI CPU "
    "client's wait count) in step with the working core's, which no later call of theirs reads"
)
DISPATCH_BETWEEN_COMBINES = (
    "equivalent in this sample: the dispatch between two combines orders them on every rank "
    "(its copy-out waits for every rank's counts, which each rank sends after its previous "
    "combine returned), so a combine that stays in the same half of the window never meets "
    "the previous one there"
)
HCOMM_CHANNEL_ORDER = (
    "equivalent on hardware: the notify goes on the same channel as the counts, and "
    "URMA_DEFAULT_CFG (strongly ordered, fence) lands one channel's writes in order, so the "
    "notify never overtakes them; and nothing rewrites the counts' source before the next "
    "launch's own exchange"
)
HCOMM_STATUS_ORDER = (
    "equivalent on hardware: the status goes on the same channel as the row it announces, and "
    "URMA_DEFAULT_CFG lands one channel's writes in order; the Drain after the status still "
    "completes both before the stash is written again"
)
HCOMM_STATUS_SOURCE = (
    "equivalent: the status source is the same eight 1.0f at every rewrite, and a stash slot "
    "is written again only in the next launch, after the receiver saw its status (which lands "
    "after the row) and the dispatch in between synchronised every rank"
)
QUEUED_FINALIZE = (
    "equivalent: with queueNum > 0 every core sends its own BatchWrites and then its own "
    "Finalize message on each of its own queues (SendFinalizeMsg), so no core's Finalize "
    "overtakes another core's BatchWrite, and nothing after the SyncAll reads what another "
    "core wrote"
)
A2_MULTI_SERVER = (
    "not judged: the multi-server path (epWorldSize > 8) runs on 16 ranks only, where the "
    "default schedule and 4 explored ones (2026-11-30) passed too, at 21 to 24 CPU-seconds a "
    "mutant; the suite judges these on 2 ranks, where the kernels copy into the peers' windows "
    "themselves (the four multi-server sites that the default schedule reports on 16 ranks are "
    "judged there)"
)
A2_OWN_STATUS = (
    "equivalent on the single-server path: the core that sends to the own rank copies the "
    "same status block into the own In window after the SyncAll (the direct write serves "
    "the multi-server path)"
)
A2_DISPATCH_FLAG_RESET = (
    "equivalent at 2 ranks: CleanUpFlags clears (maxMoeExpertNum / epWorldSize + 1) * 4 = "
    "2080 bytes of each source's slot, which hold the data flag of any count up to BS * K = 12"
)
A2_STATUS_CLEANUP = (
    "equivalent: a sender writes a source's status block before its rows and data flag, and "
    "the poller reads the status again until the flag at the position its counts give is "
    "set; a stale status points into the new rows, whose FP16 data is never 0xFFFFFFFF"
)
A2_STATUS_CHECK = (
    "equivalent: the data flag check behind it still waits: a status not written yet (or a "
    "stale one) gives the position of a data flag that holds zeros or the new rows' FP16 "
    "data, never 0xFFFFFFFF, so the loop reads the status again until it arrived"
)
A2_OFFSETS_SYNC = (
    "equivalent: WaitDispatch ends with a SyncAll of every core (it has no early return) "
    "before LocalWindowCopy reads the other cores' expert window offsets"
)
#: The ranks' root-cause classes, or "check FAIL" when the sample's own numpy check fails.
CHECK = "check FAIL"
DEADLOCK = "HcclDeadlockError"
LAYERED_NOT_EXPLORED = (
    "not judged by explore (the combine's IPC race fails some schedules unmutated, "
    "section 27), and the default schedule runs on"
)

LAST_SYNCALL = (
    "equivalent: the SyncAll is the kernel's last statement and nothing after it reads what "
    "another core wrote; a kernel ends (and the stream's next one starts) only once every "
    "core returned"
)


def _missed(reason: str) -> tuple[str, str]:
    return ("missed", reason)


#: sample -> site -> (stage, evidence): who reports the mutant without that site and with
#: what; for "missed", why it cannot be caught.
EXPECTED: dict[str, dict[str, tuple[str, str]]] = {
    "all_gather_custom": {
        "all_gather_custom:Wait#1": _missed(FINALIZE_WAITS),
        "all_gather_custom:SyncAll#1": ("explore", DEADLOCK),
        "all_gather_tiled:Wait#1": _missed(FINALIZE_WAITS),
        "all_gather_tiled:Wait#2": _missed(FINALIZE_WAITS),
        "all_gather_tiled:SyncAll#1": ("explore", DEADLOCK),
    },
    "all_reduce_custom": {
        "all_reduce_custom:Wait#1": _missed(FINALIZE_WAITS),
        "all_reduce_custom:SyncAll#1": ("explore", DEADLOCK),
        "all_reduce_tiled:Wait#1": _missed(FINALIZE_WAITS),
        "all_reduce_tiled:Wait#2": _missed(FINALIZE_WAITS),
        "all_reduce_tiled:SyncAll#1": ("explore", DEADLOCK),
    },
    "alltoall_custom": {
        "alltoall_custom:Wait#1": _missed(FINALIZE_WAITS),
        "alltoall_custom:SyncAll#1": ("explore", DEADLOCK),
        "alltoall_tiled:Wait#1": _missed(FINALIZE_WAITS),
        "alltoall_tiled:Wait#2": _missed(FINALIZE_WAITS),
        "alltoall_tiled:SyncAll#1": ("explore", DEADLOCK),
    },
    "alltoallv_custom": {
        "alltoallv_custom:Wait#1": _missed(FINALIZE_WAITS),
        "alltoallv_custom:SyncAll#1": ("explore", DEADLOCK),
    },
    "reduce_scatter_custom": {
        "reduce_scatter_three_prepares:Wait#1": _missed(FINALIZE_WAITS),
        "reduce_scatter_three_prepares:SyncAll#1": ("explore", DEADLOCK),
        "reduce_scatter_repeat:Wait#1": _missed(FINALIZE_WAITS),
        "reduce_scatter_repeat:SyncAll#1": ("explore", DEADLOCK),
    },
    "alltoall_allgather_custom": {
        "alltoall_allgather_custom:InterHcclGroupSync#1": ("default", "HcclRaceError"),
        "alltoall_allgather_custom:Wait#1": _missed(FINALIZE_WAITS),
        "alltoall_allgather_custom:Wait#2": _missed(FINALIZE_WAITS),
        "alltoall_allgather_custom:SyncAll#1": ("explore", DEADLOCK),
    },
    "matmul_reduce_scatter": {
        "matmul_reduce_scatter:SyncAll#1": ("default", "HcclRaceError"),
    },
    "all_gather_matmul": {
        "all_gather_matmul:Wait#1": ("default", "HcclRaceError"),
        "all_gather_matmul:SyncAll#1": ("explore", DEADLOCK),
    },
    "compute_then_allreduce": {
        "matmul_allreduce_custom:SyncAll#1": ("default", "HcclRaceError"),
    },
    "mc2_all_gather_matmul_full_mesh": {
        "all_gather_matmul:Wait#1": ("default", "HcclRaceError"),
        "all_gather_matmul:CrossCoreSetFlag#1": ("default", DEADLOCK),
        "all_gather_matmul:CrossCoreWaitFlag#1": ("explore", DEADLOCK),
    },
    "mc2_matmul_all_reduce": {
        "mc2_sync_all:CrossCoreSetFlag#1": ("default", DEADLOCK),
        "mc2_sync_all:CrossCoreWaitFlag#1": ("default", "HcclRaceError"),
        "matmul_all_reduce:mc2_sync_all#1": ("default", "HcclRaceError"),
        "matmul_all_reduce:Wait#1": _missed(FINALIZE_WAITS),
        "matmul_all_reduce:mc2_sync_all#2": _missed(NOTIFY_CORE_ONLY),
    },
    "mc2_matmul_reduce_scatter_full_mesh": {
        "barrier:CrossCoreSetFlag#1": ("default", DEADLOCK),
        "barrier:CrossCoreWaitFlag#1": ("default", "HcclRaceError"),
        "matmul_reduce_scatter:barrier#1": ("default", "HcclRaceError"),
        "matmul_reduce_scatter:Wait#1": _missed(FINALIZE_WAITS),
        "matmul_reduce_scatter:Wait#2": _missed(FINALIZE_WAITS),
        "matmul_reduce_scatter:barrier#2": ("explore", DEADLOCK),
    },
    "mc2_moe_distribute_dispatch_v2_950": {
        "moe_distribute_dispatch_v2:flag#1": ("explore", "HcclRaceError"),
        "moe_distribute_dispatch_v2:flag#2": ("explore", "HcclRaceError"),
        "moe_distribute_dispatch_v2:SyncAll#1": ("default", CHECK),
        "moe_distribute_dispatch_v2:Wait#1": ("default", CHECK),
        "moe_distribute_dispatch_v2:SyncAll#2": ("default", CHECK),
    },
    "mc2_moe_distribute_combine_v2_950": {
        "moe_distribute_combine_v2:flag#1": (
            "missed",
            "never runs: the combine shares the dispatch's status words and always follows it, "
            "so it finds them 1 and takes the second half of the window",
        ),
        "moe_distribute_combine_v2:flag#2": ("explore", "HcclScheduleError"),
        "moe_distribute_combine_v2:SyncAll#1": ("default", CHECK),
        "moe_distribute_combine_v2:Wait#1": ("default", CHECK),
        "moe_distribute_combine_v2:SyncAll#2": ("default", CHECK),
    },
    "mc2_moe_distribute_dispatch_v2_full_mesh": {
        "dispatch:flag#1": ("explore", "HcclRaceError"),
        "dispatch:flag#2": ("default", DEADLOCK),
        "dispatch:flag#3": ("default", DEADLOCK),
        "dispatch:poll#1": ("default", CHECK),
        "dispatch:flag#4": ("default", CHECK),
        "dispatch:SyncAll#1": ("default", CHECK),
        "dispatch:poll#2": ("explore", "HcclRaceError"),
        "dispatch:flag#5": ("explore", "HcclRaceError"),
    },
    "mc2_moe_distribute_dispatch_setup": {
        "Process:QueueBarrier#1": ("explore", "HcclScheduleError"),
        "Process:SyncAll#1": _missed(LAST_SYNC_AFTER_FINALIZE),
        "Init:flag#1": ("explore", "HcclDeadlockError"),
        "WaitDispatch:poll#1": ("explore", "HcclScheduleError"),
        "WaitDispatch:flag#1": ("explore", "HcclScheduleError"),
        "Process:SyncAll#2": ("explore", "HcclScheduleError"),
    },
    "moe_distribute_window": {
        "send_rows:flag#1": ("default", DEADLOCK),
        "send_rows:flag#2": ("default", DEADLOCK),
        "send_rows:flag#3": ("default", DEADLOCK),
        "receive_rows:poll#1": ("default", "RuntimeError"),
    },
    "moe_dispatch_combine": {},
    "mc2_allto_all_all_gather_batch_mat_mul": {
        "LocalCalculation:Wait#1": ("default", "HcclRaceError"),
        "LocalCalculation:SyncAll#1": _missed(OWN_WAIT),
        "LocalCalculation:SyncAll#2": ("default", CHECK),
        "LocalCalculation:SyncAll#3": ("default", CHECK),
        "NonLocalCommunication:Wait#1": ("default", "HcclRaceError"),
        "NonLocalCommunication:SyncAll#1": _missed(OWN_WAIT),
        "NonLocalCommunication:SyncAll#2": ("default", "HcclRaceError"),
        "CommunicateTile:InterHcclGroupSync#1": _missed(DISJOINT_TILES),
        "CommunicateTile:InterHcclGroupSync#2": ("default", "HcclRaceError"),
        "NonLocalCalculation:Wait#1": ("default", "HcclRaceError"),
        "NonLocalCalculation:SyncAll#1": _missed(OWN_WAIT),
        "NonLocalCalculation:SyncAll#2": ("default", CHECK),
        "NonLocalCalculation:SyncAll#3": ("default", CHECK),
    },
    "mc2_batch_mat_mul_reduce_scatter_allto_all": {
        "NonLocalCommunicationAndCal:InterHcclGroupSync#1": ("default", "HcclRaceError"),
        "NonLocalCommunicationAndCal:Wait#1": ("default", "HcclRaceError"),
        "AroundBmm:SyncAll#1": ("default", CHECK),
        "AroundBmm:SyncAll#2": ("default", CHECK),
        "AroundBmm:SyncAll#3": ("default", "HcclRaceError"),
        "LocalCommunicationAndCal:InterHcclGroupSync#1": ("default", "HcclRaceError"),
        "LocalCommunicationAndCal:Wait#1": ("default", "HcclRaceError"),
        "LocalCommunicationAndCal:Wait#2": ("default", "HcclRaceError"),
        "OnNonLocalReduceScatterFinished:SyncAll#1": ("default", "HcclRaceError"),
        "WaitAllAlltoAll:Wait#1": _missed(LOCAL_RS_ORDERS_ALLTOALLV),
    },
    "mc2_allto_all_matmul": {
        "Process:Wait#1": ("default", "HcclRaceError"),
        "End:Wait#1": _missed(WAIT_ONE_END),
        "Process:SyncAll#1": ("default", "HcclRaceError"),
        "Process:CrossCoreSetFlag#1": ("default", DEADLOCK),
        "Process:CrossCoreWaitFlag#1": ("default", CHECK),
        "Process:CrossCoreSetFlag#2": ("default", DEADLOCK),
        "Process:CrossCoreWaitFlag#2": ("default", CHECK),
    },
    "mc2_allto_allv_grouped_mat_mul": {
        "Process:SyncAll#1": _missed(SHARED_MM_APART),
        "Process:SyncAll#2": _missed(GMM_WAITED_ALL),
        "HcclAlltoAllvExec:Wait#1": ("default", "HcclRaceError"),
        "HcclAlltoAllvExec:SyncAll#1": ("default", "HcclRaceError"),
    },
    "mc2_allto_allv_grouped_mat_mul_2026": {
        "Wait:Wait#1": ("default", "HcclRaceError"),
        "End:SyncAll#1": _missed(A2AV_END_AFTER_WAITS),
        "ProcessCommRoundMode:Wait#1": ("default", "HcclRaceError"),
        "ProcessCommRoundMode:SyncAll#1": ("default", "HcclRaceError"),
        "ProcessCommRoundMode:CrossCoreSetFlag#1": ("default", DEADLOCK),
        "ProcessCommRoundMode:CrossCoreWaitFlag#1": ("default", CHECK),
    },
    "mc2_allto_allv_quant_grouped_mat_mul": {
        "WaitScale:Wait#1": ("default", "HcclUnfinishedError"),
        "Wait:Wait#1": ("default", "HcclRaceError"),
        "End:SyncAll#1": _missed(A2AV_END_AFTER_WAITS),
        "ProcessCommRoundMode:Wait#1": ("default", "HcclRaceError"),
        "ProcessCommRoundMode:SyncAll#1": ("default", "HcclRaceError"),
        "ProcessCommRoundMode:CrossCoreSetFlag#1": ("default", DEADLOCK),
        "ProcessCommRoundMode:CrossCoreWaitFlag#1": _missed(MODE4_EITHER_AIV),
        "ProcessCommRoundMode:CrossCoreWaitFlag#2": _missed(MODE4_EITHER_AIV),
    },
    "mc2_matmul_allto_all": {
        "Process:Wait#1": _missed(SEND_ONE_PROCESS),
        "End:Wait#1": _missed(SEND_ONE_END),
        "ProcessDefault:CrossCoreSetFlag#1": ("default", DEADLOCK),
        "ProcessDefault:CrossCoreWaitFlag#1": ("explore", "HcclScheduleError"),
        "ProcessDefault:CrossCoreSetFlag#2": ("default", DEADLOCK),
        "ProcessDefault:CrossCoreWaitFlag#2": ("default", CHECK),
        "ProcessDefault:SyncAll#1": ("default", "HcclRaceError"),
    },
    "mc2_grouped_mat_mul_allto_allv": {
        "Wait:Wait#1": _missed(GMM_A2AV_WAITS),
        "End:SyncAll#1": _missed(GMM_A2AV_END),
        "Process:CrossCoreSetFlag#1": ("default", DEADLOCK),
        "Process:CrossCoreWaitFlag#1": ("explore", "HcclRaceError"),
        "Process:CrossCoreSetFlag#2": ("default", DEADLOCK),
        "Process:CrossCoreWaitFlag#2": ("default", "HcclRaceError"),
        "Process:Wait#1": _missed(GMM_A2AV_WAITS),
    },
    "mc2_quant_grouped_mat_mul_allto_allv": {
        # on the CCU client Finalize waits for the last handle alone and writes FINALIZE into
        # the slot after the rounds waited: without the Waits the CCU never sees it
        "Wait:Wait#1": ("default", "HcclUnfinishedError"),
        "End:SyncAll#1": _missed(GMM_A2AV_END),
        "Process:CrossCoreSetFlag#1": ("default", DEADLOCK),
        "Process:CrossCoreWaitFlag#1": ("explore", "HcclRaceError"),
        "Process:CrossCoreSetFlag#2": ("default", DEADLOCK),
        "Process:CrossCoreWaitFlag#2": ("default", "HcclRaceError"),
        "Process:Wait#1": ("default", "HcclUnfinishedError"),
    },
    "mc2_matmul_reduce_scatter_v2_950": {
        "PostProcess:Wait#1": ("default", "HcclUnfinishedError"),
        "Compute:CrossCoreSetFlag#1": ("default", DEADLOCK),
        "Compute:CrossCoreWaitFlag#1": _missed(IDLE_FLAG_WAIT),
        "MatMulV3Compute:CrossCoreSetFlag#1": ("default", DEADLOCK),
        "MatMulV3Compute:CrossCoreWaitFlag#1": ("default", "HcclRaceError"),
    },
    "mc2_matmul_a2a_vec_reduce_950": {
        "ExecuteAivCommReducePipeline:Wait#1": ("default", "HcclRaceError"),
        # AIV block 0 Waits, the other AIV cores reduce their blocks of the round
        "ExecuteAivCommReducePipeline:SyncAll#1": ("explore", "HcclRaceError"),
        "ExecuteAivCommReducePipeline:Wait#2": ("default", "HcclRaceError"),
        "ExecuteAivCommReducePipeline:SyncAll#2": ("default", "HcclRaceError"),
        "CubeNotifyVector:CrossCoreSetFlag#1": ("default", DEADLOCK),
        "CubeNotifyVector:CrossCoreWaitFlag#1": ("explore", "HcclRaceError"),
        "CubeNotifyVector:CrossCoreSetFlag#2": ("default", DEADLOCK),
        "VecWaitCube:CrossCoreWaitFlag#1": ("explore", "HcclRaceError"),
    },
    "mc2_matmul_all_reduce_950": {
        "Mc2SyncAll:CrossCoreSetFlag#1": ("default", DEADLOCK),
        "Mc2SyncAll:CrossCoreWaitFlag#1": ("default", "HcclRaceError"),
        "PostProcEachTurn:Mc2SyncAll#1": ("default", "HcclRaceError"),
        # the ccu launch: the CCU client's Finalize writes its message into the slot after the
        # rounds waited, one the CCU has already passed
        "HcclFinalize:Wait#1": ("default", "HcclUnfinishedError"),
        "HcclFinalize:Wait#2": _missed(
            "equivalent: the tail's handle is the last one, and Finalize Waits the last handle "
            "until every committed round of it is finished; the host reads y after the launch"
        ),
        "HcclFinalize:Mc2SyncAll#1": _missed(NOTIFY_CORE_ONLY),
        "PostProcEachTurn:SyncAll#1": ("explore", "HcclRaceError"),
        "WaitAlltoAllEachTurn:Wait#1": ("default", "HcclRaceError"),
        "WaitAlltoAllEachTurn:SyncAll#1": _missed(
            "equivalent in this port (a tail group): the tail turn's SyncAll<false> follows AIV "
            "0's Waits of every tile's AlltoAll, and ReduceSumAndAllGather's first SyncAll its "
            "Wait of the tail's, before any core reduces those rounds"
        ),
        "ReduceSumAndAllGather:SyncAll#1": ("default", "HcclRaceError"),
        "ReduceSumAndAllGather:SyncAll#2": ("default", "HcclRaceError"),
        "ReduceSumAndAllGather:SyncAll#3": ("default", "HcclRaceError"),
        "HcclFinalize:Wait#3": ("default", "HcclRaceError"),
        "HcclFinalize:SyncAll#1": ("default", "HcclRaceError"),
        "HcclFinalize:SyncAll#2": _missed(
            "equivalent: after the copy into y only AIV 0 Finalizes, and the copy reads the "
            "workspace's AllGather output, which every task has finished writing"
        ),
    },
    "mc2_all_gather_matmul_v2_950": {
        "EndNotify:CrossCoreSetFlag#1": ("default", DEADLOCK),
        # the ai_cpu launch: its AI CPU client's Finalize resets the finished-turn counters an
        # idle core's Wait polls; in the ccu launch the barrier orders nothing (the CCU
        # client's Finalize resets nothing)
        "EndNotify:CrossCoreWaitFlag#1": ("explore", DEADLOCK),
        "MatmulKernelComputeGather:Wait#1": _missed(AGMM_V2_IDLE_WAITS),
        "MatmulKernelComputeGather:Wait#2": ("default", "HcclRaceError"),
    },
    "mc2_moe_distribute_combine_v2": {
        "InitWinState:flag#1": _missed(DISPATCH_BETWEEN_COMBINES),
        "ExpertAlltoAllDispatchCopyAdd:flag#1": ("default", DEADLOCK),
        "ExpertAlltoAllDispatchCopyAdd:flag#2": ("default", DEADLOCK),
        "WaitDispatch:check#1": ("default", CHECK),
        "WaitDispatch:flag#1": ("default", CHECK),
    },
    "mc2_moe_distribute_combine_v2_950_mte": {
        "ExpertAlltoAllDispatchInnerCopyAdd:flag#1": ("default", DEADLOCK),
        "ClearPackedTokenFlags:flag#1": ("default", CHECK),
        "LocalWindowCopy:check#1": ("default", CHECK),
    },
    "mc2_moe_distribute_combine_setup": {
        "InitStatusTargetSum:flag#1": ("default", DEADLOCK),
        "Process:SyncAll#1": _missed(QUEUED_FINALIZE),
        "Init:flag#1": ("explore", "HcclRaceError"),
        "WaitDispatch:SyncAll#1": ("default", DEADLOCK),
        "WaitDispatch:poll#1": ("explore", "HcclRaceError"),
        "WaitDispatch:flag#1": ("explore", "HcclRaceError"),
        "WaitDispatch:SyncAll#2": ("default", DEADLOCK),
    },
    "mc2_moe_ep_dispatch": {
        "BufferInit:flag#1": ("default", DEADLOCK),
        "BufferInit:SyncAll#1": ("default", DEADLOCK),
        "Communication:Drain#1": _missed(HCOMM_CHANNEL_ORDER),
        "Communication:flag#1": ("default", DEADLOCK),
        "Communication:flag#2": ("default", DEADLOCK),
        # wrong counts: the epilogue's rows run past the recv_x the host sized from them
        "GetRecvCount:poll#1": ("default", "HcclBoundsError"),
        "GetRecvCount:flag#1": ("default", CHECK),
        "WriteToRemoteWindow:flag#1": ("default", DEADLOCK),
        "WriteToRemoteWindow:Drain#1": ("explore", "HcclScheduleError"),
        "WriteToRemoteWindow:flag#2": ("default", DEADLOCK),
        "ProcessDirect:SyncAll#1": ("default", CHECK),
        "ProcessDirect:SyncAll#2": ("default", "HcclBoundsError"),
        # the epilogue: on some schedule it reads slots before they land (stale expert ids,
        # rows past recv_x) or its cached path reads them in another order than it wrote them;
        # the bounds error the 0xFF ids lead to is reported as the early read that fed it
        "WaitDispatch:poll#1": ("explore", "HcclRaceError"),
        "WaitDispatch:flag#1": ("explore", "HcclBoundsError"),
        "Process:SyncAll#1": ("default", CHECK),
        "Process:SyncAll#2": ("default", "HcclBoundsError"),
        "Process:SyncAll#3": ("explore", "HcclScheduleError"),
    },
    "mc2_moe_ep_combine": {
        "SetStatus:flag#1": ("default", DEADLOCK),
        "SetStatus:Drain#1": _missed(HCOMM_STATUS_ORDER),
        "SetStatus:flag#2": ("default", DEADLOCK),
        "SetStatus:Drain#2": _missed(HCOMM_STATUS_SOURCE),
        "WaitDispatch:check#1": ("default", CHECK),
        "WaitDispatch:flag#1": ("default", CHECK),
    },
    "mc2_moe_update_expert": {},
    "mc2_matmul_all_reduce_add_rms_norm": {
        # the other AIV cores read the count before block 0 wrote it: in the second launch, the
        # first's final count (the shared workspace), so they normalise rounds not reduced yet
        "ComputeAddRmsNorm:SyncAll#1": ("default", "HcclRaceError"),
        "matmul_all_reduce_add_rms_norm:SyncAll#1": _missed(ARN_COMMIT_NOT_EXPLORED),
        "matmul_all_reduce_add_rms_norm:SyncAll#2": _missed(ARN_LAST_COMMIT_ORDERS),
        "matmul_all_reduce_add_rms_norm:SyncAll#3": _missed(ARN_FINALIZE),
    },
    "mc2_mega_moe": {
        # a missing Notify leaves its partner's Wait unreleased; a missing Wait lets a core
        # read the UB tile, a flag or a peer's window early; a missing sync write or reset
        # leaves a poll waiting (only the default schedule judges: MEGA_MOE_SYNC_HANG)
        "NotifyCube:CrossCoreSetFlag#1": ("default", DEADLOCK),
        "WaitForVector:CrossCoreWaitFlag#1": ("default", CHECK),
        "NotifyVector:CrossCoreSetFlag#1": ("default", DEADLOCK),
        "WaitForCube:CrossCoreWaitFlag#1": ("default", CHECK),
        "EndSync:WaitForVector#1": ("default", CHECK),
        "EndGMM2Sync:WaitForVector#1": _missed(MEGA_MOE_END_DRAIN),
        "EndGMM2Sync:WaitForVector#2": _missed(MEGA_MOE_END_DRAIN),
        "EndGMM2Sync:WaitForVector#3": _missed(MEGA_MOE_END_DRAIN),
        "GmSignalWaitBarrier:poll#1": ("default", CHECK),
        "QuantProcessInRank:flag#1": ("default", CHECK),
        "SendMaskCal:flag#1": ("default", CHECK),
        "ResetFlagList:flag#1": ("default", DEADLOCK),
        "CrossRankSyncInWorldSize:flag#1": ("default", DEADLOCK),
        "CrossRankSyncInWorldSize:flag#2": ("default", CHECK),
        "CrossRankSyncInWorldSize:SyncAll#1": ("default", DEADLOCK),
        "SendCntCal:flag#1": ("default", DEADLOCK),
        "TripleInfoCalAndDispatch:flag#1": ("default", DEADLOCK),
        "UpdateGroupParams:poll#1": ("default", DEADLOCK),
        "AicComputeGeneric:poll#1": ("default", CHECK),
        "AicComputeGeneric:WaitForVector#1": ("default", CHECK),
        "AicComputeGeneric:poll#2": ("default", CHECK),
        "AicComputeGeneric:WaitForVector#2": ("default", CHECK),
        "AicComputeGeneric:NotifyVector#1": ("default", DEADLOCK),
        "AicComputeGeneric:NotifyVector#2": ("default", DEADLOCK),
        "AivGmm1PostGeneric:WaitForCube#1": ("default", CHECK),
        "AivGmm1PostGeneric:flag#1": ("default", DEADLOCK),
        "AivGmm1PostGeneric:NotifyCube#1": ("default", DEADLOCK),
        "AivGmm2PostGeneric:WaitForCube#1": ("default", CHECK),
        "AivGmm2PostGeneric:NotifyCube#1": ("default", DEADLOCK),
        "CombineTokens:flag#1": ("default", CHECK),
        "Process:SyncAll#1": ("default", DEADLOCK),
        "Process:SyncAll#2": ("default", CHECK),
    },
    "mc2_mega_moe_a3": {
        # a missing mode-2 set leaves the AIC or the AIV waiting; a missing wait or SyncAll
        # lets a core read the workspace or a window early; a missing status write or mode-0
        # flag leaves the barrier waiting
        "InitStatusTargetSum:flag#1": ("explore", "HcclRaceError"),
        "CrossRankSyncV2Set:CrossCoreSetFlag#1": ("default", DEADLOCK),
        "CrossRankSyncV2Set:CrossCoreSetFlag#2": ("default", DEADLOCK),
        "CrossRankSyncV2Set:CrossCoreWaitFlag#1": ("explore", DEADLOCK),
        "CrossRankSyncV2Set:flag#1": ("default", DEADLOCK),
        "CrossRankSyncV2Set:CrossCoreWaitFlag#2": _missed(MEGA_MOE_A3_LAST_WAIT),
        "CrossRankSyncV2Wait:CrossCoreSetFlag#1": ("default", DEADLOCK),
        "CrossRankSyncV2Wait:CrossCoreSetFlag#2": ("default", DEADLOCK),
        "CrossRankSyncV2Wait:CrossCoreWaitFlag#1": ("explore", "HcclRaceError"),
        "CrossRankSyncV2Wait:CrossCoreWaitFlag#2": _missed(MEGA_MOE_A3_LAST_WAIT),
        "Finalize:CrossCoreSetFlag#1": ("default", DEADLOCK),
        "GMM1:CrossCoreWaitFlag#1": ("default", CHECK),
        "GMM1:CrossCoreWaitFlag#2": ("default", CHECK),
        "GMM1:CrossCoreWaitFlag#3": _missed(MEGA_MOE_A3_GMM1_DRAIN),
        "GMM2:CrossCoreWaitFlag#1": ("default", CHECK),
        "AllGatherCounts:flag#1": ("default", DEADLOCK),
        "AllGatherCounts:poll#1": ("default", "HcclBoundsError"),
        "AllGatherCounts:SyncAll#1": ("default", CHECK),
        "CombineV2:CrossCoreWaitFlag#1": ("default", CHECK),
        "DispatchAndCombine:SyncAll#1": ("explore", "HcclScheduleError"),
        "DispatchAndCombine:SyncAll#2": ("default", CHECK),
        "DispatchAndCombine:CrossCoreSetFlag#1": ("default", DEADLOCK),
        "DispatchAndCombine:SyncAll#3": ("default", CHECK),
        "DispatchAndCombine:CrossCoreSetFlag#2": ("default", DEADLOCK),
        "DispatchAndCombine:CrossCoreWaitFlag#1": ("explore", "HcclScheduleError"),
        "DispatchAndCombine:SyncAll#4": ("default", CHECK),
        "DispatchAndCombine:SyncAll#5": ("default", CHECK),
        "DispatchAndCombine:CrossCoreSetFlag#3": ("default", DEADLOCK),
        "DispatchAndCombine:CrossCoreWaitFlag#2": ("explore", "HcclScheduleError"),
        "DispatchAndCombine:SyncAll#6": ("explore", "HcclScheduleError"),
        "DispatchAndCombine:SyncAll#7": ("explore", "HcclScheduleError"),
        "DispatchAndCombine:CrossCoreSetFlag#4": ("default", DEADLOCK),
        "DispatchAndCombine:SyncAll#8": ("explore", "HcclScheduleError"),
        "DispatchAndCombine:flag#1": _missed(MEGA_MOE_A3_RESET),
        "mega_moe:CrossCoreWaitFlag#1": ("default", CHECK),
    },
    "mc2_engram_fetch": {
        # the host reads fetched while the reads into it are in flight (emu/posted.py)
        "Process:Drain#1": ("default", "HcclRaceError"),
    },
    "mc2_moe_distribute_a2": {
        "IndexSort:flag#1": _missed(A2_OWN_STATUS),
        "IndexSort:flag#2": ("default", DEADLOCK),
        "IndexSort:flag#3": ("default", DEADLOCK),
        "SingleServerSendToMoeExpert:flag#1": ("explore", DEADLOCK),
        "SingleServerSendToMoeExpert:flag#2": ("default", DEADLOCK),
        "SingleServerSendToMoeExpert:flag#3": ("default", DEADLOCK),
        "SendToMoeExpert:flag#1": ("default", DEADLOCK),  # on 16 ranks, as the next three
        "SendToMoeExpert:flag#2": _missed(A2_MULTI_SERVER),
        "WaitDispatch:SyncAll#1": ("default", DEADLOCK),
        "WaitDispatch:check#1": _missed(A2_STATUS_CHECK),
        "WaitDispatch:check#2": ("explore", "HcclRaceError"),
        "WaitDispatch:flag#1": _missed(A2_DISPATCH_FLAG_RESET),
        "WaitDispatch:SyncAll#2": ("default", DEADLOCK),
        "CleanUpFlags:flag#1": _missed(A2_STATUS_CLEANUP),
        "Process:SyncAll#1": ("default", DEADLOCK),
        "Process:SyncAll#2": ("default", "HcclBoundsError"),
        "Process:SyncAll#3": ("default", DEADLOCK),
        "SingleServerDispatch:flag#1": ("default", DEADLOCK),
        "ConstructBatchWriteInfo:flag#1": ("default", DEADLOCK),
        "MultiServerDispatch:flag#1": _missed(A2_MULTI_SERVER),
        "MultiServerDispatch:flag#2": _missed(A2_MULTI_SERVER),
        "AlltoAllDispatch:SyncAll#1": ("default", DEADLOCK),
        "AlltoAllDispatch:SyncAll#2": ("default", DEADLOCK),
        "AlltoAllDispatch:flag#1": ("explore", DEADLOCK),
        "AlltoAllDispatch:SyncAll#3": ("default", "HcclBoundsError"),  # on 16 ranks
        "CalRecvCountsAndOffsets:flag#1": ("default", DEADLOCK),
        "CalRecvCountsAndOffsets:SyncAll#1": ("explore", DEADLOCK),
        "CalRecvCountsAndOffsets:SyncAll#2": ("default", DEADLOCK),
        "CalRecvCountsAndOffsets:SyncAll#3": _missed(A2_OFFSETS_SYNC),
        # combine: a flag left set is found two launches later, in the same half (routing)
        "WaitDispatch:check#3": ("explore", "HcclScheduleError"),
        "WaitDispatch:flag#2": ("explore", "HcclScheduleError"),
        "WaitDispatch:SyncAll#3": ("explore", "HcclScheduleError"),
    },
    "mc2_attention_ffn": {
        # without the check, launch 2 writes the second FFN's row before it read launch 1's
        "CheckFlagAndSetTableGM:poll#1": ("explore", DEADLOCK),
        "SendTokenToFFNByTokenIdx:flag#1": ("default", DEADLOCK),
        "SetFlagToFFN:flag#1": ("default", DEADLOCK),
        "SetFlagInAttn:flag#1": ("default", DEADLOCK),
        "Process:SyncAll#1": ("default", DEADLOCK),
        "Process:flag#1": ("default", DEADLOCK),
        "ffn_table_init:flag#1": ("default", CHECK),
        "ffn_worker:poll#1": ("default", DEADLOCK),
        "ffn_worker:flag#1": ("default", CHECK),
        "ffn_worker:flag#2": ("default", DEADLOCK),
        "attention_worker:poll#1": ("explore", "HcclRaceError"),
        "attention_worker:flag#1": ("explore", "HcclRaceError"),
    },
    "mc2_distribute_barrier": {
        "InitStatus:flag#1": ("default", CHECK),
        "TimeOutTest:poll#1": ("default", CHECK),
        "TimeOutTest:flag#1": ("default", CHECK),
        "SetStatus:flag#1": ("default", DEADLOCK),
        "WaitStatus:poll#1": ("default", CHECK),
        "CleanStatus:flag#1": ("default", DEADLOCK),
        "CleanStatus:flag#2": ("default", CHECK),
        "Process:SyncAll#1": _missed(LAST_SYNCALL),
    },
    "mc2_quant_all_reduce": {
        # without the flip every launch uses partition 0: a rank that starts the next launch
        # copies its x over the window data a slower peer may still read
        "InitGMTensor:flag#1": ("explore", "HcclRaceError"),
        "WriteStatusToWin:flag#1": ("default", DEADLOCK),
        "ReadStatus:poll#1": ("default", CHECK),
        "ReadStatus:flag#1": ("default", CHECK),
    },
    "mc2_moe_distribute_a2_layered": {
        "Init:flag#1": ("default", DEADLOCK),
        "Init:flag#2": ("default", CHECK),
        "GatherAndWriteCntInfo:flag#1": ("default", CHECK),
        "DispatchBetweenServer:SyncAll#1": ("default", "HcclBoundsError"),
        "DispatchBetweenServer:flag#1": ("missed", LAYERED_NOT_EXPLORED),
        "WaitWindow:poll#1": ("default", CHECK),
        "SetIpcFlag:flag#1": ("default", DEADLOCK),
        "WaitIpcFlag:poll#1": ("default", CHECK),
        "CreateInnerReduceInfo:flag#1": (
            "missed",
            "never runs: every token of the routing goes to both servers (realBS is never 0)",
        ),
        "CleanUp:flag#1": ("default", CHECK),
        "CleanUp:flag#2": ("default", CHECK),
        **{f"Process:SyncAll#{i}": ("default", CHECK) for i in range(1, 6)},
        "Process:SyncAll#6": ("missed", LAYERED_NOT_EXPLORED),
        "Init:flag#3": ("missed", LAYERED_NOT_EXPLORED),
        "Init:flag#4": ("default", DEADLOCK),
        "AlltoAllDispatch:flag#1": ("default", DEADLOCK),
        "AlltoAllDispatch:SyncAll#1": ("missed", LAYERED_NOT_EXPLORED),
        "SumToWindow:poll#1": ("default", CHECK),
        "SumToWindow:flag#1": ("default", CHECK),
        "SumToWindow:SyncAll#1": ("missed", LAYERED_NOT_EXPLORED),
        "AlltoAllServerDispatch:SyncAll#1": ("default", "HcclBoundsError"),
        "AlltoAllServerDispatch:flag#1": ("missed", LAYERED_NOT_EXPLORED),
        "SetStatus:SyncAll#1": ("default", DEADLOCK),
        "SetStatus:flag#1": ("missed", LAYERED_NOT_EXPLORED),
        "SetStatus:SyncAll#2": ("default", DEADLOCK),
        "WaitDispatch:poll#1": ("missed", LAYERED_NOT_EXPLORED),
        "WaitDispatch:SyncAll#1": ("missed", LAYERED_NOT_EXPLORED),
        "SumToServer:SyncAll#1": ("missed", LAYERED_NOT_EXPLORED),
        "SumToServer:SyncAll#2": ("missed", LAYERED_NOT_EXPLORED),
    },
    "mc2_quant_reduce_scatter": {
        "InitGMTensor:flag#1": ("explore", "HcclRaceError"),
        "WriteStatusToWin:flag#1": ("default", DEADLOCK),
        "ReadStatus:poll#1": ("default", CHECK),
        "ReadStatus:flag#1": ("default", CHECK),
    },
}


# ---------------------------------------------------------------- the table covers everything
def test_every_sample_is_mutated_or_skipped_with_a_reason() -> None:
    present = {p.stem for p in SAMPLES_DIR.glob("*.py") if not p.name.startswith("_")}
    unlisted = present - set(SPECS) - set(SKIPPED)
    assert not unlisted, (
        f"samples {sorted(unlisted)} are neither mutated nor skipped: add a SampleSpec to "
        "SPECS and their verdicts to EXPECTED (python tests/mutants.py prints them)"
    )
    assert set(SPECS) | set(SKIPPED) <= present
    assert set(EXPECTED) == set(SPECS)


@pytest.mark.parametrize("name", list(SPECS))
def test_the_table_lists_every_site_of_the_sample(name: str) -> None:
    """A new or removed ordering statement changes the site list: the table must follow."""
    assert [site.id for site in find_sites(SPECS[name])] == list(EXPECTED[name])


@pytest.mark.parametrize("name", [n for n, s in SPECS.items() if s.flags])
def test_every_flag_pattern_marks_a_site(name: str) -> None:
    spec = SPECS[name]
    flag_sites = [s.text for s in find_sites(spec) if s.name == "flag"]
    for pattern in spec.flags:
        assert any(re.search(pattern, text) for text in flag_sites), pattern


@pytest.mark.parametrize("name", [n for n, s in SPECS.items() if s.checks])
def test_every_check_pattern_marks_a_site(name: str) -> None:
    spec = SPECS[name]
    check_sites = [s.text for s in find_sites(spec) if s.name == "check"]
    for pattern in spec.checks:
        assert any(re.search(pattern, text[3:-1]) for text in check_sites), pattern


# ---------------------------------------------------------------- the mutator itself
KERNEL = '''
def sync():
    """A barrier helper."""
    hp.CrossCoreSetFlag[0, PIPE_FIX](3)
    hp.CrossCoreWaitFlag(3)


def kernel(hccl, flag, h):
    if hccl.Wait(h) != HCCL_SUCCESS:
        return
    sync()
    flag[0] = 1
    while int(flag[1]) != 1:
        pass
    hccl.Wait(h)
    hp.launch(kernel, block_dim=8)
'''
TOY = SampleSpec("toy", flags=(r"^flag\[0\] = ",), block_dim=2)


def test_sites_of_every_kind_in_source_order() -> None:
    sites = find_sites(TOY, KERNEL)
    assert [(s.id, s.line) for s in sites] == [
        ("sync:CrossCoreSetFlag#1", 4),
        ("sync:CrossCoreWaitFlag#1", 5),
        ("kernel:Wait#1", 9),
        ("kernel:sync#1", 11),
        ("kernel:flag#1", 12),
        ("kernel:poll#1", 13),
        ("kernel:Wait#2", 15),
    ]
    assert sites[5].text == "while int(flag[1]) != 1: pass"
    assert barrier_helpers(ast.parse(KERNEL)) == {"sync"}


def test_a_used_wait_becomes_hccl_success_and_a_statement_becomes_pass() -> None:
    used = ast.unparse(mutant_tree(TOY, "kernel:Wait#1", KERNEL))
    assert "if 0 != HCCL_SUCCESS:" in used
    assert used.count("hccl.Wait(h)") == 1
    dropped = ast.unparse(mutant_tree(TOY, "kernel:poll#1", KERNEL))
    assert "while" not in dropped
    assert "flag[0] = 1" in dropped
    assert "block_dim=2" in dropped


def test_each_mutant_removes_only_its_own_site() -> None:
    """The sample is parsed once and each site removed in place: every mutant is put back, so
    mutants made one after another from one parse equal mutants made each from a fresh one."""
    sites = [site.id for site in find_sites(TOY, KERNEL)]
    fresh = {}
    for site in [None, *sites]:
        prepared_cache_clear()
        fresh[site] = ast.unparse(mutant_tree(TOY, site, KERNEL))
    prepared_cache_clear()
    assert {site: ast.unparse(mutant_tree(TOY, site, KERNEL)) for site in sites} == {
        site: fresh[site] for site in sites
    }
    assert ast.unparse(mutant_tree(TOY, None, KERNEL)) == fresh[None]
    assert len(set(fresh.values())) == len(fresh)  # each mutant differs from the sample


SCAN = """
def scan(flags, seen, h):
    for i in range(4):
        if flags[i] != 1:
            continue
        seen[i] = 1
    if hccl.Wait(h) == 0:
        seen[0] = 2
    if int(flags[5]) == 1:
        flags[5] = 0
        return True
    return False
"""


def test_a_flag_check_of_a_scan_loop_is_a_site_that_takes_the_flag_as_set() -> None:
    spec = SampleSpec("toy", checks=(r"^flags\[i\] != 1$", r"^int\(flags\[5\]\) == 1$"))
    assert [s.id for s in find_sites(spec, SCAN)] == ["scan:check#1", "scan:Wait#1", "scan:check#2"]
    continued = ast.unparse(mutant_tree(spec, "scan:check#1", SCAN))
    assert "continue" not in continued and "seen[i] = 1" in continued
    taken = ast.unparse(mutant_tree(spec, "scan:check#2", SCAN))
    assert "if True:\n        flags[5] = 0" in taken and "int(flags[5])" not in taken
    assert "if 0 == 0:" in ast.unparse(mutant_tree(spec, "scan:Wait#1", SCAN))  # not True


def test_more_launches_extend_the_launch_loop_and_need_one() -> None:
    three = SampleSpec("toy", launches=3)
    source = "def main():\n    for launch in (1, 2):\n        run(launch)\n"
    assert "for launch in (1, 2, 3):" in ast.unparse(mutant_tree(three, None, source))
    with pytest.raises(ValueError, match="toy: launches=3 needs one `for launch in ...:` loop"):
        mutant_tree(three, None, KERNEL)


def test_an_unknown_site_names_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"toy has no site 'kernel:Wait#3'; its sites: sync:"):
        mutant_tree(TOY, "kernel:Wait#3", KERNEL)


# ---------------------------------------------------------------- the mutants
@pytest.mark.parametrize("name", [n for n in SPECS if EXPECTED[n]])
def test_the_unmutated_sample_passes_at_the_mutation_size(name: str) -> None:
    """Otherwise every mutant would count as caught."""
    spec = SPECS[name]
    every_warning: set[str] = set()
    for launches in spec.launch_counts():
        sized = replace(spec, launches=launches)
        for world_size in spec.sizes(None):
            with samples_on_path():
                lines, warned = run(sized, mutant(sized, None), world_size)
            verdicts = [m[3] for line in lines if (m := VERDICT.match(line))]
            assert len(verdicts) == len(lines) and set(verdicts) <= {"PASS", "SKIP"}, lines
            assert verdicts.count("PASS") >= world_size
            every_warning |= set(warned)
    assert every_warning == set(spec.warnings)


@pytest.mark.parametrize("name", [n for n in SPECS if n in EXPECTED])
def test_sites_with_their_own_size_or_launches_are_sites_of_the_sample(name: str) -> None:
    spec = SPECS[name]
    named = [site for site, _ in (*spec.site_sizes, *spec.site_launches)]
    assert set(named) <= set(EXPECTED[name]), set(named) - set(EXPECTED[name])
    assert len({site for site, _ in spec.site_launches}) == len(spec.site_launches)


def test_a_site_with_its_own_launches_is_judged_with_them() -> None:
    spec = SampleSpec("toy", launches=1, site_launches=(("kernel:Wait#1", 3),))
    source = "def main():\n    for launch in (1, 2):\n        run(launch)\n"
    assert spec.for_site("kernel:Wait#2") is spec
    assert spec.for_site("kernel:Wait#1").launches == 3
    assert spec.launch_counts() == (1, 3)
    three = spec.for_site("kernel:Wait#1")
    assert "for launch in (1, 2, 3):" in ast.unparse(mutant_tree(three, None, source))
    assert "for launch in (1,):" in ast.unparse(mutant_tree(spec, None, source))


def _mutant_cases() -> list:
    """Every (sample, site); those that need the explore stage (16 runs each) are slow."""
    return [
        pytest.param(
            name,
            site_id,
            marks=[SLOW] if EXPECTED[name][site_id][0] != "default" else [],
        )
        for name, sites in EXPECTED.items()
        for site_id in sites
    ]


@pytest.mark.parametrize(("name", "site_id"), _mutant_cases())
def test_mutant_is_reported_as_the_table_says(name: str, site_id: str) -> None:
    stage, evidence = EXPECTED[name][site_id]
    verdict = judge(SPECS[name], site_id, missed_explore() if stage == "missed" else EXPLORE)
    hint = "python tests/mutants.py lists every verdict next to the table's"
    assert verdict.stage == stage, f"{name} without {site_id}: {verdict}; {hint}"
    if stage != "missed":
        assert verdict.evidence == evidence, f"{name} without {site_id}: {verdict}; {hint}"


# ---------------------------------------------------------------- docs/sanitizer.md
def _doc_section() -> list[str]:
    text = DOC.read_text(encoding="utf-8")
    return text.split("\n## Mutation score\n", 1)[1].split("\n## ", 1)[0].splitlines()


def test_doc_score_table_matches_the_table() -> None:
    assert [line for line in _doc_section() if line.startswith("|")] == score_rows(EXPECTED)


def test_doc_lists_every_uncatchable_mutant_with_its_reason() -> None:
    assert "\n".join(uncatchable_lines(EXPECTED)) in "\n".join(_doc_section())


def test_doc_names_every_skipped_sample() -> None:
    section = "\n".join(_doc_section())
    for sample, reason in SKIPPED.items():
        assert f"`{sample}`: {reason}" in section


@pytest.mark.parametrize("text", ["0", "17", "four", "-1"])
def test_missed_explore_refuses_what_is_not_a_schedule_count(
    text: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MUTANTS_MISSED_EXPLORE", text)
    with pytest.raises(ValueError, match=rf"MUTANTS_MISSED_EXPLORE='{text}': expected a number"):
        missed_explore()
