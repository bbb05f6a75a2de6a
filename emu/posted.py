"""Happens-before checks for Hcomm reads and BatchWrites into plain GM: accesses that no Drain
or Wait orders.

On by default on the emulator, beside the collective buffer check (:mod:`.buffers`),
whose marks and watch it shares. A ``ReadNbi`` whose destination is this rank's
plain GM (a kernel input or output, not a window) writes those bytes when it
lands, which only the channel's ``Drain`` orders. From the call on (a request
posted with ``commit=False`` can be rung by any core's ``Commit`` of the
channel), its destination bytes are a pending write of the posting rank, with
the line of the call; the channel's ``Drain`` (any core, any later launch of the
rank) clears them. Until then a kernel access of those bytes (any core of the
rank, any launch) or an access by the rank's host code after the kernel
(:mod:`.host_watch`) raises :class:`~hccl_py.core.errors.HcclRaceError`, naming
the rank, the channel, the call, the bytes and both lines. Nothing depends on
whether the read already landed in this schedule, so the default one finds it. A read posted
with ``commit=False`` that no doorbell rang yet (:meth:`PostedRequests.rang`) has not landed: its
report says so, and that a later Commit lands it over the access.

A destination in a window is the window race check's (``poison=True``): it sees
the landing as a write of the channel. A request that is never drained is no
finding by itself: only an access of its bytes is. A ``WriteNbi``'s source is
read when it lands, but not only a ``Drain`` orders that: a peer that saw the
write arrive answers through other means, and shipping kernels never drain
their last notify (MoeEpDispatch's ``WriteToRemoteWindow`` posts its slot notify
from its workspace, and the next launch's ``ResetCounters`` rewrites those
bytes before any Drain of the channel). Marking sources would report them, so
sources are not marked.

An A3 BatchWrite item may write into the rank's own plain GM (a kernel argument, a workspace).
Those destination bytes are a pending write of the rank from the call on, with the line of the
call, until what orders that BatchWrite: the Wait of it or of a later BatchWrite of the domain
(without message queues), its Finalize<true>, or the end of the launch (Finalize<false> waits for
nothing and orders none). A destination in a window is the
window race check's, as for Hcomm.
"""

from __future__ import annotations

import bisect
import functools
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

from hccl_py.core.buffer_numbers import numbers_of
from hccl_py.core.current import rank_or_none
from hccl_py.core.errors import HcclRaceError
from hccl_py.core.gm import Allocation
from hccl_py.kernel.context import current_core_context
from hccl_py.server.remote_writes import ChannelKey, Copies
from hccl_py.server.windows import WindowAllocation

from .buffers import BufferRaces
from .findings import Finding, Mark, findings
from .intervals import Runs
from .races import user_frame


