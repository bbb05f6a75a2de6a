"""Direct meetings of the ranks of an emulated world (they share one process).

Framework collectives start by exchanging what every rank was asked to do.
Processes do that with two AllGather tasks; emulated ranks hand their bytes
to each other here, which costs a dictionary entry instead of two tasks.
A rank that never arrives is reported like any other wait: a deadlock when
every rank waits, a timeout otherwise, the peer's error when it failed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from hccl_py.core.group import Group
from hccl_py.server.blocking import Blocker
from hccl_py.server.protocol import Met, Outgoing

Clock = tuple[int, ...] | None


class _Box(dict[int, tuple[bytes, Clock]]):
    """The arrivals of one open meeting: domain rank -> (payload, clock).

    ``full`` (every member arrived) is kept at each arrival: the members' wait asks it at every
    switch, where counting the arrivals each time cost a call."""

    full = False


class Rendezvous:
    """The open meetings of one world: (domain, key) -> domain rank -> payload.

    Framework exchanges (numbered per rank) and AlltoAllvWrite's Wait (keyed by
    its task) both meet here; every member leaves ordered after the others'
    arrival for the window race check.
    """

    def __init__(
        self,
        blocker: Blocker,
        release: Callable[[int], Clock] | None = None,
        acquire: Callable[[int, Iterable[Clock]], None] | None = None,
    ) -> None:
        self.blocker = blocker
        #: The window race check's clocks: a meeting orders every member after the others
        #: (None without the check: no call at every meeting).
        self.release, self.acquire = release, acquire
        self.boxes: dict[tuple[str, object], _Box] = {}
        #: Per open meeting whose members began to leave: the payloads every member gets (one
        #: list, :meth:`meet`) and how many members left.
        self.readers: dict[tuple[str, object], tuple[Met, int]] = {}
        self.next: dict[tuple[str, int], int] = {}

    def exchange(self, group: Group, rank: int, op: str, payload: Outgoing) -> list[bytes]:
        """Domain rank ``rank``'s next exchange in ``group``: every member's payload, in order
        (joined into bytes: the members read each other's after they left, when a rank's data
        may have changed)."""
        with self.blocker.lock:  # (the condition's lock, entered without its Python __enter__)
            k = self.next.get((group.name, rank), 0)
            self.next[(group.name, rank)] = k + 1

        def why(missing: list[int]) -> str:
            return (
                f"rank {group.ranks[rank]} waits in {op} (framework collective #{k} of "
                f"{group.name}) for ranks {missing}, which have not called it"
            )

        return self.meet(group, rank, k, why, bytes(payload))

    def meet(
        self,
        group: Group,
        rank: int,
        key: object,
        why: Callable[[list[int]], str],
        payload: bytes = b"",
        also: Callable[[], bool] | None = None,
    ) -> list[bytes]:
        """Block until every member of ``group`` arrived at ``key`` (and ``also()`` holds).

        ``why(missing global ranks)`` says what the rank waits for in a report.
        Returns the members' payloads in domain-rank order: one list, the same object for every
        member (what one member reads from it serves the others; nobody may change it).
        """
        lock = self.blocker.lock  # (the condition's, entered without its Python __enter__)
        slot = (group.name, key)
        size = group.size  # read once: the test below runs at every switch while it waits
        with lock:
            box = self.boxes.setdefault(slot, _Box())
            box[rank] = (payload, self.release and self.release(group.ranks[rank]))
            box.full = len(box) == size
            self.blocker.progressed()

        def missing() -> list[int]:
            return [group.ranks[i] for i in range(size) if i not in box]

        self.blocker.wait_for(
            lambda: box.full and (also is None or also()),
            lambda: why(missing()),
        )
        with lock:
            read = self.readers.get(slot)
            if read is None:  # the first member to leave: one list of payloads for every member
                read = self.readers[slot] = (Met([box[i][0] for i in range(size)]), 0)
            payloads, count = read
            if count + 1 == size:
                del self.boxes[slot], self.readers[slot]
            else:
                self.readers[slot] = (payloads, count + 1)
        if self.acquire is not None:
            self.acquire(group.ranks[rank], [box[i][1] for i in range(size)])
        return payloads
