"""Per-launch client state: what the Hccl objects of all cores of one launch share.

Handles and tasks per context, the sending core, InterHcclGroupSync
dependencies, and the race between other cores' Waits and the reset of the
finished-turn counters in the sending core's Finalize; at kernel exit, the check
for work the real server would hang on.
"""

from __future__ import annotations

from typing import Protocol

from ..core.constants import HcclCMDType, HcclDataType
from ..core.gm import GmAddr
from ..core.task import PendingDep, Task, op_name
from ..kernel.context import core_name
from ..kernel.cores import CoreContext, HcclContext, KernelCoreType
from .failures import breach
from .handle import Handle

#: How to order every core's Waits before the sending core's Finalize.
FIX = "call SyncAll() after the last Wait of every core and before Finalize"


class Sender(Protocol):
    """What the launch needs of the sending core's Hccl object (its ``Binding`` has it)."""

    handles: list[Handle]
    finalized: bool
    finalized_async: bool

    def queued_tasks(self) -> list[Task]:
        """The tasks of its handles that went to the server's queue."""
        ...


class ClientState:
    """What the Hccl objects of all cores of one launch share for one context."""

    def __init__(self, context: HcclContext) -> None:
        self.context = context
        self.group = context.group
        self.launch = context.launch
        self.rank_ctx = context.launch.rank_ctx
        self.rank = self.group.rank_of(self.rank_ctx.rank)
        self.rank_dim = self.group.size
        self.tasks: dict[int, Task] = {}
        #: Prepare arguments every core passed alike, validated once: their task fields
        #: (:meth:`~hccl_py.client.prepare.PreparePath.fields`).
        self.validated: dict[tuple, tuple[object, object, dict[str, object]]] = {}
        self.prepare_kinds: set[KernelCoreType] = set()
        #: The core types whose block 0 called Finalize as a working core (default config).
        self.finalize_kinds: set[KernelCoreType] = set()
        self.sender: Sender | None = None
        self.sender_core: CoreContext | None = None
        self.deps: list[Task | PendingDep] = []
        self.launch_idx: int | None = None
        self.waits: list[tuple[CoreContext, dict[bool, int], int, int]] = []
        #: The clock of the latest Query of each (core, handle) before the sender's Finalize (a
        #: Query loop keeps one entry); Finalize judges them beside the Waits, round None.
        self.queries: dict[tuple[CoreContext, int], dict[bool, int]] = {}
        self.finalized_by: tuple[CoreContext, dict[bool, int]] | None = None
        #: Cores other than the sending one that called Finalize (it sends them nothing).
        self.idle_finalizes: list[CoreContext] = []
        #: Whether the sender's Finalize reset the finished-turn counters before a racing Wait
        #: polled (a seeded schedule's choice), and whether the race was reported.
        self.reset = False
        self.hazard_warned = False
        #: QueueBarrier: barriers each queue slot sent, and arrivals at each barrier index.
        self.barriers_sent: dict[int, int] = {}
        self.barrier_arrivals: dict[int, int] = {}
        #: BatchWrites behind a QueueBarrier not every queue sent yet: (write_items arguments,
        #: what it waits for), also in the blocker's ``held`` for deadlock reports.
        self.held: list[tuple[tuple, str]] = []
        #: AlltoAllvWrite handles: their meeting key and the copies their Commit sends.
        self.writes: dict[int, tuple[str, list]] = {}
        #: AlltoAllvWrite handles whose copies the sending core's Commit sent.
        self.written: set[int] = set()
        #: Per handle: Task.commit_notes of its task (Commits of non-sending cores).
        self.commit_notes: dict[int, dict] = {}

    def one_sided_task(self, op: HcclCMDType, handle: int, addr: GmAddr, count: int) -> Task:
        """A BatchWrite / AlltoAllvWrite descriptor: no collective slot (``seq`` -1), INT8 bytes."""
        return Task(
            op=op,
            domain=self.group,
            rank=self.rank,
            rank_dim=self.rank_dim,
            handle=handle,
            seq=-1,
            send=addr,
            recv=addr,
            dtype=HcclDataType.HCCL_DATA_TYPE_INT8,
            count=count,
            launch=self.next_launch(),
        )

    def next_launch(self) -> int:
        """The index :meth:`launch_index` gives (or would give) this launch, taking none.

        One-sided tasks carry it: ranks do not match them, so a launch that makes only
        one-sided tasks takes no index (on one rank alone, it would shift every later
        launch's index against its peers' ones).
        """
        if self.launch_idx is not None:
            return self.launch_idx
        return self.rank_ctx.launches[self.group.name]

    def launch_index(self) -> int:
        """This launch's index among the launches of this rank that sent tasks to the domain's
        queue (collectives, which ranks match task by task)."""
        if self.launch_idx is None:
            self.launch_idx = self.rank_ctx.launches[self.group.name]
            self.rank_ctx.launches[self.group.name] += 1
        return self.launch_idx

    def record_wait(self, core: CoreContext, handle: int, round_idx: int) -> None:
        """A core starts waiting; after the sender's Finalize in its own order, it hangs for sure.
        (A launch of one core has no other core to order: nothing to keep.)"""
        if self.launch.alone:
            return
        passed = self.launch.clock(core)
        with self.rank_ctx.blocker.lock:
            finalized = self.finalized_by
            self.waits.append((core, passed, handle, round_idx))
        if finalized is None or core == finalized[0]:
            return
        if self.launch.ordered_before(finalized[0], finalized[1], core):
            self._after_reset(finalized[0], core, handle, round_idx)

    def check_finalize_order(self, core: CoreContext) -> None:
        """The sending core's Finalize resets the finished-turn counters the other cores poll.

        Called where the official ``Finalize<true>`` resets them (after the server
        finished). A Wait of another core not ordered before it by a SyncAll is a
        race (hccl_aicpu_impl.h): a ``finalize-unordered`` warning. A launch of one core has
        none.
        """
        if self.launch.alone:
            return
        with self.rank_ctx.blocker.lock:
            # the calling core's counts: they cannot move while it runs this
            self.finalized_by = (core, now := self.launch.clock(core))
            waits = list(self.waits)
            waits += [(other, passed, h, None) for (other, h), passed in self.queries.items()]
        for other, passed, handle, round_idx in waits:
            if other != core and not self.launch.ordered_before(other, passed, core, now):
                self._warn_unordered(core, other, handle, round_idx)
                return

    def query_read(self, core: CoreContext, handle: int, count: int) -> int:
        """What a Query of ``handle`` on ``core``, not the finalizing one, reads: ``count``, or 0
        once the sending core's Finalize reset the finished-turn counters it reads.

        The reset is certain for a Query ordered after that Finalize (a SyncAll or flag) and a
        race for one that is not (as for a Wait: a ``finalize-unordered`` warning, hardware's
        usual order by default, the seed's choice under a seeded schedule). After a reset the
        Query is a poll of a counter nobody writes again: a loop on it is a deadlock report.
        Before the Finalize each core's latest Query is kept, for the Finalize to judge.
        """
        blocker = self.rank_ctx.blocker
        passed = self.launch.clock(core)
        with blocker.lock:
            finalized = self.finalized_by
            if finalized is None:
                self.queries[(core, handle)] = passed
                return count
            if core == finalized[0]:
                return count
            if self.launch.ordered_before(finalized[0], finalized[1], core):
                self.reset = True
            else:
                self.reset |= blocker.reset_first()
            reset = self.reset
        if not reset:
            self._warn_unordered(finalized[0], core, handle, None)
            return count
        where = f"rank {self.rank_ctx.rank} {core_name(core)}"
        blocker.poll(
            ("reset", self.group.name, handle),
            0,
            lambda: (
                f"{where} polls Query for handle {handle} in domain {self.group.name}, which "
                f"reads 0 forever: {core_name(finalized[0])}'s Finalize reset the "
                f"finished-turn counters it reads; {FIX}"
            ),
            read=lambda: 0,  # nothing writes the counter again
        )
        return 0

    def observe_turn(self, core: CoreContext, handle: int, round_idx: int) -> None:
        """A Wait's round finished: its poll sees the counter unless Finalize reset it first.

        After the sender's Finalize the reset and this poll race; the blocker
        decides which comes first (hardware's usual order by default, the seed's
        choice under a seeded schedule). Once reset, no later Wait sees its turn:
        it hangs and the scheduler's deadlock report names it. A launch of one core has no
        other core's Finalize to race (:meth:`check_finalize_order` keeps none).
        """
        if self.launch.alone:
            return
        blocker = self.rank_ctx.blocker
        with blocker.lock:
            finalized = self.finalized_by
            if finalized is None or core == finalized[0]:
                return
            self.reset |= blocker.reset_first()
            reset = self.reset
        if not reset:
            self._warn_unordered(finalized[0], core, handle, round_idx)
            return
        where = f"rank {self.rank_ctx.rank} {core_name(core)}"
        task = self.tasks[handle].describe()
        blocker.wait_for(
            lambda: False,
            lambda: (
                f"{where} waits for round {round_idx} of handle {handle} {task} in domain "
                f"{self.group.name} forever: {core_name(finalized[0])}'s Finalize reset the "
                f"finished-turn counters before this Wait polled, with no SyncAll() between "
                f"them [finalize-unordered]; {FIX}"
            ),
        )

    def _warn_unordered(
        self, finalizer: CoreContext, waiter: CoreContext, handle: int, round_idx: int | None
    ) -> None:
        """The ``finalize-unordered`` warning, once per launch and domain (``round_idx`` None:
        a Query)."""
        with self.rank_ctx.blocker.lock:
            warned, self.hazard_warned = self.hazard_warned, True
        if warned:
            return
        if round_idx is None:
            call, what = "Query", f"Query of handle {handle}"
            then = "read 0 after the reset (a Query loop then never ends)"
            seen = "read its count"
        else:
            call, what = "Wait", f"Wait for handle {handle} round {round_idx}"
            then, seen = "poll after the reset and hang", "see its turn"
        breach(
            "finalize-unordered",
            f"{core_name(finalizer)}'s Finalize resets the finished-turn counters while no "
            f"SyncAll() orders {core_name(waiter)}'s {what} before it: on hardware that "
            f"{call} may {then} (this run let it {seen} first, as hardware usually "
            f"does); {FIX}",
            None,
            rank=self.rank_ctx.rank,
            domain=self.group.name,
            handle=handle,
            op=self._op(handle),
            round=round_idx,
        )

    def _op(self, handle: int) -> str | None:
        """The op name of ``handle``'s task (None before the sending core prepared it)."""
        task = self.tasks.get(handle)
        return op_name(task.op) if task is not None else None

    def _after_reset(
        self, finalizer: CoreContext, waiter: CoreContext, handle: int, round_idx: int
    ) -> None:
        """A Wait ordered after the sender's Finalize: the reset always comes first, a sure hang."""
        breach(
            "unordered-finalize",
            f"{core_name(waiter)} waits for handle {handle} round {round_idx} after "
            f"{core_name(finalizer)} finalized (a SyncAll or flag orders the Wait after that "
            "Finalize): Finalize reset the finished-turn counters this Wait polls, so on "
            f"hardware it hangs in every schedule; {FIX}",
            rank=self.rank_ctx.rank,
            domain=self.group.name,
            handle=handle,
            op=self._op(handle),
            round=round_idx,
        )

    def task(self, handle: int, core: CoreContext) -> Task:
        """The task the sending core prepared for ``handle`` (waits until it exists)."""
        blocker = self.rank_ctx.blocker
        blocker.wait_for(
            lambda: handle in self.tasks,
            lambda: (
                f"rank {self.rank_ctx.rank} {core_name(core)} waits for the "
                f"sending core to prepare handle {handle} in domain {self.group.name}"
            ),
        )
        return self.tasks[handle]

    def wait_synced(self, core: CoreContext) -> None:
        """Finalize's message follows the InterHcclGroupSync messages: the server reads it
        once every handle they name is prepared (it retries a sync until then)."""
        for dep in self.deps:
            if isinstance(dep, PendingDep):
                self.rank_ctx.blocker.wait_for(
                    lambda dep=dep: dep.task is not None,
                    lambda dep=dep: (
                        f"rank {self.rank_ctx.rank} {core_name(core)}'s Finalize in domain "
                        f"{self.group.name} waits for handle {dep.handle} of domain "
                        f"{dep.domain_name}, which an InterHcclGroupSync names and that "
                        "domain's sending core has not prepared (the server retries the sync "
                        "until it is)"
                    ),
                )

    def polled_task(self, handle: int, core: CoreContext) -> Task | None:
        """The task of ``handle`` if the sending core prepared it, else None after a poll: a
        Query loop on another core is a scheduling point until the sending core prepares it
        (on hardware that core runs meanwhile)."""
        task = self.tasks.get(handle)
        if task is None:
            self.rank_ctx.blocker.poll(
                ("prepared", self.group.name, handle),
                None,
                lambda: (
                    f"rank {self.rank_ctx.rank} {core_name(core)} polls Query for handle "
                    f"{handle} in domain {self.group.name}, which the sending core has not "
                    "prepared"
                ),
                read=lambda: self.tasks.get(handle),
            )
        return task

    def _finish_tasks(self, sender: Sender) -> None:
        """After a Finalize<false>: the launch ends once the server ran every committed round
        (``CommKfcDispatcher::Run`` loops until ``IsAllTaskFinished``), as Finalize<true>
        would have waited for them inside the kernel."""
        for task in sender.queued_tasks():
            self.rank_ctx.server.wait(task, task.repeat - 1)

    def _no_finalize(self) -> str:
        """Why the sending core's missing Finalize leaves the server running."""
        if not self.idle_finalizes or self.sender_core is None:
            return "Finalize() was never called"
        called = ", ".join(sorted({core_name(c) for c in self.idle_finalizes}))
        return (
            f"Finalize() was called on {called} but not on {core_name(self.sender_core)}, the "
            "core that sends the tasks: another core's Finalize sends nothing, so the "
            "server never stops; call Finalize on the sending core"
        )

    def check_exit(self) -> None:
        """Called when the kernel returns: report work the real server would hang on.

        Fewer Waits than rounds is valid (Finalize waits for the rest), and so is
        a core that Waits without committing (its Wait returned -1).
        """
        sender = self.sender
        problems = []
        # a CCU object's Finalize already said why its uncommitted rounds stop (ccu-uncommitted)
        said = sender is not None and sender.ccu and sender.finalized
        for h, info in enumerate(() if said or sender is None else sender.handles):
            if info.commits < info.repeat:
                task = info.task
                problems.append(
                    f"handle {h} ({task.describe() if task else op_name(info.op)}): "
                    f"{info.committed_text(self.rank_dim)} committed"
                    + (task.commit_hint(info.rounds_committed) if task else "")
                )
        if sender is not None and sender.handles and not sender.finalized:
            problems.append(self._no_finalize())
        for write, what in self.held:  # reported here: no later deadlock report names it again
            problems.append(f"{what} (the server holds it)")
            self.rank_ctx.blocker.held.pop(id(write), None)
        if not problems and sender is not None and sender.finalized_async:
            self._finish_tasks(sender)
        if problems:
            breach(
                "unfinished-exit",
                "kernel returned with unfinished work that would leave the server hanging: "
                + "; ".join(problems),
                rank=self.rank_ctx.rank,
                domain=self.group.name,
            )
