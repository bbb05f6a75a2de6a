"""What one access of marked bytes meets: every finding, each judged on its own.

A kernel access of bytes that the race checks mark (:mod:`.buffers`: pending
collective rounds; :mod:`.posted`: undrained Hcomm reads; :mod:`.server_reads`:
what a pending BatchWrite's server reads) yields one :class:`Finding` per mark
it touches, in address order. Most are a race whatever the access writes. A
write of bytes that only a pending BatchWrite's server reads is a race only if
it changes them (a write of the bytes they hold already changes nothing the
server reads): such a finding keeps the bytes as they were before the write and
is judged after it. The report is the first finding in address order that is a
race, so a same-bytes rewrite neither hides a race further along nor is
reported because of one.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from hccl_py.core.errors import HcclRaceError
from hccl_py.core.gm import Allocation

from .intervals import Runs
from .races import user_frame


class Owner(Protocol):
    """What a mark belongs to: a committed round (:class:`.buffers.Round`), Hcomm requests
    (:mod:`.posted`) or what a pending BatchWrite's server reads (:mod:`.server_reads`)."""

    #: When it was marked, among every mark of the world (ties in reports go to the earliest).
    order: int
    #: What orders it before the rank's next accesses (for the warning).
    ordered_by: str
    #: Whether a write of the bytes its marks hold already races (False: only a change does).
    same_bytes_race: bool

    def facts(self) -> dict[str, object]: ...
    def error(self, found: Finding, rank: int, where: str) -> HcclRaceError: ...
    def unseen(self) -> str: ...


class Mark(NamedTuple):
    """Bytes of one side of a pending round (or of Hcomm requests, :mod:`.posted`), in one
    allocation: sorted, disjoint runs ``[starts[i], ends[i])`` from the allocation's first
    byte, at ``base`` in its storage."""

    round: Owner
    side: str
    alloc: Allocation
    base: int
    starts: list[int]
    ends: list[int]

    def overlap(self, runs: Runs) -> tuple[int, int] | None:
        """``(lo, hi)``: from the first to the last marked byte that ``runs`` (sorted, disjoint
        storage addresses) touch, as storage addresses; None if they touch none."""
        starts, ends, base = self.starts, self.ends, self.base
        first = last = None
        for lo, hi in runs:
            lo, hi = lo - base, hi - base
            i = bisect.bisect_right(ends, lo)
            if i == len(starts) or starts[i] >= hi:
                continue
            if first is None:
                first = max(starts[i], lo)
            last = min(ends[bisect.bisect_left(starts, hi) - 1], hi)
        return None if first is None else (first + base, last + base)


@dataclass
class Finding:
    """An access of bytes ``[lo, hi)`` (storage addresses) that a pending mark reads or writes."""

    mark: Mark
    lo: int
    hi: int
    written: bool
    #: The bytes before the write, where only a change of them is a race; None: a race.
    before: bytes | None = None

    def error(self, rank: int, where: str) -> HcclRaceError:
        """The report of this finding, raised at the access (``where``) of global rank ``rank``."""
        return self.mark.round.error(self, rank, where)

    def races(self) -> bool:
        """Whether it is a race: always, or (a same-bytes rewrite allowed) if the write changed
        the bytes; asked after the write."""
        if self.before is None:
            return True
        base = self.mark.base
        return self.mark.alloc.host_bytes(self.lo - base, self.hi - base) != self.before


def findings(marks: Iterable[Mark], runs: Runs, written: bool) -> list[Finding]:
    """Every mark that an access of ``runs`` meets, with the bytes it shares, in address order
    (among those that start together, in the order of ``marks``); empty if none races."""
    found = []
    for mark in marks:
        if written or mark.side == "recv":
            span = mark.overlap(runs)
            if span is None:
                continue
            lo, hi = span
            before = None
            if written and not mark.round.same_bytes_race:
                before = mark.alloc.host_bytes(lo - mark.base, hi - mark.base)
            found.append(Finding(mark, lo, hi, written, before))
    found.sort(key=lambda finding: finding.lo)  # stable: ties keep the order of ``marks``
    return found


def raise_certain(found: list[Finding], rank: int) -> None:
    """Before the access of global rank ``rank``: raise the report of its first finding if
    that one is a race whatever the access writes."""
    if found and found[0].before is None:
        raise found[0].error(rank, user_frame())


def raise_races(found: list[Finding], rank: int) -> None:
    """After the access of global rank ``rank`` (before it, for a read): raise the report of
    its first finding that is a race."""
    for finding in found:
        if finding.races():
            raise finding.error(rank, user_frame())
