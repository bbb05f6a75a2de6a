"""BatchWrite and Hcomm writes on the emulator: at once, or when the scheduler runs them.

With the default eager schedule the copies of a BatchWrite run in the preparing
runner, at Prepare. With ``schedule="late"`` they wait until no runner of the
world can go on (every one waits or polls a flag nobody changed), like the
rounds of a collective; a seeded schedule runs them somewhere in between; and with ``poison=True`` their destination bytes read 0xFF until
then: a kernel that reads a window before the flag that announces the data
sees the poison instead of data that arrived by chance. A BatchWrite item of at most
``WHOLE_ITEM_BYTES`` (a flag, a 32-byte status block) is not poisoned: until it
lands a poll sees the old value, as on hardware. Nor is any Atlas A2 item: the
shipping A2 MoE kernels carry an item's own status at its head and its flag at
its tail, both ``-1`` when set, which is the poison's pattern, and an RDMA write
keeps the old bytes until it lands. The window race check still reports a read
of an item's bytes that nothing ordered after it.

Hcomm channel writes (:meth:`OneSidedWrites.post`) take the same way from the
doorbell on; a ``Drain`` of their channel lands the channel's pending writes in
the draining runner, waits for those another thread runs, and orders the
drainer after them for the window race check. The pending copies of one
BatchWrite queue (``queueID + blockIdx * queueNum`` in one context's message
area) or one Hcomm channel land in the order they were posted, as on hardware;
the server serves the queues and channels in posting order under the default
schedule and in an order the seed picks under a seeded one (a flag sent on
another queue than its data may land first). A write carries its queue's epoch,
the number of ``QueueBarrier[ALL]`` calls its queue had made when it was posted;
it lands only after every write of the rank and context of a lower epoch
(posted before its own queue's barrier). The client posts a write behind
barrier ``e`` only once every queue of the context has sent it
(:mod:`hccl_py.client.onesided`), so those are all posted by then; the client
reads its item list at that release, as the server does, and a read race
report names the BatchWrite's own call (:meth:`OneSidedWrites.hold`).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Collection

from hccl_py.core.group import Group
from hccl_py.core.task import Task
from hccl_py.ops import op_name
from hccl_py.server.blocking import Blocker, Job
from hccl_py.server.remote_writes import ChannelKey, Copies, run_copies
from hccl_py.server.windows import WindowAllocation

from .posted import PostedRequests
from .races import WindowRaces, user_frame
from .rendezvous import Rendezvous
from .reports import returned_note
from .server_reads import PendingReads

#: Whose pending copies, landed in order: (domain, domain rank, context index, queue) of a
#: BatchWrite, (HCOMM, channel) of Hcomm. ``key[:3]``: whose epochs are compared (one context's
#: message area; an Hcomm channel).
Key = tuple
HCOMM = "#hcomm"
#: A pending write: its key, its copies and its queue's epoch (QueueBarriers before it).
Write = tuple[Key, Copies, int]
#: An Hcomm copy of at most this many bytes (the uint64 notify, a flag) lands whole: until
#: then its bytes keep their old value, never the poison (a poll sees 0, not 0xFF..FF).
WHOLE_BYTES = 8
#: A BatchWrite item of at most this many bytes (a flag, a status block) lands whole too.
WHOLE_ITEM_BYTES = 32


class OneSidedWrites:
    """The one-sided copies of BatchWrite and AlltoAllvWrite in an emulated world.

    The world builds one with its scheduler (``blocker``), its race check
    (``races``, None without ``poison``), its meetings, the set of global
    ranks that returned from their function (read in reports) and whether its
    BatchWrite items land whole (Atlas A2); it takes a pending write as a job
    with :meth:`job`. It enters the scheduler's lock (its condition's) directly: a
    ``threading.Condition`` enters it through Python calls.
    """

    def __init__(
        self,
        blocker: Blocker,
        races: WindowRaces | None,
        poison: bool,
        meetings: Rendezvous,
        returned: Collection[int],
        whole_items: bool = False,
    ) -> None:
        self.blocker = blocker
        #: How many bytes of a BatchWrite item keep their old value until it lands.
        self.item_whole = 1 << 62 if whole_items else WHOLE_ITEM_BYTES
        self.races = races
        self.poison = poison
        self.meetings = meetings
        self.returned = returned
        #: Under the lock: copies not run yet, and those running now (until they are done).
        self.pending: list[Write] = []
        self.running: list[Write] = []
        #: (domain, domain rank) -> global rank, of every rank that wrote (for the race check).
        self.writers: dict[tuple[str, int], int] = {}
        #: Which of ``n`` keys with pending copies lands its oldest next (the policy's choice).
        self.pick: Callable[[int], int] = lambda n: 0
        #: (domain, key, domain rank) -> the payloads of the AlltoAllvWrite meeting that a core
        #: of the rank entered (None until it ended): the rank's other cores wait for that one.
        self.met: dict[tuple[str, str, int], list[bytes] | None] = {}
        #: The item lists and sources the server reads when a pending BatchWrite lands
        #: (:mod:`.server_reads`; the world sets it) and the size of one item.
        self.reads: PendingReads | None = None
        self.item_size = 0
        #: The buffer race check's marks of destinations in the rank's own plain GM, from the
        #: call to the Wait, Finalize or launch end that orders them (:mod:`.posted`; the world
        #: sets it).
        self.marks: PostedRequests | None = None

    def write_items(
        self, task: Task, copies: Copies, queue: tuple[int, int] = (0, 0), epoch: int = 0
    ) -> None:
        """Run one BatchWrite now (eager) or leave it to the scheduler (late, seeded);
        ``queue``: (context index, message queue)."""
        rank = task.domain.ranks[task.rank]
        self.writers[(task.domain_name, task.rank)] = rank
        key = (task.domain_name, task.rank, *queue)
        if self.marks is not None:
            self.marks.written((rank, (task.domain_name, task.rank)), task.handle, copies)
        if self.races is not None:
            agent = self.races.queue_agent(rank, key)
            self._record(rank, copies, agent, key, epoch, op_name(task.op))
        # hardware never shows 0xFF..FF in a flag, and a poll that ends on NaN would stop
        pending = self._submit(key, copies, self.item_whole, epoch)
        if self.reads is not None:
            if pending:
                self.reads.mark(rank, task, copies, self.item_size)
            else:
                self.reads.called_at.pop(id(task), None)

    def hold(self, task: Task) -> None:
        """A BatchWrite waits behind a QueueBarrier[ALL] until every queue sent it; the server
        reads its items and sources after that release, and a report of a write that races
        with those reads names this call (the line of the core that called it)."""
        if self.reads is not None:
            self.reads.called_at[id(task)] = user_frame()

    def post(self, channel: ChannelKey, copies: Copies) -> None:
        """Hcomm: the doorbell of ``channel`` rang for ``copies``; they land in order."""
        if self.marks is not None:
            self.marks.rang(channel)
        if self.races is not None:
            self._record(channel[0], copies, self.races.channel_agent(channel))
        self._submit((HCOMM, channel), copies, WHOLE_BYTES)

    def drain(self, channel: ChannelKey) -> None:
        """Hcomm ``Drain``: land ``channel``'s pending copies; order the drainer after them."""
        key = (HCOMM, channel)
        self._flush_key(lambda k: k == key, f"Drain: the writes of channel {channel[1]:#x} land")
        if self.races is not None:
            self.races.drained(channel[0], self.races.channel_agent(channel))

    def _record(
        self,
        rank: int,
        copies: Copies,
        agent: int,
        queue: Key | None = None,
        epoch: int = 0,
        call: str = "",
    ) -> None:
        """The race check's record of the window bytes that ``copies`` will write (where the
        check is on: its callers ask it for ``agent``), posted by ``call`` (BatchWrite,
        AlltoAllvWrite; "" for an Hcomm channel)."""
        races = self.races
        where = user_frame()
        clocks = races.batch_clocks(rank, len(copies), agent, queue, epoch)
        for (_, dst, nbytes), clock in zip(copies, clocks, strict=True):
            if isinstance(dst.alloc, WindowAllocation):
                runs = [(dst.offset, dst.offset + nbytes)]
                races.write(rank, dst.alloc, runs, nbytes, clock, where, agent, call)

    def _submit(self, key: Key, copies: Copies, whole: int = 0, epoch: int = 0) -> bool:
        """Run ``copies`` now or leave them pending (poisoned, but copies of ``whole`` bytes);
        whether they are pending."""
        if not self.blocker.defers():
            with self.blocker.lock:  # the server's copy, not the posting core's own write
                run_copies(copies)
            return False
        with self.blocker.lock:
            if self.poison:
                for _, dst, nbytes in copies:
                    if nbytes > whole:
                        dst.bytes_view(nbytes).fill_(0xFF)
            self.pending.append((key, copies, epoch))
            self.blocker.progressed()
        return True

    def flush(
        self, domain: str | None = None, rank: int | None = None, handle: int | None = None
    ) -> None:
        """Run the pending BatchWrites of domain rank ``rank`` (all copies without arguments);
        ``handle``: the one a Wait waits for, which orders it and those before it (the race
        check's marks of later ones stay)."""

        def mine(k: Key) -> bool:  # every queue of domain rank ``rank``
            return domain is None or k[:2] == (domain, rank)

        self._flush_key(mine, "a BatchWrite's copies finish")
        if self.races is not None:  # (the window race check's: no look-up without it)
            writer = self.writers.get((domain, rank))
            if writer is not None:
                self.races.landed(writer)
        if self.marks is not None:  # their marks in plain GM go: the flush orders them
            for (name, drank), writer in list(self.writers.items()):
                if domain is None or (name, drank) == (domain, rank):
                    self.marks.drained((writer, (name, drank)), handle)

    def land_rank(self, rank: int) -> None:
        """Run the pending BatchWrites of global rank ``rank`` in every domain (its launch ends)."""
        for (domain, drank), writer in list(self.writers.items()):  # BatchWrite writers only
            if writer == rank:
                self.flush(domain, drank)

    def _flush_key(self, match: Callable[[Key], bool], what: str) -> None:
        """Run the pending copies whose key ``match``es, lower epochs first; wait for those
        running elsewhere."""
        with self.blocker.lock:
            if self.pending:  # (a Finalize of a launch without BatchWrites finds none)
                mine = sorted((w for w in self.pending if match(w[0])), key=lambda w: w[2])
                for w in mine:
                    self.pending.remove(w)
                # under the world lock: the landing is the server's work, not the calling
                # core's write (its race watch skips what runs under the lock)
                for _, copies, _ in mine:
                    self._land(copies)
                if mine:
                    self.blocker.progressed()

        def elsewhere() -> bool:
            return any(match(w[0]) for w in self.running)

        # a copy of this key that another thread is running right now must land first
        self.blocker.wait_for(lambda: not (self.running and elsewhere()), what)

    def job(self) -> Job | None:
        """Under the lock: the oldest pending copies of one key (the policy picks it), or None.

        A key's oldest copies wait while a write of the same rank and context and a lower
        epoch (posted before its queue's QueueBarrier) is pending or running.
        """
        if not self.pending:  # (every round the server runs asks)
            return None
        lowest: dict[Key, int] = {}
        for k, _, epoch in self.pending + self.running:
            lowest[k[:3]] = min(epoch, lowest.get(k[:3], epoch))
        heads: dict[Key, int] = {}
        for i, (k, _, epoch) in enumerate(self.pending):
            if k not in heads:
                heads[k] = -1 if lowest[k[:3]] < epoch else i
        order = [i for i in heads.values() if i >= 0]
        if not order:
            return None
        write = self.pending.pop(order[self.pick(len(order))])
        self.running.append(write)
        return functools.partial(self._run, write)

    def _run(self, write: Write) -> None:
        with self.blocker.lock:  # the server's copy, unseen by the running thread's race watch
            self._land(write[1])
            self.running.remove(write)
            self.blocker.progressed()

    def _land(self, copies: Copies) -> None:
        """Under the lock: run ``copies``; the server read their items and sources."""
        run_copies(copies)
        if self.reads is not None:
            self.reads.landed(copies)

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

        mine = (name, key, rank)
        with self.blocker.lock:
            first = mine not in self.met
            if first:
                self.met[mine] = None
        if first:  # the rank meets the others once, whichever of its cores Waits first
            arrived = self.meetings.meet(group, rank, ("AlltoAllvWrite", key), why, payload, landed)
            with self.blocker.lock:
                self.met[mine] = arrived
                self.blocker.progressed()
        else:
            self.blocker.wait_for(
                lambda: self.met[mine] is not None,
                lambda: f"{what}, which another core of the rank waits for",
            )
            arrived = self.met[mine]
        if self.races is not None:  # every rank's copies into this window landed
            self.races.landed(group.ranks[rank], group.ranks)
        return arrived


class LaunchEnd:
    """A kernel launch's scope around ``inner``: at its end the rank's pending BatchWrites land.

    The launch ends with its AI CPU server's task, which returns only once every
    task it was given finished (``CommKfcDispatcher::Run`` loops until
    ``IsAllTaskFinished`` after Finalize): copies that a ``Finalize<false>`` left
    pending land before the rank's next launch starts.
    """

    __slots__ = ("inner", "writes", "rank")

    def __init__(
        self, inner: contextlib.AbstractContextManager, writes: OneSidedWrites, rank: int
    ) -> None:
        self.inner = inner
        self.writes = writes
        self.rank = rank

    def __enter__(self) -> None:
        self.inner.__enter__()

    def __exit__(self, *exc: object) -> None:
        try:
            if exc[0] is None and self.writes.writers:  # a world without BatchWrites skips it
                self.writes.land_rank(self.rank)
        finally:
            self.inner.__exit__(*exc)
