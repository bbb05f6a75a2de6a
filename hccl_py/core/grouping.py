"""Reports on many ranks: one line for the ranks that are in the same state.

A deadlock or a failure on 8 ranks is usually the same story 8 times; these
helpers fold identical per-rank lines into ``ranks 0-7: ...``.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable

_RANK_LINE = re.compile(r"^rank (\d+) (.*)$", re.S)
#: The name of a thread that runs a kernel's core (:func:`core_thread_name`).
_CORE_THREAD = re.compile(r"rank(\d+)-([A-Z]+)(\d+)")


def core_thread_name(rank: int, kind: str, block: int) -> str:
    """The name of the thread that runs block ``block`` of core type ``kind`` (``AIV``) of
    rank ``rank``'s kernel: ``rank0-AIV1``, which :func:`thread_core` reads back."""
    return f"rank{rank}-{kind}{block}"


def thread_core(name: str) -> tuple[str, str] | None:
    """The core whose thread has the name ``name`` (:func:`core_thread_name`), as reports name
    it: (``rank 0 ``, ``AIV core 1``, as ``kernel.context.core_name`` does); None for a thread
    that runs no core."""
    match = _CORE_THREAD.fullmatch(name)
    return None if match is None else (f"rank {match[1]} ", f"{match[2]} core {match[3]}")


def rank_ranges(ranks: Iterable[int]) -> str:
    """``[0, 1, 2, 3, 6]`` -> ``"0-3, 6"``: sorted ranks with consecutive runs folded."""
    runs: list[list[int]] = []
    for r in sorted(set(ranks)):
        if runs and r == runs[-1][1] + 1:
            runs[-1][1] = r
        else:
            runs.append([r, r])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def label(ranks: list[int]) -> str:
    """``rank 3`` for one rank, ``ranks 0-3`` for several."""
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {rank_ranges(ranks)}"


def group_rank_lines(lines: Iterable[str]) -> list[str]:
    """Fold lines ``rank N <state>`` that differ only in N into ``ranks 0-3: <state>``
    (``waits`` becomes ``wait``); ``n`` identical lines of each rank (several threads of it
    in the same state, which do not name their core) into ``ranks 0-3, n threads each: ...``.

    Lines that do not start with a rank stay as they are; groups come in the
    order of their lowest rank, other lines after them in their own order.
    """
    states: dict[tuple[str, int], list[int]] = {}
    others: list[str] = []
    threads: Counter[tuple[str, int]] = Counter()
    for line in lines:
        match = _RANK_LINE.match(line)
        if match is None:
            others.append(line)
        else:
            threads[match[2], int(match[1])] += 1
    for (state, rank), n in threads.items():
        states.setdefault((state, n), []).append(rank)
    grouped = sorted(states.items(), key=lambda item: (min(item[1]), _natural(item[0][0])))
    return [_fold(state, ranks, n) for (state, n), ranks in grouped] + others


def _fold(state: str, ranks: list[int], threads: int) -> str:
    """The line of ``ranks`` in ``state``, each with ``threads`` threads in it."""
    if threads == 1:
        return (
            f"rank {ranks[0]} {state}" if len(ranks) == 1 else f"{label(ranks)}: {_plural(state)}"
        )
    each = " each" if len(ranks) > 1 else ""
    return f"{label(ranks)}, {threads} threads{each}: {_plural(state)}"


def _plural(state: str) -> str:
    """``waits for ...`` -> ``wait for ...``: the verb of a state shared by several ranks."""
    verb, _, rest = state.partition(" ")
    return f"{verb[:-1]} {rest}" if verb in _VERBS else state


#: Verbs that start a per-rank state line (blocking.py, the servers' reports).
_VERBS = frozenset({"waits", "polls"})


def _natural(text: str) -> list[str | int]:
    """``text`` split into its words and numbers: bytes [4, 8) come before bytes [12, 16),
    core 2 before core 10."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text)]
