"""What one rank did, as timeline events: every Hccl call, every round the server ran.

A :class:`Recorder` exists only in runs that asked for a trace, a summary or
a layout picture (``hp.run(..., trace=, summary=)``); otherwise every hook
below is one dictionary lookup that finds nothing. Events are plain dicts in
the Chrome trace format (``ph``, ``ts`` and ``dur`` in microseconds, ``pid``
the global rank, ``tid`` the core or the server track), so they travel back
to ``hp.run`` with the rank's outcome, across processes too.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np

from ..core import layout
from ..core.task import Task

#: Track ids of one rank: cores use ``AIC: 0..``, ``AIV: AIV_TID..``; the server ``SERVER_TID``
#: (apart by more than any block index: a launch has up to 65535 blocks, two AIV cores each).
AIC_TID, AIV_TID, SERVER_TID = 0, 1 << 20, 1 << 30
#: Per side, the ops whose blocks are one per peer (block ``k`` from or to domain rank ``k``).
PER_PEER = {
    "recv": frozenset({"AllGather", "AlltoAll", "AlltoAllV"}),
    "send": frozenset({"ReduceScatter", "AlltoAll", "AlltoAllV"}),
}

_recorders: dict[int, Recorder] = {}
_lock = threading.Lock()


def now_us() -> float:
    """Wall-clock microseconds (comparable between the processes of one host)."""
    return time.time_ns() / 1000.0


def recording() -> bool:
    """Whether any rank of this process records (one truth test: the cost of tracing off)."""
    return bool(_recorders)


def of_rank(rank: int | None) -> Recorder | None:
    """The recorder of global rank ``rank`` in this process, or None when nothing is recorded."""
    return _recorders.get(rank) if _recorders else None


def start(rank: int) -> Recorder:
    """Begin recording global rank ``rank`` (replacing an earlier run's recorder)."""
    rec = Recorder(rank)
    with _lock:
        _recorders[rank] = rec
    return rec


def stop(rank: int) -> Recorder | None:
    """End recording global rank ``rank`` and return what it recorded."""
    with _lock:
        return _recorders.pop(rank, None)


def finish(rank: int) -> dict[str, Any] | None:
    """End recording global rank ``rank``: its events and layouts, as they travel to ``hp.run``."""
    rec = stop(rank)
    if rec is None:
        return None
    return {"events": rec.events, "layouts": rec.layouts, "sends": rec.sends}


def round_key(task: Task, round_idx: int) -> str:
    """The name of one round of one task, shared by its Commit, round and Wait events."""
    return f"{task.domain_name}/{task.seq}/{round_idx}"


class Recorder:
    """The events of one global rank, appended from its cores' threads and the server's."""

    def __init__(self, rank: int) -> None:
        self.rank = rank
        self.events: list[dict[str, Any]] = []
        #: Receive-buffer layouts of the rank's tasks (for the layout picture).
        self.layouts: list[dict[str, Any]] = []
        #: Send-buffer layouts of the same tasks, in the same order.
        self.sends: list[dict[str, Any]] = []
        #: round key -> end time of the round on this rank (for the flows to its Waits).
        self.round_end: dict[str, float] = {}
        #: round key -> (core track, return time) of Waits that returned before the server
        #: recorded the round's end: their flows start when it does.
        self._waiting: dict[str, list[tuple[int, float]]] = {}
        self._lock = threading.Lock()

    def add(self, event: dict[str, Any]) -> None:
        """Append one event (any thread)."""
        event.setdefault("pid", self.rank)
        with self._lock:
            self.events.append(event)

    def call(
        self, name: str, tid: int, start_us: float, end_us: float, args: dict[str, Any]
    ) -> None:
        """One client call on core track ``tid``."""
        self.add({"name": name, "ph": "X", "ts": start_us, "dur": end_us - start_us, "tid": tid,
                  "cat": "call", "args": args})  # fmt: skip

    def flow(self, flow_id: str, tid: int, at_us: float, start: bool) -> None:
        """One end of a flow arrow (a Commit to its round, a round to a Wait)."""
        event = {"name": "flow", "cat": "flow", "ph": "s" if start else "f", "id": flow_id,
                 "ts": at_us, "tid": tid}  # fmt: skip
        if not start:
            event["bp"] = "e"
        self.add(event)

    def round(self, task: Task, round_idx: int, start_us: float, end_us: float) -> None:
        """Round ``round_idx`` of ``task`` ran on the server (this rank's part of it)."""
        key = round_key(task, round_idx)
        blocks = layout.round_blocks(task, "recv", round_idx)
        moved = blocks.total()
        if task.name in PER_PEER["recv"] and task.skip_local and task.rank < blocks.sizes.size:
            moved -= int(blocks.sizes[task.rank])  # skipLocalRankCopy: the own block unwritten
        self.add({"name": f"{task.label} #{task.seq} round {round_idx}", "ph": "X", "ts": start_us,
                  "dur": end_us - start_us, "tid": SERVER_TID, "cat": "round",
                  "args": {"domain": task.domain_name, "task": task.seq, "handle": task.handle,
                           "round": round_idx, "bytes": moved, "op": task.describe()}})  # fmt: skip
        self.flow(f"commit/{self.rank}/{key}", SERVER_TID, start_us, start=False)
        with self._lock:
            self.round_end[key] = end_us
            waits = self._waiting.pop(key, [])
        for tid, returned in waits:
            self._wait_arrow(key, tid, end_us, returned)

    def wait_flow(self, key: str, tid: int, returned_us: float) -> None:
        """A Wait on core track ``tid`` returned for round ``key``: the arrow from the round.

        The server may record the round's end just after the Wait returns; the
        arrow is drawn then.
        """
        with self._lock:
            done = self.round_end.get(key)
            if done is None:
                self._waiting.setdefault(key, []).append((tid, returned_us))
                return
        self._wait_arrow(key, tid, done, returned_us)

    def _wait_arrow(self, key: str, tid: int, done_us: float, returned_us: float) -> None:
        flow_id = f"wait/{self.rank}/{tid}/{key}"
        self.flow(flow_id, SERVER_TID, min(done_us, returned_us), start=True)
        self.flow(flow_id, tid, returned_us, start=False)

    def task(self, task: Task) -> None:
        """A task was prepared: keep its receive and send layouts, round by round, with the
        rank each receive block comes from and each send block goes to."""
        for side, kept in (("recv", self.layouts), ("send", self.sends)):
            alloc = (task.recv if side == "recv" else task.send).alloc
            kept.append({"rank": self.rank, "buffer": alloc.name, "uid": alloc.uid,
                         "nbytes": alloc.nbytes, "handle": task.handle, "seq": task.seq,
                         "domain": task.domain_name, "op": task.describe(),
                         "label": task.label, "rounds": _peer_rows(task, side)})  # fmt: skip


def _peer_rows(task: Task, side: str) -> list[list[tuple[int, int, int]]]:
    """Per round, ``(start, end, rank)`` of each non-empty block of ``side``: the global rank
    it comes from (receive) or goes to (send) on a per-peer side, else -1 (every rank)."""
    per_peer = task.name in PER_PEER[side]
    ranks = task.domain.ranks if hasattr(task.domain, "ranks") else range(task.rank_dim)
    rounds = []
    for r in range(task.repeat):
        blocks = layout.round_blocks(task, side, r)
        keep = blocks.sizes > 0
        if per_peer and task.skip_local and task.rank < keep.size:
            keep[task.rank] = False
        peers = np.flatnonzero(keep)
        starts = blocks.starts[peers].tolist()
        ends = (blocks.starts + blocks.sizes)[peers].tolist()
        who = np.asarray(ranks)[peers].tolist() if per_peer else [-1] * len(peers)
        rounds.append([(int(a), int(b), int(k)) for a, b, k in zip(starts, ends, who, strict=True)])
    return rounds
