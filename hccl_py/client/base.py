"""The Hccl object itself: its state, its failure reporting, and Init/SetCcTiling.

:class:`HcclBase` holds what every call needs (the domain's shared state, the
handles this core's object returned, the registered cc tilings) and the one
way a call fails (:meth:`HcclBase._fail`). Prepare calls are added by
:mod:`.prepare`, task control (Commit, Wait, Query, Finalize) by :mod:`.hccl`.
"""

from __future__ import annotations

import functools
import operator
from typing import Any

import numpy as np

from ..core import report
from ..core.constants import (
    HCCL_FAILED,
    HCCL_SUCCESS,
    INVALID_HANDLE_ID,
    HcclCMDType,
    HcclServerConfig,
    HcclServerType,
)
from ..core.errors import (
    HcclBoundsError,
    HcclCoreError,
    HcclError,
    HcclUsageError,
    HcclWarning,
    InvalidCall,
)
from ..core.gm import GmAddr, what_is
from ..kernel.context import current_rank_context
from ..kernel.cores import CoreContext, HcclContext, current_core_context
from ..ops import OPS
from ..server.protocol import Server
from ..tiling import (
    MC2_CC_TILING_SIZE,
    Mc2CcTiling,
    cc_group_name,
    read_cc_tiling,
    tiling_bytes,
)
from .lifecycles import LIFECYCLES
from .log import logged
from .sender import DEFAULT_CFG, server_config
from .state import ClientState, Handle


