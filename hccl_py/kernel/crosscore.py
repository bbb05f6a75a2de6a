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
- mode 4 (Ascend 950, ``KERNEL_TYPE_MIX_AIC_1_2`` only): an AIC and one AIV of its AI
  core. The AIC's Set of flag 0..10 releases AIV0's flag of that id, of flag 16..26 AIV1's
  flag ``id - 16``; AIV0's Set of flag 0..10 releases the AIC's flag of that id, AIV1's the
  AIC's ``id + 16``; AIV1 may also name that AIC id itself (16..26), as ops-transformer's
  950 AlltoAllvQuantGroupedMatMul does (``a2av_gmm_scheduler.h``). Any pipe but ``PIPE_ALL``. Allowed on every platform, as the 950 ports
  run on the A3 windows (docs/hcomm.md). Its counters are separate from modes 0..2's (on
  the 950, ``set_intra_block`` / ``wait_intra_block``): a Wait of mode 4 takes only a
  mode-4 Set's count, a Wait of another mode only a mode 0..2 Set's.

A Wait that can never be released (every core that could still Set has
returned from the kernel) is a deadlock report naming the flag, not a hang.
"""

from __future__ import annotations

import enum
import functools
import threading
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any

from ..core.config import c_int
from ..core.errors import HcclCoreError, HcclDeadlockError, HcclUsageError
from ..core.report import plain_repr
from .clocks import Clock, join
from .context import core_name
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
#: Mode 4's flag ids: an AIV's, and an AIC's (AIV1's flags are the AIC's 16 higher).
MODE4_AIV_IDS = range(11)
MODE4_AIC_IDS = (*range(11), *range(16, 27))
#: The ids AIV1 may Set in mode 4: its own, or the AIC's id they arrive as (both name one flag).
MODE4_AIV1_SET_IDS = MODE4_AIC_IDS
#: The one kernel type whose cores mode 4 pairs (the documented Kernel type table).
MODE4_KERNEL_TYPE = "mix_aic_1_2"
#: The kernel types whose AI cores have both core types, which modes 1 and 2 need.
MIXED_KERNEL_TYPES = ("mix_aic_1_1", "mix_aic_1_2")


def _counter(core: CoreContext, flag: int, mode: Any) -> tuple:
    """Key of ``core``'s counter of ``flag``: mode 4 has counters of its own."""
    return (core, flag, mode == 4)


