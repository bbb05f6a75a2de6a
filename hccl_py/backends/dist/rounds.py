"""One round of a task as torch.distributed process-group calls on views of GM buffers.

The byte ranges come from :mod:`hccl_py.core.layout` (the single source of the
address arithmetic); this module only chooses the collective and avoids
copies. Data-movement ops work on raw bytes (``uint8``), so every data type
moves alike. Extra copies per round, beyond what the collective itself does:

- AllGather: none when the receive blocks are contiguous and in rank order
  (``all_gather_single`` writes straight into the receive buffer); with a
  stride or ``skipLocalRankCopy`` the list form of ``all_gather`` writes into
  one view per block (the process group copies out of its own flat buffer).
  The send block is cloned only when it shares bytes with another rank's
  receive block.
- AlltoAll / AlltoAllV: ``all_to_all_single`` with per-peer split sizes. The
  send blocks are used in place when they are contiguous and in rank order,
  otherwise packed into one temporary; the receive side likewise, otherwise
  received into a temporary and copied into the blocks (one copy).
- AllReduce / ReduceScatter, **exact** reduction (gloo's default): the inputs
  of every rank are exchanged and reduced locally in rank order with the
  emulator's rule (:func:`hccl_py.server.reduce.reduce_ranks`), so results are
  bit-identical to the emulator. ReduceScatter: one temporary of ``rankDim``
  blocks (the exchanged rows), reduced straight into the receive block.
  AllReduce below :data:`EXACT_SPLIT_MIN_BYTES`: every input all-gathered into
  a temporary of ``rankDim`` blocks; from there on, see
  :func:`_exact_all_reduce_split` (with equal chunks, one temporary of 1/n of
  the block beyond the all-gather's own buffer).
- AllReduce / ReduceScatter, **native** reduction (HCCL's default): the process
  group's own ``all_reduce`` / ``reduce_scatter_single``. AllReduce copies the send block
  into the receive block first (none when they coincide); ReduceScatter packs strided send
  blocks and writes into the receive block (a temporary when it shares bytes with the send
  blocks). Types the process group cannot reduce (gloo: FP16/BF16 SUM accumulates in
  FP32, INT16 in INT32) are widened into a temporary and narrowed back. gloo's MAX and
  MIN drop NaN, so on gloo (``Reduction.nan_pass``) a MAX or MIN of floating types also
  reduces one flag (whether any rank has a NaN) and, only when one has, a byte mask of the
  NaN positions, which are then set to NaN: NaN propagates as in the emulator and numpy.

When send and receive ranges of a round share bytes, the source is read into a
temporary first, as the emulator does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import torch
import torch.distributed as dist
from torch.autograd.graph import increment_version

from ...core import layout
from ...core.constants import HcclCMDType, HcclReduceOp
from ...core.layout import Blocks
from ...core.task import Task
from ...sanitizer.overlap import first_shared
from ...server.protocol import Payload, joined
from ...server.reduce import reduce_ranks

_C = HcclCMDType

#: Exact AllReduce rounds of at least this many bytes reduce-scatter, then all-gather
#: (two collectives, 2 (n-1)/n of the input on the wire); smaller ones gather every
#: rank's input (one collective, n - 1 inputs on the wire). Both are bit-identical.
EXACT_SPLIT_MIN_BYTES = 64 << 10

_REDUCE_OPS = {
    HcclReduceOp.HCCL_REDUCE_SUM: dist.ReduceOp.SUM,
    HcclReduceOp.HCCL_REDUCE_MAX: dist.ReduceOp.MAX,
    HcclReduceOp.HCCL_REDUCE_MIN: dist.ReduceOp.MIN,
}

_all_gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_reduce_scatter_single = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
#: Blocks until a process-group call started with ``async_op=True`` finished.
Waiter = Callable[[dist.Work], None]


@dataclass(frozen=True)
class Reduction:
    """How a backend reduces: exactly (gather + rank-order reduce) or with the PG's own op."""

    exact: bool
    #: Native only: element type -> wider type the process group reduces in.
    widen: Mapping[torch.dtype, torch.dtype] = field(default_factory=dict)
    #: Native only: the process group's MAX/MIN drop NaN, so NaN positions are reduced aside.
    nan_pass: bool = False


