"""A static picture of a trace: one row per rank and track, calls and rounds as bars, flows as arrows.

Perfetto shows the JSON interactively; this PNG (matplotlib) is for documents
and terminals without a browser.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .chrome import _track_name
from .plotting import patch, pyplot, save

_COLORS = {"round": "#d62728", "Wait": "#9ecae1", "Commit": "#ff7f0e"}


def draw_timeline(trace: str | Path | dict[str, Any], png: str | Path, title: str = "") -> None:
    """Draw a Chrome trace (a path or the loaded JSON) to ``png`` (needs matplotlib)."""
    plt = pyplot("a timeline PNG")
    data = trace if isinstance(trace, dict) else json.loads(Path(trace).read_text())
    events = data["traceEvents"]
    rows = sorted({(e["pid"], e["tid"]) for e in events if e["ph"] == "X"})
    where = {row: i for i, row in enumerate(rows)}
    fig, ax = plt.subplots(figsize=(11, 0.45 * len(rows) + 1.4))
    for e in events:
        if e["ph"] != "X":
            continue
        y = where[(e["pid"], e["tid"])]
        color = _COLORS.get(e.get("cat") if e.get("cat") == "round" else e["name"], "#74c476")
        ax.barh(y, max(e["dur"], 0.5), left=e["ts"], height=0.6, color=color, edgecolor="none")
    starts = {e["id"]: e for e in events if e["ph"] == "s"}
    for e in events:
        s = starts.get(e.get("id")) if e["ph"] == "f" else None
        if s is not None and (s["pid"], s["tid"]) in where and (e["pid"], e["tid"]) in where:
            ax.annotate("", xy=(e["ts"], where[(e["pid"], e["tid"])]),
                        xytext=(s["ts"], where[(s["pid"], s["tid"])]),
                        arrowprops={"arrowstyle": "->", "color": "#555555", "lw": 0.5})  # fmt: skip
    legend = {"other call": "#74c476", **_COLORS}
    ax.legend(handles=[patch(n, color=c) for n, c in legend.items()], fontsize=7,
              loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=4)  # fmt: skip
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([f"rank {p} {_track_name(t)}" for p, t in rows], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("microseconds since the first event")
    if title:
        ax.set_title(title, fontsize=9)
    save(fig, png)
