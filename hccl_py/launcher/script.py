"""The runner of ``python -m hccl_py run -n N --backend gloo script.py``: N processes of a script."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing import util as mp_util
from typing import IO, Any

from ..core import errors
from ..server.threads import join_all
from . import exchange, forked, sealed
from . import store as kv
from .forkserver import (
    fork_as_server,
    fork_server_pid,
    mp_context,
    start_method,
    stop_fork_server,
)
from .liveness import ORPHAN_DIRS_ENV, PARENT_ENV, exit_text
from .spec import STORE_HOSTED_ENV, LaunchError
from .supervise import Child, has_key, stop, supervise

#: Seconds node 0's runner keeps the store up for the ranks of the other hosts, after its own.
OTHER_HOSTS_S = 300.0
#: Seconds to wait, in all, for the ranks' output to end once every rank ended.
READERS_WAIT_S = 5.0
#: What the runner's fork server imports last: it leaves the runner's process group.
SERVER_SESSION = "hccl_py.launcher.server_session"


def _forward(
    stream: IO[bytes], out: IO[str], prefix: str, lock: threading.Lock, child: Child | None
) -> None:
    """Copy ``stream`` line by line to ``out``; remember ``child``'s last line (its error output)."""
    for raw in iter(stream.readline, b""):
        line = raw.decode("utf-8", errors="replace").rstrip("\n")
        if child is not None and line.strip():
            child.last_line = line.strip()
        with lock:
            out.write(f"{prefix}{line}\n")
            out.flush()
    stream.close()
    if child is not None and child.output_done is not None:
        child.output_done.set()


class _Terminated(Exception):  # noqa: N818 - like KeyboardInterrupt
    """The runner received SIGTERM."""


def _raise_terminated(signum: int, frame: Any) -> None:
    raise _Terminated


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
    #: Where node 0's store listens (None: ``HCCL_PY_LISTEN_ADDR``, else ``master_addr``).
    listen_addr: str | None = None
    #: Modules the fork server imports besides what this process loaded (the backend's).
    preload: tuple[str, ...] = ()


def _open_store(opts: RunnerOptions, world: int) -> tuple[Any, Any, int]:
    """``(server or None, hccl_py's view of the store, port)``: node 0 hosts it, the others join."""
    if opts.node_rank == 0:
        address = opts.listen_addr or kv.listen_address(opts.master_addr)
        host, port = kv.host_store(address, opts.master_port or 0, timeout=60.0)
        store = kv.scoped(host, kv.PREFIX)
        kv.mark_run(store, world)
        return host, store, port
    port = int(opts.master_port)
    store = kv.scoped(kv.join_store(opts.master_addr, port, timeout=300.0), kv.PREFIX)
    kv.check_run(store, world, f"{opts.master_addr}:{port}")
    return None, store, port


def _fork_server(opts: RunnerOptions) -> Any | None:
    """multiprocessing's context whose fork server starts the ranks, or None: fresh interpreters.

    The fork server (:func:`.forkserver.start_method`) runs a readable Python
    source file (:func:`.forked.runs_forked`); it preloads ``opts.preload`` too, and
    last :mod:`.server_session`, which takes it out of this process's group.
    """
    try:
        method = start_method()
    except errors.HcclUsageError as exc:
        raise LaunchError(str(exc)) from None
    if method != "forkserver" or not forked.runs_forked(opts.script):
        return None
    return mp_context(main=False, also=[*opts.preload, SERVER_SESSION])


