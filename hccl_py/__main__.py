"""Command line: ``python -m hccl_py run -n N [--backend emu|gloo] script.py [args]``."""

from __future__ import annotations

import argparse
import os
import runpy
import sys

from .runtime import BACKEND_ENV, BACKENDS, PLATFORM_ENV, WORLD_SIZE_ENV


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``python -m hccl_py``."""
    parser = argparse.ArgumentParser(prog="python -m hccl_py", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run a script that calls hccl_py.run(main) on N ranks")
    run.add_argument("-n", "--nproc", type=int, default=4, help="number of ranks (default 4)")
    run.add_argument("--backend", choices=sorted(BACKENDS), default=None, help="default: emu")
    run.add_argument("--platform", choices=["A2", "A3", "950"], default=None, help="default: A2")
    run.add_argument("script", help="the Python script to run")
    run.add_argument("args", nargs=argparse.REMAINDER, help="arguments passed to the script")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the process exit code."""
    opts = build_parser().parse_args(argv)
    if opts.nproc < 1:
        print(f"error: -n must be >= 1, not {opts.nproc}", file=sys.stderr)
        return 2
    os.environ[WORLD_SIZE_ENV] = str(opts.nproc)
    if opts.backend:
        os.environ[BACKEND_ENV] = opts.backend
    if opts.platform:
        os.environ[PLATFORM_ENV] = opts.platform
    sys.argv = [opts.script, *opts.args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(opts.script)))
    try:
        runpy.run_path(opts.script, run_name="__main__")
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
