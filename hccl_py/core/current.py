"""The rank whose code is running in this thread, as the layers below the kernel see it.

``hp.run`` binds every rank's threads to its rank context
(:class:`hccl_py.kernel.context.RankContext`). Values, tilings and servers need
only a few of its facts (which rank, the run's options, where warnings go, the
serial lock), so they read them through :class:`RunningRank` from here and never
import the kernel layer.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from .config import Config
from .errors import HcclWarning

_F = TypeVar("_F", bound=Callable[..., Any])


class RunningRank(Protocol):
    """What the lower layers read of the running rank."""

    rank: int
    world_size: int
    config: Config
    #: The HcclWarnings this rank's calls gave, in order (``hp.run(...).warnings``).
    warnings: list[HcclWarning]

    @property
    def serial(self) -> contextlib.AbstractContextManager:
        """The lock every hccl_py call of this rank holds (see ``Server.serial``)."""


_tls = threading.local()
_NO_LOCK = contextlib.nullcontext()


def bind_rank(ctx: RunningRank | None) -> None:
    """Bind ``ctx`` to the calling thread (None unbinds)."""
    _tls.rank = ctx


def current_rank(required: bool = True) -> Any:
    """The calling thread's rank context; raises outside ``hp.run`` when ``required``."""
    ctx = getattr(_tls, "rank", None)
    if ctx is None and required:
        raise RuntimeError(
            "no rank is running in this thread: call this inside a function started by "
            "hccl_py.run(fn) (or under `python -m hccl_py run`)"
        )
    return ctx


def serial() -> contextlib.AbstractContextManager:
    """The calling rank's serial lock (or none).

    hccl_py's own work inside a call holds it, so that on the emulator one rank's
    call does not hand the interpreter to another rank at every torch operation;
    user code between calls never holds it.
    """
    ctx = getattr(_tls, "rank", None)
    return _NO_LOCK if ctx is None else ctx.serial


def serialized(fn: _F) -> _F:
    """Run ``fn`` holding :func:`serial` (for hccl_py entry points that run no user code)."""

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        with serial():
            return fn(*args, **kwargs)

    return call  # type: ignore[return-value]
