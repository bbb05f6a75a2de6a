"""What block_dim costs on the process backends, counted (issue 28, goal 2).

A launch with ``block_dim`` 8 must not start threads once the process has run
one (the cores run on reusable threads), and a core that does not communicate
must sleep while other cores of its rank prepare, commit and wait: it is woken
once, when what it waits for happened. Counted, never timed. The pool's threads
end when idle, and a job on a reused thread starts as in a new one.
"""

from __future__ import annotations

import contextvars
import gc
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import torch

import hccl_py as hp
from hccl_py import Hccl, SyncAll
from hccl_py.kernel.context import current_core_context, current_rank_context
from hccl_py.server import threads as threads_module
from hccl_py.server.blocking import Blocker

BLOCK_DIM = 8
ROUNDS = 4
FP32 = hp.HcclDataType.HCCL_DATA_TYPE_FP32


@contextmanager
def counted_wakeups(cond: Any, key: Callable[[], Any]) -> Iterator[Counter]:
    """Count, by ``key()`` of the waking thread, the returns from waits on ``cond``."""
    seen: Counter = Counter()
    names = [n for n in ("wait", "wait_until") if hasattr(cond, n)]
    originals = {n: getattr(cond, n) for n in names}

    def counting(original: Callable[..., bool]) -> Callable[..., bool]:
        def wait(*args: Any, **kwargs: Any) -> bool:
            woken = original(*args, **kwargs)
            seen[key()] += 1
            return woken

        return wait

    for name, original in originals.items():
        setattr(cond, name, counting(original))
    try:
        yield seen
    finally:
        for name in names:
            delattr(cond, name)


def _until(check: Callable[[], bool]) -> None:
    """Poll ``check`` (a state another thread reaches) every millisecond, for at most 60 s."""
    deadline = time.monotonic() + 60
    while not check():
        assert time.monotonic() < deadline, "the other thread never got there"
        time.sleep(0.001)


def _asleep(cond: Any) -> bool:
    """Whether a thread sleeps on ``cond`` (threading.Condition keeps its sleepers in ``_waiters``)."""
    with cond:
        return bool(getattr(cond, "_sleepers", None) or cond._waiters)


def test_a_waiter_sleeps_through_changes_that_do_not_concern_it() -> None:
    """Fifty notifications that leave a waiter's condition false do not wake it; the fifty-first does."""
    blocker = Blocker(timeout=60.0)
    blocker.enter(2)  # this thread and the waiter
    flag = [False]
    waiter = threading.Thread(
        target=lambda: blocker.wait_for(lambda: flag[0], "the waiter waits for the flag")
    )
    with counted_wakeups(blocker.cond, lambda: threading.current_thread().name) as wakeups:
        waiter.start()
        for _ in range(50):
            _until(lambda: _asleep(blocker.cond))
            with blocker.cond:
                blocker.progressed()  # some state changed, not the flag
        _until(lambda: _asleep(blocker.cond))
        with blocker.cond:
            flag[0] = True
            blocker.progressed()
        waiter.join(60)
    assert not waiter.is_alive()
    assert wakeups == {waiter.name: 1}


def _idle_cores_kernel(sendGM: Any, recvGM: Any, count: int) -> None:
    """Block 0 runs ROUNDS AllGathers once every other core sleeps in SyncAll."""
    hccl = Hccl()
    hccl.Init(hp.GetHcclContext(0))
    if hp.GetBlockIdx() == 0:
        blocker = current_rank_context().blocker
        rank_thread = threading.main_thread().ident
        _until(lambda: len([t for t in blocker.blocked if t != rank_thread]) == BLOCK_DIM - 1)
        for _ in range(ROUNDS):
            handle = hccl.AllGather[True](sendGM, recvGM, count, FP32, count)
            hccl.Wait(handle)
    SyncAll()
    hccl.Finalize()


def _counted_launches() -> tuple[int, dict[int, int]]:
    """On each rank: thread starts over three launches after a first one, and wake-ups per core."""
    world = hp.get_world_size()
    send = torch.arange(4.0) + 10 * hp.get_rank()
    recv = torch.zeros(4 * world)
    hp.launch(_idle_cores_kernel, send, recv, 4, block_dim=BLOCK_DIM)  # the threads start here
    starts = [0]
    start = threading.Thread.start

    def counting_start(thread: threading.Thread) -> None:
        starts[0] += 1
        start(thread)

    blocker = current_rank_context().blocker

    def block() -> int:
        core = current_core_context()
        return -1 if core is None else core.block_idx

    threading.Thread.start = counting_start  # type: ignore[method-assign]
    try:
        with counted_wakeups(blocker.cond, block) as wakeups:
            for _ in range(3):
                hp.launch(_idle_cores_kernel, send, recv, 4, block_dim=BLOCK_DIM)
    finally:
        threading.Thread.start = start  # type: ignore[method-assign]
    assert torch.equal(recv, torch.cat([torch.arange(4.0) + 10 * r for r in range(world)]))
    return starts[0], {b: n for b, n in wakeups.items() if b > 0}


