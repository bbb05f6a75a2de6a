"""The debug log: one line per Hccl call, with rank, core, handle and round (off by default).

It is the ``hccl_py`` logger of Python's ``logging`` module, so any logging
set-up can turn it on; ``HCCL_PY_LOG=debug`` does so without code (lines go to
stderr). When the logger is off a call costs one level check.
"""

from __future__ import annotations

import enum
import functools
import logging
import os
from collections.abc import Callable
from typing import Any

from ..core.current import rank_or_none
from ..core.report import plain_repr
from ..core.template import misfit_or_raise
from ..kernel.context import core_name, current_core_context, current_rank_context
from ..trace.hooks import recorder, traced_call
from ..trace.recorder import _recorders as _live_recorders

logger = logging.getLogger("hccl_py")
#: Environment variable that turns the log on at that level ("debug", "info", ...).
LOG_ENV = "HCCL_PY_LOG"

#: The values of ``HCCL_PY_LOG`` that leave the log off.
LOG_OFF = ("", "0", "OFF", "NONE", "FALSE")
_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def _log_level(raw: str) -> int | None:
    """The logging level ``HCCL_PY_LOG`` asks for, None for off; a ValueError naming it else."""
    name = raw.strip().upper()
    if name in LOG_OFF:
        return None
    if name not in _LEVELS:
        raise ValueError(
            f"{LOG_ENV}={raw!r} is no log level: use one of {', '.join(_LEVELS).lower()} "
            "(or leave it empty, 0 or off for no log)"
        )
    return getattr(logging, name)


if (_level := _log_level(os.environ.get(LOG_ENV, ""))) is not None:
    _handler = logging.StreamHandler()
    _handler.setFormatter(logging.Formatter("hccl_py %(levelname)s %(message)s"))
    logger.addHandler(_handler)
    logger.setLevel(_level)


def _where() -> str:
    rank = current_rank_context(required=False)
    core = current_core_context()
    who = f"rank {rank.rank}" if rank is not None else "no rank"
    return f"{who} {core_name(core)}" if core is not None else who


def _show(arg: Any) -> str:
    """An argument as the log and the trace show it: the same text in every run (no address)."""
    return arg.name if isinstance(arg, enum.Enum) else plain_repr(arg)


def _head(name: str, args: tuple) -> str:
    """``Commit(0)``; a Prepare as ``AllGather[True](sendBuf=..., count=4, ...)``."""
    param = args[0] if name == "_prepare" and args else None
    if param is None:
        return f"{name}({', '.join(map(_show, args))})"
    fields = {
        "sendBuf": param.send_buf,
        "recvBuf": param.recv_buf,
        "count": param.count,
        "dataType": param.data_type,
        "op": param.reduce_op,
        "strideCount": param.stride,
        "repeat": param.repeat,
    }
    shown = ", ".join(f"{k}={_show(v)}" for k, v in fields.items() if v is not None)
    return f"{param.spec.name}[{args[1] if len(args) > 1 else False}]({shown})"


def _round(client: Any, name: str, args: tuple) -> str:
    if name not in ("Commit", "Wait") or not args:
        return ""
    info = client._handle(args[0])
    if info is None:
        return ""
    return f" round {info.commits if name == 'Commit' else info.waits}"


def observed() -> bool:
    """Whether calls are shown: the debug log is on or a trace records them."""
    return bool(_live_recorders) or logger.isEnabledFor(logging.DEBUG)


def logged(method: Callable[..., Any]) -> Callable[..., Any]:
    """Log each call of a client method (arguments, result or exception) at DEBUG level.

    The call holds the rank's serial lock and is recorded when the run records a
    trace. Arguments that do not fit the method are reported as misuse
    (:func:`~hccl_py.core.template.call_checked`). With the log off and no trace
    it is one frame around ``method``.
    """
    name = method.__name__

    @functools.wraps(method)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            ctx = rank_or_none()
            if ctx is None:  # outside any rank: no lock to hold (serial() would be a null one)
                return _held(self, args, kwargs)
            # the lock's entry, the call and its exit in one frame (the emulator's world lock)
            return ctx.serial_run(_held, self, args, kwargs)
        except TypeError as exc:
            return misfit_or_raise(exc, call, (self, *args), kwargs, self)

    def _held(self: Any, args: tuple, kwargs: dict[str, Any]) -> Any:
        # observed(), written out: one call less on every client call
        if not _live_recorders and not logger.isEnabledFor(logging.DEBUG):
            return method(self, *args, **kwargs)
        return _observed(self, args, kwargs)

    def _observed(self: Any, args: tuple, kwargs: dict[str, Any]) -> Any:
        rec = recorder()
        if rec is not None:
            return traced_call(
                rec, self, name, _head(name, args), args, lambda: _logged(self, args, kwargs)
            )
        return _logged(self, args, kwargs)

    def _logged(self: Any, args: tuple, kwargs: dict[str, Any]) -> Any:
        if not logger.isEnabledFor(logging.DEBUG):
            return method(self, *args, **kwargs)
        head = f"{_where()}: {_head(name, args)}{_round(self, name, args)}"
        try:
            result = method(self, *args, **kwargs)
        except BaseException as exc:
            logger.debug("%s raised %s: %s", head, type(exc).__name__, exc)
            raise
        logger.debug("%s -> %r", head, result)
        return result

    return call
