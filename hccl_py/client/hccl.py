"""The AscendC ``Hccl`` client, call for call: task control on top of the Prepare calls.

The client validates every call exactly as the C++ client does (returning -1
or doing nothing where C++ does), keeps the handle bookkeeping, and sends
valid tasks to the rank's :class:`~hccl_py.server.protocol.Server`. It never moves data
itself, so the same client serves the emulator, gloo and HCCL.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core.constants import HCCL_FAILED, HCCL_MAX_HANDLE_ID, HCCL_SUCCESS, HcclCMDType
from ..core.errors import HcclCoreError, HcclUnfinishedError
from ..core.task import op_name
from ..core.template import checked, template
from .convert import slots_used
from .half_alltoallv import WriteCalls
from .lifecycles import LIFECYCLES
from .log import logged
from .sender import is_sender
from .state import Handle
from .state import core_name as _core_name

_C = HcclCMDType


class Hccl(WriteCalls):
    """The AscendC ``Hccl`` client. Create one per kernel instance (core).

    ``Hccl[HCCL_SERVER_TYPE_AICPU, HcclServerConfig(CoreType.ON_AIV, 10)]()``
    mirrors the C++ template arguments; keywords work too.
    """

    # ------------------------------------------------ commit / wait / finalize
    @logged
    def Commit(self, handleId: int) -> None:
        """Let the server run the next round of ``handleId`` (once per round)."""
        reason = self._usable()
        if reason:
            self._fail(f"Commit: {reason}", ret=None, handle=handleId)
            return
        info = self._handle(handleId)
        if info is None:
            self._fail(
                f"Commit: handle {handleId} was never returned by Prepare; nothing sent",
                ret=None,
                handle=handleId,
            )
            return
        name = op_name(info.op)
        if info.commits >= info.repeat:
            self._carry_on(
                "extra-commit",
                f"extra Commit: all {info.repeat} rounds are already committed; the official "
                "client ignores it (and logs an error)",
                handle=int(handleId),
                op=name,
                round=info.commits,
                expected=f"<= {info.repeat} commits",
                actual=info.commits + 1,
            )
            return
        core = self._core()
        if core.kind != info.kind:
            self._fail(
                f"Commit from an {core.kind.name} core of a handle prepared on {info.kind.name}",
                ret=None,
                cls=HcclCoreError,
                handle=int(handleId),
                op=name,
                round=info.commits,
            )
            return
        LIFECYCLES[info.lifecycle].commit(self, info, int(handleId))
        self._ok(None)

    def _note_local_commit(self, core: Any, h: int, round_idx: int) -> None:
        """A Commit on a core that does not send: the official client counts it per core.

        It only lets this core Wait for the round (hccl_aicpu_impl.h, Commit:
        ``handleIdCommitTurnCnt_`` is per object; only the working core writes
        its count to GM); the server runs the round when the sending core
        commits it. While it has not, a wait report says so.
        """
        state = self.state

        def note() -> str | None:
            sender, sender_core = state.sender, state.sender_core
            if sender is None or sender_core is None:
                return None
            if h < len(sender.handles) and sender.handles[h].commits > round_idx:
                return None
            return (
                f"{_core_name(core)} committed round {round_idx}, but only the sending core's "
                f"Commits reach the server and {_core_name(sender_core)} has not committed it"
            )

        state.commit_notes.setdefault(h, {}).setdefault(round_idx, note)

    @logged
    def Wait(self, handleId: int) -> int:
        """Block until the next round of ``handleId`` finished; 0, or -1 without waiting."""
        reason = self._usable()
        if reason:
            return self._fail(f"Wait: {reason}", handle=handleId)
        info = self._handle(handleId)
        if info is None:
            return self._unknown_handle("Wait", handleId)
        return LIFECYCLES[info.lifecycle].wait(self, info, int(handleId))

    def _wait_round(self, info: Handle, h: int) -> int:
        """Wait of a round the server runs (lifecycle "rounds"): block until it finished."""
        if self._queue_num():
            # With several queues the official client returns 0 at once.
            info.waits += 1
            return self._ok(HCCL_SUCCESS)
        name = op_name(info.op)
        core = self._core()
        if core.kind != info.kind:
            return self._wrong_core(core, info, h, name)
        later = [g for g in range(h + 1, len(self.handles)) if self.handles[g].waits]
        if later:
            reason = (
                f"Wait(handle {h}) after Wait(handle {later[0]}): Waits for different handles "
                f"must follow Prepare order"
            )
            if self._strict():
                return self._fail(reason, handle=h, op=name, round=info.waits)
            self._carry_on("wait-order", reason, handle=h, op=name, round=info.waits)
        self.state.record_wait(core, h, info.waits)
        task = info.task or self.state.task(h, core)
        self.server.wait(task, info.waits)
        self.state.observe_turn(core, h, info.waits)
        info.waits += 1
        return self._ok(HCCL_SUCCESS)

    def _unknown_handle(self, call: str, handleId: object) -> int:
        """-1 for a handle id that Prepare never returned (out of range, or not yet)."""
        return self._fail(
            f"{call}: handle {handleId} is out of range or was never returned by Prepare",
            handle=handleId,
        )

    def _not_committed(self, info: Handle, h: int) -> int:
        """Wait of a round this core's object did not commit: -1 at once, in every mode.

        The official client counts Commits per core and returns -1 without
        waiting when this core's Waits reached its Commits. Shipping kernels rely
        on it (idle cores that Wait but never Commit), so it is no error; on the
        sending core, whose Commits are the ones the server sees, it is a warning.
        Rounds that no core ever commits are reported when the kernel returns.
        """
        sender = self.state.sender is self
        name = op_name(info.op)
        what = "already waited" if info.waits >= info.repeat else "not committed by this core"
        return self._carry_on(
            "wait-not-committed",
            f"Wait returns -1 at once: this core waited {info.waits} and committed "
            f"{info.commits} of {info.repeat} rounds (round {info.waits} {what})",
            ret=HCCL_FAILED,
            warn=sender,
            handle=h,
            op=name,
            round=info.waits,
            expected=f"> {info.waits} commits",
            actual=info.commits,
        )

    @logged
    def Query(self, handleId: int) -> int:
        """How many rounds of ``handleId`` have finished (0..repeat); -1 for a bad handle."""
        if self.state is None:
            return self._fail("Query: the Hccl object is not initialised", handle=handleId)
        platform = self.state.rank_ctx.config.platform
        if not platform.has_query:
            return self._fail(f"Query is not supported on {platform.name}", handle=handleId)
        info = self._handle(handleId)
        if info is None:
            return self._unknown_handle("Query", handleId)
        if self.finalized:
            return self._ok(0)
        return self._ok(LIFECYCLES[info.lifecycle].finished(self, info, int(handleId)))

    @template("sync")
    @logged
    def Finalize(self, sync: bool = True) -> None:
        """Tell the server no more tasks come and wait for the last one (``Finalize[False]`` skips that)."""
        reason = self._usable()
        if reason:
            self._fail(f"Finalize: {reason}", ret=None)
            return
        platform = self.state.rank_ctx.config.platform
        if not sync:
            has_batch_write = any(h.lifecycle == "batch-write" for h in self.handles)
            if not (platform.finalize_async_allowed and has_batch_write):
                self._fail(
                    f"Finalize<false> is only allowed on Atlas A3 with BatchWrite tasks, "
                    f"not on {platform.name} with these tasks",
                    ret=None,
                )
                return
        if self.state.sender is self:
            server = self.server
            for h, info in enumerate(self.handles):
                if info.commits < info.repeat:
                    raise HcclUnfinishedError(
                        f"Finalize with handle {h} ({info.task.describe()}) committed {info.commits} of "
                        f"{info.repeat} rounds: the server would wait forever for the rest",
                        rank=self.state.rank_ctx.rank,
                        domain=self.state.group.name,
                        handle=h,
                        op=op_name(info.op),
                        round=info.commits,
                    )
            if self.handles:
                server.finalize(
                    self.state.group,
                    self.state.rank,
                    self.state.launch_index(),
                    self._queued_count(),
                )
            if sync:
                for h, info in enumerate(self.handles):
                    LIFECYCLES[info.lifecycle].drain(self, info, h)
                self.state.check_finalize_order(self._core())
        self.finalized = True
        self._ok(None)

    # ------------------------------------------------------------ other calls
    @checked
    def GetRankId(self) -> int:
        """This rank's index in the object's domain."""
        if self.state is None:
            return self._fail("GetRankId: the Hccl object is not initialised", ret=0)
        return self.state.rank

    @checked
    def GetRankDim(self) -> int:
        """Number of ranks in the object's domain."""
        if self.state is None:
            return self._fail("GetRankDim: the Hccl object is not initialised", ret=0)
        return self.state.rank_dim

    @logged
    def InterHcclGroupSync(self, srcGroupID: int, srcHandleID: int) -> None:
        """Every later task of this domain starts only after task ``srcHandleID`` of domain ``srcGroupID``."""
        reason = self._usable()
        if reason:
            self._fail(f"InterHcclGroupSync: {reason}", ret=None)
            return
        if len(self.handles) + self._n_syncs >= HCCL_MAX_HANDLE_ID:
            self._carry_on(
                "message-slots",
                f"InterHcclGroupSync: {slots_used(len(self.handles), self._n_syncs)}; the "
                "official client writes it into Finalize's slot and only logs: it is ignored",
            )
            return
        valid = isinstance(srcGroupID, (int, np.integer)) and not isinstance(srcGroupID, bool)
        other = self.state.launch.clients.get(int(srcGroupID)) if valid else None
        if other is None or other is self.state:
            self._fail(
                f"InterHcclGroupSync: srcGroupID {srcGroupID} is not another initialised domain "
                "of this kernel",
                ret=None,
            )
            return
        # Only the sending core records the dependency. The task may come from another
        # core (the sending core of domain srcGroupID) that has not prepared it yet: wait
        # for it then; only when this core itself sends in that domain is it final.
        core = self._core()
        sender = is_sender(self.config, core)
        valid_id = (
            isinstance(srcHandleID, (int, np.integer))
            and not isinstance(srcHandleID, bool)
            and 0 <= srcHandleID < HCCL_MAX_HANDLE_ID
        )
        srcHandleID = int(srcHandleID) if valid_id else srcHandleID
        src = other.tasks.get(srcHandleID) if valid_id else None
        if src is None and sender:
            if not valid_id or other.sender_core is core:
                self._fail(
                    f"InterHcclGroupSync: handle {srcHandleID} was never prepared in domain {srcGroupID}",
                    ret=None,
                    handle=srcHandleID,
                )
                return
            src = other.task(srcHandleID, core)
        if sender:
            self.state.deps.append(src)
        self._n_syncs += 1
        self._ok(None)
