"""BatchWrite and Hcomm writes on the emulator: at once, or when the scheduler runs them.

With the default eager schedule the copies of a BatchWrite run in the preparing
runner, at Prepare. With ``schedule="late"`` they wait until no runner of the
world can go on (every one waits or polls a flag nobody changed), like the
rounds of a collective; a seeded schedule runs them somewhere in between; and with ``poison=True`` their destination bytes read 0xFF until
then: a kernel that reads a window before the flag that announces the data
sees the poison instead of data that arrived by chance.

Hcomm channel writes (:meth:`OneSidedWrites.post`) take the same way from the
doorbell on; a ``Drain`` of their channel lands the channel's pending writes in
the draining runner, waits for those another thread runs, and orders the
drainer after them for the window race check. The pending copies of one
BatchWrite queue (``queueID + blockIdx * queueNum``) or one Hcomm channel land in
the order they were posted, as on hardware; the server serves the queues and
channels in posting order under the default schedule and in an order the seed
picks under a seeded one (a flag sent on another queue than its data may land
first). After a ``QueueBarrier`` on a queue, that queue's later copies land only
after every copy the rank had posted before it, on any queue.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection

from hccl_py.core.group import Group
from hccl_py.core.task import Task
from hccl_py.server.blocking import Blocker, Job
from hccl_py.server.remote_writes import ChannelKey, Copies, run_copies
from hccl_py.server.windows import WindowAllocation

from .races import WindowRaces, user_frame
from .rendezvous import Rendezvous
from .reports import returned_note

#: Whose pending copies, landed in order: (domain, domain rank, queue) of a BatchWrite,
#: (HCOMM, channel) of Hcomm.
Key = tuple
HCOMM = "#hcomm"
#: A pending write: its key, its copies and the writes that must land before it.
Write = tuple[Key, Copies, tuple]
#: An Hcomm copy of at most this many bytes (the uint64 notify, a flag) lands whole: until
#: then its bytes keep their old value, never the poison (a poll sees 0, not 0xFF..FF).
WHOLE_BYTES = 8


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
        #: Under the lock: copies not run yet, and those running now (until they are done), as
        #: (key, copies, the writes that must land first: those before a QueueBarrier).
        self.pending: list[Write] = []
        self.running: list[Write] = []
        #: BatchWrite key -> the writes its later copies wait for (its last QueueBarrier's).
        self.barriers: dict[Key, tuple[Write, ...]] = {}
        #: (domain, domain rank) -> global rank, of every rank that wrote (for the race check).
        self.writers: dict[tuple[str, int], int] = {}
        #: Which of ``n`` keys with pending copies lands its oldest next (the policy's choice).
        self.pick: Callable[[int], int] = lambda n: 0

    def write_items(self, task: Task, copies: Copies, queue: int = 0) -> None:
        """Run one BatchWrite now (eager) or leave it to the scheduler (late, seeded)."""
        rank = task.domain.ranks[task.rank]
        self.writers[(task.domain_name, task.rank)] = rank
        self._record(rank, copies, None)
        self._submit((task.domain_name, task.rank, queue), copies)

    def barrier(self, domain: str, rank: int, queue: int) -> None:
        """QueueBarrier[ALL] on ``queue`` of domain rank ``rank``: the queue's later copies
        land after every copy of the rank posted before it, on any queue or core."""
        with self.blocker.cond:
            before = tuple(w for w in self.pending + self.running if w[0][:2] == (domain, rank))
            self.barriers[(domain, rank, queue)] = before

    def post(self, channel: ChannelKey, copies: Copies) -> None:
        """Hcomm: the doorbell of ``channel`` rang for ``copies``; they land in order."""
        agent = None if self.races is None else self.races.channel_agent(channel)
        self._record(channel[0], copies, agent)
        self._submit((HCOMM, channel), copies, WHOLE_BYTES)

    def drain(self, channel: ChannelKey) -> None:
        """Hcomm ``Drain``: land ``channel``'s pending copies; order the drainer after them."""
        key = (HCOMM, channel)
        self._flush_key(lambda k: k == key, f"Drain: the writes of channel {channel[1]:#x} land")
        if self.races is not None:
            self.races.drained(channel[0], self.races.channel_agent(channel))

    def _record(self, rank: int, copies: Copies, agent: int | None) -> None:
        """The race check's record of the window bytes that ``copies`` will write."""
        races = self.races
        if races is None:
            return
        where = user_frame()
        clocks = races.batch_clocks(rank, len(copies), agent)
        for (_, dst, nbytes), clock in zip(copies, clocks, strict=True):
            if isinstance(dst.alloc, WindowAllocation):
                runs = [(dst.offset, dst.offset + nbytes)]
                races.write(rank, dst.alloc, runs, nbytes, clock, where, agent)

    def _submit(self, key: Key, copies: Copies, whole: int = 0) -> None:
        """Run ``copies`` now or leave them pending (poisoned, but copies of ``whole`` bytes)."""
        if not self.blocker.defers():
            with self.blocker.cond:  # the server's copy, not the posting core's own write
                run_copies(copies)
            return
        with self.blocker.cond:
            if self.poison:
                for _, dst, nbytes in copies:
                    if nbytes > whole:
                        dst.bytes_view(nbytes).fill_(0xFF)
            self.pending.append((key, copies, self.barriers.get(key, ())))
            self.blocker.progressed()

    def flush(self, domain: str | None = None, rank: int | None = None) -> None:
        """Run the pending BatchWrites of domain rank ``rank`` (all copies without arguments)."""

        def mine(k: Key) -> bool:  # every queue of domain rank ``rank``
            return domain is None or k[:2] == (domain, rank)

        self._flush_key(mine, "a BatchWrite's copies finish")
        writer = self.writers.get((domain, rank))
        if self.races is not None and writer is not None:
            self.races.landed(writer)

    def _flush_key(self, match: Callable[[Key], bool], what: str) -> None:
        """Run the pending copies whose key ``match``es; wait for those running elsewhere."""
        with self.blocker.cond:
            mine = [w for w in self.pending if match(w[0])]
            for w in mine:
                self.pending.remove(w)
            # under the world lock: the landing is the server's work, not the calling core's
            # write (its race watch skips what runs under the lock)
            for _, copies, _ in mine:
                run_copies(copies)
            self.blocker.progressed()

        def elsewhere() -> bool:
            return any(match(w[0]) for w in self.running)

        # a copy of this key that another thread is running right now must land first
        self.blocker.wait_for(lambda: not elsewhere(), what)

    def job(self) -> Job | None:
        """Under the lock: the oldest pending copies of one key (the policy picks it), or None.

        A key's oldest copies wait while a write they come after (a QueueBarrier's) is
        pending or running.
        """
        unlanded = {id(w) for w in self.pending + self.running}
        heads: dict[Key, int] = {}
        for i, (k, _, before) in enumerate(self.pending):
            if k not in heads:
                heads[k] = -1 if any(id(w) in unlanded for w in before) else i
        order = [i for i in heads.values() if i >= 0]
        if not order:
            return None
        write = self.pending.pop(order[self.pick(len(order))])
        self.running.append(write)
        return functools.partial(self._run, write)

    def _run(self, write: Write) -> None:
        with self.blocker.cond:  # the server's copy, unseen by the running thread's race watch
            run_copies(write[1])
            self.running.remove(write)
            self.blocker.progressed()

    def meet(self, group: Group, rank: int, key: str, what: str, payload: bytes) -> list[bytes]:
        """Block until every rank of ``group`` arrived at ``key`` and their copies landed."""
        name = group.name

        def landed() -> bool:
            return not any(w[0][0] == name for w in self.pending + self.running)

        def why(missing: list[int]) -> str:
            if missing:
                note = returned_note(self.returned)
                return f"{what}: ranks {missing} have not made their AlltoAllvWrite{note}"
            return f"{what}: the copies of the other ranks are still pending"

        arrived = self.meetings.meet(group, rank, ("AlltoAllvWrite", key), why, payload, landed)
        if self.races is not None:  # every rank's copies into this window landed
            self.races.landed(group.ranks[rank], group.ranks)
        return arrived
