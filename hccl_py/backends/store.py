"""The key-value store that the processes of a gloo or HCCL world share.

Every process of a world connects to one ``torch.distributed.TCPStore``
(hosted by the launcher, the msrun scheduler or rank 0), or, for the ranks that
``hp.run`` starts itself, opens one ``FileStore``. Besides torch.distributed's own rendezvous it carries hccl_py's keys,
all under the prefix ``hccl_py/``:

- ``abort``: the first failure of any rank (plain data); every process stops when it appears.
- ``run_mark``: which run the store serves, signed with the run's secret (:func:`mark_run`).
- ``hb/<rank>``, ``pid/<rank>``, ``left/<rank>``, ``failed/<rank>``: liveness of each
  rank's process, and whether it reported a failure.
- ``rank_counter``: ranks handed out to processes that were started without one.
- ``run<i>/result/<rank>``: the outcome (value or exception) of ``hp.run`` call ``i``.
- ``run<i>/read/<rank>``: rank has collected every outcome of run ``i``.
- ``run<i>/desc/<domain>/<seq>/<rank>``: task descriptors compared in strict mode (plain data).

Values read back are framed and, with the run's secret, signed (:mod:`.sealed`):
nothing from the store is unpickled unless its signature proves this run wrote it.
"""

from __future__ import annotations

import datetime
import errno
import functools
import os
import socket
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

import torch.distributed as dist

from ..errors import HcclTimeoutError, HcclWarning
from ..launcher.ports import port_holder
from ..launcher.spec import LaunchError
from ..outcome import RankOutcome
from . import sealed

PREFIX = "hccl_py/"
ABORT = "abort"
#: The store host's mark: which run the store serves (:func:`mark_run`).
RUN_MARK = "run_mark"
#: Address a store that hccl_py hosts listens on (default: the address the ranks connect to).
LISTEN_ENV = "HCCL_PY_LISTEN_ADDR"
#: Seconds a store must answer in once it accepts connections, and a run mark may take to appear.
ANSWER_S = 5.0
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


def _accepts(address: str, port: int) -> bool:
    """Whether something accepts TCP connections at ``address:port`` now."""
    try:
        socket.create_connection((address, port), timeout=ANSWER_S).close()
    except OSError:
        return False
    return True


def join_store(address: str, port: int, timeout: float) -> dist.Store:
    """A client of the store at ``address:port``, waiting up to ``timeout`` for it to listen.

    torch's client waits forever for an answer from whatever accepts the
    connection; a listener that does not answer as a store within
    :data:`ANSWER_S` (twice in a row) raises :class:`StoreJoinError` naming
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
    silent = 0
    while thread.join(ANSWER_S) or thread.is_alive():
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


class RemoteError(RuntimeError):
    """A failure of another process whose exception could not be transferred as itself."""


class StoreJoinError(LaunchError):
    """This process cannot host or join its run's store: the port is taken, or by another run."""


@functools.cache
def remote_class(name: str) -> type[RemoteError]:
    """A :class:`RemoteError` class named ``name``: another process's exception type, rebuilt."""
    return type(name, (RemoteError,), {"__module__": __name__})


def failure_record(exc: BaseException, rank: int) -> dict[str, Any]:
    """A rank's exception as plain data (type name, message, traceback text, how a process died)."""
    from ..launcher.liveness import RankDiedError  # the liveness module imports this one

    exc.hccl_rank = rank
    if not hasattr(exc, "hccl_traceback"):
        exc.hccl_traceback = "".join(traceback.format_exception(exc))
    return {
        "rank": rank,
        "type": type(exc).__name__,
        "message": str(exc),
        "traceback": exc.hccl_traceback,
        "how": getattr(exc, "how", None) if isinstance(exc, RankDiedError) else None,
    }


def failure_from(record: Any) -> BaseException:
    """The exception :func:`failure_record` described (a stand-in of the same type name)."""
    from ..launcher.liveness import RankDiedError  # the liveness module imports this one

    fields = {"rank": int, "type": str, "message": str, "traceback": str, "how": (str, type(None))}
    if type(record) is not dict or set(record) != set(fields):
        raise ValueError(f"not a failure record: {str(record)[:80]}")
    if not all(isinstance(record[k], kind) for k, kind in fields.items()):
        raise ValueError(f"a failure record with fields of the wrong types: {str(record)[:80]}")
    if record["how"] is not None:
        exc: BaseException = RankDiedError(record["message"])
        exc.how = record["how"]
    else:
        exc = remote_class(record["type"])(record["message"])
    exc.hccl_rank = record["rank"]
    exc.hccl_traceback = record["traceback"]
    return exc


def report_abort(store: dist.Store, exc: BaseException, rank: int) -> bool:
    """Publish ``rank``'s failure ``exc`` as the job's abort reason (plain data); the first one wins."""
    if store.add("abort_votes", 1) != 1:
        return False
    store.set(ABORT, sealed.dump_json(ABORT, failure_record(exc, rank)))
    return True


