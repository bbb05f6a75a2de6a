"""Finalize: the end of an Hccl object's tasks, as each client does it.

The AI CPU client's Finalize<true> on the sending core waits for the last handle, sends
the FINALIZE message, waits for the server to read it and resets the finished-turn
counters that Waits and Queries read; on any other core it only takes a message slot
(hccl_aicpu_impl.h, Finalize). The CCU client's resets nothing (platform_v310/hccl_ccu_v0.h).
What would hang on hardware after it is reported in every mode (:data:`hccl_py.core.rules.RULES`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..core.task import op_name
from . import ccu_slots
from .binding import Binding
from .failures import Failures
from .lifecycles import LIFECYCLES
from .sender import calling_core, is_sender, other_working_core

if TYPE_CHECKING:
    from .lifecycles import Control


#: hccl_aicpu_impl.h: with queues Query is always 0, so Finalize<true>'s wait for the last
#: handle (``while Query(curHandleId_) < repeat``) never ends.
_QUEUED_FINALIZE = (
    "Finalize[True] with queueNum {n} after a task would wait forever: with several queues "
    "Query is always 0; use Finalize[False], as BatchWrite.md's multi-queue example does"
)


#: What rounds left uncommitted at a CCU Finalize do on hardware, and why hccl_py stops.
_CCU_UNCOMMITTED = (
    "the CCU client sends each round as a message of its own and its Finalize waits only for "
    "the rounds it sent (hccl_ccu_v0.h, Finalize), so on hardware the rest never run and "
    "nothing hangs; hccl_py's servers run a task's rounds in order to its last and cannot end "
    "this one, so the emulation stops here (commit every round, or prepare with the repeat "
    "you commit)"
)


def finalize(control: Control, b: Binding, failures: Failures, sync: bool) -> None:
    """Finalize of the object ``b``: no more tasks; with ``sync``, wait for the last one."""
    breach = failures.breach
    if b.reset and sync:
        breach(
            "finalize-again",
            "Finalize again on the sending core: the server stopped reading messages at the "
            "first Finalize, and this one waits for it to read its FINALIZE message, so it "
            "would never return (hccl_aicpu_impl.h, Finalize)",
            None,
        )
        return
    if failures.unusable(b, "Finalize", sends=False):
        return
    state = b.state
    core = calling_core()
    working = is_sender(b.config, core)
    other = other_working_core(b, core) if working else None
    if other is not None:
        b.finalized = True
        breach("second-working-core", f"Finalize: {other}", None)
        return
    if sync and working and not b.ccu and b.over_limit:
        b.finalized = True  # it was called: a kernel that catches the report ends as finalized
        breach(
            "finalize-after-limit",
            f"Finalize after {b.over_limit}, so it would never return",
            None,
        )
        return
    platform = state.rank_ctx.config.platform
    if not sync and b.ccu:
        sync = True  # the CCU client's Finalize never reads its template argument
    breached = False
    if not sync:
        # A3 documents Finalize<false> for BatchWrite tasks; a core without any task (an
        # idle core of a BatchWrite kernel: moe_distribute_combine_setup) has no other kind.
        # Ascend 950 documents no restriction (Finalize.md)
        only_batch_writes = all(h.lifecycle == "batch-write" for h in b.handles)
        allowed = platform.finalize_async_any or only_batch_writes
        breached = not (platform.finalize_async_allowed and allowed)
        if breached:
            breach(  # a lenient run goes on as the client does: the message, no wait
                "finalize-async",
                f"Finalize<false> is only allowed on Atlas A3 with BatchWrite tasks and on "
                f"Ascend 950, not on {platform.name} with these tasks",
                None,
            )
    if sync and b.handles and (queues := b.queues_read()):
        breach("finalize-queues", _QUEUED_FINALIZE.format(n=queues), None)
        return
    if sync and working:  # Finalize<false> returns at once (hccl_aicpu_impl.h)
        state.wait_synced(core)
    if state.sender is b:
        for h, info in enumerate(b.handles):
            if info.commits < info.repeat:
                breach(
                    "ccu-uncommitted" if b.ccu else "finalize-uncommitted",
                    f"Finalize with handle {h} ({info.task.describe()}) committed "
                    f"{info.committed_text(state.rank_dim)}: "
                    + (_CCU_UNCOMMITTED if b.ccu else "the server would wait forever for the rest")
                    + info.task.commit_hint(info.rounds_committed),
                    None,
                    rank=state.rank_ctx.rank,
                    handle=h,
                    op=op_name(info.op),
                    round=info.commits,
                )
        if b.ccu:
            ccu_slots.check_finalize(b, failures)
        if b.handles:
            queued = b.queued_count()
            launch = state.launch_index() if queued else None
            # Finalize<false> waits for nothing (hccl_aicpu_impl.h: both `if constexpr (sync)`
            # blocks skipped): its BatchWrites stay unordered, pending until the launch ends
            if sync or launch is not None:
                b.server.finalize(state.group, state.rank, launch, queued)
        if sync:
            for h, info in enumerate(b.handles):
                LIFECYCLES[info.lifecycle].drain(control, info, h)
            if not b.ccu:
                # The AI CPU client's Finalize<true> resets the finished-turn counters that
                # the other cores' Waits poll (hccl_aicpu_impl.h). The CCU client's resets
                # nothing (platform_v310/hccl_ccu_v0.h): it Waits for the last handle and
                # writes the finalize message; another core's Wait polls the round's CKE or
                # the working core's soft-sync count finishCntGM_, which only InitV2 clears.
                state.check_finalize_order(core)
    if state.sender is not b:
        state.idle_finalizes.append(core)
    b.finalized = True
    b.reset = sync and working and not b.ccu
    b.finalized_async = not sync and working
    if not breached:  # a lenient Finalize<false> that went on keeps saying why it was wrong
        failures.ok(None)
