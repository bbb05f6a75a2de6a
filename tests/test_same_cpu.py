"""Thread runners woken on the CPU of the runner that hands them the baton (``hccl_py.server.same_cpu``).

The emulator's thread runners run one at a time; the next one is pinned to the
CPU its waker is about to leave, and lets itself run anywhere again as soon as
it runs. These tests check the pinning and, above all, that no user code ever
runs pinned. No timing: what is checked is CPU masks and counts.
"""

from __future__ import annotations

import os
import threading

import pytest
import torch
from hccl_py.backends.emu.runners import RUNNERS_ENV

import hccl_py as hp
from hccl_py.kernel.context import current_rank_context
from hccl_py.server import same_cpu
from hccl_py.server.same_cpu import SAME_CPU_ENV, SameCpu

pytestmark = pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
    reason="needs Linux CPU affinity and at least two CPUs for this process",
)


@pytest.fixture(autouse=True)
def _switch_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tests check the default, whatever the environment that runs the suite says."""
    monkeypatch.delenv(SAME_CPU_ENV, raising=False)


def _blocked_thread() -> tuple[threading.Thread, threading.Lock, dict]:
    """A thread asleep on a lock; once released it calls ``unpin`` and records its CPU mask."""
    gate, seen = threading.Lock(), {}
    gate.acquire()
    started = threading.Event()

    def body() -> None:
        seen["tid"] = threading.get_native_id()
        started.set()
        gate.acquire()
        seen["pinned mask"] = os.sched_getaffinity(0)
        seen["cpu"].unpin(seen["had"])
        seen["mask after"] = os.sched_getaffinity(0)

    thread = threading.Thread(target=body)
    thread.start()
    started.wait()
    return thread, gate, seen


def test_a_woken_thread_runs_on_one_cpu_until_it_unpins() -> None:
    cpu = SameCpu()
    mask = os.sched_getaffinity(0)
    assert cpu.on
    thread, gate, seen = _blocked_thread()
    seen["cpu"] = cpu
    seen["had"] = cpu.pin(seen["tid"])
    assert seen["had"] == mask
    pinned = os.sched_getaffinity(seen["tid"])
    assert len(pinned) == 1 and pinned <= mask
    gate.release()
    thread.join()
    assert seen["pinned mask"] == pinned
    assert seen["mask after"] == mask
    assert cpu.pins == 1


def test_the_switch_turns_it_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SAME_CPU_ENV, "0")
    before = os.sched_getaffinity(0)
    cpu = SameCpu()
    assert not cpu.on
    assert not cpu.pin(threading.get_native_id())
    assert cpu.pins == 0 and os.sched_getaffinity(0) == before


def test_a_thread_limited_to_one_cpu_makes_it_off() -> None:
    made: list[SameCpu] = []

    def body() -> None:
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
        made.append(SameCpu())

    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    assert not made[0].on and not made[0].pin(threading.get_native_id())


def test_a_refused_call_turns_it_off_for_good(monkeypatch: pytest.MonkeyPatch) -> None:
    cpu = SameCpu()

    def refuse(tid: int, mask: set[int]) -> None:
        raise OSError(22, "Invalid argument")

    monkeypatch.setattr(same_cpu.os, "sched_setaffinity", refuse)
    assert not cpu.pin(threading.get_native_id())
    assert not cpu.on
    monkeypatch.undo()
    assert not cpu.pin(threading.get_native_id()) and cpu.pins == 0


def _ranks_mask(n_ops: int) -> list[set[int]]:
    """On every rank: the CPU mask its own code runs with, after each of ``n_ops`` collectives."""
    masks = []
    for i in range(n_ops):
        out = torch.empty(hp.get_world_size())
        hp.all_gather_into_tensor(out, torch.full((1,), float(i)))
        masks.append(os.sched_getaffinity(0))
    return masks


def test_thread_runners_hand_off_on_one_cpu_and_run_their_code_on_every_cpu(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(RUNNERS_ENV, "threads")
    counts = {"pin": 0, "unpin": 0}
    pin, unpin = SameCpu.pin, SameCpu.unpin

    def counted_pin(self: SameCpu, tid: int | None) -> set[int] | None:
        had = pin(self, tid)
        counts["pin"] += had is not None
        return had

    def counted_unpin(self: SameCpu, had: set[int]) -> None:
        counts["unpin"] += 1
        unpin(self, had)

    monkeypatch.setattr(SameCpu, "pin", counted_pin)
    monkeypatch.setattr(SameCpu, "unpin", counted_unpin)
    mask = os.sched_getaffinity(0)
    masks = hp.run(_ranks_mask, world_size=4, args=(5,))
    assert all(m == mask for rank in masks for m in rank)
    assert counts["pin"] >= 4 * 5 - 1  # a hand-off per collective and rank, but the first
    assert counts["unpin"] == counts["pin"]
    assert os.sched_getaffinity(0) == mask


def test_greenlet_runners_pin_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(RUNNERS_ENV, "greenlets")
    pins = []
    monkeypatch.setattr(SameCpu, "pin", lambda self, tid: pins.append(tid))
    assert hp.run(_ranks_mask, world_size=2, args=(2,))
    assert pins == []


def test_a_failed_cpu_lookup_turns_it_off() -> None:
    before = os.sched_getaffinity(0)
    cpu = SameCpu()
    cpu._getcpu = lambda: -1  # sched_getcpu's answer where it fails
    assert not cpu.pin(threading.get_native_id())
    assert not cpu.on and cpu.pins == 0
    assert os.sched_getaffinity(0) == before


def _own_mask() -> set[int]:
    """A rank that binds itself to one CPU of its own, then hands the baton on and back."""
    cpus = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cpus[hp.get_rank() % len(cpus)]})
    for _ in range(3):
        hp.barrier()
    return os.sched_getaffinity(0)


def test_a_mask_a_rank_set_for_itself_survives_its_hand_offs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(RUNNERS_ENV, "threads")
    cpus = sorted(os.sched_getaffinity(0))
    assert hp.run(_own_mask, world_size=2) == [{cpus[0]}, {cpus[1]}]


class _Stop(BaseException):
    """What the watchdog raises in a runner it stops."""


def _stopped_while_asleep(seen: dict[str, set[int]]) -> None:
    """Rank 1 sleeps in a barrier; rank 0 sends it an interruption, then hands it the baton."""
    ctx = current_rank_context()
    hp.barrier()
    if ctx.rank == 1:
        try:
            hp.barrier()
        finally:
            seen["mask in rank 1's finally"] = os.sched_getaffinity(0)
        return
    (sleeper,) = [r for r in ctx.blocker.runners if r.rank == 1]
    assert sleeper.thread.interrupt(_Stop)
    hp.barrier()


def test_a_runner_stopped_while_asleep_unwinds_on_every_cpu(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(RUNNERS_ENV, "threads")
    seen: dict[str, set[int]] = {}
    with pytest.raises(hp.WorldError):
        hp.run(_stopped_while_asleep, world_size=2, args=(seen,), timeout=30)
    assert seen == {"mask in rank 1's finally": os.sched_getaffinity(0)}


def _bind_and_look(x: object, seen: list[tuple[int, int, set[int]]]) -> None:
    """A core that records its thread and CPUs; rank 0's cores then bind themselves to one CPU."""
    seen.append((hp.get_rank(), threading.get_native_id(), os.sched_getaffinity(0)))
    if hp.get_rank() == 0:
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})


