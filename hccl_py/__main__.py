"""Command line: ``python -m hccl_py run -n N [--backend emu|gloo|hccl] script.py [args]``.

Also installed as the ``hccl-py`` console script. :data:`DESCRIPTION` is what
``--help`` prints.
"""

from __future__ import annotations

import argparse
import os
import runpy
import sys

try:
    from . import __version__
except ImportError:
    # A folder named hccl_py without __init__.py (a clone's root, seen from its parent
    # folder) was imported as a namespace package in place of the installed package.
    _shadow = sys.modules.get(__package__ or "hccl_py")
    if _shadow is None or getattr(_shadow, "__file__", None) is not None:
        raise
    raise SystemExit(
        f"error: 'hccl_py' was imported from {', '.join(_shadow.__path__)}, a folder without "
        "__init__.py (the root of a clone, seen from its parent folder), not from the "
        "installed package. Run python -m hccl_py from another folder (for example inside "
        "the clone), or use the installed hccl-py command"
    ) from None
from .backends import BACKENDS
from .core.config import SCHEDULES
from .core.constants import MAX_WORLD_SIZE
from .core.platform import PLATFORMS
from .launcher.cli_checks import (
    MAX_PORT,
    PROG,
    UsageError,
    check_outputs,
    check_script,
    checked_backend,
    checked_ranks,
    emulator_only,
    env_label,
    environment,
    in_range,
    one_schedule_choice,
    ranks_per_host,
    report,
)
from .runtime import (
    BACKEND_ENV,
    EXPLORE_ENV,
    LAYOUT_ENV,
    PLATFORM_ENV,
    POISON_ENV,
    RUNNER_NPROC_ENV,
    SCHEDULE_ENV,
    SEED_ENV,
    SUMMARY_ENV,
    TRACE_ENV,
    WORLD_SIZE_ENV,
    check_environment,
    default_backend,
    env_world_size,
)

#: What ``--help`` says, in plain words.
DESCRIPTION = """\
Run programs written with hccl_py on several ranks.

With the emulator (the default) the script runs once, in this process, and
hp.run starts N rank threads. With gloo or hccl the runner starts N processes
of the script, one per rank (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and
MASTER_PORT set as torchrun sets them), prefixes their output with [rank k]
and stops every rank when one fails. For several hosts, run the same command
on each with --nnodes, --node-rank, --master-addr and --master-port (node 0
hosts the rendezvous store, listening on --master-addr only; across hosts every
host needs the same HCCL_PY_SECRET)."""


#: What ``layout --help`` prints.
LAYOUT_DESCRIPTION = """\
Run a script as 'run' does, then draw each rank's receive buffers as strips of
byte ranges: which rank each range came from, with task (handle) and round,
ranges no round wrote and ranges written twice; then each rank's send buffers:
which rank each range goes to, with task and round, ranges no round read and
ranges read twice. The text goes to stderr; --png also draws it with
matplotlib."""


#: The options of several hosts and their defaults: the emulator takes none of them.
MULTI_HOST_DEFAULTS = {
    "nnodes": 1,
    "node_rank": 0,
    "master_addr": "127.0.0.1",
    "master_port": None,
    "listen_addr": None,
}


