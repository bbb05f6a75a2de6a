"""The options of one run (``hp.run(..., strict=, timeout=, schedule=, poison=, overlap=)``).

A module of its own, below everything that reads it (contexts, servers,
backends, the launcher), so that none of them imports another to get it.
"""

from __future__ import annotations

import math
import numbers
import operator
import os
from dataclasses import dataclass, field

import numpy as np

from .platform import Platform, get_platform, ranks_per_server_default

#: The emulator's schedules (``schedule=``, ``--schedule``, ``HCCL_PY_SCHEDULE``).
SCHEDULES = ("eager", "late")

#: Environment variable overriding the default timeout (seconds) of every blocking call.
TIMEOUT_ENV = "HCCL_PY_TIMEOUT"
DEFAULT_TIMEOUT = 120.0
#: What ``timeout=inf`` stands for: no limit in practice, but a value every wait accepts.
NO_LIMIT_S = 10.0**7
#: Seconds a rank waits for its kernel's cores beyond the timeout: their own waits time out
#: first and name what they wait for.
KERNEL_GRACE_S = 2.0


def default_timeout() -> float:
    """The timeout from ``HCCL_PY_TIMEOUT`` (a positive number of seconds, or inf) or
    :data:`DEFAULT_TIMEOUT`; a ValueError naming the variable for anything else."""
    value = os.environ.get(TIMEOUT_ENV, "").strip()
    if not value:
        return DEFAULT_TIMEOUT
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not seconds > 0:
        raise ValueError(
            f"{TIMEOUT_ENV} must be a positive number of seconds (or inf for no limit), not "
            f"{value!r}"
        )
    return min(seconds, NO_LIMIT_S)


#: What a flag's environment variable may say (any case): on, or off.
_ENV_ON = ("1", "true", "yes", "on")
_ENV_OFF = ("0", "false", "no", "off")


def env_flag(name: str, default: bool = False) -> bool:
    """A flag from environment variable ``name`` (``default`` when unset or empty); a
    ValueError naming the variable for a value that is neither on nor off (``nope``)."""
    value = os.environ.get(name, "").strip().lower()
    if not value:
        return default
    if value not in _ENV_ON + _ENV_OFF:
        raise ValueError(
            f"{name} must be 1 or 0 (or true/false, yes/no, on/off), not {os.environ[name]!r}"
        )
    return value in _ENV_ON


