"""What a kernel's torch operations read and write in windows and collective buffers.

A :class:`WindowWatch` is a torch dispatch mode that a core thread enters for
its kernel on the emulator. For every aten operation it finds the tensor
arguments that live in a window or in bytes of a pending collective round,
tells reads from writes by the operator's schema (an argument marked
``Tensor(a!)`` is written; one marked ``Tensor(a)`` is only viewed, which
reads nothing) and hands their exact byte ranges to
:class:`~.buffers.BufferRaces` (every run) and :class:`~.races.WindowRaces`
(``poison=True``); an early read of a window gets a copy of its input with
0xFF in the bytes that have not arrived. :class:`HostReads`, a torch function
mode beside it under ``poison=True`` (:mod:`.host_reads`), does the same for the reads that
never reach aten: ``tolist()``, ``numpy()`` and ``np.asarray`` (a flag polled through them
acquires like any other read). Both are on a core's mode stacks only while the rank has a
pending round or a window is mapped, or while the watch carries the core's flag polls
(:class:`CoreWatch`), and off while hccl_py's own work holds the world's lock
(:class:`~.world_lock.Unwatched`).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np
import torch

from hccl_py.server.windows import WindowAllocation

from .buffers import BufferRaces
from .composite import copied, viewed_args
from .extents import byte_runs, element_offsets, touched
from .findings import raise_certain, raise_races
from .host_reads import HostReads
from .intervals import Runs
from .modes import KernelMode
from .races import WindowRaces, user_frame

#: Operators that look at a tensor's shape or dtype only (their arguments are not read).
_METADATA = frozenset(
    {"empty_like", "zeros_like", "ones_like", "full_like", "rand_like", "randn_like"}
    | {"randint_like", "new_empty", "new_zeros", "new_ones", "new_full", "new_empty_strided"}
    | {"is_same_size", "sym_size", "sym_stride", "sym_numel", "sym_storage_offset"}
)

#: (tensor, window, written, the byte runs the operation touches and their size)
Access = tuple[torch.Tensor, WindowAllocation, bool, tuple[Runs, int]]
#: No windows (when window races are not checked).
_NONE: dict[int, WindowAllocation] = {}
#: The scope of a launch or core that nothing watches (one for all: it holds no state).
_NO_SCOPE = contextlib.nullcontext()


class WindowWatch(KernelMode):
    """The window and collective-buffer accesses of one rank's kernel code, for the race checks."""

    def __init__(
        self,
        races: WindowRaces | None,
        buffers: BufferRaces | None,
        rank: int,
        internal: Callable[[], bool],
    ) -> None:
        super().__init__()
        self.races = races
        self.buffers = buffers
        self.rank = rank
        self.internal = internal
        self.aside = False  # True while HostReads does its own (unwatched) work
        #: Both filled in place by their checks: tested before anything else.
        self.windows = _NONE if races is None else races.windows
        self.pending = {} if buffers is None else buffers.pending[rank]
        #: The core's flag-poll watch once it has one (:meth:`CoreWatch.attach`): it looks at
        #: each operation after this watch, in the same trip through Python.
        self.polls: Any = None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        kwargs = kwargs or {}
        plan = None
        if (
            viewed_args(func)
            and (self.pending or self.windows)
            and not self.aside
            and not self.internal()
        ):
            # seen whole (inference mode): whether it copied what it marks as only viewed
            plan = _plan(func) + copied(func, args, kwargs, func(*args, **kwargs))
        result = self._watched(func, args, kwargs, plan=plan)
        if self.polls is not None:
            self.polls.after(func, args, kwargs, result, plan)
        return result

    def _watched(
        self, func: Any, args: tuple, kwargs: dict, checked: bool = False, plan: Any = None
    ) -> Any:
        """Run one operation, checking and recording its window and buffer accesses (those of
        the arguments ``plan`` names, else of those its schema says it uses)."""
        if self.aside or not (self.pending or self.windows) or self.internal():
            return func(*args, **kwargs)
        used, found = list(self._used(func, args, kwargs, plan)), []
        if self.pending and not checked:
            for tensor, storage, written, i in used:
                if storage in self.pending:
                    runs = touched(func, args, i, tensor)[0]
                    if runs:  # an index that picks nothing touches nothing
                        found += self.buffers.access(self.rank, storage, runs, written)
        if found:  # some may race only if the write changes their bytes (:mod:`.findings`)
            raise_certain(found, self.rank)
            result = self._watched(func, args, kwargs, checked=True, plan=plan)
            raise_races(found, self.rank)
            return result
        windows = self.windows
        accesses = [
            (t, windows[s], w, runs)
            for t, s, w, i in used
            if s in windows and (runs := touched(func, args, i, t))[1]
        ]
        if not accesses:
            return func(*args, **kwargs)
        # one window operation at a time: what a read saw is what the history says it saw
        with self.races.lock:
            return self._run(func, args, kwargs, accesses)

    def _run(self, func: Any, args: tuple, kwargs: dict, accesses: list[Access]) -> Any:
        """Check, run and record one operation on window bytes (under the history's lock)."""
        swap: dict[int, torch.Tensor] = {}
        for tensor, window, written, runs in accesses:
            if not written:
                swap.update(self.read(tensor, window, runs))
        if swap:
            args = _replace(args, swap)
            kwargs = _replace(kwargs, swap)
        result = func(*args, **kwargs)
        for _, window, written, (runs, nbytes) in accesses:
            if written:
                self.races.write(self.rank, window, runs, nbytes)
        return result

    def read(
        self, tensor: torch.Tensor, window: WindowAllocation, runs: tuple[Runs, int] | None = None
    ) -> dict[int, torch.Tensor]:
        """Record a read of ``tensor`` (of ``runs`` of it: all by default); {id: poisoned
        copy} where the read is early, else {}."""
        runs, nbytes = byte_runs(tensor) if runs is None else runs
        poison = self.races.read(self.rank, window, runs, nbytes)
        return {id(tensor): poisoned(tensor, poison)} if poison else {}

    def escaped(self, tensor: torch.Tensor, window: WindowAllocation, array: np.ndarray) -> None:
        """``array`` is a numpy view of ``tensor``: the check keeps an eye on it (:mod:`.views`)."""
        mirror = tensor.numpy()  # the same bytes, held by the check (no torch op on them later)
        self.races.held.add(self.rank, window, array, mirror, element_offsets(tensor), user_frame())

    def _used(
        self, func: Any, args: tuple, kwargs: dict, plan: Any = None
    ) -> Iterator[tuple[torch.Tensor, int, bool, int]]:
        """(tensor, storage address, written, position) for each tensor argument whose data
        ``func`` uses (those ``plan`` names, else those its schema says it uses)."""
        for i, name, written in _plan(func) if plan is None else plan:
            value = args[i] if i < len(args) else kwargs.get(name)
            tensors = value if isinstance(value, (list, tuple)) else (value,)
            for t in tensors:
                if isinstance(t, torch.Tensor) and t.numel():
                    yield t, t.untyped_storage().data_ptr(), written, i


