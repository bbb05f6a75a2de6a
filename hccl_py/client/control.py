"""Task control of one Hccl object: Commit, Wait, Query, Finalize and InterHcclGroupSync.

:class:`HandleControl` checks what every handle shares (the object is usable,
the handle exists, the core is the one that prepared it, this core committed
the round) and leaves the rest to the handle's lifecycle
(:data:`.lifecycles.LIFECYCLES`), which calls back into it for the collectives'
rounds, into :class:`~.finegrained.FineGrainedSteps` for fine-grained steps and
into :class:`~.half_alltoallv.WindowWriter` for AlltoAllvWrite.
"""

from __future__ import annotations

from typing import Any

from ..core.config import c_int
from ..core.constants import HCCL_FAILED, HCCL_MAX_HANDLE_ID, HCCL_SUCCESS
from ..core.task import PendingDep, op_name
from ..kernel.context import core_name, current_core_context
from ..kernel.cores import CoreContext
from ..server.protocol import Server
from . import ccu_slots
from .binding import Binding, unknown_handle_text
from .convert import slots_used
from .failures import Failures
from .finalize import finalize
from .finegrained import FineGrainedSteps
from .half_alltoallv import WindowWriter
from .handle import Handle
from .lifecycles import LIFECYCLES
from .sender import calling_core, is_sender
from .state import ClientState

#: The collectives' lifecycle (a Wait of its committed round goes straight to wait_round).
ROUNDS = LIFECYCLES["rounds"]


