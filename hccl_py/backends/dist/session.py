"""This process's place in a gloo or HCCL world: store, process groups, liveness, outcomes.

One :class:`Session` per process joins the world once (rendezvous, default process group,
device) and serves every later ``hp.run`` call of the process. A watchdog thread bumps this
rank's heartbeat and watches the store's abort key: when another rank fails, its waits raise.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

import torch.distributed as dist

from ...core.config import Config
from ...core.errors import (
    ForgedValueError,
    HcclDeadlockError,
    HcclPeerError,
    HcclTimeoutError,
    WorldError,
)
from ...kernel.context import RankContext, current_core_context, set_rank_context
from ...launcher import exchange, torch_env, wire
from ...launcher import store as kv
from ...launcher.liveness import (
    GRACE_S,
    HEARTBEAT_S,
    Peers,
    RankDiedError,
    dump_stacks_on_request,
    end_own_group,
    join_file_store,
    leave_reparented,
    watch_parent,
)
from ...launcher.spec import RankSpec
from ...launcher.supervise import outcome_of
from ...server.blocking import Blocker
from .. import get_backend
from .session_backend import DistBackend
from .waits import WaitBoard, Waiting, settle_abandoned, watch_work

#: How often a thread that waits for its peers (their descriptors, a framework
#: collective's arguments) looks for a peer that will never come, and for an abort.
LOOK_S = 0.05

#: Seconds the store and the default process group wait for the other ranks to join.
JOIN_TIMEOUT_S = 300.0
#: Waiting for the other ranks' outcomes ends when they report or die, not after a time.
FOREVER_S = 1e9
#: Seconds a leaving rank waits for the calls it abandoned to fail (:func:`.settle_abandoned`).
SETTLE_S = 5.0


class _GiveUp(Exception):  # noqa: N818 - internal control flow
    """Internal: stop waiting for outcomes (ranks died, or the job failed long enough ago)."""


class Session:
    """Membership of this process in the world; reused by every ``hp.run`` of the process."""

    def __init__(self, spec: RankSpec, backend: DistBackend, timeout: float) -> None:
        self.spec = spec
        self.where = f"{spec.host}:{spec.port}"  # the store's address, for reports
        self.backend = backend
        self.timeout = max(timeout, JOIN_TIMEOUT_S)
        watch_parent(spec.rank)  # before the store: a rank stuck joining it must end too
        self._base = _open_store(spec, self.timeout)
        #: hccl_py's keys; one connection, shared by every thread of the process.
        self.store = kv.scoped(self._base, kv.PREFIX)
        if spec.host_store:
            kv.mark_run(self.store, spec.world_size)
        elif not spec.store_path and spec.launcher != "torchrun":
            kv.check_run(self.store, spec.world_size, self.where)
        self.rank = (
            spec.rank if spec.rank is not None else int(self.store.add(kv.RANK_COUNTER, 1)) - 1
        )
        self.world_size = spec.world_size
        dump_stacks_on_request(self.rank)
        _report_world_errors_once()
        self.device = backend.bind_device(spec.local_rank)
        self.thread_init = backend.thread_binder(self.device)
        self._owns_pg = not dist.is_initialized()
        if self._owns_pg:
            torch_env.quiet_flight_recorder()
            torch_env.rank_threads(torch_env.local_ranks() or spec.world_size)
            torch_env.loopback_gloo(spec)
            dist.init_process_group(
                backend.pg_backend,
                store=kv.scoped(self._base, "pg/"),
                rank=self.rank,
                world_size=self.world_size,
                timeout=kv.seconds(backend.pg_timeout(self.timeout)),
            )
        elif (dist.get_rank(), dist.get_world_size()) != (self.rank, self.world_size):
            raise RuntimeError(
                f"torch.distributed is already initialised as rank {dist.get_rank()} of "
                f"{dist.get_world_size()}, but the launcher says rank {self.rank} of {self.world_size}"
            )
        self.store.set(kv.pid_key(self.rank), f"{socket.gethostname()}|{os.getpid()}")
        #: Liveness of the other ranks' processes.
        self.peers = Peers(self.store)
        #: Which collective each rank waits in, to report waits that deadlock.
        self.board = WaitBoard(self.store, self.rank, self.world_size)
        self.runs = 0
        #: The running run's server (its blocker fails on an abort; its kernel threads are
        #: watched for stalls), if any.
        self.server: Any = None
        self.abort: BaseException | None = None
        self._closed = False
        self._stop = threading.Event()
        self._watchdog = threading.Thread(target=self._watch, name="hccl_py-watchdog", daemon=True)
        self._watchdog.start()

    def await_peers(
        self, work: dist.Work, ranks: tuple[int, ...], op: str, domain: str, timeout: float,
        returned: Callable[[int], bool],
    ) -> None:  # fmt: skip
        """Block until the process-group call ``work`` of ``op`` on ``domain`` finished; every
        :data:`LOOK_S` seconds stop on an abort, a peer that ``returned`` without the call, a
        deadlock of the waits (:class:`.waits.WaitBoard`), or the timeout."""
        deadline, where = time.monotonic() + timeout, f"domain {domain}"

        def no_one_left() -> None:
            left = [r for r in ranks if r != self.rank and returned(r)]
            if left:
                self.check_abort(wait=0.2)  # it failed: that is the report
                raise HcclDeadlockError(
                    f"rank {left[0]} returned from its function without calling {op}, which "
                    f"rank {self.rank} called in {where}: it would wait forever"
                )

        def look() -> None:
            self.check_abort()
            no_one_left()
            if time.monotonic() >= deadline:
                raise HcclTimeoutError(
                    f"timed out after {timeout:g} s: rank {self.rank} waits in {op} for the "
                    f"other ranks of {where} to call it{self.board.absent(domain, ranks)}"
                )

        # the process group failed because that peer's process ended: name it
        waiting = Waiting(self.board, op, domain, ranks, core=current_core_context() is not None)
        watch_work(work, LOOK_S, look, no_one_left, waiting, self.backend.device_async)

    def check_abort(self, wait: float | None = None) -> None:
        """Raise :class:`HcclPeerError` if another rank failed; with ``wait`` (seconds), ask the
        store instead of relying on the watchdog, and wait that long for a report to arrive."""
        deadline = time.monotonic() + (wait or 0.0)
        while wait is not None and self.abort is None:
            if self.store.check([kv.ABORT]):
                self._aborted(exchange.read_abort(self.store))
            elif time.monotonic() >= deadline:
                break
            else:
                time.sleep(0.02)
        exc = self.abort
        if isinstance(exc, ForgedValueError):
            raise ForgedValueError(exc.reason, rank=self.rank)
        if exc is not None and getattr(exc, "hccl_rank", None) != self.rank:
            raise HcclPeerError(
                f"stopped because rank {exc.hccl_rank} failed: {type(exc).__name__}: {exc}",
                rank=self.rank,
            )

    def _watch(self) -> None:
        """Heartbeat and abort watch; a child of hp.run exits when its parent is gone."""
        parent = os.getppid()
        while not self._stop.wait(HEARTBEAT_S / 2):
            if self.spec.launcher == "spawn" and os.getppid() != parent:
                leave_reparented(self.rank)
            try:
                server = self.server
                if server is not None:
                    server.stalls.stop_stuck()
                self.store.add(kv.heartbeat_key(self.rank), 1)
                if self.abort is None and self.store.check([kv.ABORT]):
                    self._aborted(exchange.read_abort(self.store))
            except Exception:  # noqa: BLE001 - the store's host went away; the launcher acts
                continue

    def _aborted(self, exc: BaseException) -> None:
        self.abort = exc
        server = self.server
        if server is not None and getattr(exc, "hccl_rank", None) != self.rank:
            server.blocker.fail(exc)

    # ------------------------------------------------------------------ runs
    def run(self, fn: Callable[..., Any], args: tuple, config: Config, gather: bool) -> Any:
        """Run ``fn`` as this rank; publish the outcome; with ``gather``, return every rank's.

        Without ``gather`` (a child of hp.run) returns whether ``fn`` succeeded.
        """
        run = self.runs
        self.runs += 1
        self.board.start_run(run)
        blocker = Blocker(config.timeout)
        server = self.backend.make_server(self, run, config, blocker)
        ctx = RankContext(
            self.rank,
            self.world_size,
            config,
            server,
            blocker,
            self.device,
            thread_init=self.thread_init,
        )
        ok, failed = False, None
        key = kv.result_key(run, self.rank)
        self.store.set(kv.running_key(self.rank), str(run).encode())
        blocker.enter(1)
        self.server = server
        if self.abort is not None:
            self._aborted(self.abort)
        set_rank_context(ctx)
        try:
            server.start(ctx.world_group)
            value = fn(*args)
            forged = (
                self.abort
                if isinstance(self.abort, ForgedValueError)
                else exchange.forged_abort(self.store)
            )
            if forged is not None:
                raise ForgedValueError(forged.reason, rank=self.rank)
            outcome = exchange.encode_result(value, self.rank, key, self.store)
            ok = True
        except BaseException as exc:  # noqa: BLE001 - reported to every rank
            failed = exc
            exc.hccl_traceback = traceback.format_exc()
            outcome = exchange.encode_failure(exc, self.rank, key)
            with contextlib.suppress(RuntimeError):  # a store gone with the job: close anyway
                self.store.set(kv.failed_key(self.rank), b"1")
                if not isinstance(exc, HcclPeerError):
                    exchange.report_abort(self.store, exc, self.rank)
        finally:
            set_rank_context(None)
            self.server = None
            blocker.leave()
            # closed whatever happened: its domain threads and process groups go
            with kv.gone_store(self.rank, self.where), contextlib.closing(server):
                server.rank_returned(self.rank)
        if isinstance(failed, HcclPeerError):  # its own finding may have come after the stop
            own = next(filter(None, (q.own_report() for q in server.queues.values())), None)
            outcome = outcome if own is None else exchange.encode_failure(own, self.rank, key)
        with kv.gone_store(self.rank, self.where):
            self.store.set(key, outcome)
            self.store.delete_key(kv.running_key(self.rank))
        if isinstance(failed, KeyboardInterrupt):  # reported; Ctrl-C goes on, not a WorldError
            raise KeyboardInterrupt
        if not gather:
            return ok and exchange.decode(key, outcome)[0] == "ok"
        try:  # waiting, it asks the store how the missing ranks are: its connection may go too
            with kv.gone_store(self.rank, self.where):
                return self._collect(run, outcome)
        finally:
            server.forget()

    def _collect(self, run: int, outcome: bytes) -> list[Any]:
        """Every rank's outcome of run ``run`` (this rank's: ``outcome``): the list of values,
        or a WorldError."""
        n = self.world_size
        watch = _Liveness(self, lambda r: kv.result_key(run, r), outcome)
        with contextlib.suppress(_GiveUp):
            kv.wait_keys(
                self.store,
                [kv.result_key(run, r) for r in range(n)],
                FOREVER_S,
                lambda missing: f"ranks did not report their outcome: {missing}",
                watch.check,
            )
        outcomes = [outcome_of(self.store, run, r, None, watch.dead.get(r)) for r in range(n)]
        self.store.set(kv.read_key(run, self.rank), b"1")
        if self.spec.host_store:
            self._wait_readers(run)
        failures = {r: value for r, (kind, value) in enumerate(outcomes) if kind == "err"}
        if failures:
            error = WorldError(failures, n, me=self.rank)
            exchange.record_for_torchrun(error)
            raise error
        return [value for _, value in outcomes]

    def _wait_readers(self, run: int) -> None:
        """The store lives in this process: keep it up until every rank read the outcomes."""
        with contextlib.suppress(_GiveUp, Exception):  # best effort: the others may be gone
            kv.wait_keys(
                self.store,
                [kv.read_key(run, r) for r in range(self.world_size)],
                FOREVER_S,
                lambda missing: f"ranks did not collect the outcomes: {missing}",
                _Liveness(self, lambda r: kv.read_key(run, r), b"1").check,
            )

    def close(self) -> None:
        """Leave the world: stop the watchdog, say so in the store, destroy the default PG."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        self._watchdog.join(timeout=2.0)
        with contextlib.suppress(Exception):  # the store's host may be gone already
            self.store.set(kv.left_key(self.rank), b"1")
        settle_abandoned(SETTLE_S)
        if self._owns_pg and dist.is_initialized():
            with contextlib.suppress(Exception):  # nothing left to do at exit
                dist.destroy_process_group()


