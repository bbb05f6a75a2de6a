"""The buffer race check's pending marks against a byte-by-byte numpy reference.

The check keeps, per storage, the marks of a rank's pending rounds (sorted,
disjoint runs of bytes) and, at each access, reports the mark that the access
meets first in address order (the earliest made among marks that start
there), with the bytes from that first shared byte to the last one.
"""

from __future__ import annotations

import numpy as np
import pytest
from hccl_py.backends.emu import buffers
from hccl_py.backends.emu.buffers import BufferRaces, Mark, Round, merged_runs

STORAGE = 1 << 20  # a storage address
BASE = 64  # where the marked allocations start in that storage
SIZE = 256  # bytes of the allocation


def random_runs(rng: np.random.Generator, size: int) -> list[tuple[int, int]]:
    """Sorted, disjoint runs inside ``[0, size)`` (possibly none)."""
    starts = rng.integers(0, size, rng.integers(0, 6))
    sizes = rng.integers(0, 40, len(starts))
    return merged_runs(starts, np.minimum(sizes, size - starts))


def reference(marks: list[Mark], access: list[tuple[int, int]], written: bool) -> tuple | None:
    """(index of the reported mark, lo, hi), found byte by byte; None if no mark races."""
    touched = np.zeros(BASE + SIZE + 64, dtype=bool)
    for lo, hi in access:
        touched[lo - STORAGE : hi - STORAGE] = True
    best = None
    for k, mark in enumerate(marks):
        if not (written or mark.side == "recv"):
            continue
        covered = np.zeros_like(touched)
        for lo, hi in zip(mark.starts, mark.ends, strict=True):
            covered[BASE + lo : BASE + hi] = True
        shared = np.flatnonzero(covered & touched)
        if len(shared) and (best is None or shared[0] < best[1]):
            best = (k, int(shared[0]), int(shared[-1]) + 1)
    if best is None:
        return None
    return best[0], best[1] + STORAGE, best[2] + STORAGE


@pytest.mark.parametrize("seed", range(200))
def test_the_first_racing_mark_and_its_bytes_match_a_byte_reference(seed: int) -> None:
    rng = np.random.default_rng(seed)
    races = BufferRaces(1, lambda domain: {})
    marks = []
    for index in range(int(rng.integers(1, 5))):
        runs = random_runs(rng, SIZE) or [(0, 1)]
        side = "recv" if rng.random() < 0.5 else "send"
        starts, ends = [lo for lo, _ in runs], [hi for _, hi in runs]
        marks.append(Mark(Round(None, index, "k.py:1"), side, None, STORAGE + BASE, starts, ends))
    races.pending[0][STORAGE] = marks
    access = [(lo + STORAGE, hi + STORAGE) for lo, hi in random_runs(rng, BASE + SIZE + 64)]
    written = bool(rng.random() < 0.5)

    found = races._first(0, STORAGE, access, written)
    expected = reference(marks, access, written)

    if expected is None:
        assert found is None
    else:
        assert found is not None
        assert (marks.index(found.mark), found.lo, found.hi) == expected
        assert found.written is written


def test_marks_of_a_finished_round_are_dropped_and_an_empty_storage_with_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    races = BufferRaces(1, lambda domain: {})
    done, other = Round(None, 0, "a.py:1"), Round(None, 1, "a.py:2")
    done.marks.append(STORAGE)
    races.pending[0][STORAGE] = [Mark(done, "recv", None, 0, [0], [8])]
    races.live[0] = [done, other]

    class Seen:  # orders exactly ``done``
        def __init__(self, *args: object) -> None:
            pass

        def covers(self, rnd: Round) -> bool:
            return rnd is done

    monkeypatch.setattr(buffers, "_Ordered", Seen)
    races.ordered(0, None, 0)
    assert STORAGE not in races.pending[0]
    assert races.live[0] == [other]
