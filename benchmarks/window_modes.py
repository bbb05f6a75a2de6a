"""The MoE window sample under the emulator's schedules and poison: seconds per run.

    python benchmarks/window_modes.py                 # 2, 4, 8 ranks, 3 runs each
    python benchmarks/window_modes.py --ranks 4 --runs 5 --json out.json
    python benchmarks/window_modes.py --quiet-polls 10000   # as before QUIET_POLLS (10000)

One run is the whole sample (samples/moe_distribute_window.py: dispatch and
combine, direct and BatchWrite paths, two rounds each). Polling kernels are
where the late schedule and the window race check (poison) cost most: every
flag poll is a few torch operations, each seen by the check. The table gives
the median of the runs and the ratio to the eager schedule without poison.
Not a test: machines are noisy, so compare ratios within one run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import hccl_py as hp
from hccl_py.bench.table import machine
from hccl_py.server import blocking

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "samples"))
import moe_distribute_window as sample  # noqa: E402 - a sample, found next to this script

#: column -> hp.run options
MODES = {
    "eager": {},
    "late": {"schedule": "late"},
    "eager+poison": {"poison": True},
    "late+poison": {"schedule": "late", "poison": True},
}


def seconds(n: int, options: dict, runs: int) -> float:
    """The median wall time of ``runs`` runs of the sample on ``n`` ranks with ``options``."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        hp.run(sample.main, world_size=n, **options, **sample.RUN_KWARGS)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", default=None, help="also write the numbers here")
    parser.add_argument(
        "--quiet-polls",
        type=int,
        default=blocking.QUIET_POLLS,
        help="unchanged polls after which the late schedule runs pending work",
    )
    opts = parser.parse_args(argv)
    blocking.QUIET_POLLS = opts.quiet_polls
    rows = []
    print(f"# {machine()}, quiet polls {opts.quiet_polls}")
    print(f"{'ranks':>5} " + " ".join(f"{m:>13}" for m in MODES) + "   late+poison/eager")
    for n in opts.ranks:
        row = {m: seconds(n, options, opts.runs) for m, options in MODES.items()}
        ratio = row["late+poison"] / row["eager"]
        print(f"{n:>5} " + " ".join(f"{row[m]:>12.3f}s" for m in MODES) + f"   {ratio:>17.1f}")
        rows.append({"ranks": n, "seconds": row})
    if opts.json:
        Path(opts.json).write_text(
            json.dumps(
                {"machine": machine(), "quiet_polls": opts.quiet_polls, "rows": rows}, indent=2
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
