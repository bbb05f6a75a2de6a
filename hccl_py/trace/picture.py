"""Where every byte landed: each rank's receive buffers as strips of byte ranges.

Built from what a recorded run kept of each task (its receive blocks, round
by round, and the rank each block comes from): a text strip for terminals and
a PNG (matplotlib). Bytes no round wrote and bytes written twice are named,
since they are where wrong numbers come from.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .plotting import patch, pyplot, save

#: Characters of one text strip.
STRIP = 64
_REDUCED = -1
#: How the PNG draws reduced ranges, unwritten bytes and bytes written more than once.
REDUCED_STYLE = {"color": "#555555"}
UNWRITTEN_STYLE = {"color": "#eeeeee"}
TWICE_STYLE = {"facecolor": "none", "hatch": "xxx", "edgecolor": "red"}


@dataclass
class Segment:
    """Bytes ``[start, end)`` of a buffer written by one round of one task."""

    start: int
    end: int
    source: int
    label: str
    handle: int | None = None

    def describe(self) -> str:
        who = "every rank (reduced)" if self.source == _REDUCED else f"rank {self.source}"
        return f"[{self.start}, {self.end}) <- {who}: {self.label}"


@dataclass
class Strip:
    """One receive buffer of one rank and what was written into it."""

    rank: int
    buffer: str
    nbytes: int
    segments: list[Segment] = field(default_factory=list)

    def coverage(self) -> np.ndarray:
        """How many rounds wrote each byte (vectorised over segments)."""
        marks = np.zeros(self.nbytes + 1, dtype=np.int64)
        if self.segments:
            starts = np.array([s.start for s in self.segments])
            ends = np.array([s.end for s in self.segments])
            np.add.at(marks, starts, 1)
            np.add.at(marks, ends, -1)
        return np.cumsum(marks)[: self.nbytes]

    def ranges(self, condition: np.ndarray) -> list[tuple[int, int]]:
        """Maximal byte ranges where ``condition`` holds."""
        edges = np.flatnonzero(np.diff(np.concatenate([[0], condition.astype(np.int8), [0]])))
        return [(int(a), int(b)) for a, b in zip(edges[::2], edges[1::2], strict=True)]

    def gaps(self) -> list[tuple[int, int]]:
        """Byte ranges that no round wrote."""
        return self.ranges(self.coverage() == 0)

    def overlaps(self) -> list[tuple[int, int]]:
        """Byte ranges that more than one round wrote."""
        return self.ranges(self.coverage() > 1)

    def text(self) -> str:
        """The strip (one character per ``nbytes / STRIP`` bytes), then every range."""
        width = max(1, min(STRIP, self.nbytes))
        cells = np.full(width, ".", dtype="<U1")
        scale = width / max(1, self.nbytes)
        for s in self.segments:
            a, b = int(s.start * scale), max(int(s.start * scale) + 1, int(s.end * scale))
            cells[a:b] = "*" if s.source == _REDUCED else _digit(s.source)
        for a, b in self.overlaps():
            cells[int(a * scale) : max(int(a * scale) + 1, int(b * scale))] = "!"
        lines = [f"rank {self.rank} {self.buffer} ({self.nbytes} bytes) |{''.join(cells)}|"]
        lines += [f"    {s.describe()}" for s in sorted(self.segments, key=lambda s: s.start)]
        lines += [f"    [{a}, {b}) unwritten" for a, b in self.gaps()]
        lines += [f"    [{a}, {b}) written more than once" for a, b in self.overlaps()]
        return "\n".join(lines)


def _digit(rank: int) -> str:
    return "0123456789abcdefghijklmnopqrstuvwxyz"[rank % 36]


class LayoutPicture:
    """The receive buffers of a recorded run (``hp.explain_layout`` builds one)."""

    def __init__(self, traces: dict[int, dict[str, Any]]) -> None:
        strips: dict[tuple[int, int], Strip] = {}
        for rank in sorted(traces):
            for lay in traces[rank]["layouts"]:
                strip = strips.setdefault(
                    (rank, lay["uid"]), Strip(rank, lay["buffer"], lay["nbytes"])
                )
                for r, rows in enumerate(lay["rounds"]):
                    label = f"{lay['label']} handle {lay['handle']} round {r}"
                    strip.segments += [
                        Segment(a, b, src, label, lay["handle"]) for a, b, src in rows
                    ]
        self.strips = list(strips.values())

    def select(
        self,
        ranks: Iterable[int] | None = None,
        buffers: Iterable[str] | None = None,
        handles: Iterable[int] | None = None,
    ) -> LayoutPicture:
        """The strips of ``ranks`` and ``buffers`` (names such as ``yGM``) with the rounds of
        ``handles`` only (None: all), for a readable picture of a large world."""
        keep_ranks = None if ranks is None else set(ranks)
        keep_buffers = None if buffers is None else set(buffers)
        keep_handles = None if handles is None else set(handles)
        picked = LayoutPicture({})
        for strip in self.strips:
            if keep_ranks is not None and strip.rank not in keep_ranks:
                continue
            if keep_buffers is not None and strip.buffer not in keep_buffers:
                continue
            segments = [
                s for s in strip.segments if keep_handles is None or s.handle in keep_handles
            ]
            picked.strips.append(Strip(strip.rank, strip.buffer, strip.nbytes, segments))
        return picked

    def text(self) -> str:
        """Every strip, rank by rank (``0``-``9``, ``a``..: source rank; ``*`` reduced;
        ``.`` unwritten; ``!`` written twice)."""
        legend = "legend: digit = source rank, * = reduced over ranks, . = unwritten, ! = twice"
        return "\n".join([legend, *(s.text() for s in self.strips)])

    def legend(self, colors: Any) -> list[tuple[str, dict[str, Any]]]:
        """The PNG's legend: (label, matplotlib patch style) of every kind of range.

        ``colors`` maps a source rank modulo 10 to its colour (a matplotlib colormap).
        """
        segments = [s for strip in self.strips for s in strip.segments]
        sources = sorted({s.source for s in segments if s.source >= 0})
        entries = [(f"from rank {r}", {"color": colors(r % 10)}) for r in sources]
        if any(s.source == _REDUCED for s in segments):
            entries.append(("reduced over ranks", REDUCED_STYLE))
        return [*entries, ("unwritten", UNWRITTEN_STYLE), ("written more than once", TWICE_STYLE)]

    def save_png(self, path: str | Path, title: str = "") -> None:
        """Draw the strips to ``path`` (needs matplotlib: ``pip install 'hccl_py[bench]'``)."""
        plt = pyplot("a layout PNG")
        fig, ax = plt.subplots(figsize=(10, 0.6 * len(self.strips) + 1.2))
        colors = plt.get_cmap("tab10")
        for y, strip in enumerate(self.strips):
            ax.barh(y, strip.nbytes, left=0, edgecolor="#999999", height=0.7, **UNWRITTEN_STYLE)
            for s in strip.segments:
                color = REDUCED_STYLE["color"] if s.source == _REDUCED else colors(s.source % 10)
                ax.barh(y, s.end - s.start, left=s.start, color=color, height=0.7,
                        edgecolor="white", linewidth=0.5)  # fmt: skip
                if (s.end - s.start) / max(1, strip.nbytes) > 0.06:
                    short = s.label.rsplit(" handle ", 1)[-1].replace("round ", "r")
                    ax.text((s.start + s.end) / 2, y, f"h{short}", ha="center", va="center",
                            fontsize=7, color="white")  # fmt: skip
            for a, b in strip.overlaps():
                ax.barh(y, b - a, left=a, height=0.7, **TWICE_STYLE)
        ax.set_yticks(range(len(self.strips)))
        ax.set_yticklabels([f"rank {s.rank} {s.buffer}" for s in self.strips], fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel("byte offset in the receive buffer")
        handles = [patch(label, **style) for label, style in self.legend(colors)]
        ax.legend(handles=handles, fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.18),
                  ncol=min(len(handles), 6))  # fmt: skip
        if title:
            ax.set_title(title, fontsize=9)
        save(fig, path)
