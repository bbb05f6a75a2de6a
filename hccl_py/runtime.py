"""``hp.run``: start the ranks of a program on the chosen backend."""

from __future__ import annotations

import contextlib
import functools
import gc
import os
import sys
from collections.abc import Callable, Collection, Iterator
from typing import Any

import numpy as np

from .backends import backend_info, get_backend
from .core.backend_info import DEFAULT_BACKEND
from .core.config import (
    SCHEDULES,
    TIMEOUT_ENV,
    Config,
    checked_flag,
    checked_int,
    checked_timeout,
    default_timeout,
    env_flag,
)
from .core.constants import MAX_WORLD_SIZE
from .core.errors import WorldError
from .core.platform import RANKS_PER_SERVER_ENV, Platform, get_platform, ranks_per_server_default
from .core.report import KINDS, new_run, plain_repr
from .explore import explore as explore_schedules
from .kernel.context import current_rank_context
from .kernel.outcome import RunResult, WithWarnings, summarize
from .launcher.cli_checks import check_outputs
from .launcher.spec import under_launcher
from .server.windows import BUFFSIZE_ENV, checked_buffsize, default_buffsize
from .trace import chrome
from .trace.picture import LayoutPicture
from .trace.summary import format_summary
from .trace.summary import rows as summary_rows

#: Environment variable that turns the end-of-run summary on (``HCCL_PY_SUMMARY=1``).
SUMMARY_ENV = "HCCL_PY_SUMMARY"
#: Environment variable naming a trace file for every hp.run (``run --trace``).
TRACE_ENV = "HCCL_PY_TRACE"
#: Environment variable asking for the layout picture (a PNG path, or "-" for text only).
LAYOUT_ENV = "HCCL_PY_LAYOUT"
#: Schedule ("eager"/"late") and poison ("1") of runs that do not pass schedule=/poison=.
SCHEDULE_ENV = "HCCL_PY_SCHEDULE"
POISON_ENV = "HCCL_PY_POISON"
#: The emulator's schedule seed and the number of schedules to explore (``run --seed/--explore``).
SEED_ENV = "HCCL_PY_SEED"
EXPLORE_ENV = "HCCL_PY_EXPLORE"

WORLD_SIZE_ENV = "HCCL_PY_WORLD_SIZE"
#: Set by ``python -m hccl_py run -n N`` on the emulator: the rank count the user asked for.
RUNNER_NPROC_ENV = "HCCL_PY_RUNNER_NPROC"
BACKEND_ENV = "HCCL_PY_BACKEND"
PLATFORM_ENV = "HCCL_PY_PLATFORM"


def default_backend() -> str:
    """``HCCL_PY_BACKEND``, else "gloo"/"hccl" under a launcher, else "emu"."""
    chosen = os.environ.get(BACKEND_ENV)
    if chosen:
        return chosen
    if not under_launcher():
        return DEFAULT_BACKEND
    from .backends.dist.npu import npus_visible

    return "hccl" if npus_visible() else "gloo"


@contextlib.contextmanager
def frozen_heap() -> Iterator[None]:
    """Keep the objects that exist before a run out of the garbage collector's scans during it.

    A run allocates many small objects per call (tasks, handles); each full
    collection would otherwise walk every object of torch and of the user's
    program, which made collections a third of a small op's cost. The objects
    stay alive and are handed back to the collector when the run ends. A
    program that froze its own objects (``gc.freeze``) is left as it is.
    """
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _checked_world_size(value: object) -> int | None:
    """``world_size`` as given to hp.run: None or an int in 1..MAX_WORLD_SIZE, else ValueError."""
    if value is None:
        return None
    expected = f"an int in 1..{MAX_WORLD_SIZE} (or left out)"
    return checked_int("world_size", value, 1, MAX_WORLD_SIZE, expected)


