"""AlltoAllvWrite (Ascend 950, CCU server): byte slices written into every peer's window.

As the official CCU client sends it: op ``HCCL_CMD_HALF_ALLTOALLV``, type INT8,
count ``localDataSize`` (the bytes the peers write into this card: stored, not
checked, 0 valid), one round. ``sendOffsets``/``sendSizes`` hold two uint64 per
peer (entry ``j`` for die 0, ``j + rankDim`` for die 1); peer ``j`` receives
its slice, die 0 then die 1, at ``remoteWinOffset`` of its CCU window, the one
its context lists as ``windowsOut[0]`` (the CCU client's scratch,
``ccuParam_.scratchAddr``): here the peer's Out window. The copies run at
Commit; Wait (and Finalize) returns once every rank of the domain made its
AlltoAllvWrite and the copies into this rank's window landed, after which the
kernel reads ``GetHcclContext(0).windowsOut[0]`` as the 950 MoE kernels do.
The AI CPU server's AlltoAllvWrite returns -1 on 950 (platform_v310/hccl_aicpu.h).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..core.config import c_int
from ..core.constants import INVALID_HANDLE_ID, HcclCMDType, HcclServerType
from ..core.errors import HcclBoundsError, InvalidCall
from ..core.gm import GmAddr
from ..kernel.context import core_name
from .binding import Binding
from .convert import array, checked_gm, no_tiling
from .failures import Failures
from .handle import Handle
from .sender import calling_core, core_problem, has_other_cores, is_sender

_HALF = HcclCMDType.HCCL_CMD_HALF_ALLTOALLV


class WindowWriter:
    """The ``AlltoAllvWrite`` call of one Hccl object, and what its Commit and Wait do."""

    def __init__(self, binding: Binding, failures: Failures) -> None:
        self._binding = binding
        self._failures = failures

    def prepare(
        self,
        usrIn: Any,
        sendOffsets: Any,
        sendSizes: Any,
        remoteWinOffset: Any,
        localDataSize: Any,
        commit: bool,
        commit_call: Callable[[int], None],
    ) -> int:
        """AlltoAllvWrite: a handle, or -1; with ``commit``, ``commit_call`` commits it."""
        b, failures = self._binding, self._failures
        name = "AlltoAllvWrite"
        if failures.unusable(b, name, op=name):
            return INVALID_HANDLE_ID
        core = calling_core()
        handle = len(b.handles)
        task = copies = None
        sender = is_sender(b.config, core)
        try:
            size = self._check_write(usrIn, remoteWinOffset, localDataSize)
            if sender:
                problem = core_problem(b, core, sender)
                if problem:
                    raise InvalidCall("sending-core", problem)
        except InvalidCall as bad:
            return failures.refuse(name, bad, handle=handle)
        if sender:
            try:
                copies = self._slices(usrIn, sendOffsets, sendSizes, remoteWinOffset)
            except InvalidCall as bad:
                # only the sending core reads the slices: the other cores got this handle
                return failures.refuse(name, bad, alone=has_other_cores(core), handle=handle)
        state = b.state
        if copies is not None:
            task = state.one_sided_task(_HALF, handle, usrIn, size)
            index = state.rank_ctx.window_writes[state.group.name]
            state.rank_ctx.window_writes[state.group.name] += 1
            state.writes[handle] = (f"{index}", copies)
            state.sender, state.sender_core = b, core
            blocker = state.rank_ctx.blocker
            with blocker.lock:  # wakes the other cores' Waits for it (real threads sleep)
                state.tasks[handle] = task
                blocker.cond.notify_all()
        b.handles.append(Handle(_HALF, 1, core.kind, task=task))
        failures.ok(handle)
        if commit:
            commit_call(handle)
        return handle

    def _check_write(self, usrIn: Any, remoteWinOffset: Any, localDataSize: Any) -> int:
        platform = self._binding.state.rank_ctx.config.platform
        if not platform.supports(_HALF):
            raise InvalidCall("unsupported", f"AlltoAllvWrite is not supported on {platform.name}")
        if self._binding.server_type != HcclServerType.HCCL_SERVER_TYPE_CCU:
            # platform_v310/hccl_aicpu.h: the 950 AI CPU client's AlltoAllvWrite returns -1
            raise InvalidCall(
                "unsupported",
                f"AlltoAllvWrite is not supported by the AI CPU server on {platform.name} (the "
                "official client returns -1): use Hccl[HCCL_SERVER_TYPE_CCU]",
            )
        if not self._binding.has_tiling(_HALF):
            raise no_tiling("AlltoAllvWrite", _HALF)
        checked_gm(usrIn, "usrIn")
        # localDataSize is the bytes the peers write into this card; the CCU client stores it
        # as the message's count without a check (0 included), so it bounds nothing here.
        size = c_int(localDataSize)
        if size is None or size < 0:
            raise InvalidCall(
                "bad-argument", "localDataSize must be a non-negative int", actual=localDataSize
            )
        offset = c_int(remoteWinOffset)
        if offset is None or offset < 0:
            raise InvalidCall(
                "bad-argument", "remoteWinOffset must be a non-negative int", actual=remoteWinOffset
            )
        if len(self._binding.handles) + self._binding.n_syncs >= 63:
            raise InvalidCall("handle-limit", "the domain already used its 63 handles")
        return size

    def _slices(
        self, usrIn: GmAddr, offsets: Any, sizes: Any, win_offset: int
    ) -> list[tuple[GmAddr, GmAddr, int]]:
        """(source, destination, bytes) of every slice, each checked where it is read and written.

        The CCU client reads ``2 * rankNum`` entries of each array: entry ``j``
        for die 0, ``j + rankNum`` for die 1.
        """
        state = self._binding.state
        dim = state.rank_dim
        halves = 2
        offs, lens = (
            _int64s(name, array(name, values, halves * dim)).reshape(halves, dim)
            for name, values in (("sendOffsets", offsets), ("sendSizes", sizes))
        )
        server = state.rank_ctx.server
        copies = []
        for j in range(dim):
            window = GmAddr(server.window(state.group.name, state.group.ranks[j], "Out"))
            dst = window + win_offset
            for die in range(halves):
                n = int(lens[die, j])
                src = usrIn + int(offs[die, j])
                try:
                    src.check_range(n, f"usrIn's slice for rank {j} (die {die})")
                    dst.check_range(n, f"AlltoAllvWrite into rank {j}")
                except HcclBoundsError as exc:
                    raise InvalidCall("bounds", exc.reason) from None
                copies.append((src, dst, n))
                dst = dst + n
        return copies

    def commit(self, h: int) -> None:
        """Commit of an AlltoAllvWrite: the copies go out now."""
        b = self._binding
        key_copies = b.state.writes.get(h)
        if key_copies is not None and b.state.sender is b:
            b.server.write_items(b.state.tasks[h], key_copies[1])
            blocker = b.state.rank_ctx.blocker
            with blocker.lock:  # wakes the other cores' Waits for it (real threads sleep)
                b.state.written.add(h)
                blocker.cond.notify_all()

    def wait(self, h: int) -> None:
        """Wait of an AlltoAllvWrite: every rank wrote, and this rank's window holds the data.

        Another core's Wait polls the round's completion (the CCU client's waitCke, or the
        working core's finishCntGM_), so it returns only after the sending core's Commit."""
        state = self._binding.state
        core = calling_core()
        state.task(h, core)
        state.rank_ctx.blocker.wait_for(
            lambda: h in state.written,
            lambda: (
                f"rank {state.rank_ctx.rank} {core_name(core)} waits for handle {h} "
                f"AlltoAllvWrite in domain {state.group.name}, which the sending core has not "
                "committed"
            ),
        )
        key, _ = state.writes[h]
        self._binding.server.meet(
            state.group,
            state.rank,
            key,
            f"rank {state.rank_ctx.rank} waits for handle {h} AlltoAllvWrite in domain "
            f"{state.group.name}",
        )


def _int64s(name: str, values: list[int]) -> np.ndarray:
    """``values`` (uint64 entries) as int64; an entry of 2**63 or more is a byte offset or
    size no window holds: the bounds error every slice past its window gets."""
    too_big = [v for v in values if v >= 1 << 63]
    if too_big:
        raise InvalidCall(
            "bounds",
            f"{name} holds {too_big[0]}, a byte count past the end of every window",
            actual=too_big[0],
        )
    return np.array(values, dtype=np.int64)
