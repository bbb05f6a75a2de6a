"""Task descriptors as plain data: what ranks compare before a task's first round.

A descriptor is the task without memory or dependencies (:func:`stub`), written
as JSON (:func:`encode_descriptor`) and read back field by field with exact
types (:func:`decode_descriptor`): nothing read from the store is unpickled.
"""

from __future__ import annotations

import enum
from typing import Any

from ...core.constants import HcclCMDType, HcclDataType, HcclReduceOp
from ...core.gm import NULL
from ...core.task import Task
from ...launcher import sealed


def stub(task: Task) -> Task:
    """A copy of ``task`` for the descriptor exchange (no memory, no dependencies)."""
    return task.replaced(send=NULL, recv=NULL, deps=())


#: The fields of a task descriptor: (the JSON type of its value, the enum it names or None,
#: whether it may be null). Every value is read back with exactly that type.
_DESCRIPTOR: dict[str, tuple[type, type[enum.IntEnum] | None, bool]] = {
    "op": (int, HcclCMDType, False),
    "rank": (int, None, False),
    "rank_dim": (int, None, False),
    "handle": (int, None, False),
    "seq": (int, None, False),
    "dtype": (int, HcclDataType, False),
    "count": (int, None, False),
    "reduce_op": (int, HcclReduceOp, True),
    "stride": (int, None, False),
    "repeat": (int, None, False),
    "send_counts": (list, None, True),
    "sdispls": (list, None, True),
    "recv_counts": (list, None, True),
    "rdispls": (list, None, True),
    "skip_local": (bool, None, False),
    "launch": (int, None, False),
    "caller": (str, None, True),
    "one_sided_before": (int, None, False),
}
_NAMES = frozenset(_DESCRIPTOR)


def _read(name: str, value: Any) -> Any:
    """Field ``name`` of a descriptor as the task holds it; ValueError if it is not of its type."""
    kind, members, optional = _DESCRIPTOR[name]
    if value is None and optional:
        return None
    if type(value) is not kind:
        raise ValueError(f"{name}: {str(value)[:60]} is not a {kind.__name__}")
    if members is not None:
        member = members._value2member_map_.get(value)
        if member is None:
            raise ValueError(f"{name}: {value} is not a valid {members.__name__}")
        return member
    if kind is list:
        if not all(type(v) is int for v in value):
            raise ValueError(f"{name}: {str(value)[:60]} is not a list of int")
        return tuple(value)
    return value


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
        if type(data) is not dict or data.keys() != _NAMES:
            raise ValueError("its fields are not a task descriptor's")
        fields = {name: _read(name, value) for name, value in data.items()}
        if fields["rank"] != index:
            raise ValueError(f"it describes domain rank {fields['rank']}, not {index}")
    except ValueError as exc:
        raise sealed.refused(key, raw, f"it is not a task descriptor: {exc}") from None
    return like.replaced(send=NULL, recv=NULL, deps=(), **fields)


def desc_key(domain: str, seq: int, rank: int) -> str:
    return f"desc/{domain}/{seq}/{rank}"


def final_key(domain: str, launch: int, rank: int) -> str:
    return f"final/{domain}/{launch}/{rank}"


def returned_key(rank: int) -> str:
    """Set (in a run's keys) when global rank ``rank`` returned from the function of hp.run."""
    return f"returned/{rank}"
