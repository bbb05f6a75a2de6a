"""What a rank's :class:`~.session.Session` needs of its backend (the gloo and hccl backends,
``hccl_py.backends.dist.server.DistBackend`` and its subclasses)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from ...core.config import Config
from ...server.blocking import Blocker


class DistBackend(Protocol):
    """What a session needs of its backend (``hccl_py.backends.dist.server.DistBackend``)."""

    name: str
    #: The torch.distributed backend of the process groups ("gloo", "hccl").
    pg_backend: str
    #: Whether its process groups complete a call's future when they queue it (a device's).
    device_async: bool

    def pg_timeout(self, seconds: float) -> float:
        """The time limit to give a process group for hccl_py's limit of ``seconds``."""

    def bind_device(self, local_rank: int) -> Any:
        """The device of this process's rank (binding it where the backend needs that)."""

    def thread_binder(self, device: Any) -> Callable[[], None] | None:
        """What every thread of the rank calls first (None: nothing)."""

    def make_server(self, session: Any, run: int, config: Config, blocker: Blocker) -> Any:
        """The rank's server for run ``run``."""
