"""BatchWrite on the emulator: at once, or when the scheduler runs them.

With the default eager schedule the copies of a BatchWrite run in the preparing
runner, at Prepare. With ``schedule="late"`` they wait until no runner of the
world can go on (every one waits or polls a flag nobody changed), like the
rounds of a collective; a seeded schedule runs them somewhere in between; and with ``poison=True`` their destination bytes read 0xFF until
then: a kernel that reads a window before the flag that announces the data
sees the poison instead of data that arrived by chance.
"""

from __future__ import annotations

import functools
from collections.abc import Collection

from hccl_py.core.group import Group
from hccl_py.core.task import Task
from hccl_py.server.blocking import Blocker, Job
from hccl_py.server.windows import WindowAllocation

from .races import WindowRaces, user_frame
from .rendezvous import Rendezvous
from .reports import returned_note

Copies = list[tuple[object, object, int]]


def run_copies(copies: Copies) -> None:
    """Copy each (source, destination, bytes) in order, as the server does."""
    for src, dst, nbytes in copies:
        dst.bytes_view(nbytes).copy_(src.bytes_view(nbytes))


class OneSidedWrites:
    """The one-sided copies of BatchWrite and AlltoAllvWrite in an emulated world.

    The world builds one with its scheduler (``blocker``), its race check
    (``races``, None without ``poison``), its meetings and the set of global
    ranks that returned from their function (read in reports); it takes a
    pending write as a job with :meth:`job`.
    """

    def __init__(
        self,
        blocker: Blocker,
        races: WindowRaces | None,
        poison: bool,
        meetings: Rendezvous,
        returned: Collection[int],
    ) -> None:
        self.blocker = blocker
        self.races = races
        self.poison = poison
        self.meetings = meetings
        self.returned = returned
        #: Under the lock: BatchWrites not run yet, and those running now (until they are done).
        self.pending: list[tuple[Task, Copies]] = []
        self.running: list[tuple[Task, Copies]] = []
        #: (domain, domain rank) -> global rank, of every rank that wrote (for the race check).
        self.writers: dict[tuple[str, int], int] = {}

    def write_items(self, task: Task, copies: Copies) -> None:
        """Run one BatchWrite now (eager) or leave it to the scheduler (late, seeded)."""
        races = self.races
        if races is not None:
            rank, where = task.domain.ranks[task.rank], user_frame()
            self.writers[(task.domain_name, task.rank)] = rank
            clocks = races.batch_clocks(rank, len(copies))
            for (_, dst, nbytes), clock in zip(copies, clocks, strict=True):
                if isinstance(dst.alloc, WindowAllocation):
                    runs = [(dst.offset, dst.offset + nbytes)]
                    races.write(rank, dst.alloc, runs, nbytes, clock, where)
        if not self.blocker.defers():
            run_copies(copies)
            return
        with self.blocker.cond:
            if self.poison:
                for _, dst, nbytes in copies:
                    dst.bytes_view(nbytes).fill_(0xFF)
            self.pending.append((task, copies))
            self.blocker.progressed()

    def flush(self, domain: str | None = None, rank: int | None = None) -> None:
        """Run the pending BatchWrites of domain rank ``rank`` (all of them without arguments)."""
        with self.blocker.cond:
            mine = [
                w
                for w in self.pending
                if domain is None or (w[0].domain_name == domain and w[0].rank == rank)
            ]
            for w in mine:
                self.pending.remove(w)
            self.running.extend(mine)
        for _, copies in mine:
            run_copies(copies)
        with self.blocker.cond:
            for w in mine:
                self.running.remove(w)
            self.blocker.progressed()

        def elsewhere() -> bool:
            return any(
                domain is None or (t.domain_name == domain and t.rank == rank)
                for t, _ in self.running
            )

        # a copy of this rank that another thread is running right now must land first
        self.blocker.wait_for(lambda: not elsewhere(), "a BatchWrite's copies finish")
        writer = self.writers.get((domain, rank))
        if self.races is not None and writer is not None:
            self.races.landed(writer)

    def job(self) -> Job | None:
        """Under the lock: the oldest pending BatchWrite as a job, or None."""
        if not self.pending:
            return None
        write = self.pending.pop(0)
        self.running.append(write)
        return functools.partial(self._run, write)

    def _run(self, write: tuple[Task, Copies]) -> None:
        run_copies(write[1])
        with self.blocker.cond:
            self.running.remove(write)
            self.blocker.progressed()

    def meet(self, group: Group, rank: int, key: str, what: str, payload: bytes) -> list[bytes]:
        """Block until every rank of ``group`` arrived at ``key`` and their copies landed."""
        name = group.name

        def landed() -> bool:
            return not any(w[0].domain_name == name for w in self.pending + self.running)

        def why(missing: list[int]) -> str:
            if missing:
                note = returned_note(self.returned)
                return f"{what}: ranks {missing} have not made their AlltoAllvWrite{note}"
            return f"{what}: the copies of the other ranks are still pending"

        arrived = self.meetings.meet(group, rank, ("AlltoAllvWrite", key), why, payload, landed)
        if self.races is not None:  # every rank's copies into this window landed
            self.races.landed(group.ranks[rank], group.ranks)
        return arrived
