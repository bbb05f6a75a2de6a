"""Binding an Hccl object to a domain: Init / InitV2, SetCcTiling / SetCcTilingV2, GetRankId/Dim."""

from __future__ import annotations

from typing import Any

from ..core.config import as_index
from ..core.constants import HcclCMDType, HcclServerType
from ..core.errors import HcclBoundsError
from ..core.gm import GmAddr, what_is
from ..core.report import plain_repr
from ..kernel.cores import HcclContext
from ..ops import op_name
from ..tiling import (
    MC2_CC_TILING_SIZE,
    MC2_INIT_TILING_SIZE,
    Mc2CcTiling,
    Mc2InitTiling,
    cc_group_name,
    read_cc_tiling,
    tiling_bytes,
)
from .binding import Binding
from .failures import Failures
from .state import ClientState

#: What GetRankId and GetRankDim return before Init (the C++ client's ``UINT32_MAX``).
UINT32_MAX = 0xFFFFFFFF


#: SetCcTilingV2's parse of a cc tiling's bytes: (the Mc2CcTiling, its groupName), by the
#: bytes (a kernel may rewrite its tiling between launches; equal bytes parse alike). Every
#: core of every launch registers the same few tilings. The client only reads the structs.
_PARSED: dict[bytes, tuple[Mc2CcTiling, str]] = {}
_PARSED_MAX = 256


def _parsed(cc: Mc2CcTiling) -> tuple[Mc2CcTiling, str]:
    """``cc`` and its groupName, remembered by ``cc``'s bytes."""
    if len(_PARSED) >= _PARSED_MAX:
        _PARSED.clear()
    parsed = _PARSED[bytes(cc)] = (cc, cc_group_name(cc))
    return parsed


def _is_null(tiling: Any) -> bool:
    return tiling is None or (isinstance(tiling, GmAddr) and tiling.is_null)


