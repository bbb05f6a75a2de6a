"""The world lock of an emulated world, with the core's race watch off while hccl_py holds it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from hccl_py.core.current import RunnerLocal

from .watch import _CORE, CoreWatch


class Unwatched:
    """The world lock, with torch dispatch modes off while hccl_py's own work holds it.

    The watches skip hccl_py's own operations anyway (they run under this lock);
    a mode still costs each of them a trip through Python (some tens of
    microseconds for a ``view``), which this saves: the calling core's own
    watch (:class:`CoreWatch`) is taken off the stacks, and other dispatch modes
    are turned off. Only the outermost entry of a runner pays for it, and its
    exit puts the core's watch back where it can see something now. The guard
    that turns them off is kept per runner (greenlet runners share a thread and
    block inside the lock, each with a guard of its own). ``_is_owned`` tells
    the watches whether the calling runner holds the lock (a runner that hands
    the baton on releases it fully, so on the one thread of greenlet runners
    only the running one can hold it).
    """

    def __init__(self, lock: Any) -> None:
        self.lock = lock
        self._guard = RunnerLocal()
        self._guards = 0  # runners holding a guard now (none: no runner's guard to look up)

    def __enter__(self) -> None:
        lock = self.lock
        outer = not lock._is_owned()
        core = _CORE.get() if outer else None
        if core is not None:
            core.held = True
            if core.on:
                core.off()
        try:
            lock.__enter__()
            if outer and torch._C._len_torch_dispatch_stack():
                guard = torch._C._DisableTorchDispatch()
                guard.__enter__()
                self._guard.held = guard
                self._guards += 1
        except BaseException:  # no __exit__ follows an __enter__ that raised
            if outer and lock._is_owned():  # a runner stopped (the run's timeout) as it took
                self.__exit__(None, None, None)  # the lock: let go of it, put the watch back
            elif core is not None:  # not entered
                core.held = False
                core.sync()
            raise

    def __exit__(self, *exc: object) -> None:
        lock = self.lock
        lock.__exit__(*exc)
        if not lock._is_owned():
            guard = self._guard.get("held") if self._guards else None
            if guard is not None:
                self._guard.held = None
                self._guards -= 1
                guard.__exit__(None, None, None)
            core = _CORE.get()
            if core is not None:
                core.held = False
                core.sync()

    def held_call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` holding the lock: :meth:`__enter__`, the call and :meth:`__exit__` in
        one frame (every client call takes this path). An outer entry's guard stays in the
        frame (each runner has its own) instead of in the runner's :class:`RunnerLocal`."""
        lock = self.lock
        if lock._is_owned():  # nested: the lock again, nothing else
            with lock:
                return fn(*args)
        core = _CORE.get()
        if core is not None:
            core.held = True
            if core.on:
                core.off()
        guard = None
        try:
            lock.__enter__()
            if torch._C._len_torch_dispatch_stack():
                guard = torch._C._DisableTorchDispatch()
                guard.__enter__()
        except BaseException:  # as in __enter__: a runner stopped as it took the lock
            if lock._is_owned():
                self._leave(core, guard, None, None, None)
            elif core is not None:
                core.held = False
                core.sync()
            raise
        try:
            result = fn(*args)
        except BaseException as exc:
            self._leave(core, guard, type(exc), exc, exc.__traceback__)
            raise
        lock.__exit__(None, None, None)
        if not lock._is_owned():
            if guard is not None:
                guard.__exit__(None, None, None)
            if core is not None:
                core.held = False
                watch = core.watch  # core.sync(), written out where it has nothing to do
                if core.on != bool(watch.pending or watch.windows or watch.polls is not None):
                    core.sync()
        return result

    def _leave(self, core: CoreWatch | None, guard: Any, *exc: Any) -> None:
        """:meth:`held_call`'s exit when its call raised (or its entry failed)."""
        lock = self.lock
        lock.__exit__(*exc)
        if not lock._is_owned():
            if guard is not None:
                guard.__exit__(None, None, None)
            if core is not None:
                core.held = False
                core.sync()

    def _is_owned(self) -> bool:
        return self.lock._is_owned()
