"""Races in communication windows: reads that no flag or Wait orders after a peer's write.

Active with ``hp.run(..., poison=True)`` on the emulator. Every read and write
of window bytes by a kernel (seen by :mod:`.watch`) or by a BatchWrite is
checked against a vector clock per rank, in the manner of a thread sanitizer:

- **Release and acquire.** Every write releases (it carries its rank's clock),
  a Commit releases and the Wait (or Query) of that round acquires every
  committing rank's clock, as do AlltoAllvWrite's Wait and a framework
  collective. A **flag** is an access of at most :data:`FLAG_BYTES` bytes: a
  read of at most that many bytes, or of bytes that a write of at most that
  many bytes left (not an AlltoAllvWrite's copy: :data:`DATA_CALLS`), acquires
  the writer's clock. So a receiver that polls the
  flag its sender wrote after the data is ordered after the data.
- **Early read.** A larger read of bytes that a peer wrote (or that the
  reader's own BatchWrite or Hcomm channel lands, after the call), not ordered
  after that write, sees 0xFF in those bytes (the data "has not arrived"). The
  same core reading some of them again is a poll: it sees the data and is ordered
  after the write. A kernel that returns without that second look read data that
  may not have arrived: an :class:`~hccl_py.core.errors.HcclRaceError` when its
  kernel returns, or when it fails before (with the failure as its cause).
- **Stale read.** A peer's write over bytes that a rank read, with nothing
  ordering the read before the write, means the read may have seen either
  value: reported when the reader's kernel returns, unless it read them again
  (a poll that saw the new value); where its kernel already returned, when the
  writer's kernel returns.

Writes of other ranks over each other (atomic adds in combine kernels) are not
reported: every finding is a read that the program does not order. A rank that
holds a numpy view of window bytes (``t.numpy()`` kept in a variable) may poll
through it unseen: its findings are only an ``HcclWarning`` ("window-race")
while such a view lives, so a report is never false.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import CodeType

import torch

from hccl_py.core import report
from hccl_py.core.errors import (
    HcclDeadlockError,
    HcclPeerError,
    HcclRaceError,
    HcclTimeoutError,
    WorldError,
)
from hccl_py.core.report import PACKAGE_DIR
from hccl_py.kernel.context import core_name, current_core_context
from hccl_py.server.windows import POLL_BYTES, WindowAllocation

from .intervals import IntervalMap, Runs
from .race_reports import Finding, Write, blind_text, race_error
from .views import HeldViews

#: Reads and writes of at most this many bytes are flags (the size of a flag poll).
FLAG_BYTES = POLL_BYTES
#: Posting calls whose copies are data of any size, never a flag (their Wait orders them).
DATA_CALLS = frozenset({"AlltoAllvWrite"})

#: A kernel's failures that 0xFF data cannot have caused: they stay as they are.
_NOT_CAUSED = (HcclRaceError, HcclPeerError, HcclDeadlockError, HcclTimeoutError, WorldError)

#: Code of these packages is never "where" a kernel read or wrote.
_SKIP = (*(os.path.dirname(path) + os.sep for path in (torch.__file__, __file__)), PACKAGE_DIR)


#: Files of torch and hccl_py met by :func:`user_frame` (a string's hash is kept in it, so a
#: frame costs one lookup; a code object's hash is computed over its constants each time).
_SKIPPED_FILES: set[str] = set()
#: The other files it met (a kernel's, at every Commit): found in one lookup too.
_USER_FILES: set[str] = set()


def user_frame() -> str:
    """``file.py:line (function)`` of the innermost caller outside torch and hccl_py."""
    return place_text(user_place())


def user_place() -> tuple[CodeType, int] | None:
    """The code and line of :func:`user_frame`, its text made only when a report asks."""
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if filename in _USER_FILES:
            return frame.f_code, frame.f_lineno
        if filename not in _SKIPPED_FILES:
            if not filename.startswith(_SKIP):
                _USER_FILES.add(filename)
                return frame.f_code, frame.f_lineno
            _SKIPPED_FILES.add(filename)
        frame = frame.f_back
    return None


def looker() -> tuple | None:
    """The core making the current access (kind, block index), None outside a kernel: a poll
    is one core reading the same bytes again, not two cores reading them once each."""
    core = current_core_context()
    return None if core is None else (core.kind, core.block_idx)


def accessor(rank: int) -> str:
    """Who makes the current access, as a report names it: ``rank 0``, and in a kernel of
    several cores the core too (``rank 0 AIV core 1``)."""
    core = current_core_context()
    if core is None or core.launch.alone:
        return f"rank {rank}"
    return f"rank {rank} {core_name(core)}"


def place_text(place: tuple[CodeType, int] | None) -> str:
    """A :func:`user_place` as :func:`user_frame` writes it."""
    if place is None:
        return "an unknown place"
    code, line = place
    return f"{os.path.basename(code.co_filename)}:{line} ({code.co_name})"


@dataclass(frozen=True)
class Read:
    """One rank's last (non-flag) read of some window bytes."""

    epoch: int
    where: str
    launch: int
    #: The core that read (:func:`looker`): only its own second look is a poll.
    core: tuple | None = None


