"""Each rank's buffers numbered as its own address space, per run (``bufN``, ``int(addr)``).

A rank's buffers are numbered from 0 in every run, whatever other ranks, other runs
(nested, concurrent) or other schedules of an exploration allocate: names and integer
addresses then depend only on the rank's own program, as in a rank process of its own,
and a seed replays what an exploration reported.

A tensor that a rank passes to another launch of the run, unchanged (the same tensor object
as the same parameter, over the same bytes with the same shape, strides, dtype and device),
gets the address it got before, as a device pointer stays the same: the same allocation,
number and ``int(addr)``, and no new one to make.
"""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Callable
from typing import Any

import torch

from .current import off_device


class BufferNumbers:
    """One rank's buffers in one run, numbered as its own address space (``bufN``, ``int(addr)``),
    those whose integer address was taken, for :meth:`GmAddr.from_int`, and the addresses of
    its launches' tensor arguments, for the next launch that passes them again."""

    __slots__ = ("take", "by_number", "cached", "launches", "__weakref__")

    def __init__(self) -> None:
        #: ``take()``: the next buffer's number (a C call: every buffer of a launch takes one).
        self.take = itertools.count().__next__
        self.by_number: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()
        #: id(tensor) -> (a weak reference to the tensor, which drops the entry when the tensor
        #: goes, what the address was made of: the parameter's name, the storage's address and
        #: size, the tensor's offset, shape, strides, dtype and device; the address).
        self.cached: dict[int, tuple[weakref.ref, tuple, Any]] = {}
        #: The rank's launches so far in this run: what tells the Hcomm requests of one launch
        #: from those of the next at one call site into one allocation (emu/posted.py).
        self.launches = 0

    def address(
        self, tensor: torch.Tensor, name: str | None, ctx: Any, new: Callable[..., Any]
    ) -> Any:
        """The GM address of ``tensor``, kernel parameter ``name`` of rank context ``ctx`` (whose
        numbers these are): the one it got last time if nothing of it changed, else
        ``new(tensor, rank, name)``, after checking it lies on the rank's device."""
        try:  # what the allocation depends on (inline: every tensor argument of a launch asks)
            storage = tensor.untyped_storage()
            key: tuple | None = (
                name,
                storage.data_ptr(),
                storage.nbytes(),
                tensor.storage_offset(),
                tensor.shape,
                tensor.stride(),
                tensor.dtype,
                tensor.device,
            )
        except (RuntimeError, NotImplementedError, TypeError):  # no storage to ask: never reused
            key = None
        found = self.cached.get(id(tensor))
        if found is not None and found[1] == key and found[0]() is tensor:
            return found[2]
        elsewhere = off_device(tensor, ctx)
        if elsewhere is not None:
            raise ValueError(
                f"GM buffer{f' {name}' if name else ''} of shape {tuple(tensor.shape)} {elsewhere}"
            )
        addr = new(tensor, ctx.rank, name)
        if key is None:
            self.cached.pop(id(tensor), None)
        else:
            self.cached[id(tensor)] = (weakref.ref(tensor, _dropper(self, id(tensor))), key, addr)
        return addr


def _dropper(numbers: BufferNumbers, key: int) -> Callable[[weakref.ref], None]:
    """The callback that drops entry ``key`` of ``numbers.cached`` when its tensor goes (it holds
    ``numbers`` weakly: the cache and its allocations go with the run, no cycle to collect)."""
    owner = weakref.ref(numbers)

    def drop(ref: weakref.ref) -> None:
        found = owner()
        entry = None if found is None else found.cached.get(key)
        if entry is not None and entry[0] is ref:
            found.cached.pop(key, None)

    return drop


#: The numbers of buffers made outside any rank (host code around ``hp.run``).
OUTSIDE = BufferNumbers()


def numbers_of(ctx: Any) -> BufferNumbers:
    """The buffer numbers of rank context ``ctx`` (None: outside any rank)."""
    return OUTSIDE if ctx is None else ctx.buffers
