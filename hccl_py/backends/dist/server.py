"""The torch.distributed server, and the backends' base class (gloo: :mod:`.gloo`, hccl: :mod:`.hccl`).

Each rank is a process. Its :class:`DistServer` keeps one process group per
domain (the world group and every ``hp.new_group``) and one thread per domain
that runs the domain's tasks in Prepare order, as the AI CPU server reads its
message queue: round ``r`` of a task starts once this rank committed it, the
previous round of the domain finished and every InterHcclGroupSync dependency
finished. Each round becomes process-group calls (:mod:`.rounds`), run in the
thread that waits for it when the domain's thread has not started it. With task
checks on (``HCCL_PY_CHECK_TASKS``, the default on gloo) ranks compare their
tasks' descriptors (:mod:`.descriptors`, exchanged over the domain's process group) before
the first round, as the emulator does.
"""

from __future__ import annotations

import contextlib
import inspect
import json
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from ...core.config import Config
from ...core.constants import DEFAULT_WORLD_SIZE
from ...core.errors import HcclError
from ...core.group import Group, group_mismatch, group_missing
from ...core.plain import json_or
from ...core.task import Task
from ...launcher import store as kv
from ...launcher.msrun import serve_scheduler
from ...launcher.spawn import spawn_world
from ...launcher.spec import spec_from_env, under_launcher
from ...sanitizer.poison import restore
from ...server.agreement import error_for, wait_head
from ...server.blocking import Blocker
from ...server.ordering import sync_text
from ...server.protocol import Backend, Server
from ...server.stalls import KernelStalls
from ...server.task_queue import TaskBoard
from . import rounds as pg_rounds
from .descriptors import exchanged_key, final_key, final_value, returned_key, returned_value
from .domain_queue import DomainQueue
from .exchanges import ExchangeMeetings
from .session import Session, session_for, spawned_rank
from .settings import Settings

#: Floor of the process groups' timeout: creating a group waits for every rank to arrive,
#: which a small ``hp.run(timeout=...)`` must not break (Waits still time out after ``timeout``).
MIN_PG_TIMEOUT_S = 30.0
#: Seconds a process group's own timeout comes after hccl_py's (the clearer report wins).
PG_MARGIN_S = 30.0

_NEW_GROUP_SORTS = "sort_ranks" in inspect.signature(dist.new_group).parameters


