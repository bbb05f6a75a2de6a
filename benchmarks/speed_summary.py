"""Summarise before/after runs of ``compare.py`` as the markdown tables of docs/performance.md.

    python benchmarks/speed_summary.py benchmarks/results/issue25-speed

reads ``PREFIX-before-run*.json`` and ``PREFIX-after-run*.json`` (each written
by ``compare.py --json`` for one tree, the runs alternating between the trees
so that both see the same load) and prints, per rank count and size, the
median and the minimum over the runs of each column (microseconds per op;
the minimum is the run least disturbed by other jobs) and the median of each
run's own ratio to the threaded process group measured beside it (``tpg``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

#: (column in the JSON, heading) of the columns summarised.
COLUMNS = (("emu", "per op"), ("emu/r8", "per round"), ("emu-fw", "framework"))


def load(prefix: str, tree: str) -> list[dict]:
    """Every run of ``tree`` (before or after): one dict per run, keyed by (ranks, column, size)."""
    runs = []
    for path in sorted(Path(prefix).parent.glob(f"{Path(prefix).name}-{tree}-run*.json")):
        cells = {}
        for res in json.loads(path.read_text())["results"]:
            for col, per_size in res["times"].items():
                for size, t in per_size.items():
                    cells[(res["ranks"], col, int(size))] = t
        runs.append(cells)
    return runs


def median(values: list[float | None]) -> float | None:
    """The median of the values that were measured (None when none was)."""
    known = [v for v in values if v]
    return statistics.median(known) if known else None


def _us(value: float | None, scale: float = 1e6, digits: int = 0) -> str:
    return "-" if value is None else f"{value * scale:.{digits}f}"


def _spread(values: list[float | None]) -> str:
    """``median / minimum`` in microseconds."""
    known = [v for v in values if v]
    return f"{_us(median(known))} / {_us(min(known))}" if known else "-"


def table(before: list[dict], after: list[dict], ranks: int) -> str:
    """The markdown table of one rank count."""
    sizes = sorted({s for run in before + after for (n, c, s) in run if n == ranks and c == "tpg"})
    head = ["bytes", *(f"{h} {w}" for _, h in COLUMNS for w in ("before", "after")), "tpg"]
    head += ["after/tpg", "after fw/tpg"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s in sizes:
        cells = [str(s)]
        for col, _ in COLUMNS:
            for runs in (before, after):
                cells.append(_spread([run.get((ranks, col, s)) for run in runs]))
        cells.append(_spread([run.get((ranks, "tpg", s)) for run in before + after]))
        for col in ("emu", "emu-fw"):
            ratios = [
                run[(ranks, col, s)] / run[(ranks, "tpg", s)]
                for run in after
                if run.get((ranks, col, s)) and run.get((ranks, "tpg", s))
            ]
            cells.append(_us(median(ratios), 1, 2))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Print one table per rank count."""
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("prefix", nargs="?", default="benchmarks/results/issue25-speed")
    prefix = p.parse_args(argv).prefix
    before, after = load(prefix, "before"), load(prefix, "after")
    if not before or not after:
        print(f"no runs of both trees under {prefix}-{{before,after}}-run*.json", file=sys.stderr)
        return 2
    for ranks in sorted({n for run in after for (n, _, _) in run}):
        print(
            f"### {ranks} ranks ({len(before)} runs before, {len(after)} after; "
            "us per op, median / minimum)\n"
        )
        print(table(before, after, ranks) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