def checked_flag(name: str, value: object) -> bool:
    """A flag argument: a bool (or numpy bool) as a bool; a TypeError naming ``name`` and the
    value for anything else (``poison="no"`` is not taken for true)."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise TypeError(f"{name} must be True or False, not {value!r}")


def as_index(value: object) -> int | None:
    """``value`` as an int: an int, a numpy integer or anything else with ``__index__``; None
    for a bool (numpy's too), a float and anything else."""
    if type(value) is int:  # the usual argument: no further call
        return value
    try:
        return None if isinstance(value, (bool, np.bool_)) else operator.index(value)
    except TypeError:
        return None


def c_int(value: object) -> int | None:
    """``value`` as the int a client argument of a C integer type takes: an int or a numpy
    integer, not a bool; None for anything else (a float, a string, a tensor)."""
    if type(value) is int:  # the usual argument: no further call
        return value
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return int(value)
    return None


def checked_int(
    name: str, value: object, least: int, most: int | None = None, expected: str | None = None
) -> int:
    """An integer argument in ``least..most`` as an int: an int, a numpy integer or anything
    else with ``__index__``, but not a bool or a float; a ValueError naming ``name``, the value
    and ``expected`` (default: what the bounds say) for anything else."""
    number = as_index(value)
    if number is None or number < least or (most is not None and number > most):
        if expected is None:
            expected = (
                f"an int in {least}..{most}"
                if most is not None
                else {0: "a non-negative int", 1: "a positive int"}.get(least, f"an int >= {least}")
            )
        raise ValueError(f"{name} must be {expected}, not {value!r}")
    return number


def checked_timeout(value: object) -> float:
    """``hp.run``'s ``timeout``: None for the default, a positive number of seconds, or inf."""
    if value is None:
        return default_timeout()
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not value > 0:
        raise ValueError(
            f"timeout must be a positive number of seconds (or None for the default "
            f"{default_timeout():g} s, or float('inf') for no limit), not {value!r}"
        )
    return min(float(value), NO_LIMIT_S)


@dataclass(frozen=True)
class Config:
    """Options of one run, shared by every rank.

    - ``strict``: failed calls raise :class:`HcclError` (True) or return the C++ codes.
    - ``timeout``: seconds any blocking call may wait (``HCCL_PY_TIMEOUT``; ``inf``: no
      limit). It bounds the whole run too: ranks that run their own code for that long
      while nothing else progresses (emulator), or after another rank returned (gloo),
      and kernel threads that run their own code for that long between two hccl_py calls
      (gloo, HCCL), are stopped and reported with their Python stack.
    - ``schedule``: "eager" runs a round as soon as every rank committed it; "late"
      runs it as late as possible: only when no rank or core of the world can go on
      (every one waits in Wait, Finalize, SyncAll ... or polls a value nobody changed).
    - ``poison``: fill receive ranges of committed, unfinished rounds with NaN / 0xFF
      (restored if the round never runs); see docs/sanitizer.md.
    - ``overlap``: what to do about overlapping ranges (receive blocks of one task, or
      send and receive blocks other than the in-place forms): "error", "warn" or "ignore".
    - ``record``: keep a timeline of every call and round on every rank (set by
      ``hp.run(..., trace=, summary=)`` and :func:`hccl_py.explain_layout`).
    - ``warnings_as_errors``: the kinds of :class:`~hccl_py.core.errors.HcclWarning` to raise
      as errors instead (e.g. ``{"extra-commit"}``), or True for every kind (for CI).
    - ``buffsize_mb``: size of each communication window in MB (``HCCL_BUFFSIZE``, 200).
    - ``seed``: the emulator's schedule (None: the fixed default; an int: a reproducible
      seeded schedule of random or PCT-style switches and server timings; see docs/emulator.md).
    - ``ranks_per_server``: how many consecutive ranks share one server (``HCCL_PY_RANKS_PER_SERVER``,
      8); Atlas A2's BatchWrite only reaches ranks of other servers, so 1 lets one-host tests use it.
    """

    platform: Platform = field(default_factory=lambda: get_platform("A2"))
    strict: bool = True
    timeout: float = field(default_factory=default_timeout)
    schedule: str = "eager"
    poison: bool = False
    overlap: str = "error"
    warnings_as_errors: bool | frozenset[str] = frozenset()
    #: Record every call and round (for ``trace=``, ``summary=`` and hp.explain_layout).
    record: bool = False
    buffsize_mb: int = 200
    ranks_per_server: int = field(default_factory=ranks_per_server_default)
    #: The emulator's schedule: None for the fixed default one, an int for a seeded one.
    seed: int | None = None

    def raises(self, kind: str) -> bool:
        """Whether a warning of ``kind`` is raised as an error in this run."""
        chosen = self.warnings_as_errors
        return chosen is True or (not isinstance(chosen, bool) and kind in chosen)

    def __post_init__(self) -> None:
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule must be 'eager' or 'late', not {self.schedule!r}")
        if self.overlap not in ("error", "warn", "ignore"):
            raise ValueError(f"overlap must be 'error', 'warn' or 'ignore', not {self.overlap!r}")
        # Stored as plain bools and ints (a numpy value would reach every report and pickle).
        checked = {name: checked_flag(name, getattr(self, name)) for name in _FLAGS}
        checked["ranks_per_server"] = checked_int("ranks_per_server", self.ranks_per_server, 1)
        if self.seed is not None:
            checked["seed"] = checked_int(
                "seed", self.seed, 0, expected="None or a non-negative int"
            )
        for name, value in checked.items():
            object.__setattr__(self, name, value)


#: The fields of :class:`Config` that are flags (True or False).
_FLAGS = ("strict", "poison", "record")
