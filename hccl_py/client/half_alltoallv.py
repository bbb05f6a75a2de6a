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

from typing import Any

import numpy as np

from ..core.constants import INVALID_HANDLE_ID, HcclCMDType, HcclServerType
from ..core.errors import HcclBoundsError, HcclCoreError, InvalidCall
from ..core.gm import GmAddr, what_is
from ..core.template import template
from .convert import array
from .finegrained import FineGrainedCalls
from .log import logged
from .onesided import _int_arg
from .sender import core_problem, is_sender
from .state import Handle

_HALF = HcclCMDType.HCCL_CMD_HALF_ALLTOALLV


class WriteCalls(FineGrainedCalls):
    """The ``AlltoAllvWrite`` call of the AscendC ``Hccl`` client."""

    @template("commit")
    @logged
    def AlltoAllvWrite(
        self,
        usrIn: GmAddr,
        sendOffsets: Any,
        sendSizes: Any,
        remoteWinOffset: int,
        localDataSize: int,
        *,
        commit: bool = False,
    ) -> int:
        """Prepare the writes of every peer's slice of ``usrIn`` into its In window; a handle or -1."""
        name = "AlltoAllvWrite"
        reason = self._usable()
        if reason:
            return self._fail(f"{name}: {reason}", ret=INVALID_HANDLE_ID, op=name)
        core = self._core()
        handle = len(self.handles)
        task = copies = None
        try:
            size = self._check_write(usrIn, remoteWinOffset, localDataSize)
            if is_sender(self.config, core):
                problem = core_problem(self, core)
                if problem:
                    raise InvalidCall(problem, cls=HcclCoreError)
                copies = self._slices(usrIn, sendOffsets, sendSizes, remoteWinOffset)
        except InvalidCall as bad:
            return self._refuse(name, bad, handle=handle)
        state = self.state
        if copies is not None:
            task = state.one_sided_task(_HALF, handle, usrIn, size)
            index = state.rank_ctx.window_writes[state.group.name]
            state.rank_ctx.window_writes[state.group.name] += 1
            state.writes[handle] = (f"{index}", copies)
            state.sender, state.sender_core = self, core
            state.tasks[handle] = task
        self.handles.append(Handle(_HALF, 1, core.kind, task=task))
        self._ok(handle)
        if commit:
            self.Commit(handle)
        return handle

    def _check_write(self, usrIn: Any, remoteWinOffset: Any, localDataSize: Any) -> int:
        platform = self.state.rank_ctx.config.platform
        if not platform.supports(_HALF):
            raise InvalidCall(f"AlltoAllvWrite is not supported on {platform.name}")
        if self.server_type != HcclServerType.HCCL_SERVER_TYPE_CCU:
            # platform_v310/hccl_aicpu.h: the 950 AI CPU client's AlltoAllvWrite returns -1
            raise InvalidCall(
                f"AlltoAllvWrite is not supported by the AI CPU server on {platform.name} (the "
                "official client returns -1): use Hccl[HCCL_SERVER_TYPE_CCU]"
            )
        if self._mode != "Init-no-tiling" and _HALF not in self._cc:
            raise InvalidCall(
                "no tiling set for AlltoAllvWrite: call SetCcTilingV2 with the offset of an "
                "Mc2CcTiling whose opType is HCCL_CMD_HALF_ALLTOALLV"
            )
        if usrIn is None or (isinstance(usrIn, GmAddr) and usrIn.is_null):
            raise InvalidCall("usrIn is null")
        if not isinstance(usrIn, GmAddr):
            raise InvalidCall(f"usrIn must be a GM address, not {what_is(usrIn)}")
        # localDataSize is the bytes the peers write into this card; the CCU client stores it
        # as the message's count without a check (0 included), so it bounds nothing here.
        size = _int_arg(localDataSize)
        if size is None or size < 0:
            raise InvalidCall("localDataSize must be a non-negative int", actual=localDataSize)
        offset = _int_arg(remoteWinOffset)
        if offset is None or offset < 0:
            raise InvalidCall("remoteWinOffset must be a non-negative int", actual=remoteWinOffset)
        if len(self.handles) + self._n_syncs >= 63:
            raise InvalidCall("the domain already used its 63 handles")
        return size

    def _slices(
        self, usrIn: GmAddr, offsets: Any, sizes: Any, win_offset: int
    ) -> list[tuple[GmAddr, GmAddr, int]]:
        """(source, destination, bytes) of every slice, each checked where it is read and written.

        The CCU client reads ``2 * rankNum`` entries of each array: entry ``j``
        for die 0, ``j + rankNum`` for die 1.
        """
        state = self.state
        dim = state.rank_dim
        halves = 2
        offs, lens = (
            np.array(array(name, values, halves * dim), dtype=np.int64).reshape(halves, dim)
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
                    raise InvalidCall(exc.reason, cls=HcclBoundsError) from None
                copies.append((src, dst, n))
                dst = dst + n
        return copies

    def _commit_write(self, h: int) -> None:
        """Commit of an AlltoAllvWrite: the copies go out now."""
        key_copies = self.state.writes.get(h)
        if key_copies is not None and self.state.sender is self:
            self.server.write_items(self.state.tasks[h], key_copies[1])

    def _wait_write(self, h: int) -> None:
        """Wait of an AlltoAllvWrite: every rank wrote, and this rank's window holds the data."""
        core = self._core()
        self.state.task(h, core)
        key, _ = self.state.writes[h]
        self.server.meet(
            self.state.group,
            self.state.rank,
            key,
            f"rank {self.state.rank_ctx.rank} waits for handle {h} AlltoAllvWrite in domain "
            f"{self.state.group.name}",
        )