class HcclBase:
    """State and initialisation of the AscendC ``Hccl`` client (see :class:`~hccl_py.client.Hccl`)."""

    def __class_getitem__(cls, params: Any) -> Any:
        params = params if isinstance(params, tuple) else (params,)
        return functools.partial(cls, *params)

    #: The user's collective (e.g. "all_reduce") when this is an internal client of
    #: hccl_py.framework, which reports name; None for kernel code. Framework collectives are
    #: not kernel API calls, so the platform's op and size restrictions do not bind them.
    framework: str | None = None

    def __init__(
        self,
        server_type: int = HcclServerType.HCCL_SERVER_TYPE_AICPU,
        config: HcclServerConfig | tuple = DEFAULT_CFG,
    ) -> None:
        self.server_type = HcclServerType(server_type)
        self.config = server_config(config)
        self.last_error: str | None = None
        self._reset()

    @property
    def server(self) -> Server:
        """The server this object's tasks go to (its rank's, once initialised)."""
        return self.state.rank_ctx.server

    def _queued_count(self) -> int:
        """How many of this object's handles are tasks of the server's queue.

        One-sided handles (BatchWrite, AlltoAllvWrite: lifecycles that are not queued) go
        straight into windows: no slot of the server, so ranks do not match them task by task.
        """
        return sum(LIFECYCLES[h.lifecycle].queued for h in self.handles)

    def _reset(self) -> None:
        self.state: ClientState | None = None
        self._mode: str | None = None
        self._tiling_src: Any = None
        #: (tiling, Mc2InitTiling.queueNum) once read from that tiling.
        self._queues: tuple[Any, int] | None = None
        self._cc: dict[HcclCMDType, Mc2CcTiling] = {}
        self.handles: list[Handle] = []
        self._n_syncs = 0
        self.finalized = False

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
        domain = self.state.group.name if self.state else None
        err = cls(reason, rank=ctx.rank if ctx else None, domain=domain, **facts)
        self.last_error = str(err)
        if self._strict() or cls.always_raise:
            raise err
        return ret

    def _wrong_core(self, core: CoreContext, info: Handle, h: int, op: str) -> int:
        """A Wait from a core of the other kind than the one that prepared handle ``h``."""
        return self._fail(
            f"Wait from an {core.kind.name} core of a handle prepared on {info.kind.name}",
            cls=HcclCoreError,
            handle=h,
            op=op,
            round=info.waits,
            expected=info.kind.name,
            actual=core.kind.name,
        )

    def _refuse(self, name: str, bad: InvalidCall, **facts: Any) -> int:
        """A Prepare-like call ``name`` that ``bad`` says may not run: fail it, return -1."""
        return self._fail(
            f"{name}: {bad.reason}",
            ret=INVALID_HANDLE_ID,
            cls=bad.cls,
            op=name,
            **facts,
            **bad.facts,
        )

    def _carry_on(
        self, kind: str, reason: str, ret: Any = None, warn: bool = True, **facts: Any
    ) -> Any:
        """A call the official client logs and returns from: the C++ result, in every mode.

        With ``warn`` (the default) it is also an :class:`HcclWarning` of ``kind``
        (:func:`hccl_py.core.report.warn`); ``last_error`` says why either way.
        """
        ctx = current_rank_context(required=False)
        where = dict(
            rank=ctx.rank if ctx else None, domain=self.state.group.name if self.state else None
        )
        facts = where | facts
        self.last_error = str(HcclWarning(kind, reason, **facts))
        if warn:
            report.warn(kind, reason, **facts)
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
        if self.state is None:
            return "the Hccl object is not initialised (call InitV2 first)"
        if self.finalized:
            return "the Hccl object was finalized and cannot communicate again"
        return None

    def _handle(self, handle: Any) -> Handle | None:
        if isinstance(handle, (int, np.integer)) and not isinstance(handle, bool):
            h = int(handle)
            if 0 <= h < len(self.handles):
                return self.handles[h]
        return None

    # ------------------------------------------------------------ initialising
    def _init(self, context: Any, tiling: Any, mode: str) -> None:
        if not isinstance(context, HcclContext):
            self._fail(
                f"{mode}: context must come from GetHcclContext(0 or 1), got {context!r}", ret=None
            )
            return
        if self.state is not None and not self.finalized:
            self._carry_on(
                "repeated-init",
                f"{mode}: the Hccl object is already initialised; the official client ignores "
                "a second Init (the first one stays in force)",
            )
            return
        platform = context.launch.rank_ctx.config.platform
        if self.server_type not in platform.servers:
            self._fail(
                f"{mode}: server type {self.server_type.name} is not supported on {platform.name}",
                ret=None,
                expected=" or ".join(sorted(t.name for t in platform.servers)),
                actual=self.server_type.name,
            )
            return
        self._reset()
        self.state = context.launch.client_state(context.index, lambda: ClientState(context))
        self._mode = mode
        self._tiling_src = tiling
        self._ok(None)

    @logged
    def InitV2(self, context: HcclContext, initTiling: Any) -> None:
        """Bind this object to a domain and to the kernel's tiling struct (or its GM address)."""
        if initTiling is None or (isinstance(initTiling, GmAddr) and initTiling.is_null):
            self._fail("InitV2: initTiling is null", ret=None)
            return
        self._init(context, initTiling, "InitV2")

    @logged
    def Init(self, context: HcclContext, initTiling: Any = None) -> None:
        """Deprecated V1 initialisation; with no tiling, Prepare needs no SetCcTiling."""
        no_tiling = initTiling is None or (isinstance(initTiling, GmAddr) and initTiling.is_null)
        self._init(context, None if no_tiling else initTiling, "Init")
        if self.state is not None and no_tiling:
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
        name = cc_group_name(cc)
        if name != self.state.group.name and self.framework is None:
            self._carry_on(
                "group-name",
                f"{where}: the tiling's groupName {name!r} is not the domain of context "
                f"{self.state.context.index} ({self.state.group.name!r}); the host built this "
                "tiling for another communication domain",
                op=OPS[op].name,
            )
        self._cc[op] = cc
        return self._ok()

    @logged
    def SetCcTilingV2(self, offset: int) -> int:
        """Register the Mc2CcTiling at byte ``offset`` of the init tiling struct for its op type."""
        if self.state is None or self._mode != "InitV2":
            return self._fail(
                "SetCcTilingV2: the Hccl object is not initialised with InitV2 "
                "(after Init(context, tiling) use SetCcTiling; the two styles do not mix)"
            )
        try:
            at = -1 if isinstance(offset, bool) else operator.index(offset)
        except TypeError:
            at = -1
        if at < 0:
            return self._fail(
                f"SetCcTilingV2({offset!r}): the offset must be a non-negative int, the byte "
                "offset of an Mc2CcTiling in the tiling struct (offsetof(Tiling, 'cc'))",
                actual=what_is(offset),
            )
        try:
            raw = tiling_bytes(self._tiling_src, nbytes=at + MC2_CC_TILING_SIZE)
            cc = read_cc_tiling(raw, at)
        except (ValueError, TypeError, HcclBoundsError) as exc:
            return self._fail(f"SetCcTilingV2({offset}): bad offset: {exc}")
        return self._register_cc(cc, f"SetCcTilingV2({offset})")

    @logged
    def SetCcTiling(self, ccTilingAddress: Any) -> int:
        """Deprecated V1 form: register the Mc2CcTiling at a GM address (or an instance)."""
        if self.state is None:
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
