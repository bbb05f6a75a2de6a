"""What hccl_py reads back from the store: plain data, or pickles sealed with the run's secret.

Anyone who can reach a store can write to it, so nothing read from a store is
trusted as code. Every value hccl_py writes is framed as
``hccl_py/1 <kind> <tag> <payload>``:

- ``json``: plain data (abort reasons, task descriptors, the run's mark); loading it
  runs no code whatever it holds.
- ``pickle``: what must stay pickled (return values, exceptions, tensors of every
  dtype); it is written and loaded only with a secret.

``tag`` is the HMAC-SHA256 of the key, the kind and the payload under the run's
secret (:data:`SECRET_ENV`), or ``-`` when the process has none. A value whose
tag does not verify, an unsigned pickle, or anything not framed like this is
refused with :class:`ForgedValueError` and never loaded. The secret travels to
the ranks by environment, as ``multiprocessing`` hands its authkey to children:
hccl_py's runner and ``hp.run`` create one per run; under torchrun or msrun the
user sets it (see "Security" in docs/backends.md).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
from typing import Any

from ..core.errors import ForgedValueError
from ..core.plain import NOT_JSON, json_or
from . import wire

#: The per-run secret that authenticates what travels through the store (any string).
SECRET_ENV = "HCCL_PY_SECRET"
MAGIC = b"hccl_py/1"
JSON = b"json"
PICKLE = b"pickle"
UNSIGNED = b"-"
#: How many bytes of a refused value its error quotes.
SHOWN_BYTES = 80


def secret() -> bytes | None:
    """This process's run secret (:data:`SECRET_ENV`), or None."""
    value = os.environ.get(SECRET_ENV, "")
    return value.encode() if value else None


def ensure_secret() -> str:
    """The run secret, created (and put in this process's environment) when there is none."""
    value = os.environ.get(SECRET_ENV) or secrets.token_hex(32)
    os.environ[SECRET_ENV] = value
    return value


def _tag(key: str, kind: bytes, payload: bytes, secret_key: bytes) -> bytes:
    mac = hmac.new(secret_key, key.encode() + b"\0" + kind + b"\0", hashlib.sha256)
    mac.update(payload)
    return mac.hexdigest().encode()


def seal(key: str, kind: bytes, payload: bytes) -> bytes:
    """``payload`` framed for store key ``key``, signed when this process has a secret."""
    secret_key = secret()
    tag = UNSIGNED if secret_key is None else _tag(key, kind, payload, secret_key)
    return b" ".join((MAGIC, kind, tag, payload))


def refused(key: str, raw: bytes, why: str) -> ForgedValueError:
    """The error for the value ``raw`` of store key ``key``, refused because ``why``."""
    shown = repr(raw[:SHOWN_BYTES])
    if len(raw) > SHOWN_BYTES:
        shown += f" (the first {SHOWN_BYTES} of {len(raw)} bytes)"
    return ForgedValueError(
        f"refused the value of store key {key!r}: {why}; it was not loaded. The value: {shown}. "
        "Some other process can write to this run's store (see 'Security' in docs/backends.md)"
    )


def unseal(key: str, raw: bytes) -> tuple[bytes, bytes]:
    """``(kind, payload)`` of a value :func:`seal` wrote for ``key``; :class:`ForgedValueError` otherwise."""
    parts = bytes(raw).split(b" ", 3)
    if len(parts) != 4 or parts[0] != MAGIC or parts[1] not in (JSON, PICKLE):
        raise refused(key, raw, "hccl_py did not write it (it is not framed as hccl_py's values)")
    _, kind, tag, payload = parts
    secret_key = secret()
    if secret_key is None:
        if tag != UNSIGNED:
            raise refused(
                key,
                raw,
                f"it is signed, but this process has no {SECRET_ENV}: give every rank of the run "
                "the same secret",
            )
        if kind == PICKLE:
            raise refused(key, raw, "an unsigned pickle is never loaded")
    elif not hmac.compare_digest(tag, _tag(key, kind, payload, secret_key)):
        why = (
            "it carries no signature"
            if tag == UNSIGNED
            else f"its signature does not match this run's {SECRET_ENV}"
        )
        raise refused(key, raw, f"{why} (another run, or not hccl_py, wrote it)")
    return kind, payload


def dump_json(key: str, value: Any) -> bytes:
    """Plain data for store key ``key``."""
    return seal(key, JSON, json.dumps(value, separators=(",", ":")).encode())


def dump_pickle(key: str, value: Any) -> bytes:
    """A pickle (:mod:`hccl_py.launcher.wire`) for store key ``key``; needs a secret."""
    if secret() is None:
        raise RuntimeError(f"pickles travel through the store only with {SECRET_ENV} set")
    return seal(key, PICKLE, wire.dumps(value))


def _json(key: str, raw: bytes, payload: bytes) -> Any:
    value = json_or(payload, NOT_JSON)
    if value is NOT_JSON:
        raise refused(key, raw, "its plain data is not JSON")
    return value


def load(key: str, raw: bytes) -> tuple[bytes, Any]:
    """``(kind, value)`` of a value written by :func:`dump_json` or :func:`dump_pickle` for ``key``."""
    kind, payload = unseal(key, raw)
    return kind, wire.loads(payload) if kind == PICKLE else _json(key, raw, payload)


def load_json(key: str, raw: bytes) -> Any:
    """The plain data of store key ``key`` (a pickle there is refused, even a signed one)."""
    kind, payload = unseal(key, raw)
    if kind != JSON:
        raise refused(key, raw, "hccl_py writes plain data (JSON) there")
    return _json(key, raw, payload)


# --------------------------------------------------------------- plain values
_TAGS = {list: "l", tuple: "t", dict: "d"}


def to_plain(value: Any) -> Any:
    """``value`` as JSON that :func:`from_plain` turns back into an equal value.

    Carries None, bool, int, float, str, and lists, tuples and str-keyed dicts
    of them; raises :class:`TypeError` naming the first other type.
    """
    if value is None or type(value) in (bool, int, float, str):
        return value
    tag = _TAGS.get(type(value))
    if tag == "d":
        if not all(type(k) is str for k in value):
            raise TypeError("a dict whose keys are not all str")
        return {"d": {k: to_plain(v) for k, v in value.items()}}
    if tag is not None:
        return {tag: [to_plain(v) for v in value]}
    raise TypeError(f"a {type(value).__module__}.{type(value).__qualname__}")


def from_plain(data: Any) -> Any:
    """The value :func:`to_plain` encoded; :class:`ValueError` for anything else."""
    if data is None or type(data) in (bool, int, float, str):
        return data
    if type(data) is dict and len(data) == 1:
        ((tag, items),) = data.items()
        if tag == "d" and type(items) is dict:
            return {k: from_plain(v) for k, v in items.items()}
        if tag in ("l", "t") and type(items) is list:
            values = [from_plain(v) for v in items]
            return values if tag == "l" else tuple(values)
    raise ValueError(f"not a plain value: {str(data)[:SHOWN_BYTES]}")