class WindowRaces:
    """The clocks and the access history of the windows of one emulated world."""

    def __init__(self, world_size: int) -> None:
        #: Held across a watched operation too (re-entered by its read and write records).
        self.lock = threading.RLock()
        self.n = world_size
        #: One clock per rank, then one per rank's first BatchWrite queue (its copies land after
        #: the call, unordered with what the rank does next); later queues get theirs when used.
        size = 2 * world_size
        self.clocks = [[int(r == q and r < world_size) for q in range(size)] for r in range(size)]
        #: Hcomm channel -> its clock component; per rank, BatchWrite queue -> its component;
        #: per queue component, its last post's clock per QueueBarrier epoch, latest post last
        self.agents: dict[object, int] = {}
        self.queues: dict[int, dict[tuple, int]] = {}
        self.posts: dict[int, dict[int, tuple[int, ...]]] = {}
        #: storage address -> window, for the accesses that :mod:`.watch` sees
        self.windows: dict[int, WindowAllocation] = {}
        self.writes: dict[WindowAllocation, IntervalMap] = {}
        self.reads: dict[WindowAllocation, IntervalMap] = {}
        #: (reader, write seq, core) -> the byte ranges of that write the core looked at unordered
        self.seen: dict[tuple[int, int, tuple | None], list[tuple[int, int]]] = {}
        self.findings: dict[tuple[int, int], Finding] = {}
        #: Bumped by every write (its ``seq``); a rank's last flag read: (window, runs, version)
        self.version = 0
        self.last_flag: list[tuple | None] = [None] * world_size
        self.launches = [0] * world_size
        self.in_kernel = [0] * world_size  # kernels running (framework ops may overlap)
        self.held = HeldViews(self)

    def mapped(self, window: WindowAllocation) -> None:
        """``window``'s memory exists now: watch accesses to it."""
        with self.lock:
            self.windows[window.data.untyped_storage().data_ptr()] = window

    # ------------------------------------------------------------------ clocks
    def release(self, rank: int) -> tuple[int, ...]:
        """Rank ``rank``'s clock now (what an acquirer learns); its later events count after it."""
        with self.lock:
            return self._release(rank)

    def _release(self, rank: int) -> tuple[int, ...]:
        clock = self.clocks[rank]
        snapshot = tuple(clock)
        clock[rank] += 1
        return snapshot

    def acquire(self, rank: int, clocks: Iterable[tuple[int, ...] | None]) -> None:
        """Rank ``rank`` is ordered after everything the ``clocks`` (releases) saw."""
        with self.lock:
            for clock in clocks:
                if clock is not None:
                    self._join(rank, clock)

    def channel_agent(self, key: object) -> int:
        """The clock component of Hcomm channel ``key``: its writes land in order, after the call."""
        with self.lock:
            if key not in self.agents:
                self.agents[key] = self._new_agent()
            return self.agents[key]

    def _new_agent(self) -> int:  # under the lock: one more clock component
        agent = len(self.clocks)
        for clock in self.clocks:
            clock.append(0)
        self.clocks.append([0] * (agent + 1))
        return agent

    def queue_agent(self, rank: int, queue: tuple) -> int:
        """The clock component of BatchWrite ``queue`` (domain, domain rank, context, queue) of
        ``rank``: one queue's copies land in order, two queues' in either order."""
        with self.lock:
            agents = self.queues.setdefault(rank, {})
            if queue not in agents:
                agents[queue] = self._new_agent() if agents else self.n + rank
            return agents[queue]

    def batch_clocks(
        self, rank: int, n_items: int, agent: int, queue: tuple | None = None, epoch: int = 0
    ) -> list[tuple[int, ...]]:
        """The clocks of ``n_items`` copies that ``rank`` posts now on ``agent``; a BatchWrite
        ``queue``'s, behind ``epoch`` QueueBarriers, follow its context's earlier epochs."""
        with self.lock:
            self._join(agent, self._release(rank))
            for other, at in self.queues.get(rank, {}).items() if queue else ():
                below = [c for e, c in self.posts.get(at, {}).items() if e < epoch]
                if other[:3] == queue[:3] and at != agent and below:
                    self._join(agent, below[-1])
            clocks = []
            for _ in range(n_items):
                self.clocks[agent][agent] += 1
                clocks.append(tuple(self.clocks[agent]))
            if queue and clocks:  # each epoch's latest post, in posting order
                self.posts.setdefault(agent, {}).pop(epoch, None)
                self.posts[agent][epoch] = clocks[-1]
            return clocks

    def drained(self, rank: int, agent: int) -> None:
        """Rank ``rank`` knows that every copy of ``agent`` (an Hcomm channel) landed."""
        with self.lock:
            self._join(rank, tuple(self.clocks[agent]))

    def landed(self, rank: int, writers: Iterable[int] | None = None) -> None:
        """Rank ``rank`` knows that the BatchWrites of ``writers`` (default: its own) landed."""
        with self.lock:
            for writer in (rank,) if writers is None else writers:
                for agent in self.queues.get(writer, {}).values() or (self.n + writer,):
                    self._join(rank, tuple(self.clocks[agent]))

    def _join(self, rank: int, clock: tuple[int, ...]) -> None:
        mine = self.clocks[rank]
        for q, value in enumerate(clock):
            if value > mine[q]:
                mine[q] = value

    # ---------------------------------------------------------------- accesses
    def unseen_write(
        self, rank: int, window: WindowAllocation, runs: Runs, since: int, where: str
    ) -> None:
        """``runs`` changed under a numpy view of rank ``rank`` since write version ``since``.

        The bytes that no write recorded since then explains were written by
        ``rank`` through the view: record them as its write, now.
        """
        with self.lock:
            left = IntervalMap()
            for lo, hi in runs:
                left.assign(lo, hi, True)
            for lo, hi, w in self._pieces(window, runs):
                if w.seq > since:
                    left.assign(lo, hi, None)
            mine = [(lo, hi) for lo, hi, _ in left.overlapping(runs[0][0], runs[-1][1])]
            if mine:
                nbytes = sum(hi - lo for lo, hi in mine)
                self.write(rank, window, mine, nbytes, where=where)

    def _pieces(self, window: WindowAllocation, runs: Runs) -> list[tuple[int, int, Write]]:
        """The recorded writes of ``runs`` of ``window``, clipped."""
        writes = self.writes.get(window)
        return [p for r in runs for p in writes.overlapping(*r)] if writes else []

    def read(self, rank: int, window: WindowAllocation, runs: Runs, nbytes: int) -> Runs:
        """Rank ``rank`` reads ``runs`` of ``window``; returns the ranges that must read 0xFF."""
        with self.lock:
            self.held.settle(window, runs, rank)
            flag = nbytes <= FLAG_BYTES
            look = (window, tuple(runs), self.version) if flag else None
            if flag and self.last_flag[rank] == look:
                return []  # a poll that nothing was written for since the last one learns nothing
            # a rank's own writes are program-ordered, but not what its Hcomm channel or its
            # BatchWrite queue lands for it later (a ReadNbi's destination, an item towards
            # its own window): those count like a peer's
            pieces = [p for p in self._pieces(window, runs) if p[2].agent != rank]
            if flag:  # a poll, but of data only where a data call (AlltoAllvWrite) wrote it
                data = [p for p in pieces if p[2].call in DATA_CALLS]
                for _, _, w in pieces:
                    if w.call not in DATA_CALLS:
                        self._join(rank, w.clock)
                if not data:
                    self.last_flag[rank] = look
                    return []
                pieces, runs = data, [(lo, hi) for lo, hi, _ in data]
            for _, _, w in pieces:
                if w.flag:
                    self._join(rank, w.clock)
            where, core = user_frame(), looker()
            poison: Runs = []
            first: dict[tuple[int, int], list[tuple[int, int]]] = {}
            mine = self.clocks[rank]
            blind = self.held.blind(rank)
            for lo, hi, w in pieces:
                key = (rank, w.seq)
                if w.flag or w.epoch <= mine[w.agent]:
                    if key not in first:  # a look ordered after the write: it saw the data
                        self.findings.pop(key, None)
                    continue
                if key not in first and self._looked((*key, core), lo, hi):
                    self._join(rank, w.clock)  # a second look at these bytes: they have arrived
                    self.findings.pop(key, None)
                    continue
                first.setdefault(key, []).append((lo, hi))
                if not blind:  # a poll through a numpy view may have ordered it: no 0xFF
                    poison.append((lo, hi))
                self._note(key, Finding(True, rank, w, window, lo, hi, where, blind=blind))
            for key, ranges in first.items():
                self.seen.setdefault((*key, core), []).extend(ranges)
            record = Read(mine[rank], where, self.launches[rank], core)
            reads = self.reads.setdefault(window, IntervalMap())
            for lo, hi in runs:
                reads.update(lo, hi, lambda old, r=record: {**(old or {}), rank: r})
            return poison

    def write(
        self,
        rank: int,
        window: WindowAllocation,
        runs: Runs,
        nbytes: int,
        clock: tuple[int, ...] | None = None,
        where: str | None = None,
        agent: int | None = None,
        call: str = "",
    ) -> None:
        """Rank ``rank`` wrote ``runs`` of ``window`` (a posted copy passes its queue's clock,
        the ``call`` that posted it and, for an Hcomm channel, its ``agent``)."""
        where = user_frame() if where is None else where
        if agent is None:
            agent = rank if clock is None else self.n + rank
        with self.lock:
            if clock is None:
                clock = self._release(rank)
            self.version += 1
            hcomm = agent in self.agents.values()
            flag = nbytes <= FLAG_BYTES and call not in DATA_CALLS
            w = Write(rank, clock, self.version, where, flag, agent, hcomm, call)
            reads = self.reads.get(window)
            for lo, hi in runs:
                if reads is not None:
                    if not w.flag:
                        self._stale(w, window, reads.overlapping(lo, hi))
                    reads.assign(lo, hi, None)
                self.writes.setdefault(window, IntervalMap()).assign(lo, hi, w)

    def _stale(self, w: Write, window: WindowAllocation, pieces: Iterator) -> None:
        """Reads of other ranks that nothing orders before write ``w``: findings."""
        for lo, hi, readers in pieces:
            for q, r in readers.items():
                if q == w.rank or r.epoch <= w.clock[q]:
                    continue
                key = (q, w.seq)
                self.seen.setdefault((*key, r.core), []).append((lo, hi))
                orphan = self.in_kernel[q] == 0 or r.launch != self.launches[q]
                blind = self.held.blind(w.rank)
                self._note(key, Finding(False, q, w, window, lo, hi, r.where, orphan, blind))

    def _ended(self, rank: int) -> list[Finding]:
        """A kernel of ``rank`` ended: the findings it reports (its reads', and those of readers
        whose kernel had returned before its write)."""
        with self.lock:
            self.in_kernel[rank] -= 1
            due = [
                key
                for key, f in self.findings.items()
                if (f.reader == rank and not f.orphan) or (f.orphan and f.write.rank == rank)
            ]
            return [self.findings.pop(key) for key in due]

    def _looked(self, key: tuple[int, int, tuple | None], lo: int, hi: int) -> bool:
        """Whether the reading core of ``key`` looked at some of bytes [lo, hi) of its write
        before (a poll reads the same bytes again; other bytes may not have arrived)."""
        return any(a < hi and lo < b for a, b in self.seen.get(key, ()))

    def _note(self, key: tuple[int, int], finding: Finding) -> None:
        """Keep ``finding``, merged with one of the same reader and write."""
        old = self.findings.get(key)
        if old is None:
            self.findings[key] = finding
        else:
            old.lo, old.hi = min(old.lo, finding.lo), max(old.hi, finding.hi)

    # ----------------------------------------------------------------- kernels
    @contextmanager
    def kernel(self, rank: int) -> Iterator[None]:
        """A kernel launch of ``rank``; on a normal return, raise what it left unordered, and where
        it failed after an early read (which saw 0xFF), that read, with the failure as its
        cause: a crash on data that had not arrived points at the missing ordering."""
        with self.lock:
            self.launches[rank] += 1
            self.in_kernel[rank] += 1
        try:
            yield
        except BaseException as failed:
            found = self._ended(rank)
            if isinstance(failed, Exception) and not isinstance(failed, _NOT_CAUSED):
                poisoned = [f for f in found if f.early and f.reader == rank and not f.blind]
                if poisoned:
                    raise race_error(rank, poisoned, failed) from failed
            raise
        found = self._ended(rank)
        for f in (f for f in found if f.blind):
            report.warn("window-race", blind_text(f), rank=rank)
        found = [f for f in found if not f.blind]
        if found:
            raise race_error(rank, found)
