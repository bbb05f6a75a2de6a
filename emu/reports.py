"""The emulated server's reports: why a round has not run, and the state of the world.

A part of :class:`~.world.EmuWorld`, kept apart so that the server's logic
and the texts that explain it stay readable; it reads the world's task board
through :class:`SlotState`, and every method runs under the world's lock.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Protocol

from hccl_py.core.task import Task
from hccl_py.server.agreement import wait_head
from hccl_py.server.ordering import sync_text
from hccl_py.server.positions import Position
from hccl_py.server.task_queue import TaskBoard

from .slot import Slot

#: How many unfinished slots a report of the world's state lists.
STATE_LINES = 12
#: How far a wait-for description follows a chain of blocked tasks.
CHAIN_DEPTH = 3


def returned_note(returned: Collection[int]) -> str:
    """`` (ranks [..] returned from their function)`` where some did, else ""."""
    gone = sorted(returned)
    return f" (ranks {gone} returned from their function)" if gone else ""


class SlotState(Protocol):
    """What the reports read of the world (:class:`~.world.EmuWorld`)."""

    #: The domain task queues, and the global ranks that returned from their function.
    board: TaskBoard
    returned: set[int]


class WorldReports:
    """Texts about the slots of an :class:`~.world.EmuWorld`."""

    def __init__(self, world: SlotState) -> None:
        self.world = world

    def describe_wait(self, slot: Slot, task: Task, round_idx: int, verb: str = "waits for") -> str:
        """Under the lock: ``rank R waits for round r of ...: why``."""
        return f"{wait_head(task, round_idx, verb)}: {self._why(slot, round_idx, CHAIN_DEPTH)}"

    def _why(self, slot: Slot, round_idx: int, depth: int) -> str:
        """Under the lock: why round ``round_idx`` of ``slot`` has not run."""
        why = self.world.board.why(slot, round_idx)
        ranks = slot.sample().domain.ranks
        if why.kind == "failed":
            return f"failed: {why.error.reason}"
        if why.kind == "not submitted":
            return self._missing(f"ranks {[ranks[r] for r in why.ranks]}", "prepared this task")
        if why.kind == "not committed":
            return self._missing(
                f"ranks {[ranks[r] for r in why.ranks]}", f"committed round {round_idx}"
            )
        if why.kind == "earlier round":
            return f"round {slot.done} has to run first"
        if why.kind == "earlier task":
            previous = why.position
            what = previous.sample()
            text = (
                f"the server runs the tasks of a domain in Prepare order and task "
                f"#{previous.seq} (handle {what.handle}, {what.describe()}) has not finished"
            )
            return self._chain(text, previous, depth)
        if why.kind == "dependency":
            dep = why.dep if why.position is None else why.position.sample()
            return self._chain(sync_text(dep), why.position, depth)
        return why.kind

    def _chain(self, text: str, blocker: Position | None, depth: int) -> str:
        if depth <= 1 or blocker is None:
            return text
        return f"{text}; that task: {self._why(blocker, blocker.done, depth - 1)}"

    def _missing(self, who: str, what: str) -> str:
        return f"{who} have not {what}{returned_note(self.world.returned)}"

    def describe_world(self) -> str:
        """Under the lock: one line per unfinished slot, oldest first."""
        slots = self.world.board.unfinished()
        lines = []
        for slot in slots[:STATE_LINES]:
            ranks = slot.sample().domain.ranks
            committed = dict(sorted((ranks[r], slot.committed.get(r, 0)) for r in slot.tasks))
            lines.append(
                f"  - domain {slot.domain} task #{slot.seq} {slot.sample().describe()}: "
                f"prepared by ranks {sorted(ranks[r] for r in slot.tasks)} of {list(ranks)}, "
                f"rounds committed per rank {committed}, {slot.done} round(s) finished"
            )
        if len(slots) > STATE_LINES:
            lines.append(f"  - ... and {len(slots) - STATE_LINES} more")
        return "Unfinished tasks:\n" + "\n".join(lines) if lines else ""