def _cores_bind_their_threads(seen: list[tuple[int, int, set[int]]]) -> None:
    """Rank 0 launches first; its launch returns once its cores' threads are back in the run's
    pool. After the barrier rank 1 launches, and its cores take those threads."""
    if hp.get_rank() == 0:
        hp.launch(_bind_and_look, torch.zeros(4), seen, block_dim=2)
    hp.barrier()
    if hp.get_rank() == 1:
        hp.launch(_bind_and_look, torch.zeros(4), seen, block_dim=2)


def test_a_mask_a_core_set_does_not_reach_a_later_runner_on_its_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A core of rank 1 runs on a thread that a core of rank 0 bound to one CPU, and has the
    CPUs a new thread would have: its rank's."""
    monkeypatch.setenv(RUNNERS_ENV, "threads")
    everything = os.sched_getaffinity(0)
    seen: list[tuple[int, int, set[int]]] = []
    hp.run(_cores_bind_their_threads, world_size=2, args=(seen,), timeout=60)
    threads_of = {r: {tid for rank, tid, _ in seen if rank == r} for r in (0, 1)}
    # the pool hands out its last idle thread first: rank 0's runner, if it ended by then, is
    # the only thread idled after rank 0's cores, so at least one core thread is reused
    assert len(seen) == 4 and threads_of[0] & threads_of[1], seen
    assert all(cpus == everything for _, _, cpus in seen), seen
