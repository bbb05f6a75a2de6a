"""Waiting for a process-group call while looking for peers that will never join it."""

from __future__ import annotations

import contextlib
import itertools
import json
import threading
import time
from collections.abc import Callable
from typing import Any

import torch.distributed as dist

from ...core.errors import HcclDeadlockError

#: Calls whose waiter stopped waiting (a peer failed or left, the timeout) while the process
#: group still held them. When the peer's process ends such a call fails; if that happens while
#: this process shuts down, gloo aborts it (rc 134): :func:`settle_abandoned` lets them fail first.
_ABANDONED: list[tuple[dist.Work, threading.Event]] = []


def watch_work(
    work: dist.Work,
    every: float,
    look: Callable[[], None],
    failed: Callable[[], None],
    waiting: Waiting | None = None,
) -> None:
    """Block until ``work`` finished; meanwhile call ``look()`` every ``every`` seconds.

    ``look`` raises to stop waiting (an abort, an absent peer, the timeout); a failed
    ``work`` raises its own error, after ``failed()`` (which may raise a clearer one:
    the peer whose process ended). A done callback wakes the thread, so the wait works
    for every process group (gloo's ``wait(timeout)`` would too, but cost the same CPU
    per launch in a measurement, within this machine's noise). ``waiting`` puts the wait
    on its board once it lasts, and raises when the waits on the board deadlock.
    """
    finished = threading.Event()
    work.get_future().add_done_callback(lambda _: finished.set())
    try:
        while not finished.wait(every):
            look()
            if waiting is not None:
                waiting.look()
    except BaseException:  # a wait that failed stays on the board, marked, until the rank's
        _ABANDONED.append((work, finished))  # next wait: a timeout report does not name it
        if waiting is not None:
            waiting.fail()
        raise
    if waiting is not None:
        waiting.close()
    try:
        work.wait()
    except Exception:
        failed()
        raise


def settle_abandoned(within_s: float) -> None:
    """Wait up to ``within_s`` seconds in all for the calls this process stopped waiting for to
    end (they fail once their peers' processes end), and take their errors: called when the
    process leaves the world, after every rank's outcome was exchanged."""
    deadline = time.monotonic() + within_s
    while _ABANDONED:
        work, finished = _ABANDONED.pop()
        if finished.wait(max(0.0, deadline - time.monotonic())):
            with contextlib.suppress(Exception):  # the peer is gone: that was reported
                work.wait()


#: Looks of a wait between two readings of the board (with :data:`.session.LOOK_S`, 0.5 s).
READ_EVERY = 10


class WaitBoard:
    """Where the ranks of a world say, in its store, which collective they wait in.

    A rank that has waited a while in a framework collective's argument exchange (which
    blocks the rank's own thread: a kernel task's descriptor check runs on its domain's
    thread while the kernel goes on, so it is not on the board) publishes it under its key,
    with an id of its own, and overwrites it with an empty record when the wait ends (a
    key is never deleted: a peer between its check and its get would block in the get until
    the key came back); a wait that failed stays, marked failed, until the rank's next wait
    (records name their run: a later run does not read them). Two readings that find the
    same ids show waits that went on between them: if each of those ranks waits for
    domain members that wait in another domain of the set, none of them can go on, and
    each reports an :class:`HcclDeadlockError` naming every wait (as the emulator does)
    instead of waiting until the run's timeout.
    """

    def __init__(self, store: Any, rank: int, world_size: int) -> None:
        self.store = store
        self.rank = rank
        self.world_size = world_size
        #: The session's current run: records of other runs are not read.
        self.run = 0
        self._ids = itertools.count()

    def key(self, rank: int) -> str:
        """The store key of ``rank``'s wait."""
        return f"waiting/{rank}"

    def clear(self, record: bytes = b"{}") -> None:
        """Take this rank's wait off the board: overwritten, never deleted (a peer between its
        check and its get of the key would block in the store's get until the key came back)."""
        with contextlib.suppress(Exception):  # best effort: the store may be gone
            self.store.set(self.key(self.rank), record)

    def absent(self, domain: str, ranks: tuple[int, ...]) -> str:
        """For a timeout's report: the ranks of ``domain`` that do not wait in it (one whose
        wait there failed is not named: its own report says why)."""
        waits = self.read()
        away = [r for r in ranks if r != self.rank and waits.get(r, {}).get("domain") != domain]
        return f"; ranks {away} do not wait in any collective of it" if away else ""

    def read(self) -> dict[int, dict]:
        """Every rank's published wait (anything but hccl_py's record is left out)."""
        found = {}
        for rank in range(self.world_size):
            key = self.key(rank)
            with contextlib.suppress(Exception):  # a wait that ended while we read it
                if self.store.check([key]):
                    record = json.loads(self.store.get(key))
                    if _well_formed(record) and record.get("run") == self.run:
                        found[rank] = record
        return found