def _open_store(spec: RankSpec, timeout: float) -> Any:
    """The store of ``spec``'s world: a file, hosted here (on one address), or joined."""
    if spec.store_path:
        return join_file_store(spec.store_path, spec.rank)
    if spec.host_store:
        return kv.host_store(kv.listen_address(spec.host), spec.port, timeout)[0]
    if spec.launcher == "torchrun":  # torchrun's own store: not ours to check
        return kv.connect(spec.host, spec.port, is_master=False, timeout=timeout)
    return kv.join_store(spec.host, spec.port, timeout)


class _Liveness:
    """Decides, while this rank waits for every rank's key, which missing ranks are dead.

    A rank is dead when the launcher reported it (a :class:`RankDiedError` as
    the abort reason) or :meth:`Peers.gone` says so. Raises :class:`_GiveUp`
    once every missing rank is dead, or :data:`GRACE_S` after the job failed.
    """

    def __init__(self, session: Session, key: Callable[[int], str], mine: bytes) -> None:
        #: ``mine``: this rank's value at its key, published again if another process deleted it
        #: (the store lets anyone in): the ranks would otherwise wait for it forever.
        self.session, self.key, self.mine = session, key, mine
        self.dead: dict[int, str] = {}
        #: When to look at the missing ranks next, and when the job failed (None: it has not).
        self.next_look, self.aborted_at = 0.0, None

    def check(self) -> None:
        """Called between polls of the store."""
        now = time.monotonic()
        if now < self.next_look:
            return
        self.next_look = now + HEARTBEAT_S / 5
        store = self.session.store
        missing = [r for r in range(self.session.world_size) if not store.check([self.key(r)])]
        if self.session.rank in missing:
            store.set(self.key(self.session.rank), self.mine)
            missing.remove(self.session.rank)
        aborted = self.session.abort
        if isinstance(aborted, RankDiedError):
            self.dead.setdefault(aborted.hccl_rank, aborted.how)
        for r in missing:
            how = self.dead.get(r) or self.session.peers.gone(r)
            if how is not None:
                self.dead[r] = how
        if aborted is not None:
            self.aborted_at = self.aborted_at or now
            if now - self.aborted_at > GRACE_S:
                raise _GiveUp
        if all(r in self.dead for r in missing):
            raise _GiveUp


