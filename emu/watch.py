"""What a kernel's torch operations read and write in communication windows.

A :class:`WindowWatch` is a torch dispatch mode that a core thread enters for
its kernel when window races are checked (``poison=True``). For every aten
operation it finds the tensor arguments that live in a window, tells reads
from writes by the operator's schema (an argument marked ``Tensor(a!)`` is
written; one marked ``Tensor(a)`` is only viewed, which reads nothing) and
hands their exact byte ranges to :class:`~.races.WindowRaces`; an early read
gets a copy of its input with 0xFF in the bytes that have not arrived.
hccl_py's own work (under the world's lock) is not watched.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from hccl_py.windows import WindowAllocation

from .races import Runs, WindowRaces

#: Operators that look at a tensor's shape or dtype only (their arguments are not read).
_METADATA = frozenset(
    {"empty_like", "zeros_like", "ones_like", "full_like", "rand_like", "randn_like"}
    | {"randint_like", "new_empty", "new_zeros", "new_ones", "new_full", "new_empty_strided"}
    | {"is_same_size", "sym_size", "sym_stride", "sym_numel", "sym_storage_offset"}
)

Access = tuple[torch.Tensor, WindowAllocation, bool]


class WindowWatch(TorchDispatchMode):
    """The window accesses of one rank's kernel code, for the race check."""

    def __init__(self, races: WindowRaces, rank: int, internal: Callable[[], bool]) -> None:
        super().__init__()
        self.races = races
        self.rank = rank
        self.internal = internal

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        kwargs = kwargs or {}
        if not self.races.windows or self.internal():
            return func(*args, **kwargs)
        accesses = list(self._accesses(func, args, kwargs))
        if not accesses:
            return func(*args, **kwargs)
        # one window operation at a time: what a read saw is what the history says it saw
        with self.races.lock:
            return self._run(func, args, kwargs, accesses)

    def _run(self, func: Any, args: tuple, kwargs: dict, accesses: list[Access]) -> Any:
        """Check, run and record one operation on window bytes (under the history's lock)."""
        swap: dict[int, torch.Tensor] = {}
        for tensor, window, written in accesses:
            if not written:
                runs, nbytes = byte_runs(tensor)
                poison = self.races.read(self.rank, window, runs, nbytes)
                if poison:
                    swap[id(tensor)] = poisoned(tensor, poison)
        if swap:
            args = _replace(args, swap)
            kwargs = _replace(kwargs, swap)
        result = func(*args, **kwargs)
        for tensor, window, written in accesses:
            if written:
                runs, nbytes = byte_runs(tensor)
                self.races.write(self.rank, window, runs, nbytes)
        return result

    def _accesses(self, func: Any, args: tuple, kwargs: dict) -> Iterator[Access]:
        """(tensor, window, written) for each tensor argument in a window that ``func`` accesses."""
        windows = self.races.windows
        for i, name, written in _plan(func):
            value = args[i] if i < len(args) else kwargs.get(name)
            tensors = value if isinstance(value, (list, tuple)) else (value,)
            for t in tensors:
                if not isinstance(t, torch.Tensor) or t.numel() == 0:
                    continue
                window = windows.get(t.untyped_storage().data_ptr())
                if window is not None:
                    yield t, window, written


_PLANS: dict[Any, tuple[tuple[int, str, bool], ...]] = {}


def _plan(func: Any) -> tuple[tuple[int, str, bool], ...]:
    """(position, name, written) of the arguments whose data ``func`` reads or writes."""
    plan = _PLANS.get(func)
    if plan is None:
        plan = ()
        if func.overloadpacket.__name__ not in _METADATA:
            plan = tuple(
                (i, arg.name, arg.alias_info is not None)
                for i, arg in enumerate(func._schema.arguments)
                # an argument marked Tensor(a) without "!" is only viewed: no data is read
                if arg.alias_info is None or arg.alias_info.is_write
            )
        _PLANS[func] = plan
    return plan


def element_offsets(tensor: torch.Tensor) -> np.ndarray:
    """The window offset of every element of ``tensor``, in row-major order."""
    offsets = np.zeros(1, dtype=np.int64)
    for size, stride in zip(tensor.shape, tensor.stride(), strict=True):
        offsets = (offsets[:, None] + np.arange(size, dtype=np.int64) * stride).ravel()
    base = tensor.data_ptr() - tensor.untyped_storage().data_ptr()
    return base + offsets * tensor.element_size()


def byte_runs(tensor: torch.Tensor) -> tuple[Runs, int]:
    """The contiguous byte ranges of its window that ``tensor`` covers, and their total size."""
    size = tensor.element_size()
    if tensor.is_contiguous():
        lo = tensor.data_ptr() - tensor.untyped_storage().data_ptr()
        nbytes = tensor.numel() * size
        return [(lo, lo + nbytes)], nbytes
    starts = np.unique(element_offsets(tensor))
    breaks = np.flatnonzero(np.diff(starts) > size) + 1
    firsts = np.concatenate(([0], breaks))
    lasts = np.concatenate((breaks - 1, [len(starts) - 1]))
    runs = [(int(a), int(b) + size) for a, b in zip(starts[firsts], starts[lasts], strict=True)]
    return runs, len(starts) * size


def poisoned(tensor: torch.Tensor, ranges: Runs) -> torch.Tensor:
    """A copy of ``tensor`` whose elements touching ``ranges`` hold 0xFF bytes."""
    copy = tensor.clone(memory_format=torch.contiguous_format)
    size = tensor.element_size()
    offsets = element_offsets(tensor)
    hit = np.zeros(offsets.shape, dtype=bool)
    for lo, hi in ranges:
        hit |= (offsets < hi) & (offsets + size > lo)
    raw = copy.reshape(-1).view(torch.uint8).view(-1, size)
    raw[torch.from_numpy(hit)] = 0xFF
    return copy


def _replace(value: Any, swap: dict[int, torch.Tensor]) -> Any:
    """``value`` (args, kwargs, a tensor list) with the tensors of ``swap`` replaced."""
    if isinstance(value, torch.Tensor):
        return swap.get(id(value), value)
    if isinstance(value, dict):
        return {k: _replace(v, swap) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_replace(v, swap) for v in value)
    return value


class WatchedWindows:
    """Mixin for the emulated world: the window race check, on with ``poison=True``.

    The world calls :meth:`_release` at a Commit or an arrival and
    :meth:`_acquire` when a Wait, a Query or a rendezvous returns.
    """

    races: WindowRaces | None = None
    serial: Any

    def window_mapped(self, window: WindowAllocation) -> None:
        if self.races is not None:
            self.races.mapped(window)

    def kernel_scope(self, rank: int) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext() if self.races is None else self.races.kernel(rank)

    def core_scope(self, rank: int) -> contextlib.AbstractContextManager:
        if self.races is None:
            return contextlib.nullcontext()
        return WindowWatch(self.races, rank, self.serial._is_owned)

    def _release(self, rank: int) -> tuple[int, ...] | None:
        """Global rank ``rank``'s clock for a peer to acquire (None when races are not checked)."""
        return None if self.races is None else self.races.release(rank)

    def _acquire(self, rank: int, clocks: Iterable[tuple[int, ...] | None]) -> None:
        """Global rank ``rank`` is ordered after the releases ``clocks``."""
        if self.races is not None:
            self.races.acquire(rank, clocks)
