"""The key-value store that the processes of a gloo or HCCL world share.

Every process of a world connects to one ``torch.distributed.TCPStore``
(hosted by the launcher, the msrun scheduler or rank 0), or, for the ranks that
``hp.run`` starts itself, opens one ``FileStore``. Besides torch.distributed's own rendezvous it carries hccl_py's keys,
all under the prefix ``hccl_py/``:

- ``abort``: the first failure of any rank (plain data); every process stops when it appears.
- ``run_mark``: which run the store serves, signed with the run's secret (:func:`mark_run`).
- ``hb/<rank>``, ``host_hb/<rank>``, ``pid/<rank>``, ``left/<rank>``, ``failed/<rank>``:
  liveness of each rank's process, and whether it reported a failure.
- ``rank_counter``: ranks handed out to processes that were started without one.
- ``run<i>/result/<rank>``: the outcome (value or exception) of ``hp.run`` call ``i``.
- ``run<i>/read/<rank>``: rank has collected every outcome of run ``i``.
- ``run<i>/final/<domain>/<launch>/<rank>``: how many tasks a rank finalized a kernel launch
  with (task check); ``run<i>/joined/<domain>/<seq>/<rank>``: a rank has waited in a task's
  descriptor exchange (only a slow exchange writes it).

Values read back are framed and, with the run's secret, signed (:mod:`.sealed`):
nothing from the store is unpickled unless its signature proves this run wrote it.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import math
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch.distributed as dist

from ..core.errors import HcclPeerError, HcclTimeoutError
from ..launcher.ports import port_holder
from ..launcher.spec import LaunchError
from . import sealed

PREFIX = "hccl_py/"
ABORT = "abort"
#: The store host's mark: which run the store serves (:func:`mark_run`).
RUN_MARK = "run_mark"
#: Address a store that hccl_py hosts listens on (default: the address the ranks connect to).
LISTEN_ENV = "HCCL_PY_LISTEN_ADDR"
#: Seconds a store must answer in once it accepts connections (``HCCL_PY_STORE_ANSWER_S``
#: overrides it), and a run mark may take to appear.
ANSWER_S = 5.0
ANSWER_ENV = "HCCL_PY_STORE_ANSWER_S"
RUN_MARK_WAIT_S = 10.0
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


def host_heartbeat_key(rank: int) -> str:
    """Set, to a new value each time, by the runner on a rank's host while the rank's process
    runs: a heartbeat that the rank's own code cannot starve."""
    return f"host_hb/{rank}"


def pid_key(rank: int) -> str:
    """``host|pid`` of a rank's process."""
    return f"pid/{rank}"


def failed_key(rank: int) -> str:
    """Set when a rank's function failed (the rank reported it; it did not just die)."""
    return f"failed/{rank}"


def running_key(rank: int) -> str:
    """Set while a rank is inside ``hp.run``; deleted once it published its outcome (a rank
    that exits with it set ended in the middle of a run, whatever its exit code)."""
    return f"running/{rank}"


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
    """A TCPStore client (or server, with ``is_master``) at ``host:port``; clients retry until ``timeout``.

    A server made here listens on every interface: hccl_py's own stores come
    from :func:`host_store`; this is for the stores of other launchers.
    """
    return dist.TCPStore(
        host,
        int(port),
        world_size,
        is_master,
        timeout=seconds(timeout),
        wait_for_workers=False,
    )


def listen_address(default: str) -> str:
    """Where a store this process hosts listens: :data:`LISTEN_ENV`, else ``default``."""
    return os.environ.get(LISTEN_ENV) or default


def host_store(address: str, port: int, timeout: float) -> tuple[dist.Store, int]:
    """The store's server, listening on ``address:port`` only (port 0: a free one); and its port.

    torch's TCPStore listens on every interface whatever host name it is
    given, so the socket is bound here and handed over. A port in use raises
    :class:`StoreJoinError` naming what holds it.
    """
    try:
        family, kind, proto, _, where = socket.getaddrinfo(address, port, type=socket.SOCK_STREAM)[
            0
        ]
        sock = socket.socket(family, kind, proto)
    except OSError as exc:
        raise StoreJoinError(
            f"cannot host the rendezvous store on {address}:{port}: {exc}"
        ) from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(where)
        sock.listen(socket.SOMAXCONN)
    except OSError as exc:
        sock.close()
        held = (
            f"; port {port} is held by {port_holder(port)}" if exc.errno == errno.EADDRINUSE else ""
        )
        raise StoreJoinError(
            f"cannot host the rendezvous store on {address}:{port}: {exc.strerror}{held}. "
            "Choose another port (MASTER_PORT, --master-port, msrun's --master_port) or stop "
            "that process"
        ) from None
    port = sock.getsockname()[1]
    store = dist.TCPStore(
        address,
        port,
        None,
        True,
        timeout=seconds(timeout),
        wait_for_workers=False,
        master_listen_fd=sock.detach(),
    )
    return store, port


