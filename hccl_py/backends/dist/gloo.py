"""The "gloo" backend: one CPU process per rank, with windows in shared memory of one host.

Its server is the torch.distributed :class:`~.server.DistServer` with one part
more: :class:`~.shm_windows.SharedWindows`, which maps every member's windows
when a domain is created and meets AlltoAllvWrite's Waits through the store.
"""

from __future__ import annotations

import torch

from ...core.config import Config
from ...core.group import Group
from ...server.blocking import Blocker
from ...server.protocol import EXCHANGE, Outgoing, Payload, Server
from ...server.windows import WindowAllocation
from .server import DistBackend, DistServer
from .session import Session
from .shm_windows import SharedWindows


class GlooBackend(DistBackend):
    """One CPU process per rank over torch.distributed's gloo (several hosts too)."""

    name = "gloo"
    pg_backend = "gloo"
    check_tasks = True
    exact = True
    widen = {
        torch.float16: torch.float32,
        torch.bfloat16: torch.float32,
        torch.int16: torch.int32,
    }
    drops_nan = True

    def server_class(self) -> type[Server]:
        """The gloo server, with windows in shared memory."""
        return GlooServer


class GlooServer(DistServer):
    """The gloo server: :class:`DistServer` with windows in shared memory of one host."""

    #: It has windows (the refusal of :class:`DistServer` does not apply).
    no_windows = None

    def __init__(self, session: Session, run: int, config: Config, blocker: Blocker) -> None:
        super().__init__(session, run, config, blocker)
        self.windows = SharedWindows(self)

    def on_new_group(self, group: Group) -> None:
        """Create the domain's process group, then share its windows (members only). Every
        rank numbers every domain, in the order they are created (the same on every rank)."""
        self.windows.local.tags.tag(group.name)
        super().on_new_group(group)
        if group.rank_of(self.session.rank) is not None:
            self.windows.share(group)

    def window(self, domain: str, rank: int, kind: str) -> WindowAllocation:
        """Global rank ``rank``'s shared window ``kind`` of ``domain`` (see :class:`SharedWindows`)."""
        return self.windows.window(domain, rank, kind)

    def window_at(self, base: int) -> WindowAllocation | None:
        """The window whose integer base address is ``base``, if this rank used it."""
        return self.windows.window_at(base)

    def meet(
        self, group: Group, rank: int, key: str, what: str, payload: Outgoing = b""
    ) -> list[Payload] | None:
        """A framework exchange, or AlltoAllvWrite's Wait through the store (:class:`SharedWindows`)."""
        if key == EXCHANGE:
            return super().meet(group, rank, key, what, payload)
        return self.windows.meet(group, key, what)