class _HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """Keeps the description's lines and shows every option's default."""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``python -m hccl_py`` (also installed as ``hccl-py``)."""
    parser = argparse.ArgumentParser(
        prog=PROG, description=DESCRIPTION, formatter_class=_HelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"hccl_py {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    commands = (
        ("run", "run a script that calls hccl_py.run(main) on N ranks", DESCRIPTION),
        ("layout", "run a script and picture where every received byte landed", LAYOUT_DESCRIPTION),
    )
    for name, summary, description in commands:
        cmd = sub.add_parser(
            name, help=summary, description=description, formatter_class=_HelpFormatter
        )
        _add_run_options(cmd)
        if name == "run":
            cmd.add_argument("--trace", default=None, help="write a timeline (Chrome trace JSON)")
            cmd.add_argument("--summary", action="store_true", help="print a summary per rank")
        else:
            cmd.add_argument("--png", default=None, help="also draw the picture to this PNG file")
    from .bench.cli import add_parser as add_bench

    add_bench(sub, _HelpFormatter)
    return parser


def _add_run_options(run: argparse.ArgumentParser) -> None:
    """The options that ``run`` and ``layout`` share."""
    run.add_argument(
        "-n",
        "--nproc",
        type=int,
        default=None,
        help="ranks per host (as mpirun -n; in bench, -n is hccl_test's iteration count and "
        "the ranks are --nproc); None: $HCCL_PY_WORLD_SIZE over --nnodes hosts, else 4",
    )
    run.add_argument(
        "--backend",
        choices=sorted(BACKENDS),
        default=None,
        help=f"where the ranks run (None: ${BACKEND_ENV}, else emu)",
    )
    run.add_argument(
        "--platform",
        type=str.upper,  # any case, as hp.run and HCCL_PY_PLATFORM take it
        choices=list(PLATFORMS),
        default=None,
        help=f"the platform (None: ${PLATFORM_ENV}, else A2)",
    )
    checks = run.add_argument_group("sanitizer (for hp.run calls that do not set them)")
    checks.add_argument(
        "--schedule",
        choices=SCHEDULES,
        default=None,
        help="run rounds as soon as possible or as late as possible (see docs/sanitizer.md)",
    )
    checks.add_argument(
        "--poison",
        action="store_true",
        help="NaN / 0xFF in receive ranges until their round ran; window race check (emulator)",
    )
    checks.add_argument(
        "--seed",
        type=int,
        default=None,
        help="the emulator's schedule: a seeded one instead of the fixed default (replays a "
        "schedule that --explore reported)",
    )
    checks.add_argument(
        "--explore",
        type=int,
        default=None,
        metavar="N",
        help="run under N emulator schedules (with --poison's checks) and stop at the first failure",
    )
    multi = run.add_argument_group("several hosts (gloo, hccl)")
    multi.set_defaults(**MULTI_HOST_DEFAULTS)
    multi.add_argument("--nnodes", type=int, help="number of hosts")
    multi.add_argument("--node-rank", type=int, help="this host's index")
    multi.add_argument("--master-addr", help="address of node 0")
    multi.add_argument(
        "--master-port", type=int, help="store port on node 0 (None or 0: a free one)"
    )
    multi.add_argument(
        "--listen-addr",
        help="address node 0's store listens on (None: $HCCL_PY_LISTEN_ADDR, else --master-addr)",
    )
    run.add_argument("script", help="the Python script to run")
    run.add_argument("args", nargs=argparse.REMAINDER, help="arguments passed to the script")


def _run_in_process(opts: argparse.Namespace) -> int:
    """The emulator: run the script here; its hp.run starts the rank threads."""
    os.environ[WORLD_SIZE_ENV] = str(opts.nproc)
    os.environ[RUNNER_NPROC_ENV] = str(opts.nproc)
    sys.argv = [opts.script, *opts.args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(opts.script)))
    from .launcher.forked import exit_code

    try:
        runpy.run_path(opts.script, run_name="__main__")
    except SystemExit as exc:
        return exit_code(exc)  # its message printed as Python (and a gloo rank) prints it
    return 0


def _checked(opts: argparse.Namespace) -> str:
    """Check what ``run`` or ``layout`` was given (options, script, environment); the backend.

    Each mistake is a :class:`UsageError` before anything runs, with hp.run's own
    limits; environment variables count where the option is left out, as hp.run reads them.
    """
    backend = opts.backend or default_backend()
    checked_backend("--backend" if opts.backend else env_label(BACKEND_ENV), backend)
    if BACKENDS[backend].in_process:
        _check_one_host(opts)
    nnodes = checked_ranks("--nnodes", opts.nnodes)
    world = None if opts.nproc is not None else environment(env_world_size)
    opts.nproc = ranks_per_host("-n/--nproc", opts.nproc, world, nnodes)
    check_script(opts.script)
    if not BACKENDS[backend].in_process:
        _check_hosts(opts, nnodes)
    given = {WORLD_SIZE_ENV}  # set from -n
    for value, env in (
        (opts.platform, PLATFORM_ENV),
        (opts.schedule, SCHEDULE_ENV),
        (opts.poison, POISON_ENV),
        (getattr(opts, "summary", False), SUMMARY_ENV),
        (opts.seed, SEED_ENV),
        (opts.explore, EXPLORE_ENV),
    ):
        if value not in (None, False):
            given.add(env)
    environment(lambda: check_environment(backend, given))
    if opts.seed is not None:
        in_range("--seed", opts.seed, 0, why_low=" (a schedule's number)")
    if opts.explore is not None:
        in_range("--explore", opts.explore, 1, why_low=" (a number of schedules)")
    schedules = (("--seed", opts.seed, SEED_ENV), ("--explore", opts.explore, EXPLORE_ENV))
    emulator_only(backend, *schedules)
    one_schedule_choice(*schedules)
    layout = opts.command == "layout"  # it sets HCCL_PY_LAYOUT from --png ("-": text only)
    check_outputs(
        ("--trace", getattr(opts, "trace", None), TRACE_ENV, False),
        ("--png", getattr(opts, "png", None), None if layout else LAYOUT_ENV, True),
    )
    return backend


def _check_hosts(opts: argparse.Namespace, nnodes: int) -> None:
    """The options of several hosts (gloo, hccl; ``nnodes``: the checked --nnodes): counts,
    indexes and the store's port."""
    hosts = f" (the hosts of --nnodes {nnodes} are 0..{nnodes - 1})"
    in_range("--node-rank", opts.node_rank, 0, nnodes - 1, why_high=hosts)
    if nnodes * opts.nproc > MAX_WORLD_SIZE:
        raise UsageError(
            f"--nnodes {nnodes} hosts of -n {opts.nproc} ranks are {nnodes * opts.nproc} "
            f"ranks; a run has at most {MAX_WORLD_SIZE}"
        )
    if opts.master_port is not None:
        in_range("--master-port", opts.master_port, 0, MAX_PORT, why_low=" (0: a free port)")
    if nnodes > 1 and not opts.master_port:
        raise UsageError(
            f"--nnodes {nnodes} needs --master-port P with P in 1..{MAX_PORT}: the port of node "
            "0's store, which the other hosts connect to (0 would pick one they cannot know)"
        )


