"""Spotting a peer that will never join a task's descriptor exchange (:class:`Absentees`)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any, Protocol

import torch.distributed as dist

from ...core.config import Config
from ...core.errors import HcclDeadlockError, HcclPeerError, HcclTimeoutError
from ...core.task import Task
from ...server.agreement import count_mismatch, global_rank
from .descriptors import final_key, joined_key, read_final, read_joined
from .session import LOOK_S, Session
from .waits import watch_work

#: Seconds to wait for the report of the rank whose process ended, to name it.
PEER_REPORT_S = 0.2


class RankServer(Protocol):
    """What :class:`Absentees` reads of its rank's server (``.server.DistServer``)."""

    config: Config
    session: Session
    store: Any


class Absentees:
    """Spots, while a task's descriptor exchange waits, a peer that will never join it.

    That peer finalized its kernel launch after fewer tasks (a count mismatch,
    reported as the emulator does), returned from its function, or its process
    is gone. Once it has waited :data:`LOOK_S`, this rank marks that it joined
    (:func:`.descriptors.joined_key`), for its peers' reports.
    """

    def __init__(
        self, server: RankServer, task: Task, undescribed: Callable[[], list[int]]
    ) -> None:
        self.server = server
        self.store = server.store
        self.task = task
        #: The peers that have not joined the exchange yet (:meth:`.DomainQueue.undescribed`).
        self.undescribed = undescribed
        self.marked = ""

    def wait(self, work: dist.Work) -> None:
        """Block until ``work`` (the exchange) finished; raise if a peer will never join it."""
        timeout = self.server.config.timeout
        deadline = time.monotonic() + timeout

        def look() -> None:
            if not self.marked:
                self.marked = joined_key(self.task.domain_name, self.task.seq, self.task.rank)
                self.store.set(self.marked, b"1")
            self.server.session.check_abort()
            self.check()
            if time.monotonic() >= deadline:
                who = self.undescribed()
                raise HcclTimeoutError(
                    f"timed out after {timeout:g} s: {self.waiting(who)}. State of the world:\n"
                    f"{self.server.blocker.state()}"
                )

        try:  # a failed process group: because a peer's process ended? then name it
            watch_work(
                work, LOOK_S, look, self.check,
                device_async=self.server.session.backend.device_async,
            )  # fmt: skip
        finally:
            if self.marked:
                with contextlib.suppress(Exception):  # best effort, as in DistServer.forget
                    self.store.delete_key(self.marked)

    def waiting(self, who: list[int]) -> str:
        """The timeout's report: this rank waits for ``who`` to prepare the task."""
        task = self.task
        return (
            f"rank {global_rank(task)} waits for the other ranks' task #{task.seq} of domain "
            f"{task.domain_name} (its own: handle {task.handle}, {task.describe()}): ranks "
            f"{who} have not joined its task check (they have not committed its first round, "
            "prepared fewer tasks, or are stuck elsewhere)"
        )

    def check(self) -> None:
        """Raise if a peer that has not joined the exchange never will."""
        task = self.task
        for i in range(task.rank_dim):
            if i == task.rank or self.store.check([joined_key(task.domain_name, task.seq, i)]):
                continue
            final = final_key(task.domain_name, i)
            last = read_final(self.store, final)
            if last is not None and last[0] == task.launch and task.collective_index >= last[1]:
                raise count_mismatch(task, i, last[1])
            peer = task.domain.ranks[i]
            joined = read_joined(self.store, peer, task.domain_name)
            returned = joined is not None
            if returned and task.seq <= joined:
                continue  # it took part and returned: the exchange ends without it
            how = "returned from its function" if returned else self.server.session.peers.gone(peer)
            if how is None:
                continue
            # did it fail? then say so (a launcher may still be reporting a killed rank)
            self.server.session.check_abort(wait=0.0 if returned else PEER_REPORT_S)
            where = (
                f"task #{task.seq} of domain {task.domain_name}, which rank {global_rank(task)} "
                f"prepared (handle {task.handle}, {task.describe()})"
            )
            if returned:
                raise HcclDeadlockError(
                    f"rank {peer} returned from its function without preparing {where}: "
                    "it would wait forever"
                )
            raise HcclPeerError(f"rank {peer} {how} before preparing {where}")