@dataclass(frozen=True)
class Domain:
    """A task's domain as this rank's process group sees it.

    ``order[p]`` is the domain index (position in ``Group.ranks``) of process
    group rank ``p``; it is the identity unless the PG sorted the ranks.
    """

    pg: dist.ProcessGroup
    order: np.ndarray
    reduction: Reduction

    @cached_property
    def identity(self) -> bool:
        """Whether PG ranks and domain indices coincide."""
        return bool((self.order == np.arange(len(self.order))).all())

    def to_pg(self, blocks: Blocks) -> Blocks:
        """Per-peer blocks (domain order) in process-group rank order."""
        return (
            blocks if self.identity else Blocks(blocks.starts[self.order], blocks.sizes[self.order])
        )

    def to_domain(self, stacked: torch.Tensor) -> torch.Tensor:
        """Rows received in PG rank order, reordered by domain index."""
        if self.identity:
            return stacked
        return stacked[torch.from_numpy(np.argsort(self.order)).to(stacked.device)]


# ------------------------------------------------------------------ byte views


def _packed(blocks: Blocks) -> tuple[int, int] | None:
    """``(start, end)`` when the non-empty blocks follow each other without gaps, in order
    (memoised: a layout's blocks serve every round, and every launch of the same task)."""
    return blocks.memo("packed", _find_packed)  # type: ignore[return-value]


def _find_packed(blocks: Blocks) -> tuple[int, int] | None:
    nz = blocks.sizes > 0
    if not nz.any():
        return 0, 0
    starts, sizes = blocks.starts[nz], blocks.sizes[nz]
    if (starts[1:] != starts[:-1] + sizes[:-1]).any():
        return None
    return int(starts[0]), int(starts[-1] + sizes[-1])


def gather_bytes(data: torch.Tensor, blocks: Blocks) -> torch.Tensor:
    """The blocks' bytes, concatenated: a view when they are packed, else one copy."""
    packed = _packed(blocks)
    if packed is not None:
        return data[packed[0] : packed[1]]
    return torch.cat(
        [
            data[s : s + n]
            for s, n in zip(blocks.starts.tolist(), blocks.sizes.tolist(), strict=True)
        ]
    )


def scatter_bytes(data: torch.Tensor, blocks: Blocks, flat: torch.Tensor, skip: int | None) -> None:
    """Copy concatenated ``flat`` into the blocks, leaving block ``skip`` untouched (one copy
    when they are packed and ``flat`` fills them)."""
    packed = _packed(blocks) if skip is None else None
    if packed is not None and packed[1] - packed[0] == flat.numel():
        data[packed[0] : packed[1]].copy_(flat)
        return
    sizes = blocks.sizes.tolist()
    for k, (start, part) in enumerate(zip(blocks.starts.tolist(), flat.split(sizes), strict=True)):
        if k != skip and part.numel():
            data[start : start + part.numel()].copy_(part)


def scatter_joined(data: torch.Tensor, blocks: Blocks, rows: list[Payload]) -> None:
    """Copy ``rows`` one after another into the blocks (which they fill): straight from the
    rows in one copy where the blocks are packed in memory on the CPU, else through one
    joined tensor (:func:`scatter_bytes`)."""
    packed = _packed(blocks)
    if packed is not None and data.device.type == "cpu":
        joined(rows, out=data[packed[0] : packed[1]].numpy())
        increment_version(data)  # numpy's write does not move it
        return
    scatter_bytes(data, blocks, torch.from_numpy(joined(rows)).to(data.device), None)


def _source(task: Task, round_idx: int, blocks: Blocks, in_place_ok: bool = False) -> torch.Tensor:
    """The round's send bytes as one tensor, detached from the receive bytes when they overlap.

    ``in_place_ok``: the collective tolerates the op's exact in-place block pair.
    """
    src = gather_bytes(task.memory("send"), blocks)
    if _packed(blocks) is not None and first_shared(task, round_idx, in_place_ok) is not None:
        src = src.clone()
    return src


