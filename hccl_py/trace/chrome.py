"""The Chrome trace JSON of a run: one process per rank, one track per core and the server.

Perfetto (ui.perfetto.dev) and chrome://tracing open the file as it is.
Times are microseconds from the first event of the run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..core.newfile import write_new
from .recorder import AIV_TID, SERVER_TID


def _track_name(tid: int) -> str:
    if tid == SERVER_TID:
        return "server (rounds)"
    return f"AIV core {tid - AIV_TID}" if tid >= AIV_TID else f"AIC core {tid}"


def chrome_events(traces: dict[int, dict[str, Any]]) -> list[dict[str, Any]]:
    """Every rank's events, shifted to start at 0, with process and track names."""
    events = [dict(e) for rank in sorted(traces) for e in traces[rank]["events"]]
    origin = min((e["ts"] for e in events), default=0.0)
    for e in events:
        e["ts"] = round(e["ts"] - origin, 3)
        if "dur" in e:
            e["dur"] = round(max(e["dur"], 0.0), 3)
    meta: list[dict[str, Any]] = []
    for rank in sorted(traces):
        meta.append({"name": "process_name", "ph": "M", "pid": rank, "tid": 0,
                     "args": {"name": f"rank {rank}"}})  # fmt: skip
        meta.append({"name": "process_sort_index", "ph": "M", "pid": rank, "tid": 0,
                     "args": {"sort_index": rank}})  # fmt: skip
        for tid in sorted({e["tid"] for e in events if e["pid"] == rank}):
            meta.append({"name": "thread_name", "ph": "M", "pid": rank, "tid": tid,
                         "args": {"name": _track_name(tid)}})  # fmt: skip
    return meta + sorted(events, key=lambda e: (e["ts"], e["ph"] != "X"))


def write(path: str | Path, traces: dict[int, dict[str, Any]]) -> None:
    """Write the run's timeline to ``path`` (Chrome trace JSON)."""
    data = {"traceEvents": chrome_events(traces), "displayTimeUnit": "ms"}
    write_new(path, (json.dumps(data, separators=(",", ":")) + "\n").encode(), "trace")