@dataclass(eq=False)
class Request:
    """The Hcomm requests of one call site on one channel of a rank, until its Drain."""

    call: str
    channel: ChannelKey
    where: str
    #: When the first one was posted, among every mark of the world (:mod:`.buffers`).
    order: int = 0
    #: The channel's doorbell count, shared by its requests (None: no doorbell, a BatchWrite),
    #: and what it was when these were posted: the same while no doorbell rang them.
    rings: list[int] | None = None
    ring: int = 0
    #: The landing writes the bytes: any access of them races.
    same_bytes_race = True

    @property
    def unrung(self) -> bool:
        """Whether they were posted with ``commit=False`` and no doorbell rang them yet."""
        return self.rings is not None and self.rings[0] == self.ring

    @property
    def ordered_by(self) -> str:
        """What orders the requests before the rank's next accesses (for the warning): where no
        doorbell rang them yet, a Commit of the channel first, since a Drain alone leaves them
        queued."""
        return "the Commit and Drain of the channel" if self.unrung else "the Drain of the channel"

    def describe(self) -> str:
        """``ReadNbi on channel 0x4843000100000000``."""
        return f"{self.call} on channel {self.channel[1]:#x}"

    def facts(self) -> dict[str, object]:
        """The request's facts for a report."""
        return {"op": self.call}

    #: What a report calls the race, and what a write of the marked bytes risks.
    race = "Hcomm read race"
    overwrite = "the landing may overwrite that write, or not"

    def error(self, found: Finding, rank: int, where: str) -> HcclRaceError:
        """The report of ``found``, an access at ``where`` of global rank ``rank``."""
        base = found.mark.alloc.memory[1]
        risk = self.overwrite if found.written else "the read may see the old bytes or the new ones"
        return HcclRaceError(
            f"{self.race}: rank {rank} {'writes' if found.written else 'reads'} bytes "
            f"[{found.lo - base}, {found.hi - base}) of {found.mark.alloc.name} at {where} "
            f"before {self.unrung_pending(found.written) if self.unrung else self.pending(risk)}",
            rank=rank,
            **self.facts(),
        )

    def pending(self, risk: str) -> str:
        """What the access came before, what it risks (``risk``) and what to call."""
        return (
            f"the Drain of channel {self.channel[1]:#x}: the {self.call} at {self.where} writes "
            f"these bytes when it lands, which only the Drain orders, so {risk}. Call "
            "Drain(channel) (any core of the rank, or a later launch) before accessing them; "
            "see docs/hcomm.md#when-writes-land"
        )

    def unrung_pending(self, written: bool) -> str:
        """:meth:`pending` for requests that no doorbell rang: nothing lands them until a Commit
        of the channel (in a kernel, another core's may come first; after it, a later launch's)."""
        kernel = current_core_context() is not None
        first = " unless another core's Commit of the channel comes first" if kernel else ""
        risk = (
            "a later Commit of the channel lands it over this write"
            if written
            else f"the read sees the old bytes{first}, and a later Commit lands it over them"
        )
        return (
            f"the Commit and Drain of channel {self.channel[1]:#x}: the {self.call} at "
            f"{self.where} writes these bytes when it lands, but it was posted with commit=False "
            f"and no Commit of the channel rang its doorbell{' yet' if kernel else ''}, so it has "
            f"not landed: {risk}. Call Commit(channel), then Drain(channel), before accessing "
            "them, or post it with commit=True; see docs/hcomm.md#when-writes-land"
        )

    def unseen(self) -> str:
        """What a numpy view taken now may read too early, for the warning."""
        return f"the {self.describe()} at {self.where}"


@dataclass(eq=False)
class Written(Request):
    """The BatchWrites of one call site of a domain rank into its own plain GM, until a Wait."""

    handle: int = 0
    ordered_by = "the Wait of the BatchWrite"
    race = "BatchWrite race"
    overwrite = "the copy may overwrite that write, or not"

    def describe(self) -> str:
        """``BatchWrite (handle 0)``."""
        return f"{self.call} (handle {self.handle})"

    def facts(self) -> dict[str, object]:
        """The request's facts for a report."""
        return {"op": self.call, "handle": self.handle}

    def pending(self, risk: str) -> str:
        """What the access came before, what it risks (``risk``) and what to call."""
        return (
            f"the Wait of the BatchWrite (handle {self.handle}) at {self.where}, one of whose "
            f"items writes these bytes when the server runs it, so {risk}. Call Wait(handle) "
            "before accessing them (with several message queues, queueNum > 0, a Wait returns "
            "at once and orders nothing: only the launch's end does); see "
            "docs/windows.md#batchwrite"
        )


@dataclass(eq=False)
class Posted:
    """The bytes of one allocation that one :class:`Request` writes when it lands: sorted,
    disjoint runs from the allocation's first byte, at ``base`` in its storage."""

    request: Request
    alloc: Allocation
    base: int
    starts: list[int] = field(default_factory=list)
    ends: list[int] = field(default_factory=list)
    #: The landing writes these bytes: a read or a write of them races (as a receive range).
    side = "recv"

    def add(self, lo: int, hi: int) -> None:
        """Mark ``[lo, hi)`` too (merged with the runs it overlaps or touches)."""
        i = bisect.bisect_left(self.ends, lo)
        j = bisect.bisect_right(self.starts, hi)
        if i < j:
            lo, hi = min(lo, self.starts[i]), max(hi, self.ends[j - 1])
        self.starts[i:j] = [lo]
        self.ends[i:j] = [hi]

    def marks(self) -> list[Mark]:
        """The one mark of these bytes, as :mod:`.buffers` checks them."""
        return [Mark(self.request, self.side, self.alloc, self.base, self.starts, self.ends)]


