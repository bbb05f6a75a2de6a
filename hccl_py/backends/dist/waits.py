"""Waiting for a process-group call while looking for peers that will never join it."""

from __future__ import annotations

import contextlib
import itertools
import json
import threading
import time
from collections.abc import Callable
from functools import partial
from queue import Empty, SimpleQueue
from typing import Any

import torch.distributed as dist

from ...core.errors import HcclDeadlockError, HcclPeerError
from ...server.latch import Latch

#: Calls whose waiter stopped waiting (a peer failed or left, the timeout) while the process
#: group still held them. When the peer's process ends such a call fails; if that happens while
#: this process shuts down, gloo aborts it (rc 134): :func:`settle_abandoned` lets them fail first.
_ABANDONED: list[tuple[dist.Work, Latch]] = []


#: How often a wait asks a device process group whether its call finished (first, at most).
DEVICE_POLL_S = (0.0001, 0.005)
#: How long a call whose peer failed may still take to bring its data (read before stopping).
PEER_DATA_S = 0.5


def watch_work(
    work: dist.Work,
    every: float,
    look: Callable[[], None],
    failed: Callable[[], None],
    waiting: Waiting | None = None,
    device_async: bool = False,
) -> None:
    """Block until ``work`` finished; meanwhile call ``look()`` every ``every`` seconds.

    ``look`` raises to stop waiting (an abort, an absent peer, the timeout), except where
    it reports a peer's failure and ``work`` still ends within :data:`PEER_DATA_S`: the
    caller then reads its data (its own check of it names what it found); a failed
    ``work`` raises its own error, after ``failed()`` (which may raise a clearer one:
    the peer whose process ended). A done callback on the call's future wakes the thread:
    a :class:`queue.SimpleQueue`'s ``put``, C code that gloo's thread runs without a Python
    frame, where a Python function that set a :class:`~hccl_py.server.latch.Latch` cost
    about 45 us more per call on 2 ranks (the call's own ``wait(timeout)``, which spares gloo's
    thread the GIL, costs 1% to 7% less per call, but its ``Operation timed out!`` error
    raises the resident high-water mark by about 2.6 MiB the first time a call lasts longer
    than ``every``: pages of torch's libraries that the C++ exception touches;
    docs/performance.md); a call that finished already (asked once) needs none.
    ``device_async``: the process group completes a call's future when it queues the call on a
    device stream (torch_npu's HCCL), so the wait asks ``work.is_completed()`` instead, which
    reports the device's end. ``waiting`` puts the wait on its board once it lasts, and raises when the
    waits on the board deadlock.
    """
    if device_async or not work.is_completed():
        _watch(work, every, look, waiting, device_async)
    if waiting is not None:
        waiting.close()
    try:
        work.wait()
    except Exception:
        failed()
        raise


def finishes_within(work: dist.Work, seconds: float) -> bool:
    """Whether ``work`` completes within ``seconds`` (a failed call counts as done): asked
    :data:`DEVICE_POLL_S` apart, the pause doubling from the first to the second."""
    deadline = time.monotonic() + seconds
    pause = DEVICE_POLL_S[0]
    while not work.is_completed():
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(pause, left))
        pause = min(2 * pause, DEVICE_POLL_S[1])
    return True


def _watch(
    work: dist.Work,
    every: float,
    look: Callable[[], None],
    waiting: Waiting | None,
    device_async: bool,
) -> None:
    """Block until ``work`` is done (``device_async``: the device ran it), calling
    ``look()`` (and ``waiting.look()``) every ``every`` seconds meanwhile (:func:`watch_work`)."""
    if device_async:
        queued = Latch()
        work.get_future().add_done_callback(lambda _: queued.set())
        done = _device_done(work, queued)
    else:
        ended: SimpleQueue = SimpleQueue()
        work.get_future().add_done_callback(ended.put)
        done = partial(_ended_within, ended)
    try:
        while not done(every):
            try:
                look()
            except HcclPeerError:  # a peer failed: a call whose data comes now is read first
                if not finishes_within(work, PEER_DATA_S):
                    raise
                break
            if waiting is not None:
                waiting.look()
    except BaseException:  # a wait that failed stays on the board, marked, until the rank's
        finished = Latch()  # next wait: a timeout report does not name it
        work.get_future().add_done_callback(lambda _: finished.set())
        _ABANDONED.append((work, finished))
        if waiting is not None:
            waiting.fail()
        raise


