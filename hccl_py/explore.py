"""``hp.run(..., explore=N)``: run a program under N schedules of the emulator.

Schedule 0 is the fixed default one; schedule ``i`` (1 .. N-1) is ``seed=i``
(random or PCT-style switches, server timings from eager to late; see
``emu/scheduler.py``). The first failing schedule raises its error with the
seed that replays it (``err.seed`` and a ``replay:`` line in the message).
Results that differ between passing schedules raise
:class:`HcclScheduleError`, naming the first rank, value and element that differ.
"""

from __future__ import annotations

import dataclasses
import enum
import itertools
import types
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from .core.config import Config
from .core.errors import HcclError, WorldError
from .core.gm import GmAddr
from .core.report import plain_repr
from .kernel.outcome import RankOutcome


class HcclScheduleError(HcclError):
    """A program's results depend on the schedule: two passing schedules disagree."""


def replay_line(seed: int | None, poison: bool) -> str:
    """How to replay schedule ``seed`` (None: the default one), in Python and on the command
    line, with the poison the schedule ran under (``explore=`` turns it on by itself, and a
    replay without it may not fail)."""
    python = ["..."] + ([f"seed={seed}"] if seed is not None else [])
    cli = ["python -m hccl_py run"] + ([f"--seed {seed}"] if seed is not None else [])
    if poison:
        python.append("poison=True")
        cli.append("--poison")
    return f"replay: hp.run({', '.join(python)}) / {' '.join(cli)}"


def first_difference(a: Any, b: Any, where: str, _path: frozenset = frozenset()) -> str | None:
    """Where ``a`` and ``b`` first differ (a path and an element), or None when they are equal.

    NaN equals NaN (in tensors, numpy arrays, floats); numpy arrays, dataclasses and objects
    without an ``==`` of their own (compared by identity, which no two schedules share) are
    compared by their elements or attributes, bound methods by their name and object, a
    ``GmAddr`` by its allocation's number and its offset; sparse tensors by their values, nested
    ones by their tensors; the same object, a value met again on its own path (a cycle), a
    value whose ``==`` raises or is no truth value, meta tensors of one shape and hccl_py's
    handles into a run (an ``Hccl``, a context, a ``Work``) count as equal (never a false
    report)."""
    if a is b or (id(a), id(b)) in _path:
        return None
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        if a.is_nested or b.is_nested:  # no shape: its tensors one by one
            if a.is_nested and b.is_nested:
                return first_difference(list(a.unbind()), list(b.unbind()), where, _path)
            return f"{where}: {'nested' if a.is_nested else a.layout} vs {'nested' if b.is_nested else b.layout}"
        if a.shape != b.shape or a.dtype != b.dtype:
            return f"{where}: {a.dtype} {tuple(a.shape)} vs {b.dtype} {tuple(b.shape)}"
        if a.is_meta or b.is_meta:  # no values to compare
            return None
        if a.layout != torch.strided or b.layout != torch.strided:  # sparse: by their values
            a, b = a.to_dense(), b.to_dense()
        same = a == b
        if a.is_floating_point() or a.is_complex():
            same |= a.isnan() & b.isnan()
        return _first_unequal(a, b, (~same).nonzero()[:1].tolist(), where)
    if type(a) is not type(b):
        return f"{where}: {type(a).__name__} vs {type(b).__name__}"
    if isinstance(a, GmAddr):  # its == asks for the same allocation object: by its number
        return None if _address(a) == _address(b) else f"{where}: {a!r} vs {b!r}"
    if _run_handle(a):
        return None
    path = _path | {(id(a), id(b))}
    if isinstance(a, _BOUND) and not isinstance(a.__self__, types.ModuleType):
        if a.__name__ != b.__name__ or getattr(a, "__func__", None) is not getattr(
            b, "__func__", None
        ):
            return f"{where}: {plain_repr(a)} vs {plain_repr(b)}"
        return first_difference(a.__self__, b.__self__, f"{where}.__self__", path)
    if isinstance(a, np.ndarray):
        if a.shape != b.shape or a.dtype != b.dtype:
            return f"{where}: {a.dtype} {a.shape} vs {b.dtype} {b.shape}"
        if a.dtype.kind not in "biufcmM":  # objects, strings, records: element by element
            return first_difference(a.tolist(), b.tolist(), where, path)
        same = a == b
        if a.dtype.kind in "fcmM":  # NaN, NaT
            same |= np.isnan(a) & np.isnan(b)
        return _first_unequal(a, b, np.argwhere(~same)[:1].tolist(), where)
    if isinstance(a, (list, tuple)):
        if len(a) != len(b):
            return f"{where}: {len(a)} items vs {len(b)}"
        pairs = [(f"{where}[{i}]", x, y) for i, (x, y) in enumerate(zip(a, b, strict=True))]
    elif isinstance(a, dict):
        if a.keys() != b.keys():
            return f"{where}: keys {sorted(map(str, a))} vs {sorted(map(str, b))}"
        pairs = [(f"{where}[{k!r}]", a[k], b[k]) for k in a]
    elif (fields := _fields(a)) is not None:
        pairs = [(f"{where}.{k}", x, y) for k, x, y in _pairs(fields, a, b)]
    else:
        try:
            equal = bool(a == b) or (a != a and b != b)  # NaN (float, numpy scalar) in both
        except Exception:  # noqa: BLE001 - the value's own == or !=: it cannot be compared
            return None
        return None if equal else f"{where}: {plain_repr(a)} vs {plain_repr(b)}"
    found = (first_difference(x, y, at, path) for at, x, y in pairs)
    return next((d for d in found if d is not None), None)


