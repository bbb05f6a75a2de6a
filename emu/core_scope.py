"""One core's run on the emulator: its race watch, and its flag-poll watch once it may poll.

A core takes the poll watch on when it first asks for a window, or at its start when windows
exist already or its kernel has more cores and GM tensor arguments (:class:`KernelBuffers`:
around such a launch those arguments are flag areas too, one core may set a flag in them that
another polls). It rides on the core's race watch (one dispatch mode; the polls are looked at
after the race check, so a poll that blocks holds none of its locks), a mode of its own only
without one. Both scopes are classes rather than generator context managers: every launch
enters them, and ``contextlib`` (with an ``ExitStack`` for the poll watch) cost a dozen calls
more per run.
"""

from __future__ import annotations

import contextvars
import sys
from typing import Any, Protocol

from hccl_py.server.blocking import Blocker
from hccl_py.server.protocol import OneCoreLaunch
from hccl_py.server.windows import LocalWindows

from .flags import FlagPolls, GmFlagArea
from .watch import WatchedWindows, core_watch
from .world_lock import Unwatched


class World(Protocol):
    """What a core's scope reads of its world (:class:`.world.EmuWorld`)."""

    watched: WatchedWindows
    windows: LocalWindows
    polled_args: dict[int, bool]
    flag_windows: dict[int, Any]
    blocker: Blocker
    serial: Unwatched


#: The calling core's scope while it has not entered the flag-poll watch (the runner's own, as
#: a ``RunnerLocal`` attribute would be: one call to read or set it, every core run does both).
_SCOPE: contextvars.ContextVar[CoreScope | None] = contextvars.ContextVar(
    "hccl_py_core_scope", default=None
)


class CoreScope:
    """Around one core's run of global rank ``rank`` (``who``: the core as reports name it)."""

    __slots__ = ("world", "rank", "who", "watch", "polls")

    def __init__(self, world: World, rank: int, who: str) -> None:
        self.world, self.rank, self.who = world, rank, who
        self.watch = world.watched.core_scope(rank)
        #: The poll watch when it is a mode of its own (no race watch carries it): left here.
        self.polls: FlagPolls | None = None

    def __enter__(self) -> None:
        self.watch.__enter__()
        try:
            if self.world.windows or self.world.polled_args.get(self.rank):
                _SCOPE.set(None)  # (as :func:`watch_polls` leaves it, without its look-up)
                self.watch_polls(self.world)
            else:
                _SCOPE.set(self)
        except BaseException:
            self._close(*sys.exc_info())
            raise

    def __exit__(self, *exc: object) -> None:
        _SCOPE.set(None)
        self._close(*exc)

    def _close(self, *exc: Any) -> None:
        """Leave the poll watch (if the scope entered one), then the race watch."""
        try:
            if self.polls is not None:
                self.polls.__exit__(*exc)
        finally:
            self.watch.__exit__(*exc)

    def watch_polls(self, world: World) -> None:
        """Enter the flag-poll watch of ``world`` in this scope's core (the caller made sure
        it is entered once per core run)."""
        polls = FlagPolls(
            world.flag_windows, world.blocker, self.rank, world.serial._is_owned, self.who
        )
        core = core_watch()
        if core is None:
            polls.__enter__()
            self.polls = polls
        else:
            core.attach(polls)


def watch_polls(world: World) -> None:
    """Enter the flag-poll watch in the calling core (once per core run)."""
    scope = _SCOPE.get()
    if scope is not None:
        _SCOPE.set(None)
        scope.watch_polls(world)


class KernelBuffers:
    """Around a launch of global rank ``rank``: its cores' polls of its GM tensor arguments
    ``buffers`` (those of a launch of more cores) are seen as a window flag's."""

    __slots__ = ("world", "rank", "buffers", "added")

    def __init__(self, world: World, rank: int, buffers: list) -> None:
        self.world, self.rank, self.buffers = world, rank, buffers
        #: The flag areas this launch added (storage address -> area), dropped at its end.
        self.added: dict[int, GmFlagArea] = {}

    def __enter__(self) -> None:
        flag_windows = self.world.flag_windows
        self.world.polled_args[self.rank] = bool(self.buffers)
        for alloc in self.buffers:
            if alloc.memory is not None and alloc.memory[0] not in flag_windows:
                self.added[alloc.memory[0]] = flag_windows[alloc.memory[0]] = GmFlagArea(alloc)

    def __exit__(self, *exc: object) -> None:
        self.world.polled_args[self.rank] = False
        for ptr, area in self.added.items():
            if self.world.flag_windows.get(ptr) is area:
                del self.world.flag_windows[ptr]


class AloneScope:
    """One rank's scopes of a launch of one core, made once and entered at each such launch:
    ``kernel_buffers(rank, [])`` around ``kernel_scope(rank)`` (:class:`.onesided.LaunchEnd`
    around the host's :class:`.host_watch.HostScope`), and as :attr:`core` a
    :class:`CoreScope` whose race watch is reset at each launch, in a handful of calls where
    the nested scopes made a dozen objects. :class:`AloneScopes` gives it only while the
    window race check is off, the rank's host has no watch and no launch of the rank uses it."""

    __slots__ = ("world", "rank", "core", "busy")

    def __init__(self, world: Any, rank: int) -> None:
        self.world, self.rank = world, rank
        self.core = CoreScope(world, rank, "")
        self.busy = False

    def __enter__(self) -> None:
        self.busy = True
        self.world.polled_args[self.rank] = False
        core = self.core  # as a new CoreScope and CoreWatch would start
        core.polls = core.watch.watch.polls = None
        core.watch.held = False

    def __exit__(self, exc_type: Any, *exc: object) -> None:
        world, rank = self.world, self.rank
        try:
            try:
                if exc_type is None and world.writes.writers:
                    world.writes.land_rank(rank)
            finally:
                host = world.hosts[rank]
                if host is not None and (host.watch is not None or world.posted.pending[rank]):
                    host._launched()
        finally:
            world.polled_args[rank] = False
            self.busy = False


class AloneScopes:
    """:meth:`~hccl_py.server.protocol.Lifecycle.alone_scope` of an emulated world."""

    __slots__ = ("world", "scopes")

    def __init__(self, world: Any) -> None:
        self.world = world
        self.scopes: dict[int, AloneScope] = {}

    def get(self, rank: int) -> Any:
        """Global rank ``rank``'s :class:`AloneScope`, or the general scopes where it does not apply."""
        world = self.world
        scope = self.scopes.get(rank)
        if scope is None:
            scope = self.scopes[rank] = AloneScope(world, rank)
        host = world.hosts[rank]
        if scope.busy or world.races is not None or (host is not None and host.watch is not None):
            return OneCoreLaunch(world, rank)
        return scope
