"""Where every byte landed and where it came from: each rank's buffers as strips of byte ranges.

Built from what a recorded run kept of each task (its receive and send blocks,
round by round, and the rank each block comes from or goes to): a text strip
for terminals and a PNG (matplotlib). Bytes no round wrote, bytes written
twice, bytes of a send buffer no round read and bytes read twice are named,
since they are where wrong numbers come from.
"""

from __future__ import annotations

from collections import Counter
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
#: How the PNG draws send ranges (hatched, in the colour of the rank that gets them), send
#: ranges every rank gets, unread bytes and bytes read more than once.
SEND_HATCH = "///"
EVERY_STYLE = {"facecolor": "#555555", "hatch": SEND_HATCH, "edgecolor": "white"}
UNREAD_STYLE = {"facecolor": "#f7f7f7", "hatch": "..", "edgecolor": "#cccccc"}
TWICE_READ_STYLE = {"facecolor": "none", "hatch": "\\\\\\", "edgecolor": "black"}
#: Per side: the words of the text and the PNG (what a range is, what it misses, ...).
WORDS = {
    "recv": {"arrow": "<-", "every": "every rank (reduced)", "none": "unwritten",
             "twice": "written more than once", "rank": "from rank", "buffer": "receive"},
    "send": {"arrow": "->", "every": "every rank", "none": "unread",
             "twice": "read more than once", "rank": "to rank", "buffer": "send"},
}  # fmt: skip


@dataclass
class Segment:
    """Bytes ``[start, end)`` of a buffer written (receive) or read (send) by one round of one
    task; ``source`` is the rank they come from or go to (-1: every rank)."""

    start: int
    end: int
    source: int
    label: str
    handle: int | None = None
    side: str = "recv"

    def describe(self) -> str:
        """``[start, end) <- rank 1: label`` (receive) or ``[start, end) -> rank 1: label``."""
        words = WORDS[self.side]
        who = words["every"] if self.source == _REDUCED else f"rank {self.source}"
        return f"[{self.start}, {self.end}) {words['arrow']} {who}: {self.label}"


@dataclass
class Strip:
    """One receive buffer of one rank and what was written into it, or one send buffer and
    what was read from it (``side="send"``)."""

    rank: int
    buffer: str
    nbytes: int
    segments: list[Segment] = field(default_factory=list)
    side: str = "recv"

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
        """Byte ranges that no round wrote (receive) or read (send)."""
        return self.ranges(self.coverage() == 0)

    def overlaps(self) -> list[tuple[int, int]]:
        """Byte ranges that more than one round or block wrote (receive) or read (send)."""
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
        words = WORDS[self.side]
        lines = [f"rank {self.rank} {self.title()} ({self.nbytes} bytes) |{''.join(cells)}|"]
        lines += [f"    {s.describe()}" for s in sorted(self.segments, key=lambda s: s.start)]
        lines += [f"    [{a}, {b}) {words['none']}" for a, b in self.gaps()]
        lines += [f"    [{a}, {b}) {words['twice']}" for a, b in self.overlaps()]
        return "\n".join(lines)

    def title(self) -> str:
        """The buffer's name, with ``(send)`` after a send buffer's."""
        return self.buffer if self.side == "recv" else f"{self.buffer} (send)"


def _digit(rank: int) -> str:
    return "0123456789abcdefghijklmnopqrstuvwxyz"[rank % 36]


def _strips(traces: dict[int, dict[str, Any]], side: str) -> list[Strip]:
    """One strip per rank and buffer of ``side``, from the recorded layouts of every task."""
    strips: dict[tuple[int, int], Strip] = {}
    key = "layouts" if side == "recv" else "sends"
    for rank in sorted(traces):
        for lay in traces[rank].get(key, []):
            strip = strips.setdefault(
                (rank, lay["uid"]), Strip(rank, lay["buffer"], lay["nbytes"], side=side)
            )
            for r, rows in enumerate(lay["rounds"]):
                label = f"{lay['label']} handle {lay['handle']} round {r}"
                strip.segments += [
                    Segment(a, b, src, label, lay["handle"], side) for a, b, src in rows
                ]
    return list(strips.values())


