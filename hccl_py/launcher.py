"""Processes of a gloo or HCCL world: launcher detection, spawning, supervision.

One process runs one rank. Such processes come from:

- **msrun** (MindSpore): workers get ``MS_ROLE=MS_WORKER``, ``MS_NODE_ID``
  (``RANK_ID``), ``MS_WORKER_NUM``, ``DEVICE_ID``, ``MS_SCHED_HOST`` and
  ``MS_SCHED_PORT``. msrun also runs the script once with ``MS_ROLE=MS_SCHED``:
  that process hosts the rendezvous store at the scheduler address
  (:func:`serve_scheduler`) and exits when every worker is done.
- **torchrun** (or any launcher exporting ``RANK``, ``WORLD_SIZE``,
  ``LOCAL_RANK``, ``MASTER_ADDR`` and ``MASTER_PORT``): the store is torchrun's
  agent store (``TORCHELASTIC_USE_AGENT_STORE``) or, otherwise, hosted by rank 0.
- **hccl_py's runner**, ``python -m hccl_py run -n N --backend gloo script.py``
  (:func:`run_script`): it hosts the store, starts the processes with
  torchrun-style variables, prefixes their output with the rank and stops
  every rank when one fails.
- **hp.run itself** when no launcher started the process (:func:`spawn_world`):
  it starts ``world_size`` child processes running ``fn``.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any

from . import errors
from .backends import store as kv
from .context import Config

#: Set by hccl_py's runner in its children: the runner hosts the store at MASTER_ADDR:MASTER_PORT.
STORE_HOSTED_ENV = "HCCL_PY_STORE_HOSTED"
#: Start method of the processes hp.run starts itself ("forkserver" or "spawn").
START_METHOD_ENV = "HCCL_PY_START_METHOD"
#: Comma-separated modules the fork server imports once, besides :data:`PRELOAD`.
PRELOAD_ENV = "HCCL_PY_PRELOAD"
#: What the fork server imports before forking ranks ("__main__": the main script, as spawn would).
PRELOAD = ("__main__", "numpy", "torch", "torch.distributed", "hccl_py.backends.dist")
#: Heavy modules preloaded too when this process uses them (test modules import them).
WORTH_PRELOADING = ("pytest", "hypothesis")
#: Seconds the other ranks get to stop by themselves after one rank failed, before they are killed.
GRACE_S = 3.0
#: How often a live process bumps its heartbeat, and after how long without one it counts as dead.
HEARTBEAT_S = 0.5
STALE_S = 10.0
#: Seconds a killed process gets between SIGTERM and SIGKILL.
KILL_WAIT_S = 2.0
#: Seconds node 0's runner keeps the store up for the ranks of the other hosts, after its own.
OTHER_HOSTS_S = 300.0
#: Seconds the msrun scheduler waits for workers that never registered, once the job failed.
UNSEEN_GRACE_S = 5.0


class LaunchError(ValueError):
    """The launcher's environment variables are missing or inconsistent."""


@dataclass(frozen=True)
class RankSpec:
    """How this process joins a distributed world."""

    launcher: str  # "msrun", "torchrun", "hccl_py", "env" or "spawn"
    role: str  # "worker", or "scheduler" for msrun's scheduler process
    rank: int | None  # None: handed out through the store (msrun without --node_rank)
    world_size: int
    local_rank: int
    host: str
    port: int
    host_store: bool  # this process runs the store's server
    store_path: str | None = None  # a FileStore instead of a TCPStore (the ranks hp.run starts)


def _int(env: Mapping[str, str], *names: str, default: int | None = None) -> int:
    for name in names:
        value = env.get(name)
        if value not in (None, ""):
            try:
                return int(value)
            except ValueError:
                raise LaunchError(
                    f"environment variable {name}={value!r} is not an integer"
                ) from None
    if default is None:
        raise LaunchError(f"environment variable {' or '.join(names)} is not set")
    return default


