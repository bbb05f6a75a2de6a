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


class _HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """Keeps the description's lines and shows every option's default."""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``python -m hccl_py`` (also installed as ``hccl-py``)."""
    parser = argparse.ArgumentParser(
        prog="python -m hccl_py", description=DESCRIPTION, formatter_class=_HelpFormatter
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
        default=4,
        help="ranks per host (as mpirun -n; in bench, -n is hccl_test's iteration count and "
        "the ranks are --nproc)",
    )
    run.add_argument(
        "--backend",
        choices=sorted(BACKENDS),
        default=None,
        help=f"where the ranks run (None: ${BACKEND_ENV}, else emu)",
    )
    run.add_argument(
        "--platform", choices=["A2", "A3", "950"], default=None, help="the platform (None: A2)"
    )
    checks = run.add_argument_group("sanitizer (for hp.run calls that do not set them)")
    checks.add_argument(
        "--schedule",
        choices=("eager", "late"),
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
    multi.add_argument("--nnodes", type=int, default=1, help="number of hosts")
    multi.add_argument("--node-rank", type=int, default=0, help="this host's index")
    multi.add_argument("--master-addr", default="127.0.0.1", help="address of node 0")
    multi.add_argument(
        "--master-port", type=int, default=None, help="store port on node 0 (None: a free one)"
    )
    multi.add_argument(
        "--listen-addr",
        default=None,
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
    try:
        runpy.run_path(opts.script, run_name="__main__")
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return 0


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
    if opts.nproc < 1 or opts.nnodes < 1 or not 0 <= opts.node_rank < opts.nnodes:
        print(
            f"error: need -n >= 1, --nnodes >= 1 and 0 <= --node-rank < --nnodes "
            f"(got -n {opts.nproc}, --nnodes {opts.nnodes}, --node-rank {opts.node_rank})",
            file=sys.stderr,
        )
        return 2
    if not os.path.isfile(opts.script):
        what = "is a directory" if os.path.isdir(opts.script) else "does not exist"
        print(
            f"error: the script {opts.script!r} {what}; give the path of a Python file "
            "(relative to the current directory or absolute)",
            file=sys.stderr,
        )
        return 2
    backend = opts.backend or os.environ.get(BACKEND_ENV) or "emu"
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
    if opts.seed is not None or opts.explore is not None:
        if backend != "emu":
            print(
                f"error: --seed and --explore pick schedules of the emulator; the {backend} "
                "backend runs its ranks concurrently: run on the emulator (no --backend)",
                file=sys.stderr,
            )
            return 2
        if opts.seed is not None:
            os.environ[SEED_ENV] = str(opts.seed)
        if opts.explore is not None:
            os.environ[EXPLORE_ENV] = str(opts.explore)
    if backend == "emu":
        return _run_in_process(opts)
    from .launcher.forked import exit_as_python
    from .launcher.script import RunnerOptions, run_script
    from .launcher.spec import LaunchError

    backend_module = BACKENDS.get(backend, "").partition(":")[0]

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
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if fast_exit:
        exit_as_python(code)
    return code


if __name__ == "__main__":
    sys.exit(main(fast_exit=True))
