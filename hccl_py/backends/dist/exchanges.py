"""The framework exchanges of a :class:`~.server.DistServer`: the server protocol's
:class:`~hccl_py.server.protocol.Meetings` over each domain's process group.

A framework collective's argument exchange is the domain's next exchange, run by
its :class:`~.domain_queue.DomainQueue` after the tasks prepared before it. How it
travels (the width of its all-gather rows, or the all-to-all a previous call
predicted, :mod:`.predicted`) is the same on every rank: every rank asks for it
alike, from what the previous exchange gave every rank.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from ...core.group import Group
from ...server.protocol import EXCHANGE, EXCHANGE_ROOM_BYTES, Meetings, Outgoing, Payload, Pieces

if TYPE_CHECKING:
    from . import rounds as pg_rounds
    from .domain_queue import DomainQueue
    from .first_round import Rows


class ExchangeMeetings(Meetings):
    """:class:`~hccl_py.server.protocol.Meetings` at :data:`EXCHANGE`, over process groups."""

    domains: dict[str, pg_rounds.Domain | None]
    cond: threading.Condition
    lock: Any  # cond's lock
    carry_first_round: bool

    def _queue_of(self, group: Group) -> DomainQueue:
        raise NotImplementedError

    def _release(self) -> None:
        raise NotImplementedError

    def meet(
        self, group: Group, rank: int, key: str, what: str, payload: Outgoing = b""
    ) -> list[Payload] | None:
        """A framework exchange: every domain rank's ``payload``, one all-gather on its group (or
        the all-to-all it was predicted as, :meth:`predict`).

        None (the two AllGather tasks of any server) for a group without a process
        group here; a meeting over windows is refused (this server has none).
        """
        if key != EXCHANGE:
            return super().meet(group, rank, key, what, payload)
        got = self.meet_pieces(group, rank, what, payload, None)
        return None if got is None else got[0]

    def meet_pieces(
        self, group: Group, rank: int, what: str, payload: Outgoing, pieces: Pieces | None
    ) -> tuple[list[Payload], bool] | None:
        """:meth:`meet` at :data:`EXCHANGE`, with this rank's pieces for each peer (group rank
        order) where the exchange was predicted as one all-to-all (:meth:`.Rows.exchange`)."""
        if group.size == 1:
            return [bytes(payload)], False
        if self.domains.get(group.name) is None:
            return None
        with self.lock:
            queue = self._queue_of(group)
            self._release()
        self.stalls.touch()  # a framework collective: an hccl_py call, however short
        try:
            return queue.exchange(what, payload, pieces)
        finally:
            self.stalls.touch()

    def _rows(self, group: Group) -> Rows | None:
        """How ``group``'s next exchange travels (None: one rank, no process group here, or
        ``HCCL_PY_CARRY_FIRST_ROUND=0``: its rows stay narrow)."""
        if not self.carry_first_round or group.size == 1 or self.domains.get(group.name) is None:
            return None
        with self.lock:
            return self._queue_of(group).rows

    def room(self, group: Group) -> int:
        """The width of ``group``'s next exchange rows (every payload when it has one rank;
        none without a process group here, or with ``HCCL_PY_CARRY_FIRST_ROUND=0``)."""
        if self.carry_first_round and group.size == 1:
            return EXCHANGE_ROOM_BYTES
        rows = self._rows(group)
        return 0 if rows is None else rows.width

    def exact_reductions(self, group: Group) -> bool:
        """Whether ``group``'s reductions are exact here (``HCCL_PY_REDUCE``; one rank: yes)."""
        dom = self.domains.get(group.name)
        return group.size == 1 or (dom is not None and dom.reduction.exact)

    def widen(self, group: Group, need: int) -> None:
        """``group``'s next exchange rows as wide as ``need`` bytes ask (:meth:`.Rows.widen`)."""
        rows = self._rows(group)
        if rows is not None:
            with self.lock:
                rows.widen(need)

    def predict(self, group: Group, need: int) -> None:
        """``group``'s next exchange as one all-to-all of ``need``-byte blocks
        (:meth:`.Rows.predict`)."""
        rows = self._rows(group)
        if rows is not None:
            with self.lock:
                rows.predict(need)