_SESSION: Session | None = None
_SESSION_LOCK = threading.Lock()


def session_for(spec: RankSpec, backend: DistBackend, timeout: float) -> Session:
    """This process's session, created at the first ``hp.run`` under a launcher."""
    global _SESSION
    with _SESSION_LOCK:
        if _SESSION is None:
            _SESSION = Session(spec, backend, timeout)
            atexit.register(_SESSION.close)
        elif _SESSION.backend.name != backend.name:
            raise RuntimeError(
                f"this process joined the world with backend {_SESSION.backend.name!r}; "
                f"it cannot run backend {backend.name!r} too"
            )
        return _SESSION


def _unpicklable(exc: BaseException) -> Callable[[], None]:
    def fail() -> None:
        raise RuntimeError(
            f"this rank's process could not load the function given to hp.run: "
            f"{type(exc).__name__}: {exc}"
        ) from exc

    return fail


def _report_world_errors_once() -> None:
    """Print a rank process's uncaught WorldError as its message, without hp.run's stack.

    Every process of a job raises the WorldError; its message already carries the
    root cause's traceback in that rank's process (and one line elsewhere), so the
    job's output holds each traceback once.
    """
    previous = sys.excepthook
    if getattr(previous, "hccl_py", False):
        return

    def hook(kind: type, value: BaseException, tb: Any) -> None:
        me = _SESSION.rank if _SESSION is not None else None
        if isinstance(value, WorldError) and me is not None:
            print(f"hccl_py: rank {me}: {kind.__name__}: {value}", file=sys.stderr)
        else:
            previous(kind, value, tb)

    hook.hccl_py = True
    sys.excepthook = hook


def spawned_rank(
    spec: RankSpec,
    backend_name: str,
    payload: bytes,
    config: Config,
    env: dict[str, str],
    sys_path: list[str],
) -> None:
    """Entry point of a process that hp.run started: join, run ``fn``, report, exit (taking
    with it what ``fn`` started and left running: the rank leads a session of its own)."""
    with contextlib.suppress(OSError):
        os.setsid()
    os.environ.clear()
    os.environ.update(env)
    sys.path[:] = sys_path

    try:
        fn, args = wire.loads(payload)
    except Exception as exc:  # noqa: BLE001 - reported as this rank's failure
        fn, args = _unpicklable(exc), ()
    session = Session(spec, get_backend(backend_name), config.timeout)
    try:
        ok = session.run(fn, args, config, gather=False)
    finally:
        session.close()
        sys.stdout.flush()
        sys.stderr.flush()
        end_own_group()
    sys.exit(0 if ok else 1)
