"""Task descriptors as plain data: what ranks compare before a task's first round.

A descriptor is the task without memory or dependencies (:func:`stub`), written
as JSON (:func:`encode_descriptor`) and read back field by field with exact
types (:func:`decode_descriptor`): nothing a peer sends is unpickled. The ranks
exchange them over the domain's process group, in the same all-gather a
framework collective's arguments travel in, so a descriptor is a record with the
``op`` and ``problem`` keys that those arguments have too: a rank that runs a
framework collective where its peer runs a kernel task reads, on both sides,
that they called different collectives.
"""

from __future__ import annotations

import enum
import json
import operator
from typing import Any

import torch.distributed as dist

from ...core.constants import HcclCMDType, HcclDataType, HcclReduceOp
from ...core.errors import HcclMismatchError
from ...core.gm import NULL
from ...core.plain import json_or
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
    "steps": (int, None, False),
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
                raise ValueError(f"{name}: {repr(value)[:60]} is not of type {kind}")
    fields = dict(zip(_DESCRIPTOR, values, strict=True))
    for name, members in _ENUMS:
        value = fields[name]
        if value is not None:
            member = members._value2member_map_.get(value)
            if member is None:
                raise ValueError(f"{name}: {value!r} is not a valid {members.__name__}")
            fields[name] = member
    for name in _LISTS:
        value = fields[name]
        if value is not None:
            if not all(type(v) is int for v in value):
                raise ValueError(f"{name}: {repr(value)[:60]} is not a list of int")
            fields[name] = tuple(value)
    return fields


#: A task's descriptor fields, in the order of ``_DESCRIPTOR``, read in one call.
_VALUES = operator.attrgetter(*_DESCRIPTOR)
_SEQ, _LAUNCH = list(_DESCRIPTOR).index("seq"), list(_DESCRIPTOR).index("launch")
#: Descriptors made so far, as templates that take ``seq`` and ``launch`` (a kernel launched
#: again changes only those), by the other fields' values and types; cleared when full.
_TEMPLATES: dict[tuple, bytes] = {}
_MAX_TEMPLATES = 1024


def encode_descriptor(task: Task) -> bytes:
    """``task``'s descriptor as the plain JSON record its peers compare.

    Made once per kind of task (:func:`_template`): a kernel's tasks differ from launch to
    launch only in their position and launch, and the check encodes one per task.
    """
    values = _VALUES(task)
    key = (values[:_SEQ] + values[_SEQ + 1 : _LAUNCH] + values[_LAUNCH + 1 :], *map(type, values))
    template = _TEMPLATES.get(key)
    if template is None:
        raw = _encode(task)
        template = _template(raw, task.seq, task.launch)
        if template is None:
            return raw
        if len(_TEMPLATES) >= _MAX_TEMPLATES:
            _TEMPLATES.clear()
        _TEMPLATES[key] = template
    return template % {b"seq": task.seq, b"launch": task.launch}


def _encode(task: Task) -> bytes:
    """``task``'s descriptor, made field by field."""
    data = {}
    for name in _DESCRIPTOR:
        value = getattr(task, name)
        data[name] = list(value) if isinstance(value, tuple) else value
    record = {"op": f"kernel task #{task.seq} ({task.describe()})", "problem": None, "task": data}
    return json.dumps(record, separators=(",", ":")).encode()


def _template(raw: bytes, seq: int, launch: int) -> bytes | None:
    """Descriptor ``raw`` (of task ``seq`` of kernel launch ``launch``) with ``%(seq)d`` and
    ``%(launch)d`` where those numbers stand; None if it does not give ``raw`` back.

    Each stands once where a key or the record's head names it: JSON escapes the quotes
    of any text inside a string, so ``"seq":`` cannot stand in the description.
    """
    template = raw.replace(b"%", b"%%")
    for old, new in (
        (b'{"op":"kernel task #%d ' % seq, b'{"op":"kernel task #%(seq)d '),
        (b',"seq":%d,' % seq, b',"seq":%(seq)d,'),
        (b',"launch":%d,' % launch, b',"launch":%(launch)d,'),
    ):
        if template.count(old) != 1:
            return None
        template = template.replace(old, new)
    return template if template % {b"seq": seq, b"launch": launch} == raw else None


def decode_descriptor(raw: bytes, like: Task, index: int) -> Task:
    """The task that domain rank ``index`` sent (``raw``), in ``like``'s domain.

    Raises :class:`HcclMismatchError` for anything but that rank's task
    descriptor, naming what it sent instead (a framework collective's arguments).
    """
    peer = like.domain.ranks[index]
    record = json_or(raw)
    data = record.get("task") if type(record) is dict else None
    try:
        if type(data) is not dict:
            called = record.get("op") if type(record) is dict else None
            raise ValueError(
                f"it called {called}" if type(called) is str else f"it sent {raw[:60]!r}"
            )
        if data.keys() != _NAMES:
            raise ValueError(f"it sent {raw[:60]!r}, whose fields are not a task descriptor's")
        fields = _fields(data)
        if fields["rank"] != index:
            raise ValueError(f"it described domain rank {fields['rank']}, not {index}")
    except ValueError as exc:
        raise HcclMismatchError(
            f"ranks of domain {like.domain_name} called different collectives at the same "
            f"point: rank {like.domain.ranks[like.rank]} compares kernel task #{like.seq} "
            f"(handle {like.handle}, {like.describe()}) with its peers, rank {peer} did not: "
            f"{exc}"
        ) from None
    return stub(like, **fields)


