"""The end-of-run summary: per rank and domain, tasks, rounds, bytes moved, time blocked in Wait."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from ..core.errors import HcclWarning


def rows(
    traces: dict[int, dict[str, Any]], warnings: dict[int, list[HcclWarning]]
) -> list[dict[str, Any]]:
    """One row per (rank, domain) that the run used, in rank order."""
    table: dict[tuple[int, str], dict[str, Any]] = defaultdict(
        lambda: {"tasks": 0, "rounds": 0, "carried": 0, "bytes": 0, "wait_us": 0.0}
    )
    waits: dict[tuple[int, str], list[tuple[float, float]]] = defaultdict(list)
    for rank, trace in traces.items():
        for lay in trace["layouts"]:
            table[(rank, lay["domain"])]["tasks"] += 1
        for e in trace["events"]:
            domain = e.get("args", {}).get("domain")
            if e["ph"] != "X" or domain is None:
                continue
            row = table[(rank, domain)]
            if e.get("cat") == "round":
                row["rounds"] += 1
                row["bytes"] += e["args"]["bytes"]
            elif "carried" in e["args"]:  # a framework call that ran in its argument exchange
                row["carried"] += 1
                row["bytes"] += e["args"]["received"]
            elif e["name"] == "Wait":
                waits[(rank, domain)].append((e["ts"], e["ts"] + e["dur"]))
    for key, spans in waits.items():
        table[key]["wait_us"] = _covered(spans)
    out = []
    for (rank, domain), row in sorted(table.items()):
        out.append({"rank": rank, "domain": domain, **row,
                    "warnings": len(warnings.get(rank, []))})  # fmt: skip
    return out


def _covered(spans: list[tuple[float, float]]) -> float:
    """Microseconds inside at least one span: the rank's cores Wait at the same time, and
    their sum would exceed the run's length."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(spans):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


def format_summary(table: list[dict[str, Any]]) -> str:
    """The summary as a text table."""
    head = f"{'rank':>4s}  {'domain':<24s} {'tasks':>5s} {'rounds':>6s} {'carried':>7s} {'bytes':>12s} {'Wait ms':>8s} {'warnings':>8s}"
    lines = [
        "hccl_py summary (received bytes per rank; carried: framework calls that ran in their "
        "argument exchange, without a task; Wait: time some core was blocked in Wait)",
        head,
    ]
    for r in table:
        lines.append(
            f"{r['rank']:4d}  {r['domain']:<24s} {r['tasks']:5d} {r['rounds']:6d} "
            f"{r['carried']:7d} {r['bytes']:12d} {r['wait_us'] / 1000:8.3f} {r['warnings']:8d}"
        )
    return "\n".join(lines)