def _warning_kinds(value: object) -> bool | frozenset[str]:
    """``warnings_as_errors``: True/False, or HcclWarning kinds (one name or a collection)."""
    if isinstance(value, (bool, np.bool_)):
        return checked_flag("warnings_as_errors", value)
    kinds = [value] if isinstance(value, str) else value
    try:
        chosen = frozenset(kinds)
    except TypeError:
        chosen = None
    unknown = None if chosen is None else sorted(map(repr, chosen - set(KINDS)))
    if chosen is None or unknown:
        raise ValueError(
            "warnings_as_errors must be True, False or HcclWarning kinds out of "
            f"{sorted(KINDS)}, not {value!r}"
            + (f" (unknown: {', '.join(unknown)})" if unknown else "")
        )
    return chosen


def run(
    fn: Callable[..., Any],
    world_size: int | None = None,
    backend: str | None = None,
    platform: str | None = None,
    timeout: float | None = None,
    *,
    strict: bool = True,
    schedule: str | None = None,
    poison: bool | None = None,
    overlap: str = "error",
    warnings_as_errors: bool | Collection[str] = (),
    args: tuple = (),
    trace: str | os.PathLike | None = None,
    summary: bool | None = None,
    record: bool = False,
    buffsize_mb: int | None = None,
    ranks_per_server: int | None = None,
    seed: int | None = None,
    explore: int | None = None,
) -> RunResult:
    """Run ``fn(*args)`` once per rank (SPMD) and return the per-rank results.

    On the emulator ``world_size`` ranks (default ``HCCL_PY_WORLD_SIZE`` or 4)
    run as threads of this process. If any rank fails, one
    :class:`~hccl_py.core.errors.WorldError` reports every rank's failure.
    ``platform`` ("A2", "A3", "950"; default ``HCCL_PY_PLATFORM`` or "A2")
    decides which calls are allowed. See :class:`~hccl_py.kernel.context.Config` for
    ``strict``, ``timeout``, ``schedule``, ``poison``, ``overlap`` and
    ``warnings_as_errors`` (``schedule`` and ``poison`` default to
    ``HCCL_PY_SCHEDULE`` and ``HCCL_PY_POISON``, else "eager" and False;
    ``python -m hccl_py run --schedule late --poison`` sets them); ``buffsize_mb``
    is the size of each communication window (default ``HCCL_BUFFSIZE`` or 200 MB),
    ``ranks_per_server`` how many consecutive ranks form one server (default
    ``HCCL_PY_RANKS_PER_SERVER`` or 8). The result is a list with a ``warnings`` attribute
    (rank -> :class:`~hccl_py.core.errors.HcclWarning` list); a run with warnings
    ends with a short summary on stderr. ``trace="run.json"`` writes a timeline of
    every call and round (Chrome trace JSON for Perfetto); ``summary=True`` (or
    ``HCCL_PY_SUMMARY=1``) prints tasks, rounds, bytes and Wait time per rank and
    domain at the end; ``record=True`` only keeps the recording in the result's
    ``traces`` (see docs/debugging.md). On the emulator, ``seed=S`` (``HCCL_PY_SEED``)
    runs a reproducible seeded schedule instead of the fixed default one, and
    ``explore=N`` (``HCCL_PY_EXPLORE``) runs the program under N schedules with
    the sanitizer on unless ``poison=False`` (see docs/emulator.md).
    """
    if not callable(fn):
        raise TypeError(f"hp.run needs the function every rank runs, not {plain_repr(fn)}")
    if not isinstance(args, (tuple, list)):
        raise TypeError(f"args must be a tuple of the function's arguments, not {plain_repr(args)}")
    world_size = env_world_size() if world_size is None else _checked_world_size(world_size)
    asked = os.environ.get(RUNNER_NPROC_ENV)
    if asked and world_size is not None and int(world_size) != int(asked):
        raise ValueError(
            f"python -m hccl_py run -n {asked} asked for {asked} ranks, but the script calls "
            f"hp.run(..., world_size={world_size}): drop world_size= from hp.run to let -n "
            f"choose, or run with -n {world_size}"
        )
    summary = checked_flag("summary", env_flag(SUMMARY_ENV) if summary is None else summary)
    if trace is not None and not isinstance(trace, (str, os.PathLike)):
        raise TypeError(
            f"trace must be a file path (str or os.PathLike) or None, not {type(trace).__name__}"
        )
    if _lead():  # the files the run writes at its end: mistakes in their paths stop it now
        check_outputs(
            ("trace", trace and os.fspath(trace), TRACE_ENV, False), ("", None, LAYOUT_ENV, True)
        )
    trace = trace or os.environ.get(TRACE_ENV) or None
    picture = os.environ.get(LAYOUT_ENV) or None
    seed = _env_count(SEED_ENV, 0) if seed is None else seed
    explore = _env_count(EXPLORE_ENV, 1) if explore is None else explore
    if explore is not None:
        explore = checked_int("explore", explore, 1, expected="a positive number of schedules")
    if explore and poison is None:
        poison = True
    if explore and seed is not None:
        raise ValueError(
            f"seed={seed} replays one schedule and explore={explore} runs the default one and "
            "seeds 1 to explore - 1: give one of them (HCCL_PY_SEED / HCCL_PY_EXPLORE, --seed / "
            "--explore)"
        )
    config = Config(
        platform=_env_platform() if platform is None else get_platform(platform),
        strict=strict,
        timeout=checked_timeout(timeout),
        schedule=_env_schedule() if schedule is None else schedule,
        poison=env_flag(POISON_ENV) if poison is None else poison,
        overlap=overlap,
        warnings_as_errors=_warning_kinds(warnings_as_errors),
        record=checked_flag("record", record) or bool(trace or summary or picture),
        buffsize_mb=(default_buffsize() if buffsize_mb is None else checked_buffsize(buffsize_mb)),
        **({} if ranks_per_server is None else {"ranks_per_server": ranks_per_server}),
        seed=seed,
    )
    name = default_backend() if backend is None else backend
    info = backend_info(name)
    if not info.in_process and (seed is not None or explore):
        raise ValueError(
            f"seed= and explore= pick schedules of the emulator; the {name} backend runs its "
            "ranks concurrently: run on the emulator (backend='emu', or python -m hccl_py run "
            "without --backend) to replay or explore schedules"
        )
    chosen = get_backend(name)
    info.check_settings()  # its own variables: a mistake before ranks start

    def run_one(cfg: Config) -> list[Any]:
        return chosen.run(WithWarnings(fn), tuple(args), world_size, cfg)

    new_run()
    with frozen_heap():
        try:
            ranks = explore_schedules(run_one, config, explore) if explore else run_one(config)
            result = RunResult(ranks)
        except WorldError as err:
            if trace and _lead():
                _kept(functools.partial(_write_failed_trace, trace, err))
            raise
    summarize(result)
    if _lead():
        if trace:
            _kept(lambda: chrome.write(trace, result.traces))
        if summary:
            print(format_summary(summary_rows(result.traces, result.warnings)), file=sys.stderr)
        if picture:
            drawn = LayoutPicture(result.traces)
            print(drawn.text(), file=sys.stderr)
            if picture != "-":
                _kept(lambda: drawn.save_png(picture))
    return result


