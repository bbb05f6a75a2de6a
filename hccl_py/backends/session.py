"""This process's place in a gloo or HCCL world: store, process groups, liveness, outcomes.

One :class:`Session` per process joins the world once (rendezvous, default
process group, device) and serves every later ``hp.run`` call of the process.
A watchdog thread bumps this rank's heartbeat and watches the store's abort
key: when another rank fails, the waits of this rank raise at once.
"""

from __future__ import annotations

import atexit
import os
import pickle
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch.distributed as dist

from ..blocking import Blocker
from ..context import Config, RankContext, set_rank_context
from ..errors import HcclPeerError, WorldError
from ..launcher import GRACE_S, HEARTBEAT_S, STALE_S, RankDiedError, RankSpec, outcome_of
from . import store as kv

if TYPE_CHECKING:
    from .dist import DistBackend

#: Seconds the store and the default process group wait for the other ranks to join.
JOIN_TIMEOUT_S = 300.0
#: Consecutive store failures after which a child of hp.run concludes its parent is gone.
ORPHAN_FAILURES = 4


class _GiveUp(Exception):  # noqa: N818 - internal control flow
    """Internal: stop waiting for outcomes (ranks died, or the job failed long enough ago)."""


class Session:
    """Membership of this process in the world; reused by every ``hp.run`` of the process."""

    def __init__(self, spec: RankSpec, backend: DistBackend, timeout: float) -> None:
        self.spec = spec
        self.backend = backend
        self.timeout = max(timeout, JOIN_TIMEOUT_S)
        self._base = kv.connect(
            spec.host, spec.port, is_master=spec.host_store, timeout=self.timeout
        )
        self.store = kv.scoped(self._base, kv.PREFIX)
        self.rank = (
            spec.rank if spec.rank is not None else int(self.store.add(kv.RANK_COUNTER, 1)) - 1
        )
        self.world_size = spec.world_size
        self.device = backend.bind_device(spec.local_rank)
        self.thread_init = backend.thread_binder(self.device)
        self._owns_pg = not dist.is_initialized()
        if self._owns_pg:
            dist.init_process_group(
                backend.pg_backend,
                store=kv.scoped(self._base, "pg/"),
                rank=self.rank,
                world_size=self.world_size,
                timeout=kv.seconds(self.timeout),
            )
        elif (dist.get_rank(), dist.get_world_size()) != (self.rank, self.world_size):
            raise RuntimeError(
                f"torch.distributed is already initialised as rank {dist.get_rank()} of "
                f"{dist.get_world_size()}, but the launcher says rank {self.rank} of {self.world_size}"
            )
        self.store.set(kv.pid_key(self.rank), f"{socket.gethostname()}|{os.getpid()}")
        self.runs = 0
        self.blocker: Blocker | None = None
        self.abort: BaseException | None = None
        self._closed = False
        self._stop = threading.Event()
        self._watchdog = threading.Thread(target=self._watch, name="hccl_py-watchdog", daemon=True)
        self._watchdog.start()

    # ------------------------------------------------------------ connections
    def connect(self) -> Any:
        """A new connection to the store (for a thread that polls it)."""
        client = kv.connect(self.spec.host, self.spec.port, is_master=False, timeout=self.timeout)
        return kv.scoped(client, kv.PREFIX)

    def check_abort(self) -> None:
        """Raise :class:`HcclPeerError` if another rank failed."""
        exc = self.abort
        if exc is not None and getattr(exc, "hccl_rank", None) != self.rank:
            raise HcclPeerError(
                f"stopped because rank {exc.hccl_rank} failed: {type(exc).__name__}: {exc}",
                rank=self.rank,
            )

    def _watch(self) -> None:
        """Heartbeat and abort watch; a child of hp.run exits when its parent is gone."""
        store = self.connect()
        failures = 0
        while not self._stop.wait(HEARTBEAT_S / 2):
            try:
                store.add(kv.heartbeat_key(self.rank), 1)
                if self.abort is None and store.check([kv.ABORT]):
                    self._aborted(kv.decode(store.get(kv.ABORT))[1])
                failures = 0
            except Exception:  # noqa: BLE001 - the store's host went away
                failures += 1
                if self.spec.launcher == "spawn" and failures >= ORPHAN_FAILURES:
                    print(f"hccl_py: rank {self.rank}: lost the parent process; exiting", file=sys.stderr)
                    os._exit(1)

    def _aborted(self, exc: BaseException) -> None:
        self.abort = exc
        blocker = self.blocker
        if blocker is not None and getattr(exc, "hccl_rank", None) != self.rank:
            blocker.fail(exc)

    def report_failure(self, raw: bytes) -> None:
        """Publish this rank's failure as the job's abort reason (first reporter wins)."""
        if self.store.add("abort_votes", 1) == 1:
            self.store.set(kv.ABORT, raw)

    # ------------------------------------------------------------------ runs
    def run(self, fn: Callable[..., Any], args: tuple, config: Config, gather: bool) -> Any:
        """Run ``fn`` as this rank; publish the outcome; with ``gather``, return every rank's.

        Without ``gather`` (a child of hp.run) returns whether ``fn`` succeeded.
        """
        from .dist import DistServer

        run = self.runs
        self.runs += 1
        blocker = Blocker(config.timeout)
        server = DistServer(self, run, config, blocker)
        ctx = RankContext(
            self.rank,
            self.world_size,
            config,
            server,
            blocker,
            self.device,
            thread_init=self.thread_init,
        )
        ok = False
        blocker.enter(1)
        self.blocker = blocker
        if self.abort is not None:
            self._aborted(self.abort)
        set_rank_context(ctx)
        try:
            server.start(ctx.world_group)
            outcome = kv.encode_result(fn(*args), self.rank)
            ok = True
        except BaseException as exc:  # noqa: BLE001 - reported to every rank
            exc.hccl_traceback = traceback.format_exc()
            outcome = kv.encode_failure(exc, self.rank)
            if not isinstance(exc, HcclPeerError):
                self.report_failure(outcome)
        finally:
            set_rank_context(None)
            self.blocker = None
            blocker.leave()
        server.close()
        self.store.set(kv.result_key(run, self.rank), outcome)
        if not gather:
            return ok and kv.decode(outcome)[0] == "ok"
        return self._collect(run)

    def _collect(self, run: int) -> list[Any]:
        """Every rank's outcome of run ``run``: the list of values, or a WorldError."""
        n = self.world_size
        watch = _Liveness(self, n)
        try:
            kv.wait_keys(
                self.store,
                [kv.result_key(run, r) for r in range(n)],
                self.timeout,
                lambda missing: f"ranks did not report their outcome: {missing}",
                watch.check,
            )
        except _GiveUp:
            pass
        outcomes = [
            outcome_of(self.store, run, r, None)
            if r not in watch.dead
            else ("err", RankDiedError(f"rank {r} {watch.dead[r]}", rank=r))
            for r in range(n)
        ]
        self.store.set(kv.read_key(run, self.rank), b"1")
        if self.spec.host_store:
            self._wait_readers(run)
        failures = {r: value for r, (kind, value) in enumerate(outcomes) if kind == "err"}
        if failures:
            raise WorldError(failures, n)
        return [value for _, value in outcomes]

    def _wait_readers(self, run: int) -> None:
        """The store lives in this process: keep it up until every rank read the outcomes."""
        try:
            kv.wait_keys(
                self.store,
                [kv.read_key(run, r) for r in range(self.world_size)],
                self.timeout,
                lambda missing: f"ranks did not collect the outcomes: {missing}",
                _Liveness(self, self.world_size).check,
            )
        except (_GiveUp, Exception):  # noqa: BLE001 - best effort: the others are gone
            pass

    def close(self) -> None:
        """Leave the world: stop the watchdog, say so in the store, destroy the default PG."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        self._watchdog.join(timeout=2.0)
        try:
            self.store.set(kv.left_key(self.rank), b"1")
        except Exception:  # noqa: BLE001 - the store's host may be gone already
            pass
        if self._owns_pg and dist.is_initialized():
            try:
                dist.destroy_process_group()
            except Exception:  # noqa: BLE001 - nothing left to do at exit
                pass


class _Liveness:
    """Decides, while waiting for outcomes, which missing ranks are dead."""

    def __init__(self, session: Session, n: int) -> None:
        self.session = session
        self.n = n
        self.beats: dict[int, tuple[int, float]] = {}
        self.dead: dict[int, str] = {}
        self.next_look = 0.0

    def check(self) -> None:
        """Called between polls; raises :class:`_GiveUp` when waiting longer is pointless."""
        now = time.monotonic()
        if now < self.next_look:
            return
        self.next_look = now + HEARTBEAT_S
        store = self.session.store
        for r in range(self.n):
            if r in self.dead or store.check([kv.result_key(self.session.runs - 1, r)]):
                continue
            beat = int(store.add(kv.heartbeat_key(r), 0))
            last = self.beats.get(r)
            if last is None or last[0] != beat:
                self.beats[r] = (beat, now)
            elif now - last[1] > STALE_S:
                self.dead[r] = f"stopped responding for {STALE_S:g} s without reporting (killed?)"
        aborted = self.session.abort
        if aborted is not None:
            since = getattr(self, "aborted_at", None) or now
            self.aborted_at = since
            if now - since > GRACE_S:
                raise _GiveUp
        if self.dead and all(
            r in self.dead or store.check([kv.result_key(self.session.runs - 1, r)])
            for r in range(self.n)
        ):
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


def spawned_rank(
    spec: RankSpec,
    backend_name: str,
    payload: bytes,
    config: Config,
    env: dict[str, str],
    sys_path: list[str],
) -> None:
    """Entry point of a process that hp.run started: join, run ``fn``, report, exit."""
    os.environ.clear()
    os.environ.update(env)
    sys.path[:] = sys_path
    from ..runtime import get_backend

    try:
        fn, args = pickle.loads(payload)
    except Exception as exc:  # noqa: BLE001 - reported as this rank's failure
        fn, args = _unpicklable(exc), ()
    session = Session(spec, get_backend(backend_name), config.timeout)
    try:
        ok = session.run(fn, args, config, gather=False)
    finally:
        session.close()
        sys.stdout.flush()
        sys.stderr.flush()
    sys.exit(0 if ok else 1)