class Setup:
    """The initialisation calls of one Hccl object: what they check and what they bind."""

    def __init__(self, binding: Binding, failures: Failures) -> None:
        self._binding = binding
        self._failures = failures

    def init_v2(self, context: Any, tiling: Any) -> None:
        """InitV2: bind to ``context``'s domain and to the kernel's tiling struct."""
        if _is_null(tiling):
            self._failures.breach("null-tiling", "InitV2: initTiling is null", None)
            return
        self._init(context, tiling, "InitV2")

    def init_v1(self, context: Any, tiling: Any) -> None:
        """Init: as InitV2; with no tiling, Prepare needs no SetCcTiling."""
        no_tiling = _is_null(tiling)
        self._init(context, None if no_tiling else tiling, "Init")
        if self._binding.state is not None and no_tiling:
            self._binding.mode = "Init-no-tiling"

    def _init(self, context: Any, tiling: Any, mode: str) -> None:
        b, breach = self._binding, self._failures.breach
        if not isinstance(context, HcclContext):
            breach(
                "bad-context",
                f"{mode}: context must come from GetHcclContext(0 or 1), got {plain_repr(context)}",
                None,
            )
            return
        unreadable, head = _read_head(tiling, b.server_type)
        if unreadable is not None:
            breach(
                "bad-argument", f"{mode}: initTiling {unreadable}", None, actual=plain_repr(tiling)
            )
            return
        if b.state is not None and not (b.finalized and b.ccu):
            breach(
                "repeated-init",
                f"{mode}: the Hccl object is already initialised; "
                + (
                    "the CCU client starts over (handle ids from 0, its counters reset), "
                    "hccl_py keeps the first Init"
                    if b.ccu
                    else 'the official client refuses it ("Init repeatedly is not allowed", '
                    "hccl_aicpu_impl.h) after taking the new context's rank, rank count, windows "
                    "and queue count (platform_v220/hccl_aicpu.h, InitV2); hccl_py keeps the "
                    "first Init in force entirely"
                    + (
                        ", and the object stays finalized: use a new Hccl object"
                        if b.finalized
                        else ""
                    )
                ),
                None,
            )
            return
        platform = context.launch.rank_ctx.config.platform
        if b.server_type not in platform.servers:
            breach(
                "server-type",
                f"{mode}: server type {b.server_type.name} is not supported on {platform.name}",
                None,
                expected=" or ".join(sorted(t.name for t in platform.servers)),
                actual=b.server_type.name,
            )
            return
        b.bind(context.launch.client_state(context, ClientState), mode, tiling)
        if head is not None:  # the bytes the check read: this call reads the tiling once
            b.init_fields["debugMode"] = head[_DEBUG_MODE.offset]
        if b.reads_compute_only():
            b.compute_only = True
            breach(
                "compute-only",
                f"{mode}: the init tiling's debugMode is 1 (HCCL_ONLY_COMPUTE, SetDebugMode(1)): "
                "communication is off, so no data moves, Wait returns 0 once a round is "
                "committed, Query stays 0 and Finalize waits for nothing",
                None,
            )
        self._failures.ok(None)

    def set_cc_tiling_v2(self, offset: Any) -> int:
        """SetCcTilingV2: register the Mc2CcTiling at byte ``offset`` of the init tiling."""
        b, breach = self._binding, self._failures.breach
        if b.state is None or b.mode != "InitV2":
            return breach(
                "init-style",
                "SetCcTilingV2: the Hccl object is not initialised with InitV2 "
                "(after Init(context, tiling) use SetCcTiling; the two styles do not mix)",
            )
        at = as_index(offset)  # (None for a bool, a float or anything else without __index__)
        if at is None or at < 0:
            return breach(
                "cc-tiling",
                f"SetCcTilingV2({offset!r}): the offset must be a non-negative int, the byte "
                "offset of an Mc2CcTiling in the tiling struct (offsetof(Tiling, 'cc'))",
                actual=what_is(offset),
            )
        try:
            raw = tiling_bytes(b.tiling_src, nbytes=at + MC2_CC_TILING_SIZE)
            parsed = _PARSED.get(raw[at:]) if at >= MC2_INIT_TILING_SIZE else None
            if parsed is None:
                parsed = _parsed(read_cc_tiling(raw, at))
        except (ValueError, TypeError, HcclBoundsError) as exc:
            return breach("cc-tiling", f"SetCcTilingV2({offset}): bad offset: {exc}")
        return self._register(*parsed, f"SetCcTilingV2({offset})")

    def set_cc_tiling(self, address: Any) -> int:
        """SetCcTiling (V1): register the Mc2CcTiling at a GM address (or an instance)."""
        b, breach = self._binding, self._failures.breach
        if b.state is None:
            return breach("not-initialised", "SetCcTiling: the Hccl object is not initialised")
        if b.mode != "Init":
            return breach(
                "init-style",
                "SetCcTiling: only valid after Init(context, initTiling); "
                "Init with and without tiling must not be mixed, and InitV2 takes SetCcTilingV2",
            )
        try:
            cc = Mc2CcTiling.from_buffer_copy(tiling_bytes(address, nbytes=MC2_CC_TILING_SIZE))
        except (ValueError, TypeError, HcclBoundsError) as exc:
            return breach("cc-tiling", f"SetCcTiling: cannot read an Mc2CcTiling there: {exc}")
        return self._register(cc, cc_group_name(cc), "SetCcTiling")

    def _register(self, cc: Mc2CcTiling, name: str, where: str) -> int:
        """Store ``cc`` for its opType: any opType below HCCL_CMD_ALL, as the official client.

        platform_v220/hccl_aicpu.h, ``SetCcTiling``/``SetCcTilingV2``: the only check on the
        tiling is ``opType < HCCL_CMD_ALL`` (0 and ops without a kernel API pass too); a
        Prepare of an op hccl_py has no call for cannot follow.
        """
        b = self._binding
        op = int(cc.opType)
        if op >= HcclCMDType.HCCL_CMD_ALL:
            return self._failures.breach(
                "cc-tiling",
                f"{where}: opType {op} in the Mc2CcTiling is not below HCCL_CMD_ALL "
                f"({int(HcclCMDType.HCCL_CMD_ALL)})",
                expected=f"< {int(HcclCMDType.HCCL_CMD_ALL)}",
                actual=op,
            )
        if name != b.state.group.name and b.framework is None:
            self._failures.breach(
                "group-name",
                f"{where}: the tiling's groupName {name!r} is not the domain of context "
                f"{b.state.context.index} ({b.state.group.name!r}); the host built this "
                "tiling for another communication domain",
                op=op_name(op),
            )
        b.cc[op] = cc
        return self._failures.ok()

    def rank_fact(self, call: str, value: str) -> int:
        """GetRankId / GetRankDim: the domain's ``rank`` or ``rank_dim``; before Init the
        official client's UINT32_MAX."""
        state = self._binding.state
        if state is None:
            return self._failures.breach(
                "not-initialised", f"{call}: the Hccl object is not initialised", UINT32_MAX
            )
        return getattr(state, value)


#: The init tiling's field that Init reads (:meth:`Binding.reads_compute_only`).
_DEBUG_MODE = Mc2InitTiling.debugMode


def _read_head(tiling: Any, server_type: HcclServerType) -> tuple[str | None, bytes | None]:
    """Why ``tiling`` cannot be read as an init tiling, if it cannot (None: no tiling), and
    where the client reads debugMode (the AI CPU client's), the bytes up to it when the tiling
    holds them: the check's read and the field's in one. Else the check reads nothing and
    the field is read on its own, with its report (:meth:`Binding._init_field`)."""
    if tiling is None:
        return None, None
    if server_type == HcclServerType.HCCL_SERVER_TYPE_AICPU:
        try:
            return None, tiling_bytes(tiling, nbytes=_DEBUG_MODE.offset + _DEBUG_MODE.size)
        except Exception:  # noqa: BLE001 - checked and reported as before, below and at the field
            pass
    return _unreadable(tiling), None


def _unreadable(tiling: Any) -> str | None:
    """Why ``tiling`` cannot be read as an init tiling, if it cannot."""
    try:
        tiling_bytes(tiling, nbytes=0)
    except TypeError:
        return (
            "must be the kernel's tiling: its GM address (GET_TILING_DATA_WITH_STRUCT, "
            "hp.gm_addr), a TilingData struct or bytes"
        )
    return None