class HandleControl:
    """Commit, Wait, Query, Finalize and InterHcclGroupSync of one Hccl object's handles."""

    def __init__(
        self,
        binding: Binding,
        failures: Failures,
        steps: FineGrainedSteps,
        writes: WindowWriter,
    ) -> None:
        self._binding = binding
        self._failures = failures
        #: What fine-grained lifecycles and AlltoAllvWrite's lifecycle call (lifecycles.Control).
        self.steps = steps
        self.writes = writes

    @property
    def server(self) -> Server:
        """The rank's server (lifecycles ask it)."""
        return self._binding.server

    @property
    def state(self) -> ClientState:
        """The domain's shared client state (lifecycles read its tasks)."""
        return self._binding.state

    def ok(self, value: Any = HCCL_SUCCESS) -> Any:
        """A call that succeeded (lifecycles return through it)."""
        return self._failures.ok(value)

    def queue_num(self) -> int:
        """The tiling's queueNum (BatchWrite's Wait flushes only without queues)."""
        return self._binding.queue_num()

    def _usable_info(self, call: str, handleId: Any) -> tuple[Handle | None, int]:
        """(the handle, 0), or (None, -1) for an unusable object or an unknown handle."""
        if self._failures.unusable(self._binding, call, sends=False, handle=handleId):
            return None, HCCL_FAILED
        info = self._binding.handle(handleId)
        if info is None:
            return None, self._unknown_handle(call, handleId)
        return info, HCCL_SUCCESS

    def _unknown_handle(self, call: str, handleId: Any) -> int:
        """-1 for a handle id that Prepare never returned (out of range, or not yet)."""
        return self._failures.breach(
            "unknown-handle",
            unknown_handle_text(call, handleId, "is out of range or was never returned by Prepare"),
            handle=handleId,
        )

    # ------------------------------------------------------------------ Commit
    def commit(self, handleId: Any) -> None:
        """Commit: let the server run the next round of ``handleId``."""
        b, breach = self._binding, self._failures.breach
        if self._failures.unusable(b, "Commit", sends=False, handle=handleId):
            return
        info = b.handle(handleId)
        if info is None:
            breach(
                "unknown-handle",
                unknown_handle_text(
                    "Commit", handleId, "was never returned by Prepare; nothing sent"
                ),
                None,
                handle=handleId,
            )
            return
        self.commit_handle(info, int(handleId))

    def commit_handle(
        self, info: Handle, h: int, n: int = 1, core: CoreContext | None = None
    ) -> None:
        """The next ``n`` rounds of handle ``h`` (``info``) of this usable object, as ``n``
        Commits in a row: what :meth:`commit` does once it found the handle. ``core``: the
        calling core where the caller has it (a ``Prepare[True]``, which checked the object
        and made the handle on it)."""
        b, breach = self._binding, self._failures.breach
        if info.commits >= info.repeat:
            info.extra_commits += 1
            if b.ccu:  # the CCU client sends it as one more round, in the next slot
                extra = info.repeat + info.extra_commits - 1
                ccu_slots.sent(b, h, range(extra, extra + 1))
            allowed = self.steps.commits_per_prepare(info)
            steps = (
                f" ({info.repeat * b.state.rank_dim} steps, {info.step_size} per Commit)"
                if info.step_size
                else ""
            )
            breach(
                "extra-commit",
                f"extra Commit: all {info.repeat} rounds{steps} are already committed; "
                + (
                    f"the CCU client sends it as round {info.repeat}, past the task's last "
                    "round: on the device it reads and writes past the buffers"
                    if b.ccu
                    else "the official client ignores it (and logs an error)"
                ),
                None,
                handle=h,
                op=op_name(info.op),
                round=info.commits,
                expected=f"<= {allowed} commits",
                actual=allowed + info.extra_commits,
            )
            return
        if core is None:
            core = calling_core()
        if core.kind != info.kind:
            breach(
                "wrong-core",
                f"Commit from an {core.kind.name} core of a handle prepared on {info.kind.name}",
                None,
                handle=h,
                op=op_name(info.op),
                round=info.commits,
            )
            return
        first = info.commits
        LIFECYCLES[info.lifecycle].commit(self, info, h, n)
        if b.ccu:  # every CCU Commit sends a message, an AlltoAllvWrite's too (no steps)
            ccu_slots.sent(b, h, range(first, info.commits))
        self._failures.ok(None)

    def note_local_commit(self, core: CoreContext, h: int, round_idx: int) -> None:
        """A Commit on a core that does not send: the official client counts it per core.

        It only lets this core Wait for the round (hccl_aicpu_impl.h, Commit:
        ``handleIdCommitTurnCnt_`` is per object; only the working core writes
        its count to GM); the server runs the round when the sending core
        commits it. While it has not, a wait report says so.
        """
        state = self._binding.state

        def note() -> str | None:
            sender, sender_core = state.sender, state.sender_core
            if sender is None or sender_core is None:
                return None
            info = sender.handles[h] if h < len(sender.handles) else None
            if info is not None and info.rounds_committed > round_idx:
                return None
            unit = "step" if info is not None and info.step_size else "round"
            return (
                f"{core_name(core)} committed {unit} {round_idx}, but only the sending core's "
                f"Commits reach the server and {core_name(sender_core)} has not committed it"
            )

        state.commit_notes.setdefault(h, {}).setdefault(round_idx, note)

    # -------------------------------------------------------------------- Wait
    def wait(self, handleId: Any) -> int:
        """Wait: block until the next round of ``handleId`` finished; 0, or -1.

        With several queues (queueNum != 0) the official client returns 0 at once,
        before any handle or commit check (hccl_aicpu_impl.h, ``Wait``): it waits for
        nothing, whatever the handle; QueueBarrier and Finalize order the tasks.
        """
        b = self._binding
        # waits_at_once() and Rounds.wait, written out for the common Wait: three frames less
        if (b.queues_read() if b._queues is None else b._queues) != 0:
            return self._failures.ok(HCCL_SUCCESS)
        hangs = self._wait_after_reset(handleId) if b.reset else None
        if hangs is not None:
            return hangs
        info = b.usable_handle(handleId)
        if info is None:
            info, ret = self._usable_info("Wait", handleId)  # (makes the breach)
            if info is None:
                return ret
        lifecycle = LIFECYCLES[info.lifecycle]
        if lifecycle is ROUNDS and info.waits < info.commits:
            return self.wait_round(info, int(handleId))
        return lifecycle.wait(self, info, int(handleId))

    def _wait_after_reset(self, handleId: Any) -> int | None:
        """A Wait after this core's Finalize reset the finished-turn counters, of a round it
        committed and had not waited: it polls a counter that stays 0 (hccl_aicpu_impl.h,
        Wait after Finalize, ResetFinishedTurnCnt), so it is reported in every mode."""
        b = self._binding
        info = b.handle(handleId) if b.reset else None
        if info is None or info.rounds_waited >= info.rounds_committed:  # fine-grained: steps
            return None
        unit = "step" if info.step_size else "round"
        return self._failures.breach(
            "wait-after-finalize",
            f"Wait of handle {int(handleId)} after Finalize: its {unit} {info.rounds_waited} was "
            "committed and not waited, and Finalize reset the finished-turn counters that this "
            f"Wait polls, so it would never return; Wait every {unit} before Finalize",
            HCCL_FAILED,
            handle=int(handleId),
            op=op_name(info.op),
            round=info.rounds_waited // (b.state.rank_dim if info.step_size else 1),
        )

    def wait_round(self, info: Handle, h: int) -> int:
        """Wait of a round the server runs (lifecycle "rounds"): block until it finished."""
        b = self._binding
        core = current_core_context() or calling_core()  # (calling_core raises outside a kernel)
        if core.kind != info.kind:
            return self._failures.wrong_core(core, info, h, op_name(info.op))
        for later in range(h + 1, len(b.handles)):  # (a loop: no comprehension's call per Wait)
            if b.handles[later].waits:
                self._failures.breach(
                    "wait-order",
                    f"Wait(handle {h}) after Wait(handle {later}): Waits for different handles "
                    f"must follow Prepare order",
                    handle=h,
                    op=op_name(info.op),
                    round=info.waits,
                )
                break
        if b.ccu and b.state.sender is b:
            ccu_slots.check_wait(b, info, h, self._failures)
        state = b.state
        alone = state.launch.alone  # (one core: record_wait and observe_turn have nothing to do)
        if not alone:
            state.record_wait(core, h, info.waits)
        task = info.task or state.task(h, core)
        state.rank_ctx.server.wait(task, info.waits)  # (b.server, without the property's call)
        if not alone:
            state.observe_turn(core, h, info.waits)
        info.waits += 1
        self._failures.last_error = None  # Failures.ok(), written out: a call less per Wait
        return HCCL_SUCCESS

    def not_committed(self, info: Handle, h: int) -> int:
        """Wait of a round this core's object did not commit: -1 at once, in every mode.

        The official client counts Commits per core and returns -1 without
        waiting when this core's Waits reached its Commits. Shipping kernels rely
        on it (idle cores that Wait but never Commit), so it is no error; on the
        sending core, whose Commits are the ones the server sees, it is a warning.
        Rounds that no core ever commits are reported when the kernel returns.
        """
        b = self._binding
        if b.ccu and info.commits and b.state.sender is b:
            if info.waits < info.commits + info.extra_commits:
                # the CCU sent the extra Commit as one more round, which this Wait polls (the
                # extra-commit warning said it runs past the task): hccl_py does not run it
                info.waits += 1
                return self._failures.ok(HCCL_SUCCESS)
            return self._failures.breach(
                "ccu-wait-beyond",
                f"Wait of handle {h} after its {info.commits} committed round(s) were all "
                f"waited: the CCU client checks only that the handle was committed once "
                f"(hccl_ccu_v0.h, Wait) and polls the message slot after the handle's last "
                f"round, so this Wait hangs, or takes the completion of a later handle's round "
                f"and that handle's Wait (or Finalize) hangs instead; Wait once per committed "
                f"round",
                HCCL_FAILED,
                handle=h,
                op=op_name(info.op),
                round=info.waits,
                expected=f"<= {info.commits} Waits",
                actual=info.waits + 1,
            )
        sender = b.state.sender is b
        if info.waits >= info.repeat:  # more Waits than the handle has rounds
            return self._failures.breach(
                "wait-not-committed" if sender else "wait-not-committed-idle",
                f"Wait returns -1 at once: Wait {info.waits + 1} of a handle of "
                f"{info.repeat} round(s), all of which this core already waited; one Wait per "
                "round",
                HCCL_FAILED,
                handle=h,
                op=op_name(info.op),
                expected=f"<= {info.repeat} Waits",
                actual=info.waits + 1,
            )
        return self._failures.breach(
            "wait-not-committed" if sender else "wait-not-committed-idle",
            f"Wait returns -1 at once: this core waited {info.waits} and committed "
            f"{info.commits} of {info.repeat} rounds (round {info.waits} not committed by "
            "this core)",
            HCCL_FAILED,
            handle=h,
            op=op_name(info.op),
            round=info.waits,
            expected=f"> {info.waits} commits",
            actual=info.commits,
        )

    # ---------------------------------------------------------- Query, Finalize
    def query(self, handleId: Any) -> int:
        """Query: how many rounds of ``handleId`` have finished; -1 for a bad handle."""
        b, breach = self._binding, self._failures.breach
        if b.state is None:
            return breach(
                "not-initialised", "Query: the Hccl object is not initialised", handle=handleId
            )
        if b.ccu:  # the 950 AI CPU client has it (hccl_aicpu_impl.h); Query.md says none
            platform = b.state.rank_ctx.config.platform.name
            return breach(
                "unsupported",
                f"Query is not supported by the CCU client on {platform} "
                "(platform_v310/hccl_ccu_v0_def.h has none)",
                handle=handleId,
            )
        if b.waits_at_once():
            return self._query_with_queues(handleId)
        info = b.handle(handleId)
        if info is None:
            return self._unknown_handle("Query", handleId)
        if b.reset:  # its own Finalize reset the finished-turn counters it reads
            return self._failures.ok(0)
        lifecycle = LIFECYCLES[info.lifecycle]
        count = lifecycle.finished(self, info, int(handleId))
        if lifecycle.queued and not b.ccu:  # the sending core's Finalize resets them for all
            count = b.state.query_read(calling_core(), int(handleId), count)
        return self._failures.ok(count)

    def _query_with_queues(self, handleId: Any) -> int:
        """Query with several queues (queueNum != 0): 0 for any handle id in [0, 63).

        hccl_aicpu_impl.h, ``Query``: after the init and range checks, ``queueNum_ != 0``
        returns 0 before it looks up the handle; its rounds are not counted per queue
        (QueueBarrier orders them), so a prepared handle reads 0 as well as one never
        prepared.
        """
        h = c_int(handleId)
        if h is None or not 0 <= h < HCCL_MAX_HANDLE_ID:
            return self._unknown_handle("Query", handleId)
        return self._failures.ok(0)

    def finalize(self, sync: bool) -> None:
        """Finalize: no more tasks; with ``sync``, wait for the last one (:mod:`.finalize`)."""
        finalize(self, self._binding, self._failures, sync)

    # ------------------------------------------------------- InterHcclGroupSync
    def inter_group_sync(self, srcGroupID: Any, srcHandleID: Any) -> None:
        """InterHcclGroupSync: later tasks start after task ``srcHandleID`` of ``srcGroupID``."""
        b, breach = self._binding, self._failures.breach
        if self._failures.unusable(b, "InterHcclGroupSync"):
            return
        platform = b.state.rank_ctx.config.platform
        if not platform.has_group_sync:
            breach(
                "unsupported",
                f"InterHcclGroupSync is not supported on {platform.name}: the AI CPU client's "
                "returns at once and the CCU client has none (platform_v310), so it orders "
                "nothing; it is ignored",
                None,
            )
            return
        if len(b.handles) + b.n_syncs >= HCCL_MAX_HANDLE_ID:
            if b.over_limit is None:
                b.over_limit = (
                    "an InterHcclGroupSync took the last of the 64 message slots: Finalize's "
                    "FINALIZE message then goes to slot 64, past the message area "
                    "(hccl_msg.h, HCCL_MSG_CNT), and Finalize waits for an answer there "
                    "(platform_v220/hccl_aicpu.h, InterHcclGroupSync; hccl_aicpu_impl.h, Finalize)"
                )
            breach(
                "message-slots",
                f"InterHcclGroupSync: {slots_used(len(b.handles), b.n_syncs)}; the "
                "official client writes it into that slot and only logs, and its Finalize "
                "then never returns (finalize-after-limit); hccl_py ignores the sync",
                None,
            )
            return
        if b.compute_only:  # its message goes out; nothing runs that it could order
            b.n_syncs += 1
            self._failures.ok(None)
            return
        group = c_int(srcGroupID)
        other = None if group is None else b.state.launch.clients.get(group)
        if other is None or other is b.state:
            b.n_syncs += 1  # the client checks neither argument: its message takes a slot
            breach(
                "sync-target",
                f"InterHcclGroupSync: srcGroupID {srcGroupID} is not another initialised domain "
                "of this kernel",
                None,
            )
            return
        # Only the sending core records the dependency. A handle that domain srcGroupID has
        # not prepared yet is valid: the server retries the sync until it is (HCCL_E_AGAIN).
        sender = is_sender(b.config, calling_core())
        src_handle = c_int(srcHandleID)
        valid_id = src_handle is not None and 0 <= src_handle < HCCL_MAX_HANDLE_ID
        if not valid_id and sender:
            b.n_syncs += 1
            breach(
                "unknown-handle",
                f"InterHcclGroupSync: {srcHandleID!r} is no handle id of domain {srcGroupID} "
                f"(0 <= id < {HCCL_MAX_HANDLE_ID})",
                None,
                handle=srcHandleID,
            )
            return
        if sender:
            src = other.tasks.get(src_handle)
            pending = PendingDep(other.group.name, src_handle, other.tasks.get)
            b.state.deps.append(pending if src is None else src)
        b.n_syncs += 1
        self._failures.ok(None)
