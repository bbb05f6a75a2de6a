"""Polls on the emulator: when reads make a poll, and when a blocked poller may read on.

A runner that reads the same values :data:`POLL_READS` times in a row (a
``Query`` of a handle, a window flag) is polling: it is blocked until one of the
values changes, so that the others run. When nothing else can run, a blocked
poller is let read on, as a core on hardware keeps reading: its own loop may
be bounded and go on to something else. The blocked pollers share
:data:`QUIET_READS` such reads (they take turns) while nothing else can run; then
their polls are part of a deadlock. With k pollers each makes about
``QUIET_READS / k`` of them: a longer loop with its own bound is reported
(docs/emulator.md says why the allowance is not per poller). Exact: no clock is
read, and every schedule counts the same reads.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable

from hccl_py.server.blocking import Text

from .policies import Runner

#: Unchanged reads in a row that make a poll: a kernel that reads a status word twice to
#: flip it (``status[0] = 1 - status[0]`` after ``int(status[0])``) is not polling it.
POLL_READS = 3
#: Unchanged reads a blocked poller is let make while nothing else in the world can run,
#: before its poll counts as part of a deadlock: a loop with its own bound ends before that.
QUIET_READS = 3000


class QuietPolls:
    """How often blocked pollers were let read on since anything else last ran.

    The pollers take turns: each release goes to one of those released least often since
    then (``choose`` picks among them). A policy's own pick alone (a PCT schedule's highest
    priority) could release the same poller every time, and never the one whose next read
    ends its loop, and so declare a deadlock that no hardware run can have.
    """

    def __init__(self) -> None:
        self.releases = 0
        self.turns: dict[int, int] = {}

    def progressed(self) -> None:
        """A runner that was no released poller ran, or the server ran a round."""
        self.releases = 0
        if self.turns:  # (asked at every switch: usually nothing to forget)
            self.turns.clear()

    def choosing(self, runnable: list[Runner]) -> None:
        """The next runner comes from ``runnable``: unless every one is a released poller,
        something else than a released poller runs (a loop: asked at every switch)."""
        if not (self.releases or self.turns):  # nothing to forget (the usual case)
            return
        for r in runnable:
            if not r.released:
                self.progressed()
                return

    def release(
        self, runners: list[Runner], choose: Callable[[list[Runner]], Runner]
    ) -> Runner | None:
        """Nothing can run: the blocked poller to let read on (``choose`` picks), or None."""
        if self.releases * POLL_READS >= QUIET_READS:
            return None
        pollers = [r for r in runners if r.polling and not r.released]
        if not pollers:
            return None
        fewest = min(self.turns.get(id(r), 0) for r in pollers)
        self.releases += 1
        poller = choose([r for r in pollers if self.turns.get(id(r), 0) == fewest])
        self.turns[id(poller)] = fewest + 1
        poller.released = True
        return poller


def record(
    runner: Runner, key: Hashable, value: object, read: Callable[[], object], what: Text
) -> bool:
    """``runner`` read ``value`` at ``key``; True when its unchanged reads make it a poller."""
    seen = runner.polls.get(key)
    reads = 1 if seen is None or seen[0] != value else seen[3] + 1
    runner.polls[key] = (value, read, what, reads)
    return reads >= POLL_READS


def changed(runner: Runner) -> Callable[[], bool]:
    """What a blocked poller waits for: a value it polled changed (``read()`` gives it now),
    or it is let read on."""
    polls = dict(runner.polls)
    return lambda: runner.released or any(rd() != v for v, rd, _, _ in polls.values())