def _ai_core(core: CoreContext) -> int:
    """Index of the AI core (block) the core belongs to."""
    per_block = max(1, core.launch.cores_of_kind[core.kind] // core.launch.block_dim)
    return core.block_idx // per_block


def _cores(launch: LaunchState, kind: Any, block: int | None = None) -> list[CoreContext]:
    return [c for c in launch.cores if c.kind == kind and (block is None or _ai_core(c) == block)]


def _route(core: CoreContext, mode: int) -> tuple[tuple, list[CoreContext], list[CoreContext]]:
    """``(key, setters, receivers)`` of a Set of ``mode`` on ``core``."""
    launch = core.launch
    if mode == 4:  # one setter, one receiver: the flag id says which (see _mode4_target)
        return (4, core), [core], []
    if mode == 0:
        group = _cores(launch, core.kind)
        return (0, core.kind), group, group
    block = _ai_core(core)
    if mode == 1:
        if core.kind != AIV:
            raise HcclCoreError(
                "CrossCoreSetFlag mode 1 synchronises AIV cores: called on an AIC core",
                rank=launch.rank_ctx.rank,
            )
        group = _cores(launch, AIV, block)
        return (1, block), group, group
    if core.kind == AIC:
        return (2, block, AIC), [core], _cores(launch, AIV, block)
    return (2, block, AIV), _cores(launch, AIV, block), _cores(launch, AIC, block)


class _Flags:
    """The flag counters of one launch (under the rank's blocker lock)."""

    def __init__(self) -> None:
        #: (route key, flag) -> setter -> the clocks of its Sets not yet completed, in order.
        self.pending_sets: dict[tuple, dict[CoreContext, deque[Clock]]] = {}
        #: (receiver, flag, mode 4?) -> the clocks of its completions not yet waited for, in order: the
        #: join of every setter's clock at its Set (a Wait that consumes one acquires it).
        self.completions: dict[tuple, deque[Clock]] = {}

    def set(self, core: CoreContext, mode: int, flag: int) -> None:
        key, setters, receivers = _route(core, mode)
        if mode == 4:
            receiver, flag = _mode4_target(core, flag)
            receivers = [receiver]
        sets = self.pending_sets.setdefault((key, flag), {})
        sets.setdefault(core, deque()).append(core.launch.order.release(core))
        while all(sets.get(c) for c in setters):
            seen: Clock = {}
            for c in setters:
                join(seen, sets[c].popleft())
            for c in receivers:
                pending = self.completions.setdefault(_counter(c, flag, mode), deque())
                pending.append(seen)
                if len(pending) > MAX_PENDING:
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


def _mode4_target(core: CoreContext, flag: int) -> tuple[CoreContext, int]:
    """The core and flag id a mode-4 Set of ``flag`` on ``core`` releases."""
    block = _ai_core(core)
    if core.kind == AIC:
        sub, flag = (0, flag) if flag < 16 else (1, flag - 16)
        return next(c for c in _cores(core.launch, AIV, block) if c.sub_block_idx == sub), flag
    return _cores(core.launch, AIC, block)[0], flag % 16 + 16 * core.sub_block_idx


def _mode4_ids(core: CoreContext, setting: bool) -> tuple[Any, str]:
    """The flag ids ``core`` may name in mode 4, and how a refusal says them."""
    if core.kind == AIC:
        return MODE4_AIC_IDS, "0..10 or 16..26"
    if setting and core.sub_block_idx == 1:
        return MODE4_AIV1_SET_IDS, "0..10 or 16..26 (the AIC's id of AIV1's flag)"
    return MODE4_AIV_IDS, "0..10"


def _kernel_core(what: str, flag: Any, mode: Any = 0) -> tuple[CoreContext, int]:
    """The calling core, and ``flag`` as an int (an int or a numpy integer, not a bool) once
    it is one of the ids the core may name in ``mode``."""
    core = current_core_context()
    if core is None:
        raise RuntimeError(f"{what} is only valid inside a kernel started with hccl_py.launch")
    ids, text = FLAG_IDS, "0..15"
    if mode == 4:
        ids, text = _mode4_ids(core, what == "CrossCoreSetFlag")
        text += f" in mode 4 on an {core.kind.name} core"
    number = c_int(flag)
    if number is None or number not in ids:
        raise HcclCoreError(
            f"{what}: flagId must be an int in {text}, got {flag!r}",
            rank=core.launch.rank_ctx.rank,
        )
    return core, number


def _set_flag(flagId: int, mode: int = 0, pipe: int = Pipe.PIPE_FIX) -> None:
    core, flagId = _kernel_core("CrossCoreSetFlag", flagId, mode)
    _check_mode("CrossCoreSetFlag", core, mode, pipe, SET_PIPES)
    core.launch.rank_ctx.server.kernel_call()
    blocker = core.launch.rank_ctx.blocker
    with blocker.lock:
        _flags(core.launch).set(core, mode, flagId)
        blocker.cond.notify_all()


class _Templated:
    """``Name[modeId, pipe](flagId)``: a cross-core flag call with its template arguments in
    brackets (``Name(flagId)`` takes the defaults: mode 0 and the call's default pipe)."""

    def __init__(self, call: Callable[..., None], name: str, pipe: Pipe) -> None:
        self._call, self._name, self._pipe = call, name, pipe

    def __getitem__(self, params: Any) -> Any:
        params = params if isinstance(params, tuple) else (params,)
        if len(params) not in (1, 2):
            raise HcclUsageError(
                f"{self._name}[modeId, pipe] takes one or two template arguments (the mode, "
                f"then the pipe), got {len(params)}: {plain_repr(params)}"
            )
        mode, pipe = (*params, self._pipe)[:2]
        return functools.partial(self._call, mode=mode, pipe=pipe)

    def __call__(self, flagId: int, mode: int = 0, pipe: int | None = None) -> None:
        self._call(flagId, mode, self._pipe if pipe is None else pipe)

    def __repr__(self) -> str:
        return f"{self._name}[modeId, pipe](flagId)"


#: Set a flag: template arguments modeId and pipe in brackets, then the flag id;
#: without brackets it is mode 0.
CrossCoreSetFlag = _Templated(_set_flag, "CrossCoreSetFlag", Pipe.PIPE_FIX)


def _check_mode(what: str, core: CoreContext, mode: int, pipe: int, pipes: frozenset) -> None:
    rank = core.launch.rank_ctx.rank
    if mode == 4:
        if core.launch.kernel_type != MODE4_KERNEL_TYPE:
            raise HcclCoreError(
                f"{what}[4, {pipe}]: mode 4 pairs an AIC with one AIV of a "
                f"{MODE4_KERNEL_TYPE} kernel; this kernel is {core.launch.kernel_type}",
                rank=rank,
            )
        pipes = frozenset(Pipe) - {Pipe.PIPE_ALL}
    if mode not in (0, 1, 2, 4) or not any(pipe == p for p in pipes):
        raise HcclCoreError(
            f"{what}[{mode}, {pipe}]: modeId must be 0, 1, 2 or 4 and pipe one of "
            f"{sorted(p.name for p in pipes)}",
            rank=rank,
        )
    if mode in (1, 2) and core.launch.kernel_type not in MIXED_KERNEL_TYPES:
        raise HcclCoreError(
            f"{what}[{mode}, {pipe}]: mode {mode} synchronises the cores inside one AI core "
            f"(KERNEL_TYPE_MIX_AIC_1_1 / _1_2: kernel_type {' or '.join(MIXED_KERNEL_TYPES)}); "
            f"this kernel is {core.launch.kernel_type}, which has one core per AI core",
            rank=rank,
        )


def _wait_flag(flagId: int, mode: int = 0, pipe: int = Pipe.PIPE_S) -> None:
    """Block until this core's counter of ``flagId`` is positive, then consume one count.

    ``mode`` and ``pipe`` are the template arguments (``CrossCoreWaitFlag<modeId, pipe>``):
    checked, and otherwise the same wait for every mode, as the counter is the core's own.
    """
    core, flagId = _kernel_core("CrossCoreWaitFlag", flagId, mode)
    _check_mode("CrossCoreWaitFlag", core, mode, pipe, WAIT_PIPES)
    core.launch.rank_ctx.server.kernel_call()
    launch = core.launch
    flags = _flags(launch)
    blocker = launch.rank_ctx.blocker
    key = _counter(core, flagId, mode)
    call = f"CrossCoreWaitFlag[4, {Pipe(pipe).name}]" if mode == 4 else "CrossCoreWaitFlag"
    others = [c for c in launch.cores if c != core]

    def released_or_stuck() -> bool:
        return bool(flags.completions.get(key)) or all(c in launch.returned for c in others)

    blocker.wait_for(
        released_or_stuck,
        lambda: f"rank {launch.rank_ctx.rank} {core_name(core)} waits in {call}({flagId})",
    )
    launch.rank_ctx.server.kernel_call()
    with blocker.lock:
        if flags.completions.get(key):
            launch.order.acquire(core, flags.completions[key].popleft())
            return
        blocker.raise_if_failed()
        other = flags.completions.get(_counter(core, flagId, 0 if mode == 4 else 4))
    hint = (
        f"; only a {'mode 0..2' if mode == 4 else 'mode 4'} Set of flag {flagId} is pending "
        "for it, and mode 4's counters are separate from modes 0..2's: Wait with the Set's mode"
        if other
        else ""
    )
    raise HcclDeadlockError(
        f"{call}({flagId}) on {core_name(core)} can never "
        "return: every other core returned from the kernel and no Set of this flag is "
        "pending for this core; every Set must be paired with a Wait on each receiving core" + hint,
        rank=launch.rank_ctx.rank,
    )


#: Wait for a flag: block until this core's counter of the flag id is positive, then consume
#: one count; optional template arguments modeId and pipe in brackets, then the flag id.
CrossCoreWaitFlag = _Templated(_wait_flag, "CrossCoreWaitFlag", Pipe.PIPE_S)
