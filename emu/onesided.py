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

from hccl_py.core.task import Task
from hccl_py.server.blocking import Job
from hccl_py.server.windows import WindowAllocation

from .races import WindowRaces, user_frame
from .rendezvous import Rendezvous

Copies = list[tuple[object, object, int]]


def run_copies(copies: Copies) -> None:
    """Copy each (source, destination, bytes) in order, as the server does."""
    for src, dst, nbytes in copies:
        dst.bytes_view(nbytes).copy_(src.bytes_view(nbytes))


class OneSidedWrites:
    """Mixin for the emulated world: the one-sided copies of BatchWrite."""

    races: WindowRaces | None
    exchanges: Rendezvous

    def _pending_writes(self) -> list[tuple[Task, Copies]]:
        """Under the lock: BatchWrites not run yet, and those running now (until they are done)."""
        return self.__dict__.setdefault("_writes", [])

    def _running_writes(self) -> list[tuple[Task, Copies]]:
        return self.__dict__.setdefault("_running", [])

    def write_items(self, task: Task, copies: Copies) -> None:
        """Run one BatchWrite now (eager) or leave it to the scheduler (late, seeded)."""
        races = self.races
        if races is not None:
            rank, where = task.domain.ranks[task.rank], user_frame()
            self.__dict__.setdefault("_writers", {})[(task.domain_name, task.rank)] = rank
            clocks = races.batch_clocks(rank, len(copies))
            for (_, dst, nbytes), clock in zip(copies, clocks, strict=True):
                if isinstance(dst.alloc, WindowAllocation):
                    runs = [(dst.offset, dst.offset + nbytes)]
                    races.write(rank, dst.alloc, runs, nbytes, clock, where)
        if not self.blocker.defers():
            run_copies(copies)
            return
        with self.blocker.cond:
            if self.config.poison:
                for _, dst, nbytes in copies:
                    dst.bytes_view(nbytes).fill_(0xFF)
            self._pending_writes().append((task, copies))
            self.blocker.progressed()

    def flush_writes(self, domain: str | None = None, rank: int | None = None) -> None:
        """Run the pending BatchWrites of domain rank ``rank`` (all of them without arguments)."""
        with self.blocker.cond:
            pending = self._pending_writes()
            mine = [
                w
                for w in pending
                if domain is None or (w[0].domain_name == domain and w[0].rank == rank)
            ]
            for w in mine:
                pending.remove(w)
            self._running_writes().extend(mine)
        for _, copies in mine:
            run_copies(copies)
        with self.blocker.cond:
            for w in mine:
                self._running_writes().remove(w)
            self.blocker.progressed()

        def elsewhere() -> bool:
            return any(
                domain is None or (t.domain_name == domain and t.rank == rank)
                for t, _ in self._running_writes()
            )

        # a copy of this rank that another thread is running right now must land first
        self.blocker.wait_for(lambda: not elsewhere(), "a BatchWrite's copies finish")
        writer = self.__dict__.get("_writers", {}).get((domain, rank))
        if self.races is not None and writer is not None:
            self.races.landed(writer)

    def _write_job(self) -> Job | None:
        """Under the lock: the oldest pending BatchWrite as a job, or None."""
        pending = self._pending_writes()
        if not pending:
            return None
        write = pending.pop(0)
        self._running_writes().append(write)
        return functools.partial(self._run_write, write)

    def _run_write(self, write: tuple[Task, Copies]) -> None:
        run_copies(write[1])
        with self.blocker.cond:
            self._running_writes().remove(write)
            self.blocker.progressed()

    def rendezvous(self, group, rank: int, key: str, what: str) -> None:
        """Block until every rank of ``group`` arrived at ``key`` and their copies landed."""
        name = group.name

        def landed() -> bool:
            writes = self._pending_writes() + self._running_writes()
            return not any(w[0].domain_name == name for w in writes)

        def why(missing: list[int]) -> str:
            gone = sorted(getattr(self, "returned", ()))
            note = f" (ranks {gone} returned from their function)" if gone else ""
            if missing:
                return f"{what}: ranks {missing} have not made their AlltoAllvWrite{note}"
            return f"{what}: the copies of the other ranks are still pending"

        self.exchanges.meet(group, rank, ("AlltoAllvWrite", key), why, also=landed)
        if self.races is not None:  # every rank's copies into this window landed
            self.races.landed(group.ranks[rank], group.ranks)