class _Stack:
    """One of a thread's torch mode stacks (dispatch or function), for putting a mode in or out."""

    def __init__(self, length: Callable[[], int], pop: Callable[[], Any], push: Callable) -> None:
        self.length, self.pop, self.push = length, pop, push

    def insert(self, depth: int, mode: Any) -> None:
        """Put ``mode`` at ``depth`` (below the modes entered since, as if entered before them)."""
        length = self.length()
        if length <= depth:  # nothing entered since (the usual case): one push
            self.push(mode)
            return
        above = [self.pop() for _ in range(length - depth)]
        self.push(mode)
        for other in reversed(above):
            self.push(other)

    def remove(self, mode: Any) -> None:
        """Take ``mode`` out, wherever it is; the modes above it keep their order."""
        above = []
        while self.length():
            top = self.pop()
            if top is mode:
                break
            above.append(top)
        for other in reversed(above):
            self.push(other)


_DISPATCH = _Stack(
    torch._C._len_torch_dispatch_stack,
    functools.partial(torch._C._pop_torch_dispatch_stack, None),
    torch._C._push_on_torch_dispatch_stack,
)
_FUNCTION = _Stack(
    torch._C._len_torch_function_stack,
    torch._C._pop_torch_function_stack,
    torch._C._push_on_torch_function_stack,
)


