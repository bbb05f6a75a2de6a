"""Two hccl_py trees side by side on the gloo backend: the tables of docs/performance.md.

    python benchmarks/before_after.py --before OLD_TREE --runs 2     # measure, then summarise
    python benchmarks/before_after.py --summarize                    # summarise the JSON only

Each run measures, alternately for the tree given by ``--before`` and for this
one (so both see the same load): ``compare.py`` (raw gloo, our gloo backend's
kernel API and framework collectives, native reductions, 4 ranks, 1 KiB /
64 KiB / 1 MiB), ``python -m hccl_py bench`` with block_dim 1 and 8, and the
exact against the native AllReduce at 1 and 4 MiB. The JSON goes to
``benchmarks/results/issue28-{before,after}-*-run{i}.json``; the summary
prints each cell as the median over the runs, and the spread (min..max).
Not a test: machines are noisy, compare only what one invocation measured.
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
SIZES = [1024, 65536, 1048576]


def _run(tree: Path, args: list[str], **env: str) -> None:
    environ = dict(os.environ, PYTHONPATH=str(tree), **env)
    subprocess.run([sys.executable, *args], cwd=tree, env=environ, check=True, capture_output=True)


def measure(trees: dict[str, Path], runs: int) -> None:
    """Every measurement of the module docstring, ``runs`` times, alternating the trees."""
    compare = str(HERE / "compare.py")
    for i in range(1, runs + 1):
        for name, tree in trees.items():
            out = RESULTS / f"issue28-{name}"
            sizes = [str(s) for s in SIZES]
            columns = ["gloo", "ours-gloo", "ours-gloo-fw"]
            _run(
                tree,
                [compare, "--ranks", "4", "--sizes", *sizes, "--columns", *columns]
                + ["--iters", "10", "--json", f"{out}-4ranks-run{i}.json"],
                HCCL_PY_REDUCE="native",
            )
            bench = ["-m", "hccl_py", "bench", "--backend", "gloo", "--nproc", "4"]
            for bd in (1, 8):
                _run(
                    tree,
                    [*bench, "-b", "1K", "-e", "1M", "-f", "32", "-n", "20"]
                    + ["--block-dim", str(bd), "--json", f"{out}-blockdim{bd}-run{i}.json"],
                )
            for mode in ("exact", "native"):
                _run(
                    tree,
                    [*bench, "--op", "allreduce", "-b", "1M", "-e", "4M", "-f", "4", "-n", "10"]
                    + ["--json", f"{out}-allreduce-{mode}-run{i}.json"],
                    HCCL_PY_REDUCE=mode,
                )


def _spread(values: list[float]) -> str:
    """``median (min..max)`` in ms."""
    ms = [v * 1e3 for v in values]
    if len(ms) == 1:
        return f"{ms[0]:.1f}"
    return f"{statistics.median(ms):.1f} ({min(ms):.1f}..{max(ms):.1f})"


def _load(pattern: str) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(RESULTS.glob(pattern))]


def _compare_cells(name: str) -> dict[tuple[str, str, int], list[float]]:
    cells: dict[tuple[str, str, int], list[float]] = {}
    for data in _load(f"issue28-{name}-4ranks-run*.json"):
        for row in data["results"]:
            for column, times in row["times"].items():
                for size in SIZES:
                    value = times.get(str(size))
                    if value is not None:
                        cells.setdefault((row["op"], column, size), []).append(value)
    return cells


def _bench_cells(pattern: str) -> dict[int, list[float]]:
    cells: dict[int, list[float]] = {}
    for data in _load(pattern):
        for row in data["sweeps"][0]["rows"]:
            cells.setdefault(row["size"], []).append(row["time_us"] * 1e-6)
    return cells


def summarize() -> None:
    """Markdown tables of every measurement found in benchmarks/results."""
    print(
        "| op | bytes | raw gloo | before: kernel | after: kernel | before: framework | after: framework |"
    )
    print("|---|---|---|---|---|---|---|")
    before, after = _compare_cells("before"), _compare_cells("after")
    for op in ("allgather", "reducescatter", "alltoall", "alltoallv", "allreduce"):
        for size in SIZES:
            raw = after.get((op, "gloo", size), []) + before.get((op, "gloo", size), [])
            cells = [
                cols.get((op, column, size), [])
                for column in ("ours-gloo", "ours-gloo-fw")
                for cols in (before, after)
            ]
            if raw and all(cells):
                print(
                    f"| {op} | {size} | {_spread(raw)} | " + " | ".join(map(_spread, cells)) + " |"
                )
    print()
    print("| block_dim | bytes | before | after |")
    print("|---|---|---|---|")
    for bd in (1, 8):
        b = _bench_cells(f"issue28-before-blockdim{bd}-run*.json")
        a = _bench_cells(f"issue28-after-blockdim{bd}-run*.json")
        for size in sorted(set(a) & set(b)):
            print(f"| {bd} | {size} | {_spread(b[size])} | {_spread(a[size])} |")
    print()
    print("| AllReduce | bytes | before | after |")
    print("|---|---|---|---|")
    for mode in ("exact", "native"):
        b = _bench_cells(f"issue28-before-allreduce-{mode}-run*.json")
        a = _bench_cells(f"issue28-after-allreduce-{mode}-run*.json")
        for size in sorted(set(a) & set(b)):
            print(f"| {mode} | {size} | {_spread(b[size])} | {_spread(a[size])} |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--before", type=Path, help="the hccl_py tree to compare this one with")
    p.add_argument("--runs", type=int, default=2)
    p.add_argument("--summarize", action="store_true", help="only print the tables")
    args = p.parse_args()
    if not args.summarize:
        if args.before is None:
            p.error("--before is required unless --summarize")
        measure({"after": HERE.parent, "before": args.before.resolve()}, args.runs)
    summarize()


if __name__ == "__main__":
    main()
