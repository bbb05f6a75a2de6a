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

import torch

from hccl_py.core import layout
from hccl_py.core.config import Config
from hccl_py.core.current import RunnerLocal
from hccl_py.core.errors import HcclError
from hccl_py.core.group import Group
from hccl_py.core.task import Task
from hccl_py.sanitizer.poison import in_place, poison
from hccl_py.sanitizer.sharing import shared_between_ranks
from hccl_py.server.agreement import count_mismatch, error_for, mismatch
from hccl_py.server.blocking import Job
from hccl_py.server.ordering import behind, dependency_state
from hccl_py.server.protocol import Server
from hccl_py.server.windows import LocalWindows, WindowAllocation
from hccl_py.trace.hooks import server_round
from hccl_py.trace.recorder import now_us

from . import executor
from .flags import FlagPolls
from .lane import Lane
from .onesided import OneSidedWrites
from .policies import policy_for
from .races import WindowRaces
from .rendezvous import Rendezvous
from .reports import WorldReports
from .scheduler import Scheduler
from .slot import Slot
from .watch import WatchedWindows

#: The calling core's (exit stack, rank) while it has not entered the flag-poll watch.
_cores = RunnerLocal()


class EmuWorld(WorldReports, OneSidedWrites, WatchedWindows, LocalWindows, Server):
    """The server of an emulated world; every rank's client sends to this one object."""

    ops = frozenset(executor.ROUNDS)

    def __init__(self, world_size: int, config: Config) -> None:
        self.world_size = world_size
        self.config = config
        self.blocker = Scheduler(config.timeout, policy_for(config.seed, config.schedule))
        self.blocker.take_work = self._take_work
        self.blocker.has_work = self._has_work
        self.blocker.describe_world = self._describe_world
        self.serial = self.blocker.serial
        self.lane = Lane(f"hccl_py-emu-server-{id(self):x}")
        self.races = WindowRaces(world_size) if config.poison else None
        self.exchanges = Rendezvous(self.blocker, self._release, self._acquire)
        self.slots: dict[tuple[str, int], Slot] = {}
        self.pending: dict[Slot, None] = {}
        self.unfinished: dict[Slot, None] = {}
        self.failed_at: dict[str, Slot] = {}
        self.finalized: dict[tuple[str, int], dict[int, int]] = {}
        #: (domain, launch) -> domain ranks that returned from that kernel launch.
        self.launch_returns: dict[tuple[str, int], set[int]] = {}
        #: Per domain: every slot below this position finished and was forgotten.
        self.retired_below: dict[str, int] = {}
        self.returned: set[int] = set()
        self.unpoisoned: dict[Slot, dict[int, list[int]]] = {}
        self.poisoned: dict[Slot, list[tuple[int, list[tuple[int, torch.Tensor]], Task]]] = {}
        #: Mapped windows by the data pointer of their storage (flag polls through tensors).
        self.flag_windows: dict[int, WindowAllocation] = {}

    # ----------------------------------------------------------- slot state
    def _slot(self, task: Task) -> Slot:
        key = (task.domain_name, task.seq)
        slot = self.slots.get(key)
        if slot is None and task.seq < self.retired_below.get(task.domain_name, 0):
            return Slot.retired(task)
        if slot is None:
            slot = self.slots[key] = Slot(key, task.rank_dim)
            self.unfinished[slot] = None
            failed = self.failed_at.get(slot.domain)
            if failed is not None and failed.seq < slot.seq:
                self._set_error(slot, self._behind(failed))
        return slot

    def _behind(self, failed: Slot) -> HcclError:
        return behind(failed.error, failed.seq, failed.domain)

    def _fail(self, slot: Slot, error: HcclError) -> None:
        """Under the lock: ``slot`` failed; so does every later slot of its domain."""
        if slot.error is not None:
            return
        self._set_error(slot, error)
        first = self.failed_at.get(slot.domain)
        if first is None or slot.seq < first.seq:
            self.failed_at[slot.domain] = slot
        for later in [s for s in self.unfinished if s.domain == slot.domain and s.seq > slot.seq]:
            self._set_error(later, self._behind(slot))
        self.blocker.progressed()

    def _set_error(self, slot: Slot, error: HcclError) -> None:
        slot.error = error
        self.pending.pop(slot, None)
        self.unfinished.pop(slot, None)
        self.unpoisoned.pop(slot, None)
        self._unpoison(slot)

    def _previous(self, slot: Slot) -> Slot | None:
        return self.slots.get((slot.domain, slot.seq - 1)) if slot.seq else None

    def _dep_slots(self, slot: Slot) -> list[Slot]:
        return [self._slot(dep) for task in slot.tasks.values() for dep in task.deps]

    def _ready(self, slot: Slot) -> bool:
        if slot.running or slot.error is not None or not slot.complete or slot.finished:
            return False
        if slot.not_committed(slot.done + 1):
            return False
        previous = self._previous(slot)
        if previous is not None and not previous.finished:
            return False
        deps = [dep for task in slot.tasks.values() for dep in task.deps]
        done, error = dependency_state(
            deps, lambda dep: self._slot(dep).error, lambda dep: self._slot(dep).finished
        )
        if error is not None:
            self._fail(slot, error)
        return done

    def _reached(self, slot: Slot, task: Task) -> bool:
        """Whether this rank's server has got to ``task``: every task it must follow finished."""
        previous = self._previous(slot)
        if previous is not None and not previous.finished:
            return False
        return all(self._slot(dep).finished for dep in task.deps)

    def _poison_reached(self) -> None:
        """Under the lock: poison committed rounds whose task the server has reached.

        From then on the server may write the receive blocks at any moment, so a
        kernel that reads them before Wait sees NaN / 0xFF. Earlier, the blocks
        may still be another task's input. In-place rounds are left alone.
        """
        for slot, per_rank in list(self.unpoisoned.items()):
            if slot.error is not None:
                del self.unpoisoned[slot]
                continue
            for rank, rounds in list(per_rank.items()):
                task = slot.tasks[rank]
                if not self._reached(slot, task):
                    continue
                for r in rounds:
                    if r >= slot.done and not in_place(task, r):
                        nbytes = layout.round_blocks(task, "recv", r).total()
                        self.lane.run_sized(nbytes, self._poison, slot, task, r)
                del per_rank[rank]
            if not per_rank:
                del self.unpoisoned[slot]

    def _poison(self, slot: Slot, task: Task, round_idx: int) -> None:
        """Poison one round's receive blocks, keeping their bytes to restore if it never runs."""
        blocks = layout.round_blocks(task, "recv", round_idx)
        data = task.recv.alloc.data
        saved = [
            (start, data[start : start + size].clone())
            for start, size in zip(blocks.starts.tolist(), blocks.sizes.tolist(), strict=True)
            if size
        ]
        self.poisoned.setdefault(slot, []).append((round_idx, saved, task))
        poison(task, round_idx)

    def _unpoison(self, slot: Slot, round_idx: int | None = None) -> None:
        """Under the lock: forget (a run round) or restore (a failed slot) poisoned bytes."""
        kept = []
        for r, saved, task in self.poisoned.pop(slot, []):
            if round_idx is not None and r != round_idx:
                kept.append((r, saved, task))
            elif round_idx is None:
                data = task.recv.alloc.data
                for start, raw in saved:
                    data[start : start + len(raw)].copy_(raw)
        if kept:
            self.poisoned[slot] = kept

    def _has_work(self) -> bool:
        return bool(self._pending_writes()) or any(self._ready(s) for s in list(self.pending))

    def _take_work(self) -> Job | None:
        if self.blocker.error is not None:
            return None
        write = self._write_job()
        if write is not None:
            return write
        for slot in list(self.pending):
            if self._ready(slot):
                slot.running = True
                return functools.partial(self._execute, slot)
        return None

    def _execute(self, slot: Slot) -> None:
        round_idx = slot.done
        tasks = [slot.tasks[r] for r in range(slot.rank_dim)]
        error = None
        started = now_us()
        try:
            nbytes = executor.round_bytes(tasks, round_idx)
            self.lane.run_sized(nbytes, executor.run_round, tasks, round_idx)
        except Exception as exc:  # noqa: BLE001 - reported to every waiting rank
            error = HcclError(
                f"round {round_idx} of {tasks[0].describe()} failed: {type(exc).__name__}: {exc}"
            )
        with self.blocker.cond:
            slot.running = False
            if error is not None:
                self._fail(slot, error)
            else:
                self._unpoison(slot, round_idx)
                slot.done += 1
                for task in tasks:
                    server_round(task, round_idx, started)
            if slot.finished:
                self.pending.pop(slot, None)
                self.unfinished.pop(slot, None)
            self._poison_reached()
            self.blocker.progressed()

    # -------------------------------------------------------- server protocol
    def submit(self, task: Task) -> None:
        with self.blocker.cond:
            self.blocker.raise_if_failed()
            slot = self._slot(task)
            slot.tasks[task.rank] = task
            counts = self.finalized.get((task.domain_name, task.launch), {})
            for rank, n_tasks in counts.items():
                if task.collective_index >= n_tasks:
                    self._fail(slot, count_mismatch(task, rank, n_tasks))
            if slot.complete:
                tasks = [slot.tasks[r] for r in range(slot.rank_dim)]
                error = mismatch(tasks) or shared_between_ranks(tasks)
                if error is not None:
                    self._fail(slot, error)
            self.blocker.progressed()

    def commit(self, task: Task, round_idx: int) -> None:
        with self.blocker.cond:
            self.blocker.raise_if_failed()
            slot = self._slot(task)
            slot.committed[task.rank] = round_idx + 1
            slot.clocks[(task.rank, round_idx)] = self._release(task.domain.ranks[task.rank])
            if slot.error is None and not slot.finished:
                self.pending[slot] = None
            if self.config.poison:
                self.unpoisoned.setdefault(slot, {}).setdefault(task.rank, []).append(round_idx)
                self._poison_reached()
            self.blocker.progressed()
        self.blocker.run_ready()

    def wait(self, task: Task, round_idx: int) -> None:
        with self.blocker.cond:
            slot = self._slot(task)
        self.blocker.wait_for(
            lambda: slot.done > round_idx or slot.error is not None,
            lambda: self._describe_wait(slot, task, round_idx),
        )
        if slot.error is not None and slot.done <= round_idx:
            raise error_for(slot.error, task, round_idx)
        self._ordered_after(slot, task, range(round_idx, round_idx + 1))
        # A round that ran is this rank's data, whatever failed elsewhere since: the rank
        # goes on and meets the failure at its next call that needs a peer.

    def finished(self, task: Task) -> int:
        self.blocker.settle()
        with self.blocker.cond:
            slot = self._slot(task)
            if slot.error is not None:
                raise error_for(slot.error, task, slot.done)
            done = slot.done
            if done < task.repeat:
                self.blocker.raise_if_failed()
        if done < task.repeat:
            self.blocker.poll(
                slot.key,
                (done, False),
                lambda: f"{self._describe_wait(slot, task, done, verb='polls Query for')}",
                read=lambda: (slot.done, slot.error is not None),
            )
        self._ordered_after(slot, task, range(done))
        return done

    def _ordered_after(self, slot: Slot, task: Task, rounds: range) -> None:
        """``task``'s rank saw ``rounds`` of ``slot`` done: it is ordered after every Commit."""
        clocks = [slot.clocks.get((r, k)) for k in rounds for r in range(slot.rank_dim)]
        self._acquire(task.domain.ranks[task.rank], clocks)

    def finalize(self, group: Group, rank: int, launch: int, n_tasks: int) -> None:
        """Domain rank ``rank`` finalized its kernel launch ``launch`` after ``n_tasks`` tasks.

        Every rank must prepare the same number of tasks per launch: a task of
        another rank beyond that count will never find a partner.
        """
        name = group.name
        self.flush_writes(name, rank)
        with self.blocker.cond:
            self.finalized.setdefault((name, launch), {})[rank] = n_tasks
            for slot in list(self.unfinished):
                if slot.domain != name or slot.complete:
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
        with self.blocker.cond:
            returned = self.launch_returns.setdefault((name, launch), set())
            returned.add(rank)
            if len(returned) < group.size:
                return
            del self.launch_returns[(name, launch)]
            self.finalized.pop((name, launch), None)
            seq = self.retired_below.get(name, 0)
            slot = self.slots.get((name, seq))
            while slot is not None and slot.finished and slot.error is None:
                if slot.sample().launch > launch:
                    break
                del self.slots[slot.key]
                seq += 1
                slot = self.slots.get((name, seq))
            self.retired_below[name] = seq

    def exchange(self, group: Group, rank: int, op: str, payload: bytes) -> list[bytes]:
        """Hand the payload to the other ranks directly (see :mod:`.rendezvous`)."""
        return self.exchanges.exchange(group, rank, op, payload)

    def window_mapped(self, window: WindowAllocation) -> None:
        super().window_mapped(window)
        self.flag_windows[window.data.untyped_storage().data_ptr()] = window

    @contextlib.contextmanager
    def core_scope(self, rank: int) -> Iterator[None]:
        """Around one core's run: the race check's watch, and flag polls once windows exist.

        The poll watch (a torch dispatch mode, innermost so that a poll that blocks
        holds none of the race check's locks) costs every torch operation a Python
        call: a core enters it when it first asks for a window, or at its start
        when windows exist already.
        """
        with super().core_scope(rank), contextlib.ExitStack() as stack:
            _cores.scope = (stack, rank)
            if self._window_store():
                self._watch_polls()
            try:
                yield
            finally:
                _cores.scope = None

    def _watch_polls(self) -> None:
        """Enter the flag-poll watch in the calling core (once per core run)."""
        scope = getattr(_cores, "scope", None)
        if scope is not None:
            stack, rank = scope
            _cores.scope = None
            stack.enter_context(
                FlagPolls(self.flag_windows, self.blocker, rank, self.serial._is_owned)
            )

    def window(self, domain: str, rank: int, kind: str) -> WindowAllocation:
        found = super().window(domain, rank, kind)
        self._watch_polls()
        return found

    def close(self) -> None:
        """End the server's lane thread."""
        self.lane.close()

    def rank_returned(self, rank: int) -> None:
        """Global rank ``rank`` returned from its function: it will never submit or commit again."""
        with self.blocker.cond:
            self.returned.add(rank)
            if self.blocker.error is not None and len(self.returned) == self.world_size:
                for slot in list(self.poisoned):
                    self._unpoison(slot)
            self.blocker.progressed()
