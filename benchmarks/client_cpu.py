"""The client's Python per launch in two hccl_py trees, measured alternately: CPU time per op.

    python benchmarks/client_cpu.py --before OLD_TREE --runs 2      # measure, then summarise
    python benchmarks/client_cpu.py --before OLD --after NEW        # two other trees
    python benchmarks/client_cpu.py --summarize                     # summarise the JSON only

Each run measures, alternately for the tree given by ``--before`` and for this
one (so that both see the same load), the emulator's CPU time per op
(``profile_emu.py``: 4 and 8 ranks, 1 and 8 rounds, 1 KiB) and the gloo
backend's CPU time per op and rank (``cpu_per_op.py``: kernel API and framework
collectives, AllGather, AlltoAll, AllReduce and ReduceScatter at 1 KiB and
64 KiB), and ``compare.py``'s emulator columns next to the threaded process
group (AllGather, 1 KiB, 4 and 8 ranks). A tree given by ``--before`` or
``--after`` runs with its own ``emu/`` folder (an overlay of symbolic links in
a temporary folder, since the installed package maps ``hccl_py.backends.emu``
to the installed tree's). The JSON goes to
``benchmarks/results/issue25-hotpath-{before,after}-run{i}.json`` (emulator),
``issue25-hotpath-compare-{before,after}-run{i}.json`` (``compare.py``) and
``issue28-hotpath-{before,after}-run{i}.json`` (gloo); the summary prints
each cell as the median over the runs and the spread (min..max).
Not a test: machines are noisy, compare only what one invocation measured.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
#: (ranks, rounds) of the emulator's measurements.
EMU = [(4, 1), (4, 8), (8, 1), (8, 8)]
#: (op, api, bytes) of the gloo measurements.
GLOO = [
    (op, api, size)
    for op in ("allgather", "alltoall", "allreduce", "reducescatter")
    for api in ("kernel", "framework")
    for size in (1024, 65536)
]
_EMU_LINE = re.compile(r"per op (\d+) us wall, (\d+) us CPU")


def overlay(tree: Path, into: Path) -> Path:
    """A tree whose ``hccl_py.backends.emu`` is ``tree``'s ``emu/`` (symbolic links into ``tree``)."""
    package = into / "hccl_py"
    backends = package / "backends"
    backends.mkdir(parents=True)
    for entry in (tree / "hccl_py").iterdir():
        if entry.name != "backends":
            (package / entry.name).symlink_to(entry)
    for entry in (tree / "hccl_py" / "backends").iterdir():
        (backends / entry.name).symlink_to(entry)
    (backends / "emu").symlink_to(tree / "emu")
    return into


def _run(tree: Path, args: list[str]) -> str:
    env = dict(os.environ, PYTHONPATH=str(tree))
    done = subprocess.run(
        [sys.executable, *args], cwd=HERE, env=env, check=True, capture_output=True, text=True
    )
    return done.stdout


def measure_once(tree: Path, iters: int, ops: int, compare_json: Path) -> tuple[dict, dict]:
    """One tree's measurements: (emulator rows, gloo rows); ``compare.py`` writes its own JSON."""
    emu = {}
    for ranks, rounds in EMU:
        out = _run(tree, ["profile_emu.py", "--ranks", str(ranks), "--repeat", str(rounds)]
                   + ["--iters", str(iters)])  # fmt: skip
        wall, cpu = (int(x) for x in _EMU_LINE.search(out).groups())
        emu[f"{ranks}ranks-r{rounds}"] = {"wall_us": wall, "cpu_us": cpu}
    _run(tree, ["compare.py", "--ranks", "4", "8", "--ops", "allgather", "--columns", "emu",
                "emu/r8", "emu-fw", "tpg", "--sizes", "1024", "--iters", "20", "--warmup", "3",
                "--json", str(compare_json)])  # fmt: skip
    gloo = {}
    for op, api, size in GLOO:
        out = _run(tree, ["cpu_per_op.py", op, api, str(size), str(ops), "1"])
        gloo[f"{op}-{api}-{size}"] = json.loads(out.strip().splitlines()[-1])
    return emu, gloo


