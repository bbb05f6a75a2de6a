"""Paddle's mixture-of-experts exchange: ``global_scatter`` and ``global_gather``.

Each of the ``N`` ranks (cards) owns ``n_expert`` experts; count tensors are
int64 with ``N * n_expert`` entries, index ``i`` meaning expert ``i % n_expert``
of card ``i // n_expert``.

global_scatter runs one AlltoAllV: card ``j`` gets the rows of ``x`` for all
its experts as one block (``x`` is grouped card-major already); the received
card-major rows are then permuted locally (one vectorised ``index_select``)
into the expert-major output. global_gather is the inverse: a local
permutation of ``x`` from expert-major to card-major, then one AlltoAllV
straight into the output. Small calls (up to 4 KiB with the counts) need no
AlltoAllV: the rows ride in the argument exchange (:mod:`._carry`). Both are differentiable; the gradient of one is the
other with the same counts.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from ..core.group import Group
from ..kernel.context import current_rank_context, set_rank_context
from ._carry import ALL_TO_ALL, agree_carrying
from ._common import (
    check_bool,
    check_tensor,
    exclusive_cumsum,
    hccl_dtype,
    listed,
    mismatch,
    require_same,
    resolve_group,
    rows,
    where,
    who,
)
from .collectives import exchange_rows

_SCATTER = "global_scatter"
_GATHER = "global_gather"


def _count_array(op: str, name: str, value: Any) -> np.ndarray:
    """A count tensor's values; TypeError unless it is an int64 tensor."""
    check_tensor(op, name, value)
    if value.dtype != torch.int64:
        raise TypeError(f"{where(op)}: {name} must be an int64 tensor, not {value.dtype}")
    return value.detach().cpu().reshape(-1).numpy().astype(np.int64)


def _count_problem(
    op: str, x: torch.Tensor, local: torch.Tensor, glob: torch.Tensor, n: int
) -> str | None:
    """Why the counts or ``x`` are unusable on this rank, or None."""
    if local.dim() != 1 or glob.dim() != 1:
        return (
            "local_count and global_count must be 1-D, got shapes "
            f"{list(local.shape)} and {list(glob.shape)}"
        )
    if len(local) != len(glob) or len(local) == 0 or len(local) % n:
        return (
            f"local_count and global_count must both have n_expert * world_size entries "
            f"(a positive multiple of {n}); got {len(local)} and {len(glob)}"
        )
    lc, gc = local.tolist(), glob.tolist()
    if min(lc) < 0 or min(gc) < 0:
        return f"counts must be non-negative: local_count {listed(lc)}, global_count {listed(gc)}"
    if x.dim() == 0:
        return "x must have at least one dimension"
    name, sizes = ("local_count", lc) if op == _SCATTER else ("global_count", gc)
    if x.shape[0] != sum(sizes):
        return f"x has {x.shape[0]} rows, but {name} {listed(sizes)} sums to {sum(sizes)}"
    return None


def _check_pairs(group: Group, op: str, records: list[dict[str, Any]]) -> None:
    """Rank i's local_count for (card j, expert e) must equal rank j's global_count for (i, e)."""
    n, e = group.size, records[0]["n_expert"]
    local = np.array([r["local"] for r in records], dtype=np.int64).reshape(n, n, e)
    glob = np.array([r["global"] for r in records], dtype=np.int64).reshape(n, n, e)
    bad = np.argwhere(local != glob.transpose(1, 0, 2))
    if len(bad) == 0:
        return
    lines = []
    for i, j, k in bad[:4].tolist():
        a, b = who(group, i), who(group, j)
        lc = f"local_count[{j * e + k}] = {local[i, j, k]} on {a}"
        gc = f"global_count[{i * e + k}] = {glob[j, i, k]} on {b}"
        if op == _SCATTER:
            sent = f"{a} sends {rows(local[i, j, k])} to expert {k} of {b} ({lc})"
            lines.append(f"{sent}, but {b} expects {glob[j, i, k]} ({gc})")
        else:
            sent = f"{b} returns {rows(glob[j, i, k])} of its expert {k} to {a} ({gc})"
            lines.append(f"{sent}, but {a} expects {local[i, j, k]} ({lc})")
    more = f"; and {len(bad) - 4} more" if len(bad) > 4 else ""
    raise mismatch(op, "counts disagree between sender and receiver: " + "; ".join(lines) + more)


def _expert_major_index(counts: np.ndarray) -> np.ndarray:
    """Row index that turns card-major blocks (sizes ``counts[c, e]``) into expert-major order."""
    starts = exclusive_cumsum(counts.reshape(-1)).reshape(counts.shape)
    return _block_index(starts.T.reshape(-1), counts.T.reshape(-1))


def _card_major_index(counts: np.ndarray) -> np.ndarray:
    """Row index that turns expert-major blocks (sizes ``counts[c, e]``) into card-major order."""
    starts = exclusive_cumsum(counts.T.reshape(-1)).reshape(counts.T.shape).T
    return _block_index(starts.reshape(-1), counts.reshape(-1))


