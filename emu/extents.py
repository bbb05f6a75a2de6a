"""The bytes of its storage that a torch operation reads or writes in a tensor.

A view covers the bytes of its elements (:func:`byte_runs`). An indexing operation
touches fewer: ``t[idx]`` (``aten.index``), ``index_select``, ``gather``, ``take``,
``masked_select`` and ``embedding`` read only the elements their indices or
mask pick from their first argument; ``t[idx] = v`` (``index_put_``),
``scatter_`` and its reducing forms, ``index_copy_``, ``index_fill_``,
``index_add_``, ``masked_fill_`` and ``masked_scatter_`` write only those. The
race checks must see exactly those bytes, not the whole view the kernel holds:
a kernel that gathers the rows of a finished round from a buffer whose other
rows a pending round will write makes no race, and a report of one would be
false. Each selection is found by running the same indexing on the
coordinates (or row-major indices) of the view's elements.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from hccl_py.core.gm import strided_offsets

from .intervals import Runs
from .views import runs_of

_aten = torch.ops.aten

#: op -> the offsets it picks from an offsets tensor shaped like its first argument.
Pick = Callable[[torch.Tensor, tuple], torch.Tensor]


def _index(offsets: torch.Tensor, args: tuple) -> torch.Tensor:
    """``offsets[indices]``; a ``uint8`` mask as the ``bool`` mask it means, so that the
    replay does not repeat torch's deprecation warning, which the kernel's own call gave."""
    indices = [
        i.bool() if isinstance(i, torch.Tensor) and i.dtype == torch.uint8 else i for i in args[1]
    ]
    return _aten.index.Tensor(offsets, indices)


def _along(offsets: torch.Tensor, args: tuple) -> torch.Tensor:
    """``index_select(offsets, dim, index)`` as an index of that dimension, which reads only
    the picked elements of an expanded tensor (``index_select`` on dim > 0 reads them all)."""
    dim = args[1] % offsets.dim()
    return _aten.index.Tensor(offsets, [None] * dim + [args[2].reshape(-1)])


def _gathered(offsets: torch.Tensor, args: tuple) -> torch.Tensor:
    return _aten.gather.default(offsets, args[1], args[2])


def _masked(offsets: torch.Tensor, args: tuple) -> torch.Tensor:
    return _aten.masked_select.default(offsets, args[1])


_PICKS: dict[Any, Pick] = {
    # reads
    _aten.index: _index,
    _aten.index_select: _along,
    _aten.gather: _gathered,
    _aten.take: lambda offsets, args: _aten.take.default(offsets, args[1]),
    _aten.masked_select: _masked,
    _aten.embedding: lambda offsets, args: _aten.index.Tensor(offsets, [args[1].reshape(-1)]),
    # writes (in place: the functional forms copy all of their first argument)
    _aten.index_put_: _index,
    _aten._index_put_impl_: _index,
    _aten.scatter_: _gathered,
    _aten.scatter_add_: _gathered,
    _aten.scatter_reduce_: _gathered,
    _aten.index_copy_: _along,
    _aten.index_fill_: _along,
    _aten.index_add_: _along,
    _aten.masked_fill_: _masked,
    _aten.masked_scatter_: _masked,
}


def _base(tensor: torch.Tensor) -> int:
    """The byte offset of ``tensor``'s first element in its storage."""
    return tensor.data_ptr() - tensor.untyped_storage().data_ptr()


def picks(func: Any) -> bool:
    """Whether ``func`` is an indexing operation that may touch only some elements."""
    return func.overloadpacket in _PICKS


#: A pick of at least 1/DENSE of a view's elements is found with one index over the view.
DENSE = 8
#: A pick of whole rows by one integer index is found from the row numbers alone.
ROWS = True


