"""Cross-core flags between the cores of a kernel: ``CrossCoreSetFlag`` and ``CrossCoreWaitFlag``.

In Python: ``hp.CrossCoreSetFlag[modeId, pipe](flagId)``, ``hp.CrossCoreWaitFlag(flagId)``.

MC2 kernels synchronise cores with these besides ``SyncAll``. As the AscendC
documentation describes them, each core has a counter per flag id (0..15).
A Set completes once every *setting* core of its mode has executed it; then
every *receiving* core's counter goes up by one. A Wait blocks while the
calling core's counter is 0 and consumes one count. Sets may run ahead of
Waits, up to 15 pending counts (more is a hardware error).

- mode 0: every core of the caller's type (every AIC, or every AIV, of the
  launch) sets and receives: a barrier across one core type, which SyncAll
  does not give the cube cores of a mixed kernel;
- mode 1: the AIV cores of one AI core set and receive;
- mode 2: an AIC's Set releases the AIV cores of its AI core; the Sets of all
  AIV cores of an AI core release its AIC.

A Wait that can never be released (every core that could still Set has
returned from the kernel) is a deadlock report naming the flag, not a hang.
"""

from __future__ import annotations

import enum
import functools
import threading
import weakref
from collections import Counter
from collections.abc import Callable
from typing import Any

from ..core.errors import HcclCoreError, HcclDeadlockError
from .cores import AIC, AIV, CoreContext, LaunchState, current_core_context

#: Flag ids a core has (``flagId`` 0..15).
FLAG_IDS = range(16)
#: Pending completions one flag of one core may hold.
MAX_PENDING = 15


class Pipe(enum.IntEnum):
    """The pipeline a Set waits for before it fires (the emulator runs each core in order)."""

    PIPE_S = 0
    PIPE_V = 1
    PIPE_M = 2
    PIPE_MTE1 = 3
    PIPE_MTE2 = 4
    PIPE_MTE3 = 5
    PIPE_ALL = 6
    PIPE_FIX = 10


#: Pipes a Set may name (not the scalar pipe, not all pipes).
SET_PIPES = frozenset(Pipe) - {Pipe.PIPE_S, Pipe.PIPE_ALL}
#: Pipes a Wait may name (any).
WAIT_PIPES = frozenset(Pipe)


