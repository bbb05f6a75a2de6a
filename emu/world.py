"""The emulated server: one object shared by every rank of an in-process world.

Tasks with the same position (``seq``) in a domain form a *slot*. When every
rank of the domain has submitted its task the slot is checked for agreement
(kernel launch and handle, op, counts, dtype, reduce op, repeat, stride,
AlltoAllV counts pairwise). Like the AI CPU server, which reads one message
queue per domain in order, the world runs the slots of a domain in Prepare
order: round ``r`` of a slot runs once every rank committed it, every earlier
slot of the domain finished, and every InterHcclGroupSync dependency finished.
When it runs is the scheduler's decision (:mod:`.scheduler`): with the eager
schedule at once, in the committing runner; with the late one only when no
runner can go on; under a seeded schedule, somewhere in between.

A failed slot fails every later slot of its domain (the server never gets past
it), so every rank that waits there gets the original report.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator

from hccl_py.core import layout
from hccl_py.core.config import Config
from hccl_py.core.current import current_rank
from hccl_py.core.errors import HcclError
from hccl_py.core.group import Group
from hccl_py.core.task import Task
from hccl_py.ops.batch_write import ITEM_DTYPES
from hccl_py.sanitizer.poison import in_place, restore, save_and_poison
from hccl_py.sanitizer.sharing import shared_between_ranks
from hccl_py.server.agreement import count_mismatch, error_for, mismatch
from hccl_py.server.blocking import Job
from hccl_py.server.protocol import EXCHANGE, EXCHANGE_ROOM_BYTES, Outgoing, Server
from hccl_py.server.remote_writes import ChannelKey, Copies
from hccl_py.server.task_queue import TaskBoard
from hccl_py.server.windows import LocalWindows, WindowAllocation
from hccl_py.trace.hooks import server_round
from hccl_py.trace.recorder import now_us, recording

from . import executor
from .buffers import BufferRaces
from .core_scope import AloneScopes, CoreScope, KernelBuffers, watch_polls
from .flags import GmFlagArea
from .group_log import GroupLog
from .host_watch import HostScope
from .lane import Lane
from .onesided import LaunchEnd, OneSidedWrites
from .policies import policy_for
from .posted import PostedRequests
from .races import WindowRaces, user_place
from .rendezvous import Rendezvous
from .reports import WorldReports
from .scheduler import Scheduler
from .server_reads import PendingReads
from .slot import Slot
from .watch import WatchedWindows
from .world_lock import Unwatched


class EmuWorld(Server):
    """The server of an emulated world; every rank's client sends to this one object.

    Its parts, built here: ``windows``, ``watched`` (the window race check), ``meetings``
    (:mod:`.rendezvous`), ``writes`` (one-sided copies), ``reports`` (why a round has not run).
    """

    ops = frozenset(executor.ROUNDS)
    #: Every rank is a thread of this process: a flag poll that nobody can change is a deadlock.
    polls_detect_deadlock = True
    ranks_share_memory = True

    def __init__(self, world_size: int, config: Config) -> None:
        self.world_size = world_size
        self.config = config
        self.blocker = Scheduler(config.timeout, policy_for(config.seed, config.schedule))
        self.blocker.take_work = self._take_work
        self.blocker.has_work = self._has_work
        self.serial = Unwatched(self.blocker.serial)
        self.lane = Lane(f"hccl_py-emu-server-{id(self):x}")
        self.races = WindowRaces(world_size) if config.poison else None
        self.buffers = BufferRaces(world_size, self._slots)
        self.posted = PostedRequests(self.buffers)
        #: Per global rank: the scope of its function, for the host's watch (:mod:`.host_watch`).
        self.hosts: list[HostScope | None] = [None] * world_size
        self.watched = watched = WatchedWindows(self.races, self.serial._is_owned, self.buffers)
        self.windows = LocalWindows(
            config.buffsize_mb, on_map=self._window_mapped, factor=config.platform.window_factor
        )
        # the window race check orders every member of a meeting after the others (its clocks)
        clocks = (None, None) if self.races is None else (watched.release, watched.acquire)
        self.meetings = Rendezvous(self.blocker, *clocks)
        self.returned: set[int] = set()
        self.group_log = GroupLog(world_size)
        self.writes = OneSidedWrites(
            self.blocker,
            self.races,
            config.poison,
            self.meetings,
            self.returned,
            whole_items=config.platform.batch_write_format == "A2",
        )
        self.writes.pick = self.blocker.policy.pick_queue
        self.writes.reads = PendingReads(self.buffers)
        self.writes.marks = self.posted
        fmt = config.platform.batch_write_format
        self.writes.item_size = ITEM_DTYPES[fmt].itemsize if fmt else 0
        #: Every domain's slots, their order, failures and poison (one state machine); every
        #: position it makes is a :class:`Slot` (read as one without a check at each call).
        self.board = TaskBoard(position=Slot, restore=restore, on_failure=self.blocker.progressed)
        #: :meth:`_has_work`'s answer (the first ready slot, or None) and the board version it
        #: holds for: :meth:`_take_work` at that version starts that slot without a second look.
        self._ready_version: int = -1
        self._ready: Slot | None = None
        self.reports = WorldReports(self)
        self.blocker.describe_world = self.reports.describe_world
        self.finalized: dict[tuple[str, int], dict[int, int]] = {}
        #: (domain, launch) -> domain ranks that returned from that kernel launch.
        self.launch_returns: dict[tuple[str, int], set[int]] = {}
        #: Mapped windows, and the running kernels' GM tensor arguments, by the data pointer of
        #: their storage (flag polls through tensors).
        self.flag_windows: dict[int, WindowAllocation | GmFlagArea] = {}
        #: Global ranks whose running kernel has GM tensor arguments to watch (kernel_buffers).
        self.polled_args: dict[int, bool] = {}
        self.alone_scope = AloneScopes(self).get  # (a launch of one core: one object a rank)

    # ----------------------------------------------------------- slot state
    def _slots(self, domain: str) -> dict[int, Slot]:
        """The unretired slots of ``domain`` by seq, for the buffer check's dependencies."""
        found = self.board.domains.get(domain)
        return {} if found is None else found.positions

    def _fail(self, slot: Slot, error: HcclError) -> None:
        """Under the lock: ``slot`` failed; so does every later slot of its domain."""
        self.board.fail(slot, error)

    def _poison_reached(self) -> None:
        """Under the lock: poison committed rounds whose task the server has reached.

        From then on the server may write the receive blocks at any moment, so a
        kernel that reads them before Wait sees NaN / 0xFF. Earlier, the blocks
        may still be another task's input. In-place rounds are left alone.
        """
        for slot, task, r in self.board.poison_due():
            if not in_place(task, r):
                nbytes = layout.round_blocks(task, "recv", r).total()
                self.lane.run_sized(nbytes, self._poison, slot, task, r)

    def _poison(self, slot: Slot, task: Task, round_idx: int) -> None:
        """Poison one round's receive blocks, keeping their bytes to restore if it never runs."""
        self.board.poisoned(slot, round_idx, save_and_poison(task, round_idx))

    def _has_work(self) -> bool:
        """Whether the server has a job now (asked at every switch of a preemptive schedule).

        Rounds become ready only at a transition of the board (:attr:`TaskBoard.version`): the
        answer for the board's current version is kept."""
        if self.writes.pending:
            return True
        board = self.board
        if board.version == self._ready_version:
            return self._ready is not None
        found = None
        for slot in list(board.pending):  # a loop: a generator costs a call per slot it yields
            if board.ready(slot):
                found = slot
                break
        self._ready_version, self._ready = board.version, found
        return found is not None

    def _take_work(self) -> Job | None:
        if self.blocker.error is not None:
            return None
        write = self.writes.job()
        if write is not None:
            return write
        board = self.board
        # at the version of _has_work's look, the board is as it saw it: claim would find the
        # same slot (or none) again
        if board.version == self._ready_version:
            slot = self._ready
            if slot is not None:
                board.start(slot)
        else:
            slot = board.claim()
        return None if slot is None else functools.partial(self._execute, slot)

    def _execute(self, slot: Slot) -> None:
        round_idx = slot.done
        tasks = slot.ranked  # (a slot that runs is complete: its tasks are final)
        error = None
        started = now_us()
        try:
            nbytes = executor.round_bytes(tasks, round_idx)
            self.lane.run_sized(nbytes, executor.run_round, tasks, round_idx)
        except Exception as exc:  # noqa: BLE001 - reported to every waiting rank
            error = HcclError(
                f"round {round_idx} of {tasks[0].describe()} failed: {type(exc).__name__}: {exc}"
            )
        with self.blocker.lock:
            self.board.finish(slot, error)
            if error is None and recording():
                for task in tasks:
                    server_round(task, round_idx, started)
            if self.config.poison:  # (without poison no round waits to be poisoned)
                self._poison_reached()
            self.blocker.progressed()

    # -------------------------------------------------------- server protocol
    def submit(self, task: Task) -> None:
        with self.blocker.lock:
            self.blocker.raise_if_failed()
            slot = self.board.submit(task)
            counts = self.finalized.get((task.domain_name, task.launch))
            for rank, n_tasks in counts.items() if counts else ():  # (no rank finalized yet)
                if task.collective_index >= n_tasks:
                    self._fail(slot, count_mismatch(task, rank, n_tasks))
            if slot.complete:
                tasks = slot.ranked = [slot.tasks[r] for r in slot.ranks]
                error = mismatch(tasks) or shared_between_ranks(tasks)
                if error is not None:
                    self._fail(slot, error)
            self.blocker.progressed()

    def commit(self, task: Task, rounds: range) -> None:
        """Commit ``rounds`` at once where no round can become ready before the last of them is
        committed; else one at a time, so that the schedule decides after each Commit whether
        the server runs a round (as it would for Commit calls, and with the debug log on)."""
        if len(rounds) > 1 and not self._quiet(task):
            for round_idx in rounds:
                self.commit(task, range(round_idx, round_idx + 1))
            return
        with self.blocker.lock:
            self.blocker.raise_if_failed()
            rank, races, at = task.domain.ranks[task.rank], self.watched.races, user_place()
            for round_idx in rounds:  # each as its Commit would (the race checks read the counts)
                slot = self.board.commit(task, range(round_idx, round_idx + 1), self.config.poison)
                if races is not None:  # the window race check's clock of this Commit
                    slot.clocks[(task.rank, round_idx)] = self.watched.release(rank)
                self.buffers.committed(rank, task, round_idx, at)
            if self.config.poison:
                self._poison_reached()
            self.blocker.progressed()
        self.blocker.run_ready()

    def _quiet(self, task: Task) -> bool:
        """Whether no job can become ready while this rank commits rounds of ``task``: none is
        ready now, and another rank has not committed the round its position runs next
        (rounds run in order; a Commit changes no other position)."""
        with self.blocker.lock:
            if self._has_work():
                return False
            slot = self.board.position(task)  # (a rank that has not prepared it committed none)
            return any(r != task.rank for r in slot.not_committed(slot.done + 1))

    def wait(self, task: Task, round_idx: int) -> None:
        with self.blocker.lock:
            slot = self.board.position(task)
        self.blocker.wait_for(
            lambda: slot.done > round_idx or slot.error is not None,
            lambda: self.reports.describe_wait(slot, task, round_idx),
        )
        if slot.error is not None and slot.done <= round_idx:
            raise error_for(slot.error, task, round_idx)
        if self.watched.races is not None:
            self._ordered_after(slot, task, range(round_idx, round_idx + 1))
        else:  # _ordered_after without the window race check: one frame less per Wait
            self.buffers.ordered(task.domain.ranks[task.rank], task, round_idx)
        # A round that ran is this rank's data, whatever failed elsewhere since: the rank
        # goes on and meets the failure at its next call that needs a peer.

    def finished(self, task: Task) -> int:
        self.blocker.settle()
        with self.blocker.lock:
            slot = self.board.position(task)
            if slot.error is not None:
                raise error_for(slot.error, task, slot.done)
            done = slot.done
            if done < task.repeat:
                self.blocker.raise_if_failed()
        if done < task.repeat:
            self.blocker.poll(
                slot.key,
                (done, False),
                lambda: self.reports.describe_wait(slot, task, done, verb="polls Query for"),
                read=lambda: (slot.done, slot.error is not None),
            )
        self._ordered_after(slot, task, range(done))
        return done

    def _ordered_after(self, slot: Slot, task: Task, rounds: range) -> None:
        """``task``'s rank saw ``rounds`` of ``slot`` done: it is ordered after every Commit."""
        if self.watched.races is not None:  # the window race check's clocks
            clocks = [slot.clocks.get((r, k)) for k in rounds for r in slot.ranks]
            self.watched.acquire(task.domain.ranks[task.rank], clocks)
        if rounds:
            self.buffers.ordered(task.domain.ranks[task.rank], task, rounds[-1])

    def finalize(self, group: Group, rank: int, launch: int | None, n_tasks: int) -> None:
        """Domain rank ``rank`` finalized its kernel launch ``launch`` after ``n_tasks`` tasks.

        Every rank must prepare the same number of tasks per launch: a task of
        another rank beyond that count will never find a partner.
        """
        name = group.name
        self.writes.flush(name, rank)
        if launch is None:  # one-sided tasks only: nothing to match
            return
        with self.blocker.lock:
            self.finalized.setdefault((name, launch), {})[rank] = n_tasks
            dom = self.board.domains.get(name)
            # the slots still waiting for a task (one that is incomplete never finished)
            for slot in [] if dom is None else list(dom.positions.values()):
                if slot.complete or slot.error is not None:
                    continue
                for t in slot.tasks.values():
                    if t.rank != rank and t.launch == launch and t.collective_index >= n_tasks:
                        self._fail(slot, count_mismatch(t, rank, n_tasks))
                        break

    def launch_returned(self, group: Group, rank: int, launch: int) -> None:
        """Once every rank of the domain returned from ``launch``, forget its finished slots.

        No rank waits for them or queries them any more, and their tasks hold
        the launch's buffers: a long run of kernel launches stays flat in memory.
        """
        name = group.name
        with self.blocker.lock:
            returned = self.launch_returns.setdefault((name, launch), set())
            returned.add(rank)
            if len(returned) < group.size:
                return
            del self.launch_returns[(name, launch)]
            self.finalized.pop((name, launch), None)
            dom = self.board.domains.get(name)
            if dom is not None:
                dom.retire(launch)

    def meet(
        self, group: Group, rank: int, key: str, what: str, payload: Outgoing = b""
    ) -> list[bytes]:
        """The ranks hand their payloads to each other directly (see :mod:`.rendezvous`)."""
        if key == EXCHANGE:
            return self.meetings.exchange(group, rank, what, payload)
        return self.writes.meet(group, rank, key, what, payload)

    def room(self, group: Group) -> int:
        """The ranks hand over their payloads whole: an exchange carries the protocol's most."""
        return EXCHANGE_ROOM_BYTES

    def exact_reductions(self, group: Group) -> bool:
        """The emulator's reductions are the rule that exact ones follow."""
        return True

    def write_items(
        self,
        task: Task,
        copies: list[tuple[object, object, int]],
        queue: tuple[int, int] = (0, 0),
        epoch: int = 0,
    ) -> None:
        """Run one BatchWrite now or leave it to the scheduler (see :mod:`.onesided`)."""
        self.writes.write_items(task, copies, queue, epoch)

    def hold_items(self, task: Task) -> None:
        """A BatchWrite behind a QueueBarrier[ALL] is held: its read race reports name this call."""
        self.writes.hold(task)

    def flush_writes(
        self, domain: str | None = None, rank: int | None = None, handle: int | None = None
    ) -> None:
        """Run the pending BatchWrites of domain rank ``rank`` (all of them without arguments)."""
        self.writes.flush(domain, rank, handle)

    def post_writes(self, channel: ChannelKey, copies: Copies) -> None:
        """Hcomm: land ``copies`` now or leave them to the scheduler (see :mod:`.onesided`)."""
        self.writes.post(channel, copies)

    def hcomm_posted(self, channel: ChannelKey, call: str, copies: Copies) -> None:
        """Hcomm: mark a ReadNbi's destination in plain GM until the Drain (:mod:`.posted`)."""
        self.posted.posted(channel, call, copies)

    def drain_channel(self, channel: ChannelKey) -> None:
        """Hcomm ``Drain``: block until ``channel``'s writes landed (see :mod:`.onesided`)."""
        self.writes.drain(channel)
        self.posted.drained(channel)

    def _window_mapped(self, window: WindowAllocation) -> None:
        self.watched.mapped(window)
        self.flag_windows[window.data.untyped_storage().data_ptr()] = window

    def kernel_buffers(self, rank: int, buffers: list) -> KernelBuffers:
        """Around a launch of global rank ``rank``: polls of its GM tensor arguments (flags)."""
        return KernelBuffers(self, rank, buffers)

    def kernel_scope(self, rank: int) -> contextlib.AbstractContextManager:
        """Around a kernel launch of global rank ``rank``: the race check's scope; the host's
        watch is off inside, and on after it while Hcomm reads are in flight; at its end the
        BatchWrites that a ``Finalize<false>`` left pending land (:class:`.onesided.LaunchEnd`)."""
        host = self.hosts[rank]
        inner = self.watched.kernel_scope(rank)
        if host is not None:
            host.inner, inner = inner, host
        return LaunchEnd(inner, self.writes, rank)

    @contextlib.contextmanager
    def host_scope(self, rank: int) -> Iterator[None]:
        """Around the function of global rank ``rank``, in its runner (:mod:`.host_watch`)."""
        host = self.hosts[rank] = HostScope(self.posted, rank, self.serial._is_owned)
        try:
            yield
        finally:
            self.hosts[rank] = None
            host.close()

    def core_scope(self, rank: int, who: str = "") -> CoreScope:
        """Around one core's run: the race watch, and flag polls once windows exist
        (:mod:`.core_scope`)."""
        return CoreScope(self, rank, who)

    def window(self, domain: str, rank: int, kind: str) -> WindowAllocation:
        """Global rank ``rank``'s window ``kind`` of ``domain``; the calling core watches polls."""
        found = self.windows.window(domain, rank, kind)
        watch_polls(self)
        return found

    def window_at(self, base: int) -> WindowAllocation | None:
        """The window whose integer base address is ``base``, if one was created."""
        return self.windows.window_at(base)

    def close(self) -> None:
        """End the server's lane thread and the idle runner threads."""
        self.lane.close()
        self.blocker.close()

    def on_new_group(self, group: Group) -> None:
        """Every rank creates the same groups in the same order (:mod:`.group_log`)."""
        self.group_log.created(current_rank().rank, group.ranks, self.returned)
        self.windows.tags.tag(group.name)

    def rank_returned(self, rank: int) -> None:
        """Global rank ``rank`` returned from its function: it will never submit or commit again."""
        with self.blocker.lock:
            self.returned.add(rank)
            if self.blocker.error is not None and len(self.returned) == self.world_size:
                self.board.restore_all()
            self.blocker.progressed()
        if len(self.returned) == self.world_size and self.blocker.error is None:
            self.writes.flush()  # writes still in flight land, as hardware completes them
