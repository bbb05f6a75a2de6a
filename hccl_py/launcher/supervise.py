"""Supervising rank processes: wait for them, stop them, read what each reported."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from . import exchange, sealed
from . import store as kv
from .liveness import GRACE_S, HEARTBEAT_S, ask_stack, exit_text, kill_group_members, rank_died

#: Seconds a killed process gets between SIGTERM and SIGKILL.
KILL_WAIT_S = 2.0
#: Seconds to wait for the rest of a dead rank's error output before quoting its last line.
OUTPUT_WAIT_S = 5.0


class Child:
    """One supervised rank process: a ``subprocess.Popen`` or a ``multiprocessing.Process``.

    ``session``: the process leads a session of its own (``start_new_session``, or
    ``os.setsid`` in a rank forked by the runner), so that stopping it stops its whole
    process group; by default a Popen does and a multiprocessing Process does not.
    """

    def __init__(self, rank: int, proc: Any, session: bool | None = None) -> None:
        self.rank = rank
        self.proc = proc
        self.session = isinstance(proc, subprocess.Popen) if session is None else session
        #: Why the supervisor stopped it (and where it was), if it did.
        self.stopped: str | None = None
        #: Its last non-blank line of error output, and set once that output ended (when the
        #: supervisor reads its output: hccl_py's runner).
        self.last_line = ""
        self.output_done: threading.Event | None = None
        #: Whether it exited with code 0 inside hp.run, before reporting its outcome.
        self.ended_in_run = False
        #: Whether what was left of its process group was killed after it ended.
        self.group_ended = False

    def how_it_ended(self, code: int) -> str:
        """``exited with code 1``, with the last line of its error output when there is one."""
        if self.output_done is not None:
            self.output_done.wait(OUTPUT_WAIT_S)
        said = f" (its last output: {self.last_line})" if self.last_line else ""
        return self.exit_text(code) + said

    def ended_text(self) -> str | None:
        """How it ended when it left a run unfinished with code 0, else None."""
        return self.exit_text(0) if self.ended_in_run else None

    def exit_text(self, code: int) -> str:
        """How it ended, from its exit code (and whether it left a run unfinished)."""
        if self.ended_in_run:
            return f"{exit_text(code)} inside hp.run"
        return exit_text(code)

    def poll(self) -> int | None:
        """Its exit code, None while it runs. Once it has ended, what is left of its process
        group (its session) is killed: a rank that a signal ended could not do it itself."""
        code = self.proc.poll() if isinstance(self.proc, subprocess.Popen) else self.proc.exitcode
        if code is not None and self.session and not self.group_ended:
            self.group_ended = True
            kill_group_members(self.proc.pid)
        return code

    def signal(self, sig: int) -> None:
        if self.poll() is not None:
            return
        try:
            if self.session:
                try:
                    os.killpg(self.proc.pid, sig)
                    return
                except ProcessLookupError:  # a forked rank that has not called os.setsid yet
                    pass
            os.kill(self.proc.pid, sig)
        except ProcessLookupError:
            pass


def supervise(
    children: Sequence[Child],
    store: Any,
    say: Callable[[str], None],
    timeout: float | None = None,
    stacks: str | None = None,
    beats: bool = False,
) -> dict[int, int]:
    """Wait for every child; once one fails, give the rest :data:`GRACE_S`, then kill them.

    A child that dies without reporting a failure gets one written to the
    store's abort key on its behalf, so the other ranks stop at once. With
    ``timeout``, children still running ``timeout`` seconds after one returned
    are stopped too (so ``timeout`` bounds the run). A child stopped by either
    rule gets ``stopped``: why, and its Python stacks when ``stacks`` names the
    folder of :data:`~.liveness.STACKS_ENV`. With ``beats``, the running children's
    heartbeats are written too (:func:`beat`). Returns rank -> exit code.
    """
    codes: dict[int, int] = {}
    failed_at: float | None = None
    first_done: tuple[float, int] | None = None
    next_beat = 0.0
    try:
        while len(codes) < len(children):
            if beats and time.monotonic() >= next_beat:
                next_beat = time.monotonic() + HEARTBEAT_S
                beat(children, codes, store)
            for child in children:
                code = child.poll() if child.rank not in codes else None
                if code is None:
                    continue
                codes[child.rank] = code
                child.ended_in_run = code == 0 and has_key(store, kv.running_key(child.rank))
                if code == 0 and not child.ended_in_run and first_done is None:
                    first_done = (time.monotonic(), child.rank)
                if (code != 0 or child.ended_in_run) and failed_at is None:
                    failed_at = time.monotonic()
                    say(f"rank {child.rank} {child.exit_text(code)}; stopping the other ranks")
                    if not has_key(store, kv.failed_key(child.rank)):  # it died silently
                        died = rank_died(child.rank, child.how_it_ended(code))
                        with contextlib.suppress(RuntimeError):
                            exchange.report_abort(store, died, child.rank)
            if failed_at is None and has_key(store, kv.ABORT):
                failed_at = time.monotonic()
            running = [c for c in children if c.rank not in codes]
            overdue = (
                failed_at is None
                and first_done is not None
                and timeout is not None
                and time.monotonic() - first_done[0] > timeout
            )
            if overdue and running:
                why = (
                    f"was still running {timeout:g} s after rank {first_done[1]} returned "
                    "(the run's timeout) and was stopped"
                )
                _note_stopped(running, why, stacks)
                failed_at = time.monotonic() - GRACE_S  # stop them now
            if failed_at is not None and time.monotonic() - failed_at > GRACE_S:
                _note_stopped(
                    running, f"was still running {GRACE_S:g} s after another rank failed", stacks
                )
                stop(running)
            time.sleep(0.02)
    finally:
        stop([c for c in children if c.poll() is None])
    return codes


@contextlib.contextmanager
def sigterm_exits() -> Iterator[None]:
    """While the block runs in the main thread, SIGTERM raises ``SystemExit(143)`` there
    instead of ending the process at once, so that the block unwinds (its ranks stopped, its
    files removed) and the process then exits as SIGTERM would have it. A handler the program
    installed itself is left alone."""
    main = threading.current_thread() is threading.main_thread()
    if not main or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return

    def exit_now(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signal.SIGTERM)

    signal.signal(signal.SIGTERM, exit_now)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _note_stopped(children: Sequence[Child], why: str, stacks: str | None) -> None:
    """Record on each child why it is being stopped, with its stacks when it can give them."""
    for child in children:
        if child.stopped is None:
            where = ask_stack(child.proc.pid, stacks, child.rank) if stacks else ""
            child.stopped = f"{why}\n{where}" if where else why


def beat(children: Sequence[Child], codes: dict[int, int], store: Any) -> None:
    """Write the host heartbeat of each child whose process runs (not in ``codes``).

    The ranks of other hosts judge a rank by its heartbeats (:class:`~.liveness.Peers`):
    the one its own thread writes stands still while its code holds the interpreter (one
    long C call), which made a live, busy rank "stopped responding". This one is written
    as long as its process runs, with ``set``: a key that another process set to
    anything cannot make the write fail and close this store connection.
    """
    now = str(time.monotonic_ns()).encode()
    for child in children:
        if child.rank not in codes:
            with contextlib.suppress(RuntimeError):  # the store's host is gone: nothing to tell
                store.set(kv.host_heartbeat_key(child.rank), now)


def has_key(store: Any, key: str) -> bool:
    """Whether ``key`` exists; False when the store is unreachable (another host's runner left)."""
    try:
        return store.check([key])
    except RuntimeError:
        return False


def stop(children: Sequence[Child]) -> None:
    """SIGTERM, then SIGKILL whoever is still alive after :data:`KILL_WAIT_S`."""
    for child in children:
        child.signal(signal.SIGTERM)
    deadline = time.monotonic() + KILL_WAIT_S
    while any(c.poll() is None for c in children) and time.monotonic() < deadline:
        time.sleep(0.02)
    for child in children:
        child.signal(signal.SIGKILL)
    for child in children:
        if isinstance(child.proc, subprocess.Popen):
            child.proc.wait()
        else:
            child.proc.join()


def outcome_of(
    store: Any, run: int, rank: int, code: int | None, why: str | None = None
) -> tuple[str, Any]:
    """A rank's reported outcome, or a :class:`RankDiedError` saying why there is none.

    A forged outcome becomes the rank's :class:`~hccl_py.core.errors.ForgedValueError`.
    ``why`` (how the rank ended, if known) defaults to a text from its exit code.
    """
    key = kv.result_key(run, rank)
    if store.check([key]):
        try:
            status, value = exchange.decode(key, store.get(key))
        except sealed.ForgedValueError as exc:  # the rank's outcome is unknown: say why
            status, value = "err", exc
        if status == "err" and not hasattr(value, "hccl_rank"):
            value.hccl_rank = rank
        return status, value
    if why is None:
        why = "did not finish" if code is None else exit_text(code)
    return "err", rank_died(rank, why)