def _kept(write: Callable[[], None]) -> None:
    """Write an output file after the run; whatever stops it (a file that appeared at its
    path, a full disk) is said, not raised in place of the run's outcome."""
    try:
        write()
    except Exception as exc:  # noqa: BLE001 - the outcome matters more than the file
        print(f"hccl_py: {exc}; not written", file=sys.stderr)


def _env_int(name: str) -> int | None:
    """An int from environment variable ``name`` (None when unset)."""
    value = os.environ.get(name)
    if not value:
        return None
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{name} must be an integer, not {value!r}") from None


def env_world_size() -> int | None:
    """The world size ``HCCL_PY_WORLD_SIZE`` says (None when unset or empty)."""
    value = _env_int(WORLD_SIZE_ENV)
    return None if value is None else checked_int(WORLD_SIZE_ENV, value, 1, MAX_WORLD_SIZE)


def _env_count(name: str, least: int) -> int | None:
    """An int of at least ``least`` from environment variable ``name`` (None when unset)."""
    value = _env_int(name)
    return None if value is None else checked_int(name, value, least)


def _env_platform() -> Platform:
    """The platform ``HCCL_PY_PLATFORM`` names (A2 when unset or empty)."""
    try:
        return get_platform(os.environ.get(PLATFORM_ENV) or "A2")
    except ValueError as exc:
        raise ValueError(f"{PLATFORM_ENV}: {exc}") from None


