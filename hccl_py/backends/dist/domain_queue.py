"""One domain's tasks on one rank of a torch.distributed world, run in Prepare order.

As the AI CPU server reads its message queue, a :class:`DomainQueue` runs
round ``r`` of a task once this rank committed it (late schedule: once
somebody waits for it), the previous round of the domain finished and every
InterHcclGroupSync dependency finished. A failed task fails every later task
of the domain. Those rules are the emulator's: the state lives in the
server's :class:`~hccl_py.server.task_queue.TaskBoard`, which tracks this
rank's tasks only (its peers' progress is the process group's business). With task checks on, the
first round of each task first compares its descriptor with the peers' ones,
exchanged over the domain's process group as a framework collective's
arguments are (:meth:`DomainQueue.exchange`), in Prepare order with its tasks;
:class:`.absentees.Absentees` names a peer that will never send one.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

import torch.distributed as dist

from ...core.config import Config
from ...core.errors import HcclError, HcclMismatchError, HcclPeerError
from ...core.group import Group
from ...core.task import Task
from ...sanitizer.poison import in_place, save_and_poison
from ...server.agreement import mismatch
from ...server.positions import DomainTasks, Position
from ...server.protocol import Outgoing
from ...server.task_queue import TaskBoard
from ...server.threads import WakeCondition
from ...trace.hooks import server_round
from ...trace.recorder import now_us
from . import first_round
from . import rounds as pg_rounds
from .absentees import PEER_REPORT_S, Absentees
from .descriptors import encode_descriptor, joined_key, left_before
from .session import Session
from .settings import CHECK_ENV

T = TypeVar("T")

#: What a process group says when a peer's process ended in the middle of an operation.
PEER_GONE = re.compile(r"closed by peer|reset by peer|broken pipe|connection refused", re.I)


class DistServer(Protocol):
    """What a domain queue needs of its rank's server (``hccl_py.backends.dist.server.DistServer``)."""

    backend_name: str
    blocker: Any
    board: TaskBoard
    carry_first_round: bool
    cond: WakeCondition
    lock: Any  # cond's lock, entered directly
    config: Config
    late: bool
    queues: dict[str, DomainQueue]
    session: Session
    store: Any

    def checks(self, task: Task) -> bool:
        """Whether ``task``'s descriptor is compared with the peers' ones."""
        ...


def poison_reached(board: TaskBoard) -> None:
    """Under the lock: poison the committed rounds whose task the server reached.

    The emulator's rule (:mod:`hccl_py.sanitizer.poison`): until then the
    receive blocks may still be an earlier task's input; the bytes are kept
    and put back if the round never runs.
    """
    if not board.unpoisoned:  # nothing committed waits to be poisoned (poisoning is off)
        return
    for position, task, r in board.poison_due():
        if not in_place(task, r):
            board.poisoned(position, r, save_and_poison(task, r))


