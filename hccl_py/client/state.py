"""Per-launch client state: what the Hccl objects of all cores of one launch share.

Handles and tasks per context, the sending core, InterHcclGroupSync
dependencies, and the SyncAll ordering between other cores' Waits and the
sending core's Finalize; at kernel exit, the check for work the real server
would hang on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from ..core.constants import HcclCMDType, HcclDataType
from ..core.gm import GmAddr
from ..core.task import Task, op_name
from ..kernel.cores import CoreContext, HcclContext, KernelCoreType
from ..ops import OPS
from .failures import breach


@dataclass
class Handle:
    """One handle as seen by one core's Hccl object."""

    op: HcclCMDType
    repeat: int
    kind: KernelCoreType
    commits: int = 0
    waits: int = 0
    task: Task | None = None
    #: Fine-grained AlltoAllV (tiling stepSize > 0): steps per Commit/Wait, steps counted,
    #: and the next slice Iterate hands out.
    step_size: int = 0
    steps_committed: int = 0
    steps_waited: int = 0
    slice: int = 0

    @property
    def lifecycle(self) -> str:
        """How Commit, Wait, Query and Finalize treat it (``client.lifecycles.LIFECYCLES``)."""
        return "fine-grained" if self.step_size else OPS[self.op].lifecycle


class Sender(Protocol):
    """What the launch needs of the sending core's Hccl object (its ``Binding`` has it)."""

    handles: list[Handle]
    finalized: bool


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
        self.prepare_kinds: set[KernelCoreType] = set()
        self.sender: Sender | None = None
        self.sender_core: CoreContext | None = None
        self.deps: list[Task] = []
        self.launch_idx: int | None = None
        self.waits: list[tuple[CoreContext, dict[bool, int], int, int]] = []
        self.finalized_by: tuple[CoreContext, dict[bool, int]] | None = None
        #: AlltoAllvWrite handles: their meeting key and the copies their Commit sends.
        self.writes: dict[int, tuple[str, list]] = {}
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
            launch=self.launch_index(),
        )

    def launch_index(self) -> int:
        """This launch's index among the launches of this rank that sent tasks to the domain."""
        if self.launch_idx is None:
            self.launch_idx = self.rank_ctx.launches[self.group.name]
            self.rank_ctx.launches[self.group.name] += 1
        return self.launch_idx

    def record_wait(self, core: CoreContext, handle: int, round_idx: int) -> None:
        """A core starts waiting: it must be ordered before the sender's Finalize by a SyncAll."""
        passed = self.launch.barriers_passed(core)
        with self.rank_ctx.blocker.cond:
            finalized = self.finalized_by
            self.waits.append((core, passed, handle, round_idx))
        if finalized is not None and core != finalized[0]:
            self._unordered(finalized[0], core, handle, round_idx, "already finalized")

    def check_finalize_order(self, core: CoreContext) -> None:
        """The sending core finalizes: every other core's Waits must come before it (SyncAll)."""
        with self.rank_ctx.blocker.cond:
            self.finalized_by = (core, self.launch.barriers_passed(core))
            waits = list(self.waits)
        for other, passed, handle, round_idx in waits:
            if other != core and not self.launch.ordered_before(other, passed, core):
                self._unordered(core, other, handle, round_idx, "finalizes")

    def _unordered(
        self, finalizer: CoreContext, waiter: CoreContext, handle: int, round_idx: int, verb: str
    ) -> None:
        breach(
            "unordered-finalize",
            f"{finalizer.kind.name} core {finalizer.block_idx} {verb} while "
            f"{waiter.kind.name} core {waiter.block_idx} waits for handle {handle} round "
            f"{round_idx}: no SyncAll() separates that Wait from Finalize. Finalize resets "
            "the finish counters the other cores poll, so on hardware they may hang; call "
            "SyncAll() after the last Wait of every core and before Finalize",
            rank=self.rank_ctx.rank,
            domain=self.group.name,
            handle=handle,
            round=round_idx,
        )

    def task(self, handle: int, core: CoreContext) -> Task:
        """The task the sending core prepared for ``handle`` (waits until it exists)."""
        blocker = self.rank_ctx.blocker
        blocker.wait_for(
            lambda: handle in self.tasks,
            lambda: (
                f"rank {self.rank_ctx.rank} {core.kind.name} core {core.block_idx} waits for the "
                f"sending core to prepare handle {handle} in domain {self.group.name}"
            ),
        )
        return self.tasks[handle]

    def check_exit(self) -> None:
        """Called when the kernel returns: report work the real server would hang on.

        Fewer Waits than rounds is valid (Finalize waits for the rest), and so is
        a core that Waits without committing (its Wait returned -1).
        """
        sender = self.sender
        problems = []
        for h, info in enumerate(sender.handles if sender else ()):
            if info.commits < info.repeat:
                problems.append(
                    f"handle {h} ({info.task.describe() if info.task else op_name(info.op)}): "
                    f"{info.commits} of {info.repeat} rounds committed"
                )
        if sender is not None and sender.handles and not sender.finalized:
            problems.append("Finalize() was never called")
        if problems:
            breach(
                "unfinished-exit",
                "kernel returned with unfinished work that would leave the server hanging: "
                + "; ".join(problems),
                rank=self.rank_ctx.rank,
                domain=self.group.name,
            )