def _well_formed(record: Any) -> bool:
    """Whether ``record`` is a wait as :class:`Waiting` publishes it."""
    return (
        isinstance(record, dict)
        and isinstance(record.get("domain"), str)
        and isinstance(record.get("op"), str)
        and isinstance(record.get("ranks"), list)
        and all(type(r) is int for r in record["ranks"])
    )


def _missing(waits: dict[int, dict], rank: int) -> list[int]:
    """The members of ``rank``'s domain that do not wait in it."""
    domain = waits[rank]["domain"]
    return [m for m in waits[rank]["ranks"] if waits.get(m, {}).get("domain") != domain]


def stuck(waits: dict[int, dict]) -> list[int]:
    """The ranks of ``waits`` (rank -> its wait: ``domain``, ``ranks``) none of which can go
    on: each waits for members of its domain that wait in another domain, all of them in
    the set (the largest such set; empty when some wait can still end). A wait that failed
    (``failed``: the rank went on, or is leaving) blocks nobody."""
    held = {rank for rank, wait in waits.items() if not wait.get("failed")}
    changed = True
    while changed:
        changed = False
        for rank in sorted(held):
            missing = _missing(waits, rank)
            if not missing or any(m not in held for m in missing):
                held.discard(rank)
                changed = True
    return sorted(held)


class Waiting:
    """One rank's wait in an exchange of ``domain`` (its ``ranks``), for ``op``."""

    def __init__(self, board: WaitBoard, op: str, domain: str, ranks: tuple[int, ...]) -> None:
        self.board = board
        self.record = {"op": op, "domain": domain, "ranks": list(ranks)}
        self.looks = 0
        self.posted = False
        self.last: dict[int, dict] | None = None

    def look(self) -> None:
        """Publish the wait on the first look; every :data:`READ_EVERY` looks read the board
        and raise :class:`HcclDeadlockError` if this rank is in a set of stuck waits that
        two readings agree on."""
        board = self.board
        if not self.posted:
            self.record["id"], self.record["run"] = next(board._ids), board.run
            board.store.set(board.key(board.rank), json.dumps(self.record).encode())
            self.posted = True
        self.looks += 1
        if self.looks % READ_EVERY:
            return
        now = board.read()
        before, self.last = self.last, now
        if before is None:
            return
        same = {r: w for r, w in now.items() if before.get(r) == w}
        held = stuck(same)
        if board.rank in held:
            raise HcclDeadlockError(_deadlock(same, held))

    def close(self) -> None:
        """The wait ended: take it off the board."""
        if self.posted:
            self.board.clear()
            self.posted = False

    def fail(self) -> None:
        """The wait failed (an abort, an absent peer, the timeout): it stays on the board as
        failed, which blocks nobody (:func:`stuck`) and is not absent from its domain."""
        if self.posted:
            record = {**self.record, "failed": True}
            self.board.clear(json.dumps(record).encode())
            self.posted = False


def _deadlock(waits: dict[int, dict], held: list[int]) -> str:
    """The report of the stuck ``held`` ranks' ``waits``."""
    parts = []
    for rank in held:
        wait = waits[rank]
        parts.append(
            f"rank {rank} waits in {wait['op']} on domain {wait['domain']} for ranks "
            f"{_missing(waits, rank)}"
        )
    return (
        "; ".join(parts) + ": each waits for ranks that wait in another domain, so none can go "
        "on (every rank of a domain calls its collectives in the same order, and no rank "
        "waits in one domain for a rank that waits in another)"
    )
