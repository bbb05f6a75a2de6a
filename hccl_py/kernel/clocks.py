"""Happens-before between the cores of one kernel launch: a vector clock per core.

A core's clock counts, per core, the flag Sets and barrier arrivals it has seen happen
(its own included). A ``SyncAll`` joins the clocks of every core that arrived at it, and a
``CrossCoreWaitFlag`` joins the clocks of the Sets whose completion it consumes, so a
chain of flags (an AIV core to its AIC to another AIV core, in any mode) orders what it
chains, as a barrier does. The client asks it whether a core's Wait is ordered before the
sending core's Finalize (``finalize-unordered``). Callers hold the rank's blocker lock.
"""

from __future__ import annotations

from typing import Any

#: A vector clock: core -> how many of its flag Sets and barrier arrivals have been seen.
Clock = dict[Any, int]


def join(clock: Clock, other: Clock) -> Clock:
    """``clock`` with every entry of ``other`` that is later, in place.

    (A test and an index per entry, not ``clock.get``: a SyncAll joins every core's entry
    into every core's clock, a call per entry and core. Every tick is at least 1.)"""
    for core, tick in other.items():
        if core not in clock or tick > clock[core]:
            clock[core] = tick
    return clock


class CoreClocks:
    """The clocks of the cores of one launch."""

    def __init__(self) -> None:
        self._clocks: dict[Any, Clock] = {}

    def of(self, core: Any) -> Clock:
        """A copy of ``core``'s clock now."""
        return dict(self._clocks.get(core, {}))

    def release(self, core: Any) -> Clock:
        """``core`` sets a flag or arrives at a barrier: the clock that what receives it joins
        (a copy)."""
        clock = self._clocks.setdefault(core, {})
        clock[core] = clock.get(core, 0) + 1
        return dict(clock)

    def acquire(self, core: Any, seen: Clock) -> None:
        """``core`` received what ``seen`` had seen."""
        join(self._clocks.setdefault(core, {}), seen)

    def clear(self) -> None:
        self._clocks.clear()


def ordered_before(early: Any, early_clock: Clock, now: Clock) -> bool:
    """Whether a core whose clock is ``now`` has seen an event of ``early`` after
    ``early_clock`` (``early``'s clock then): a barrier both passed, or a chain of flags."""
    return now.get(early, 0) > early_clock.get(early, 0)