def measure(before: Path, after: Path | None, runs: int, iters: int, ops: int) -> None:
    """``runs`` rounds of both trees' measurements, alternating; JSON into benchmarks/results."""
    with tempfile.TemporaryDirectory() as tmp:
        trees = {
            "before": overlay(before.resolve(), Path(tmp) / "before"),
            "after": HERE.parent
            if after is None
            else overlay(after.resolve(), Path(tmp) / "after"),
        }
        for i in range(1, runs + 1):
            for name, tree in trees.items():
                compare_json = RESULTS / f"issue25-hotpath-compare-{name}-run{i}.json"
                emu, gloo = measure_once(tree, iters, ops, compare_json)
                (RESULTS / f"issue25-hotpath-{name}-run{i}.json").write_text(
                    json.dumps(emu, indent=1)
                )
                (RESULTS / f"issue28-hotpath-{name}-run{i}.json").write_text(
                    json.dumps(gloo, indent=1)
                )


def _cells(issue: str, name: str, field: str) -> dict[str, list[float]]:
    cells: dict[str, list[float]] = {}
    for path in sorted(RESULTS.glob(f"{issue}-hotpath-{name}-run*.json")):
        for key, row in json.loads(path.read_text()).items():
            cells.setdefault(key, []).append(row[field])
    return cells


def _spread(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.0f}"
    return f"{statistics.median(values):.0f} ({min(values):.0f}..{max(values):.0f})"


def _compare_cells(name: str) -> dict[str, list[float]]:
    """``compare.py``'s times (us) by ``ranks column``, over the runs."""
    cells: dict[str, list[float]] = {}
    for path in sorted(RESULTS.glob(f"issue25-hotpath-compare-{name}-run*.json")):
        for row in json.loads(path.read_text())["results"]:
            for column, times in row["times"].items():
                for value in times.values():
                    cells.setdefault(f"{row['ranks']} ranks {column}", []).append(value * 1e6)
    return cells


def summarize() -> None:
    """Markdown tables of the measurements found in benchmarks/results."""
    print("| emulator, 1 KiB AllGather | before: CPU us per op | after | after/before |")
    print("|---|---|---|---|")
    before, after = _cells("issue25", "before", "cpu_us"), _cells("issue25", "after", "cpu_us")
    for key in sorted(set(before) & set(after)):
        ratio = statistics.median(after[key]) / statistics.median(before[key])
        print(f"| {key} | {_spread(before[key])} | {_spread(after[key])} | {ratio:.2f} |")
    print()
    print(
        "| compare.py, AllGather 1 KiB | before: us per op (per round for emu/r8) | after | after/before |"
    )
    print("|---|---|---|---|")
    before, after = _compare_cells("before"), _compare_cells("after")
    for key in sorted(set(before) & set(after)):
        ratio = statistics.median(after[key]) / statistics.median(before[key])
        print(f"| {key} | {_spread(before[key])} | {_spread(after[key])} | {ratio:.2f} |")
    print()
    print("| gloo, 4 ranks | before: CPU us per op and rank | after | after/before |")
    print("|---|---|---|---|")
    field = "cpu_ms_per_rank"
    before, after = _cells("issue28", "before", field), _cells("issue28", "after", field)
    for key in sorted(set(before) & set(after)):
        b = [v * 1e3 for v in before[key]]
        a = [v * 1e3 for v in after[key]]
        ratio = statistics.median(a) / statistics.median(b)
        print(f"| {key} | {_spread(b)} | {_spread(a)} | {ratio:.2f} |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--before", type=Path, help="the hccl_py tree to compare this one with")
    p.add_argument("--after", type=Path, help="the tree to measure instead of this one")
    p.add_argument("--runs", type=int, default=2)
    p.add_argument("--iters", type=int, default=200, help="launches per emulator measurement")
    p.add_argument("--ops", type=int, default=200, help="ops per gloo measurement")
    p.add_argument("--summarize", action="store_true", help="only print the tables")
    args = p.parse_args()
    if not args.summarize:
        if args.before is None:
            p.error("--before is required unless --summarize")
        measure(args.before, args.after, args.runs, args.iters, args.ops)
    summarize()


if __name__ == "__main__":
    main()
