"""The Prepare calls: each fills one :class:`PrepareParam`; one path validates and sends it.

As in the official client (``CommonPrepareParam``), AllReduce, AllGather,
ReduceScatter, AlltoAll and AlltoAllV differ only in the arguments they take:
:meth:`PrepareCalls._prepare` checks the object and the core, validates the
parameters against the op table (:mod:`.convert`), builds the task, runs the
sanitizer's checks on it (:mod:`hccl_py.sanitizer.bounds`), hands it to the
rank's server on the sending core, and commits every round when asked.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..core.constants import INVALID_HANDLE_ID, HcclCMDType
from ..core.errors import HcclCoreError, InvalidCall
from ..core.gm import GmAddr
from ..core.task import Task
from ..core.template import template
from ..ops import OPS
from ..sanitizer.bounds import check_task
from .base import HcclBase
from .convert import Limits, PrepareParam, dtype_mismatch, task_fields
from .log import logged
from .sender import core_problem, is_sender
from .state import Handle

_C = HcclCMDType


class PrepareCalls(HcclBase):
    """The five Prepare calls of the AscendC client and their one shared path."""

    def _step_size(self, op: HcclCMDType) -> int:
        """Fine-grained step size of ``op``'s tasks (0: Commit and Wait count rounds)."""
        return 0

    def _commits_per_prepare(self, info: Handle) -> int:
        """How many Commits a Prepare with ``commit=True`` makes."""
        return info.repeat

    def _limits(self, op: HcclCMDType) -> Limits:
        state = self.state
        return Limits(
            platform=state.rank_ctx.config.platform,
            kernel_api=self.framework is None,
            has_tiling=self._mode == "Init-no-tiling" or op in self._cc,
            handles_used=len(self.handles),
            syncs_used=self._n_syncs,
            rank_dim=state.rank_dim,
        )

    @logged
    def _prepare(self, param: PrepareParam, commit: bool) -> int:
        """Validate ``param``, send its task from the sending core; the handle id or -1."""
        op, name = param.spec.cmd, param.spec.name
        reason = self._usable()
        if reason:
            return self._fail(f"{name}: {reason}", ret=INVALID_HANDLE_ID, op=name)
        core = self._core()
        try:
            fields = task_fields(param, self._limits(op))
        except InvalidCall as bad:
            return self._refuse(name, bad)
        state = self.state
        handle = len(self.handles)
        problem = core_problem(self, core)
        if problem:
            return self._fail(
                f"{name}: {problem}",
                ret=INVALID_HANDLE_ID,
                cls=HcclCoreError,
                op=name,
                handle=handle,
            )
        if not is_sender(self.config, core):
            self.handles.append(
                Handle(op, fields["repeat"], core.kind, step_size=self._step_size(op))
            )
            return self._prepared(handle, commit)
        if not self.framework:
            mismatch = dtype_mismatch(param, fields["dtype"])
            if mismatch:
                self._carry_on(
                    "dtype-mismatch",
                    f"{name}: {mismatch}",
                    op=name,
                    handle=handle,
                    expected=fields["dtype"].name,
                )
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
            caller=self.framework,
            one_sided_before=len(self.handles) - self._queued_count(),
            commit_notes=state.commit_notes.setdefault(handle, {}),
            **fields,
        )
        config = state.rank_ctx.config
        try:
            check_task(
                task, state.rank_ctx.rank, config.platform, self.framework is None, config.overlap
            )
        except InvalidCall as bad:
            return self._refuse(name, bad, handle=handle)
        state.sender = self
        state.sender_core = core
        state.tasks[handle] = task
        self.handles.append(
            Handle(op, task.repeat, core.kind, task=task, step_size=self._step_size(op))
        )
        self.server.submit(task)
        return self._prepared(handle, commit)

    def _prepared(self, handle: int, commit: bool) -> int:
        self._ok()
        if commit:
            for _ in range(self._commits_per_prepare(self.handles[handle])):
                self.Commit(handle)
        return handle

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


__all__ = ["PrepareCalls", "PrepareParam"]
