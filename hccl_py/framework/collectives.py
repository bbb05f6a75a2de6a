"""torch.distributed-like collectives of MindSpore and Paddle, on hccl_py's own client.

Each op checks its arguments, agrees with the other ranks on what to do (see
:mod:`hccl_py.framework._common`), then runs one internal kernel, or none where
its input rode along in that exchange (:mod:`hccl_py.framework._carry`):

- ``all_gather_into_tensor``: one AllGather.
- ``alltoall_single``: one AlltoAll when every split is the same non-empty size,
  otherwise one AlltoAllV (counts and displacements in elements: rows x row size).
- ``all_reduce``: one AllReduce; ``reduce_scatter_tensor``: one ReduceScatter.
  For dtypes the kernel API cannot reduce (float64, int64, uint8, bool ...) both
  AllGather every rank's data and reduce it locally in rank order instead.
- ``barrier``: the argument exchange alone.

The asynchronous forms prepare and commit at once and return a :class:`Work`
whose ``wait()`` waits, finalizes and copies staged outputs into place.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from ..core import layout
from ..core.constants import REDUCE_DTYPES, HcclCMDType, HcclDataType, HcclReduceOp
from ..kernel.context import current_rank_context
from ..server.protocol import WIDE_REDUCE_BYTES
from ..server.reduce import reduce_ranks
from ._carry import ALL_REDUCE, ALL_TO_ALL, GATHER, REDUCE_SCATTER, agree_carrying
from ._common import (
    agree,
    check_bool,
    check_same_dtype,
    check_tensor,
    exclusive_cumsum,
    hccl_dtype,
    listed,
    mismatch,
    reduce_op_of,
    require_same,
    resolve_group,
    rows,
    source,
    split_sizes,
    staged,
    who,
    writable,
)
from ._kernel import FrameworkKernel, Work, run_async
from ._local_reduce import local_reduce

_C = HcclCMDType
_SUM = HcclReduceOp.HCCL_REDUCE_SUM


def _shape(t: torch.Tensor) -> list[int]:
    return [int(s) for s in t.shape]


def _row_size(t: torch.Tensor) -> int:
    """Elements per dim-0 row."""
    return math.prod(t.shape[1:])


def all_gather_into_tensor(
    output_tensor: torch.Tensor,
    input_tensor: torch.Tensor,
    group: Any = None,
    async_op: bool = False,
) -> Work | None:
    """Concatenate every rank's ``input_tensor`` along dim 0, in rank order, into ``output_tensor``.

    MindSpore's ``mint.distributed.all_gather_into_tensor``: the output has
    shape ``(N * x1, x2, ...)``; returns a :class:`Work` when ``async_op``.
    """
    op = "all_gather_into_tensor"
    check_tensor(op, "output_tensor", output_tensor, written=True)
    check_tensor(op, "input_tensor", input_tensor)
    check_bool(op, "async_op", async_op)
    grp = resolve_group(op, group)
    check_same_dtype(op, output_tensor=output_tensor, input_tensor=input_tensor)
    data_type = hccl_dtype(op, input_tensor)
    shape = _shape(input_tensor)
    problem = None
    if not shape:
        problem = "input_tensor must have at least one dimension"
    else:
        want = [grp.size * shape[0], *shape[1:]]
        if _shape(output_tensor) != want:
            problem = (
                f"output_tensor has shape {_shape(output_tensor)}, expected {want} "
                f"({grp.size} ranks x input shape {shape})"
            )
    data = None if async_op else input_tensor
    records, carried = agree_carrying(
        grp, op, problem, data, GATHER, output_tensor, dtype=str(input_tensor.dtype), shape=shape
    )
    require_same(
        grp, op, records, ("shape", "input_tensor's shape"), ("dtype", "input_tensor's dtype")
    )
    if carried is not None:
        carried.write(output_tensor, carried.rows)
        return None
    kernel = FrameworkKernel(grp, _C.HCCL_CMD_ALLGATHER, op)
    src = source(input_tensor, output_tensor)
    dst, finish = staged(output_tensor)
    kernel.all_gather(src, dst, data_type, ("input_tensor", "output_tensor"))
    return run_async(kernel, finish, async_op)


def _split_problem(
    name: str, sizes: list[int] | None, tensor: str, n_rows: int, n: int
) -> str | None:
    """Why ``sizes`` cannot split the ``n_rows`` rows of ``tensor`` among ``n`` ranks, or None."""
    if sizes is None:
        if n_rows % n:
            return (
                f"{name} is None, so {tensor}'s dim 0 ({n_rows}) must be divisible by the {n} ranks"
            )
        return None
    if len(sizes) != n:
        return f"{name} has {len(sizes)} entries, expected one per rank ({n}): {listed(sizes)}"
    if any(s < 0 for s in sizes):
        return f"{name} must be non-negative: {sizes}"
    if sum(sizes) != n_rows:
        return f"{name} {sizes} sums to {sum(sizes)}, but {tensor} has {n_rows} rows in dim 0"
    return None


def _check_splits(grp: Any, op: str, records: list[dict[str, Any]]) -> None:
    """Every sender's split size for a receiver must equal that receiver's size for it."""
    ins, outs = [r["in"] for r in records], [r["out"] for r in records]
    if ins == list(map(list, zip(*outs, strict=True))):
        return
    sends = np.array(ins, dtype=np.int64)
    recvs = np.array(outs, dtype=np.int64)
    bad = np.argwhere(sends != recvs.T)
    if len(bad) == 0:
        return
    lines = [
        f"{who(grp, i)} sends {rows(sends[i, j])} to {who(grp, j)} (its in_split_sizes[{j}]), "
        f"but {who(grp, j)} expects {recvs[j, i]} from {who(grp, i)} (its out_split_sizes[{i}])"
        for i, j in bad[:4].tolist()
    ]
    more = f"; and {len(bad) - 4} more" if len(bad) > 4 else ""
    raise mismatch(
        op, "split sizes disagree between sender and receiver: " + "; ".join(lines) + more
    )


def exchange_rows(
    op: str,
    grp: Any,
    src: torch.Tensor,
    dst: torch.Tensor,
    send_rows: np.ndarray,
    recv_rows: np.ndarray,
    data_type: HcclDataType,
    uniform: bool = False,
) -> FrameworkKernel:
    """Start the all-to-all that sends ``send_rows[j]`` dim-0 rows of ``src`` to rank j.

    Rows from rank i land in ``dst`` in rank order, ``recv_rows[i]`` of them.
    ``uniform`` (every rank's every split equal and non-empty) selects AlltoAll;
    otherwise AlltoAllV with counts and displacements in elements.
    """
    row = _row_size(src)
    if uniform:
        kernel = FrameworkKernel(grp, _C.HCCL_CMD_ALLTOALL, op)
        count = int(send_rows[0]) * row
        kernel.start(
            "AlltoAll", kernel.gm(src, "in_tensor"), kernel.gm(dst, "out_tensor"), count, data_type
        )
        return kernel
    kernel = FrameworkKernel(grp, _C.HCCL_CMD_ALLTOALLV, op)
    send = np.asarray(send_rows, dtype=np.int64) * row
    recv = np.asarray(recv_rows, dtype=np.int64) * row
    kernel.start(
        "AlltoAllV",
        kernel.gm(src, "in_tensor"),
        send,
        exclusive_cumsum(send),
        data_type,
        kernel.gm(dst, "out_tensor"),
        recv,
        exclusive_cumsum(recv),
        data_type,
    )
    return kernel


def alltoall_single(
    in_tensor: torch.Tensor,
    out_tensor: torch.Tensor,
    in_split_sizes: Any = None,
    out_split_sizes: Any = None,
    group: Any = None,
    sync_op: bool = True,
) -> Work:
    """Send piece j of ``in_tensor`` (split along dim 0) to rank j; receive rank i's piece i.

    Paddle's ``distributed.alltoall_single``. Split sizes count dim-0 rows
    (None: equal pieces). Returns a :class:`Work`; with ``sync_op`` the data is
    already in place.
    """
    op = "alltoall_single"
    check_tensor(op, "in_tensor", in_tensor)
    check_tensor(op, "out_tensor", out_tensor, written=True)
    ins = split_sizes(op, "in_split_sizes", in_split_sizes)
    outs = split_sizes(op, "out_split_sizes", out_split_sizes)
    check_bool(op, "sync_op", sync_op)
    grp = resolve_group(op, group)
    check_same_dtype(op, in_tensor=in_tensor, out_tensor=out_tensor)
    data_type = hccl_dtype(op, in_tensor)
    n = grp.size
    problem = None
    if in_tensor.dim() == 0 or out_tensor.dim() == 0:
        problem = "in_tensor and out_tensor must have at least one dimension"
    elif _shape(in_tensor)[1:] != _shape(out_tensor)[1:]:
        problem = (
            f"in_tensor {_shape(in_tensor)} and out_tensor {_shape(out_tensor)} must have "
            "the same shape after dim 0"
        )
    else:
        problem = _split_problem(
            "in_split_sizes", ins, "in_tensor", in_tensor.shape[0], n
        ) or _split_problem("out_split_sizes", outs, "out_tensor", out_tensor.shape[0], n)
    if problem is None:
        ins = ins if ins is not None else [in_tensor.shape[0] // n] * n
        outs = outs if outs is not None else [out_tensor.shape[0] // n] * n
    row_in = _row_size(in_tensor) * in_tensor.element_size()
    records, carried = agree_carrying(
        grp,
        op,
        problem,
        in_tensor if sync_op else None,
        ALL_TO_ALL,
        out_tensor,
        None if ins is None else [k * row_in for k in ins],
        dtype=str(in_tensor.dtype),
        row=_shape(in_tensor)[1:],
        **{"in": ins, "out": outs},
    )
    require_same(
        grp, op, records, ("dtype", "in_tensor's dtype"), ("row", "in_tensor's shape after dim 0")
    )
    _check_splits(grp, op, records)
    if carried is not None:
        me = grp.rank_of(current_rank_context().rank)
        row_bytes = _row_size(out_tensor) * out_tensor.element_size()
        carried.write(out_tensor, carried.pieces_for(me, [r["in"] for r in records], row_bytes))
        return Work(None)
    sizes = {s for r in records for s in r["in"] + r["out"]}
    uniform = len(sizes) == 1 and sizes != {0} and _row_size(in_tensor) > 0
    dst, finish = staged(out_tensor)
    kernel = exchange_rows(
        op,
        grp,
        source(in_tensor, out_tensor),
        dst,
        np.array(ins),
        np.array(outs),
        data_type,
        uniform,
    )
    work = Work(kernel, finish)
    if sync_op:
        work.wait()
    return work


def _reduce_rows(
    stacked: torch.Tensor, reduce_op: HcclReduceOp, data_type: HcclDataType
) -> torch.Tensor:
    """``stacked``'s rows (one per rank) reduced in rank order, as the op's task would: the
    servers' rule for the dtypes the kernel API reduces, :func:`.local_reduce` for others."""
    if data_type in REDUCE_DTYPES:
        return reduce_ranks(stacked, reduce_op)
    return local_reduce(stacked, reduce_op)


def _reduce(
    op: str,
    grp: Any,
    src: torch.Tensor,
    out: torch.Tensor,
    reduce_op: HcclReduceOp,
    scatter: bool,
) -> tuple[FrameworkKernel, Callable[[], None] | None]:
    """Start AllReduce (or ReduceScatter when ``scatter``) of ``src`` into ``out``.

    Dtypes the kernel API cannot reduce are AllGathered and reduced locally.
    """
    data_type = hccl_dtype(op, src)
    dst, finish = staged(out)
    if data_type in REDUCE_DTYPES:
        cmd = _C.HCCL_CMD_REDUCE_SCATTER if scatter else _C.HCCL_CMD_ALLREDUCE
        kernel = FrameworkKernel(grp, cmd, op, reduce_op)
        args = (
            kernel.gm(src, "input"),
            kernel.gm(dst, "output"),
            out.numel(),
            data_type,
            reduce_op,
        )
        kernel.start("ReduceScatter" if scatter else "AllReduce", *args)
        return kernel, finish
    n = grp.size
    gathered = torch.empty((n, src.numel()), dtype=src.dtype, device=src.device)
    kernel = FrameworkKernel(grp, _C.HCCL_CMD_ALLGATHER, op)
    kernel.all_gather(src, gathered, data_type, ("input", "gathered"))
    me = grp.rank_of(kernel.rank_ctx.rank)

    def reduce_locally() -> None:
        mine = gathered.view(n, n, -1)[:, me] if scatter else gathered
        writable(out).copy_(local_reduce(mine, reduce_op).view(out.shape))

    return kernel, reduce_locally


def all_reduce(
    tensor: torch.Tensor, op: Any = _SUM, group: Any = None, async_op: bool = False
) -> Work | None:
    """Reduce ``tensor`` over the group's ranks, in place (SUM, MAX or MIN)."""
    name = "all_reduce"
    check_tensor(name, "tensor", tensor, written=True)
    check_bool(name, "async_op", async_op)
    reduce_op = reduce_op_of(name, op)
    grp = resolve_group(name, group)
    data_type = hccl_dtype(name, tensor)
    count, size = tensor.numel(), tensor.element_size()
    wide = count * size > WIDE_REDUCE_BYTES  # its reduce-scatter may ride in an all-to-all
    chunks = layout.even_chunks(count, grp.size, size).sizes.tolist() if wide else None
    records, carried = agree_carrying(
        grp,
        name,
        None,
        None if async_op else tensor,
        ALL_REDUCE,
        tensor,
        chunks,
        dtype=str(tensor.dtype),
        shape=_shape(tensor),
        reduce=reduce_op.name,
    )
    require_same(
        grp,
        name,
        records,
        ("shape", "tensor's shape"),
        ("dtype", "tensor's dtype"),
        ("reduce", "op"),
    )
    if carried is not None and carried.scattered:  # this rank's chunk of every rank's input
        stacked = carried.stacked(tensor.dtype)
        mine = _reduce_rows(stacked, reduce_op, data_type) if stacked.numel() else stacked[0]
        carried.gather(grp, mine, tensor)
        return None
    if carried is not None:
        stacked = carried.stacked(tensor.dtype)
        carried.write(tensor, _reduce_rows(stacked, reduce_op, data_type))
        return None
    kernel, finish = _reduce(name, grp, source(tensor, tensor), tensor, reduce_op, scatter=False)
    return run_async(kernel, finish, async_op)


def reduce_scatter_tensor(
    output: torch.Tensor,
    input: torch.Tensor,  # noqa: A002 - torch.distributed's argument name
    op: Any = _SUM,
    group: Any = None,
    async_op: bool = False,
) -> Work | None:
    """Reduce ``input`` (shape ``(N * x1, ...)``) over the ranks; rank r keeps block r in ``output``."""
    name = "reduce_scatter_tensor"
    check_tensor(name, "output", output, written=True)
    check_tensor(name, "input", input)
    check_bool(name, "async_op", async_op)
    reduce_op = reduce_op_of(name, op)
    grp = resolve_group(name, group)
    check_same_dtype(name, output=output, input=input)
    data_type = hccl_dtype(name, input)
    problem = None
    out_shape = _shape(output)
    want = [grp.size * out_shape[0], *out_shape[1:]] if out_shape else None
    if want is None:
        problem = "output must have at least one dimension"
    elif _shape(input) != want:
        problem = (
            f"input has shape {_shape(input)} and output {out_shape}; input must be "
            f"{grp.size} (ranks) output blocks along dim 0, shape {want}"
        )
    records, carried = agree_carrying(
        grp,
        name,
        problem,
        None if async_op else input,
        REDUCE_SCATTER,
        output,
        None if problem else [output.numel() * output.element_size()] * grp.size,
        dtype=str(input.dtype),
        shape=out_shape,
        reduce=reduce_op.name,
    )
    require_same(
        grp, name, records, ("shape", "output's shape"), ("dtype", "dtype"), ("reduce", "op")
    )
    if carried is not None:
        mine = carried.blocks_for(grp.rank_of(current_rank_context().rank), input.dtype)
        carried.write(output, _reduce_rows(mine, reduce_op, data_type))
        return None
    kernel, finish = _reduce(name, grp, source(input, output), output, reduce_op, scatter=True)
    return run_async(kernel, finish, async_op)


def barrier(group: Any = None, async_op: bool = False) -> Work | None:
    """Return once every rank of the group arrived (with ``async_op``, a completed
    :class:`Work`): the argument exchange, which every rank leaves only once every rank
    joined it, is the barrier."""
    name = "barrier"
    check_bool(name, "async_op", async_op)
    grp = resolve_group(name, group)
    agree(grp, name, None)
    return Work(None) if async_op else None
