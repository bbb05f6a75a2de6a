"""The benchmark's output: an nccl-tests style table, JSON, and a bandwidth plot.

Columns as nccl-tests prints them: size (bytes per rank per round), count
(elements), type, redop, time (us per op, the slowest rank), algbw and busbw
(GB/s), #wrong (elements that differ from the numpy reference, all ranks).
"""

from __future__ import annotations

import json
import platform
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

import torch

from ..core.newfile import write_new
from ..trace.plotting import pyplot, save
from .sweep import Row

_HEAD = (
    f"#{'size':>12s} {'count':>12s} {'type':>6s} {'redop':>6s} {'time':>11s} "
    f"{'algbw':>8s} {'busbw':>8s} {'#wrong':>7s}\n"
    f"#{'(B)':>12s} {'(elements)':>12s} {'':>6s} {'':>6s} {'(us)':>11s} "
    f"{'(GB/s)':>8s} {'(GB/s)':>8s} {'':>7s}"
)


def format_rows(title: str, rows: Sequence[Row]) -> str:
    """The table of one sweep, headed by ``title``."""
    lines = [f"# {title}", _HEAD]
    for r in rows:
        lines.append(
            f" {r.size:12d} {r.count:12d} {r.type:>6s} {r.redop:>6s} {r.time_us:11.1f} "
            f"{r.algbw:8.3f} {r.busbw:8.3f} {r.wrong:7d}"
        )
    wrong = sum(r.wrong for r in rows)
    lines.append(f"# Out of bounds values : {wrong} {'OK' if wrong == 0 else 'FAILED'}")
    if rows:
        lines.append(f"# Avg bus bandwidth    : {sum(r.busbw for r in rows) / len(rows):.3f} GB/s")
    return "\n".join(lines)


def print_rows(title: str, rows: Sequence[Row], out: TextIO) -> None:
    """Print the table of one sweep."""
    print(format_rows(title, rows), file=out, flush=True)


def machine() -> dict[str, Any]:
    """What the numbers were measured on (no host names or paths)."""
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "system": platform.system(),
        "machine": platform.machine(),
        "cpu_threads": torch.get_num_threads(),
    }


def write_json(path: str | Path, sweeps: list[dict[str, Any]]) -> None:
    """Write every sweep (its settings and rows) and the machine description to ``path``."""
    text = json.dumps({"machine": machine(), "sweeps": sweeps}, indent=2) + "\n"
    write_new(path, text.encode(), "--json")


def plot(path: str | Path, sweeps: list[dict[str, Any]]) -> None:
    """A PNG of bus bandwidth against size, one line per sweep (needs matplotlib)."""
    plt = pyplot("--plot")
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for sweep in sweeps:
        rows = sweep["rows"]
        ax.plot(
            [r["size"] for r in rows], [r["busbw"] for r in rows], marker="o", label=sweep["label"]
        )
    ax.set_xscale("log", base=2)
    ax.set_xlabel("bytes per rank")
    ax.set_ylabel("bus bandwidth (GB/s)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small")
    save(fig, path, dpi=100)
