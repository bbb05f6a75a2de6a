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
from .forkserver import mp_context
from .liveness import ORPHAN_DIRS_ENV, PARENT_ENV, STACKS_ENV
from .script_checks import unguarded_call
from .spec import RankSpec
from .supervise import Child, outcome_of, sigterm_exits, stop, supervise


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
    with sigterm_exits(), tempfile.TemporaryDirectory(prefix="hccl_py-") as tmp:
        path = os.path.join(tmp, "store")
        store = kv.scoped(kv.file_store(path), kv.PREFIX)
        ctx = mp_context()
        sealed.ensure_secret()  # before env: the children get it, and this process reads with it
        env = {
            **os.environ,
            PARENT_ENV: str(os.getpid()),
            STACKS_ENV: tmp,
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
            children.append(Child(rank, proc, session=True))  # spawned_rank calls os.setsid
        try:
            for child in children:
                child.proc.start()
        except BaseException:
            stop([c for c in children if c.proc.pid is not None])
            raise
        codes = supervise(children, store, lambda text: None, config.timeout, tmp)
        outcomes = [
            outcome_of(store, 0, c.rank, codes.get(c.rank), why=c.stopped or c.ended_text())
            for c in children
        ]
    failures = {rank: value for rank, (kind, value) in enumerate(outcomes) if kind == "err"}
    if failures:
        raise errors.WorldError(failures, n)
    return [value for _, value in outcomes]
