"""The key-value store that the processes of a gloo or HCCL world share.

Every process of a world connects to one ``torch.distributed.TCPStore``
(hosted by the launcher, the msrun scheduler or rank 0), or, for the ranks that
``hp.run`` starts itself, opens one ``FileStore``. Besides torch.distributed's own rendezvous it carries hccl_py's keys,
all under the prefix ``hccl_py/``:

- ``abort``: the first failure of any rank; every process stops when it appears.
- ``hb/<rank>``, ``pid/<rank>``, ``left/<rank>``, ``failed/<rank>``: liveness of each
  rank's process, and whether it reported a failure.
- ``rank_counter``: ranks handed out to processes that were started without one.
- ``run<i>/result/<rank>``: the outcome (value or exception) of ``hp.run`` call ``i``.
- ``run<i>/read/<rank>``: rank has collected every outcome of run ``i``.
- ``run<i>/desc/<domain>/<seq>/<rank>``: task descriptors compared in strict mode.
"""

from __future__ import annotations

import datetime
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

import torch.distributed as dist

from ..core.errors import HcclTimeoutError
from . import wire

PREFIX = "hccl_py/"
ABORT = "abort"
RANK_COUNTER = "rank_counter"
#: Polling interval of :func:`wait_keys`: starts short (peers usually publish within a
#: fraction of a millisecond, and each check is a round trip to the store anyway), grows by
#: :data:`POLL_GROWTH` up to the maximum.
POLL_MIN_S = 0.00005
POLL_GROWTH = 1.5
POLL_MAX_S = 0.02


def heartbeat_key(rank: int) -> str:
    """Counter a live rank's process increments periodically."""
    return f"hb/{rank}"


def pid_key(rank: int) -> str:
    """``host|pid`` of a rank's process."""
    return f"pid/{rank}"


def failed_key(rank: int) -> str:
    """Set when a rank's function failed (the rank reported it; it did not just die)."""
    return f"failed/{rank}"


def left_key(rank: int) -> str:
    """Set when a rank's process is done with the store (it exits)."""
    return f"left/{rank}"


def result_key(run: int, rank: int) -> str:
    """The outcome of ``rank`` in ``hp.run`` call number ``run`` of the process."""
    return f"run{run}/result/{rank}"


def read_key(run: int, rank: int) -> str:
    """Set when ``rank`` has read every outcome of run ``run``."""
    return f"run{run}/read/{rank}"


def seconds(value: float) -> datetime.timedelta:
    """A timedelta for torch.distributed's timeout arguments."""
    return datetime.timedelta(seconds=float(value))


def connect(
    host: str, port: int, *, is_master: bool, timeout: float, world_size: int | None = None
) -> dist.Store:
    """A TCPStore client (or server, with ``is_master``) at ``host:port``; clients retry until ``timeout``."""
    return dist.TCPStore(
        host,
        int(port),
        world_size,
        is_master,
        timeout=seconds(timeout),
        wait_for_workers=False,
    )


def file_store(path: str) -> dist.Store:
    """A store in the file ``path`` for processes of one host (kept until the file is deleted)."""
    return dist.FileStore(path, -1)


def scoped(store: dist.Store, prefix: str) -> dist.Store:
    """``store`` seen through ``prefix`` (keys are prefixed transparently)."""
    return dist.PrefixStore(prefix, store)


class RemoteError(RuntimeError):
    """A failure of another process whose exception could not be transferred as itself."""


def report_abort(store: dist.Store, raw: bytes) -> bool:
    """Publish a failure (:func:`encode_failure`) as the job's abort reason; the first one wins."""
    if store.add("abort_votes", 1) != 1:
        return False
    store.set(ABORT, raw)
    return True


def encode_failure(exc: BaseException, rank: int) -> bytes:
    """Pickle a rank's exception (with its traceback text) for other processes."""
    exc.hccl_rank = rank
    if not hasattr(exc, "hccl_traceback"):
        exc.hccl_traceback = "".join(traceback.format_exception(exc))
    try:
        return wire.dumps(("err", exc))
    except Exception:  # noqa: BLE001 - any pickling failure falls back to text
        stand_in = RemoteError(f"{type(exc).__name__}: {exc}")
        stand_in.hccl_rank = rank
        stand_in.hccl_traceback = exc.hccl_traceback
        return wire.dumps(("err", stand_in))


def encode_result(value: Any, rank: int) -> bytes:
    """Pickle a rank's return value; an unpicklable one becomes that rank's failure."""
    try:
        return wire.dumps(("ok", value))
    except Exception as exc:  # noqa: BLE001 - reported as the rank's failure
        error = TypeError(
            f"the return value of rank {rank} ({type(value).__name__}) cannot be sent to the "
            f"other processes: {exc}; return picklable values from the function given to hp.run"
        )
        return encode_failure(error, rank)


def decode(raw: bytes) -> tuple[str, Any]:
    """``("ok", value)`` or ``("err", exception)`` from :func:`encode_result` / :func:`encode_failure`."""
    return wire.loads(raw)


def get_all(store: dist.Store, keys: Sequence[str]) -> list[bytes]:
    """The values of existing keys, in one round trip where the store allows it."""
    if hasattr(store, "multi_get"):
        return store.multi_get(list(keys))
    return [store.get(key) for key in keys]


def wait_keys(
    store: dist.Store,
    keys: Sequence[str],
    timeout: float,
    what: Callable[[list[str]], str],
    interrupt: Callable[[], None] = lambda: None,
) -> None:
    """Block until every key exists; ``interrupt()`` may raise to stop early (an abort).

    Polls with ``check`` (a blocking ``wait`` cannot be interrupted, and one that
    times out leaves the connection unusable). Raises
    :class:`HcclTimeoutError` after ``timeout`` seconds with ``what(missing)``.
    """
    keys = list(keys)
    deadline = time.monotonic() + timeout
    pause = POLL_MIN_S
    while not store.check(keys):
        interrupt()
        if time.monotonic() >= deadline:
            missing = [k for k in keys if not store.check([k])]
            if missing:
                raise HcclTimeoutError(f"timed out after {timeout:g} s: {what(missing)}")
            return
        time.sleep(pause)
        pause = min(POLL_GROWTH * pause, POLL_MAX_S)