def test_idle_cores_start_no_thread_and_sleep_until_syncall() -> None:
    """block_dim 8 on gloo: no thread start per launch; each idle core wakes once per launch."""
    for starts, wakeups in hp.run(_counted_launches, 2, backend="gloo", timeout=60.0):
        assert starts == 0
        assert wakeups == {b: 3 for b in range(1, BLOCK_DIM)}


def test_the_pool_reuses_an_idle_thread_and_ends_it_after_idle_s(monkeypatch) -> None:
    """A second job runs on the first job's thread; a thread idle for IDLE_S ends."""
    from hccl_py.server import threads

    monkeypatch.setattr(threads, "IDLE_S", 0.2)
    pool = threads.ThreadPool()
    ran: list[threading.Thread] = []
    for _ in range(2):
        pool.start(lambda: ran.append(threading.current_thread()), "job").join(60)
    assert ran[0] is ran[1] and pool.started == 1
    _until(lambda: not ran[0].is_alive())
    pool.start(lambda: ran.append(threading.current_thread()), "job").join(60)
    assert ran[2] is not ran[0] and pool.started == 2


def test_a_pool_job_starts_as_in_a_new_thread() -> None:
    """No context variable and no grad mode of an earlier job on the same thread."""
    from hccl_py.server import threads

    pool = threads.ThreadPool()
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")
    seen: list[tuple[str, bool]] = []

    def first() -> None:
        var.set("first job")
        torch.set_grad_enabled(False)

    pool.start(first, "first").join(60)
    pool.start(lambda: seen.append((var.get(), torch.is_grad_enabled())), "second").join(60)
    assert pool.started == 1
    assert seen == [("unset", True)]


@pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
    reason="needs Linux CPU affinity and at least two CPUs for this process",
)
def test_a_pool_job_runs_on_the_cpus_of_the_thread_that_starts_it() -> None:
    """A mask an earlier job set for its thread does not reach the next job on that thread."""
    from hccl_py.server import threads

    pool = threads.ThreadPool()
    one = {min(os.sched_getaffinity(0))}
    seen: list[set[int]] = []
    pool.start(lambda: os.sched_setaffinity(0, one), "binds itself").join(60)
    pool.start(lambda: seen.append(os.sched_getaffinity(0)), "next").join(60)
    assert pool.started == 1
    assert seen == [os.sched_getaffinity(0)] and seen[0] != one


def test_a_job_that_raises_does_not_leave_a_dead_thread_in_the_pool() -> None:
    """The raising job's thread ends as a plain thread would; the next job still runs."""
    from hccl_py.server import threads

    pool = threads.ThreadPool()

    def fails() -> None:
        raise RuntimeError("a core's body let an error out")

    hook, threading.excepthook = threading.excepthook, lambda args: None
    try:
        pool.start(fails, "job").join(60)
    finally:
        threading.excepthook = hook
    ran = threading.Event()
    job = pool.start(ran.set, "job")
    job.join(60)
    assert ran.is_set() and not job.is_alive()
    assert pool.started == 2


def test_an_interrupted_job_ends_and_its_thread_is_not_reused() -> None:
    """``interrupt`` raises in the job's thread while the target runs, and never after it."""
    from hccl_py.server import threads

    class Stop(BaseException):
        pass

    pool = threads.ThreadPool()
    running, caught = threading.Event(), []

    def spins() -> None:
        running.set()
        try:
            while True:
                pass
        except Stop:
            caught.append(threading.current_thread())

    job = pool.start(spins, "spins")
    _until(running.is_set)
    assert job.interrupt(Stop)
    job.join(60)
    assert not job.is_alive() and len(caught) == 1
    assert not job.interrupt(Stop), "a returned job cannot be interrupted"
    _until(lambda: not caught[0].is_alive())  # ended: an interrupted thread is not reused
    ran: list[threading.Thread] = []
    pool.start(lambda: ran.append(threading.current_thread()), "next").join(60)
    assert ran[0] is not caught[0] and pool.started == 2