def _ended_within(ended: SimpleQueue, within: float) -> bool:
    """Whether the call whose future's done callback puts into ``ended`` ended within
    ``within`` seconds (done or failed: its ``wait()`` says which)."""
    try:
        ended.get(timeout=within)
    except Empty:
        return False
    return True


def _device_done(work: dist.Work, queued: Latch) -> Callable[[float], bool]:
    """Whether the device finished ``work`` within a given number of seconds (polled)."""

    def done(within: float) -> bool:
        deadline = time.monotonic() + within
        return queued.wait(within) and finishes_within(work, deadline - time.monotonic())

    return done


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
    """Where the ranks of a world say, in its store, which collectives they wait in.

    A wait that has lasted a while in a framework collective's argument exchange goes on
    its rank's record (one key per rank, the list of its current waits, rewritten by the
    rank as waits start and end; a key is never deleted: a peer between its check and its
    get would block in the get until the key came back). A wait that failed stays on the
    list, marked failed, until the rank's next wait; a wait of a kernel core is marked as
    one; records name their run. Two readings that find a rank's list unchanged show its
    waits went on between them. A rank whose only wait is its own thread's (not a core's,
    not failed: the rank can do nothing else) and whose domain's missing members are all
    such ranks waiting in other domains of the set, can never go on: each of them reports
    an :class:`HcclDeadlockError` naming every wait (as the emulator does) instead of
    waiting until the run's timeout. (A kernel task's descriptor check runs on its
    domain's thread while the kernel goes on: it is not on the board.)
    """

    def __init__(self, store: Any, rank: int, world_size: int) -> None:
        self.store = store
        self.rank = rank
        self.world_size = world_size
        self.run = 0
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self._waits: dict[int, dict] = {}  # this rank's current waits, by id

    def key(self, rank: int) -> str:
        """The store key of ``rank``'s record."""
        return f"waiting/{rank}"

    def start_run(self, run: int) -> None:
        """A new run of the session: its waits so far are forgotten."""
        with self._lock:
            self.run, self._waits = run, {}
            self._publish()

    def post(self, record: dict) -> int:
        """Put a wait on this rank's record (its failed ones go); its id."""
        with self._lock:
            self._waits = {i: w for i, w in self._waits.items() if not w.get("failed")}
            wait_id = next(self._ids)
            self._waits[wait_id] = record
            self._publish()
            return wait_id

    def end(self, wait_id: int, failed: bool) -> None:
        """A wait ended (``failed``: it stays, marked, which blocks nobody)."""
        with self._lock:
            if failed:
                self._waits[wait_id] = {**self._waits[wait_id], "failed": True}
            else:
                self._waits.pop(wait_id, None)
            self._publish()

    def _publish(self) -> None:
        record = {"run": self.run, "waits": list(self._waits.values())}
        with contextlib.suppress(Exception):  # best effort: the store may be gone
            self.store.set(self.key(self.rank), json.dumps(record).encode())

    def absent(self, domain: str, ranks: tuple[int, ...]) -> str:
        """For a timeout's report: the ranks of ``domain`` with no wait in it (one whose wait
        there failed is not named: its own report says why)."""
        lists = self.read()
        away = [r for r in ranks if r != self.rank and not _waits_in(lists, r, domain)]
        return f"; ranks {away} do not wait in any collective of it" if away else ""

    def read(self) -> dict[int, list[dict]]:
        """Every rank's waits of this run (anything but hccl_py's record is left out)."""
        found = {}
        for rank in range(self.world_size):
            key = self.key(rank)
            with contextlib.suppress(Exception):  # a store gone with the job
                if self.store.check([key]):
                    record = json.loads(self.store.get(key))
                    if _well_formed(record) and record["run"] == self.run:
                        found[rank] = record["waits"]
        return found


