"""The buffer race check's pending marks against a byte-by-byte numpy reference.

The check keeps, per storage, the sides of a rank's tasks with pending rounds;
at an access it turns their rounds into marks (sorted, disjoint runs of bytes)
and finds every mark that the access meets, in address order (the earliest
made first among marks that start there), each with the bytes from its first
shared byte to its last one; the report is the first of them. A Wait drops the
rounds it orders, and a task's sides once none is left.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from hccl_py.backends.emu import buffers
from hccl_py.backends.emu.buffers import BufferRaces, Mark, Round
from hccl_py.backends.emu.findings import findings
from hccl_py.backends.emu.round_runs import merged_runs

STORAGE = 1 << 20  # a storage address
BASE = 64  # where the marked allocations start in that storage
SIZE = 256  # bytes of the allocation


def random_runs(rng: np.random.Generator, size: int) -> list[tuple[int, int]]:
    """Sorted, disjoint runs inside ``[0, size)`` (possibly none)."""
    starts = rng.integers(0, size, rng.integers(0, 6))
    sizes = rng.integers(0, 40, len(starts))
    return merged_runs(starts, np.minimum(sizes, size - starts))


def reference(marks: list[Mark], access: list[tuple[int, int]], written: bool) -> list[tuple]:
    """(index of the mark, lo, hi) of every mark the access meets, found byte by byte, by
    first shared byte (ties: in the order of ``marks``)."""
    touched = np.zeros(BASE + SIZE + 64, dtype=bool)
    for lo, hi in access:
        touched[lo - STORAGE : hi - STORAGE] = True
    met = []
    for k, mark in enumerate(marks):
        if not (written or mark.side == "recv"):
            continue
        covered = np.zeros_like(touched)
        for lo, hi in zip(mark.starts, mark.ends, strict=True):
            covered[BASE + lo : BASE + hi] = True
        shared = np.flatnonzero(covered & touched)
        if len(shared):
            met.append((k, int(shared[0]) + STORAGE, int(shared[-1]) + 1 + STORAGE))
    return sorted(met, key=lambda found: (found[1], found[0]))


@pytest.mark.parametrize("seed", range(200))
def test_every_racing_mark_and_its_bytes_match_a_byte_reference(seed: int) -> None:
    rng = np.random.default_rng(seed)
    marks = []
    for index in range(int(rng.integers(1, 5))):
        runs = random_runs(rng, SIZE) or [(0, 1)]
        side = "recv" if rng.random() < 0.5 else "send"
        starts, ends = [lo for lo, _ in runs], [hi for _, hi in runs]
        marks.append(Mark(Round(None, index, "k.py:1"), side, None, STORAGE + BASE, starts, ends))
    access = [(lo + STORAGE, hi + STORAGE) for lo, hi in random_runs(rng, BASE + SIZE + 64)]
    written = bool(rng.random() < 0.5)

    found = findings(marks, access, written)

    got = [(marks.index(f.mark), f.lo, f.hi) for f in found]
    assert got == reference(marks, access, written)
    assert all(f.written is written and f.before is None for f in found)  # rounds: no rewrite


class _Alloc:
    """Where a task's buffer lies: a storage address and the allocation's offset in it."""

    def __init__(self, storage: int) -> None:
        self.memory = (storage, BASE)


class _Task:
    """The two buffers of a task, all the bookkeeping of pending rounds looks at."""

    def __init__(self, send: int, recv: int) -> None:
        self.send, self.recv = (
            SimpleNamespace(alloc=_Alloc(send)),
            SimpleNamespace(alloc=_Alloc(recv)),
        )


class _Seen:
    """Stands in for ``buffers.Ordered``: orders the rounds whose index is at most ``last``."""

    def __init__(self, task: object, last: int, slots: object, rank: int) -> None:
        self.last = last

    def covers(self, rnd: Round) -> bool:
        return rnd.index <= self.last


def test_ordered_rounds_are_dropped_and_a_storage_with_none_left(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    races = BufferRaces(1, lambda domain: {})
    task = _Task(STORAGE, STORAGE + SIZE)
    rounds = [Round(task, index, f"a.py:{index}") for index in (0, 2, 1)]  # 2 held back
    for rnd in rounds:
        races._mark(0, rnd)
    assert [r.order for r in rounds] == sorted(r.order for r in rounds)
    send, recv = races.tasks[0][task]
    assert races.pending[0] == {STORAGE: [send], STORAGE + SIZE: [recv]}
    assert send.rounds is recv.rounds and [r.index for r in send.rounds] == [0, 1, 2]

    monkeypatch.setattr(buffers, "Ordered", _Seen)
    races.ordered(0, task, 0)
    assert [r.index for r in send.rounds] == [1, 2]
    assert set(races.pending[0]) == {STORAGE, STORAGE + SIZE}
    races.ordered(0, task, 2)
    assert races.pending[0] == {} and races.tasks[0] == {}


def test_a_storage_keeps_the_sides_of_other_tasks(monkeypatch: pytest.MonkeyPatch) -> None:
    races = BufferRaces(1, lambda domain: {})
    first, second = _Task(STORAGE, STORAGE), _Task(STORAGE, STORAGE + SIZE)
    races._mark(0, Round(first, 0, "a.py:1"))
    races._mark(0, Round(second, 0, "a.py:2"))
    monkeypatch.setattr(buffers, "Ordered", lambda task, last, slots, rank: _Orders(task))
    races.ordered(0, first, 0)
    assert races.pending[0] == {
        STORAGE: [races.tasks[0][second][0]],
        STORAGE + SIZE: [races.tasks[0][second][1]],
    }


class _Orders:
    """Orders every round of one task."""

    def __init__(self, task: object) -> None:
        self.task = task

    def covers(self, rnd: Round) -> bool:
        return rnd.task is self.task
