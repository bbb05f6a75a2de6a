"""``python -m hccl_py bench``: hccl_test / nccl-tests style sweeps of the collectives.

The emulator runs the ranks as threads of this process; gloo starts one
process per rank; hccl runs under torchrun or msrun (one process per NPU).
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
from typing import Any

import hccl_py as hp

from ..backends import BACKENDS
from ..core.backend_info import DEFAULT_BACKEND
from ..core.config import SCHEDULES
from ..core.constants import MAX_BLOCK_DIM, MAX_REPEAT
from ..core.errors import WorldError
from ..core.platform import PLATFORMS
from ..launcher.cli_checks import (
    PROG,
    UsageError,
    check_outputs,
    checked_backend,
    checked_platform,
    emulator_only,
    env_label,
    environment,
    host_memory,
    in_range,
    ranks_per_host,
    report,
)
from ..launcher.spec import under_launcher
from ..launcher.torch_env import local_ranks
from ..runtime import (
    BACKEND_ENV,
    EXPLORE_ENV,
    LAYOUT_ENV,
    PLATFORM_ENV,
    POISON_ENV,
    SCHEDULE_ENV,
    SEED_ENV,
    TRACE_ENV,
    WORLD_SIZE_ENV,
    check_environment,
    env_world_size,
)
from .ops import BENCH_OPS, plan
from .reference import REDUCE_OPS, TYPE_ALIASES, TYPES
from .sweep import Options, merge, rank_sweep
from .table import plot, print_rows, write_json

DESCRIPTION = """\
Measure the collectives as hccl_test and nccl-tests do: one row per size with
the time of one op (the slowest rank), algorithm and bus bandwidth (GB/s,
nccl-tests formulas) and the number of wrong elements against a numpy
reference. --api kernel times one kernel launch per op (InitV2,
SetCcTilingV2, Op[True] with --repeat rounds, a Wait per round, Finalize);
--api framework times the framework collective (all_gather_into_tensor ...).
Sizes are bytes each rank sends per round and accept K, M and G suffixes.

