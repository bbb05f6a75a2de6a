"""What the ranks exchange through the store: outcomes of ``hp.run`` and the abort reason.

The abort reason is always plain data (:func:`failure_record`). Outcomes are
pickled and signed when the run has a secret (:mod:`.sealed`), and plain data
otherwise: the return value, its HcclWarnings and trace, or the exception as
a stand-in of the same type name.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import time
import traceback
from typing import Any

import torch.distributed as dist

from ..core.errors import HcclWarning, error_message
from ..kernel.outcome import RankOutcome
from ..launcher.liveness import RankDiedError
from . import sealed, wire
from . import store as kv


@functools.cache
def remote_class(name: str) -> type[kv.RemoteError]:
    """A :class:`~.store.RemoteError` class named ``name``: another process's exception type, rebuilt."""
    return type(name, (kv.RemoteError,), {"__module__": __name__})


def failure_record(exc: BaseException, rank: int) -> dict[str, Any]:
    """A rank's exception as plain data (type name, message, traceback text, how a process died)."""
    exc.hccl_rank = rank
    if not hasattr(exc, "hccl_traceback"):
        exc.hccl_traceback = "".join(traceback.format_exception(exc))
    return {
        "rank": rank,
        "type": type(exc).__name__,
        "message": error_message(exc),
        "traceback": exc.hccl_traceback,
        "how": getattr(exc, "how", None) if isinstance(exc, RankDiedError) else None,
    }


#: Control characters a terminal acts on (escape sequences, carriage returns), as a record's
#: text shows them: escaped, whoever wrote the record (without a secret, anyone the store lets in).
_SHOWN_ESCAPED = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F) if chr(c) not in "\n\t"}


def failure_from(record: Any) -> BaseException:
    """The exception :func:`failure_record` described (a stand-in of the same type name), its
    texts with control characters escaped."""
    fields = {"rank": int, "type": str, "message": str, "traceback": str, "how": (str, type(None))}
    if type(record) is not dict or set(record) != set(fields):
        raise ValueError(f"not a failure record: {str(record)[:80]}")
    if not all(isinstance(record[k], kind) for k, kind in fields.items()):
        raise ValueError(f"a failure record with fields of the wrong types: {str(record)[:80]}")
    record = {k: v.translate(_SHOWN_ESCAPED) if type(v) is str else v for k, v in record.items()}
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
    store.set(kv.ABORT, sealed.dump_json(kv.ABORT, failure_record(exc, rank)))
    return True


def read_abort(store: dist.Store) -> BaseException:
    """The job's abort reason, or the :class:`~.sealed.ForgedValueError` that refused it."""
    raw = store.get(kv.ABORT)
    try:
        return failure_from(sealed.load_json(kv.ABORT, raw))
    except ValueError as exc:
        return sealed.refused(kv.ABORT, raw, str(exc))
    except sealed.ForgedValueError as exc:
        return exc


def forged_abort(store: dist.Store) -> sealed.ForgedValueError | None:
    """The refusal of the job's abort reason if one is in ``store`` and it is forged, or None:
    a rank whose function returned before it noticed one still fails the run with it."""
    if not store.check([kv.ABORT]):
        return None
    found = read_abort(store)
    return found if isinstance(found, sealed.ForgedValueError) else None


def describe_abort(exc: BaseException) -> str:
    """``rank 1: ValueError: ...``, or the refusal of a forged abort reason."""
    if isinstance(exc, sealed.ForgedValueError):
        return f"{type(exc).__name__}: {exc}"
    return f"rank {exc.hccl_rank}: {type(exc).__name__}: {exc}"


#: How a pickled failure travels: the exception's own pickle and its plain record.
ERR_WITH_RECORD = "err+record"


def encode_failure(exc: BaseException, rank: int, key: str) -> bytes:
    """A rank's exception (with its traceback text) for store key ``key``.

    Pickled (the exception itself, with its plain record beside it) when the run has a
    secret and the exception pickles and rebuilds; otherwise as the plain record alone,
    rebuilt as a stand-in of the same type name (as a reader that lacks its class does).
    """
    record = failure_record(exc, rank)
    if sealed.secret() is None:
        return sealed.dump_json(key, {"err": record})
    try:
        pickled = wire.dumps(exc)
        wire.loads(pickled)  # it must rebuild too: an __init__ of other arguments does not
    except Exception:  # noqa: BLE001 - any pickling failure falls back to the stand-in's data
        return sealed.dump_json(key, {"err": record})
    # the record beside it: a reader that cannot rebuild the exception rebuilds the stand-in
    return sealed.dump_pickle(key, (ERR_WITH_RECORD, (pickled, record)))


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