def _check_one_host(opts: argparse.Namespace) -> None:
    """The emulator runs every rank in this process: the options of several hosts are refused."""
    for dest, default in MULTI_HOST_DEFAULTS.items():
        if getattr(opts, dest) != default:
            option = "--" + dest.replace("_", "-")
            raise UsageError(
                f"{option} applies to the gloo and hccl backends only (one process per rank, "
                f"on one or several hosts); the emulator runs every rank in this process: drop "
                f"{option}, or add --backend gloo"
            )


def main(argv: list[str] | None = None, *, fast_exit: bool = False) -> int:
    """Entry point; returns the process exit code.

    With ``fast_exit`` (the command line) a runner that started its ranks on
    another backend then ends this process as Python would (threads joined,
    ``atexit`` run, output flushed) without tearing down the interpreter, which
    with torch loaded costs about a CPU-second; it ran none of the user's code.
    """
    opts = build_parser().parse_args(argv)
    if opts.command == "bench":
        from .bench.cli import main as bench_main

        return bench_main(opts)
    try:
        backend = _checked(opts)
    except UsageError as exc:
        return report(opts.command, exc)
    if opts.backend:
        os.environ[BACKEND_ENV] = opts.backend
    if opts.platform:
        os.environ[PLATFORM_ENV] = opts.platform
    if opts.command == "layout":
        os.environ[LAYOUT_ENV] = opts.png or "-"
    if getattr(opts, "trace", None):
        os.environ[TRACE_ENV] = os.path.abspath(opts.trace)
    if getattr(opts, "summary", False):
        os.environ[SUMMARY_ENV] = "1"
    if opts.schedule:
        os.environ[SCHEDULE_ENV] = opts.schedule
    if opts.poison:
        os.environ[POISON_ENV] = "1"
    if opts.seed is not None:
        os.environ[SEED_ENV] = str(opts.seed)
    if opts.explore is not None:
        os.environ[EXPLORE_ENV] = str(opts.explore)
    if BACKENDS[backend].in_process:
        return _run_in_process(opts)
    from .launcher.forked import exit_as_python
    from .launcher.script import RunnerOptions, run_script
    from .launcher.spec import LaunchError

    backend_module = BACKENDS[backend].target.partition(":")[0]

    try:
        code = run_script(
            RunnerOptions(
                script=opts.script,
                script_args=tuple(opts.args),
                nproc=opts.nproc,
                backend=backend,
                nnodes=opts.nnodes,
                node_rank=opts.node_rank,
                master_addr=opts.master_addr,
                master_port=opts.master_port,
                platform=opts.platform,
                listen_addr=opts.listen_addr,
                preload=(backend_module,) if backend_module else (),
            )
        )
    except LaunchError as exc:
        return report(opts.command, exc)
    if fast_exit:
        exit_as_python(code)
    return code


if __name__ == "__main__":
    sys.exit(main(fast_exit=True))