def _address(env: Mapping[str, str], host: str, port: str, who: str) -> tuple[str, int]:
    if not env.get(port):
        raise LaunchError(
            f"{who}: {port} is not set, so the ranks cannot find each other's store "
            f"(set {host} and {port})"
        )
    return env.get(host) or "127.0.0.1", _int(env, port)


def spec_from_env(env: Mapping[str, str] | None = None) -> RankSpec:
    """Read this process's rank and rendezvous address from the launcher's variables."""
    env = os.environ if env is None else env
    if "MS_ROLE" in env:
        role = {"MS_SCHED": "scheduler", "MS_WORKER": "worker"}.get(env["MS_ROLE"])
        if role is None:
            raise LaunchError(f"MS_ROLE={env['MS_ROLE']!r}: hccl_py runs as MS_WORKER or MS_SCHED")
        host, port = _address(env, "MS_SCHED_HOST", "MS_SCHED_PORT", "msrun")
        node = env.get("MS_NODE_ID")
        return RankSpec(
            launcher="msrun",
            role=role,
            rank=int(node) if role == "worker" and node not in (None, "") else None,
            world_size=_int(env, "MS_WORKER_NUM", "RANK_SIZE"),
            local_rank=_int(env, "DEVICE_ID", default=0),
            host=host,
            port=port,
            host_store=role == "scheduler",
        )
    rank = _int(env, "RANK", "RANK_ID")
    who = "torchrun" if "TORCHELASTIC_RUN_ID" in env else "launcher"
    host, port = _address(env, "MASTER_ADDR", "MASTER_PORT", who)
    hosted = env.get("TORCHELASTIC_USE_AGENT_STORE") == "True" or env.get(STORE_HOSTED_ENV) == "1"
    return RankSpec(
        launcher="torchrun"
        if who == "torchrun"
        else ("hccl_py" if STORE_HOSTED_ENV in env else "env"),
        role="worker",
        rank=rank,
        world_size=_int(env, "WORLD_SIZE", "RANK_SIZE"),
        local_rank=_int(env, "LOCAL_RANK", "DEVICE_ID", default=rank),
        host=host,
        port=port,
        host_store=rank == 0 and not hosted,
    )


# ---------------------------------------------------------------- supervision
class RankDiedError(errors.HcclError):
    """A rank's process ended without reporting an outcome (killed, crashed or exited early)."""

    how = ""


def rank_died(rank: int, how: str) -> RankDiedError:
    """The failure of ``rank``, which ``how`` ended ("was killed by SIGKILL") without a report."""
    error = RankDiedError(f"rank {rank} {how} before reporting an outcome")
    error.how = how
    error.hccl_rank = rank
    return error


