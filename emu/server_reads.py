"""Happens-before checks for a BatchWrite's pending copies: bytes the server reads later.

The AI CPU server reads a BatchWrite's item list (at ``batchWriteInfo``) and each
item's source bytes when it runs the task, some time after the call. Under a
schedule that defers the copies (``schedule="late"``, a seeded one, ``explore``)
the emulator leaves them pending; from the call until they land, the item list
and every item's source are marked as read by the server later, in the marks
that the collective buffer check keeps (:mod:`.buffers`): a kernel write of
those bytes in between (any core of the rank) raises
:class:`~hccl_py.core.errors.HcclRaceError` naming the rank, the handle, the
bytes, which item they belong to and both lines. A read of them is no race.
The marks end when the copies land (:mod:`.onesided`), and every pending copy of
a rank lands at the end of its launch, before its host code runs again. With the
default eager schedule the copies land at the call: nothing is marked. A
BatchWrite held behind a QueueBarrier[ALL] is read, and marked, from the last
queue's barrier that releases it (the server reads its message, items and
sources only then); its marks name the BatchWrite's own call. Each mark that
one write meets is judged on its own (:mod:`.findings`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hccl_py.core.errors import HcclRaceError
from hccl_py.core.gm import Allocation, GmAddr
from hccl_py.core.task import Task
from hccl_py.server.remote_writes import Copies
from hccl_py.server.windows import WindowAllocation

from .buffers import BufferRaces
from .findings import Finding, Mark
from .races import user_frame


def _storage(alloc: Allocation | None) -> tuple[int, int] | None:
    """(storage address, first byte in it) of ``alloc``; None for a window never mapped (no
    kernel wrote it) or memory without a storage."""
    if isinstance(alloc, WindowAllocation):
        if not alloc.touched:
            return None
        data = alloc.data
        return data.untyped_storage().data_ptr(), data.storage_offset() * data.element_size()
    return None if alloc is None else alloc.memory


@dataclass(eq=False)
class ItemRead:
    """Bytes of one BatchWrite that the server reads when it runs: ``what`` names them."""

    task: Task
    rank: int
    what: str
    where: str
    order: int = 0
    #: What orders the read before the rank's next accesses (for the warning).
    ordered_by = "the BatchWrite's landing (its Wait, or a flag the receiver sets after it)"
    #: A write of the bytes they hold already (every core's 1.0f status source in the shipping
    #: MoeDistributeCombineSetup) changes nothing the server reads: no race (:mod:`.findings`).
    same_bytes_race = False

    def describe(self) -> str:
        """``BatchWrite handle 2``."""
        return f"BatchWrite handle {self.task.handle}"

    def facts(self) -> dict[str, object]:
        """The read's facts for a report."""
        return {"domain": self.task.domain_name, "handle": self.task.handle, "op": "BatchWrite"}

    def error(self, found: Finding, rank: int, where: str) -> HcclRaceError:
        """The report of ``found``, a write at ``where`` of global rank ``rank``."""
        mark = found.mark
        base = mark.base
        return HcclRaceError(
            f"BatchWrite read race: rank {rank} writes bytes [{found.lo - base}, "
            f"{found.hi - base}) of {mark.alloc.name} ({self.what}) at {where} before the "
            f"copies of {self.describe()}, called at {self.where}, landed: the server reads "
            "these bytes when it runs the BatchWrite, some time after the call, so it may "
            "use the old bytes or the new ones. Rewrite them only after the copies landed "
            "(Wait on the handle, or a flag the receiver sets once the data arrived); see "
            "docs/windows.md#batchwrite",
            rank=rank,
            **self.facts(),
        )

    def unseen(self) -> str:
        """What a numpy view taken now may miss, for the warning (reads never race here)."""
        return f"{self.describe()}, called at {self.where}"


@dataclass(eq=False)
class ServerReads:
    """The marks of one pending BatchWrite in one storage (reads of the server: side send)."""

    entries: list[Mark] = field(default_factory=list)
    side = "send"

    def marks(self) -> list[Mark]:
        """The marked byte ranges of this BatchWrite in this storage."""
        return self.entries


class PendingReads:
    """The item lists and sources of the pending BatchWrites of every rank of one world."""

    def __init__(self, buffers: BufferRaces) -> None:
        self.buffers = buffers
        #: id(copies) of a pending write -> (global rank, its marks by storage).
        self.writes: dict[int, tuple[int, dict[int, ServerReads]]] = {}
        #: id(task) of a BatchWrite held behind a QueueBarrier -> where it was called.
        self.called_at: dict[int, str] = {}

    def mark(self, rank: int, task: Task, copies: Copies, item_size: int) -> None:
        """Global rank ``rank``'s BatchWrite ``task`` left ``copies`` pending: mark its reads,
        named by the BatchWrite's call (a held one's, at its release)."""
        where = self.called_at.pop(id(task), None) or user_frame()
        info = task.send
        spans: list[tuple[GmAddr, int, str]] = []
        if isinstance(info, GmAddr) and item_size:
            spans += [
                (info + k * item_size, item_size, f"item {k} of the item list")
                for k in range(len(copies))
            ]
        spans += [(src, n, f"item {k}'s source") for k, (src, _, n) in enumerate(copies)]
        by_storage: dict[int, ServerReads] = {}
        with self.buffers.lock:
            for addr, nbytes, what in spans:
                alloc = addr.alloc
                memory = _storage(alloc)
                if not nbytes or memory is None or not memory[0]:
                    continue
                reads = by_storage.get(memory[0])
                if reads is None:
                    reads = by_storage[memory[0]] = ServerReads()
                    self.buffers.pending[rank].setdefault(memory[0], []).append(reads)
                owner = ItemRead(task, rank, what, where, next(self.buffers.sequence))
                lo = addr.offset
                reads.entries.append(Mark(owner, "send", alloc, memory[1], [lo], [lo + nbytes]))
            if by_storage:
                self.writes[id(copies)] = (rank, by_storage)

    def landed(self, copies: Copies) -> None:
        """``copies`` landed: the server read what it reads; drop their marks."""
        if id(copies) not in self.writes:  # unlocked peek: most writes mark nothing
            return
        with self.buffers.lock:
            rank, by_storage = self.writes.pop(id(copies))
            index = self.buffers.pending[rank]
            for storage, reads in by_storage.items():
                left = [m for m in index.get(storage, ()) if m is not reads]
                if left:
                    index[storage] = left
                else:
                    index.pop(storage, None)