def _env_schedule() -> str:
    """The schedule ``HCCL_PY_SCHEDULE`` names ("eager" when unset or empty)."""
    value = os.environ.get(SCHEDULE_ENV) or "eager"
    if value not in SCHEDULES:
        raise ValueError(f"{SCHEDULE_ENV} must be one of {', '.join(SCHEDULES)}, not {value!r}")
    return value


#: hp.run's settings read from the environment, each by the reader hp.run uses.
_ENV_READERS: dict[str, Callable[[], object]] = {
    WORLD_SIZE_ENV: env_world_size,
    PLATFORM_ENV: _env_platform,
    SCHEDULE_ENV: _env_schedule,
    POISON_ENV: lambda: env_flag(POISON_ENV),
    SUMMARY_ENV: lambda: env_flag(SUMMARY_ENV),
    SEED_ENV: lambda: _env_count(SEED_ENV, 0),
    EXPLORE_ENV: lambda: _env_count(EXPLORE_ENV, 1),
    TIMEOUT_ENV: default_timeout,
    BUFFSIZE_ENV: default_buffsize,
    RANKS_PER_SERVER_ENV: ranks_per_server_default,
}


def check_environment(backend: str, skip: Collection[str] = ()) -> None:
    """Read every setting of hp.run's environment that a run on ``backend`` reads, as it reads
    it, but those in ``skip`` (set by the caller): a ValueError naming the first variable whose
    value it would refuse. The command line calls it before anything runs."""
    for name, read in _ENV_READERS.items():
        if name not in skip:
            read()
    backend_info(backend).check_settings()


def _lead() -> bool:
    """Whether this process writes and prints for the run (under a launcher: rank 0's)."""
    return os.environ.get("RANK", "0") == "0"


def print_rank0(*values: Any, **kwargs: Any) -> None:
    """``print(*values, **kwargs)`` once per job, not once per rank.

    Inside the function given to :func:`run` it prints on rank 0 only (the same
    as ``if hp.get_rank() == 0: print(...)``); outside it, in the host code
    around ``hp.run``, it prints in rank 0's process under torchrun, msrun or
    ``python -m hccl_py run --backend gloo`` (each process runs that code) and
    always otherwise.
    """
    ctx = current_rank_context(required=False)
    if ctx.rank == 0 if ctx is not None else _lead():
        print(*values, **kwargs)


def _write_failed_trace(path: str | os.PathLike, err: WorldError) -> None:
    """Write what the failed ranks recorded up to their failure, and say where it is."""
    traces = {r: e.hccl_trace for r, e in err.failures.items() if hasattr(e, "hccl_trace")}
    if traces:
        chrome.write(path, traces)
        print(
            f"hccl_py: the timeline of the failed run (ranks {sorted(traces)}) is in {path}",
            file=sys.stderr,
        )


def explain_layout(
    fn: Callable[..., Any],
    *args: Any,
    world_size: int | None = None,
    png: str | os.PathLike | None = None,
    **options: Any,
) -> LayoutPicture:
    """Run ``fn(*args)`` like :func:`run` and picture where every received byte landed.

    Returns a :class:`~hccl_py.trace.picture.LayoutPicture`: ``.text()`` draws
    each rank's receive buffers as strips (source rank per byte range, task and
    round, gaps left unwritten, overlaps written twice), then its send buffers
    (``.send_strips``: the rank each range goes to, task and round, unread
    ranges, ranges read twice); ``.save_png(path)`` the same with matplotlib;
    ``png=`` saves it at once. ``options`` are :func:`run`'s (backend,
    platform, ...).
    """
    result = run(fn, world_size, args=args, record=True, **options)
    drawn = LayoutPicture(result.traces)
    if png is not None:
        drawn.save_png(png)
    return drawn