class DistServer(ExchangeMeetings, Server):
    """One rank's server: process groups per domain, one thread per domain."""

    ops = frozenset(pg_rounds.ROUNDS)

    @property
    def no_windows(self) -> str:
        """Why this backend has no windows (named at the first window call)."""
        return (
            f"the {self.backend_name} backend does not map communication windows: the NPU "
            "communicator owns them and hccl_py has no access to them; run window kernels on "
            "the emulator (backend='emu') or on gloo processes of one host"
        )

    def __init__(self, session: Session, run: int, config: Config, blocker: Blocker) -> None:
        self.session = session
        self.run = run
        self.config = config
        self.blocker = blocker
        self.cond = blocker.cond
        #: ``cond``'s lock, entered directly (Condition's __enter__ is a Python call around it).
        self.lock = blocker.lock
        self.backend_name = session.backend.name
        self.settings = Settings.read(session.backend.check_tasks, session.backend.exact)
        self.reduction = pg_rounds.Reduction(
            self.settings.exact, session.backend.widen, session.backend.drops_nan
        )
        self.late = config.schedule == "late"
        #: hccl_py calls of kernel threads go through it: a kernel stuck in its own code ends.
        self.serial = self.stalls = KernelStalls(config.timeout)
        self.domains: dict[str, pg_rounds.Domain | None] = {}
        self.queues: dict[str, DomainQueue] = {}
        #: The queues of single-rank domains (no thread: waiting threads run their rounds),
        #: replaced, never changed, when one is added; every wait asks for them.
        self.local_queues: tuple[DomainQueue, ...] = ()
        #: This rank's tasks of every domain: the task-queue state machine the emulator uses.
        self.board = TaskBoard(
            late=self.late, local=True, restore=restore, on_failure=self.cond.notify_all
        )
        self.groups: list[dist.ProcessGroup] = []
        #: This run's keys in the store, and those this rank set (deleted after the run).
        self.store = kv.scoped(session.store, f"run{run}/")
        self._keys: dict[str, None] = {}
        blocker.has_work = self._has_work
        blocker.take_work = self._take_local
        blocker.job_ready = self._job_ready

    @property
    def carry_first_round(self) -> bool:
        """Whether data rides in the exchanges (``HCCL_PY_CARRY_FIRST_ROUND``, :attr:`settings`)."""
        return self.settings.carry

    # ------------------------------------------------------------ domains
    def start(self, world: Group) -> None:
        """Create the world domain's process group (every rank calls this at the start of a run)
        and compare this rank's settings with rank 0's (:func:`.settings.check_same`)."""
        self.on_new_group(world)
        rank, timeout = self.session.rank, self.group_timeout()
        self.settings.check_same(rank, self.store, self.publish, timeout, self.session.check_abort)

    def core_scope(self, rank: int, who: str = "") -> contextlib.AbstractContextManager:
        """One core's run of a kernel: stopped if it runs its own code for the timeout."""
        return self.stalls.kernel(rank, who)

    def kernel_call(self) -> None:
        """A kernel thread's CrossCore flag call: its clock of own code starts again."""
        self.stalls.touch()

    def group_timeout(self) -> float:
        """Seconds creating a domain may wait for its ranks (``timeout``, at least 30 s)."""
        return max(self.config.timeout, MIN_PG_TIMEOUT_S)

    def on_new_group(self, group: Group) -> None:
        """Create ``group``'s process group; every rank of the world must call it, in the same order."""
        self._same_group_on_every_rank(group)
        ranks = list(group.ranks)
        kwargs: dict[str, Any] = {"sort_ranks": False} if _NEW_GROUP_SORTS else {}
        backend = self.session.backend
        pg = dist.new_group(
            ranks,
            # later than hccl_py's own timeout, whose report names who is missing
            timeout=kv.seconds(backend.pg_timeout(self.group_timeout() + PG_MARGIN_S)),
            backend=backend.pg_backend,
            **kwargs,
        )
        if group.rank_of(self.session.rank) is None:
            self.domains[group.name] = None
            return
        self.groups.append(pg)
        order = np.array([ranks.index(r) for r in dist.get_process_group_ranks(pg)])
        self.domains[group.name] = pg_rounds.Domain(pg, order, self.reduction)

    def _same_group_on_every_rank(self, group: Group) -> None:
        """Every rank publishes each group it creates and waits for every other rank's group at
        that position, then compares: an HcclMismatchError for a group of other ranks, or for a
        rank that returned from its function without creating one, before torch.distributed
        waits in new_group until the timeout. Position 0 is the world, which :meth:`start`
        creates on every rank."""
        n, rank, mine = len(self.domains), self.session.rank, list(group.ranks)
        if n == 0:
            return
        keys = [f"group/{n}/{r}" for r in range(self.session.world_size)]
        self.publish(keys[rank], json.dumps(mine).encode())

        def interrupt() -> None:
            self.session.check_abort()
            # returned first: a rank publishes its group before it returns, so a rank seen
            # returned whose group is missing never made it (the other order races)
            gone = [r for r in range(len(keys)) if self.store.check([returned_key(r)])]
            gone = [r for r in gone if not self.store.check([keys[r]])]
            if gone:
                self.session.check_abort(wait=0.2)  # one that failed: that is the report
                raise group_missing(
                    rank, n, mine, gone, "returned from their function without creating it"
                )

        kv.wait_keys(
            self.store,
            keys,
            self.group_timeout(),
            lambda missing: str(
                group_missing(rank, n, mine, [keys.index(k) for k in missing], "did not create it")
            ),
            interrupt,
        )
        for other, raw in enumerate(kv.get_all(self.store, keys)):
            theirs = json_or(raw, "unreadable")
            if theirs != mine:
                raise group_mismatch(rank, n, mine, other, theirs)

    def _queue(self, task: Task) -> DomainQueue:
        """Under the lock: the queue of the task's domain (its thread starts on first use)."""
        queue = self.queues.get(task.domain.name)  # asked several times per task
        return self._queue_of(task.domain) if queue is None else queue

    def _queue_of(self, group: Group) -> DomainQueue:
        """Under the lock: the queue of ``group`` (its thread starts on first use)."""
        name = group.name
        queue = self.queues.get(name)
        if queue is None:
            dom = self.domains.get(name)
            if dom is None:
                raise HcclError(
                    f"domain {name} has no process group on rank {self.session.rank}: create "
                    "groups with hp.new_group on every rank, in the same order",
                    rank=self.session.rank,
                    domain=name,
                )
            queue = self.queues[name] = DomainQueue(self, group, dom)
            if queue.group.size > 1:
                queue.thread.start()
            else:
                self.local_queues = (*self.local_queues, queue)
        return queue

    def _has_work(self) -> bool:
        return any(q.running or q.ready() for q in self.queues.values())

    def _release(self) -> None:
        """Late schedule: let every committed round start (a thread waits or queries)."""
        if self.late:
            self.board.release()
            self.cond.notify_all()

    def _run_local(self) -> None:
        """Run the ready rounds of single-rank domains in this thread (they need no peer)."""
        for queue in self.local_queues:
            queue.drain()

    def _job_ready(self) -> bool:
        """Blocker hook, under the lock: whether a waiting thread has a single-rank round to run."""
        return False if not self.local_queues else self._take_local() is not None

    def _take_local(self) -> Callable[[], None] | None:
        """Blocker hook, under the lock: a waiting thread runs a ready single-rank round."""
        for queue in self.local_queues:
            if queue.ready():
                return queue.drain
        return None

    # -------------------------------------------------------- server protocol
    def submit(self, task: Task) -> None:
        if task.op not in self.ops:
            raise self.unsupported(task, self.backend_name)
        with self.lock:
            self._queue(task)  # (its thread starts on first use)
            self.board.submit(task)
            self.cond.notify_all()

    def submit_commit(self, task: Task, rounds: range) -> None:  # (one lock, one wake-up)
        if task.op not in self.ops:
            raise self.unsupported(task, self.backend_name)
        self.commit(task, rounds, submit=True)

    def checks(self, task: Task) -> bool:
        """Whether ``task``'s descriptor is compared with the peers' ones before its first round.

        Not the tasks of framework collectives: every rank's arguments were
        already compared in their exchange, and their tasks follow from them.
        """
        return self.settings.check_tasks and task.caller is None

    def finalize(self, group: Group, rank: int, launch: int | None, n_tasks: int) -> None:
        """Publish how many tasks this rank prepared in kernel launch ``launch`` of the domain."""
        if self.settings.check_tasks and launch is not None:
            self.publish(final_key(group.name, rank), final_value(launch, n_tasks))

    def launch_returned(self, group: Group, rank: int, launch: int) -> None:
        """This rank returned from kernel launch ``launch``: forget its finished tasks."""
        with self.lock:
            queue = self.queues.get(group.name)
            if queue is not None:
                queue.retire(launch)

    def rank_returned(self, rank: int) -> None:
        """This rank returned from its function: it prepares no more tasks in this run. The
        value names, per domain, the last task whose exchange it took part in: a peer still
        waiting in that exchange (its last collective, when round 0 rode in it) must not
        take it for absent."""
        with self.lock:
            joined = {name: q.joined for name, q in self.queues.items() if q.joined >= 0}
            exchanged = {name: q.exchanged for name, q in self.queues.items()}
        self.publish(exchanged_key(rank), json.dumps(exchanged).encode())
        self.publish(returned_key(rank), returned_value(joined))

    def publish(self, key: str, value: bytes) -> None:
        """Set ``key`` in the run's store (deleted after the run)."""
        self.store.set(key, value)
        self._keys[key] = None

    def forget(self) -> None:
        """Delete this rank's task descriptors (call once no rank of the run checks any more)."""
        for key in self._keys:
            with contextlib.suppress(Exception):
                self.store.delete_key(key)
        self._keys.clear()

    def commit(self, task: Task, rounds: range, submit: bool = False) -> None:
        with self.lock:
            queue = self._queue(task)
            if submit:  # (submit_commit; a task without Commits wakes nobody to work)
                self.board.submit(task)
            # a single-rank domain's rounds run in this thread after each Commit: one at a time
            one_by_one = len(rounds) > 1 and not self.late and queue in self.local_queues
            if not one_by_one:
                queue.commit(task, rounds)
                self.cond.notify_all()
        if one_by_one:
            for round_idx in rounds:
                self.commit(task, range(round_idx, round_idx + 1))
        elif not self.late:
            self._run_local()

    def wait(self, task: Task, round_idx: int) -> None:
        with self.lock:
            queue = self._queue(task)
            self._release()
        self._run_local()
        queue.run_until((task.seq, round_idx))
        tasks, seq, repeat = queue.queue, task.seq, task.repeat
        # the round this thread just ran, or another did: no wait (and no poll to end)
        with self.lock:
            if not self.blocker.spinning and tasks.rounds_done(seq, repeat) > round_idx:
                return
        self.blocker.wait_for(
            # asked at every notification while this thread sleeps (each idle core of a launch)
            lambda: tasks.rounds_done(seq, repeat) > round_idx or tasks.failure_at(seq) is not None,
            lambda: self._describe_wait(queue, task, round_idx),
        )
        with self.lock:
            if tasks.rounds_done(seq, repeat) <= round_idx:  # then it failed
                error = tasks.failure_at(seq)
                if error is not None:
                    raise error_for(error, task, round_idx)

    def finished(self, task: Task) -> int:
        with self.lock:
            queue = self._queue(task)
            self._release()
        self._run_local()
        with self.lock:
            error = queue.failure_at(task.seq)
            done = queue.rounds_done(task.seq, task.repeat)
        if error is not None:
            raise error_for(error, task, done)
        if done < task.repeat:
            self.blocker.poll(
                (task.domain_name, task.seq),
                done,
                lambda: self._describe_wait(queue, task, done, "polls Query for"),
            )
        return done

    def close(self) -> None:
        """Stop the domain threads and destroy this run's process groups."""
        with self.lock:
            for queue in self.queues.values():
                queue.stopping = True
            self.cond.notify_all()
        stuck = False
        for queue in self.queues.values():
            if queue.thread.ident is not None:
                queue.thread.join(timeout=1.0)
                stuck |= queue.thread.is_alive()
        if stuck:
            return
        with self.lock:
            self.board.restore_all()  # the rounds still poisoned never ran
        for pg in self.groups:
            with contextlib.suppress(Exception):  # best effort: the process is leaving anyway
                dist.destroy_process_group(pg)

    # ------------------------------------------------------------- reports
    def _describe_wait(
        self, queue: DomainQueue, task: Task, r: int, verb: str = "waits for"
    ) -> str:
        return f"{wait_head(task, r, verb)}: {self._why(queue, task, r)}"

    def _why(self, queue: DomainQueue, task: Task, r: int) -> str:
        """Under the lock: why round ``r`` of ``task`` has not finished on this rank."""
        seq = task.seq
        error = queue.failure_at(seq)
        if error is not None:
            return f"failed: {error.reason}"
        position = queue.queue.get(seq)
        if position is None or queue.rounds_done(seq, task.repeat) > r:
            return "finished"
        why = self.board.why(position, r)
        if why.kind == "not committed":
            return f"this rank has not committed round {r}"
        if why.kind in ("earlier round", "earlier task"):
            return queue.comes_first()
        if queue.running:
            return queue.activity()
        if why.kind == "dependency":
            return sync_text(why.dep)
        return "waiting for an InterHcclGroupSync dependency"