-b -e -f -i -o -d -n -w -c are hccl_test's flags and mean what they mean there
(-n: timed iterations). The ranks are --nproc, as in 'run' (where -n is short
for --nproc), and the platform defaults to A2, as in 'run'; an op that A2 does
not have (alltoallv) is measured on A3 then."""

#: The platform when neither --platform nor $HCCL_PY_PLATFORM names one (as in 'run').
DEFAULT_PLATFORM = "A2"
#: Where an op that the default platform lacks is measured, first that has it.
FALLBACK_PLATFORMS = ("A3", "950")

#: The sweep's sizes and iterations when no option names them (hccl_test's defaults).
SWEEP = {
    "min_bytes": 1024,
    "max_bytes": 1024 * 1024,
    "step_factor": 2,
    "step_bytes": 0,
    "iters": 20,
    "warmup": 5,
}
#: ``--quick``'s (the sweep the test suite runs to keep the benchmark working); an option
#: given with it still sets its own value.
QUICK = {**SWEEP, "max_bytes": 64 * 1024, "step_factor": 8, "iters": 2, "warmup": 1}
#: Option destination -> the sweep field it sets.
SWEEP_OPTIONS = {
    "minbytes": "min_bytes",
    "maxbytes": "max_bytes",
    "stepfactor": "step_factor",
    "stepbytes": "step_bytes",
    "iters": "iters",
    "warmup_iters": "warmup",
}


def parse_size(text: str) -> int:
    """``64K`` -> 65536: a byte count with an optional K, M or G suffix (powers of 1024)."""
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:].upper(), 1)
    digits = text[:-1] if scale > 1 else text
    try:
        return int(digits) * scale
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a size: {text!r} (examples: 1024, 64K, 16M)"
        ) from None


def add_parser(sub: Any, formatter: type[argparse.HelpFormatter]) -> None:
    """Add the ``bench`` subcommand to ``python -m hccl_py``."""
    p = sub.add_parser(
        "bench",
        help="measure the collectives (hccl_test style)",
        description=DESCRIPTION,
        formatter_class=formatter,
    )
    p.add_argument(
        "--op",
        default="allgather",
        help=f"op(s) to measure, comma separated, or 'all' ({', '.join(BENCH_OPS)})",
    )
    p.add_argument(
        "--nproc",
        "--ranks",
        dest="ranks",
        metavar="N",
        type=int,
        default=None,
        help="ranks, as run's -n/--nproc (emu, gloo; under launchers: ignored); None: "
        "$HCCL_PY_WORLD_SIZE, else 4",
    )
    p.add_argument(
        "--backend", choices=sorted(BACKENDS), help="where ranks run (default: as run's)"
    )
    p.add_argument(
        "--api", choices=["kernel", "framework"], default="kernel", help="what one op is"
    )
    p.add_argument(
        "--platform",
        type=str.upper,  # any case, as hp.run and HCCL_PY_PLATFORM take it
        choices=list(PLATFORMS),
        default=None,
        help=f"the platform (None: ${PLATFORM_ENV}, else {DEFAULT_PLATFORM} as in run; "
        "ops that A2 lacks on A3)",
    )
    sweep = functools.partial(p.add_argument, default=argparse.SUPPRESS)  # absent unless given
    sweep("-b", "--minbytes", type=parse_size, help="smallest size (default: 1K)")
    sweep("-e", "--maxbytes", type=parse_size, help="largest size (default: 1M, --quick 64K)")
    sweep("-f", "--stepfactor", type=int, help="size multiplier (default: 2, --quick 8)")
    sweep("-i", "--stepbytes", type=parse_size, help="size step, instead of -f (default: 0)")
    p.add_argument("-o", "--op-reduce", choices=sorted(REDUCE_OPS), default="sum", help="reduce op")
    p.add_argument(
        "-d", "--datatype", choices=sorted([*TYPES, *TYPE_ALIASES]), default="fp32", help="type"
    )
    sweep("-n", "--iters", type=int, help="timed iterations per size (default: 20, --quick 2)")
    sweep("-w", "--warmup-iters", type=int, help="untimed iterations first (default: 5, --quick 1)")
    p.add_argument("-c", "--check", type=int, choices=[0, 1], default=1, help="check the results")
    p.add_argument("--repeat", type=int, default=1, help="rounds per task (--api kernel)")
    p.add_argument("--block-dim", type=int, default=1, help="cores per kernel launch")
    p.add_argument("--schedule", choices=SCHEDULES, help="emulator schedule (default: as run's)")
    p.add_argument("--poison", action="store_true", help="poison receive blocks (emulator)")
    p.add_argument(
        "--quick",
        action="store_true",
        help="a short sweep (1K..64K, 2 iterations); -b -e -f -i -n -w given too still apply",
    )
    p.add_argument("--json", default=None, help="also write every row to this JSON file")
    p.add_argument("--plot", default=None, help="also draw busbw against size to this PNG")
    p.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="progress bar (tqdm) on rank 0 (None: when stderr is a terminal)",
    )


def _options(opts: argparse.Namespace, op: str) -> Options:
    given = vars(opts)
    sizes = dict(QUICK if opts.quick else SWEEP)
    sizes.update(
        (field, given[option]) for option, field in SWEEP_OPTIONS.items() if option in given
    )
    progress = sys.stderr.isatty() if opts.progress is None else opts.progress
    return Options(
        op=op,
        api=opts.api,
        dtype=opts.datatype,
        redop=opts.op_reduce,
        check=bool(opts.check),
        repeat=opts.repeat,
        block_dim=opts.block_dim,
        progress=progress,
        **sizes,
    )


def _ops(text: str) -> list[str]:
    names = list(BENCH_OPS) if text == "all" else [t.strip() for t in text.split(",") if t.strip()]
    unknown = [n for n in names if n not in BENCH_OPS]
    if unknown or not names:
        raise ValueError(f"unknown op(s) {unknown}; choose from {list(BENCH_OPS)} or 'all'")
    return names


def platform_for(op: str, chosen: str | None) -> str:
    """The platform that measures ``op``: the chosen one, else A2, else the first that has it."""
    if chosen:
        return chosen
    platforms = BENCH_OPS[op].spec.platforms
    if DEFAULT_PLATFORM in platforms:
        return DEFAULT_PLATFORM
    return next(p for p in FALLBACK_PLATFORMS if p in platforms)


def _unsupported(opts: argparse.Namespace, sweep: Options, chosen: str | None) -> str | None:
    """Why the platform's kernel API cannot run ``sweep`` (what to change), or None."""
    ranks = None if BACKENDS[opts.backend].on_device else opts.ranks  # the launcher's world
    if sweep.api != "kernel":
        return None
    spec = BENCH_OPS[sweep.op].spec
    name = platform_for(sweep.op, chosen)
    platform = PLATFORMS[name]
    if not platform.supports(spec.cmd):
        where = [p for p in PLATFORMS if p in spec.platforms]
        return (
            f"{spec.name} is not in the kernel API of --platform {name} (it is on "
            f"{', '.join(where)}); choose --platform {where[0]} or --api framework"
        )
    if TYPES[sweep.dtype].hccl_type not in spec.dtypes:
        allowed = ", ".join(n for n, t in TYPES.items() if t.hccl_type in spec.dtypes)
        return (
            f"{spec.name} does not take -d {sweep.dtype} in the kernel API; choose one of "
            f"{allowed}, or --api framework (which reduces other types itself)"
        )
    limit = platform.max_alltoall_ranks
    if spec.name in ("AlltoAll", "AlltoAllV") and limit and ranks is not None and ranks > limit:
        return (
            f"{platform.name} allows at most {limit} ranks in {spec.name}; use --ranks <= {limit}"
        )
    return None


