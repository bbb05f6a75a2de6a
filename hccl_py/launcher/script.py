"""The runner of ``python -m hccl_py run -n N --backend gloo script.py``: N processes of a script."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Any

from .. import errors
from ..backends import store as kv
from .liveness import PARENT_ENV, exit_text
from .shm_files import TOKEN_ENV, new_token, remove_job_files
from .spec import STORE_HOSTED_ENV, LaunchError
from .supervise import Child, has_key, stop, supervise

#: Seconds node 0's runner keeps the store up for the ranks of the other hosts, after its own.
OTHER_HOSTS_S = 300.0


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
            PARENT_ENV: str(os.getpid()),
            "MASTER_PORT": str(port),
            STORE_HOSTED_ENV: "1",
            "HCCL_PY_BACKEND": opts.backend,
            "HCCL_PY_WORLD_SIZE": str(world),
            "PYTHONUNBUFFERED": "1",
            TOKEN_ENV: new_token(),
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
            children.append(Child(rank, proc))
            for stream, out in ((proc.stdout, sys.stdout), (proc.stderr, sys.stderr)):
                reader = threading.Thread(
                    target=_forward, args=(stream, out, f"[rank {rank}] ", lock), daemon=True
                )
                reader.start()
                readers.append(reader)
        codes = supervise(children, store, say)
    except KeyboardInterrupt:
        say("interrupted; stopping every rank")
        stop(children)
        return 130
    finally:
        remove_job_files(base_env[TOKEN_ENV])
    for reader in readers:
        reader.join(timeout=5.0)
    failed = {rank: code for rank, code in sorted(codes.items()) if code != 0}
    if host is not None and opts.nnodes > 1 and not failed:
        _wait_for_other_hosts(store, world)
    if not failed:
        return 0
    head = f"{len(failed)} of {len(children)} ranks failed"
    if has_key(store, kv.ABORT):
        _, cause = kv.decode(store.get(kv.ABORT))
        head += f"; first failure: rank {cause.hccl_rank}: {type(cause).__name__}: {cause}"
    say(head)
    say("exit codes: " + ", ".join(f"rank {r} {exit_text(c)}" for r, c in failed.items()))
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