class DistBackend(Backend):
    """Runs one rank per process over torch.distributed; see the module docstring."""

    name = ""
    pg_backend = ""
    #: Defaults of the task check and of the reduction mode (see CHECK_ENV, REDUCE_ENV).
    check_tasks = True
    exact = True
    widen: dict[torch.dtype, torch.dtype] = {}
    #: Whether the process group's MAX/MIN drop NaN (native reductions then propagate it aside).
    drops_nan = False
    #: Whether its process groups complete a call's future when they queue it on a device
    #: stream, before the device ran it (waits then ask ``Work.is_completed``).
    device_async = False

    def pg_timeout(self, seconds: float) -> float:
        """The time limit to give a process group, for hccl_py's own limit of ``seconds``
        (which reports first, naming who is missing)."""
        return seconds

    def bind_device(self, local_rank: int) -> torch.device:
        """This process's device."""
        return torch.device("cpu")

    def thread_binder(self, device: torch.device) -> Callable[[], None] | None:
        """What a new thread of this rank calls first (make ``device`` current), if anything."""
        return None

    def make_server(self, session: Session, run: int, config: Config, blocker: Blocker) -> Server:
        """The server of run ``run`` of this process's session."""
        return self.server_class()(session, run, config, blocker)

    def server_class(self) -> type[Server]:
        """The server class of this backend."""
        return DistServer

    def run(
        self, fn: Callable[..., Any], args: tuple, world_size: int | None, config: Config
    ) -> list[Any]:
        """Under a launcher: run ``fn`` as this process's rank; otherwise start the world."""
        if not under_launcher():
            n = DEFAULT_WORLD_SIZE if world_size is None else world_size  # hp.run checked it
            return spawn_world(self.name, fn, args, n, config, spawned_rank)
        spec = spec_from_env()
        if spec.role == "scheduler":
            raise SystemExit(serve_scheduler(spec))
        if world_size is not None and int(world_size) != spec.world_size:
            raise ValueError(
                f"hp.run(world_size={world_size}) but the {spec.launcher} launcher started "
                f"{spec.world_size} ranks"
            )
        return session_for(spec, self, config.timeout).run(fn, args, config, gather=True)