def _well_formed(record: Any) -> bool:
    """Whether ``record`` is a rank's record as :class:`WaitBoard` publishes it."""
    return (
        isinstance(record, dict)
        and type(record.get("run")) is int
        and isinstance(record.get("waits"), list)
        and all(
            isinstance(w, dict)
            and isinstance(w.get("domain"), str)
            and isinstance(w.get("op"), str)
            and isinstance(w.get("ranks"), list)
            and all(type(r) is int for r in w["ranks"])
            for w in record["waits"]
        )
    )


def _waits_in(lists: dict[int, list[dict]], rank: int, domain: str) -> bool:
    """Whether ``rank`` waits (in any way) in a collective of ``domain``."""
    return any(w["domain"] == domain for w in lists.get(rank, ()))


def _missing(lists: dict[int, list[dict]], wait: dict) -> list[int]:
    """The members of ``wait``'s domain (``rank``'s wait) that do not wait in it."""
    return [m for m in wait["ranks"] if not _waits_in(lists, m, wait["domain"])]


def _blocked(lists: dict[int, list[dict]]) -> dict[int, dict]:
    """The ranks whose only wait is their own thread's (not a core's, not failed)."""
    return {
        r: ws[0]
        for r, ws in lists.items()
        if len(ws) == 1 and not ws[0].get("failed") and not ws[0].get("core")
    }


def stuck(lists: dict[int, list[dict]]) -> list[int]:
    """The ranks of ``lists`` (rank -> its waits: ``domain``, ``ranks``) none of which can go
    on: each is blocked in one wait (:func:`_blocked`) for members of its domain that are
    blocked in other domains of the set (the largest such set; empty when some wait can
    still end)."""
    blocked = _blocked(lists)
    held = set(blocked)
    changed = True
    while changed:
        changed = False
        for rank in sorted(held):
            missing = _missing(lists, blocked[rank])
            if not missing or any(m not in held for m in missing):
                held.discard(rank)
                changed = True
    return sorted(held)


class Waiting:
    """One wait of this rank in an exchange of ``domain`` (its ``ranks``), for ``op``;
    ``core``: a kernel core's (the rank has other threads that may go on)."""

    def __init__(
        self, board: WaitBoard, op: str, domain: str, ranks: tuple[int, ...], core: bool = False
    ) -> None:
        self.board = board
        self.record = {"op": op, "domain": domain, "ranks": list(ranks), "core": core}
        self.looks = 0
        self.id: int | None = None
        self.last: dict[int, list[dict]] | None = None

    def look(self) -> None:
        """Post the wait on the first look; every :data:`READ_EVERY` looks read the board
        and raise :class:`HcclDeadlockError` if this rank is in a set of stuck waits that
        two readings agree on."""
        board = self.board
        if self.id is None:
            self.id = board.post(self.record)
        self.looks += 1
        if self.looks % READ_EVERY:
            return
        now = board.read()
        before, self.last = self.last, now
        if before is None:
            return
        same = {r: ws for r, ws in now.items() if before.get(r) == ws}
        held = stuck(same)
        if board.rank in held:
            raise HcclDeadlockError(_deadlock(same, held))

    def close(self) -> None:
        """The wait ended: off the board."""
        if self.id is not None:
            self.board.end(self.id, failed=False)
            self.id = None

    def fail(self) -> None:
        """The wait failed (an abort, an absent peer, the timeout): it stays on the board as
        failed, which blocks nobody (:func:`stuck`) and is not absent from its domain."""
        if self.id is not None:
            self.board.end(self.id, failed=True)
            self.id = None


def _deadlock(lists: dict[int, list[dict]], held: list[int]) -> str:
    """The report of the stuck ``held`` ranks' waits."""
    blocked = _blocked(lists)
    parts = [
        f"rank {r} waits in {blocked[r]['op']} on domain {blocked[r]['domain']} for ranks "
        f"{_missing(lists, blocked[r])}"
        for r in held
    ]
    return (
        "; ".join(parts) + ": each waits for ranks that wait in another domain, so none can go "
        "on (every rank of a domain calls its collectives in the same order, and no rank "
        "waits in one domain for a rank that waits in another)"
    )
