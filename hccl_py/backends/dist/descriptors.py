"""Task descriptors as plain data: what ranks compare before a task's first round.

A descriptor is the task without memory or dependencies (:func:`stub`), written
as JSON (:func:`encode_descriptor`) and read back field by field with exact
types (:func:`decode_descriptor`): nothing read from the store is unpickled.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from ...core.constants import HcclCMDType, HcclDataType, HcclReduceOp
from ...core.gm import NULL
from ...core.task import Task
from ...launcher import sealed


def stub(task: Task) -> Task:
    """A copy of ``task`` for the descriptor exchange (no memory, no dependencies)."""
    return dataclasses.replace(task, send=NULL, recv=NULL, deps=())


def _exact(kind: type) -> Callable[[Any], Any]:
    def read(value: Any) -> Any:
        if type(value) is not kind:
            raise ValueError(f"{value!r} is not a {kind.__name__}")
        return value

    return read


def _optional(read: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda value: None if value is None else read(value)


def _counts(value: Any) -> tuple[int, ...]:
    if type(value) is not list or not all(type(v) is int for v in value):
        raise ValueError(f"{str(value)[:60]} is not a list of int")
    return tuple(value)


#: The fields of a task descriptor, and how each is read back from plain data.
_DESCRIPTOR = {
    "op": lambda v: HcclCMDType(_exact(int)(v)),
    "rank": _exact(int),
    "rank_dim": _exact(int),
    "handle": _exact(int),
    "seq": _exact(int),
    "dtype": lambda v: HcclDataType(_exact(int)(v)),
    "count": _exact(int),
    "reduce_op": _optional(lambda v: HcclReduceOp(_exact(int)(v))),
    "stride": _exact(int),
    "repeat": _exact(int),
    "send_counts": _optional(_counts),
    "sdispls": _optional(_counts),
    "recv_counts": _optional(_counts),
    "rdispls": _optional(_counts),
    "skip_local": _exact(bool),
    "launch": _exact(int),
    "caller": _optional(_exact(str)),
    "one_sided_before": _exact(int),
}


def encode_descriptor(task: Task, key: str) -> bytes:
    """``task``'s descriptor as plain data for store key ``key`` (what the ranks compare)."""
    data = {}
    for name in _DESCRIPTOR:
        value = getattr(task, name)
        data[name] = list(value) if isinstance(value, tuple) else value
    return sealed.dump_json(key, data)


def decode_descriptor(key: str, raw: bytes, like: Task, index: int) -> Task:
    """The task that domain rank ``index`` described at ``key``, in ``like``'s domain.

    Raises :class:`~.sealed.ForgedValueError` for anything but a descriptor of that rank.
    """
    data = sealed.load_json(key, raw)
    try:
        if type(data) is not dict or set(data) != set(_DESCRIPTOR):
            raise ValueError("its fields are not a task descriptor's")
        fields = {name: read(data[name]) for name, read in _DESCRIPTOR.items()}
        if fields["rank"] != index:
            raise ValueError(f"it describes domain rank {fields['rank']}, not {index}")
    except ValueError as exc:
        raise sealed.refused(key, raw, f"it is not a task descriptor: {exc}") from None
    return dataclasses.replace(stub(like), **fields)


def desc_key(domain: str, seq: int, rank: int) -> str:
    return f"desc/{domain}/{seq}/{rank}"


def final_key(domain: str, launch: int, rank: int) -> str:
    return f"final/{domain}/{launch}/{rank}"


def returned_key(rank: int) -> str:
    """Set (in a run's keys) when global rank ``rank`` returned from the function of hp.run."""
    return f"returned/{rank}"
