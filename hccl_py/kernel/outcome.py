"""What ``hp.run`` gives back: every rank's return value, and the warnings each rank got.

Warnings are a first-class outcome: each rank's :class:`~hccl_py.core.errors.HcclWarning`
list travels with its return value (across processes too, so the same holds on
gloo and under launchers), ``hp.run(...).warnings`` holds them per rank, and a
short summary is printed at the end of a run that had any.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..core.errors import HcclUnfinishedError, HcclWarning
from ..trace import recorder
from .context import current_rank_context

#: How many warnings the end-of-run summary quotes.
SUMMARY_LINES = 5


@dataclass
class RankOutcome:
    """One rank's return value and warnings, as they travel back to ``hp.run``."""

    value: Any
    warnings: list[HcclWarning] = field(default_factory=list)
    #: What the rank recorded (events and layouts), when the run records.
    trace: dict[str, Any] | None = None


@dataclass(frozen=True)
class WithWarnings:
    """``fn`` wrapped to return a :class:`RankOutcome` (picklable when ``fn`` is)."""

    fn: Callable[..., Any]

    def __call__(self, *args: Any) -> RankOutcome:
        ctx = current_rank_context()
        if ctx.config.record:
            recorder.start(ctx.rank)
        try:
            value = self.fn(*args)
        except BaseException as exc:
            trace = recorder.finish(ctx.rank) if ctx.config.record else None
            if trace is not None:  # a failed run's timeline is what one debugs most
                exc.hccl_trace = trace
            raise
        trace = recorder.finish(ctx.rank) if ctx.config.record else None
        if ctx.open_work:
            started = "; ".join(ctx.open_work.values())
            raise HcclUnfinishedError(
                f"the rank's function returned with {len(ctx.open_work)} asynchronous "
                f"collective(s) never waited: {started}. Call .wait() on the handle that "
                "async_op=True / sync_op=False returned before using the output (until then "
                "the output's contents depend on timing)",
                rank=ctx.rank,
            )
        return RankOutcome(value, list(ctx.warnings), trace)


class RunResult(list):
    """The per-rank return values of ``hp.run`` (a list), with ``warnings`` per rank."""

    warnings: dict[int, list[HcclWarning]]
    #: Per rank, what it recorded ({"events": ..., "layouts": ...}) when the run recorded.
    traces: dict[int, dict[str, Any]]

    def __init__(self, outcomes: list[Any]) -> None:
        super().__init__(o.value if isinstance(o, RankOutcome) else o for o in outcomes)
        self.traces = {
            rank: o.trace
            for rank, o in enumerate(outcomes)
            if isinstance(o, RankOutcome) and o.trace is not None
        }
        self.warnings = {
            rank: list(o.warnings)
            for rank, o in enumerate(outcomes)
            if isinstance(o, RankOutcome) and o.warnings
        }

    def all_warnings(self) -> list[HcclWarning]:
        """Every rank's warnings, rank by rank."""
        return [w for rank in sorted(self.warnings) for w in self.warnings[rank]]


def summarize(result: RunResult, out: Any = None) -> None:
    """Print a short summary of the run's warnings (nothing when there were none)."""
    found = result.all_warnings()
    if not found:
        return
    kinds = Counter(w.kind for w in found)
    lines = [
        f"hccl_py: {len(found)} warning(s) on {len(result.warnings)} rank(s): "
        + ", ".join(f"{kind} x{n}" for kind, n in sorted(kinds.items()))
    ]
    lines += [f"  {w}" for w in found[:SUMMARY_LINES]]
    if len(found) > SUMMARY_LINES:
        lines.append(f"  ... and {len(found) - SUMMARY_LINES} more (hp.run(...).warnings)")
    print("\n".join(lines), file=out or sys.stderr, flush=True)