def write_result(task: Task, round_idx: int, values: torch.Tensor) -> None:
    """Store one reduced block into the round's (single) receive block."""
    blocks = layout.round_blocks(task, "recv", round_idx)
    start = int(blocks.starts[0])
    raw = values.contiguous().view(torch.uint8).reshape(-1)
    task.memory("recv")[start : start + raw.numel()].copy_(raw)


def _nan_mask(values: torch.Tensor, op: HcclReduceOp, dom: Domain) -> torch.Tensor | None:
    """This rank's NaN positions of ``values`` when a native MAX/MIN must propagate NaN, else None.

    None also when no rank of the domain has a NaN (one 1-element all_reduce says so),
    so the common case costs one tiny collective.
    """
    if (
        not dom.reduction.nan_pass
        or op == HcclReduceOp.HCCL_REDUCE_SUM
        or not values.dtype.is_floating_point
    ):
        return None
    mask = torch.isnan(values)
    anywhere = torch.tensor([int(mask.any())], dtype=torch.int32, device=values.device)
    dist.all_reduce(anywhere, dist.ReduceOp.MAX, group=dom.pg)
    return mask.to(torch.uint8) if int(anywhere.item()) else None


def _fill_nan(result: torch.Tensor, mask: torch.Tensor | None) -> None:
    """Set ``result`` to NaN where the reduced mask (any rank's NaN) is set."""
    if mask is not None:
        result.masked_fill_(mask.bool(), float("nan"))


# ------------------------------------------------------------------ the ops
def _all_gather(task: Task, r: int, dom: Domain) -> None:
    send = layout.round_blocks(task, "send", r)
    nbytes = int(send.sizes[0])
    if nbytes == 0:
        return
    recv_blocks = layout.round_blocks(task, "recv", r)
    own = task.rank
    src = _source(task, r, send, in_place_ok=True)
    recv = dom.to_pg(recv_blocks)
    data = task.memory("recv")
    packed = _packed(recv)
    if packed is not None and not task.skip_local:
        _all_gather_single(data[packed[0] : packed[1]], src, group=dom.pg)
        return
    outs = [data[s : s + nbytes] for s in recv.starts.tolist()]
    if task.skip_local:
        outs[int(np.flatnonzero(dom.order == own)[0])] = torch.empty_like(src)
    dist.all_gather(outs, src, group=dom.pg)


def _exchange(task: Task, r: int, dom: Domain, recv: Blocks | None) -> torch.Tensor | None:
    """All-to-all of the round's per-peer send blocks.

    With ``recv`` (per-peer receive blocks), the received bytes land in them
    (except this rank's own block under ``skipLocalRankCopy``) and None is
    returned; without, every peer's block for this rank is returned
    concatenated in domain order (ReduceScatter).
    """
    send = dom.to_pg(layout.round_blocks(task, "send", r))
    src = _source(task, r, send)
    if recv is None:
        out_sizes = [task.count * task.elem_size] * task.rank_dim
        out = torch.empty(sum(out_sizes), dtype=torch.uint8, device=src.device)
        target = None
    else:
        recv = dom.to_pg(recv)
        out_sizes = recv.sizes.tolist()
        packed = _packed(recv)
        skip = int(np.flatnonzero(dom.order == task.rank)[0]) if task.skip_local else None
        data = task.memory("recv")
        direct = packed is not None and skip is None
        out = (
            data[packed[0] : packed[1]]
            if direct
            else torch.empty(sum(out_sizes), dtype=torch.uint8, device=data.device)
        )
        target = None if direct else (data, recv, skip)
    dist.all_to_all_single(out, src, out_sizes, send.sizes.tolist(), group=dom.pg)
    if target is not None:
        scatter_bytes(target[0], target[1], out, target[2])
    return out if recv is None else None


def _all_to_all(task: Task, r: int, dom: Domain) -> None:
    _exchange(task, r, dom, layout.round_blocks(task, "recv", r))