def _exit_text(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


class _Child:
    """One supervised rank process: a ``subprocess.Popen`` or a ``multiprocessing.Process``."""

    def __init__(self, rank: int, proc: Any) -> None:
        self.rank = rank
        self.proc = proc

    def poll(self) -> int | None:
        if isinstance(self.proc, subprocess.Popen):
            return self.proc.poll()
        return self.proc.exitcode

    def signal(self, sig: int) -> None:
        if self.poll() is not None:
            return
        try:
            if isinstance(self.proc, subprocess.Popen):
                os.killpg(self.proc.pid, sig)
            else:
                os.kill(self.proc.pid, sig)
        except ProcessLookupError:
            pass


def supervise(children: Sequence[_Child], store: Any, say: Callable[[str], None]) -> dict[int, int]:
    """Wait for every child; once one fails, give the rest :data:`GRACE_S`, then kill them.

    A child that dies without reporting a failure gets one written to the
    store's abort key on its behalf, so the other ranks stop at once. Returns
    rank -> exit code.
    """
    codes: dict[int, int] = {}
    failed_at: float | None = None
    try:
        while len(codes) < len(children):
            for child in children:
                code = child.poll() if child.rank not in codes else None
                if code is None:
                    continue
                codes[child.rank] = code
                if code != 0 and failed_at is None:
                    failed_at = time.monotonic()
                    say(f"rank {child.rank} {_exit_text(code)}; stopping the other ranks")
                    if not _has(store, kv.failed_key(child.rank)):  # it died silently
                        died = rank_died(child.rank, _exit_text(code))
                        with contextlib.suppress(RuntimeError):
                            kv.report_abort(store, kv.encode_failure(died, child.rank))
            if failed_at is None and _has(store, kv.ABORT):
                failed_at = time.monotonic()
            if failed_at is not None and time.monotonic() - failed_at > GRACE_S:
                _stop([c for c in children if c.rank not in codes])
            time.sleep(0.02)
    finally:
        _stop([c for c in children if c.poll() is None])
    return codes


def _has(store: Any, key: str) -> bool:
    """Whether ``key`` exists; False when the store is unreachable (another host's runner left)."""
    try:
        return store.check([key])
    except RuntimeError:
        return False


def _stop(children: Sequence[_Child]) -> None:
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

    ``why`` (how the rank ended, if known) defaults to a text from its exit code.
    """
    key = kv.result_key(run, rank)
    if store.check([key]):
        return kv.decode(store.get(key))
    if why is None:
        why = "did not finish" if code is None else _exit_text(code)
    return "err", rank_died(rank, why)


# ---------------------------------------------------------------- hp.run spawning
def _mp_context() -> Any:
    import torch.multiprocessing as mp

    method = os.environ.get(START_METHOD_ENV) or (
        "forkserver" if sys.platform.startswith("linux") else "spawn"
    )
    ctx = mp.get_context(method)
    if method == "forkserver":
        extra = [m for m in os.environ.get(PRELOAD_ENV, "").split(",") if m]
        ctx.set_forkserver_preload(
            [*PRELOAD, *(m for m in WORTH_PRELOADING if m in sys.modules), *extra]
        )
    return ctx


def spawn_world(backend: str, fn: Callable[..., Any], args: tuple, n: int, config: Config) -> list:
    """Run ``fn(*args)`` in ``n`` new processes, one per rank, and return their results.

    ``fn`` and ``args`` travel pickled (a module-level function, picklable
    arguments); the children get this process's ``sys.path`` and environment.
    They rendezvous through a FileStore in a temporary directory (no sockets:
    nothing to collide with, and no name lookups).
    """
    from .backends.session import spawned_rank

    try:
        payload = pickle.dumps((fn, args))
    except Exception as exc:  # noqa: BLE001 - any pickling failure means the same thing
        raise TypeError(
            f"backend {backend!r} runs every rank in its own process, so the function and its "
            f"arguments must be picklable (a module-level function, not a lambda or a local "
            f"function): {exc}"
        ) from exc
    with tempfile.TemporaryDirectory(prefix="hccl_py-") as tmp:
        path = os.path.join(tmp, "store")
        store = kv.scoped(kv.file_store(path), kv.PREFIX)
        ctx = _mp_context()
        children = []
        for rank in range(n):
            spec = RankSpec("spawn", "worker", rank, n, rank, "", 0, False, store_path=path)
            proc = ctx.Process(
                target=spawned_rank,
                args=(spec, backend, payload, config, dict(os.environ), list(sys.path)),
                name=f"hccl_py-rank{rank}",
            )
            children.append(_Child(rank, proc))
        try:
            for child in children:
                child.proc.start()
        except BaseException:
            _stop([c for c in children if c.proc.pid is not None])
            raise
        codes = supervise(children, store, lambda text: None)
        outcomes = [outcome_of(store, 0, rank, codes.get(rank)) for rank in range(n)]
    failures = {rank: value for rank, (kind, value) in enumerate(outcomes) if kind == "err"}
    if failures:
        raise errors.WorldError(failures, n)
    return [value for _, value in outcomes]


# ---------------------------------------------------------------- the runner
def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on ``host`` right now."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def _forward(stream: IO[bytes], out: IO[str], prefix: str, lock: threading.Lock) -> None:
    for raw in iter(stream.readline, b""):
        line = raw.decode("utf-8", errors="replace").rstrip("\n")
        with lock:
            out.write(f"{prefix}{line}\n")
            out.flush()
    stream.close()


@dataclass(frozen=True)
class RunnerOptions:
    """What ``python -m hccl_py run`` was asked to start."""

    script: str
    script_args: tuple[str, ...]
    nproc: int
    backend: str
    nnodes: int = 1
    node_rank: int = 0
    master_addr: str = "127.0.0.1"
    master_port: int | None = None
    platform: str | None = None


def run_script(opts: RunnerOptions) -> int:
    """Start ``opts.nproc`` processes of the script on this host; return the job's exit code.

    Node 0 hosts the store at ``master_addr:master_port``; every rank's output
    is forwarded line by line with a ``[rank k]`` prefix. When a rank fails the
    others get :data:`GRACE_S` seconds to stop, then they are killed.
    """
    if opts.nnodes > 1 and opts.master_port is None:
        raise LaunchError("--master-port is required with --nnodes > 1")
    world = opts.nnodes * opts.nproc
    port = opts.master_port or free_port(opts.master_addr)
    host = None
    if opts.node_rank == 0:
        host = kv.connect("0.0.0.0", port, is_master=True, timeout=60.0)
    store = kv.scoped(
        host or kv.connect(opts.master_addr, port, is_master=False, timeout=300.0), kv.PREFIX
    )
    lock = threading.Lock()
    children, readers = [], []
    base_env = dict(os.environ)
    base_env.update(
        {
            "WORLD_SIZE": str(world),
            "LOCAL_WORLD_SIZE": str(opts.nproc),
            "MASTER_ADDR": opts.master_addr,
            "MASTER_PORT": str(port),
            STORE_HOSTED_ENV: "1",
            "HCCL_PY_BACKEND": opts.backend,
            "HCCL_PY_WORLD_SIZE": str(world),
            "PYTHONUNBUFFERED": "1",
        }
    )
    if opts.platform:
        base_env["HCCL_PY_PLATFORM"] = opts.platform
    say = _sayer(lock)
    try:
        for local in range(opts.nproc):
            rank = opts.node_rank * opts.nproc + local
            env = dict(
                base_env, RANK=str(rank), LOCAL_RANK=str(local), GROUP_RANK=str(opts.node_rank)
            )
            proc = subprocess.Popen(
                [sys.executable, opts.script, *opts.script_args],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
            children.append(_Child(rank, proc))
            for stream, out in ((proc.stdout, sys.stdout), (proc.stderr, sys.stderr)):
                reader = threading.Thread(
                    target=_forward, args=(stream, out, f"[rank {rank}] ", lock), daemon=True
                )
                reader.start()
                readers.append(reader)
        codes = supervise(children, store, say)
    except KeyboardInterrupt:
        say("interrupted; stopping every rank")
        _stop(children)
        return 130
    for reader in readers:
        reader.join(timeout=5.0)
    failed = {rank: code for rank, code in sorted(codes.items()) if code != 0}
    if host is not None and opts.nnodes > 1 and not failed:
        _wait_for_other_hosts(store, world)
    if not failed:
        return 0
    say(
        f"{len(failed)} of {len(children)} ranks failed: "
        + ", ".join(f"rank {rank} {_exit_text(code)}" for rank, code in failed.items())
    )
    if _has(store, kv.ABORT):
        _, cause = kv.decode(store.get(kv.ABORT))
        say(f"first failure: rank {cause.hccl_rank}: {type(cause).__name__}: {cause}")
    code = next(iter(failed.values()))
    return code if code > 0 else 1


def _wait_for_other_hosts(store: Any, world: int) -> None:
    """Node 0 hosts the store: keep it until the ranks of the other hosts have left."""
    with contextlib.suppress(errors.HcclError):
        kv.wait_keys(
            store,
            [kv.left_key(r) for r in range(world)],
            OTHER_HOSTS_S,
            lambda missing: f"ranks of other hosts did not finish: {missing}",
        )


def _sayer(lock: threading.Lock) -> Callable[[str], None]:
    def say(text: str) -> None:
        with lock:
            print(f"hccl_py: {text}", file=sys.stderr, flush=True)

    return say


# ---------------------------------------------------------------- msrun's scheduler
def process_state(where: str) -> str:
    """State of the process ``host|pid``: "alive", "zombie" (ended, not reaped), "gone" or "remote"."""
    host, _, pid = where.partition("|")
    if host != socket.gethostname():
        return "remote"
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return "gone"
    except PermissionError:
        return "alive"
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return "zombie" if stat.read().rsplit(")", 1)[1].split()[0] == "Z" else "alive"
    except OSError:
        return "alive"


def process_gone(where: str) -> bool:
    """Whether the process ``host|pid`` (on this host) has ended."""
    return process_state(where) in ("zombie", "gone")


def serve_scheduler(spec: RankSpec) -> int:
    """msrun's scheduler process: host the store until every worker left or died.

    Returns the exit code the scheduler process should end with (1 when a
    worker failed or died, so that msrun reports the job as failed).
    """
    host = kv.connect("0.0.0.0", spec.port, is_master=True, timeout=60.0)
    store = kv.scoped(host, kv.PREFIX)
    n = spec.world_size
    print(
        f"hccl_py: msrun scheduler hosts the rendezvous store at {spec.host}:{spec.port} "
        f"for {n} workers",
        flush=True,
    )
    beats: dict[int, tuple[int, float]] = {}
    gone: set[int] = set()
    trouble_at: float | None = None
    while True:
        now = time.monotonic()
        left = {r for r in range(n) if store.check([kv.left_key(r)])}
        for r in set(range(n)) - left - gone:
            if store.check([kv.pid_key(r)]) and process_gone(store.get(kv.pid_key(r)).decode()):
                gone.add(r)
            elif store.check([kv.heartbeat_key(r)]):
                beat = int(store.add(kv.heartbeat_key(r), 0))
                last = beats.get(r)
                if last is None or last[0] != beat:
                    beats[r] = (beat, now)
                elif now - last[1] > STALE_S:
                    gone.add(r)
        failed = store.check([kv.ABORT]) or bool(gone - left)
        if failed and trouble_at is None:
            trouble_at = now
        if trouble_at is not None and now - trouble_at > UNSEEN_GRACE_S:
            gone |= set(range(n)) - left - gone - set(beats)
        if left | gone >= set(range(n)):
            break
        time.sleep(0.2)
    silent = sorted(r for r in gone if r not in left and not store.check([kv.failed_key(r)]))
    if silent:
        # msrun reaps the worker whose failure it noticed, then kills the others with
        # SIGKILL and never reaps them: the reaped ones ended first.
        states = {r: process_state(store.get(kv.pid_key(r)).decode()) for r in silent}
        first = [r for r in silent if states[r] == "gone"] or silent
        later = [r for r in silent if r not in first]
        print(
            f"ERROR: hccl_py: rank(s) {first} ended without finishing and without reporting "
            "an error (killed or crashed)"
            + (f"; rank(s) {later} were stopped after that" if later else ""),
            flush=True,
        )
    if store.check([kv.ABORT]):
        _, exc = kv.decode(store.get(kv.ABORT))
        print(
            f"ERROR: hccl_py: the job failed: rank {exc.hccl_rank}: {type(exc).__name__}: {exc}",
            flush=True,
        )
    return 1 if failed else 0