class PostedRequests:
    """The undrained Hcomm reads into plain GM of every rank of one emulated world."""

    def __init__(self, buffers: BufferRaces) -> None:
        self.buffers = buffers
        world_size = len(buffers.pending)
        #: Per global rank: storage address -> its requests there, for the host's watch
        #: (the kernels' watch finds the same objects in ``buffers.pending``).
        self.pending: list[dict[int, list[Posted]]] = [{} for _ in range(world_size)]
        #: Per channel: (call site, allocation, tag: a BatchWrite's handle or a ReadNbi's doorbell
        #: count, launch of the rank) -> its marked bytes (a tensor passed to two launches is one
        #: allocation: the launch keeps their requests apart).
        self.channels: dict[ChannelKey, dict[tuple[str, int, int | None, int], Posted]] = {}
        #: Per channel with marked reads: its doorbell count (:meth:`rang`), in a list that its
        #: requests share (:attr:`Request.unrung`).
        self.rings: dict[ChannelKey, list[int]] = {}

    def posted(self, channel: ChannelKey, call: str, copies: Copies) -> None:
        """Global rank ``channel[0]`` called ``call`` on ``channel``: mark a read's destination."""
        if call == "ReadNbi":
            rings = self.rings.setdefault(channel, [0])
            ring = rings[0]
            made = functools.partial(Request, call, channel, rings=rings, ring=ring)
            self._mark(channel, copies[:1], made, ring)

    def rang(self, channel: ChannelKey) -> None:
        """``channel``'s doorbell rang: every request posted on it so far may land."""
        rings = self.rings.get(channel)
        if rings is not None:
            rings[0] += 1

    def written(self, key: tuple[int, Hashable], handle: int, copies: Copies) -> None:
        """Global rank ``key[0]``'s BatchWrite ``handle`` (``key``: its rank and domain rank) will
        run ``copies``: mark the destinations in its own plain GM until :meth:`drained`."""
        self._mark(
            key, copies, functools.partial(Written, "BatchWrite", key, handle=handle), handle
        )

    def _mark(
        self,
        channel: tuple[int, Hashable],
        copies: Copies,
        request: Callable[[str], Request],
        tag: int | None = None,
    ) -> None:
        """Mark the destinations of ``copies`` in plain GM as pending writes of the rank
        ``channel[0]``, by a ``request(where)`` per call site (and ``tag``: a BatchWrite's
        handle, which a Wait orders on its own; a ReadNbi's doorbell count, which a doorbell
        rings for all of its requests, not for later ones)."""
        plain = [
            (dst, nbytes)
            for _, dst, nbytes in copies
            if nbytes
            and not isinstance(dst.alloc, WindowAllocation)
            and dst.alloc.memory is not None
            and dst.alloc.memory[0]
        ]
        if not plain:
            return
        where = user_frame()
        rank = channel[0]
        launch = numbers_of(rank_or_none()).launches
        with self.buffers.lock:
            sites = self.channels.setdefault(channel, {})
            for dst, nbytes in plain:
                alloc = dst.alloc
                site = (where, id(alloc), tag, launch)
                found = sites.get(site)
                if found is None:
                    made = request(where)
                    made.order = next(self.buffers.sequence)
                    found = sites[site] = Posted(made, alloc, alloc.memory[1])
                    for index in (self.buffers.pending[rank], self.pending[rank]):
                        index.setdefault(alloc.memory[0], []).append(found)
                found.add(dst.offset, dst.offset + nbytes)

    def drained(self, channel: ChannelKey, upto: int | None = None) -> None:
        """``channel``'s Drain returned (or a Wait ordered the BatchWrites of :meth:`written`'s
        ``key``, up to handle ``upto`` where given): its requests are ordered before the rank's
        next accesses."""
        with self.buffers.lock:
            sites = self.channels.get(channel)
            if not sites:
                return
            done = [site for site in sites if upto is None or site[2] <= upto]
            rank = channel[0]
            for site in done:
                posted = sites.pop(site)
                storage = posted.alloc.memory[0]
                for index in (self.buffers.pending[rank], self.pending[rank]):
                    left = [p for p in index[storage] if p is not posted]
                    if left:
                        index[storage] = left
                    else:
                        del index[storage]
            if not sites:
                del self.channels[channel]

    def access(self, rank: int, storage: int, runs: Runs, written: bool) -> list[Finding]:
        """The host code of global rank ``rank`` reads or writes ``runs`` of ``storage``: the
        undrained reads it meets, in address order (:mod:`.findings` judges them)."""
        with self.buffers.lock:
            marks = [
                mark for posted in self.pending[rank].get(storage, ()) for mark in posted.marks()
            ]
            marks.sort(key=lambda mark: mark.round.order)
            return findings(marks, runs, written)
