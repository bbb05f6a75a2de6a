"""The emulator's world lock (``Unwatched``) as every client call takes it: ``held_call``."""

from __future__ import annotations

import os
import sys
import threading
from typing import Any

import pytest
import torch
from hccl_py.backends.emu.modes import KernelMode
from hccl_py.backends.emu.world_lock import Unwatched

import hccl_py as hp
from hccl_py.bench.calls import Step
from hccl_py.bench.ops import BENCH_OPS, plan
from hccl_py.bench.reference import REDUCE_OPS, TYPES


class _Seen(KernelMode):
    def __init__(self, seen: list[str]) -> None:
        super().__init__()
        self.seen = seen

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        self.seen.append(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))


def test_held_call_keeps_dispatch_modes_away_as_the_with_statement_does() -> None:
    seen: list[str] = []
    lock = Unwatched(threading.RLock())
    t = torch.zeros(4)

    def inner() -> int:
        t.mul_(2)
        assert lock._is_owned()
        return 7

    def outer(x: int) -> int:
        t.add_(x)
        with lock:  # nested in either form: still off, and still off after the inner exit
            t.sub_(1)
        got = lock.held_call(inner)
        t.div_(1)
        return got

    with _Seen(seen):
        assert lock.held_call(outer, 1) == 7
        t.neg_()  # after the outermost exit: seen again
    assert seen == ["neg_"]
    assert not lock._is_owned()


def test_held_call_lets_go_of_the_lock_and_puts_the_modes_back_when_its_call_raises() -> None:
    seen: list[str] = []
    lock = Unwatched(threading.RLock())
    t = torch.zeros(4)

    def fails() -> None:
        t.add_(1)
        raise ValueError("the call's own error")

    with _Seen(seen):
        with pytest.raises(ValueError, match="the call's own error"):
            lock.held_call(fails)
        assert not lock._is_owned()
        t.neg_()
    assert seen == ["neg_"]


def _launches(counts: dict[str, int], files: tuple[str, ...] = ("world_lock.py",)) -> None:
    step = Step(
        "kernel", plan(BENCH_OPS["allgather"], 2, 1024, 4, 1), TYPES["fp32"], REDUCE_OPS["sum"]
    )
    step.run()  # the first launch makes what later ones reuse

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call" and os.path.basename(frame.f_code.co_filename) in files:
            name = f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_code.co_name}"
            counts[name] = counts.get(name, 0) + 1

    if hp.get_rank() == 0:
        sys.setprofile(profile)
    try:
        step.run()
    finally:
        sys.setprofile(None)


def test_a_launch_takes_the_world_lock_in_one_frame_per_hccl_py_call(monkeypatch) -> None:  # noqa: ANN001
    """The benchmark's kernel (InitV2, SetCcTilingV2, AllGather[True], Wait, SyncAll, Finalize)
    and its launch take the world lock through ``held_call`` only: before 2026-12-01 each took
    it through ``serial()`` and the lock's ``__enter__`` and ``__exit__``, three frames more."""
    monkeypatch.setenv("HCCL_PY_EMU_RUNNERS", "greenlets")  # one thread: one profile sees rank 0
    counts: dict[str, int] = {}
    hp.run(_launches, args=(counts,), world_size=2)
    assert not {"world_lock.py:__enter__", "world_lock.py:__exit__"} & set(counts), counts
    assert counts.get("world_lock.py:held_call", 0) >= 9, counts


def test_a_wait_of_a_committed_collective_round_goes_straight_to_wait_round(monkeypatch) -> None:  # noqa: ANN001
    """Control.wait asks the binding once for a usable handle and calls wait_round itself:
    before 2026-12-01 it went through waits_at_once, _wait_after_reset, _usable_info, the
    failures' and the binding's unusable, Lifecycle.wait and Rounds._wait (the profile sees
    rank 0's one Wait of a launch of the benchmark's kernel)."""
    monkeypatch.setenv("HCCL_PY_EMU_RUNNERS", "greenlets")
    counts: dict[str, int] = {}
    files = ("control.py", "lifecycles.py", "state.py", "binding.py", "world.py", "buffers.py")
    hp.run(_launches, args=(counts, files), world_size=2)
    assert counts.get("control.py:wait_round", 0) == 1, counts
    slow = {"control.py:_usable_info", "control.py:_wait_after_reset", "lifecycles.py:wait"}
    slow |= {"binding.py:handle", "world.py:_ordered_after"}  # (no window race check here)
    slow |= {"buffers.py:_across_domains"}  # (its Commits: no other domain's task pending)
    assert not slow & set(counts), counts
    # a launch of one core: no other core's Finalize to order the Wait against
    assert not {"state.py:record_wait", "state.py:observe_turn"} & set(counts), counts