def answer_s() -> float:
    """Seconds a store must answer in: :data:`ANSWER_ENV`, else :data:`ANSWER_S`."""
    raw = os.environ.get(ANSWER_ENV, "")
    try:
        value = float(raw) if raw else ANSWER_S
    except ValueError:
        value = math.nan
    if not 0 < value < math.inf:
        raise ValueError(f"{ANSWER_ENV} must be a positive number of seconds, not {raw!r}")
    return value


def _accepts(address: str, port: int) -> bool:
    """Whether something accepts TCP connections at ``address:port`` now."""
    try:
        socket.create_connection((address, port), timeout=answer_s()).close()
    except OSError:
        return False
    return True


def join_store(address: str, port: int, timeout: float) -> dist.Store:
    """A client of the store at ``address:port``, waiting up to ``timeout`` for it to listen.

    torch's client waits forever for an answer from whatever accepts the
    connection; a listener that does not answer as a store within
    :func:`answer_s` seconds (twice in a row) raises :class:`StoreJoinError` naming
    what holds the port.
    """
    made: list[Any] = []

    def make() -> None:
        try:
            made.append(connect(address, port, is_master=False, timeout=timeout))
        except Exception as exc:  # noqa: BLE001 - handed to the waiting thread
            made.append(exc)

    thread = threading.Thread(target=make, name="hccl_py-store-join", daemon=True)
    thread.start()
    silent, wait = 0, answer_s()
    while True:
        thread.join(wait)
        if not thread.is_alive():
            break
        silent = silent + 1 if _accepts(address, port) else 0
        if silent >= 2:
            raise StoreJoinError(
                f"the rendezvous store at {address}:{port} does not answer: something accepts "
                f"connections there but is not a store (on this host, port {port} is held by "
                f"{port_holder(port)}). Choose another port or stop that process"
            )
    if isinstance(made[0], Exception):
        raise StoreJoinError(
            f"cannot join the rendezvous store at {address}:{port}: {made[0]}"
        ) from made[0]
    return made[0]


def mark_run(store: dist.Store, world_size: int) -> None:
    """The host's mark on its store: which run it serves (signed with the run's secret)."""
    store.set(RUN_MARK, sealed.dump_json(RUN_MARK, {"world_size": world_size}))


def check_run(store: dist.Store, world_size: int, where: str) -> None:
    """Refuse the store at ``where`` unless its host marked it for this run (:func:`mark_run`)."""
    deadline = time.monotonic() + RUN_MARK_WAIT_S
    while not store.check([RUN_MARK]):
        if time.monotonic() > deadline:
            raise StoreJoinError(
                f"the store at {where} is not this run's: it has no hccl_py run mark after "
                f"{RUN_MARK_WAIT_S:g} s (another program's store holds the port)"
            )
        time.sleep(0.05)
    try:
        mark = sealed.load_json(RUN_MARK, store.get(RUN_MARK))
    except sealed.ForgedValueError as exc:
        raise StoreJoinError(
            f"the store at {where} belongs to another run, which holds the port: {exc.reason}"
        ) from None
    if mark != {"world_size": world_size}:
        raise StoreJoinError(
            f"the store at {where} belongs to another run, which holds the port (its mark: "
            f"{mark}; this run has {world_size} ranks)"
        )


def file_store(path: str) -> dist.Store:
    """A store in the file ``path`` for processes of one host (kept until the file is deleted)."""
    return dist.FileStore(path, -1)


def scoped(store: dist.Store, prefix: str) -> dist.Store:
    """``store`` seen through ``prefix`` (keys are prefixed transparently)."""
    return dist.PrefixStore(prefix, store)


@contextlib.contextmanager
def gone_store(rank: int, where: str) -> Iterator[None]:
    """Turn torch's error of a store whose host ended (a broken connection) into a clear one.

    A store that still accepts connections at ``where`` did not end: it closed this rank's
    connection, as torch's store does when a request fails (an ``add`` to a key that another
    process set to something other than a number); that is said instead.
    """
    try:
        yield
    except dist.DistNetworkError as exc:
        host, _, port = where.rpartition(":")
        if port.isdigit() and _accepts(host.strip("[]"), int(port)):
            raise HcclPeerError(
                f"the run's store at {where} closed this rank's connection ({exc}), but it "
                "still runs: torch's store closes the connection of a request that fails, such "
                "as an add to a counter that another process overwrote (anyone who reaches the "
                "store can; see 'Security' in docs/backends.md), so this rank stops without "
                "reporting its outcome",
                rank=rank,
            ) from None
        raise HcclPeerError(
            f"the run's store at {where} is gone ({exc}): the process that hosted it (rank 0, or "
            "the launcher) ended, so this rank stops without reporting its outcome",
            rank=rank,
        ) from None


class RemoteError(RuntimeError):
    """A failure of another process whose exception could not be transferred as itself."""


class StoreJoinError(LaunchError):
    """This process cannot host or join its run's store: the port is taken, or by another run."""


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