class CoreWatch:
    """One core run's watch: its modes are on the mode stacks only while they can see something.

    :class:`WindowWatch` (and, where window races are checked, :class:`HostReads`)
    can only report an access while the rank has a pending round (the buffer
    check) or a window is mapped (the window check). Otherwise they are off the
    stacks and a torch operation costs them nothing. They are put on (at the
    depth of the core's start, below any mode the kernel entered since) when the
    core starts, when it leaves hccl_py's lock (:class:`~.world_lock.Unwatched`: its own
    Commit or window request), and when it gets the baton back after a switch
    that did not come from hccl_py's lock (a flag poll); they are taken off while
    hccl_py's own work holds the lock. Other runners change what the core can
    see only while it does not run, so nothing is missed.
    """

    def __init__(self, watch: WindowWatch) -> None:
        self.watch = watch
        self.modes = [(_DISPATCH, watch)]
        if watch.races is not None:  # reads that bypass aten, only where window races are checked
            self.modes.append((_FUNCTION, HostReads(watch)))
        self.depths: list[int] = []  # the stacks' lengths at the core's start
        self.on = False
        self.held = False  # hccl_py's own work holds the lock (it puts the modes back on)
        self._token: contextvars.Token | None = None

    def __enter__(self) -> CoreWatch:
        self.depths = [stack.length() for stack, _ in self.modes]
        self._token = _CORE.set(self)
        self.sync()
        return self

    def __exit__(self, *exc: object) -> None:
        _CORE.reset(self._token)
        self.off()

    def attach(self, polls: Any) -> None:
        """The core's flag polls ride on this watch (one dispatch mode instead of two), which
        then stays on the stacks: every read of the core may be a poll."""
        self.watch.polls = polls
        self.sync()

    def sync(self) -> None:
        """Put the modes on when they can see something now, take them off when they cannot."""
        watch = self.watch
        if watch.pending or watch.windows or watch.polls is not None:
            if not self.on:
                for (stack, mode), depth in zip(self.modes, self.depths, strict=True):
                    stack.insert(depth, mode)
                self.on = True
        elif self.on:
            self.off()

    def off(self) -> None:
        """Take the modes off the stacks."""
        if self.on:
            for stack, mode in self.modes:
                stack.remove(mode)
            self.on = False


#: The calling runner's core watch while it runs an emulated kernel's core.
_CORE: contextvars.ContextVar[CoreWatch | None] = contextvars.ContextVar(
    "hccl_py_core_watch", default=None
)


#: The calling runner's core watch, while it runs an emulated kernel's core (else None): the
#: context variable's own getter (every core run asks).
core_watch: Callable[[], CoreWatch | None] = _CORE.get


def resumed() -> None:
    """The calling runner got the baton back: outside hccl_py's lock, its watch catches up."""
    core = _CORE.get()
    if core is not None and not core.held:
        core.sync()


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
    """The window race check of an emulated world, on with ``poison=True`` (``races``).

    The world builds one, calls :meth:`release` at a Commit or an arrival and
    :meth:`acquire` when a Wait, a Query or a meeting returns. ``internal()``
    says that the calling thread does hccl_py's own work (it holds the world's
    lock): that is not watched. The collective buffer check (``buffers``,
    :mod:`.buffers`) shares the watch.
    """

    def __init__(
        self,
        races: WindowRaces | None,
        internal: Callable[[], bool],
        buffers: BufferRaces | None = None,
    ) -> None:
        self.races = races
        self.internal = internal
        self.buffers = buffers

    def mapped(self, window: WindowAllocation) -> None:
        """``window``'s memory was just mapped: watch the accesses to it."""
        if self.races is not None:
            self.races.mapped(window)

    def kernel_scope(self, rank: int) -> contextlib.AbstractContextManager:
        """Around a kernel launch of global rank ``rank``: its findings are reported at its end."""
        return _NO_SCOPE if self.races is None else self.races.kernel(rank)

    def core_scope(self, rank: int) -> contextlib.AbstractContextManager:
        """Around one core's run of global rank ``rank``: watch its window and buffer accesses.

        Enter it before the core's other modes: its own go in below them (:class:`CoreWatch`).
        """
        if self.races is None and self.buffers is None:
            return _NO_SCOPE
        return CoreWatch(WindowWatch(self.races, self.buffers, rank, self.internal))

    def release(self, rank: int) -> tuple[int, ...] | None:
        """Global rank ``rank``'s clock for a peer to acquire (None when races are not checked)."""
        return None if self.races is None else self.races.release(rank)

    def acquire(self, rank: int, clocks: Iterable[tuple[int, ...] | None]) -> None:
        """Global rank ``rank`` is ordered after the releases ``clocks``."""
        if self.races is not None:
            self.races.acquire(rank, clocks)