def decode_all(task: Task, mine: bytes, payloads: list[bytes]) -> list[Task]:
    """Every domain rank's task, from the descriptors gathered in domain order (``mine`` is ``task``'s).

    A peer's descriptor that is this rank's own, byte for byte, but for the
    ``rank`` field describes the same task at that rank: it is not parsed again
    (what most tasks of a correct kernel send). Anything else is decoded and
    checked field by field (:func:`decode_descriptor`).
    """
    own = b'"rank":%d,' % task.rank
    return [
        task
        if i == task.rank
        else stub(task, rank=i)
        if raw == mine.replace(own, b'"rank":%d,' % i, 1)
        else decode_descriptor(raw, task, i)
        for i, raw in enumerate(payloads)
    ]


def joined_key(domain: str, seq: int, rank: int) -> str:
    """Set by a rank that has waited :data:`~.session.LOOK_S` in the exchange of task ``seq``.

    Only a slow exchange writes it (and deletes it after): it tells a report
    which peers have prepared the task and which have not.
    """
    return f"joined/{domain}/{seq}/{rank}"


def final_key(domain: str, rank: int) -> str:
    """Holds ``"LAUNCH N"``: the last kernel launch in which domain rank ``rank`` finalized, after N tasks.

    One key per rank and domain, overwritten at each Finalize of a launch that
    queued tasks (a store write, no count of who has read it, nothing to delete
    until the run ends). A rank that waits in the exchange of a task which that
    peer never prepared reads it. The peer cannot have gone past a later launch of
    the domain meanwhile: that launch's first task meets the waiting rank's
    exchange first (a launch mismatch, reported as such), and a launch of one-sided
    tasks only writes no count. A later launch's count read before that meeting
    only postpones the report to it.
    """
    return f"final/{domain}/{rank}"


def final_value(launch: int, n_tasks: int) -> bytes:
    return f"{launch} {n_tasks}".encode()


def read_final(store: dist.Store, key: str) -> tuple[int, int] | None:
    """``(launch, n_tasks)`` at :func:`final_key` ``key``, None while it is not set.

    Anything but two numbers is refused (:class:`~hccl_py.launcher.sealed.ForgedValueError`).
    """
    if not store.check([key]):
        return None
    raw = store.get(key)
    parts = raw.split()
    if len(parts) != 2 or not all(part.isdigit() and len(part) <= 18 for part in parts):
        raise sealed.refused(key, raw, "hccl_py writes a launch and a task count there")
    return int(parts[0]), int(parts[1])


def returned_key(rank: int) -> str:
    """Set (in a run's keys) when global rank ``rank`` returned from the function of hp.run;
    its value is :func:`returned_value`'s."""
    return f"returned/{rank}"


def returned_value(joined: dict[str, int]) -> bytes:
    """Per domain, the position of the last task whose descriptor exchange the rank joined."""
    return json.dumps(joined, separators=(",", ":")).encode()


def read_joined(store: dist.Store, rank: int, domain: str) -> int | None:
    """The last position of domain ``domain`` whose exchange global rank ``rank`` joined before
    it returned (it joins them in order; -1 for none), from :func:`returned_key`; None while it
    has not returned.

    Anything but a record of domain names and positions is refused
    (:class:`~hccl_py.launcher.sealed.ForgedValueError`).
    """
    key = returned_key(rank)
    if not store.check([key]):
        return None
    joined = _per_domain(key, store.get(key), "the task positions")
    return joined.get(domain, -1)


def _per_domain(key: str, raw: bytes, what: str) -> dict[str, int]:
    """A record of domain names to non-negative ints (``what`` they count) read at ``key``;
    anything else is refused (:class:`~hccl_py.launcher.sealed.ForgedValueError`)."""
    found = json_or(raw)
    if type(found) is not dict or not all(type(v) is int and v >= 0 for v in found.values()):
        raise sealed.refused(key, raw, f"hccl_py writes {what} of its domains there")
    return found


def exchanged_key(rank: int) -> str:
    """Set (in a run's keys) just before :func:`returned_key`: per domain, how many framework
    argument exchanges global rank ``rank`` took part in (JSON, domain name to count)."""
    return f"exchanged/{rank}"


def left_before(store: dist.Store, rank: int, domain: str, number: int) -> bool:
    """Whether global rank ``rank`` returned from its function without taking part in framework
    exchange ``number`` (from 0) of ``domain``: it will never join it. One that returned right
    after taking part in it (its last collective) is not absent.

    Anything but a record of domain names and counts is refused
    (:class:`~hccl_py.launcher.sealed.ForgedValueError`).
    """
    if not store.check([returned_key(rank)]):
        return False
    key = exchanged_key(rank)
    raw = store.get(key) if store.check([key]) else b"{}"
    return _per_domain(key, raw, "the exchange counts").get(domain, 0) <= number