def _largest(sweep: Options) -> int:
    """The largest size of ``sweep`` (its last row), without listing the sizes."""
    if sweep.step_bytes:
        steps = (sweep.max_bytes - sweep.min_bytes) // sweep.step_bytes
        return sweep.min_bytes + steps * sweep.step_bytes
    size = sweep.min_bytes
    while size * sweep.step_factor <= sweep.max_bytes:
        size *= sweep.step_factor
    return size


def _ranks_here(ranks: int, backend: str) -> int | None:
    """How many ranks' buffers this host holds (None where a launcher does not say): the
    emulator's ``ranks`` in each process a launcher started here, one per process on gloo."""
    processes = local_ranks() if under_launcher() else 1
    if processes is None:
        return None
    if BACKENDS[backend].in_process:
        return processes * ranks
    return processes if under_launcher() else ranks


def _check_memory(sweep: Options, ranks: int, backend: str) -> None:
    """Refuse a sweep whose send and receive buffers on this host's ranks alone outgrow its
    memory."""
    memory, size, here = host_memory(), _largest(sweep), _ranks_here(ranks, backend)
    if memory is None or here is None:
        return
    kind = TYPES[sweep.dtype]
    # AlltoAllV's buffers are AlltoAll's; its plan also builds a ranks x ranks count matrix
    op = "alltoall" if sweep.op == "alltoallv" else sweep.op
    p = plan(BENCH_OPS[op], ranks, size, kind.size, sweep.repeat)
    need = here * (p.send + p.recv) * kind.size
    if need > memory:
        raise UsageError(
            f"-b/-e: the size {size} bytes of {sweep.op} needs {need / 2**30:.1f} GiB of send "
            f"and receive buffers on this host's {here} ranks, more than its "
            f"{memory / 2**30:.1f} GiB of memory; choose a smaller -e/--maxbytes or fewer ranks"
        )