def _all_reduce(task: Task, r: int, dom: Domain) -> None:
    send = layout.round_blocks(task, "send", r)
    nbytes = int(send.sizes[0])
    if nbytes == 0:
        return
    op = HcclReduceOp(task.reduce_op)
    src = gather_bytes(task.memory("send"), send)
    if dom.reduction.exact:
        if nbytes >= EXACT_SPLIT_MIN_BYTES:
            _exact_all_reduce_split(task, r, src, op, dom)
            return
        gathered = torch.empty(nbytes * task.rank_dim, dtype=torch.uint8, device=src.device)
        _all_gather_single(gathered, src, group=dom.pg)
        stacked = dom.to_domain(task.typed(gathered).view(task.rank_dim, -1))
        write_result(task, r, reduce_ranks(stacked, op))
        return
    values = task.typed(src)
    nan = _nan_mask(values, op, dom)
    if nan is not None:
        dist.all_reduce(nan, dist.ReduceOp.MAX, group=dom.pg)
    wide = dom.reduction.widen.get(values.dtype, values.dtype)
    target = _receive_view(task, r, wide, values.numel()) if wide == values.dtype else None
    if target is not None:
        if target.data_ptr() != values.data_ptr():
            shared = first_shared(task, r, exempt_in_place=False) is not None
            target.copy_(values.clone() if shared else values)
        dist.all_reduce(target, _REDUCE_OPS[op], group=dom.pg)
        _fill_nan(target, nan)
        return
    buf = values.to(wide, copy=True)
    dist.all_reduce(buf, _REDUCE_OPS[op], group=dom.pg)
    _fill_nan(buf, nan)
    write_result(task, r, buf.to(values.dtype))


def split_chunks(task: Task) -> Blocks:
    """The byte ranges of an exact AllReduce split's ``rankDim`` element chunks in a rank's block
    (:func:`~hccl_py.core.layout.even_chunks`: domain rank ``k`` reduces chunk ``k``)."""
    return layout.even_chunks(task.count, task.rank_dim, task.elem_size)


