"""Direct exchanges between the ranks of an emulated world (they share one process).

Framework collectives start by exchanging what every rank was asked to do.
Processes do that with two AllGather tasks; emulated ranks hand their bytes
to each other here, which costs a dictionary entry instead of two tasks.
A rank that never arrives is reported like any other wait: a deadlock when
every rank waits, a timeout otherwise, the peer's error when it failed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from hccl_py.blocking import Blocker
from hccl_py.context import Group

Clock = tuple[int, ...] | None


class Rendezvous:
    """The open exchanges of one world: (domain, k) -> domain rank -> payload."""

    def __init__(
        self,
        blocker: Blocker,
        release: Callable[[int], Clock],
        acquire: Callable[[int, Iterable[Clock]], None],
    ) -> None:
        self.blocker = blocker
        #: The window race check's clocks: an exchange orders every member after the others.
        self.release, self.acquire = release, acquire
        self.clocks: dict[tuple[str, int], dict[int, Clock]] = {}
        self.boxes: dict[tuple[str, int], dict[int, bytes]] = {}
        self.readers: dict[tuple[str, int], int] = {}
        self.next: dict[tuple[str, int], int] = {}

    def exchange(self, group: Group, rank: int, op: str, payload: bytes) -> list[bytes]:
        """Domain rank ``rank``'s next exchange in ``group``: every member's payload, in order."""
        cond = self.blocker.cond
        with cond:
            k = self.next.get((group.name, rank), 0)
            self.next[(group.name, rank)] = k + 1
            key = (group.name, k)
            box = self.boxes.setdefault(key, {})
            box[rank] = payload
            self.clocks.setdefault(key, {})[rank] = self.release(group.ranks[rank])
            self.blocker.progressed()

        def missing() -> list[int]:
            return [group.ranks[i] for i in range(group.size) if i not in box]

        self.blocker.wait_for(
            lambda: len(box) == group.size,
            lambda: (
                f"rank {group.ranks[rank]} waits in {op} (framework collective #{k} of "
                f"{group.name}) for ranks {missing()}, which have not called it"
            ),
        )
        with cond:
            result = [box[i] for i in range(group.size)]
            clocks = list(self.clocks[key].values())
            self.readers[key] = self.readers.get(key, 0) + 1
            if self.readers[key] == group.size:
                del self.boxes[key], self.readers[key], self.clocks[key]
        self.acquire(group.ranks[rank], clocks)
        return result
