"""The kernel-side HCCL client: the ``Hccl`` class of AscendC, call for call.

The client validates every call exactly as the C++ client does (returning -1
or doing nothing where C++ does), keeps the handle bookkeeping, and sends
valid tasks to the rank's :class:`~hccl_py.server.Server`. It never moves data
itself, so the same client serves the emulator, gloo and HCCL.
"""

from __future__ import annotations

import functools
import itertools
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from . import layout
from .constants import (
    HCCL_FAILED,
    HCCL_MAX_HANDLE_ID,
    HCCL_SUCCESS,
    INVALID_HANDLE_ID,
    KERNEL_REDUCE_OPS,
    MAX_REPEAT,
    CoreType,
    HcclCMDType,
    HcclDataType,
    HcclReduceOp,
    HcclServerConfig,
    HcclServerType,
)
from .context import current_rank_context
from .errors import (
    HcclBoundsError,
    HcclCoreError,
    HcclError,
    HcclOverlapError,
    HcclUnfinishedError,
    HcclUsageError,
)
from .gm import GmAddr
from .kernel import AIC, AIV, CoreContext, HcclContext, KernelCoreType, current_core_context
from .ops import OPS
from .sanitizer.overlap import send_recv_clash
from .task import Task, op_name
from .template import template
from .tiling import MC2_CC_TILING_SIZE, Mc2CcTiling, read_cc_tiling, tiling_bytes

_C = HcclCMDType


class _InvalidCall(Exception):  # noqa: N818 - internal control flow, never escapes
    """Internal: a Prepare argument is invalid; carries the reason."""

    def __init__(self, reason: str, cls: type[HcclError] = HcclUsageError, **facts: Any) -> None:
        super().__init__(reason)
        self.reason = reason
        self.cls = cls
        self.facts = facts


@dataclass
class _Handle:
    """One handle as seen by one core's Hccl object."""

    op: HcclCMDType
    repeat: int
    kind: KernelCoreType
    commits: int = 0
    waits: int = 0
    task: Task | None = None


class ClientState:
    """What the Hccl objects of all cores of one launch share for one context."""

    def __init__(self, context: HcclContext) -> None:
        self.context = context
        self.group = context.group
        self.launch = context.launch
        self.rank_ctx = context.launch.rank_ctx
        self.rank = self.group.rank_of(self.rank_ctx.rank)
        self.rank_dim = self.group.size
        self.tasks: dict[int, Task] = {}
        self.prepare_kinds: set[KernelCoreType] = set()
        self.sender: Hccl | None = None
        self.sender_core: CoreContext | None = None
        self.deps: list[Task] = []
        self.objects: list[Hccl] = []
        self.launch_idx: int | None = None
        self.waits: list[tuple[CoreContext, dict[bool, int], int, int]] = []
        self.finalized_by: tuple[CoreContext, dict[bool, int]] | None = None

    def launch_index(self) -> int:
        """This launch's index among the launches of this rank that sent tasks to the domain."""
        if self.launch_idx is None:
            counters = self.rank_ctx.extras.setdefault("launches_per_domain", {})
            self.launch_idx = next(counters.setdefault(self.group.name, itertools.count()))
        return self.launch_idx

    def record_wait(self, core: CoreContext, handle: int, round_idx: int) -> None:
        """A core starts waiting: it must be ordered before the sender's Finalize by a SyncAll."""
        passed = self.launch.barriers_passed(core)
        with self.rank_ctx.blocker.cond:
            finalized = self.finalized_by
            self.waits.append((core, passed, handle, round_idx))
        if finalized is not None and core != finalized[0]:
            self._unordered(finalized[0], core, handle, round_idx, "already finalized")

    def check_finalize_order(self, core: CoreContext) -> None:
        """The sending core finalizes: every other core's Waits must come before it (SyncAll)."""
        with self.rank_ctx.blocker.cond:
            self.finalized_by = (core, self.launch.barriers_passed(core))
            waits = list(self.waits)
        for other, passed, handle, round_idx in waits:
            if other != core and not self.launch.ordered_before(other, passed, core):
                self._unordered(core, other, handle, round_idx, "finalizes")

    def _unordered(
        self, finalizer: CoreContext, waiter: CoreContext, handle: int, round_idx: int, verb: str
    ) -> None:
        raise HcclCoreError(
            f"{finalizer.kind.name} core {finalizer.block_idx} {verb} while "
            f"{waiter.kind.name} core {waiter.block_idx} waits for handle {handle} round "
            f"{round_idx}: no SyncAll() separates that Wait from Finalize. Finalize resets "
            "the finish counters the other cores poll, so on hardware they may hang; call "
            "SyncAll() after the last Wait of every core and before Finalize",
            rank=self.rank_ctx.rank,
            domain=self.group.name,
            handle=handle,
            round=round_idx,
        )

    def task(self, handle: int, core: CoreContext) -> Task:
        """The task the sending core prepared for ``handle`` (waits until it exists)."""
        blocker = self.rank_ctx.blocker
        blocker.wait_for(
            lambda: handle in self.tasks,
            lambda: (
                f"rank {self.rank_ctx.rank} {core.kind.name} core {core.block_idx} waits for the "
                f"sending core to prepare handle {handle} in domain {self.group.name}"
            ),
        )
        return self.tasks[handle]

    def check_exit(self) -> None:
        """Called when the kernel returns: report work the real server would hang on.

        Also reports a handle that some core waited for some but not all of its
        rounds: such a kernel relies on Wait, and reads unfinished data.
        """
        sender = self.sender
        problems = []
        for h, info in enumerate(sender._handles if sender else ()):
            if info.commits < info.repeat:
                problems.append(
                    f"handle {h} ({info.task.describe() if info.task else op_name(info.op)}): "
                    f"{info.commits} of {info.repeat} rounds committed"
                )
        if sender is not None and sender._handles and not sender._finalized:
            problems.append("Finalize() was never called")
        for obj in self.objects:
            for h, info in enumerate(obj._handles):
                if 0 < info.waits < info.repeat:
                    problems.append(
                        f"handle {h} ({op_name(info.op)}): a core waited {info.waits} of its "
                        f"{info.repeat} rounds; a kernel that Waits a handle must Wait every round"
                    )
        if problems:
            raise HcclUnfinishedError(
                "kernel returned with unfinished work that would leave the server hanging: "
                + "; ".join(problems),
                rank=self.rank_ctx.rank,
                domain=self.group.name,
            )