def _first_unequal(a: Any, b: Any, bad: list[list[int]], where: str) -> str | None:
    """The element at ``bad``'s index (the first where tensors or arrays differ), or None."""
    if not bad:
        return None
    index = tuple(bad[0])
    return f"{where}, element {list(index)}: {a[index].item()!r} vs {b[index].item()!r}"


#: Methods bound to an object (``obj.method``, ``lock.acquire``): their == compares the objects
#: by identity, which no two schedules share, so they are compared by name and object.
_BOUND = (types.MethodType, types.BuiltinMethodType, types.MethodWrapperType)


def _address(addr: GmAddr) -> tuple | None:
    """What names an address in every schedule: its rank's allocation (numbered per rank and
    run, as ``int(addr)``), and the offset; None for the null address."""
    alloc = addr.alloc
    return None if alloc is None else (alloc.rank, alloc.name, alloc.uid, addr.offset)


def _run_handle(value: Any) -> bool:
    """An hccl_py object without an ``==`` of its own that is no error or Enum member (an
    ``Hccl`` client, a context, a ``Work``): a handle into the state of its own run (locks, the
    scheduler), which differs between schedules: not compared."""
    cls = type(value)
    return (
        cls.__module__.partition(".")[0] == "hccl_py"
        and cls.__eq__ is object.__eq__
        and not isinstance(value, (BaseException, enum.Enum))
    )


def _fields(value: Any) -> list[str] | None:
    """The attributes a value is compared by: a dataclass's fields, or the instance attributes
    (``__dict__`` and ``__slots__``) of an object whose class has no ``==`` of its own (not a
    class, module or Enum member: those are compared by identity, rightly); None otherwise."""
    if isinstance(value, (type, types.ModuleType, enum.Enum)):
        return None
    if dataclasses.is_dataclass(value):
        return [f.name for f in dataclasses.fields(value)]
    if type(value).__eq__ is not object.__eq__:
        return None
    names = set(getattr(value, "__dict__", ()))
    if isinstance(value, BaseException):  # its message: no instance attribute
        names.add("args")
    for cls in type(value).__mro__:
        slots = cls.__dict__.get("__slots__", ())
        names.update([slots] if isinstance(slots, str) else slots)
    return sorted(names - {"__dict__", "__weakref__"})


def _pairs(names: list[str], a: Any, b: Any) -> list[tuple[str, Any, Any]]:
    """(name, a's value, b's value) for ``names``; an attribute only one of them has differs."""
    named = sorted({*names, *(_fields(b) or ())})
    return [(n, getattr(a, n, _MISSING), getattr(b, n, _MISSING)) for n in named]


class _Missing:
    """An attribute that one of two compared objects lacks."""

    def __repr__(self) -> str:
        return "no such attribute"


_MISSING = _Missing()


def _value(outcome: Any) -> Any:
    """A rank's return value (``hp.run`` passes :class:`RankOutcome` objects, with warnings)."""
    return outcome.value if isinstance(outcome, RankOutcome) else outcome


def explore(run_one: Callable[[Config], list[Any]], config: Config, schedules: int) -> list[Any]:
    """Run ``run_one`` under ``schedules`` schedules; the default schedule's results.

    Raises the first failing schedule's error (with ``.seed``), or
    :class:`HcclScheduleError` when two passing schedules give different results.
    """
    first: list[Any] | None = None
    for seed in itertools.chain([None], range(1, schedules)):  # lazily: any count
        try:
            results = run_one(dataclasses.replace(config, seed=seed))
        except WorldError as err:
            err.seed = seed
            which = "the default schedule" if seed is None else f"schedule {seed}"
            replay = replay_line(seed, config.poison)
            err.args = (f"{err.args[0]}\n{which} failed; {replay}",)
            raise
        if first is None:
            first = results
            continue
        for rank, (want, got) in enumerate(zip(first, results, strict=True)):
            try:
                diff = first_difference(_value(want), _value(got), f"rank {rank}'s result")
            except RecursionError:  # a value that holds itself: not compared
                diff = None
            if diff is not None:
                error = HcclScheduleError(
                    f"schedule-dependent result: the default schedule and schedule {seed} "
                    f"differ at {diff}; {replay_line(seed, config.poison)}",
                    rank=rank,
                )
                error.seed = seed
                raise error
    return first