def selected_offsets(
    func: Any, args: tuple, position: int, tensor: torch.Tensor
) -> np.ndarray | None:
    """The sorted byte offsets (each once) of the elements of argument ``position``
    (``tensor``) that ``func`` reads or writes when it picks some of them by index or
    mask; None when it uses all of them.

    A small pick runs the indexing once per dimension on a zero-copy view of the
    coordinates along it (``arange`` expanded to the tensor's shape), so it costs
    what the picked elements cost, not what the view spans; a pick of a large part
    of the view runs it once on the elements' row-major indices and marks them.
    Arguments the rule cannot apply to count as every element, as before this rule
    existed.
    """
    pick = _PICKS.get(func.overloadpacket)
    if pick is None or position != 0 or len(args) < 2 or tensor.dim() == 0:
        return None
    rows = _rows(pick, func, args, tensor) if ROWS else None
    if rows is not None:
        return _row_offsets(tensor, rows)
    shape, numel = tensor.shape, tensor.numel()
    try:
        constant = pick(torch.zeros((1,) * tensor.dim(), dtype=torch.int64).expand(shape), args)
        if constant.numel() * DENSE >= numel:
            flat = pick(torch.arange(numel, dtype=torch.int64).view(shape), args)
            hit = np.zeros(numel, dtype=bool)
            hit[flat.reshape(-1).numpy()] = True
            if tensor.is_contiguous():
                return _base(tensor) + np.flatnonzero(hit) * tensor.element_size()
            return np.unique(element_offsets(tensor)[hit])
        offsets = constant.reshape(-1)
        for dim, (size, stride) in enumerate(zip(shape, tensor.stride(), strict=True)):
            if size > 1 and stride:
                along = [1] * tensor.dim()
                along[dim] = size
                coordinate = torch.arange(size, dtype=torch.int64).view(along).expand(shape)
                offsets = offsets + pick(coordinate, args).reshape(-1) * stride
    except (RuntimeError, IndexError, TypeError, ValueError):
        return None
    return np.unique(_base(tensor) + offsets.numpy() * tensor.element_size())


def _rows(pick: Pick, func: Any, args: tuple, tensor: torch.Tensor) -> np.ndarray | None:
    """The row numbers (indices along dimension 0, in range) of a pick of whole rows by one
    integer index tensor (``t[idx]``, ``t[idx] = v``, ``index_select(t, 0, idx)``, an
    embedding's table); None for any other pick, or an index out of range (the operation
    itself raises)."""
    if pick is _index and len(args[1]) == 1:
        index = args[1][0]
    elif pick is _along and args[1] % tensor.dim() == 0:
        index = args[2]
    elif func.overloadpacket is _aten.embedding:
        index = args[1]
    else:
        return None
    if not isinstance(index, torch.Tensor) or index.dtype not in (torch.int64, torch.int32):
        return None
    rows, size = index.detach().reshape(-1).cpu().numpy(), tensor.shape[0]
    if rows.size and (int(rows.min()) < -size or int(rows.max()) >= size):
        return None
    return rows % size


def _row_offsets(tensor: torch.Tensor, rows: np.ndarray) -> np.ndarray:
    """The sorted byte offsets (each once) of the elements of ``tensor``'s rows ``rows``: what
    the general replay gives, at the cost of the picked rows alone."""
    if rows.size == 0:
        return np.zeros(0, dtype=np.int64)
    rows = np.unique(rows)  # a row picked twice is touched once; sorting rows, not elements
    row = strided_offsets(tensor.shape[1:], tensor.stride()[1:])
    offsets = (rows.astype(np.int64)[:, None] * tensor.stride(0) + row[None, :]).ravel()
    apart = bool(np.all(np.diff(row) > 0)) and tensor.stride(0) > row[-1] - row[0]
    if not apart:  # rows that interleave or share elements: sort every element's offset
        offsets = np.unique(offsets)
    return _base(tensor) + offsets * tensor.element_size()


def element_offsets(tensor: torch.Tensor) -> np.ndarray:
    """The window offset of every element of ``tensor``, in row-major order."""
    return _base(tensor) + strided_offsets(tensor.shape, tensor.stride()) * tensor.element_size()


def byte_runs(tensor: torch.Tensor) -> tuple[Runs, int]:
    """The contiguous byte ranges of its window that ``tensor`` covers, and their total size."""
    size = tensor.element_size()
    if tensor.is_contiguous():
        lo = _base(tensor)
        nbytes = tensor.numel() * size
        return [(lo, lo + nbytes)], nbytes
    starts = np.unique(element_offsets(tensor))
    return runs_of(starts, size), len(starts) * size


def touched(func: Any, args: tuple, position: int, tensor: torch.Tensor) -> tuple[Runs, int]:
    """The byte runs of ``tensor`` (argument ``position`` of ``func``) that the operation
    reads or writes, and their size: the elements an index or a mask picks
    (:func:`selected_offsets`), else all of them."""
    picked = selected_offsets(func, args, position, tensor)
    if picked is None:
        return byte_runs(tensor)
    if picked.size == 0:
        return [], 0
    return runs_of(picked, tensor.element_size()), picked.size * tensor.element_size()