#: The default server config, ``{CoreType::DEFAULT, 0}`` (``DEFAULT_CFG`` in AscendC).
DEFAULT_CFG = HcclServerConfig()


def _server_config(config: Any) -> HcclServerConfig:
    if isinstance(config, HcclServerConfig):
        return config
    kind, block = config
    return HcclServerConfig(CoreType(kind), int(block))


class Hccl:
    """The AscendC ``Hccl`` client. Create one per kernel instance (core).

    ``Hccl[HCCL_SERVER_TYPE_AICPU, HcclServerConfig(CoreType.ON_AIV, 10)]()``
    mirrors the C++ template arguments; keywords work too.
    """

    #: Set by hccl_py.framework on its internal clients: framework collectives are not
    #: kernel API calls, so the platform's op and size restrictions do not apply to them.
    _framework_task = False

    def __class_getitem__(cls, params: Any) -> Any:
        params = params if isinstance(params, tuple) else (params,)
        return functools.partial(cls, *params)

    def __init__(
        self,
        server_type: int = HcclServerType.HCCL_SERVER_TYPE_AICPU,
        config: HcclServerConfig | tuple = DEFAULT_CFG,
    ) -> None:
        self.server_type = HcclServerType(server_type)
        self.config = _server_config(config)
        self.last_error: str | None = None
        self._reset()

    def _reset(self) -> None:
        self._state: ClientState | None = None
        self._mode: str | None = None
        self._tiling_src: Any = None
        self._cc: dict[HcclCMDType, Mc2CcTiling] = {}
        self._handles: list[_Handle] = []
        self._n_syncs = 0
        self._finalized = False

    # ----------------------------------------------------------------- helpers
    def _strict(self) -> bool:
        ctx = current_rank_context(required=False)
        return True if ctx is None else ctx.config.strict

    def _fail(
        self,
        reason: str,
        ret: Any = HCCL_FAILED,
        cls: type[HcclError] = HcclUsageError,
        **facts: Any,
    ) -> Any:
        """Record a failed call; raise it in strict mode, else return the C++ result.

        Findings that hardware would hang or corrupt memory on (``cls.always_raise``)
        raise in every mode.
        """
        ctx = current_rank_context(required=False)
        domain = self._state.group.name if self._state else None
        err = cls(reason, rank=ctx.rank if ctx else None, domain=domain, **facts)
        self.last_error = str(err)
        if self._strict() or cls.always_raise:
            raise err
        return ret

    def _ok(self, value: Any = HCCL_SUCCESS) -> Any:
        self.last_error = None
        return value

    def _core(self) -> CoreContext:
        core = current_core_context()
        if core is None:
            raise RuntimeError(
                "Hccl methods must be called inside a kernel started by hccl_py.launch"
            )
        return core

    def _usable(self) -> str | None:
        """Why the object cannot communicate now, or None."""
        if self._state is None:
            return "the Hccl object is not initialised (call InitV2 first)"
        if self._finalized:
            return "the Hccl object was finalized and cannot communicate again"
        return None

    def _handle(self, handle: Any) -> _Handle | None:
        if isinstance(handle, (int, np.integer)) and not isinstance(handle, bool):
            h = int(handle)
            if 0 <= h < len(self._handles):
                return self._handles[h]
        return None

    def _is_sender(self, core: CoreContext) -> bool:
        cfg = self.config
        if cfg.type == CoreType.DEFAULT:
            return core.block_idx == cfg.blockId
        want = AIV if cfg.type == CoreType.ON_AIV else AIC
        return core.kind == want and core.block_idx == cfg.blockId

    def _core_problem(self, core: CoreContext) -> str | None:
        """Why this core may not Prepare on this object (core misuse), or None."""
        missing = self._missing_sender(core)
        if missing or not self._is_sender(core):
            return missing
        state = self._state
        if self.config.type == CoreType.DEFAULT:
            state.prepare_kinds.add(core.kind)
            if len(state.prepare_kinds) > 1:
                return (
                    "Prepare was called from both AIC and AIV block 0 without an "
                    "HcclServerConfig; all calls must run on one core type"
                )
        if state.sender not in (None, self):
            return "a second Hccl object sends on the same context on this core"
        return None

    def _missing_sender(self, core: CoreContext) -> str | None:
        """Why no core of this launch can send for this object's server config, or None."""
        cfg = self.config
        kind = (
            core.kind
            if cfg.type == CoreType.DEFAULT
            else (AIV if cfg.type == CoreType.ON_AIV else AIC)
        )
        n = core.launch.cores_of_kind[kind]
        if cfg.blockId < n:
            return None
        return (
            f"HcclServerConfig names {kind.name} block {cfg.blockId} as the sending core, but this "
            f"launch has {n} {kind.name} cores (block_dim={core.launch.block_dim}, "
            f"kernel_type={core.launch.kernel_type!r}): no task would ever be sent"
        )

    # ------------------------------------------------------------ initialising
    def _init(self, context: Any, tiling: Any, mode: str) -> None:
        if not isinstance(context, HcclContext):
            self._fail(
                f"{mode}: context must come from GetHcclContext(0 or 1), got {context!r}", ret=None
            )
            return
        if self._state is not None and not self._finalized:
            self._fail(f"{mode}: the Hccl object is already initialised", ret=None)
            return
        platform = context.launch.rank_ctx.config.platform
        if self.server_type != platform.server:
            self._fail(
                f"{mode}: server type {self.server_type.name} is not supported on {platform.name}",
                ret=None,
                expected=platform.server.name,
                actual=self.server_type.name,
            )
            return
        self._reset()
        self._state = context.launch.client_state(context.index, lambda: ClientState(context))
        self._state.objects.append(self)
        self._mode = mode
        self._tiling_src = tiling
        self._ok(None)

    def InitV2(self, context: HcclContext, initTiling: Any) -> None:
        """Bind this object to a domain and to the kernel's tiling struct (or its GM address)."""
        if initTiling is None or (isinstance(initTiling, GmAddr) and initTiling.is_null):
            self._fail("InitV2: initTiling is null", ret=None)
            return
        self._init(context, initTiling, "InitV2")

    def Init(self, context: HcclContext, initTiling: Any = None) -> None:
        """Deprecated V1 initialisation; with no tiling, Prepare needs no SetCcTiling."""
        no_tiling = initTiling is None or (isinstance(initTiling, GmAddr) and initTiling.is_null)
        self._init(context, None if no_tiling else initTiling, "Init")
        if self._state is not None and no_tiling:
            self._mode = "Init-no-tiling"

    def _register_cc(self, cc: Mc2CcTiling, where: str) -> int:
        try:
            op = HcclCMDType(cc.opType)
        except ValueError:
            op = None
        if op not in OPS:
            return self._fail(
                f"{where}: unknown or unsupported opType {cc.opType} in the Mc2CcTiling"
            )
        self._cc[op] = cc
        return self._ok()

    def SetCcTilingV2(self, offset: int) -> int:
        """Register the Mc2CcTiling at byte ``offset`` of the init tiling struct for its op type."""
        if self._state is None or self._mode not in ("InitV2", "Init"):
            return self._fail("SetCcTilingV2: the Hccl object is not initialised with InitV2")
        try:
            raw = tiling_bytes(self._tiling_src, nbytes=int(offset) + MC2_CC_TILING_SIZE)
            cc = read_cc_tiling(raw, int(offset))
        except (ValueError, TypeError, HcclBoundsError) as exc:
            return self._fail(f"SetCcTilingV2({offset}): bad offset: {exc}")
        return self._register_cc(cc, f"SetCcTilingV2({offset})")

    def SetCcTiling(self, ccTilingAddress: Any) -> int:
        """Deprecated V1 form: register the Mc2CcTiling at a GM address (or an instance)."""
        if self._state is None:
            return self._fail("SetCcTiling: the Hccl object is not initialised")
        if self._mode != "Init":
            return self._fail(
                "SetCcTiling: only valid after Init(context, initTiling); "
                "Init with and without tiling must not be mixed, and InitV2 takes SetCcTilingV2"
            )
        try:
            cc = Mc2CcTiling.from_buffer_copy(
                tiling_bytes(ccTilingAddress, nbytes=MC2_CC_TILING_SIZE)
            )
        except (ValueError, TypeError, HcclBoundsError) as exc:
            return self._fail(f"SetCcTiling: cannot read an Mc2CcTiling there: {exc}")
        return self._register_cc(cc, "SetCcTiling")

    # -------------------------------------------------------------- preparing
    def _check_common(
        self, op: HcclCMDType, sendBuf: Any, recvBuf: Any, dataType: Any, repeat: Any
    ) -> HcclDataType:
        platform = self._state.rank_ctx.config.platform
        if not platform.supports(op) and not self._framework_task:
            raise _InvalidCall(f"{op_name(op)} is not supported on {platform.name}")
        if self._mode != "Init-no-tiling" and op not in self._cc:
            raise _InvalidCall(
                f"no tiling set for {op_name(op)}: call SetCcTilingV2 with the offset of an "
                f"Mc2CcTiling whose opType is {op.name}"
            )
        if not isinstance(repeat, (int, np.integer)) or not 1 <= int(repeat) <= MAX_REPEAT:
            raise _InvalidCall(f"repeat must be 1..{MAX_REPEAT}", expected="1..255", actual=repeat)
        try:
            dtype = HcclDataType(int(dataType))
        except (ValueError, TypeError):
            raise _InvalidCall("data type out of range", actual=dataType) from None
        if dtype not in OPS[op].dtypes:
            raise _InvalidCall(
                f"data type {dtype.name} is not allowed for {op_name(op)}", actual=dtype.name
            )
        for name, buf in (("sendBuf", sendBuf), ("recvBuf", recvBuf)):
            if not isinstance(buf, GmAddr) or buf.is_null:
                raise _InvalidCall(f"{name} is null", actual=buf)
        if len(self._handles) + self._n_syncs >= HCCL_MAX_HANDLE_ID:
            raise _InvalidCall(
                f"the domain already used its {HCCL_MAX_HANDLE_ID} handles",
                expected=f"< {HCCL_MAX_HANDLE_ID} tasks",
            )
        return dtype

    @staticmethod
    def _check_count(name: str, count: Any, allow_zero: bool = True) -> int:
        if not isinstance(count, (int, np.integer)) or isinstance(count, bool) or count < 0:
            raise _InvalidCall(f"{name} must be a non-negative int", actual=count)
        if not allow_zero and count == 0:
            raise _InvalidCall(f"{name} must not be 0", actual=count)
        return int(count)

    @staticmethod
    def _check_reduce(op: Any) -> HcclReduceOp:
        try:
            reduce_op = HcclReduceOp(int(op))
        except (ValueError, TypeError):
            raise _InvalidCall("reduce op out of range", actual=op) from None
        if reduce_op not in KERNEL_REDUCE_OPS:
            raise _InvalidCall(
                f"reduce op {reduce_op.name} is not supported by the kernel API",
                actual=reduce_op.name,
            )
        return reduce_op

    def _array(self, name: str, values: Any) -> tuple[int, ...]:
        n = self._state.rank_dim
        if values is None or (isinstance(values, GmAddr) and values.is_null):
            raise _InvalidCall(f"AlltoAllV: {name} is missing")
        if isinstance(values, GmAddr):
            try:
                raw = values.read_bytes(8 * n)
            except HcclBoundsError as exc:
                raise _InvalidCall(f"AlltoAllV: cannot read {name}: {exc}") from None
            values = np.frombuffer(raw, dtype="<u8")
        if isinstance(values, torch.Tensor):
            values = values.detach().cpu()
        items = values.tolist() if hasattr(values, "tolist") else values
        if not isinstance(items, (list, tuple)) or len(items) != n:
            raise _InvalidCall(f"AlltoAllV: {name} must hold {n} (rankDim) integers", actual=values)
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in items):
            raise _InvalidCall(f"AlltoAllV: {name} must hold integers", actual=list(items))
        if any(v < 0 for v in items):
            raise _InvalidCall(f"AlltoAllV: {name} must be non-negative", actual=list(items))
        return tuple(items)

    def _prepare(self, op: HcclCMDType, commit: bool, check: Any) -> int:
        """Shared body of every Prepare call; ``check()`` validates and returns Task fields."""
        name = op_name(op)
        reason = self._usable()
        if reason:
            return self._fail(f"{name}: {reason}", ret=INVALID_HANDLE_ID, op=name)
        core = self._core()
        try:
            fields = check()
        except _InvalidCall as bad:
            return self._fail(
                f"{name}: {bad.reason}", ret=INVALID_HANDLE_ID, cls=bad.cls, op=name, **bad.facts
            )
        state = self._state
        handle = len(self._handles)
        problem = self._core_problem(core)
        if problem:
            return self._fail(
                f"{name}: {problem}",
                ret=INVALID_HANDLE_ID,
                cls=HcclCoreError,
                op=name,
                handle=handle,
            )
        sender = self._is_sender(core)
        if sender:
            task = Task(
                op=op,
                domain=state.group,
                rank=state.rank,
                rank_dim=state.rank_dim,
                handle=handle,
                seq=state.rank_ctx.next_seq(state.group),
                launch=state.launch_index(),
                deps=tuple(state.deps),
                skip_local=bool(self._cc[op].skipLocalRankCopy) if op in self._cc else False,
                **fields,
            )
            try:
                self._check_task(task)
            except _InvalidCall as bad:
                return self._fail(
                    f"{name}: {bad.reason}",
                    ret=INVALID_HANDLE_ID,
                    cls=bad.cls,
                    op=name,
                    handle=handle,
                    **bad.facts,
                )
            state.sender = self
            state.sender_core = core
            state.tasks[handle] = task
            self._handles.append(_Handle(op, task.repeat, core.kind, task=task))
            state.rank_ctx.server.submit(task)
        else:
            self._handles.append(_Handle(op, fields["repeat"], core.kind))
        self._ok()
        if commit:
            for _ in range(self._handles[handle].repeat):
                self.Commit(handle)
        return handle

    def _check_task(self, task: Task) -> None:
        """Client-side checks of a complete task: memory ownership, bounds, overlaps, limits."""
        me = self._state.rank_ctx.rank
        platform = self._state.rank_ctx.config.platform
        limit = None if self._framework_task else platform.max_alltoall_ranks
        alltoall = task.op in (_C.HCCL_CMD_ALLTOALL, _C.HCCL_CMD_ALLTOALLV)
        if alltoall and limit and task.rank_dim > limit:
            raise _InvalidCall(
                f"{platform.name} allows at most {limit} ranks in {task.name}", actual=task.rank_dim
            )
        for side, addr in (("send", task.send), ("recv", task.recv)):
            if addr.rank is not None and addr.rank != me:
                raise _InvalidCall(
                    f"{side}Buf points into rank {addr.rank}'s memory, not this rank's"
                )
            blocks = layout.all_blocks(task, side)
            extent = layout.span(blocks)
            if extent is None:
                continue
            lo, hi = extent
            if lo < 0 or hi > addr.alloc.nbytes:
                bad = np.flatnonzero(
                    (blocks.sizes > 0)
                    & ((blocks.starts < 0) | (blocks.starts + blocks.sizes > addr.alloc.nbytes))
                )[0]
                rnd, peer = layout.block_round_peer(task, side, int(bad))
                start = int(blocks.starts[bad])
                raise _InvalidCall(
                    f"{side} range of round {rnd}, block {peer} is bytes [{start}, "
                    f"{start + int(blocks.sizes[bad])}) of {addr.alloc.name}, outside its "
                    f"{addr.alloc.nbytes} bytes",
                    cls=HcclBoundsError,
                    round=rnd,
                    expected=f"[0, {addr.alloc.nbytes})",
                    actual=f"[{lo}, {hi})",
                )
            if (
                platform.max_task_bytes
                and not self._framework_task
                and hi - lo > platform.max_task_bytes
            ):
                raise _InvalidCall(
                    f"one task's data exceeds {platform.max_task_bytes} bytes on {platform.name}",
                    actual=hi - lo,
                )
        self._check_overlap(task)

    def _check_overlap(self, task: Task) -> None:
        policy = self._state.rank_ctx.config.overlap
        if policy == "ignore":
            return
        blocks = layout.all_blocks(task, "recv")
        clash = layout.first_overlap(blocks)
        rb = None
        if clash is not None:
            (ra, ba), (rb, bb) = (layout.block_round_peer(task, "recv", i) for i in clash)
            reason = (
                f"receive ranges overlap: round {ra} block {ba} and round {rb} block {bb} write the "
                f"same bytes of {task.recv.alloc.name}; with repeat > 1 use strideCount >= repeat * count"
            )
        else:
            reason = send_recv_clash(task)
            if reason is None:
                return
        if policy == "error":
            raise _InvalidCall(reason, cls=HcclOverlapError, round=rb)
        warnings.warn(f"rank {self._state.rank_ctx.rank}: {task.name}: {reason}", stacklevel=4)

    @template("commit")
    def AllReduce(
        self,
        sendBuf: GmAddr,
        recvBuf: GmAddr,
        count: int,
        dataType: int,
        op: int,
        repeat: int = 1,
        commit: bool = False,
    ) -> int:
        """Prepare ``repeat`` rounds of AllReduce; returns the handle id or -1."""

        def check() -> dict:
            dtype = self._check_common(_C.HCCL_CMD_ALLREDUCE, sendBuf, recvBuf, dataType, repeat)
            return dict(
                send=sendBuf,
                recv=recvBuf,
                dtype=dtype,
                count=self._check_count("count", count),
                reduce_op=self._check_reduce(op),
                repeat=int(repeat),
            )

        return self._prepare(_C.HCCL_CMD_ALLREDUCE, commit, check)

    @template("commit")
    def AllGather(
        self,
        sendBuf: GmAddr,
        recvBuf: GmAddr,
        sendCount: int,
        dataType: int,
        strideCount: int = 0,
        repeat: int = 1,
        commit: bool = False,
    ) -> int:
        """Prepare ``repeat`` rounds of AllGather; returns the handle id or -1."""

        def check() -> dict:
            dtype = self._check_common(_C.HCCL_CMD_ALLGATHER, sendBuf, recvBuf, dataType, repeat)
            return dict(
                send=sendBuf,
                recv=recvBuf,
                dtype=dtype,
                count=self._check_count("sendCount", sendCount),
                stride=self._check_count("strideCount", strideCount),
                repeat=int(repeat),
            )

        return self._prepare(_C.HCCL_CMD_ALLGATHER, commit, check)

    @template("commit")
    def ReduceScatter(
        self,
        sendBuf: GmAddr,
        recvBuf: GmAddr,
        recvCount: int,
        dataType: int,
        op: int,
        strideCount: int = 0,
        repeat: int = 1,
        commit: bool = False,
    ) -> int:
        """Prepare ``repeat`` rounds of ReduceScatter; returns the handle id or -1."""

        def check() -> dict:
            dtype = self._check_common(
                _C.HCCL_CMD_REDUCE_SCATTER, sendBuf, recvBuf, dataType, repeat
            )
            return dict(
                send=sendBuf,
                recv=recvBuf,
                dtype=dtype,
                count=self._check_count("recvCount", recvCount),
                reduce_op=self._check_reduce(op),
                stride=self._check_count("strideCount", strideCount),
                repeat=int(repeat),
            )

        return self._prepare(_C.HCCL_CMD_REDUCE_SCATTER, commit, check)

    @template("commit")
    def AlltoAll(
        self,
        sendBuf: GmAddr,
        recvBuf: GmAddr,
        dataCount: int,
        dataType: int,
        strideCount: int = 0,
        repeat: int = 1,
        commit: bool = False,
    ) -> int:
        """Prepare ``repeat`` rounds of AlltoAll; returns the handle id or -1."""

        def check() -> dict:
            dtype = self._check_common(_C.HCCL_CMD_ALLTOALL, sendBuf, recvBuf, dataType, repeat)
            return dict(
                send=sendBuf,
                recv=recvBuf,
                dtype=dtype,
                count=self._check_count(
                    "dataCount", dataCount, OPS[_C.HCCL_CMD_ALLTOALL].zero_count
                ),
                stride=self._check_count("strideCount", strideCount),
                repeat=int(repeat),
            )

        return self._prepare(_C.HCCL_CMD_ALLTOALL, commit, check)

    @template("commit")
    def AlltoAllV(
        self,
        sendBuf: GmAddr,
        sendCounts: Sequence[int],
        sdispls: Sequence[int],
        sendType: int,
        recvBuf: GmAddr,
        recvCounts: Sequence[int],
        rdispls: Sequence[int],
        recvType: int,
        repeat: int = 1,
        commit: bool = False,
    ) -> int:
        """Prepare ``repeat`` rounds of AlltoAllV (uint64 counts and displacements per peer)."""

        def check() -> dict:
            dtype = self._check_common(_C.HCCL_CMD_ALLTOALLV, sendBuf, recvBuf, sendType, repeat)
            if int(recvType) != int(sendType):
                raise _InvalidCall(
                    "recvType must equal sendType", expected=int(sendType), actual=int(recvType)
                )
            return dict(
                send=sendBuf,
                recv=recvBuf,
                dtype=dtype,
                repeat=int(repeat),
                send_counts=self._array("sendCounts", sendCounts),
                sdispls=self._array("sdispls", sdispls),
                recv_counts=self._array("recvCounts", recvCounts),
                rdispls=self._array("rdispls", rdispls),
            )

        return self._prepare(_C.HCCL_CMD_ALLTOALLV, commit, check)

    # ------------------------------------------------ commit / wait / finalize
    def Commit(self, handleId: int) -> None:
        """Let the server run the next round of ``handleId`` (once per round)."""
        reason = self._usable()
        if reason:
            self._fail(f"Commit: {reason}", ret=None, handle=handleId)
            return
        info = self._handle(handleId)
        if info is None:
            self._fail(
                f"Commit: handle {handleId} was never returned by Prepare; nothing sent",
                ret=None,
                handle=handleId,
            )
            return
        name = op_name(info.op)
        if info.commits >= info.repeat:
            self._fail(
                f"extra Commit: all {info.repeat} rounds are already committed",
                ret=None,
                handle=int(handleId),
                op=name,
                round=info.commits,
                expected=f"<= {info.repeat} commits",
                actual=info.commits + 1,
            )
            return
        core = self._core()
        if core.kind != info.kind:
            self._fail(
                f"Commit from an {core.kind.name} core of a handle prepared on {info.kind.name}",
                ret=None,
                cls=HcclCoreError,
                handle=int(handleId),
                op=name,
                round=info.commits,
            )
            return
        info.commits += 1
        if info.task is not None:
            self._state.rank_ctx.server.commit(info.task, info.commits - 1)
        self._ok(None)

    def Wait(self, handleId: int) -> int:
        """Block until the next round of ``handleId`` finished; 0, or -1 without waiting."""
        reason = self._usable()
        if reason:
            return self._fail(f"Wait: {reason}", handle=handleId)
        info = self._handle(handleId)
        if info is None:
            return self._fail(
                f"Wait: handle {handleId} is out of range or was never returned by Prepare",
                handle=handleId,
            )
        h = int(handleId)
        name = op_name(info.op)
        if info.waits >= info.repeat:
            return self._fail(
                f"Wait: all {info.repeat} rounds were already waited",
                handle=h,
                op=name,
                round=info.waits,
            )
        if info.waits >= info.commits:
            return self._fail(
                f"Wait before Commit: round {info.waits} was not committed (it would hang on hardware)",
                handle=h,
                op=name,
                round=info.waits,
                expected=f"> {info.waits} commits",
                actual=info.commits,
            )
        core = self._core()
        if core.kind != info.kind:
            return self._fail(
                f"Wait from an {core.kind.name} core of a handle prepared on {info.kind.name}",
                cls=HcclCoreError,
                handle=h,
                op=name,
                round=info.waits,
                expected=info.kind.name,
                actual=core.kind.name,
            )
        later = [g for g in range(h + 1, len(self._handles)) if self._handles[g].waits]
        if later:
            reason = (
                f"Wait(handle {h}) after Wait(handle {later[0]}): Waits for different handles "
                f"must follow Prepare order"
            )
            if self._strict():
                return self._fail(reason, handle=h, op=name, round=info.waits)
            warnings.warn(f"rank {self._state.rank_ctx.rank}: {reason}", stacklevel=2)
        self._state.record_wait(core, h, info.waits)
        task = info.task or self._state.task(h, core)
        self._state.rank_ctx.server.wait(task, info.waits)
        info.waits += 1
        return self._ok(HCCL_SUCCESS)

    def Query(self, handleId: int) -> int:
        """How many rounds of ``handleId`` have finished (0..repeat); -1 for a bad handle."""
        if self._state is None:
            return self._fail("Query: the Hccl object is not initialised", handle=handleId)
        info = self._handle(handleId)
        if info is None:
            return self._fail(
                f"Query: handle {handleId} is out of range or was never returned by Prepare",
                handle=handleId,
            )
        if self._finalized:
            return self._ok(0)
        task = info.task or self._state.tasks.get(int(handleId))
        return self._ok(0 if task is None else self._state.rank_ctx.server.finished(task))

    @template("sync")
    def Finalize(self, sync: bool = True) -> None:
        """Tell the server no more tasks come and wait for the last one (``Finalize[False]`` skips that)."""
        reason = self._usable()
        if reason:
            self._fail(f"Finalize: {reason}", ret=None)
            return
        platform = self._state.rank_ctx.config.platform
        if not sync:
            has_batch_write = any(h.op == _C.HCCL_CMD_BATCH_WRITE for h in self._handles)
            if not (platform.finalize_async_allowed and has_batch_write):
                self._fail(
                    f"Finalize<false> is only allowed on Atlas A3 with BatchWrite tasks, "
                    f"not on {platform.name} with these tasks",
                    ret=None,
                )
                return
        if self._state.sender is self:
            server = self._state.rank_ctx.server
            for h, info in enumerate(self._handles):
                if info.commits < info.repeat:
                    raise HcclUnfinishedError(
                        f"Finalize with handle {h} ({info.task.describe()}) committed {info.commits} of "
                        f"{info.repeat} rounds: the server would wait forever for the rest",
                        rank=self._state.rank_ctx.rank,
                        domain=self._state.group.name,
                        handle=h,
                        op=op_name(info.op),
                        round=info.commits,
                    )
            self._state.check_finalize_order(self._core())
            if self._handles:
                server.finalize(
                    self._state.group,
                    self._state.rank,
                    self._state.launch_index(),
                    len(self._handles),
                )
            if sync:
                for info in self._handles:
                    server.wait(info.task, info.repeat - 1)
        self._finalized = True
        self._ok(None)

    # ------------------------------------------------------------ other calls
    def GetRankId(self) -> int:
        """This rank's index in the object's domain."""
        if self._state is None:
            return self._fail("GetRankId: the Hccl object is not initialised", ret=0)
        return self._state.rank

    def GetRankDim(self) -> int:
        """Number of ranks in the object's domain."""
        if self._state is None:
            return self._fail("GetRankDim: the Hccl object is not initialised", ret=0)
        return self._state.rank_dim

    def InterHcclGroupSync(self, srcGroupID: int, srcHandleID: int) -> None:
        """Every later task of this domain starts only after task ``srcHandleID`` of domain ``srcGroupID``."""
        reason = self._usable()
        if reason:
            self._fail(f"InterHcclGroupSync: {reason}", ret=None)
            return
        platform = self._state.rank_ctx.config.platform
        if (
            platform.group_sync_counts_as_task
            and len(self._handles) + self._n_syncs >= HCCL_MAX_HANDLE_ID
        ):
            self._fail(
                f"InterHcclGroupSync: the domain already used its {HCCL_MAX_HANDLE_ID} handles "
                f"(on {platform.name} group syncs count as tasks)",
                ret=None,
            )
            return
        other = self._state.launch.clients.get(int(srcGroupID))
        if other is None or other is self._state:
            self._fail(
                f"InterHcclGroupSync: srcGroupID {srcGroupID} is not another initialised domain "
                "of this kernel",
                ret=None,
            )
            return
        # Only the sending core records the dependency. The task may come from another
        # core (the sending core of domain srcGroupID) that has not prepared it yet: wait
        # for it then; only when this core itself sends in that domain is it final.
        core = self._core()
        sender = self._is_sender(core)
        valid_id = isinstance(srcHandleID, int) and 0 <= srcHandleID < HCCL_MAX_HANDLE_ID
        src = other.tasks.get(srcHandleID) if valid_id else None
        if src is None and sender:
            if not valid_id or other.sender_core is core:
                self._fail(
                    f"InterHcclGroupSync: handle {srcHandleID} was never prepared in domain {srcGroupID}",
                    ret=None,
                    handle=srcHandleID,
                )
                return
            src = other.task(srcHandleID, core)
        if sender:
            self._state.deps.append(src)
        if platform.group_sync_counts_as_task:
            self._n_syncs += 1
        self._ok(None)
