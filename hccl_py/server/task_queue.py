"""The domain task-queue state machine that every server runs its tasks with.

The AI CPU server reads one message queue per domain, in Prepare order. Both the emulator
(one world, every rank's task of a collective at one position) and the torch.distributed
server (one rank, its own tasks only) keep the same state here, so they cannot drift apart:

- per domain (:class:`DomainTasks`) the sequence of task positions; per position
  (:class:`Position`) the task of each tracked domain rank, the rounds each rank committed,
  the rounds done, whether one is running, and the failure;
- the transitions: :meth:`TaskBoard.submit`, :meth:`TaskBoard.commit`, :meth:`TaskBoard.claim`
  (the next runnable round: Prepare order, every tracked rank committed it, under the late
  schedule released it, and every InterHcclGroupSync dependency finished),
  :meth:`TaskBoard.finish`, :meth:`TaskBoard.fail` (the failure spreads to every later
  position of the domain, and to a task that depends on it once the server reaches it) and
  :meth:`DomainTasks.retire` (forget a kernel launch's finished positions); each that can
  change what :meth:`TaskBoard.ready` answers moves :attr:`TaskBoard.version` on;
- the queries: :meth:`TaskBoard.why` (why a round is not done: which ranks have not submitted
  or committed, which earlier position or dependency), :meth:`DomainTasks.rounds_done` and
  :meth:`DomainTasks.failure_at`;
- the poison rule: a committed round is poisoned once the server reached its task
  (:meth:`TaskBoard.poison_due`); the bytes a server saved are forgotten when the round
  runs and handed back to be restored when it never will (its position failed:
  :meth:`TaskBoard.fail`; the run ended with it unrun: :meth:`TaskBoard.restore_all`).

Pure state: no threads, no locks (the caller holds its server's lock), no bytes moved. The
texts of the reports stay with each server.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from ..core.errors import HcclError
from ..core.task import PendingDep, Task, resolved
from .ordering import behind, dependency_state
from .positions import DomainTasks, Position, Why


class TaskBoard:
    """Every domain's task queue of one server; the caller holds the server's lock.

    ``late``: a round may start only once released (:meth:`release`), as the torch.distributed
    server's late schedule does; the emulator's scheduler decides that itself (False).
    """

    def __init__(
        self,
        late: bool = False,
        position: type[Position] = Position,
        local: bool = False,
        restore: Callable[[Any], None] | None = None,
        on_failure: Callable[[], None] | None = None,
    ) -> None:
        self.late = late
        self.position_type = position
        #: Track only the submitting rank's task (one rank's server) instead of every rank's.
        self.local = local
        #: Called with what a poisoned round saved, once that round will never run.
        self.restore = restore
        #: Called after a failure spread (to wake the threads that wait).
        self.on_failure = on_failure
        self.domains: dict[str, DomainTasks] = {}
        #: Positions with a Commit that neither finished nor failed, oldest Commit first.
        self.pending: dict[Position, None] = {}
        #: Positions with committed rounds not poisoned yet, oldest first.
        self.unpoisoned: dict[Position, None] = {}
        #: Moves on at every transition: what :meth:`ready` answers changes only when it does.
        self.version = 0

    def domain(self, name: str, ranks: Iterable[int]) -> DomainTasks:
        """The queue of domain ``name``, tracking domain ranks ``ranks`` (created on first use)."""
        found = self.domains.get(name)
        if found is None:
            found = self.domains[name] = DomainTasks(name, ranks, self.position_type)
        return found

    def of(self, task: Task) -> DomainTasks:
        """The queue of ``task``'s domain (created on first use)."""
        found = self.domains.get(task.domain_name)
        if found is not None:
            return found
        ranks = (task.rank,) if self.local else range(task.rank_dim)
        return self.domain(task.domain_name, ranks)

    def position(self, task: Task) -> Position:
        """``task``'s position (a stand-in once retired); a known one without a call."""
        try:  # (every Commit and Wait asks)
            return self.domains[task.domain_name].positions[task.seq]
        except KeyError:
            return self.of(task).position(task)

    # ------------------------------------------------------------ transitions
    def submit(self, task: Task) -> Position:
        """Place ``task`` at its position."""
        self.version += 1
        position = self.position(task)
        position.add(task.rank, task)
        return position

    def commit(self, task: Task, rounds: range, poison: bool = False) -> Position:
        """Domain rank ``task.rank`` committed ``rounds``; ``poison``: remember them to poison."""
        self.version += 1
        position = self.position(task)
        position.committed[task.rank] = rounds.stop
        if position.error is None and not position.finished:
            self.pending[position] = None
        if poison:
            position.unpoisoned.setdefault(task.rank, []).extend(rounds)
            self.unpoisoned[position] = None
        return position

    def release(self) -> None:
        """Late schedule: every committed round may start."""
        self.version += 1
        for position in self.pending:
            position.released = dict(position.committed)

    def ready(self, position: Position) -> bool:
        """Whether the next round of ``position`` can start now; a failed dependency fails the
        position once it is otherwise runnable."""
        if position.running or position.error is not None or not position.complete:
            return False
        done = position.done
        if done >= position.repeat:
            return False
        counts = position.released if self.late else position.committed
        if len(counts) < len(position.ranks) or min(counts.values()) <= done:
            return False
        if not self.domains[position.domain].reached(position):
            return False
        done, error = self.deps_state(position.all_deps) if position.all_deps else (True, None)
        if error is not None:
            self.fail(position, error)
        return done

    def claim(self, positions: Iterable[Position] | None = None) -> Position | None:
        """The first of ``positions`` (default: the pending ones) whose round can start; it runs."""
        for position in list(self.pending if positions is None else positions):
            if self.ready(position):
                self.start(position)
                return position
        return None

    def start(self, position: Position) -> None:
        """The next round of ``position``, which :meth:`ready` found ready, runs now."""
        position.running = True
        self.version += 1

    def finish(self, position: Position, error: HcclError | None = None) -> None:
        """The claimed round of ``position`` ended (failed with ``error``)."""
        self.version += 1
        position.running = False
        if error is not None:
            self.fail(position, error)
            return
        position.poisoned.pop(position.done, None)
        position.done += 1
        position.finished = position.done >= position.repeat  # (complete: a round ran)
        if position.finished:
            self.pending.pop(position, None)

    def fail(self, position: Position, error: HcclError) -> None:
        """``position`` failed; so does every later unfinished position of its domain.

        The bytes of their poisoned rounds go back (:attr:`restore`): those rounds will never run.
        """
        if position.error is not None:
            return
        dom = self.domains[position.domain]
        if dom.failed is None or position.seq < dom.failed.seq:
            dom.failed = position
        self._set_error(position, error)
        for later in dom.unfinished():
            if later.seq > position.seq:
                self._set_error(later, behind(error, position.seq, dom.name))
        if self.on_failure is not None:
            self.on_failure()

    def _set_error(self, position: Position, error: HcclError) -> None:
        self.version += 1
        position.error = error
        self.pending.pop(position, None)
        self.unpoisoned.pop(position, None)
        position.unpoisoned.clear()
        self._give_back([position])

    # --------------------------------------------------------------- poison
    def poison_due(self) -> list[tuple[Position, Task, int]]:
        """The committed rounds to poison now: ``(position, task, round)``, each once.

        A round is due once the server reached its task (the earlier positions
        and the task's dependencies finished): from then on the server may
        write its receive blocks at any moment. Rounds that ran are dropped.
        """
        due = []
        for position in list(self.unpoisoned):
            if position.error is not None:
                position.unpoisoned.clear()
            elif self.domains[position.domain].reached(position):
                for rank, rounds in list(position.unpoisoned.items()):
                    task = position.tasks[rank]
                    if self.deps_state(task.deps)[0]:
                        due += [(position, task, r) for r in rounds if r >= position.done]
                        del position.unpoisoned[rank]
            if not position.unpoisoned:
                del self.unpoisoned[position]
        return due

    def poisoned(self, position: Position, round_idx: int, saved: Any) -> None:
        """The server poisoned ``round_idx`` of ``position`` and kept ``saved`` to restore."""
        position.poisoned.setdefault(round_idx, []).append(saved)

    def restore_all(self) -> None:
        """The run ended: no poisoned round that has not run yet ever will; restore them."""
        self._give_back([p for dom in self.domains.values() for p in dom.positions.values()])

    def _give_back(self, positions: list[Position]) -> None:
        for position in positions:
            saved = [one for rounds in position.poisoned.values() for one in rounds]
            position.poisoned.clear()
            if self.restore is not None:
                for one in saved:
                    self.restore(one)

    # --------------------------------------------------------------- queries
    def deps_state(self, deps: Iterable[Task]) -> tuple[bool, HcclError | None]:
        """``(all finished, error)`` of InterHcclGroupSync dependencies (:func:`dependency_state`)."""

        def failure(dep: Task) -> HcclError | None:
            dom = self.domains.get(dep.domain_name)
            return None if dom is None else dom.failure_at(dep.seq)

        return dependency_state(deps, failure, self._dep_done)

    def _dep_done(self, dep: Task | PendingDep) -> bool:
        """Whether every round of the InterHcclGroupSync dependency ``dep`` ran (prepared)."""
        dom = None if (task := resolved(dep)) is None else self.domains.get(task.domain_name)
        return dom is not None and dom.rounds_done(task.seq, task.repeat) >= task.repeat

    def why(self, position: Position, round_idx: int) -> Why:
        """Why round ``round_idx`` of ``position`` is not done (the first reason)."""
        if position.error is not None:
            return Why("failed", error=position.error)
        if position.done > round_idx:
            return Why("finished")
        if not position.complete:
            return Why("not submitted", tuple(position.not_submitted()))
        lagging = position.not_committed(round_idx + 1)
        if lagging:
            return Why("not committed", tuple(lagging))
        if position.done < round_idx:
            return Why("earlier round", position=position)
        dom = self.domains[position.domain]
        previous = dom.get(position.seq - 1)
        if previous is not None and not previous.finished:
            return Why("earlier task", position=previous)
        for dep in (dep for dep in position.all_deps if not self._dep_done(dep)):
            task, dom = resolved(dep), self.domains.get(dep.domain_name)
            return Why("dependency", position=task and dom and dom.get(task.seq), dep=dep)
        return Why("running" if position.running else "runnable")

    def unfinished(self) -> list[Position]:
        """Every domain's positions that neither finished nor failed, by (domain, seq)."""
        found = [p for dom in self.domains.values() for p in dom.unfinished()]
        return sorted(found, key=lambda p: p.key)