def read_abort(store: dist.Store) -> BaseException:
    """The job's abort reason, or the :class:`~.sealed.ForgedValueError` that refused it."""
    raw = store.get(ABORT)
    try:
        return failure_from(sealed.load_json(ABORT, raw))
    except ValueError as exc:
        return sealed.refused(ABORT, raw, str(exc))
    except sealed.ForgedValueError as exc:
        return exc


def describe_abort(exc: BaseException) -> str:
    """``rank 1: ValueError: ...``, or the refusal of a forged abort reason."""
    if isinstance(exc, sealed.ForgedValueError):
        return f"{type(exc).__name__}: {exc}"
    return f"rank {exc.hccl_rank}: {type(exc).__name__}: {exc}"


def encode_failure(exc: BaseException, rank: int, key: str) -> bytes:
    """A rank's exception (with its traceback text) for store key ``key``.

    Pickled (the exception itself) when the run has a secret; otherwise as
    plain data, rebuilt as a stand-in of the same type name.
    """
    record = failure_record(exc, rank)
    if sealed.secret() is None:
        return sealed.dump_json(key, {"err": record})
    try:
        return sealed.dump_pickle(key, ("err", exc))
    except Exception:  # noqa: BLE001 - any pickling failure falls back to the stand-in
        return sealed.dump_pickle(key, ("err", failure_from(record)))


def _fact(value: Any) -> Any:
    """A warning's fact as plain data (its text when it is not plain)."""
    try:
        return sealed.to_plain(value)
    except TypeError:
        return str(value)


def _plain_result(value: Any) -> Any:
    """What ``hp.run``'s function returned (a :class:`RankOutcome`, or a bare value) as plain data."""
    if not isinstance(value, RankOutcome):
        return sealed.to_plain(value)
    warnings = [
        {"kind": w.kind, "reason": w.reason, "facts": {k: _fact(v) for k, v in w.facts().items()}}
        for w in value.warnings
    ]
    return {"o": [sealed.to_plain(value.value), warnings, sealed.to_plain(value.trace)]}


def _result_from_plain(data: Any) -> Any:
    """The value :func:`_plain_result` encoded; :class:`ValueError` for anything else."""
    if type(data) is not dict or set(data) != {"o"}:
        return sealed.from_plain(data)
    value, warnings, trace = data["o"]
    if type(warnings) is not list:
        raise ValueError("the warnings of an outcome are not a list")
    rebuilt = []
    for w in warnings:
        if type(w) is not dict or set(w) != {"kind", "reason", "facts"}:
            raise ValueError(f"not a warning: {str(w)[:80]}")
        if (
            type(w["kind"]) is not str
            or type(w["reason"]) is not str
            or type(w["facts"]) is not dict
        ):
            raise ValueError(f"a warning with fields of the wrong types: {str(w)[:80]}")
        facts = {k: sealed.from_plain(v) for k, v in w["facts"].items()}
        rebuilt.append(HcclWarning(w["kind"], w["reason"], **facts))
    return RankOutcome(sealed.from_plain(value), rebuilt, sealed.from_plain(trace))


def encode_result(value: Any, rank: int, key: str) -> bytes:
    """A rank's return value for store key ``key``; one that cannot travel becomes its failure.

    Without a secret only plain values travel (:func:`~.sealed.to_plain`).
    """
    try:
        if sealed.secret() is None:
            return sealed.dump_json(key, {"ok": _plain_result(value)})
        return sealed.dump_pickle(key, ("ok", value))
    except Exception as exc:  # noqa: BLE001 - reported as the rank's failure
        how = (
            f"without {sealed.SECRET_ENV} only None, bool, int, float, str, lists, tuples and "
            f"str-keyed dicts of them travel, and it holds {exc}; set {sealed.SECRET_ENV} to the "
            "same value in every rank to send any picklable value (see 'Security' in "
            "docs/backends.md)"
            if sealed.secret() is None
            else f"{exc}; return picklable values from the function given to hp.run"
        )
        error = TypeError(
            f"the return value of rank {rank} ({type(value).__name__}) cannot be sent to the "
            f"other processes: {how}"
        )
        return encode_failure(error, rank, key)


def decode(key: str, raw: bytes) -> tuple[str, Any]:
    """``("ok", value)`` or ``("err", exception)`` from :func:`encode_result` / :func:`encode_failure`.

    Raises :class:`~.sealed.ForgedValueError` for anything hccl_py did not write for ``key``.
    """
    kind, value = sealed.load(key, raw)
    try:
        if kind == sealed.PICKLE:
            status, payload = value
            if status in ("ok", "err"):
                return status, payload
        elif type(value) is dict and len(value) == 1:
            ((status, payload),) = value.items()
            if status == "ok":
                return status, _result_from_plain(payload)
            if status == "err":
                return status, failure_from(payload)
    except (TypeError, ValueError) as exc:
        raise sealed.refused(key, raw, f"it is not an outcome: {exc}") from None
    raise sealed.refused(key, raw, "it is not an outcome")


def read_int(store: dist.Store, key: str) -> int:
    """The integer text at ``key``; :class:`~.sealed.ForgedValueError` when it is not one."""
    raw = store.get(key)
    try:
        return int(raw)
    except ValueError:
        raise sealed.refused(key, raw, "hccl_py writes a number there") from None


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
