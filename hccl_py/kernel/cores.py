"""Kernel execution: ``hp.launch`` runs an AscendC-style kernel on every core of this rank.

Each core is a thread with its own :class:`CoreContext` (``GetBlockIdx()``, ``GetBlockNum()``,
``g_coreType`` answer per core; ``SyncAll()`` is a barrier across cores, as in AscendC), from
the rank's blocker (``Blocker.spawn``): gloo's and HCCL's process pool, the emulator's runners.
"""

from __future__ import annotations

import enum
import functools
import threading
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..core.config import KERNEL_GRACE_S, c_int, checked_int
from ..core.constants import MAX_BLOCK_DIM
from ..core.current import serialized
from ..core.errors import HcclCoreError, HcclDeadlockError, HcclPeerError, HcclRunnerStartError
from ..core.gm import GmAddr
from ..core.group import Group
from ..core.grouping import core_thread_name
from ..core.template import template
from ..tiling.structs import cc_engines
from ..trace.hooks import core_tid, recorder
from ..trace.recorder import now_us
from .clocks import Clock, CoreClocks, join, ordered_before
from .context import (
    RankContext,
    core_name,
    current_core_context,
    current_rank_context,
    set_core_context,
    set_rank_context,
)
from .context_fields import ContextFields
from .launch_args import gm_arguments, resolve_groups


class KernelCoreType(enum.IntEnum):
    """The kind of core a kernel instance runs on (compare with ``g_coreType``)."""

    AIC = 1
    AIV = 2


AIC = KernelCoreType.AIC
AIV = KernelCoreType.AIV

#: kernel_type -> (AIC cores per block, AIV cores per block). KERNEL_TYPE_MIX_AIC_1_0 and
#: _MIX_AIV_1_0 (a mixed kernel's code run on one core type, as ops-transformer's 950
#: MatmulAllReduce cube-only path launches) have the layout of "aic" and "aiv".
KERNEL_TYPES: dict[str, tuple[int, int]] = {
    "aiv": (0, 1),
    "aic": (1, 0),
    "mix_aic_1_2": (1, 2),
    "mix_aic_1_1": (1, 1),
    "mix_aic_1_0": (1, 0),
    "mix_aiv_1_0": (0, 1),
}


@dataclass(frozen=True, eq=False)
class CoreContext:
    """One core of a running kernel: one object per core and launch, so it is equal only to
    itself (identity's hash, which the cross-core clocks ask at every SyncAll and flag)."""

    launch: LaunchState
    kind: KernelCoreType
    block_idx: int
    block_num: int
    sub_block_idx: int


class HcclContext(ContextFields):
    """What ``GetHcclContext(index)`` returns: the kernel's handle on one domain.

    It is what ``Init``/``InitV2`` take, and it has the C++ context fields that
    shipping kernels read (:class:`~hccl_py.kernel.context_fields.ContextFields`).
    """

    def __init__(self, index: int, group: Group, launch: LaunchState) -> None:
        self.index = index
        self.group = group
        self.launch = launch

    def __repr__(self) -> str:
        return f"HcclContext({self.index}, {self.group.name})"

    def windows_in(self, rankId: int) -> GmAddr:
        """``windowsIn[rankId]``: domain rank ``rankId``'s In window (950: index 0, this rank's)."""
        return self._window(rankId, "In")

    def windows_out(self, rankId: int) -> GmAddr:
        """``windowsOut[rankId]``: domain rank ``rankId``'s Out window (950: index 0, this rank's)."""
        return self._window(rankId, "Out")


