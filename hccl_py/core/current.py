"""The rank whose code is running here, as the layers below the kernel see it.

``hp.run`` binds every rank's runners (threads, or the emulator's greenlets) to
its rank context (:class:`hccl_py.kernel.context.RankContext`). Values, tilings
and servers need only a few of its facts (which rank, the run's options, where
warnings go, the serial lock), so they read them through :class:`RunningRank`
from here and never import the kernel layer.

What belongs to one runner is held in context variables, not thread-locals: a
new thread and a new greenlet each start with an empty context, and the
emulator's runners are greenlets that share one OS thread
(:class:`RunnerLocal` is the ``threading.local`` of such state).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import itertools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from .config import Config
from .errors import HcclWarning

if TYPE_CHECKING:
    import torch

_F = TypeVar("_F", bound=Callable[..., Any])


class RunningRank(Protocol):
    """What the lower layers read of the running rank."""

    rank: int
    world_size: int
    config: Config
    #: The HcclWarnings this rank's calls gave, in order (``hp.run(...).warnings``).
    warnings: list[HcclWarning]
    #: Its buffers' numbers in this run (:class:`hccl_py.core.buffer_numbers.BufferNumbers`).
    buffers: Any

    @property
    def serial(self) -> contextlib.AbstractContextManager:
        """The lock every hccl_py call of this rank holds (see ``Server.serial``)."""


_rank: contextvars.ContextVar[Any] = contextvars.ContextVar("hccl_py_rank", default=None)
_NO_LOCK = contextlib.nullcontext()
_local_ids = itertools.count()


class RunnerLocal:
    """Attributes of the calling runner (thread or greenlet), as ``threading.local`` keeps them per thread."""

    __slots__ = ("_var",)

    def __init__(self) -> None:
        var = contextvars.ContextVar(f"hccl_py_local_{next(_local_ids)}")
        object.__setattr__(self, "_var", var)

    def _own(self) -> dict[str, Any]:
        found = self._var.get(None)
        if found is None:
            found = {}
            self._var.set(found)
        return found

    def __getattr__(self, name: str) -> Any:
        try:
            return self._own()[name]
        except KeyError:
            raise AttributeError(name) from None

    def get(self, name: str, default: Any = None) -> Any:
        """The attribute ``name`` of the calling runner, or ``default`` (no exception raised)."""
        found = self._var.get(None)
        return default if found is None else found.get(name, default)

    def __setattr__(self, name: str, value: Any) -> None:
        self._own()[name] = value


#: Bind a rank context to the calling runner (None unbinds): the context variable's own setter
#: (every core run binds and unbinds its rank; the token it returns is not needed).
bind_rank: Callable[[RunningRank | None], Any] = _rank.set


#: The calling runner's rank context or None (``current_rank(required=False)`` in one call: the
#: context variable's own getter, for the paths that every launch and call takes).
rank_or_none: Callable[[], Any] = _rank.get


def current_rank(required: bool = True) -> Any:
    """The calling runner's rank context; raises outside ``hp.run`` when ``required``."""
    ctx = _rank.get()
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
    ctx = _rank.get()
    return _NO_LOCK if ctx is None else ctx.serial


def locked(lock: contextlib.AbstractContextManager, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` holding ``lock`` (a rank's ``serial_run`` where its lock has no ``held_call``)."""
    with lock:
        return fn(*args)


def serialized(fn: _F) -> _F:
    """Run ``fn`` holding :func:`serial` (for hccl_py entry points that run no user code)."""

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        ctx = _rank.get()
        if ctx is None:
            return fn(*args, **kwargs)
        if kwargs:
            with ctx.serial:
                return fn(*args, **kwargs)
        return ctx.serial_run(fn, *args)  # the lock's enter, call and exit in one frame

    return call  # type: ignore[return-value]


def off_device(tensor: torch.Tensor, ctx: Any) -> str | None:
    """Why ``tensor`` is not on the device of the rank ``ctx`` (a rank context), or None (a
    meta tensor has its own refusal)."""
    if tensor.is_meta or tensor.device == ctx.device:
        return None
    return (
        f"is on {tensor.device}, but rank {ctx.rank} runs on {ctx.device}: create it on "
        "hp.device() or move it there (.to(hp.device()))"
    )
