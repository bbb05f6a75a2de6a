"""Data movement of one round, for every op, with vectorised torch operations.

Sources are read before any destination is written, so in-place use
(``sendBuf == recvBuf``) behaves like hardware's out-of-place semantics:
reductions compute their result from views of the send buffers first, and
moves stage the sources in one tensor, unless no receive buffer shares
storage with a send buffer and the blocks are large, when every block is
copied straight to its place (half the memory traffic). Regular layouts
become strided views; bytes are copied as the widest integer type that the
sizes and alignments allow. AlltoAllV, whose blocks differ per peer, copies
block by block.
"""

from __future__ import annotations

import torch

from hccl_py.core import layout
from hccl_py.core.constants import HcclCMDType, HcclReduceOp
from hccl_py.core.layout import Blocks
from hccl_py.core.task import Task
from hccl_py.server.reduce import reduce_ranks

_C = HcclCMDType


def _strided(data: torch.Tensor, blocks: Blocks, wide: bool = False) -> torch.Tensor | None:
    """A (blocks, bytes) view of ``data`` when the blocks are regular and disjoint.

    ``wide``: as the widest integer type that the sizes and alignment allow
    (decided on the layout's numbers, without asking the view).
    """
    reg = blocks.regular()
    if reg is None:
        return None
    start, nbytes, step = reg
    n = len(blocks.starts)
    if n > 1 and step < nbytes:
        return None
    offset = data.storage_offset() + start
    view = data.as_strided((n, nbytes), (step, 1), offset)
    if wide and nbytes:
        for dtype, size in _WIDE:
            if nbytes % size == 0 and offset % size == 0 and step % size == 0:
                return view.view(dtype)
    return view


def _round_view(task: Task, side: str, round_idx: int, wide: bool) -> torch.Tensor | None:
    """:func:`_strided` of round ``round_idx``, from views of every round made once per task.

    When every round is regular with the same shape and the rounds are evenly spaced,
    one strided view of all of them is cut into the rounds' views (the widest type
    that every round allows); otherwise each round's view is made when asked.
    """
    views = task.round_views.get((side, wide))
    if views is None:
        views = task.round_views[(side, wide)] = _task_views(task, side, wide)
    if views and 0 <= round_idx < task.repeat:  # (views of every round: ``repeat`` of them)
        return views[round_idx]
    return _strided(task.memory(side), layout.round_blocks(task, side, round_idx), wide)


def _task_views(task: Task, side: str, wide: bool) -> tuple[torch.Tensor, ...]:
    """The views of every round, or () when the rounds do not form one strided view."""
    reg = layout.rounds_regular(task, side)
    if reg is None:
        return ()
    start, n, nbytes, step, gap = reg
    if n > 1 and step < nbytes:
        return ()
    data = task.memory(side)
    offset = data.storage_offset() + start
    view = data.as_strided((task.repeat, n, nbytes), (gap, step, 1), offset)
    if wide and nbytes:
        for dtype, size in _WIDE:
            if nbytes % size == 0 and offset % size == 0 and step % size == 0 and gap % size == 0:
                return view.view(dtype).unbind(0)
    return view.unbind(0)


def read(task: Task, side: str, round_idx: int) -> torch.Tensor:
    """The (blocks, bytes) uint8 source of one round, as a view where possible."""
    view = _round_view(task, side, round_idx, False)
    if view is not None:
        return view
    blocks, data = layout.round_blocks(task, side, round_idx), task.memory(side)
    return torch.stack(
        [data[int(s) : int(s) + int(n)] for s, n in zip(blocks.starts, blocks.sizes, strict=True)]
    )


def write(
    task: Task, side: str, round_idx: int, values: torch.Tensor, skip: int | None = None
) -> None:
    """Write (blocks, bytes) ``values`` into one round's destination blocks.

    ``values`` are bytes (uint8), or the same bytes as a wider integer type.
    """
    view = _round_view(task, side, round_idx, True) if skip is None else None
    if view is not None:
        if view.dtype == values.dtype:
            view.copy_(values)
        else:
            copy_bytes(_as_bytes(view), _as_bytes(values))
        return
    blocks = layout.round_blocks(task, side, round_idx)
    data = task.memory(side)
    for k, (s, n) in enumerate(zip(blocks.starts.tolist(), blocks.sizes.tolist(), strict=True)):
        if k != skip:
            copy_bytes(data[s : s + n], _as_bytes(values[k]))


def _bytes(values: torch.Tensor) -> torch.Tensor:
    return values.contiguous().view(torch.uint8)


def _as_bytes(values: torch.Tensor) -> torch.Tensor:
    """An integer view as its bytes (uint8), the last dimension widened accordingly."""
    return values if values.dtype == torch.uint8 else values.view(torch.uint8)


#: Blocks of at least this many bytes are copied straight to their destination when the
#: ranks' send and receive buffers share no storage (below it, fewer larger copies win).
DIRECT_BYTES = 1 << 16
_WIDE = ((torch.int64, 8), (torch.int32, 4), (torch.int16, 2))


def _widen(view: torch.Tensor) -> torch.Tensor:
    """``view`` (uint8 bytes) as the widest integer type its size and alignment allow."""
    if view.dim() == 0 or view.stride(-1) != 1 or view.shape[-1] == 0:
        return view
    size_of_row, offset, outer = view.shape[-1], view.storage_offset(), view.stride()[:-1]
    for dtype, size in _WIDE:
        if size_of_row % size == 0 and offset % size == 0 and all(s % size == 0 for s in outer):
            return view.view(dtype)
    return view