class DomainQueue:
    """The tasks of one domain on this rank, run in Prepare order by one thread."""

    def __init__(self, server: DistServer, group: Group, dom: pg_rounds.Domain) -> None:
        self.server = server
        self.group = group
        self.dom = dom
        #: This rank's positions of the domain (the state machine shared with the emulator).
        rank = group.rank_of(server.session.rank)
        assert rank is not None, "a domain queue exists only on the domain's ranks"
        self.queue: DomainTasks = server.board.domain(group.name, (rank,))
        #: What the domain's thread (or a framework collective's exchange) does now, if anything.
        self.running = ""
        self.stopping = False
        #: The task whose descriptors this queue's thread is comparing, if any.
        self.comparing: Task | None = None
        #: The last task whose descriptor exchange this rank joined; the framework exchanges it joined.
        self.joined, self.exchanged = -1, 0
        self.rows = first_round.Rows()  # the width of the exchanges' rows
        #: The board version that :meth:`_look` read the next four at (-1: none yet).
        self._version = -1
        self._head: Position | None = None
        self._ready = False
        self._at_now = (0, 0)
        self._error: HcclError | None = None
        self.thread = threading.Thread(target=self._loop, name=f"hccl_py-{group.name}", daemon=True)

    # --------------------------------------------------------- under the lock
    def _look(self) -> None:
        """Under the lock: read the queue's head, whether its next round can start (a failed
        dependency fails it), :meth:`_at` and :attr:`error` into ``_head``, ``_ready``,
        ``_at_now`` and ``_error``.

        They change only at a transition of the board, which moves its version on
        (:attr:`~hccl_py.server.task_queue.TaskBoard.version`, as the emulator's server
        keeps its answer): read once per version, not at every notification and claim.
        A look during which the version moved (the head's dependency failed it) is not kept.
        """
        board = self.server.board
        version = board.version
        if self._version == version:
            return
        queue = self.queue
        head = self._head = queue.head()
        self._ready = head is not None and board.ready(head)
        self._at_now = (queue.next_seq, 0) if head is None else (head.seq, head.done)
        self._error = queue.first_failure()
        self._version = version if board.version == version else -1

    @property
    def seq(self) -> int:
        """The position the domain is at: its first unfinished task."""
        return self._at()[0]

    @property
    def round(self) -> int:
        """The next round of the task at :attr:`seq`."""
        return self._at()[1]

    def _at(self) -> tuple[int, int]:
        """``(seq, round)``: the domain's place in its queue."""
        self._look()
        return self._at_now

    @property
    def tasks(self) -> dict[int, Task]:
        """This rank's tasks by position (not retired)."""
        return {seq: p.sample() for seq, p in self.queue.positions.items() if p.tasks}

    @property
    def error(self) -> HcclError | None:
        """The error of the domain's first failed task, if any."""
        self._look()
        return self._error

    def commit(self, task: Task, rounds: range) -> None:
        """Under the lock: this rank committed ``rounds`` of ``task``."""
        self.server.board.commit(task, rounds, self.server.config.poison)
        poison_reached(self.server.board)

    def ready(self) -> bool:
        """Whether the thread can start its next round now (a failed dependency fails it)."""
        if self.running:  # asked at every notification: no look at the queue while a round runs
            return False
        self._look()
        return self._ready

    def rounds_done(self, seq: int, repeat: int) -> int:
        """How many rounds of task ``seq`` (of ``repeat`` rounds) finished."""
        return self.queue.rounds_done(seq, repeat)

    def comes_first(self) -> str:
        """Under the lock: the report of the round this domain must run before a later one."""
        head = self.queue.head()
        what = f"handle {head.sample().handle}, {head.sample().describe()}" if head else ""
        state = self.running or (
            "not committed by this rank"
            if head is None or self.server.board.why(head, head.done).kind == "not committed"
            else "waiting for an InterHcclGroupSync dependency"
        )
        return (
            f"the domain runs its tasks in Prepare order and round {self.round} of task "
            f"#{self.seq} ({what or 'not prepared yet'}) comes first: {state}"
        )

    def retire(self, launch: int) -> None:
        """Under the lock: forget the finished tasks of kernel launches up to ``launch`` (this
        rank returned from that launch, so nobody here waits for them; buffers released)."""
        self.queue.retire(launch)

    def own_report(self) -> HcclMismatchError | None:
        """This domain's first failure where it is this rank's own finding in an exchange (its
        peers called something else): a peer's report may have stopped the rank's waits first."""
        failed = self.queue.failed
        error = None if failed is None else failed.error
        return error if isinstance(error, HcclMismatchError) else None

    def failure_at(self, seq: int) -> HcclError | None:
        """The error that task ``seq`` of this domain ends with, if the domain failed at or before it."""
        return self.queue.failure_at(seq)

    # ------------------------------------------------------------ running rounds
    def claim(self) -> tuple[Task, int] | None:
        """Under the lock: take the next round if it can start now (the queue is then running)."""
        if self.stopping or not self.ready():
            return None
        head = self._head  # ready, at the board's version :meth:`_look` read: it can start
        self.server.board.start(head)
        self.running = f"running round {head.done} on the process group"
        return head.sample(), head.done

    def execute(self, task: Task, r: int) -> HcclError | None:
        """Outside the lock: run one claimed round; return its error, if any."""
        try:
            carried = None
            if r == 0 and self.server.checks(task):
                self.running = f"comparing task descriptors of task #{task.seq}"
                self.comparing = task
                try:
                    carried = self._check(task)
                finally:
                    self.comparing = None
                self.running = f"running round {r} on the process group"
            started = now_us()
            if carried is None:
                pg_rounds.run_round(task, r, self.dom)
            else:
                first_round.run(task, *carried, self.dom)
            server_round(task, r, started)
        except HcclError as exc:
            return exc
        except Exception as exc:  # noqa: BLE001 - reported to every waiting thread
            return self._failure(f"round {r} of {task.describe()}", exc)
        return None

    def _failure(self, what: str, exc: Exception) -> HcclError:
        """The error to report for ``exc``, raised by the process group during ``what``."""
        text = f"{what} failed on {self.server.backend_name}: {type(exc).__name__}: {exc}"
        if not PEER_GONE.search(str(exc)):
            return HcclError(text)
        try:  # a peer's process ended: say which rank failed, once someone reports it
            self.server.session.check_abort(wait=PEER_REPORT_S)
        except HcclPeerError as peer:
            return peer
        return HcclPeerError(f"the process of a peer in domain {self.group.name} ended: {text}")

    def exchange(
        self, op: str, payload: Outgoing, pieces: first_round.Pieces | None = None
    ) -> tuple[list[bytes | memoryview], bool]:
        """Every domain rank's ``payload`` and whether every rank's ``pieces`` for this rank came
        (:meth:`.Rows.exchange`), after every task prepared so far in the domain (run here
        when nobody else runs them): no round uses the domain's process group meanwhile."""
        cond, lock = self.server.cond, self.server.lock

        def idle() -> bool:
            if self.error is not None:
                return True
            position = self.queue.positions.get(self.seq)
            return (position is None or not position.tasks) and not self.running

        def start() -> bool:
            """Whether the exchange starts now, asked under the lock (a failed domain raises)."""
            with lock:
                if not idle():
                    return False
                if self.error is not None:
                    raise self.error
                self.running = f"exchanging the arguments of {op}"
                return True

        # an idle domain has no round that could start (its position, if any, holds no task)
        while not start():
            self.run_until(None)
            if start():
                break
            self.server.blocker.wait_for(
                lambda: idle() or self.ready(),
                f"rank {self.server.session.rank} in {op} waits for the earlier tasks of domain "
                f"{self.group.name}",
            )
        try:
            wait, device = self._waiter(op), self.server.session.device
            return self.calling(self.rows.exchange, self.dom, payload, pieces, device, wait)
        except HcclError:
            raise
        except Exception as exc:  # noqa: BLE001 - named like a failed round
            raise self._failure(f"the exchange of {op}'s arguments", exc) from None
        finally:
            with lock:
                self.running = ""
                cond.notify_all()

    def _waiter(self, op: str) -> pg_rounds.Waiter:
        """Blocks on the call of ``op``'s exchange (see :meth:`Session.await_peers`, :func:`left_before`)."""
        store, group, number = self.server.store, self.group, self.exchanged
        self.exchanged += 1

        def wait(work: dist.Work) -> None:
            self.server.session.await_peers(
                work, group.ranks, op, group.name, self.server.config.timeout,
                lambda r: left_before(store, r, group.name, number),
            )  # fmt: skip

        return wait

    def finish(self, task: Task, r: int, error: HcclError | None) -> None:
        """Under the lock: record the outcome of a claimed round and move on."""
        self.running = ""
        position = self.queue.get(task.seq)
        assert position is not None and position.done == r
        self.server.board.finish(position, error)
        poison_reached(self.server.board)
        self.server.cond.notify_all()

    def drain(self) -> None:
        """Run every round that can start now in the calling thread.

        Single-rank domains need no peer and have no thread: like the
        emulator's eager schedule, a Commit (late: a Wait or Query) runs the
        round at once, and any waiting thread runs rounds that become ready.
        """
        self.run_until(None)

    def run_until(self, upto: tuple[int, int] | None) -> None:
        """Run, in the calling thread, the rounds that can start now, up to round ``upto``.

        ``upto`` is ``(seq, round)``; None runs every ready round. A thread
        that waits for a round runs it itself when the domain's thread has not
        started it yet, so a round costs no hand-off between threads; the
        domain's thread still runs the rounds that nobody waits for (Commit
        starts a round, as on the NPU).
        """
        lock = self.server.lock
        while True:
            with lock:
                if self.running:  # another thread runs a round (claim() would refuse)
                    return
                if upto is not None and self._at() > upto:
                    return
                job = self.claim()
            if job is None:
                return
            error = self.calling(self.execute, *job)
            with lock:
                self.finish(*job, error)

    def calling(self, call: Callable[..., T], *args: Any) -> T:
        """``call(*args)`` (this domain's work: a round, an exchange), which a thread that runs
        user code runs: on the blocker's record of such calls meanwhile, for reports."""
        calls, me = self.server.blocker.calling, threading.get_ident()
        calls[me] = self._in_call
        try:
            return call(*args)
        finally:
            calls.pop(me, None)

    def _in_call(self) -> str:
        """Under the lock: the report's line of a thread in this domain's work (:meth:`calling`)."""
        rank, name = self.server.session.rank, self.group.name
        if len(self.group.ranks) == 1:
            return f"rank {rank} runs the work of domain {name} (its only rank): {self.running}"
        return f"rank {rank} waits for the process group of domain {name}: {self.activity()}"

    def activity(self) -> str:
        """Under the lock: what this domain's running work (:attr:`running`) waits for."""
        me = self.server.session.rank
        peers = [r for r in self.group.ranks if r != me]
        absent = self.undescribed()
        if absent:
            return (
                f"{self.running} with ranks {peers}: ranks {absent} have not joined it (their "
                "descriptor never arrived: they have not committed its first round, prepared "
                "fewer tasks, or are slow or stuck elsewhere)"
            )
        text = f"{self.running or 'a call'} with ranks {peers}"
        if self.comparing is not None or not self.running.startswith("running round"):
            return text  # (a task check or a framework collective's exchange)
        return (
            f"{text} (a rank that prepared a different task sequence would hang "
            f"{self.server.backend_name} here; {CHECK_ENV}=1 detects that)"
        )

    def _loop(self) -> None:
        if self.server.session.thread_init is not None:
            self.server.session.thread_init()
        cond, lock = self.server.cond, self.server.lock
        while True:
            with lock:
                job = self.claim()
                while job is None:
                    if self.stopping or self.error is not None:
                        return
                    cond.wait_until(self._due)
                    job = self.claim()
            error = self.execute(*job)
            with lock:
                self.finish(*job, error)

    def _due(self) -> bool:
        """Under the lock: whether this queue's thread has something to do (else it sleeps on)."""
        if self.stopping:
            return True
        self._look()  # ready() and error in one look (a round running: not ready)
        return (not self.running and self._ready) or self._error is not None

    def undescribed(self) -> list[int]:
        """Global ranks that have not joined the descriptor exchange of the task being compared.

        A rank marks that it joined once it has waited :data:`LOOK_S` in it
        (:func:`.descriptors.joined_key`); asks the store.
        """
        task = self.comparing
        if task is None:
            return []
        store = self.server.store
        return [
            self.group.ranks[i]
            for i in range(task.rank_dim)
            if i != task.rank and not store.check([joined_key(task.domain_name, task.seq, i)])
        ]

    def _check(self, task: Task) -> tuple[list[Task], list[memoryview], bool] | None:
        """Compare this task with the other ranks' tasks at the same position (strict mode).

        The descriptors travel in one all-gather on the domain's process group;
        while it waits for a peer, :class:`Absentees` looks for one that will
        never join (it finalized after fewer tasks, returned, or is gone).
        Returns every rank's task and round-0 bytes if all sent them (:mod:`.first_round`).
        """
        absentees = Absentees(self.server, task, self.undescribed)
        mine, carry = encode_descriptor(task), self.server.carry_first_round
        payloads, scattered = first_round.exchange(
            task, mine, self.rows, self.dom, carry, self.server.session.device, absentees.wait
        )
        self.joined = task.seq
        tasks, rows, longest = first_round.received(task, mine, payloads)
        error = None if tasks is None else mismatch(tasks)  # (None: every rank sent mine)
        if error is not None:
            raise error
        self.rows.agreed(tasks or [task], longest, self.dom, carry)
        return None if rows is None else (tasks or [task] * task.rank_dim, rows, scattered)