class LayoutPicture:
    """The receive and send buffers of a recorded run (``hp.explain_layout`` builds one):
    ``strips`` (receive buffers: which round wrote which bytes) and ``send_strips`` (send
    buffers: which round read which bytes, for which rank)."""

    def __init__(self, traces: dict[int, dict[str, Any]]) -> None:
        self.strips = _strips(traces, "recv")
        self.send_strips = _strips(traces, "send")
        #: Framework calls that ran in their argument exchange, per op: no task to draw.
        self.carried = Counter(
            e["name"]
            for trace in traces.values()
            for e in trace["events"]
            if e["ph"] == "X" and "carried" in e.get("args", {})
        )

    def all_strips(self) -> list[Strip]:
        """The receive strips, then the send strips."""
        return [*self.strips, *self.send_strips]

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
        for strip in self.all_strips():
            if keep_ranks is not None and strip.rank not in keep_ranks:
                continue
            if keep_buffers is not None and strip.buffer not in keep_buffers:
                continue
            segments = [
                s for s in strip.segments if keep_handles is None or s.handle in keep_handles
            ]
            kept = picked.strips if strip.side == "recv" else picked.send_strips
            kept.append(Strip(strip.rank, strip.buffer, strip.nbytes, segments, strip.side))
        return picked

    def text(self) -> str:
        """Every receive strip, rank by rank (``0``-``9``, ``a``..: source rank; ``*`` reduced;
        ``.`` unwritten; ``!`` written twice), then every send strip (digit: the rank the
        bytes go to; ``*`` every rank; ``.`` unread; ``!`` read twice)."""
        lines = ["legend: digit = source rank, * = reduced over ranks, . = unwritten, ! = twice"]
        lines += [s.text() for s in self.strips]
        if self.send_strips:
            lines.append(
                "send buffers: digit = rank the bytes go to, * = every rank, . = unread, "
                "! = read twice"
            )
            lines += [s.text() for s in self.send_strips]
        if self.carried:
            calls = ", ".join(f"{op} x{n}" for op, n in sorted(self.carried.items()))
            lines.append(
                f"not drawn: framework calls that ran in their argument exchange, without a task "
                f"({calls}; counted over all ranks)"
            )
        return "\n".join(lines)

    def legend(self, colors: Any) -> list[tuple[str, dict[str, Any]]]:
        """The PNG's legend: (label, matplotlib patch style) of every kind of range.

        ``colors`` maps a source rank modulo 10 to its colour (a matplotlib colormap). The
        receive entries come first; the send entries follow when there are send strips.
        """
        segments = [s for strip in self.strips for s in strip.segments]
        sources = sorted({s.source for s in segments if s.source >= 0})
        entries = [(f"from rank {r}", {"color": colors(r % 10)}) for r in sources]
        if any(s.source == _REDUCED for s in segments):
            entries.append(("reduced over ranks", REDUCED_STYLE))
        entries += [("unwritten", UNWRITTEN_STYLE), ("written more than once", TWICE_STYLE)]
        if not self.send_strips:
            return entries
        reads = [s for strip in self.send_strips for s in strip.segments]
        entries += [(f"to rank {r}", _send_style(colors, r))
                    for r in sorted({s.source for s in reads if s.source >= 0})]  # fmt: skip
        if any(s.source == _REDUCED for s in reads):
            entries.append(("to every rank", EVERY_STYLE))
        return [*entries, ("unread", UNREAD_STYLE), ("read more than once", TWICE_READ_STYLE)]

    def save_png(self, path: str | Path, title: str = "") -> None:
        """Draw the strips to ``path`` (needs matplotlib: ``pip install 'hccl_py[bench]'``)."""
        plt = pyplot("a layout PNG")
        strips = self.all_strips()
        height = 0.6 * len(strips) + 1.4
        fig, ax = plt.subplots(figsize=(10, height))
        colors = plt.get_cmap("tab10")
        for y, strip in enumerate(strips):
            send = strip.side == "send"
            background = {"edgecolor": "#999999", **(UNREAD_STYLE if send else UNWRITTEN_STYLE)}
            ax.barh(y, strip.nbytes, left=0, height=0.7, **background)
            once = strip.coverage() == 1
            for s in strip.segments:
                ax.barh(y, s.end - s.start, left=s.start, height=0.7, linewidth=0.5,
                        **_segment_style(colors, s))  # fmt: skip
                # a label only where one range alone covers the bytes (others would hide it)
                wide = (s.end - s.start) / max(1, strip.nbytes) > 0.06
                if wide and once[s.start : s.end].all():
                    short = s.label.rsplit(" handle ", 1)[-1].replace("round ", "r")
                    ax.text((s.start + s.end) / 2, y, f"h{short}", ha="center", va="center",
                            fontsize=7, color="white")  # fmt: skip
            for a, b in strip.overlaps():
                ax.barh(y, b - a, left=a, height=0.7, **(TWICE_READ_STYLE if send else TWICE_STYLE))
        ax.set_yticks(range(len(strips)))
        ax.set_yticklabels([f"rank {s.rank} {s.title()}" for s in strips], fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel("byte offset in the buffer (receive: written; send: read)")
        handles = [patch(label, **style) for label, style in self.legend(colors)]
        below = (0.5, -0.7 / height)  # under the x label, whatever the number of strips
        ax.legend(handles=handles, fontsize=7, loc="upper center", bbox_to_anchor=below,
                  ncol=min(len(handles), 6))  # fmt: skip
        if title:
            ax.set_title(title, fontsize=9)
        save(fig, path)


def _send_style(colors: Any, rank: int) -> dict[str, Any]:
    """The PNG style of send bytes that go to ``rank``: hatched in that rank's colour."""
    return {"facecolor": colors(rank % 10), "hatch": SEND_HATCH, "edgecolor": "white"}


def _segment_style(colors: Any, segment: Segment) -> dict[str, Any]:
    """The PNG style of one range: its rank's colour (hatched when read from a send buffer)."""
    if segment.side == "send":
        return EVERY_STYLE if segment.source == _REDUCED else _send_style(colors, segment.source)
    if segment.source == _REDUCED:
        return {**REDUCED_STYLE, "edgecolor": "white"}
    return {"color": colors(segment.source % 10), "edgecolor": "white"}