def _widen_new(fresh: torch.Tensor) -> torch.Tensor:
    """:func:`_widen` of a tensor torch just made (contiguous, at offset 0): by its rows' size."""
    for dtype, size in _WIDE:
        if fresh.shape[-1] % size == 0 and fresh.shape[-1]:
            return fresh.view(dtype)
    return fresh


def copy_bytes(dst: torch.Tensor, src: torch.Tensor) -> None:
    """Copy uint8 ``src`` into uint8 ``dst`` (same shape), as wide elements where possible."""
    wide_dst, wide_src = _widen(dst), _widen(src)
    if wide_dst.dtype == wide_src.dtype:
        wide_dst.copy_(wide_src)
    else:
        dst.copy_(src)


def _disjoint(tasks: list[Task]) -> bool:
    """Whether no receive buffer shares storage with a send buffer (nothing needs staging)."""
    sends = {t.send.alloc.memory for t in tasks}
    recvs = {t.recv.alloc.memory for t in tasks}
    if None in sends or None in recvs:
        return False
    return not {m[0] for m in sends} & {m[0] for m in recvs}


def _direct(tasks: list[Task], r: int) -> bool:
    """Whether round ``r``'s blocks go straight to their destination: large, storage disjoint."""
    large = int(layout.round_blocks(tasks[0], "send", r).sizes[0]) >= DIRECT_BYTES
    return large and _disjoint(tasks)


def _local(task: Task) -> int | None:
    return task.rank if task.skip_local else None


def _all_reduce(tasks: list[Task], r: int) -> None:
    parts = [t.typed(read(t, "send", r)[0]) for t in tasks]
    result = _bytes(reduce_ranks(parts, HcclReduceOp(tasks[0].reduce_op))).reshape(1, -1)
    for t in tasks:
        write(t, "recv", r, result)


def _direct_moves(tasks: list[Task], r: int, source_block: int | None) -> None:
    """Copy every peer block of round ``r`` straight from its source to its destination.

    Destination block ``i`` of task ``j`` receives source block ``j`` of task
    ``i`` (AlltoAll) or the one block of task ``i`` (AllGather: ``source_block`` 0).
    """
    sources = [read(t, "send", r) for t in tasks]
    for j, t in enumerate(tasks):
        blocks, data, skip = layout.round_blocks(t, "recv", r), t.memory("recv"), _local(t)
        for i, (s, n) in enumerate(zip(blocks.starts.tolist(), blocks.sizes.tolist(), strict=True)):
            if i != skip:
                copy_bytes(data[s : s + n], sources[i][j if source_block is None else source_block])


def _all_gather(tasks: list[Task], r: int) -> None:
    if _direct(tasks, r):
        _direct_moves(tasks, r, 0)
        return
    gathered = _widen_new(torch.cat([read(t, "send", r) for t in tasks]))
    for t in tasks:
        write(t, "recv", r, gathered, skip=_local(t))


def _reduce_scatter(tasks: list[Task], r: int) -> None:
    parts = [t.typed(read(t, "send", r)) for t in tasks]
    result = reduce_ranks(parts, HcclReduceOp(tasks[0].reduce_op))
    for j, t in enumerate(tasks):
        write(t, "recv", r, _bytes(result[j]).reshape(1, -1))


def _all_to_all(tasks: list[Task], r: int) -> None:
    if _direct(tasks, r):
        _direct_moves(tasks, r, None)
        return
    stacked = torch.stack([read(t, "send", r) for t in tasks])
    for j, t in enumerate(tasks):
        write(t, "recv", r, stacked[:, j], skip=_local(t))


def _all_to_all_v(tasks: list[Task], r: int) -> None:
    """Block by block; sources are staged (only their blocks) unless storage is disjoint."""
    direct = _disjoint(tasks)
    sources = []
    for t in tasks:
        blocks, data = layout.round_blocks(t, "send", r), t.memory("send")
        pieces = [
            data[s : s + n]
            for s, n in zip(blocks.starts.tolist(), blocks.sizes.tolist(), strict=True)
        ]
        if not direct:
            pieces = list(torch.cat(pieces).split(blocks.sizes.tolist())) if pieces else []
        sources.append(pieces)
    for j, t in enumerate(tasks):
        dst, data = layout.round_blocks(t, "recv", r), t.memory("recv")
        for i, (d, n) in enumerate(zip(dst.starts.tolist(), dst.sizes.tolist(), strict=True)):
            if n:
                copy_bytes(data[d : d + n], sources[i][j])


#: The round function of every op this executor runs (tests check it covers the op table).
ROUNDS = {
    _C.HCCL_CMD_ALLREDUCE: _all_reduce,
    _C.HCCL_CMD_ALLGATHER: _all_gather,
    _C.HCCL_CMD_REDUCE_SCATTER: _reduce_scatter,
    _C.HCCL_CMD_ALLTOALL: _all_to_all,
    _C.HCCL_CMD_ALLTOALLV: _all_to_all_v,
}


def round_bytes(tasks: list[Task], round_idx: int) -> int:
    """Bytes that round ``round_idx`` reads from every rank's send buffer (about what it moves)."""
    return len(tasks) * layout.round_blocks(tasks[0], "send", round_idx).total()


def run_round(tasks: list[Task], round_idx: int) -> None:
    """Execute round ``round_idx`` of one collective; ``tasks[i]`` is domain rank i's task."""
    ROUNDS[tasks[0].op](tasks, round_idx)