def _exact_all_reduce_split(
    task: Task, r: int, src: torch.Tensor, op: HcclReduceOp, dom: Domain
) -> None:
    """Exact AllReduce of ``src`` (this rank's input bytes) as a reduce-scatter and an all-gather.

    Domain rank ``k`` owns chunk ``k`` (:func:`split_chunks`): an all-to-all brings it every
    rank's copy, which it reduces in rank order with the emulator's rule (each element's result
    depends on that element alone: bit-identical to reducing whole inputs); an all-gather then
    hands every rank every reduced chunk (:func:`gather_chunks`). Each rank moves about
    2 (n-1)/n of its input, as a native ring does, instead of gathering all n inputs. Memory:
    with equal chunks in rank order the all-gather writes straight into the receive block, and
    the all-to-all too when that block shares no byte with the send block; what is left is the
    reduced chunk (1/n of the block). Otherwise the rows, and the padded gather, are temporaries.
    """
    n, chunks = task.rank_dim, split_chunks(task)
    send, mine = dom.to_pg(chunks), int(chunks.sizes[task.rank])
    rows_here = _in_place(task, dom) and first_shared(task, r, exempt_in_place=False) is None
    received = (
        _all_reduce_target(task, r)
        if rows_here
        else torch.empty(mine * n, dtype=torch.uint8, device=src.device)
    )
    dist.all_to_all_single(
        received, gather_bytes(src, send), [mine] * n, send.sizes.tolist(), group=dom.pg
    )
    stacked = dom.to_domain(task.typed(received).view(n, mine // task.elem_size))
    reduced = reduce_ranks(stacked, op).view(torch.uint8).reshape(-1)
    del received, stacked  # the rows are reduced: free them before the all-gather
    gather_chunks(task, r, reduced, dom)


def _in_place(task: Task, dom: Domain) -> bool:
    """Whether the split's chunks are equal and in rank order (the receive block takes them)."""
    return task.count % task.rank_dim == 0 and dom.identity


def _all_reduce_target(task: Task, r: int) -> torch.Tensor:
    start = int(layout.round_blocks(task, "recv", r).starts[0])
    return task.memory("recv")[start : start + task.count * task.elem_size]


def gather_chunks(task: Task, r: int, reduced: torch.Tensor, dom: Domain) -> None:
    """The end of an exact AllReduce split: this rank's ``reduced`` chunk (bytes) and every other
    rank's, all-gathered into round ``r``'s receive block."""
    n, size, target = task.rank_dim, task.elem_size, _all_reduce_target(task, r)
    if _in_place(task, dom):  # the send bytes were all read: the block may take the result
        _all_gather_single(target, reduced, group=dom.pg)
        return
    per = int(split_chunks(task).sizes[0])  # the first chunk is a whole one
    padded = torch.zeros(per, dtype=torch.uint8, device=reduced.device)
    padded[: reduced.numel()].copy_(reduced)
    gathered = torch.empty(per * n, dtype=torch.uint8, device=reduced.device)
    _all_gather_single(gathered, padded, group=dom.pg)
    target.copy_(dom.to_domain(gathered.view(n, per)).reshape(-1)[: task.count * size])


def _receive_view(task: Task, r: int, dtype: torch.dtype, count: int) -> torch.Tensor | None:
    """The round's receive block as ``count`` elements of ``dtype``, or None when misaligned."""
    start = int(layout.round_blocks(task, "recv", r).starts[0])
    raw = task.memory("recv")[start : start + count * dtype.itemsize]
    try:
        return raw.view(dtype)
    except RuntimeError:
        return None


def _private_receive_view(task: Task, r: int, dtype: torch.dtype) -> torch.Tensor | None:
    """The round's receive block as ``task.count`` elements, when it shares no byte with the
    round's send blocks (a collective may write it while it reads them), else None."""
    if first_shared(task, r, exempt_in_place=False) is not None:
        return None
    return _receive_view(task, r, dtype, task.count)


def _reduce_scatter(task: Task, r: int, dom: Domain) -> None:
    if task.count == 0:
        return
    op = HcclReduceOp(task.reduce_op)
    if dom.reduction.exact:
        received = _exchange(task, r, dom, None)
        stacked = dom.to_domain(task.typed(received).view(task.rank_dim, -1))
        # the send bytes are all read (exchanged): the receive block may take the result
        target = _receive_view(task, r, stacked.dtype, task.count)
        reduced = reduce_ranks(stacked, op, out=target)
        if target is None:
            write_result(task, r, reduced)
        return
    send = dom.to_pg(layout.round_blocks(task, "send", r))
    values = task.typed(gather_bytes(task.memory("send"), send))
    wide = dom.reduction.widen.get(values.dtype, values.dtype)
    src = values.to(wide, copy=wide != values.dtype)
    target = _private_receive_view(task, r, wide) if wide == values.dtype else None
    out = torch.empty(task.count, dtype=wide, device=src.device) if target is None else target
    _reduce_scatter_single(out, src, _REDUCE_OPS[op], group=dom.pg)
    nan = _nan_mask(values, op, dom)
    if nan is not None:
        mine = torch.empty(task.count, dtype=nan.dtype, device=nan.device)
        _reduce_scatter_single(mine, nan, dist.ReduceOp.MAX, group=dom.pg)
        _fill_nan(out, mine)
    if target is None:
        write_result(task, r, out.to(values.dtype))


#: The round function of every op this executor runs (tests check it covers the op table).
ROUNDS: dict[HcclCMDType, Callable[[Task, int, Domain], None]] = {
    _C.HCCL_CMD_ALLREDUCE: _all_reduce,
    _C.HCCL_CMD_ALLGATHER: _all_gather,
    _C.HCCL_CMD_REDUCE_SCATTER: _reduce_scatter,
    _C.HCCL_CMD_ALLTOALL: _all_to_all,
    _C.HCCL_CMD_ALLTOALLV: _all_to_all,
}


def run_round(task: Task, round_idx: int, dom: Domain) -> None:
    """Execute round ``round_idx`` of this rank's ``task`` as collectives on ``dom.pg``."""
    ROUNDS[task.op](task, round_idx, dom)
