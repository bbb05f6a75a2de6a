"""What an explored schedule costs next to the default one, on the emulator.

    python benchmarks/explore_cost.py                         # 4 ranks, 1 KiB AllGather
    python benchmarks/explore_cost.py --ranks 8 --launches 100 --json out.json

One program (``--launches`` launches of the benchmark's AllGather kernel,
``python -m hccl_py bench --op allgather``) runs under the default schedule,
and with ``hp.run(explore=N)``: schedule 0 is the default one, schedules
1..N-1 are seeded (switches at every hccl_py call). ``explore`` turns poison
(and with it the window race check) on unless ``poison=False`` is passed, so
the explored run is timed both ways, and the default run with poison too. The
ratios are the explored run's time per schedule over the default run's time;
the issue asks for at most 2. Runs alternate ``--runs`` times and the medians
are reported, of the wall time and of the process's CPU time (every runner
thread's; on a loaded machine the steadier of the two).
Not a test: machines are noisy, compare only what one invocation measured.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import hccl_py as hp
from hccl_py.bench.calls import Step
from hccl_py.bench.ops import BENCH_OPS, plan
from hccl_py.bench.reference import REDUCE_OPS, TYPES
from hccl_py.bench.table import machine


def launches(n_ranks: int, size: int, count: int) -> None:
    """On every rank: ``count`` launches of the benchmark kernel (AllGather fp32, ``size`` bytes)."""
    step = Step(
        "kernel", plan(BENCH_OPS["allgather"], n_ranks, size, 4), TYPES["fp32"], REDUCE_OPS["sum"]
    )
    for _ in range(count):
        step.run()


def timed(
    n_ranks: int, size: int, count: int, explore: int, poison: bool | None = None
) -> tuple[float, float]:
    """Wall and CPU seconds per schedule of one ``hp.run`` of :func:`launches` (0: default only)."""
    run = {} if poison is None else {"poison": poison}
    start, cpu = time.perf_counter(), time.process_time()
    hp.run(
        launches, world_size=n_ranks, args=(n_ranks, size, count), explore=explore or None, **run
    )
    n = max(explore, 1)
    return (time.perf_counter() - start) / n, (time.process_time() - cpu) / n


def main(argv: list[str] | None = None) -> int:
    """Measure; print the medians and the ratio; write JSON when asked."""
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--size", type=int, default=1024, help="bytes per rank")
    p.add_argument("--launches", type=int, default=50)
    p.add_argument("--explore", type=int, default=8)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    #: What is timed: (schedules, poison); None: hp.run's own default.
    kinds = {
        "default": (0, None),
        "default+poison": (0, True),
        "explored": (args.explore, None),
        "explored-no-poison": (args.explore, False),
    }
    times: dict[str, list[float]] = {k: [] for k in kinds}
    cpu: dict[str, list[float]] = {k: [] for k in kinds}
    timed(args.ranks, args.size, 2, 0)  # warm-up: imports, first launches
    for _ in range(args.runs):
        for kind, (explore, poison) in kinds.items():
            wall, used = timed(args.ranks, args.size, args.launches, explore, poison)
            times[kind].append(wall)
            cpu[kind].append(used)
    print(
        f"{args.ranks} ranks, {args.launches} launches of {args.size} B AllGather, "
        f"per schedule (explore={args.explore}):"
    )
    ratios = {}
    for what, measured in (("wall", times), ("cpu", cpu)):
        median = {k: statistics.median(v) for k, v in measured.items()}
        ratios[what] = {k: median[k] / median["default"] for k in kinds if k != "default"}
        cells = ", ".join(
            f"{k} {median[k] * 1e3:.1f} ms ({ratios[what].get(k, 1):.2f}x)" for k in kinds
        )
        print(f"  {what}: {cells}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        options = {k: v for k, v in vars(args).items() if k != "json"}
        data = {"machine": machine(), "args": options, "seconds_per_schedule": times}
        data |= {"cpu_seconds_per_schedule": cpu, "ratios": ratios["wall"]}
        Path(args.json).write_text(json.dumps(data | {"cpu_ratios": ratios["cpu"]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
