"""block_dim on gloo, two hccl_py trees side by side (issue 28, goal 2).

    python benchmarks/blockdim_before_after.py --before OLD_TREE --runs 3   # measure, then summarise
    python benchmarks/blockdim_before_after.py --summarize                  # summarise the JSON only

Each run measures, for the tree given by ``--before`` and for this one back to
back in each cell (so both see the same load), ``cpu_per_op.py allgather kernel 1024 ITERS
BLOCK_DIM`` (CPU ms per launch and rank, all threads) and ``python -m hccl_py
bench --backend gloo --block-dim BLOCK_DIM`` (AllGather 1 KiB to 1 MiB) for
block_dim 1, 2, 4 and 8. Each tree runs from its own folder (the rank processes
import hccl_py from there). The JSON goes to
``benchmarks/results/issue28-blockdim-{before,after}-*-run{i}.json``; the
summary prints medians over the runs (min..max) and each block_dim's ratio to
block_dim 1. Not a test: machines are noisy, compare only what one invocation measured.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
BLOCK_DIMS = (1, 2, 4, 8)


def _run(tree: Path, args: list[str]) -> str:
    env = dict(os.environ, PYTHONPATH=str(tree), PYTHONDONTWRITEBYTECODE="1")
    done = subprocess.run(
        [sys.executable, *args], cwd=tree, env=env, check=True, capture_output=True, text=True
    )
    return done.stdout


def measure(trees: dict[str, Path], runs: int, iters: int) -> None:
    """The measurements of the module docstring, ``runs`` times, the trees back to back per cell."""
    cpu_per_op = str(HERE / "cpu_per_op.py")
    for i in range(1, runs + 1):
        rows: dict[str, list] = {name: [] for name in trees}
        for bd in BLOCK_DIMS:
            for name, tree in trees.items():
                args = [cpu_per_op, "allgather", "kernel", "1024", str(iters), str(bd)]
                rows[name].append(json.loads(_run(tree, args)))
        for name in trees:
            out = RESULTS / f"issue28-blockdim-{name}-cpu-run{i}.json"
            out.write_text(json.dumps(rows[name], indent=1) + "\n")
        for bd in BLOCK_DIMS:
            for name, tree in trees.items():
                _run(
                    tree,
                    ["-m", "hccl_py", "bench", "--backend", "gloo", "--nproc", "4"]
                    + ["-b", "1K", "-e", "1M", "-f", "32", "-n", "20", "--block-dim", str(bd)]
                    + ["--json", str(RESULTS / f"issue28-blockdim-{name}-bench{bd}-run{i}.json")],
                )


def _median(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{statistics.median(values):.2f} ({min(values):.2f}..{max(values):.2f})"


def _load(pattern: str) -> list:
    return [json.loads(p.read_text()) for p in sorted(RESULTS.glob(pattern))]


def summarize() -> None:
    """Markdown tables of every measurement found in benchmarks/results."""
    print("| block_dim | CPU before | CPU after | before / bd 1 | after / bd 1 |")
    print("|---|---|---|---|---|")
    cpu = {
        name: {
            bd: [
                r["cpu_ms_per_rank"]
                for rows in _load(f"issue28-blockdim-{name}-cpu-run*.json")
                for r in rows
                if r["block_dim"] == bd
            ]  # fmt: skip
            for bd in BLOCK_DIMS
        }
        for name in ("before", "after")
    }
    for bd in BLOCK_DIMS:
        cells = [cpu[name][bd] for name in ("before", "after")]
        if not all(cells):
            continue
        ratios = [
            statistics.median(cpu[name][bd]) / statistics.median(cpu[name][1])
            for name in ("before", "after")
        ]
        print(
            f"| {bd} | {_median(cells[0])} | {_median(cells[1])} | {ratios[0]:.2f}x | {ratios[1]:.2f}x |"
        )
    print()
    print("| block_dim | bytes | wall before | wall after |")
    print("|---|---|---|---|")
    for bd in BLOCK_DIMS:
        cells: dict[str, dict[int, list[float]]] = {"before": {}, "after": {}}
        for name in cells:
            for data in _load(f"issue28-blockdim-{name}-bench{bd}-run*.json"):
                for row in data["sweeps"][0]["rows"]:
                    cells[name].setdefault(row["size"], []).append(row["time_us"] / 1e3)
        for size in sorted(set(cells["before"]) & set(cells["after"])):
            print(
                f"| {bd} | {size} | {_median(cells['before'][size])} | {_median(cells['after'][size])} |"
            )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--before", type=Path, help="the hccl_py tree to compare this one with")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--iters", type=int, default=150, help="launches per cpu_per_op.py run")
    p.add_argument("--summarize", action="store_true", help="only print the tables")
    args = p.parse_args()
    if not args.summarize:
        if args.before is None:
            p.error("--before is required unless --summarize")
        measure({"before": args.before.resolve(), "after": HERE.parent}, args.runs, args.iters)
    summarize()


if __name__ == "__main__":
    main()