class LaunchState:
    """State shared by the cores of one kernel launch on one rank."""

    def __init__(
        self, rank_ctx: RankContext, groups: Mapping[int, Group], kernel_type: str, block_dim: int
    ) -> None:
        self.rank_ctx = rank_ctx
        self.groups = dict(groups)
        self.kernel_type = kernel_type
        self.block_dim = block_dim
        n_aic, n_aiv = KERNEL_TYPES[kernel_type]
        self.cores_of_kind = {AIC: n_aic * block_dim, AIV: n_aiv * block_dim}
        #: Whether one core runs the kernel (no other core repeats its client calls).
        self.alone = (n_aic + n_aiv) * block_dim == 1
        self.clients: dict[int, Any] = {}
        #: Checks of client state run when the kernel returns (Hcomm's uncommitted requests).
        self.exit_checks: dict[Any, Callable[[], None]] = {}
        self.args: tuple = ()  # the kernel's arguments, for cc_engines
        self._lock = threading.Lock()
        self._barrier_arrived, self._barrier_generation = {True: 0, False: 0}, {True: 0, False: 0}
        #: Per SyncAll kind (True: AIV cores): the join of the arrived cores' clocks, and the
        #: last completed barrier's clock.
        self._barrier_clock: dict[bool, Clock] = {True: {}, False: {}}
        self._barrier_done: dict[bool, Clock] = {}
        #: What each core has seen happen (:mod:`.clocks`).
        self.order = CoreClocks()
        self.returned: list[CoreContext] = []
        #: Every core of the launch, AIC cores first: made once, so that each core is one
        #: object (a :class:`CoreContext` is equal only to itself).
        self.cores = self._make_cores()

    @functools.cached_property
    def cc_engines(self) -> dict[str, int]:
        """groupName -> commEngine of the launch's cc tilings (parsed at a 950 context's ask)."""
        return {k: v for a in reversed(self.args) for k, v in cc_engines(a).items()}

    def _make_cores(self) -> tuple[CoreContext, ...]:
        """Every core of the launch, AIC cores first."""
        cores = []
        for kind in (AIC, AIV):
            n = self.cores_of_kind[kind]
            per_block = max(1, n // self.block_dim)
            for idx in range(n):
                cores.append(CoreContext(self, kind, idx, self.block_dim, idx % per_block))
        return tuple(cores)

    def client_state(self, context: HcclContext, factory: Callable[[HcclContext], Any]) -> Any:
        """The client state of ``context``, shared by every core's Hccl object: made by
        ``factory(context)`` on the first ask."""
        index = context.index
        with self._lock:
            if index not in self.clients:
                self.clients[index] = factory(context)
            return self.clients[index]

    def finish(self) -> None:
        """The kernel returned: check each client's exit, then the server forgets the finished tasks."""
        for client in self.clients.values():
            client.check_exit()
        for check in self.exit_checks.values():
            check()
        # no cycle keeps the launch's buffers (its tasks, its arguments) until a garbage
        # collection: the sending Hccl object and its client state hold each other, client
        # states and cores hold this launch state, which holds its cores
        for client in self.clients.values():
            if client.launch_idx is not None:
                self.rank_ctx.server.launch_returned(client.group, client.rank, client.launch_idx)
            client.sender = client.sender_core = None
        self.clients.clear()
        self.order.clear()
        self.returned.clear()
        self.cores = ()

    def clock(self, core: CoreContext) -> Clock:
        """A copy of ``core``'s vector clock now (:mod:`.clocks`)."""
        with self.rank_ctx.blocker.lock:
            return self.order.of(core)

    def ordered_before(self, early: CoreContext, early_clock: Clock, late: CoreContext, now=None) -> bool:  # fmt: skip
        """Whether ``late`` has now (``now``: its :meth:`clock`, when the caller has it) seen an
        event of ``early`` after ``early_clock``: a SyncAll both passed, or a chain of flags."""
        return ordered_before(early, early_clock, self.clock(late) if now is None else now)

    def core_returned(self, core: CoreContext) -> None:
        """Under the blocker's lock: ``core`` returned from the kernel."""
        self.returned.append(core)

    def _absent(self, only_aiv: bool) -> list[CoreContext]:
        """Cores that returned from the kernel and so can never arrive at this barrier."""
        return [c for c in self.returned if c.kind == AIV or not only_aiv]

    def sync_all(self, core: CoreContext, aiv_only: bool) -> None:
        """Barrier across the launch's AIV cores (or all cores when ``aiv_only`` is False)."""
        only_aiv = aiv_only and self.cores_of_kind[AIV] > 0
        if not aiv_only and not all(self.cores_of_kind.values()):
            raise HcclCoreError(
                f"SyncAll[False]() in a kernel of type {self.kernel_type}: it pairs the AIV cores with "
                "the AIC cores through cross-core flags (dav_c220 SyncAllImpl<false>), and this "
                f"kernel has no {'AIC' if core.kind == AIV else 'AIV'} cores, so it never "
                "returns on hardware; use SyncAll(), a barrier of the kernel's own cores",
                rank=self.rank_ctx.rank,
            )
        if only_aiv and core.kind != AIV:
            raise HcclCoreError(
                "SyncAll() (AIV-only by default) called on an AIC core; use SyncAll[False]()",
                rank=self.rank_ctx.rank,
            )
        if self.alone:  # a barrier of one core: nothing to wait for, no other core to order
            return
        n = self.cores_of_kind[AIV] if only_aiv else sum(self.cores_of_kind.values())
        blocker = self.rank_ctx.blocker
        with blocker.lock:
            generation = self._barrier_generation[only_aiv]
            self._barrier_arrived[only_aiv] += 1
            joined = join(self._barrier_clock[only_aiv], self.order.release(core))
            if self._barrier_arrived[only_aiv] == n:
                self._barrier_arrived[only_aiv] = 0
                self._barrier_generation[only_aiv] += 1
                self._barrier_clock[only_aiv] = {}
                self._barrier_done[only_aiv] = joined
                self.order.acquire(core, joined)
                blocker.cond.notify_all()
                return
        rank = self.rank_ctx.rank
        blocker.wait_for(
            # asked at every switch: no call while no core has returned (the usual case)
            lambda: (
                self._barrier_generation[only_aiv] != generation
                or bool(self.returned and self._absent(only_aiv))
            ),
            lambda: (
                f"rank {rank} {core_name(core)} waits in SyncAll: "
                f"{self._barrier_arrived[only_aiv]} of {n} cores arrived"
            ),
        )
        with blocker.lock:
            if self._barrier_generation[only_aiv] != generation:
                # the next barrier of this kind needs this core: the last one done is its own
                self.order.acquire(core, self._barrier_done[only_aiv])
                return
            blocker.raise_if_failed()
            gone = ", ".join(map(core_name, self._absent(only_aiv)))
            arrived = self._barrier_arrived[only_aiv]
            raise HcclDeadlockError(
                f"SyncAll can never complete: {gone} returned from the kernel without arriving "
                f"({arrived} of {n} cores arrived); every core must call SyncAll() the same "
                "number of times", rank=rank,
            )  # fmt: skip


def launch(
    kernel: Callable[..., Any],
    *args: Any,
    block_dim: int = 1,
    kernel_type: str = "aiv",
    groups: Any = None,
) -> None:
    """Run ``kernel(*args)`` on every core of this rank, as ``kernel<<<block_dim>>>`` would.

    Tensor arguments arrive as GM addresses, ``None`` as the null address, a ctypes tiling as
    the address of a copy of its bytes. ``groups`` maps context index 0/1 to domains (default:
    the world group for index 0). Returns when every core returned; re-raises a core's error."""
    if not isinstance(kernel_type, str) or kernel_type not in KERNEL_TYPES:
        raise ValueError(f"kernel_type must be one of {sorted(KERNEL_TYPES)}, not {kernel_type!r}")
    block_dim = checked_int("block_dim", block_dim, 1, MAX_BLOCK_DIM)
    rank_ctx = current_rank_context()
    state, gm_args = rank_ctx.serial_run(_begin, kernel, args, groups, kernel_type, block_dim)
    server, rank = rank_ctx.server, rank_ctx.rank
    if state.alone:  # one core (which the launch state found when it made them): one scope
        scope = server.alone_scope(rank)
        with scope:
            _run_core(kernel, gm_args, state.cores[0], scope.core)
    else:
        bufs = [a.alloc for a in gm_args if isinstance(a, GmAddr) and a]
        with server.kernel_buffers(rank, bufs), server.kernel_scope(rank):
            _run_cores(kernel, gm_args, state.cores, rank_ctx)
    rank_ctx.serial_run(state.finish)


def _begin(kernel: Callable[..., Any], args: tuple, *rest: Any) -> Any:
    """A launch's state and GM arguments (``rest``: groups, kernel type, block_dim; locked)."""
    rank_ctx = current_rank_context()
    state = LaunchState(rank_ctx, resolve_groups(rank_ctx, rest[0]), *rest[1:])
    state.args = args
    return state, gm_arguments(rank_ctx, kernel, args)


def _run_core(kernel: Callable[..., Any], args: list[Any], core: CoreContext, scope: Any) -> None:
    previous = current_core_context()
    set_core_context(core)
    try:
        with scope:
            kernel(*args)
    finally:
        set_core_context(previous)


def _run_cores(
    kernel: Callable[..., Any],
    args: list[Any],
    cores: tuple[CoreContext, ...],
    rank_ctx: RankContext,
) -> None:
    blocker = rank_ctx.blocker
    errors: list[tuple[CoreContext, BaseException]] = []
    done = [0]
    refused: list[HcclRunnerStartError] = []  # a core got no thread: none runs the kernel

    def body(core: CoreContext) -> None:
        set_rank_context(rank_ctx)
        try:
            if not refused:
                scope = rank_ctx.server.core_scope(rank_ctx.rank, core_name(core))
                _run_core(kernel, args, core, scope)
        except BaseException as exc:  # noqa: BLE001 - reported to the rank thread
            exc.hccl_rank = rank_ctx.rank
            exc.hccl_traceback = traceback.format_exc()
            errors.append((core, exc))
            blocker.fail(exc)
        finally:
            with blocker.lock:
                done[0] += 1
                core.launch.core_returned(core)
                blocker.cond.notify_all()
            set_rank_context(None)
            blocker.leave()

    threads = []
    for i, c in enumerate(cores):  # on the emulator none runs before this runner blocks
        name = core_thread_name(rank_ctx.rank, c.kind._name_, c.block_idx)
        try:
            threads.append(
                blocker.spawn(functools.partial(body, c), name, (rank_ctx.rank, i), rank_ctx.rank)
            )
        except HcclRunnerStartError as exc:
            refused.append(exc)
            blocker.fail(exc)  # real threads (gloo) may have started the kernel: stop them
            break
    own: BaseException | None = None  # the rank's own wait failed (its kernel timed out)
    try:
        blocker.wait_for(
            lambda: done[0] == len(threads),
            lambda: (
                f"rank {rank_ctx.rank} waits for its kernel: {done[0]} of {len(threads)} cores returned"
            ),
            # after the cores' own waits, which name what they wait for, had their time
            blocker.timeout + KERNEL_GRACE_S,
        )
    except BaseException as exc:
        exc.hccl_rank = rank_ctx.rank
        blocker.fail(exc)
        own = exc
        raise
    finally:
        blocker.join_spawned(threads, f"rank {rank_ctx.rank} waits for its cores to stop")
        if refused:
            raise refused[0]
        # a core's own failure first, then the rank's (its kernel timed out), then a stopped core
        found = next(((c, e) for c, e in errors if not isinstance(e, HcclPeerError)), None)
        if found or (errors and (own is None or isinstance(own, HcclPeerError))):
            core, exc = found or errors[0]
            if hasattr(exc, "add_note"):
                exc.add_note(f"raised on rank {rank_ctx.rank}, {core_name(core)}")
            raise exc


def _core() -> CoreContext:
    core = current_core_context()
    if core is None:
        raise RuntimeError("this call is only valid inside a kernel started with hccl_py.launch")
    return core


def GetBlockIdx() -> int:
    """Index of the calling core among the cores of its kind."""
    return _core().block_idx


def GetBlockNum() -> int:
    """The kernel's block_dim (the number of AI Core blocks)."""
    return _core().block_num


def GetSubBlockIdx() -> int:
    """Index of an AIV core inside its AI Core group (0 for AIC and plain AIV kernels)."""
    return _core().sub_block_idx


def GetTaskRatio() -> int:
    """AIV cores per AIC core on an AIV core of a mixed kernel, else 1 (``GetTaskRation``)."""
    core = _core()
    n_aic, n_aiv = KERNEL_TYPES[core.launch.kernel_type]
    return 1 if core.kind == AIC else max(1, n_aiv // max(1, n_aic))


@template("aiv_only")
@serialized
def SyncAll(aiv_only: bool = True) -> None:
    """Barrier across the kernel's cores: AIV cores by default, all cores with ``SyncAll[False]()``.

    A recorded run shows it on the core's track, as long as the core waited there.
    """
    core = _core()
    rec = recorder()
    start = now_us() if rec is not None else 0.0
    core.launch.sync_all(core, aiv_only)
    if rec is not None:
        head = "SyncAll()" if aiv_only else "SyncAll[False]()"
        rec.call("SyncAll", core_tid(), start, now_us(), {"call": head})


def GetHcclContext(index: int = 0) -> HcclContext:
    """The kernel's context for domain ``index`` (0 or 1), as ``GetHcclContext<index>()``."""
    core = _core()
    number = c_int(index)
    if number is None:
        raise ValueError(
            f"GetHcclContext({index!r}): the context index is an int, 0 or 1 (the C++ "
            f"template argument), not {type(index).__name__}"
        )
    group = core.launch.groups.get(number)
    if group is None:
        raise ValueError(
            f"GetHcclContext({number}): this launch has domains "
            f"{sorted(core.launch.groups)}; pass groups={{0: ..., 1: ...}} to hccl_py.launch"
        )
    return HcclContext(number, group, core.launch)


class _CoreTypeProxy:
    """``g_coreType``: compares equal to ``AIV`` or ``AIC`` according to the calling core."""

    def _kind(self) -> KernelCoreType:
        return _core().kind

    def __eq__(self, other: object) -> bool:
        return self._kind() == other

    def __hash__(self) -> int:
        return id(self)

    def __int__(self) -> int:
        return int(self._kind())

    def __repr__(self) -> str:
        core = current_core_context()
        return f"g_coreType({core.kind.name if core else 'outside a kernel'})"


g_coreType = _CoreTypeProxy()