def encode_result(value: Any, rank: int, key: str, store: Any = None) -> bytes:
    """A rank's return value for store key ``key`` (of ``store``); one that cannot travel
    becomes its failure.

    Without a secret only plain values travel (:func:`~.sealed.to_plain`). The
    failure names the type of the function's own return value, not of the
    :class:`RankOutcome` that carries it.
    """
    try:
        if sealed.secret() is None:
            raw = sealed.dump_json(key, {"ok": _plain_result(value)})
        else:
            raw = sealed.dump_pickle(key, ("ok", value))
    except Exception as exc:  # noqa: BLE001 - reported as the rank's failure
        how = (
            f"without {sealed.SECRET_ENV} only None, bool, int, float, str, lists, tuples and "
            f"str-keyed dicts of them travel, and it holds {exc}; set {sealed.SECRET_ENV} to the "
            "same value in every rank to send any picklable value (see 'Security' in "
            "docs/backends.md)"
            if sealed.secret() is None
            else f"{exc}; return picklable values from the function given to hp.run"
        )
        returned = value.value if isinstance(value, RankOutcome) else value
        error = TypeError(
            f"the return value of rank {rank} ({type(returned).__name__}) cannot be sent to the "
            f"other processes: {how}"
        )
        return encode_failure(error, rank, key)
    return fits_store(raw, store, rank, key)


#: The largest value torch's TCPStore takes (its "Invalid payload size ... max"): a larger
#: one resets the connection.
TCP_STORE_MAX_BYTES = 8 * 1024 * 1024


def fits_store(outcome: bytes, store: Any, rank: int, key: str) -> bytes:
    """``outcome``, or rank ``rank``'s failure where ``store`` is a TCPStore that cannot carry it
    (under a launcher; ``hp.run``'s own FileStore has no such limit)."""
    while isinstance(store, dist.PrefixStore):
        store = store.underlying_store
    if len(outcome) + len(key) + 1024 <= TCP_STORE_MAX_BYTES or not isinstance(
        store, dist.TCPStore
    ):
        return outcome
    error = ValueError(
        f"the return value of rank {rank} is {len(outcome) / 2**20:.1f} MiB encoded, more than "
        f"the {TCP_STORE_MAX_BYTES // 2**20} MiB that the run's TCPStore carries (under a "
        "launcher, return values travel through it); return less, or write the data to a file "
        "and return its name"
    )
    return encode_failure(error, rank, key)


def decode(key: str, raw: bytes) -> tuple[str, Any]:
    """``("ok", value)`` or ``("err", exception)`` from :func:`encode_result` / :func:`encode_failure`.

    Raises :class:`~.sealed.ForgedValueError` for anything hccl_py did not write for ``key``;
    a pickle the run signed whose objects do not rebuild in this process (a class this
    process lacks, an ``__init__`` that takes other arguments) is an ``("err", TypeError)``.
    """
    try:
        kind, value = sealed.load(key, raw)
    except sealed.ForgedValueError:
        raise
    except Exception as exc:  # noqa: BLE001 - unpickling runs the sender's classes' code
        return "err", TypeError(
            f"what the rank sent could not be rebuilt in this process ({type(exc).__name__}: "
            f"{exc}); return values whose classes this process can import and rebuild"
        )
    try:
        if kind == sealed.PICKLE:
            status, payload = value
            if status == "ok":
                return status, payload
            if status == ERR_WITH_RECORD:
                pickled, record = payload
                try:
                    return "err", wire.loads(pickled)
                except Exception:  # noqa: BLE001 - a class this process lacks, say
                    return "err", failure_from(record)
        elif type(value) is dict and len(value) == 1:
            ((status, payload),) = value.items()
            if status == "ok":
                return status, _result_from_plain(payload)
            if status == "err":
                return status, failure_from(payload)
    except (TypeError, ValueError) as exc:
        raise sealed.refused(key, raw, f"it is not an outcome: {exc}") from None
    raise sealed.refused(key, raw, "it is not an outcome")


def record_for_torchrun(error: BaseException) -> None:
    """Write the failure where torchrun's agent looks for it, so its summary names the ranks.

    torchrun picks the failure with the earliest timestamp as the root cause;
    every failed rank writes the same report, which lists the root causes first.
    The file is created exclusively: one that exists (another process wrote it, or planted
    it) is left alone.
    """
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if not path:
        return
    data = {
        "message": {
            "message": f"{type(error).__name__}: {error}",
            "extraInfo": {"py_callstack": str(error), "timestamp": str(int(time.time()))},
        }
    }
    with contextlib.suppress(FileExistsError), open(path, "x") as out:
        json.dump(data, out)
