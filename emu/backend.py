"""Runs the ranks of an emulated world as runners of this process (threads, or greenlets)."""

from __future__ import annotations

import functools
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

import torch

from hccl_py.core.config import Config
from hccl_py.core.constants import DEFAULT_WORLD_SIZE
from hccl_py.core.errors import (
    HcclError,
    HcclPeerError,
    HcclRunnerStartError,
    HcclTimeoutError,
    WorldError,
)
from hccl_py.core.report import PACKAGE_DIR
from hccl_py.kernel.context import RankContext, set_rank_context
from hccl_py.server.protocol import Backend

from .exit_guard import guarded
from .runners import FEWER_THREADS
from .world import EmuWorld

#: Seconds the other ranks get to reach an hccl_py call (which stops them) after one rank
#: failed; then they are stopped where they are and their place is reported.
GRACE_SECONDS = 0.5
#: Seconds ``hp.run`` waits, after Ctrl-C, for the ranks it stopped to end.
INTERRUPT_WAIT_S = 2.0
#: How often the main thread looks at the ranks, and how long it waits for a stopped rank.
JOIN_STEP_S = 0.05
STOP_WAIT_S = 0.5
#: Frames of these files are hccl_py's or the thread machinery's, not the rank's own code.
_NOT_USER = (
    PACKAGE_DIR,
    os.path.dirname(os.path.abspath(__file__)) + os.sep,
    os.path.abspath(threading.__file__),
)
#: How many innermost frames of a stuck rank's stack its report shows.
STACK_FRAMES = 6


class EmuBackend(Backend):
    """N ranks in one process, each a runner with its own memory and rank context."""

    name = "emu"

    def run(
        self, fn: Callable[..., Any], args: tuple, world_size: int | None, config: Config
    ) -> list[Any]:
        n = DEFAULT_WORLD_SIZE if world_size is None else world_size  # hp.run checked it
        world = EmuWorld(n, config)
        results: list[Any] = [None] * n
        failures: dict[int, BaseException] = {}

        per_rank = [own_copy(args) for _ in range(n)]

        started: list[Any] = []  # the runners' handles, in rank order

        def body(rank: int) -> None:
            # a later rank's runner could not start, or a rank was stopped in its own code (past
            # the run's timeout, or its grace after a failure) before this rank's turn came: end
            # without running. After other failures the rank runs, and its own report (the same
            # mistake, most often) joins theirs.
            if len(started) < n or isinstance(world.blocker.error, _Stopped):
                world.blocker.leave()
                return
            set_rank_context(RankContext(rank, n, config, world, world.blocker))
            try:
                with world.host_scope(rank), guarded():
                    results[rank] = fn(*per_rank[rank])
                world.group_log.ended(rank)
            except BaseException as exc:  # noqa: BLE001 - collected and re-raised as WorldError
                exc.hccl_rank = rank
                exc.hccl_traceback = traceback.format_exc()
                failures.setdefault(rank, exc)
                world.blocker.fail(exc)
            finally:
                set_rank_context(None)
                world.rank_returned(rank)
                world.blocker.leave()

        try:
            for r in range(n):
                started.append(world.blocker.spawn(functools.partial(body, r), f"rank{r}", (r,), r))
        except HcclRunnerStartError as exc:
            _end_unrun(world, started)
            raise _start_refused(n, len(started), exc.refusal) from None
        try:
            world.blocker.begin()
        except HcclRunnerStartError:  # greenlet runners: their one thread did not start
            world.close()
            raise
        try:
            _join(started, world, failures, config.timeout)
        except KeyboardInterrupt as exc:
            # stop every rank now: blocked ones raise, the running one too
            world.blocker.fail(exc)
            runner = world.blocker.running()
            if runner is not None and runner.thread is not None:
                runner.thread.interrupt(_Stopped)
            # the ranks stop at their next hccl_py call: an interpreter that exits while the
            # greenlet runners' thread still runs one aborts ("terminate called ...")
            deadline = time.monotonic() + INTERRUPT_WAIT_S
            for thread in [*started, world.blocker.thread]:
                if thread is not None:
                    thread.join(max(0.0, deadline - time.monotonic()))
            raise
        finally:
            world.close()
        if failures:
            raise WorldError(failures, n)
        return results


def own_copy(value: Any, memo: dict[int, torch.Tensor] | None = None) -> Any:
    """One rank's copy of ``hp.run``'s ``args``: every tensor cloned, as a gloo rank unpickles its own.

    Tensors inside tuples, lists and dicts are cloned (the same tensor twice
    stays one tensor; a container without tensors is not copied); other objects are shared, as threads of one process
    share them (an Event that coordinates ranks keeps working). A tensor that
    two ranks still share is reported when one of them writes it
    (:mod:`hccl_py.sanitizer.sharing`).
    """
    memo = {} if memo is None else memo
    if isinstance(value, torch.Tensor):
        if id(value) not in memo:
            memo[id(value)] = value.clone()
        return memo[id(value)]
    if type(value) in (list, tuple):
        items = [own_copy(v, memo) for v in value]
        same = all(a is b for a, b in zip(items, value, strict=True))
        return value if same else type(value)(items)
    if type(value) is dict:
        items = {k: own_copy(v, memo) for k, v in value.items()}
        return value if all(items[k] is v for k, v in value.items()) else items
    return value