def test_a_thread_that_is_not_fresh_is_not_reused_and_close_ends_the_idle_ones() -> None:
    """``fresh`` false after a job ends the thread; ``close`` ends and joins the idle threads."""
    from hccl_py.server import threads

    fresh = [False]
    pool = threads.ThreadPool(fresh=lambda: fresh[0])
    ran: list[threading.Thread] = []
    for _ in range(2):
        pool.start(lambda: ran.append(threading.current_thread()), "job").join(60)
    assert ran[0] is not ran[1] and pool.started == 2
    fresh[0] = True
    pool.start(lambda: ran.append(threading.current_thread()), "job").join(60)
    _until(lambda: ran[2].name == threads.IDLE_NAME)
    pool.close(60)
    assert not ran[2].is_alive()


def _records_its_thread(seen: list, launch: int) -> Callable[..., None]:
    def kernel(xGM: Any, yGM: Any, tilingGM: Any) -> None:
        seen.append((launch, hp.get_rank(), hp.GetBlockIdx(), threading.current_thread()))

    return kernel


def _three_launches(seen: list) -> None:
    x, y = torch.zeros(4), torch.zeros(4)
    for launch in range(3):
        hp.launch(_records_its_thread(seen, launch), x, y, None, block_dim=4)


def test_emulated_cores_of_later_launches_reuse_the_threads_of_earlier_ones(monkeypatch) -> None:
    """Thread runners: the cores of a rank's launch run on threads of their own, and later
    launches (and the other rank, which runs after it) take those threads; the run leaves no
    thread behind."""
    from hccl_py.backends.emu.runners import RUNNERS_ENV
    from threads_left import left_since, threads_now

    from hccl_py.server.threads import IDLE_NAME

    monkeypatch.setenv(RUNNERS_ENV, "threads")
    gc.collect()
    pools = len(threads_module._POOLS)
    seen: list[tuple[int, int, int, threading.Thread]] = []
    baseline = threads_now()
    hp.run(_three_launches, args=(seen,), world_size=2, timeout=60.0)
    assert sorted((launch, rank, core) for launch, rank, core, _ in seen) == [
        (launch, rank, core) for launch in range(3) for rank in range(2) for core in range(4)
    ]
    cores = Counter((launch, rank) for launch, rank, _, _ in seen)
    threads = {
        (launch, rank): {t for n, r, _, t in seen if (n, r) == (launch, rank)}
        for launch, rank in cores
    }
    assert all(len(ts) == 4 for ts in threads.values()), threads
    assert len({t for *_, t in seen}) == 4, "each core started a thread of its own"
    assert not left_since(baseline)
    assert not [t for t in threading.enumerate() if t not in baseline and t.name == IDLE_NAME]
    gc.collect()
    assert len(threads_module._POOLS) <= pools, "the run's pool outlived it"


def _leaves_multithreading_off() -> None:
    torch.autograd.set_multithreading_enabled(False)


def _leaves_saved_tensor_hooks_on() -> None:
    torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t).__enter__()


_LEFT_OPEN: list = []  # a generator context manager exits when collected: kept here


def _leaves_saved_tensor_hooks_disabled() -> None:
    scope = torch.autograd.graph.disable_saved_tensors_hooks("disabled by a core")
    scope.__enter__()
    _LEFT_OPEN.append(scope)


def _leaves_grad_layout_enforcement_off() -> None:
    torch._C._set_grad_layout_enforcement_enabled(False)


@pytest.mark.parametrize(
    "leaves",
    [
        _leaves_multithreading_off,
        _leaves_saved_tensor_hooks_on,
        _leaves_saved_tensor_hooks_disabled,
        pytest.param(
            _leaves_grad_layout_enforcement_off,
            marks=pytest.mark.skipif(
                not hasattr(torch._C, "_set_grad_layout_enforcement_enabled"),
                reason="this torch has no gradient layout enforcement switch",
            ),
        ),
    ],
)
def test_an_emulator_runner_thread_with_changed_autograd_state_is_not_reused(leaves) -> None:
    """A runner that leaves per-thread autograd state a new thread lacks ends its thread: the
    next runner starts on a new one, with that state as a new thread has it."""
    from hccl_py.backends.emu.runners import runner_threads

    pool = runner_threads()
    ran: list[tuple[threading.Thread, bool, bool]] = []

    def records() -> None:
        hooks = torch._C._autograd._top_saved_tensors_default_hooks(False)
        ran.append(
            (threading.current_thread(), torch._C._is_multithreading_enabled(), hooks is None)
        )

    pool.start(records, "first").join(60)
    pool.start(leaves, "leaves").join(60)
    pool.start(records, "next").join(60)
    pool.close(60)
    assert pool.started == 2 and ran[0][0] is not ran[1][0]
    assert ran[1][1:] == (True, True)