def _start_rank(
    ctx: Any, opts: RunnerOptions, env: dict[str, str], rank: int
) -> tuple[Child, IO[bytes], IO[bytes]]:
    """Start one rank, from the fork server of ``ctx`` or (None) as a fresh interpreter."""
    if ctx is not None:
        proc, out, err = forked.start(
            ctx, opts.script, opts.script_args, env, f"hccl_py-rank{rank}"
        )
        return Child(rank, proc, session=True), out, err
    proc = subprocess.Popen(
        [sys.executable, opts.script, *opts.script_args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    return Child(rank, proc), proc.stdout, proc.stderr


def run_script(opts: RunnerOptions) -> int:
    """Start ``opts.nproc`` processes of the script on this host; return the job's exit code.

    Node 0 hosts the store on ``listen_addr`` (the ranks reach it at
    ``master_addr:master_port``); every rank's output is forwarded line by line
    with a ``[rank k]`` prefix. When a rank fails the others get :data:`GRACE_S`
    seconds to stop, then they are killed; SIGTERM or Ctrl-C stops them at once.
    The ranks come from a fork server preloaded with torch and hccl_py
    (:mod:`.forked`), or are fresh interpreters (``HCCL_PY_START_METHOD=spawn``).
    """
    if opts.nnodes > 1 and opts.master_port is None:
        raise LaunchError("--master-port is required with --nnodes > 1")
    if opts.nnodes > 1 and not os.environ.get(sealed.SECRET_ENV):
        raise LaunchError(
            f"--nnodes > 1 needs {sealed.SECRET_ENV}: set it to the same secret on every host "
            f"(for example {sealed.SECRET_ENV}=$(python -c 'import secrets; "
            "print(secrets.token_hex(32))'), shared the way you share ssh keys); it proves to "
            "each rank that what it reads from the store comes from this run"
        )
    sealed.ensure_secret()
    lock = threading.Lock()
    say = _sayer(lock)
    children: list[Child] = []
    readers = []
    own_server = False
    world = opts.nnodes * opts.nproc
    # from here on SIGTERM unwinds: what the start makes (the fork server, its folder) goes
    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _raise_terminated) if main else None
    try:
        ctx = _fork_server(opts)
        own_server = ctx is not None and fork_server_pid() is None  # else hp.run's, in here
        if own_server:  # this process has imported torch: its fork serves the ranks
            fork_as_server()
        host, store, port = _open_store(opts, world)
        base_env = dict(os.environ)
        base_env.update(
            {
                "WORLD_SIZE": str(world),
                "LOCAL_WORLD_SIZE": str(opts.nproc),
                "MASTER_ADDR": opts.master_addr,
                PARENT_ENV: str(os.getpid()),
                "MASTER_PORT": str(port),
                STORE_HOSTED_ENV: "1",
                "HCCL_PY_BACKEND": opts.backend,
                "HCCL_PY_WORLD_SIZE": str(world),
                "PYTHONUNBUFFERED": "1",
                # what a killed runner leaves: the fork server's socket folder (see socket_folder)
                ORPHAN_DIRS_ENV: mp_util.get_temp_dir(),
            }
        )
        if opts.platform:
            base_env["HCCL_PY_PLATFORM"] = opts.platform
        for local in range(opts.nproc):
            rank = opts.node_rank * opts.nproc + local
            env = dict(
                base_env, RANK=str(rank), LOCAL_RANK=str(local), GROUP_RANK=str(opts.node_rank)
            )
            child, out_pipe, err_pipe = _start_rank(ctx, opts, env, rank)
            child.output_done = threading.Event()
            children.append(child)
            streams = ((out_pipe, sys.stdout, None), (err_pipe, sys.stderr, child))
            for stream, out, tail in streams:
                reader = threading.Thread(
                    target=_forward,
                    args=(stream, out, f"[rank {rank}] ", lock, tail),
                    daemon=True,
                )
                reader.start()
                readers.append(reader)
        codes = supervise(children, store, say, beats=True)
    except (KeyboardInterrupt, _Terminated) as exc:
        why = "interrupted" if isinstance(exc, KeyboardInterrupt) else "received SIGTERM"
        say(f"{why}; stopping every rank")
        stop(children)
        ended = ", ".join(
            f"rank {c.rank} (pid {c.proc.pid}) {exit_text(c.poll())}" for c in children
        )
        say(f"stopped: {ended or 'no rank had started'}")
        return 130 if isinstance(exc, KeyboardInterrupt) else 128 + signal.SIGTERM
    except BaseException:  # a rank that failed to start: the ones started go too
        stop(children)
        raise
    finally:
        if main:  # a second SIGTERM must not cut the clean-up short
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if own_server:  # the run's fork server ends with it
            stop_fork_server()
        if main:
            signal.signal(signal.SIGTERM, previous)
    join_all(readers, READERS_WAIT_S)  # one wait for all: a pipe held open elsewhere
    early = {c.rank for c in children if c.ended_in_run}
    failed = {rank: code for rank, code in sorted(codes.items()) if code != 0 or rank in early}
    if host is not None and opts.nnodes > 1 and not failed:
        _wait_for_other_hosts(store, world)
    if not failed:
        return 0
    head = f"{len(failed)} of {len(children)} ranks failed"
    if has_key(store, kv.ABORT):
        head += f"; first failure: {exchange.describe_abort(exchange.read_abort(store))}"
    say(head)
    ended = {c.rank: c for c in children}
    say(
        "exit codes: "
        + ", ".join(f"rank {r} {ended[r].how_it_ended(c)}" for r, c in failed.items())
    )
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