def _block_index(starts: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """Indices of the rows ``[starts[k], starts[k] + lens[k])``, block after block."""
    return np.repeat(starts - exclusive_cumsum(lens), lens) + np.arange(int(lens.sum()))


def _exchange(
    op: str, x: torch.Tensor, local_count: Any, global_count: Any, group: Any
) -> torch.Tensor:
    """Validate, agree, and move the rows of ``x`` (global_scatter or global_gather)."""
    check_tensor(op, "x", x)
    local = _count_array(op, "local_count", local_count)
    glob = _count_array(op, "global_count", global_count)
    grp = resolve_group(op, group)
    data_type = hccl_dtype(op, x)
    n = grp.size
    problem = _count_problem(op, x, local_count, global_count, n)
    e = len(local) // n if problem is None else 0
    src = x.detach().contiguous() if problem is None else None
    if op == _GATHER and e > 1:  # card-major, as it is sent
        index = _card_major_index(glob.reshape(n, e))
        src = src.index_select(0, torch.from_numpy(index).to(x.device))
    row_bytes = math.prod(x.shape[1:]) * x.element_size()
    pieces = None
    if problem is None:  # this rank's card-major rows for each card
        pieces = ((local if op == _SCATTER else glob).reshape(n, e).sum(1) * row_bytes).tolist()
    records, carried = agree_carrying(
        grp,
        op,
        problem,
        src,
        ALL_TO_ALL,
        None,  # the output is allocated here, after the agreement
        pieces,
        dtype=str(x.dtype),
        row=[int(s) for s in x.shape[1:]],
        n_expert=len(local) // n,
        local=local.tolist(),
        **{"global": glob.tolist()},
    )
    require_same(
        grp,
        op,
        records,
        ("dtype", "x's dtype"),
        ("row", "x's shape after dim 0"),
        ("n_expert", "n_expert"),
    )
    _check_pairs(grp, op, records)
    shape = (n, e)
    local, glob = local.reshape(shape), glob.reshape(shape)
    out_rows = int(glob.sum()) if op == _SCATTER else int(local.sum())
    out = x.new_empty((out_rows, *x.shape[1:]))
    permute = op == _SCATTER and shape[1] > 1
    dst = torch.empty_like(out) if permute else out
    send, recv = (local, glob) if op == _SCATTER else (glob, local)
    if carried is None:
        exchange_rows(op, grp, src, dst, send.sum(1), recv.sum(1), data_type).complete()
    else:  # every rank's card-major rows rode in the exchange (its send counts, per card)
        key = "local" if op == _SCATTER else "global"
        sends = [np.array(r[key]).reshape(shape).sum(1).tolist() for r in records]
        me = grp.rank_of(current_rank_context().rank)
        carried.write(dst, carried.pieces_for(me, sends, row_bytes))
    if permute:
        torch.index_select(
            dst, 0, torch.from_numpy(_expert_major_index(glob)).to(x.device), out=out
        )
    return out


class _MoeExchange(torch.autograd.Function):
    """global_scatter / global_gather with the other one as its backward."""

    @staticmethod
    def forward(
        ctx: Any, x: torch.Tensor, op: str, local: Any, glob: Any, group: Any
    ) -> torch.Tensor:
        out = _exchange(op, x, local, glob, group)
        ctx.args = (op, local.detach().clone(), glob.detach().clone(), group)
        ctx.rank_ctx = current_rank_context()
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple:
        op, local, glob, group = ctx.args
        inverse = _GATHER if op == _SCATTER else _SCATTER
        previous = current_rank_context(required=False)
        set_rank_context(ctx.rank_ctx)
        try:
            return _MoeExchange.apply(grad, inverse, local, glob, group), None, None, None, None
        finally:
            set_rank_context(previous)


def global_scatter(
    x: torch.Tensor,
    local_count: torch.Tensor,
    global_count: torch.Tensor,
    group: Any = None,
    use_calc_stream: bool = True,
) -> torch.Tensor:
    """Send the rows of ``x`` to the experts of every card; return the rows this card's experts got.

    ``x`` is grouped card-major, expert-minor (sizes ``local_count``); the
    result is grouped expert-major, then by source card (sizes
    ``global_count``). ``use_calc_stream`` is accepted for Paddle
    compatibility; the op is always complete on return.
    """
    check_bool(_SCATTER, "use_calc_stream", use_calc_stream)
    check_tensor(_SCATTER, "x", x)
    return _MoeExchange.apply(x, _SCATTER, local_count, global_count, group)


def global_gather(
    x: torch.Tensor,
    local_count: torch.Tensor,
    global_count: torch.Tensor,
    group: Any = None,
    use_calc_stream: bool = True,
) -> torch.Tensor:
    """The inverse of :func:`global_scatter`: send every expert's rows back to their cards.

    ``x`` is laid out like global_scatter's output (sizes ``global_count``);
    the result like its input (sizes ``local_count``).
    """
    check_bool(_GATHER, "use_calc_stream", use_calc_stream)
    check_tensor(_GATHER, "x", x)
    return _MoeExchange.apply(x, _GATHER, local_count, global_count, group)
