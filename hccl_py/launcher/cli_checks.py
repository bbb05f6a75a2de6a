"""Checks of the command line's own inputs, made before anything runs.

``python -m hccl_py run``, ``layout`` and ``bench`` check their options, and the
environment variables that stand in for options, with these functions. Each
raises :class:`UsageError` with one line naming the option or variable, the
value and what it takes; :func:`report` prints that line as argparse prints
its own errors (``python -m hccl_py run: error: ...``) and gives exit status 2.
What the user's script raises is not checked here: it keeps its traceback.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Callable
from typing import TypeVar

from ..core.backend_info import BACKENDS
from ..core.constants import MAX_WORLD_SIZE
from ..core.errors import HcclError, HcclUsageError
from ..core.newfile import exists_message, is_mine
from ..core.platform import get_platform
from ..trace.plotting import drawable
from .script_checks import script_problem

#: What ``--help`` and the errors call the command line.
PROG = "python -m hccl_py"
#: The highest TCP port.
MAX_PORT = 65535
#: Ranks per host when neither -n nor HCCL_PY_WORLD_SIZE says.
DEFAULT_RANKS = 4

T = TypeVar("T")


class UsageError(ValueError):
    """A command-line option or environment variable that the command cannot run with."""


def report(command: str, error: Exception) -> int:
    """Print ``error`` as argparse prints a usage error of ``command``; return exit status 2."""
    print(f"{PROG} {command}: error: {error}", file=sys.stderr)
    return 2


def env_label(name: str) -> str:
    """How an error names environment variable ``name``."""
    return f"environment variable {name}"


def in_range(
    what: str,
    value: int,
    low: int,
    high: int | None = None,
    *,
    why_low: str = "",
    why_high: str = "",
) -> int:
    """``value`` when ``low <= value <= high``, else UsageError naming the bound it broke (and why)."""
    if value < low:
        raise UsageError(f"{what} must be >= {low}{why_low}, not {value}")
    if high is not None and value > high:
        raise UsageError(f"{what} must be <= {high}{why_high}, not {value}")
    return value


def checked_ranks(what: str, value: int) -> int:
    """A number of ranks (or hosts) that one run can have: 1..MAX_WORLD_SIZE, as hp.run takes."""
    return in_range(what, value, 1, MAX_WORLD_SIZE, why_high=" (the most ranks of one run)")


def ranks_per_host(what: str, given: int | None, world: int | None, hosts: int = 1) -> int:
    """The ranks per host: ``given`` (option ``what``), else ``world``, the world size that
    ``HCCL_PY_WORLD_SIZE`` says (hp.run's reading), shared over ``hosts``, else 4."""
    if given is not None:
        return checked_ranks(what, given)
    if world is None:
        return DEFAULT_RANKS
    if world % hosts:
        raise UsageError(
            f"{env_label('HCCL_PY_WORLD_SIZE')}={world} ranks do not share evenly over --nnodes "
            f"{hosts} hosts: give -n/--nproc, the ranks per host"
        )
    return world // hosts


def _given(what: str, value: object) -> str:
    """How an error shows ``value`` given to option or variable ``what``: ``--x 1``, ``VAR='1'``."""
    return f"{what} {value}" if what.startswith("-") else f"{what}={value!r}"


def checked_platform(what: str, name: str) -> str:
    """The short name of platform ``name`` (as hp.run reads it, any case), else UsageError."""
    try:
        return get_platform(name).short
    except ValueError as exc:
        raise UsageError(f"{what}: {exc}") from None


def checked_backend(what: str, name: str) -> str:
    """``name`` when it names a backend that can run here (what it requires is installed)."""
    if name not in BACKENDS:
        raise UsageError(f"{what}: unknown backend {name!r}; choose one of {sorted(BACKENDS)}")
    requires = BACKENDS[name].requires
    if requires is not None and importlib.util.find_spec(requires[0]) is None:
        raise UsageError(
            f"{_given(what, name)} needs {requires[0]} ({requires[1]}), which is not installed; "
            "use the gloo backend on CPUs"
        )
    return name


def environment(read: Callable[[], T]) -> T:
    """``read()``, hp.run's reading of its environment, whose errors each start with the
    variable's name: a ValueError as a UsageError that says it is an environment variable."""
    try:
        return read()
    except (ValueError, HcclUsageError) as exc:
        raise UsageError(
            f"{env_label('')}{exc.reason if isinstance(exc, HcclError) else exc}"
        ) from None


def _settings_given(settings: tuple[tuple[str, object, str], ...]) -> list[str]:
    """How each setting that was given is named: its option, or the variable standing in for it."""
    return [
        option if value is not None else env_label(env)
        for option, value, env in settings
        if value is not None or os.environ.get(env)
    ]


def one_schedule_choice(*settings: tuple[str, object, str]) -> None:
    """UsageError when both a seed and a number of schedules to explore are given (each as
    in :func:`emulator_only`): a seed replays one schedule, exploring runs several."""
    picked = _settings_given(settings)
    if len(picked) > 1:
        raise UsageError(
            f"{picked[0]} replays one schedule and {picked[1]} runs the default one and seeds "
            "1 to N - 1: give one of them"
        )


def emulator_only(backend: str, *settings: tuple[str, object, str]) -> None:
    """UsageError when a setting that picks the emulator's schedules is given with another
    backend: each setting is (option, its value or None, the variable that stands in for it)."""
    if BACKENDS[backend].in_process:
        return
    picked = _settings_given(settings)
    if picked:
        raise UsageError(
            f"{' and '.join(picked)} {'pick' if len(picked) > 1 else 'picks'} schedules of the "
            f"emulator; the {backend} backend runs its ranks concurrently: run on the emulator "
            "(no --backend)"
        )


def check_script(path: str) -> None:
    """UsageError when ``path`` is no script that Python could run (missing, a folder, binary)."""
    problem = script_problem(path)
    if problem:
        raise UsageError(problem)


def check_output(option: str, path: str, *, drawn: bool = False) -> None:
    """UsageError when file ``path`` (of ``option``) could not be written after the run.

    The writers create missing folders and the file itself, new
    (:mod:`hccl_py.core.newfile`): nothing may be at ``path`` (a file, a link,
    a folder), and the nearest folder that exists must be writable; ``drawn``
    files need matplotlib.
    """
    if os.path.isdir(path):
        raise UsageError(f"{option} {path!r} is a folder; give the path of a file to write")
    if os.path.lexists(path) and not is_mine(path):  # this process's own: a run before wrote it
        raise UsageError(exists_message(option, path))
    folder = os.path.dirname(os.path.abspath(path))
    while not os.path.lexists(folder):
        folder = os.path.dirname(folder)
    if not os.path.isdir(folder):
        raise UsageError(f"{option} {path!r}: {folder!r} is not a folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise UsageError(f"{option} {path!r}: the folder {folder!r} is not writable")
    if drawn and importlib.util.find_spec("matplotlib") is None:
        raise UsageError(f"{option} needs matplotlib: pip install 'hccl_py[bench]'")
    if drawn and (problem := drawable(path)):
        raise UsageError(f"{option} {path!r}: {problem}")


def check_outputs(*outputs: tuple[str, str | None, str | None, bool]) -> None:
    """:func:`check_output` of each (option, its path or None, the variable that stands in for
    it or None, drawn); a drawing's path "-" is no file (the layout picture as text only).
    Two outputs at one path are refused: the second would replace the first (its own file)."""
    seen: dict[str, str] = {}
    for option, path, env, drawn in outputs:
        path, what = (
            (path, option) if path or env is None else (os.environ.get(env), env_label(env))
        )
        if path and not (drawn and path == "-"):
            check_output(what, path, drawn=drawn)
            first = seen.setdefault(os.path.abspath(path), what)
            if first != what:
                raise UsageError(
                    f"{what} {path!r} names the same file as {first}: the second written would "
                    "replace the first; give each output a path of its own"
                )


def host_memory() -> int | None:
    """This host's physical memory in bytes (None where ``os.sysconf`` cannot tell)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None