def _checked(opts: argparse.Namespace) -> tuple[list[Options], str | None]:
    """The sweeps and the chosen platform, or UsageError/ValueError before anything runs."""
    opts.backend = checked_backend(  # as before HCCL_PY_BACKEND counted: the emulator
        "--backend" if opts.backend else env_label(BACKEND_ENV),
        opts.backend or os.environ.get(BACKEND_ENV) or DEFAULT_BACKEND,
    )
    on_device = BACKENDS[opts.backend].on_device
    # hp.run is given poison, the schedule if asked and (but on a device) the ranks; the
    # platform is read below
    given = {POISON_ENV, PLATFORM_ENV} | ({SCHEDULE_ENV} if opts.schedule else set())
    if not on_device:
        given.add(WORLD_SIZE_ENV)
    environment(lambda: check_environment(opts.backend, given))
    emulator_only(opts.backend, ("", None, SEED_ENV), ("", None, EXPLORE_ENV))
    if not on_device:  # else the launcher's world
        world = None if opts.ranks is not None else environment(env_world_size)
        opts.ranks = ranks_per_host("--nproc/--ranks", opts.ranks, world)
    if "stepbytes" in vars(opts) and "stepfactor" in vars(opts):
        raise UsageError(  # nccl-tests takes -f > 1 over -i, hccl_test has no -i: no guess
            "-i/--stepbytes and -f/--stepfactor both set the step between sizes; give one"
        )
    in_range("--block-dim", opts.block_dim, 1, MAX_BLOCK_DIM)
    in_range("--repeat", opts.repeat, 1, MAX_REPEAT)
    sweeps = [_options(opts, op) for op in _ops(opts.op)]
    chosen = opts.platform
    if not chosen and os.environ.get(PLATFORM_ENV):
        chosen = checked_platform(env_label(PLATFORM_ENV), os.environ[PLATFORM_ENV])
    for sweep in sweeps:
        problem = _unsupported(opts, sweep, chosen)
        if problem:
            raise UsageError(problem)
        if not on_device:  # else buffers in device memory, which os.sysconf does not see
            _check_memory(sweep, opts.ranks, opts.backend)
    check_outputs(
        ("--json", opts.json, None, False),
        ("--plot", opts.plot, None, True),
        ("", None, TRACE_ENV, False),
        ("", None, LAYOUT_ENV, True),
    )
    return sweeps, chosen


def main(opts: argparse.Namespace) -> int:
    """Run the sweeps; exit code 1 when any element was wrong, 2 for bad options."""
    try:
        sweeps, chosen = _checked(opts)
    except ValueError as exc:  # UsageError, and the sweep's own checks (Options)
        return report("bench", exc)
    lead = os.environ.get("RANK", "0") == "0"
    done, wrong = [], 0
    for sweep in sweeps:
        platform = platform_for(sweep.op, chosen)
        try:
            result = hp.run(
                rank_sweep,
                world_size=None if BACKENDS[opts.backend].on_device else opts.ranks,
                backend=opts.backend,
                platform=platform,
                schedule=opts.schedule,
                poison=opts.poison,
                args=(sweep,),
            )
        except WorldError as exc:  # the report says it all: no traceback through the bench
            if lead:
                print(f"{PROG} bench: {sweep.op} on {opts.backend} failed: {exc}", file=sys.stderr)
            return 1
        n = len(result)
        rows = merge(sweep, n, list(result))
        wrong += sum(r.wrong for r in rows)
        label = f"{sweep.op} {sweep.api} {opts.backend} {platform} {n} ranks"
        if lead:
            print_rows(f"{label}, {sweep.dtype}, repeat {sweep.repeat}", rows, sys.stdout)
        done.append(
            {
                "label": label,
                "backend": opts.backend,
                "platform": platform,
                "ranks": n,
                **vars(sweep),
                "rows": [r.as_dict() for r in rows],
            }
        )
    if lead and opts.json:
        write_json(opts.json, done)
    if lead and opts.plot:
        plot(opts.plot, done)
    return 1 if wrong else 0
