"""The one Prepare path: a :class:`PrepareParam` validated, turned into a task and sent.

As in the official client (``CommonPrepareParam``), AllReduce, AllGather,
ReduceScatter, AlltoAll and AlltoAllV differ only in the arguments they take
(``Hccl`` fills a :class:`PrepareParam` for each). :meth:`PreparePath.prepare`
checks the object and the core, validates the parameters against the op table
(:mod:`.convert`), builds the task, runs the sanitizer's checks on it
(:mod:`hccl_py.sanitizer.bounds`), hands it to the rank's server on the sending
core, and commits every round when asked.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..core.constants import (
    INVALID_HANDLE_ID,
    KERNEL_REDUCE_OPS,
    HcclCMDType,
    HcclDataType,
    HcclReduceOp,
    dtype_size,
)
from ..core.errors import InvalidCall
from ..core.gm import GmAddr
from ..core.task import Task
from ..kernel.cores import CoreContext
from ..sanitizer.bounds import check_task
from .binding import Binding
from .convert import Limits, PrepareParam, as_enum, dtype_mismatch, task_fields
from .failures import Failures
from .finegrained import FineGrainedSteps
from .handle import Handle
from .sender import calling_core, core_problem, has_other_cores, is_sender

#: ``commit_call(handle, n, core)``: a ``Prepare[True]``'s ``n`` Commits of ``handle``, made on
#: ``core`` (the calling core), once the Prepare returned it.
CommitCall = Callable[[int, int, CoreContext], None]


class PreparePath:
    """What every Prepare call does with its :class:`PrepareParam`."""

    def __init__(self, binding: Binding, failures: Failures, steps: FineGrainedSteps) -> None:
        self._binding = binding
        self._failures = failures
        self._steps = steps

    def _limits(self, op: HcclCMDType) -> Limits:
        b = self._binding
        platform = b.state.rank_ctx.config.platform
        return Limits(
            platform=platform,
            kernel_api=b.framework is None,
            has_tiling=b.has_tiling(op),
            handles_used=len(b.handles),
            syncs_used=b.n_syncs,
            rank_dim=b.state.rank_dim,
            rank=b.state.rank_ctx.rank,
            zero_stride_spans_repeats=platform.aicpu_zero_stride_spans_repeats and not b.ccu,
            ccu=b.ccu,
        )

    def fields(self, param: PrepareParam, limits: Limits) -> dict[str, Any]:
        """:func:`task_fields` of ``param``, validated once per launch for what every core passes.

        Each core of a launch makes the same Prepare with the same arguments: the first one
        validates them, the others find the fields by the op, the arguments (the buffers by
        identity, the scalars by value and type) and ``limits``. A refusal is never remembered.
        The op is its type: ``OPS[cmd]`` is every Prepare's spec (hashing the spec hashes all
        its fields, two calls per Prepare).
        """
        send, recv, state = param.send_buf, param.recv_buf, self._binding.state
        if state.launch.alone or param.spec.pairwise_counts:
            return task_fields(param, limits)
        if type(send) is not GmAddr or type(recv) is not GmAddr:
            return task_fields(param, limits)
        raw = (param.data_type, param.repeat, param.count, param.reduce_op, param.stride)
        key = (param.spec.cmd, send.offset, recv.offset, raw, tuple(map(type, raw)), id(limits[0]))
        key += limits[1:]
        seen = state.validated
        try:
            hit = seen.get(key)
        except TypeError:  # an unhashable argument: refused by the validation
            return task_fields(param, limits)
        if hit is not None and hit[0] is send.alloc and hit[1] is recv.alloc:
            return hit[2] | {"send": send, "recv": recv}
        fields = task_fields(param, limits)
        seen[key] = (send.alloc, recv.alloc, fields)
        return fields

    def prepare(self, param: PrepareParam, commit: bool, commit_call: CommitCall) -> int:
        """Validate ``param``, send its task from the sending core; the handle id or -1.

        With ``commit``, ``commit_call(handle, n, core)`` makes the ``n`` Commits of every
        round (``core``: the calling core).
        """
        b, failures = self._binding, self._failures
        op, name = param.spec.cmd, param.spec.name
        if failures.unusable(b, name, op=name):
            return INVALID_HANDLE_ID
        if queues := b.queues_read():
            return failures.breach(
                "queued-collective",
                f"{name} with queueNum {queues} in the init tiling: the AI CPU client then sends "
                "it on queue dataType from every core, writes no commit count and its Wait "
                "returns at once (hccl_aicpu_impl.h: SendMsgToServer, SetCommitTurnCntToGm, "
                "Wait); queues are for BatchWrite only (SetQueueNum.md): give the collectives an "
                "init tiling without queueNum",
                INVALID_HANDLE_ID,
                op=name,
            )
        core = calling_core()
        try:
            fields = self.fields(param, self._limits(op))
        except InvalidCall as bad:
            if bad.rule == "handle-limit":  # the official client counted it all the same
                b.over_limit = (
                    f"a Prepare was refused ({bad.reason}): the official client counted that "
                    "Prepare before refusing it, and Finalize waits for its rounds "
                    "(hccl_aicpu_impl.h, CommonPrepareImpl and Finalize)"
                )
            return failures.refuse(name, bad)
        state = b.state
        handle = len(b.handles)
        sends = is_sender(b.config, core)
        problem = core_problem(b, core, sends)
        if problem:
            return failures.breach(
                "sending-core", f"{name}: {problem}", INVALID_HANDLE_ID, op=name, handle=handle
            )
        step_size = self._steps.step_size(op)
        if b.compute_only or not sends:
            b.handles.append(
                Handle(
                    op,
                    fields["repeat"],
                    core.kind,
                    step_size=step_size,
                    compute_only=b.compute_only,
                )
            )
            return self._prepared(handle, commit, commit_call, core)
        if not b.framework:
            mismatch = dtype_mismatch(param, fields["dtype"])
            if mismatch:
                failures.breach(
                    "dtype-mismatch",
                    f"{name}: {mismatch}",
                    op=name,
                    handle=handle,
                    expected=fields["dtype"].name,
                )
        if b.ccu and not b.framework and op in b.cc:
            fields = _ccu_tiling_types(fields, b.cc[op], param, failures, handle)
        steps = state.rank_dim if step_size else 1  # a fine-grained round runs step by step
        task = Task(
            op=op,
            domain=state.group,
            rank=state.rank,
            rank_dim=state.rank_dim,
            handle=handle,
            seq=state.rank_ctx.next_seq(state.group),
            launch=state.launch_index(),
            deps=tuple(state.deps),
            skip_local=_skips_local(b, op),
            caller=b.framework,
            one_sided_before=len(b.handles) - b.queued_count(),
            commit_notes=state.commit_notes.setdefault(handle, {}),
            **fields | {"repeat": fields["repeat"] * steps, "steps": steps},
        )
        try:
            check_task(task, state.rank_ctx.rank, state.rank_ctx.config.overlap)
        except InvalidCall as bad:
            # only this core built the task: a -1 here would leave the other cores a handle ahead
            return failures.refuse(name, bad, alone=has_other_cores(core), handle=handle)
        state.sender = b
        state.sender_core = core
        state.tasks[handle] = task
        info = Handle(op, fields["repeat"], core.kind, task=task, step_size=step_size)
        b.handles.append(info)
        if not commit:
            b.server.submit(task)
            return self._prepared(handle, commit, commit_call, core)
        info.unsent = True  # submitted with its first Commits
        self._prepared(handle, commit, commit_call, core)
        if info.unsent:  # (no Commit sent a round)
            info.unsent = False
            b.server.submit(task)
        return handle

    def _prepared(
        self, handle: int, commit: bool, commit_call: CommitCall, core: CoreContext
    ) -> int:
        self._failures.ok()
        if commit:
            n = self._steps.commits_per_prepare(self._binding.handles[handle])
            commit_call(handle, n, core)
        return handle


def _skips_local(b: Binding, op: HcclCMDType) -> bool:
    """Whether the task leaves the own block unwritten: the tiling's skipLocalRankCopy, on the
    platforms and ops whose server reads it (SetSkipLocalRankCopy.md: A2's AllGather and
    AlltoAll; a reserved field without effect elsewhere)."""
    cc = b.cc.get(op)
    skips = b.state.rank_ctx.config.platform.skips_local_copy
    return cc is not None and op in skips and bool(cc.skipLocalRankCopy)


def _ccu_tiling_types(
    fields: dict[str, Any], cc: Any, param: PrepareParam, failures: Failures, handle: int
) -> dict[str, Any]:
    """The CCU client's task types: its Prepare replaces the data type and reduce op with the
    cc tiling's ``srcDataType`` and ``reduceType`` (``platform_v310/hccl_ccu_v0.h``,
    ``InitCcuParam``), so the rounds move ``count`` elements of the tiling's type. A
    ``ccu-tiling-types`` warning names each argument the tiling overrides, except a data
    type as wide as the Prepare's on an op that does not reduce (the same bytes move: one
    tiling serves AlltoAllvQuantGroupedMatMul's E8M0 scales and FP8 rows); a tiling value the
    op cannot run keeps the Prepare's."""
    spec = param.spec
    read = {"dtype": (HcclDataType, "srcDataType", spec.dtypes)}
    if spec.reduces:
        read["reduce_op"] = (HcclReduceOp, "reduceType", KERNEL_REDUCE_OPS)
    changed, said, usable = {}, [], True
    for key, (kind, field, allowed) in read.items():
        raw = int(getattr(cc, field))
        value = as_enum(kind, raw)
        if value == fields[key]:
            continue
        changed[key] = value
        usable = usable and value in allowed
        if value in allowed and not spec.reduces and _as_wide(value, fields[key]):
            continue  # nothing a data move could show
        said.append(
            f"{fields[key].name} becomes its {field} {raw if value is None else value.name}"
        )
    if not said:
        return fields | changed if usable else fields
    failures.breach(
        "ccu-tiling-types",
        f"{spec.name}: the CCU client takes the cc tiling's srcDataType and reduceType: "
        + ", ".join(said)
        + ("" if usable else f", which {spec.name} cannot run; hccl_py keeps the Prepare's")
        + "; build the tiling with the kernel's types (Mc2CcTilingConfig reduceType, "
        "dstDataType, srcDataType)",
        op=spec.name,
        handle=handle,
    )
    return fields | changed if usable else fields


def _as_wide(dtype: HcclDataType, other: HcclDataType) -> bool:
    """Whether the elements of two data types are as wide."""
    return dtype_size(dtype) == dtype_size(other)


__all__ = ["PreparePath", "PrepareParam"]
