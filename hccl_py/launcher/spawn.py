"""The rank processes ``hp.run`` starts itself when no launcher started this process."""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Callable
from multiprocessing import util as mp_util
from typing import Any

from ..core import errors
from ..core.config import Config
from . import sealed, wire
from . import store as kv
from .liveness import ORPHAN_DIRS_ENV, PARENT_ENV, STACKS_ENV
from .script_checks import unguarded_call
from .shm_files import TOKEN_ENV, new_token, remove_job_files
from .spec import RankSpec
from .supervise import Child, outcome_of, stop, supervise

#: Start method of the processes hp.run starts itself ("forkserver" or "spawn").
START_METHOD_ENV = "HCCL_PY_START_METHOD"
#: Comma-separated modules the fork server imports once, besides :data:`PRELOAD`.
PRELOAD_ENV = "HCCL_PY_PRELOAD"
#: What the fork server imports before forking ranks ("__main__": the main script, as spawn would).
PRELOAD = ("__main__", "numpy", "torch", "torch.distributed")
#: Heavy modules preloaded too when this process uses them (test modules import them), and
#: the packages whose loaded modules are preloaded too: hccl_py's own (the backend's server,
#: the client ...), which each rank would otherwise import again (about 0.2 s per rank and run).
WORTH_PRELOADING = ("pytest", "hypothesis")
PRELOAD_PACKAGES = ("hccl_py",)


#: The longest path a Unix socket may have (``sun_path`` holds 108 bytes with the final NUL).
SOCKET_PATH_MAX = 107
#: What the fork server's socket name adds to multiprocessing's folder: "/listener-" and 8 letters.
LISTENER_NAME_LEN = len("/listener-") + 8


def forkserver_fits() -> bool:
    """Whether the fork server's Unix socket path fits under multiprocessing's temporary folder.

    multiprocessing listens in a ``pymp-*`` folder under TMPDIR; under a long TMPDIR (a
    deeply nested test folder, say) the path is too long for a Unix socket and starting
    the fork server fails with a bare ``OSError: AF_UNIX path too long``.
    """
    return len(mp_util.get_temp_dir()) + LISTENER_NAME_LEN <= SOCKET_PATH_MAX


def start_method() -> str:
    """``$HCCL_PY_START_METHOD``, else the fork server on Linux where its socket path fits, else spawn."""
    asked = os.environ.get(START_METHOD_ENV)
    if asked == "forkserver" and not forkserver_fits():
        raise errors.HcclUsageError(
            f"{START_METHOD_ENV}=forkserver: the fork server's socket would be "
            f"{mp_util.get_temp_dir()}/listener-XXXXXXXX, longer than the {SOCKET_PATH_MAX} "
            "characters a Unix socket path may have; set TMPDIR to a shorter folder, or "
            f"{START_METHOD_ENV}=spawn"
        )
    if asked:
        return asked
    return "forkserver" if sys.platform.startswith("linux") and forkserver_fits() else "spawn"


def _mp_context() -> Any:
    import torch.multiprocessing as mp

    method = start_method()
    ctx = mp.get_context(method)
    if method == "forkserver":
        extra = [m for m in os.environ.get(PRELOAD_ENV, "").split(",") if m]
        loaded = sorted(m for m in sys.modules if m.partition(".")[0] in PRELOAD_PACKAGES)
        worth = [m for m in WORTH_PRELOADING if m in sys.modules]
        ctx.set_forkserver_preload([*PRELOAD, *worth, *loaded, *extra])
    return ctx


def spawn_world(
    backend: str,
    fn: Callable[..., Any],
    args: tuple,
    n: int,
    config: Config,
    entry: Callable[..., None],
) -> list:
    """Run ``fn(*args)`` in ``n`` new processes, one per rank, and return their results.

    ``entry(spec, backend, payload, config, env, sys_path)`` is each child's main
    (the backend's: it joins the world and runs the payload).

    ``fn`` and ``args`` travel pickled (a module-level function, picklable
    arguments); the children get this process's ``sys.path`` and environment.
    They rendezvous through a FileStore in a temporary directory (no sockets:
    nothing to collide with, and no name lookups).
    """
    where = unguarded_call()
    if where is not None:
        raise RuntimeError(
            f"backend {backend!r} starts one process per rank, and each imports your script "
            f"again; the hp.run call at {where} is not inside an "
            "'if __name__ == \"__main__\":' block, so every rank process would start hp.run "
            "again. Move the code that calls hp.run under that block"
        )
    try:
        payload = wire.dumps((fn, args))
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
        sealed.ensure_secret()  # before env: the children get it, and this process reads with it
        token = new_token()
        env = {
            **os.environ,
            PARENT_ENV: str(os.getpid()),
            STACKS_ENV: tmp,
            TOKEN_ENV: token,
            ORPHAN_DIRS_ENV: os.pathsep.join([tmp, mp_util.get_temp_dir()]),
        }
        children = []
        for rank in range(n):
            spec = RankSpec("spawn", "worker", rank, n, rank, "", 0, False, store_path=path)
            proc = ctx.Process(
                target=entry,
                args=(spec, backend, payload, config, env, list(sys.path)),
                name=f"hccl_py-rank{rank}",
            )
            children.append(Child(rank, proc))
        try:
            for child in children:
                child.proc.start()
        except BaseException:
            stop([c for c in children if c.proc.pid is not None])
            raise
        try:
            codes = supervise(children, store, lambda text: None, config.timeout, tmp)
        finally:
            remove_job_files(token)  # the files of ranks killed while they created windows
        outcomes = [
            outcome_of(store, 0, c.rank, codes.get(c.rank), why=c.stopped) for c in children
        ]
    failures = {rank: value for rank, (kind, value) in enumerate(outcomes) if kind == "err"}
    if failures:
        raise errors.WorldError(failures, n)
    return [value for _, value in outcomes]
