"""Reads of window and pending collective-buffer tensors that bypass aten.

``tolist()``, ``numpy()`` and ``np.asarray`` read a tensor's bytes without an aten
operator, so the core's :class:`~.watch.WindowWatch` (a dispatch mode) never sees
them. :class:`HostReads`, a torch function mode beside it under ``poison=True``, does.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch.overrides import TorchFunctionMode

from .extents import byte_runs
from .findings import raise_races

#: Tensor methods that read (or share) a tensor's data without an aten operator.
_HOST_READS = frozenset({torch.Tensor.tolist, torch.Tensor.numpy, torch.Tensor.__array__})


class HostReads(TorchFunctionMode):
    """The reads of window tensors that bypass aten (``tolist``, ``numpy``, ``np.asarray``).

    A ``numpy()`` view is checked when it is taken: what is read through it
    later is not seen. An early read gets a copy with 0xFF where data is missing.
    """

    def __init__(self, watch: Any) -> None:
        """``watch``: the core's :class:`~.watch.WindowWatch`, whose checks these reads go to."""
        super().__init__()
        self.watch = watch

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        kwargs = kwargs or {}
        watch = self.watch
        if func not in _HOST_READS or not (watch.pending or watch.windows) or watch.internal():
            return func(*args, **kwargs)
        tensor = args[0]
        storage = tensor.untyped_storage().data_ptr()
        if storage in watch.pending and tensor.numel():
            runs = byte_runs(tensor)[0]
            if func is torch.Tensor.tolist:
                raise_races(watch.buffers.access(watch.rank, storage, runs, False), watch.rank)
            else:  # a numpy view: what is read through it later is not seen
                watch.buffers.viewed(watch.rank, storage, runs)
        window = watch.windows.get(storage)
        if window is None or tensor.numel() == 0:
            return func(*args, **kwargs)
        with watch.races.lock:
            watch.aside = True  # the copy below is not a second read (that would be a poll)
            try:
                swap = watch.read(tensor, window)
                result = func(swap.get(id(tensor), tensor), *args[1:], **kwargs)
                if isinstance(result, np.ndarray) and not swap:
                    watch.escaped(tensor, window, result)
                return result
            finally:
                watch.aside = False
