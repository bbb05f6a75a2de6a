"""The AscendC ``Hccl`` client, call for call: a front whose calls forward to objects with one job.

The client validates every call exactly as the C++ client does (returning -1
or doing nothing where C++ does), keeps the handle bookkeeping, and sends
valid tasks to the rank's :class:`~hccl_py.server.protocol.Server`. It never moves data
itself, so the same client serves the emulator, gloo and HCCL. :class:`Hccl`
holds the AscendC signatures, template flags and the debug log; each call's body
lives in the object that does that job (see ``Hccl.__init__``), and every way a
call fails is a rule of :data:`hccl_py.core.rules.RULES`.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from ..core.config import as_index
from ..core.constants import HcclCMDType, HcclServerConfig, HcclServerType, ScopeType
from ..core.errors import HcclUsageError
from ..core.gm import GmAddr
from ..core.report import plain_repr
from ..core.template import checked, template
from ..kernel.cores import CoreContext, HcclContext
from ..ops import OPS
from ..server.protocol import Server
from .binding import Binding
from .control import HandleControl
from .convert import PrepareParam
from .failures import Failures
from .finegrained import FineGrainedSteps
from .half_alltoallv import WindowWriter
from .handle import Handle
from .log import logged, observed
from .onesided import OneSided
from .prepare import PreparePath
from .sender import DEFAULT_CFG, server_config
from .setup import Setup
from .state import ClientState

_C = HcclCMDType


def _server_type(value: Any) -> HcclServerType:
    """``value`` as an HcclServerType (a C++ template argument that is none does not compile)."""
    number = as_index(value)
    if number in HcclServerType._value2member_map_:
        return HcclServerType(number)
    members = ", ".join(f"{m.name} ({int(m)})" for m in HcclServerType)
    raise HcclUsageError(
        f"Hccl[...]: the server type must be an HcclServerType ({members}), not "
        f"{plain_repr(value)} (the CCU was 1 in headers before 2025-12, 5 since)"
    )


class Hccl:
    """The AscendC ``Hccl`` client. Create one per kernel instance (core).

    ``Hccl[HCCL_SERVER_TYPE_AICPU, HcclServerConfig(CoreType.ON_AIV, 10)]()``
    mirrors the C++ template arguments; keywords work too.
    """

    def __class_getitem__(cls, params: Any) -> Any:
        params = params if isinstance(params, tuple) else (params,)
        return functools.partial(cls, *params)

    def __init__(
        self,
        server_type: int = HcclServerType.HCCL_SERVER_TYPE_AICPU,
        config: HcclServerConfig | tuple = DEFAULT_CFG,
    ) -> None:
        if type(server_type) is not HcclServerType:
            server_type = _server_type(server_type)
        binding = Binding(server_type, server_config(config))
        failures = Failures(binding.domain)
        steps = FineGrainedSteps(binding, failures)
        writes = WindowWriter(binding, failures)
        self._binding = binding
        self._failures = failures
        #: Init / InitV2 / SetCcTiling(V2) / GetRankId / GetRankDim.
        self._setup = Setup(binding, failures)
        #: The five Prepare calls' one path.
        self._prepares = PreparePath(binding, failures, steps)
        #: Windows, queues and BatchWrite.
        self._one_sided = OneSided(binding, failures)
        #: Fine-grained AlltoAllV: steps and Iterate.
        self._steps = steps
        #: AlltoAllvWrite.
        self._writes = writes
        #: Commit / Wait / Query / Finalize / InterHcclGroupSync, by the handle's lifecycle.
        self._control = HandleControl(binding, failures, steps, writes)

    # ------------------------------------------------------------- what it holds
    @property
    def server_type(self) -> HcclServerType:
        """The server type of the template argument."""
        return self._binding.server_type

    @property
    def config(self) -> HcclServerConfig:
        """The ``HcclServerConfig`` of the template argument (which core sends)."""
        return self._binding.config

    @property
    def framework(self) -> str | None:
        """The user's collective when this is an internal client of hccl_py.framework, else None."""
        return self._binding.framework

    @framework.setter
    def framework(self, caller: str | None) -> None:
        self._binding.framework = caller

    @property
    def last_error(self) -> str | None:
        """Why the last call failed or carried on (None after a call that succeeded)."""
        return self._failures.last_error

    @property
    def state(self) -> ClientState | None:
        """What the objects of every core share for this object's context, once initialised."""
        return self._binding.state

    @property
    def handles(self) -> list[Handle]:
        """The handles this core's object returned, by id."""
        return self._binding.handles

    @property
    def finalized(self) -> bool:
        """Whether Finalize ran (a later Init starts over)."""
        return self._binding.finalized

    @property
    def server(self) -> Server:
        """The server this object's tasks go to (its rank's, once initialised)."""
        return self._binding.server

    def _handle(self, handle: Any) -> Handle | None:
        """The handle with id ``handle``, or None (the debug log and the trace read it)."""
        return self._binding.handle(handle)

    def _waits_at_once(self) -> bool:
        """Whether Wait returns 0 at once (queueNum != 0): the trace draws no wait flow then."""
        return self._binding.waits_at_once()

    def _signature_misfit(self, reason: str, **facts: Any) -> Any:
        """Arguments that do not fit a call's signature (:mod:`hccl_py.core.template`)."""
        return self._failures.breach("signature", reason, **facts)

    # ------------------------------------------------------------ initialising
    @logged
    def InitV2(self, context: HcclContext, initTiling: Any) -> None:
        """Bind this object to a domain and to the kernel's tiling struct (or its GM address)."""
        self._setup.init_v2(context, initTiling)

    @logged
    def Init(self, context: HcclContext, initTiling: Any = None) -> None:
        """Deprecated V1 initialisation; with no tiling, Prepare needs no SetCcTiling."""
        self._setup.init_v1(context, initTiling)

    @logged
    def SetCcTilingV2(self, offset: int) -> int:
        """Register the Mc2CcTiling at byte ``offset`` of the init tiling struct for its op type."""
        return self._setup.set_cc_tiling_v2(offset)

    @logged
    def SetCcTiling(self, ccTilingAddress: Any) -> int:
        """Deprecated V1 form: register the Mc2CcTiling at a GM address (or an instance)."""
        return self._setup.set_cc_tiling(ccTilingAddress)

    @checked
    def GetRankId(self) -> int:
        """This rank's index in the object's domain."""
        return self._setup.rank_fact("GetRankId", "rank")

    @checked
    def GetRankDim(self) -> int:
        """Number of ranks in the object's domain."""
        return self._setup.rank_fact("GetRankDim", "rank_dim")

    # ------------------------------------------------------------------ Prepare
    @logged
    def _prepare(self, param: PrepareParam, commit: bool) -> int:
        """Validate ``param``, send its task from the sending core; the handle id or -1."""
        return self._prepares.prepare(param, commit, self._commit_rounds)

    def _commit_rounds(self, handleId: int, n: int, core: CoreContext) -> None:
        """A ``Prepare[True]``'s ``n`` Commits on ``core``: each a call of its own where the debug
        log or a trace shows calls, else one call that commits ``n`` rounds (the same Commits;
        the Prepare checked the object and made the handle on this core)."""
        if observed():
            for _ in range(n):
                self.Commit(handleId)
        else:
            self._control.commit_handle(self._binding.handles[handleId], handleId, n, core)

    @template("commit")
    def AllReduce(
        self,
        sendBuf: GmAddr,
        recvBuf: GmAddr,
        count: int,
        dataType: int,
        op: int,
        repeat: int = 1,
        *,
        commit: bool = False,
    ) -> int:
        """Prepare ``repeat`` rounds of AllReduce; returns the handle id or -1."""
        spec = OPS[_C.HCCL_CMD_ALLREDUCE]
        param = PrepareParam(spec, sendBuf, recvBuf, dataType, repeat, count=count, reduce_op=op)
        return self._prepare(param, commit)

    @template("commit")
    def AllGather(
        self,
        sendBuf: GmAddr,
        recvBuf: GmAddr,
        sendCount: int,
        dataType: int,
        strideCount: int = 0,
        repeat: int = 1,
        *,
        commit: bool = False,
    ) -> int:
        """Prepare ``repeat`` rounds of AllGather; returns the handle id or -1."""
        spec = OPS[_C.HCCL_CMD_ALLGATHER]
        param = PrepareParam(
            spec, sendBuf, recvBuf, dataType, repeat, count=sendCount, stride=strideCount
        )
        return self._prepare(param, commit)

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
        *,
        commit: bool = False,
    ) -> int:
        """Prepare ``repeat`` rounds of ReduceScatter; returns the handle id or -1."""
        spec = OPS[_C.HCCL_CMD_REDUCE_SCATTER]
        param = PrepareParam(
            spec,
            sendBuf,
            recvBuf,
            dataType,
            repeat,
            count=recvCount,
            reduce_op=op,
            stride=strideCount,
        )
        return self._prepare(param, commit)

    @template("commit")
    def AlltoAll(
        self,
        sendBuf: GmAddr,
        recvBuf: GmAddr,
        dataCount: int,
        dataType: int,
        strideCount: int = 0,
        repeat: int = 1,
        *,
        commit: bool = False,
    ) -> int:
        """Prepare ``repeat`` rounds of AlltoAll; returns the handle id or -1."""
        spec = OPS[_C.HCCL_CMD_ALLTOALL]
        param = PrepareParam(
            spec, sendBuf, recvBuf, dataType, repeat, count=dataCount, stride=strideCount
        )
        return self._prepare(param, commit)

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
        *,
        commit: bool = False,
    ) -> int:
        """Prepare ``repeat`` rounds of AlltoAllV (uint64 counts and displacements per peer)."""
        param = PrepareParam(
            OPS[_C.HCCL_CMD_ALLTOALLV],
            sendBuf,
            recvBuf,
            sendType,
            repeat,
            recv_type=recvType,
            send_counts=sendCounts,
            sdispls=sdispls,
            recv_counts=recvCounts,
            rdispls=rdispls,
        )
        return self._prepare(param, commit)

    # ------------------------------------------------------ windows, one-sided
    @checked
    def GetWindowsInAddr(self, rankId: int) -> GmAddr:
        """GM address of domain rank ``rankId``'s In window; null for ``rankId >= rankDim``."""
        return self._one_sided.window(rankId, "In")

    @checked
    def GetWindowsOutAddr(self, rankId: int) -> GmAddr:
        """GM address of domain rank ``rankId``'s Out window; null for ``rankId >= rankDim``."""
        return self._one_sided.window(rankId, "Out")

    @checked
    def GetQueueNum(self) -> int:
        """``Mc2InitTiling.queueNum``: how many BatchWrite queues each core has (Atlas A3)."""
        return self._one_sided.get_queue_num()

    @template("scope", convert=ScopeType)
    @logged
    def QueueBarrier(self, queueID: int, scope: ScopeType = ScopeType.ALL) -> None:
        """Send a barrier message on queue ``queueID`` (``QueueBarrier[ScopeType.ALL]``, Atlas A3)."""
        self._one_sided.queue_barrier(queueID, scope)

    @template("commit")
    @logged
    def BatchWrite(
        self, batchWriteInfo: GmAddr, itemNum: int, queueID: int = 0, *, commit: bool = True
    ) -> int:
        """One-sided copies of ``itemNum`` items at ``batchWriteInfo``; always committed.

        Returns the handle id, or -1 (nothing sent) for a call the client rejects.
        """
        return self._one_sided.batch_write(batchWriteInfo, itemNum, queueID)

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
        """Prepare the writes of every peer's slice of ``usrIn`` into its CCU window; a handle or -1.

        The peer's CCU window is the one its context lists as ``windowsOut[0]`` (its Out
        window), at ``remoteWinOffset`` (docs/windows.md, "AlltoAllvWrite").
        """
        return self._writes.prepare(
            usrIn, sendOffsets, sendSizes, remoteWinOffset, localDataSize, commit, self.Commit
        )

    @template("sync")
    @logged
    def Iterate(self, handleId: int, seqSlices: Any, seqSliceLen: int, sync: bool = True) -> int:
        """Fill ``seqSlices`` with the next ``seqSliceLen`` peers whose data is in place.

        Returns ``seqSliceLen``, 0 once every step of every round was handed out,
        or -1 (null or empty array, not a fine-grained handle, not initialised).
        With ``sync`` (the default) it Waits every ``stepSize`` slices itself.
        """
        return self._steps.iterate(handleId, seqSlices, seqSliceLen, sync, self.Wait)

    # ------------------------------------------------ commit / wait / finalize
    @logged
    def Commit(self, handleId: int) -> None:
        """Let the server run the next round of ``handleId`` (once per round)."""
        self._control.commit(handleId)

    @logged
    def Wait(self, handleId: int) -> int:
        """Block until the next round of ``handleId`` finished; 0, or -1 without waiting.

        With several queues (the tiling's queueNum != 0) it returns 0 at once, whatever
        the handle, as the official AI CPU client does.
        """
        return self._control.wait(handleId)

    @logged
    def Query(self, handleId: int) -> int:
        """How many rounds of ``handleId`` have finished (0..repeat); -1 for a bad handle.

        With several queues (queueNum != 0) it is 0 for any handle id in range, as in the
        official client, which does not count rounds per queue.
        """
        return self._control.query(handleId)

    @template("sync")
    @logged
    def Finalize(self, sync: bool = True) -> None:
        """Tell the server no more tasks come and wait for the last one (``Finalize[False]`` skips that)."""
        self._control.finalize(sync)

    @logged
    def InterHcclGroupSync(self, srcGroupID: int, srcHandleID: int) -> None:
        """Every later task of this domain starts only after task ``srcHandleID`` of domain ``srcGroupID``."""
        self._control.inter_group_sync(srcGroupID, srcHandleID)