def _ai_core(core: CoreContext) -> int:
    """Index of the AI core (block) the core belongs to."""
    per_block = max(1, core.launch.cores_of_kind[core.kind] // core.launch.block_dim)
    return core.block_idx // per_block


def _cores(launch: LaunchState, kind: Any, block: int | None = None) -> list[CoreContext]:
    return [
        c
        for c in launch.core_contexts()
        if c.kind == kind and (block is None or _ai_core(c) == block)
    ]


def _route(core: CoreContext, mode: int) -> tuple[tuple, list[CoreContext], list[CoreContext]]:
    """``(key, setters, receivers)`` of a Set of ``mode`` on ``core``."""
    launch = core.launch
    if mode == 0:
        group = _cores(launch, core.kind)
        return (0, core.kind), group, group
    block = _ai_core(core)
    if mode == 1:
        if core.kind != AIV:
            raise HcclCoreError(
                "CrossCoreSetFlag mode 1 synchronises AIV cores: called on an AIC core"
            )
        group = _cores(launch, AIV, block)
        return (1, block), group, group
    if core.kind == AIC:
        return (2, block, AIC), [core], _cores(launch, AIV, block)
    return (2, block, AIV), _cores(launch, AIV, block), _cores(launch, AIC, block)


class _Flags:
    """The flag counters of one launch (under the rank's blocker lock)."""

    def __init__(self) -> None:
        self.pending_sets: dict[tuple, Counter] = {}
        self.counters: Counter = Counter()
        #: Completions of mode-0 Sets among the counters: consuming one passes a barrier.
        self.type_barriers: Counter = Counter()

    def set(self, core: CoreContext, mode: int, flag: int) -> None:
        key, setters, receivers = _route(core, mode)
        sets = self.pending_sets.setdefault((key, flag), Counter())
        sets[core] += 1
        while all(sets[c] > 0 for c in setters):
            for c in setters:
                sets[c] -= 1
            for c in receivers:
                self.counters[(c, flag)] += 1
                self.type_barriers[(c, flag)] += mode == 0
                if self.counters[(c, flag)] > MAX_PENDING:
                    raise HcclCoreError(
                        f"CrossCoreSetFlag mode {mode} flag {flag}: {c.kind.name} core "
                        f"{c.block_idx} holds more than {MAX_PENDING} completions it has not "
                        "waited for (a hardware error); pair every Set with a Wait",
                        rank=core.launch.rank_ctx.rank,
                    )


_FLAGS: weakref.WeakKeyDictionary[LaunchState, _Flags] = weakref.WeakKeyDictionary()
_FLAGS_LOCK = threading.Lock()


def _flags(launch: LaunchState) -> _Flags:
    with _FLAGS_LOCK:
        found = _FLAGS.get(launch)
        if found is None:
            found = _FLAGS[launch] = _Flags()
        return found


def _kernel_core(what: str, flag: Any) -> CoreContext:
    core = current_core_context()
    if core is None:
        raise RuntimeError(f"{what} is only valid inside a kernel started with hccl_py.launch")
    if not isinstance(flag, int) or isinstance(flag, bool) or flag not in FLAG_IDS:
        raise HcclCoreError(
            f"{what}: flagId must be an int in 0..15, got {flag!r}",
            rank=core.launch.rank_ctx.rank,
        )
    return core


def _set_flag(flagId: int, mode: int = 0, pipe: int = Pipe.PIPE_FIX) -> None:
    core = _kernel_core("CrossCoreSetFlag", flagId)
    _check_mode("CrossCoreSetFlag", core, mode, pipe, SET_PIPES)
    blocker = core.launch.rank_ctx.blocker
    with blocker.cond:
        _flags(core.launch).set(core, mode, flagId)
        blocker.cond.notify_all()


class _Templated:
    """``Name[modeId, pipe](flagId)``: a cross-core flag call with its template arguments in
    brackets (``Name(flagId)`` takes the defaults: mode 0 and the call's default pipe)."""

    def __init__(self, call: Callable[..., None], name: str, pipe: Pipe) -> None:
        self._call, self._name, self._pipe = call, name, pipe

    def __getitem__(self, params: Any) -> Any:
        mode, pipe = params if isinstance(params, tuple) else (params, self._pipe)
        return functools.partial(self._call, mode=mode, pipe=pipe)

    def __call__(self, flagId: int, mode: int = 0, pipe: int | None = None) -> None:
        self._call(flagId, mode, self._pipe if pipe is None else pipe)

    def __repr__(self) -> str:
        return f"{self._name}[modeId, pipe](flagId)"


#: Set a flag: template arguments modeId and pipe in brackets, then the flag id;
#: without brackets it is mode 0.
CrossCoreSetFlag = _Templated(_set_flag, "CrossCoreSetFlag", Pipe.PIPE_FIX)


def _check_mode(what: str, core: CoreContext, mode: int, pipe: int, pipes: frozenset) -> None:
    if mode not in (0, 1, 2) or pipe not in pipes:
        raise HcclCoreError(
            f"{what}[{mode}, {pipe}]: modeId must be 0, 1 or 2 and pipe one of "
            f"{sorted(p.name for p in pipes)}",
            rank=core.launch.rank_ctx.rank,
        )


def _wait_flag(flagId: int, mode: int = 0, pipe: int = Pipe.PIPE_S) -> None:
    """Block until this core's counter of ``flagId`` is positive, then consume one count.

    ``mode`` and ``pipe`` are the template arguments (``CrossCoreWaitFlag<modeId, pipe>``):
    checked, and otherwise the same wait for every mode, as the counter is the core's own.
    """
    core = _kernel_core("CrossCoreWaitFlag", flagId)
    _check_mode("CrossCoreWaitFlag", core, mode, pipe, WAIT_PIPES)
    launch = core.launch
    flags = _flags(launch)
    blocker = launch.rank_ctx.blocker
    key = (core, flagId)
    others = [c for c in launch.core_contexts() if c != core]

    def released_or_stuck() -> bool:
        return flags.counters[key] > 0 or all(c in launch.returned for c in others)

    blocker.wait_for(
        released_or_stuck,
        lambda: (
            f"rank {launch.rank_ctx.rank} {core.kind.name} core {core.block_idx} waits in "
            f"CrossCoreWaitFlag({flagId})"
        ),
    )
    with blocker.cond:
        if flags.counters[key] > 0:
            flags.counters[key] -= 1
            if flags.type_barriers[key] > 0:
                flags.type_barriers[key] -= 1
                launch.passed_type_barrier(core)
            return
        blocker.raise_if_failed()
    raise HcclDeadlockError(
        f"CrossCoreWaitFlag({flagId}) on {core.kind.name} core {core.block_idx} can never "
        "return: every other core returned from the kernel and no Set of this flag is "
        "pending for this core; every Set must be paired with a Wait on each receiving core",
        rank=launch.rank_ctx.rank,
    )


#: Wait for a flag: block until this core's counter of the flag id is positive, then consume
#: one count; optional template arguments modeId and pipe in brackets, then the flag id.
CrossCoreWaitFlag = _Templated(_wait_flag, "CrossCoreWaitFlag", Pipe.PIPE_S)
