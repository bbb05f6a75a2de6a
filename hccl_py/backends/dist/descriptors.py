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


def stub(task: Task, **changes: Any) -> Task:
    """A copy of ``task`` (with ``changes``) for the descriptor exchange (no memory, no dependencies)."""
    return task.replaced(send=NULL, recv=NULL, deps=(), **changes)


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
#: Per field, in the order of ``_DESCRIPTOR``: the Python types its JSON value may have.
_ALLOWED = tuple(
    frozenset({kind, type(None)} if optional else {kind})
    for kind, _, optional in _DESCRIPTOR.values()
)
_ENUMS = tuple((name, members) for name, (_, members, _) in _DESCRIPTOR.items() if members)
_LISTS = tuple(name for name, (kind, _, _) in _DESCRIPTOR.items() if kind is list)


def _fields(data: dict[str, Any]) -> dict[str, Any]:
    """A descriptor's fields as the task holds them; ValueError naming the first bad field.

    The types of all values are checked at once (in C); then the enums are looked
    up and the per-peer lists checked and made tuples.
    """
    values = [data[name] for name in _DESCRIPTOR]
    if not all(map(frozenset.__contains__, _ALLOWED, map(type, values))):
        for name, value, allowed in zip(_DESCRIPTOR, values, _ALLOWED, strict=True):
            if type(value) not in allowed:
                kind = _DESCRIPTOR[name][0].__name__
                raise ValueError(f"{name}: {str(value)[:60]} is not a {kind}")
    fields = dict(zip(_DESCRIPTOR, values, strict=True))
    for name, members in _ENUMS:
        value = fields[name]
        if value is not None:
            member = members._value2member_map_.get(value)
            if member is None:
                raise ValueError(f"{name}: {value} is not a valid {members.__name__}")
            fields[name] = member
    for name in _LISTS:
        value = fields[name]
        if value is not None:
            if not all(type(v) is int for v in value):
                raise ValueError(f"{name}: {str(value)[:60]} is not a list of int")
            fields[name] = tuple(value)
    return fields


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
        fields = _fields(data)
        if fields["rank"] != index:
            raise ValueError(f"it describes domain rank {fields['rank']}, not {index}")
    except ValueError as exc:
        raise sealed.refused(key, raw, f"it is not a task descriptor: {exc}") from None
    return stub(like, **fields)


def desc_key(domain: str, seq: int, rank: int) -> str:
    return f"desc/{domain}/{seq}/{rank}"


def final_key(domain: str, launch: int, rank: int) -> str:
    return f"final/{domain}/{launch}/{rank}"


def returned_key(rank: int) -> str:
    """Set (in a run's keys) when global rank ``rank`` returned from the function of hp.run."""
    return f"returned/{rank}"