def _end_unrun(world: EmuWorld, started: list[Any]) -> None:
    """The ranks' runners could not all start: hand the baton through the ``started`` ones,
    which end without running the function, wait for each, and close the world, so that no
    thread of the run is left.

    Their threads end with their runners instead of waiting for more work: where the OS ran
    out of memory maps for thread stacks, Python's own allocations fail too until they ended.
    """
    if world.blocker.pool is not None:
        world.blocker.pool.fresh = lambda: False
    try:
        if started:
            world.blocker.begin()
            for runner in started:
                runner.join()
    finally:
        world.close()


def _start_refused(n: int, started: int, refusal: str) -> HcclRunnerStartError:
    """The error of a run whose rank runners the OS did not let start (one thread each)."""
    error = HcclRunnerStartError(
        f"hp.run(world_size={n}) on the emulator started {started} of its {n} rank runners, "
        f"then the OS refused to start another thread ({refusal}); the started ones were "
        f"stopped before running any code. {FEWER_THREADS}"
    )
    error.refusal = refusal
    return error


class _Stopped(BaseException):
    """Raised inside a stuck rank's thread to end it (not an Exception: user code cannot catch it)."""


def _where(thread: Any) -> str:
    """The innermost frames of ``thread``'s Python stack, for a report."""
    frame = sys._current_frames().get(thread.ident or -1)
    stack = traceback.extract_stack(frame) if frame is not None else []
    own = [f for f in stack if not f.filename.startswith(_NOT_USER)]
    if not own:
        return "  (no Python stack of the rank's own code)"
    return "".join(traceback.format_list(own[-STACK_FRAMES:])).rstrip()


def _stop_running(
    world: EmuWorld, failures: dict[int, BaseException], why: str, cls: type[HcclError]
) -> None:
    """Report the runner that holds the baton (with its stack) as ``cls`` and end it."""
    runner = world.blocker.running()
    if runner is None or runner.thread is None:
        return
    failures.setdefault(
        runner.rank,
        cls(
            f"rank {runner.rank} {why}; it is not inside an hccl_py call but here:\n"
            f"{_where(runner.thread)}\nState of the world:\n{world.blocker.state()}",
            rank=runner.rank,
        ),
    )
    # A loop of Python code stops at its next bytecode; a long C call (time.sleep)
    # stops when it returns: the thread is a daemon and cannot hold the process open.
    # Sent while this thread holds the world lock, so that the runner holds none of hccl_py's
    # locks when it lands (or it lands as the runner takes the lock, which lets go of it):
    # a runner that polls hccl_py calls in a loop is inside one most of the time.
    held = world.blocker.lock.acquire(timeout=STOP_WAIT_S)
    try:
        runner.thread.interrupt(_Stopped)
    finally:
        if held:
            world.blocker.lock.release()
    runner.thread.join(STOP_WAIT_S)


def _join(
    threads: list[threading.Thread],
    world: EmuWorld,
    failures: dict[int, BaseException],
    timeout: float,
) -> None:
    """Wait for every rank, and stop a runner that holds the baton too long in its own code.

    One runner runs at a time, so one that neither blocks nor polls for
    ``timeout`` seconds keeps every other rank waiting: it is stopped and
    reported with its stack (a pure-Python loop, a sleep). Once a rank failed,
    each runner gets :data:`GRACE_SECONDS` to reach an hccl_py call (which stops it).
    """
    stopped: set[object] = set()
    first = 0  # threads before it have ended (an ended thread stays ended): one pass in all
    while True:
        while first < len(threads) and not threads[first].is_alive():
            first += 1
        if first == len(threads):
            return
        failed = world.blocker.error is not None
        idle = world.blocker.idle_for()
        runner = world.blocker.running()
        if (
            idle is not None
            and idle > (GRACE_SECONDS if failed else timeout)
            and runner not in stopped
        ):
            stopped.add(runner)
            if failed:
                why = (
                    f"was still running its own code {GRACE_SECONDS:g} s after another rank failed"
                )
                _stop_running(world, failures, why, HcclPeerError)
            else:
                why = (
                    f"ran its own code for {timeout:g} s (the run's timeout) without an hccl_py "
                    "call that blocks, while every other rank waited for it"
                )
                _stop_running(world, failures, why, HcclTimeoutError)
        threads[first].join(JOIN_STEP_S)
