"""What one Hccl object holds: its server type and config, and its binding to a domain.

:class:`Binding` is the state every part of the client reads: the domain's
shared :class:`~.state.ClientState` once InitV2 ran, the init style and
tiling, the registered cc tilings, the handles this core's object returned,
the InterHcclGroupSync messages it sent and whether it finalized. It is also
the identity the launch knows the sending core's object by
(:class:`~.state.Sender`).
"""

from __future__ import annotations

from typing import Any

from ..core.config import c_int
from ..core.constants import HcclServerConfig, HcclServerType
from ..core.errors import HcclBoundsError
from ..core.gm import what_is
from ..core.task import Task
from ..server.protocol import Server
from ..tiling import Mc2CcTiling, Mc2InitTiling, tiling_bytes
from .handle import Handle
from .lifecycles import LIFECYCLES
from .state import ClientState

#: ``debugMode`` 1 of the init tiling (hccl_inner_def.h): compute only, no communication.
HCCL_ONLY_COMPUTE = 1

#: Why an object cannot communicate, by the rule (hccl_py.core.rules.RULES) a call then breaks.
UNUSABLE = {
    "not-initialised": "the Hccl object is not initialised (call InitV2 first)",
    "finalized": "the Hccl object was finalized and cannot communicate again",
}


class Binding:
    """One Hccl object's state: declared here, reset by a new Init."""

    def __init__(self, server_type: HcclServerType, config: HcclServerConfig) -> None:
        self.server_type = server_type
        #: Whether this is the CCU client (Ascend 950), whose rules differ from the AI CPU one's.
        self.ccu = server_type == HcclServerType.HCCL_SERVER_TYPE_CCU
        self.config = config
        #: The user's collective (e.g. "all_reduce") when this is an internal client of
        #: hccl_py.framework, which reports name; None for kernel code. Framework collectives
        #: are not kernel API calls, so the platform's op and size restrictions do not bind them.
        self.framework: str | None = None
        self.state: ClientState | None = None
        #: "InitV2", "Init" (with a tiling) or "Init-no-tiling" once initialised.
        self.mode: str | None = None
        self.tiling_src: Any = None
        #: Mc2InitTiling fields read from that tiling (queueNum, debugMode; commBlockNum for
        #: BatchWrite and QueueBarrier only), by name.
        self.init_fields: dict[str, int] = {}
        #: The registered cc tilings by opType (any opType below HCCL_CMD_ALL, as the client).
        self.cc: dict[int, Mc2CcTiling] = {}
        self.handles: list[Handle] = []
        self.n_syncs = 0
        self.finalized = False
        #: Whether its Finalize reset the finished-turn counters its Waits and Queries read
        #: (the AI CPU client's Finalize<true> on the sending core; another core's changes
        #: nothing: hccl_aicpu_impl.h, Finalize).
        self.reset = False
        #: Whether the sending core's Finalize was Finalize<false>: the launch ends only once
        #: the server finished its tasks (its AI CPU task loops until every task finished).
        self.finalized_async = False
        #: Why this object's Finalize<true> never returns, if it does not: a Prepare refused at
        #: the 63 handles or the message slots (the official client counted it anyway), or an
        #: InterHcclGroupSync that took the last message slot (Finalize's goes past them).
        self.over_limit: str | None = None
        #: Whether Init found debugMode 1 (HCCL_ONLY_COMPUTE) in the tiling
        #: (:meth:`reads_compute_only`): no task reaches a server.
        self.compute_only = False
        #: :meth:`queues_read`'s answer once asked (it holds until the next Init).
        self._queues: int | None = None
        #: The CCU client's message slots in order: (handle, round) sent to each
        #: (:mod:`.ccu_slots`); None off the CCU client, or once the slots are not modelled.
        self.ccu_sent: list[tuple[int, int]] | None = [] if self.ccu else None

    def bind(self, state: ClientState | None, mode: str | None, tiling: Any) -> None:
        """Start over on ``state`` (an Init): no handles, tilings or syncs yet."""
        self.state = state
        self.mode = mode
        self.tiling_src = tiling
        self.init_fields = {}
        self.cc = {}
        self.handles = []
        self.n_syncs = 0
        self.finalized = self.reset = self.finalized_async = False
        self.over_limit = None
        self.compute_only = False
        self._queues = None
        self.ccu_sent = [] if self.ccu else None

    @property
    def server(self) -> Server:
        """The server this object's tasks go to (its rank's, once initialised)."""
        return self.state.rank_ctx.server

    def domain(self) -> str | None:
        """The domain's name once initialised, else None (reports name it)."""
        return self.state.group.name if self.state else None

    def unusable(self, sends: bool = True) -> tuple[str, str] | None:
        """Why the object cannot communicate now, as (rule id, reason), or None.

        ``sends``: a call that gives the server work (Prepare and the like), refused after any
        Finalize; a Commit, Wait, Query or Finalize of the AI CPU client on a core whose
        Finalize changed nothing (not the sending core) goes on as before it.
        """
        if self.state is None:
            return "not-initialised", UNUSABLE["not-initialised"]
        if self.finalized and (sends or self.reset or self.ccu):
            return "finalized", UNUSABLE["finalized"]
        return None

    def usable_handle(self, handle: Any) -> Handle | None:
        """The handle with id ``handle`` when a Wait or Query may use it (``unusable(sends=False)``
        is None and the id is known), else None (the caller then finds out why)."""
        if self.state is None or self.finalized and (self.reset or self.ccu):
            return None
        if type(handle) is int and handle >= 0:  # handle(), written out for an int id
            try:
                return self.handles[handle]
            except IndexError:
                return None
        return self.handle(handle)

    def handle(self, handle: Any) -> Handle | None:
        """The handle with id ``handle`` this object returned, or None."""
        if type(handle) is not int:  # (an int itself, every Commit's and Wait's: no call)
            handle = c_int(handle)
            if handle is None:
                return None
        if handle >= 0:
            try:
                return self.handles[handle]
            except IndexError:
                pass
        return None

    def queued_count(self) -> int:
        """How many of this object's handles are tasks of the server's queue.

        One-sided handles (BatchWrite, AlltoAllvWrite: lifecycles that are not queued) go
        straight into windows: no slot of the server, so ranks do not match them task by task.
        """
        count = 0
        for h in self.handles:  # (a loop: a generator costs a call per handle)
            count += LIFECYCLES[h.lifecycle].queued
        return count

    def queued_tasks(self) -> list[Task]:
        """The tasks of this object's handles that went to the server's queue."""
        return [
            h.task for h in self.handles if h.task is not None and LIFECYCLES[h.lifecycle].queued
        ]

    def comm_block_num(self) -> int:
        """``Mc2InitTiling.commBlockNum`` of this object's tiling (0: none set)."""
        return self._init_field("commBlockNum")

    def queue_num(self) -> int:
        """``Mc2InitTiling.queueNum`` of the tiling this object was initialised with."""
        return self._init_field("queueNum")

    def has_tiling(self, cmd: Any) -> bool:
        """Whether a call of type ``cmd`` may go out: a cc tiling of that type was set, or the
        object was initialised without tiling (``Init(context)``)."""
        return self.mode == "Init-no-tiling" or cmd in self.cc

    def reads_compute_only(self) -> bool:
        """Whether the tiling's debugMode is 1, HCCL_ONLY_COMPUTE, on the AI CPU client: its
        Wait, Commit and Finalize then never wait (hccl_aicpu_impl.h) and the server does not
        communicate (SetDebugMode.md); the CCU client never reads debugMode."""
        return (
            self.server_type == HcclServerType.HCCL_SERVER_TYPE_AICPU
            and self._init_field("debugMode") == HCCL_ONLY_COMPUTE
        )

    def _init_field(self, name: str) -> int:
        """A uint8 or uint16 field of the Mc2InitTiling this object was initialised with (0
        without one), read once; a tiling too small for it is an HcclBoundsError that says
        what was read."""
        if self.tiling_src is None:
            return 0
        if name not in self.init_fields:
            field = getattr(Mc2InitTiling, name)
            start, end = field.offset, field.offset + field.size
            try:
                raw = tiling_bytes(self.tiling_src, nbytes=end)
            except (HcclBoundsError, ValueError) as exc:  # a GM buffer, or bytes, too small
                bounds = isinstance(exc, HcclBoundsError)
                raise HcclBoundsError(
                    f"Mc2InitTiling.{name} (bytes [{start}, {end})) of the init tiling "
                    f"given to {self.mode}: {exc.reason if bounds else exc}",
                    rank=exc.rank if bounds else self.state.rank_ctx.rank,
                ) from None
            self.init_fields[name] = int.from_bytes(raw[start:end], "little")
        return self.init_fields[name]

    def queues_read(self) -> int:
        """The tiling's queueNum as this client reads it: 0 for the CCU client and on platforms
        whose AI CPU client never sets it (Ascend 950: platform_v310's InitV2). Found once per
        Init (every Wait asks)."""
        if self._queues is None:
            if (
                self.state is None
                or self.server_type != HcclServerType.HCCL_SERVER_TYPE_AICPU
                or not self.state.rank_ctx.config.platform.reads_queue_num
            ):
                self._queues = 0
            else:
                self._queues = self.queue_num()
        return self._queues

    def waits_at_once(self) -> bool:
        """Whether Wait returns 0 at once: an initialised AI CPU client with queueNum != 0.

        hccl_aicpu_impl.h, ``Wait``: after the init check, ``queueNum_ != 0`` returns
        HCCL_SUCCESS before any handle or commit check (platform_v220 reads queueNum).
        """
        return self.queues_read() != 0


def unknown_handle_text(call: str, handleId: Any, why: str) -> str:
    """What is wrong with a handle that names no task: ``why`` for an int, its type otherwise
    (a ``"0"`` is no handle 0 that Prepare failed to return)."""
    if isinstance(handleId, bool):
        return f"{call}: the handle must be an int, the id that Prepare returned, not a bool"
    if c_int(handleId) is None:
        return (
            f"{call}: the handle must be an int, the id that Prepare returned, not "
            f"{what_is(handleId)}"
        )
    return f"{call}: handle {handleId} {why}"
