"""Flag polls through tensors a kernel holds: ``while int(flag[0]) != 1`` on a window view.

One runner runs at a time, so a kernel that spins on a window flag must let the
writer run. :class:`FlagPolls` is a torch dispatch mode that every core of an
emulated kernel runs under: each aten operation that *reads* at most
:data:`~hccl_py.server.windows.POLL_BYTES` of a communication window, or of a GM tensor
argument of the running kernel (:class:`GmFlagArea`: a flag one core of the rank sets for
another, as MegaMoe's workspace counters), is reported to the scheduler as a poll of those
bytes. Reading the same unchanged bytes again
blocks the core until somebody changes them, and a flag that nobody can change
any more is part of an exact deadlock report (its address and value by dtype).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import torch

from hccl_py.core.gm import Allocation
from hccl_py.server.blocking import Blocker
from hccl_py.server.windows import (
    HELD_POLL_BYTES,
    POLL_BYTES,
    WindowAllocation,
    seen_lately,
    shown_start,
)

from .composite import copied
from .extents import byte_runs, picks, touched
from .intervals import Runs
from .modes import KernelMode
from .watch import _plan

#: Status-sized ranges a core keeps in mind (:attr:`FlagPolls.held_reads`): a loop that
#: polls up to this many status areas in turn through held views is seen polling.
HELD_RECENT = 8
#: Reads in a row of the same unchanged bytes of a GM argument before they count as a poll:
#: a kernel reads its inputs and workspace words again without polling them, and only a
#: loop that spins should become a scheduling point. Flags read in turn are no poll here: by
#: the operations alone such a loop cannot be told from one that re-reads a few config words
#: per turn beside work of its own (tried on 2026-11-29, and reverted for that).
GM_POLL_AFTER = 8


class GmFlagArea:
    """A GM tensor argument of a running kernel, polled like a window (same interface).

    Byte offsets are from the start of the tensor's storage, as for a window's.
    """

    domain = "a kernel argument"

    def __init__(self, alloc: Allocation) -> None:
        self.alloc = alloc
        self.name = alloc.name
        self.shift = alloc.memory[1] if alloc.memory else 0

    def host_bytes(self, start: int, stop: int) -> bytes:
        return self.alloc.host_bytes(start - self.shift, stop - self.shift)

    def int_base(self) -> int:
        return self.alloc.int_base() - self.shift


class FlagPolls(KernelMode):
    """Reports the flag and status reads of one core's held window tensors as polls."""

    def __init__(
        self,
        windows: dict[int, WindowAllocation | GmFlagArea],
        blocker: Blocker,
        rank: int,
        internal: Callable[[], bool],
        who: str = "",
    ) -> None:
        """``who``: the core as reports name it (``AIV core 1``), empty for a kernel of one."""
        super().__init__()
        self.windows = windows
        self.blocker = blocker
        self.rank = rank
        #: How the poll report names the polling core: ``rank 0 AIV core 1`` or ``rank 0``.
        self.poller = f"rank {rank} {who}" if who else f"rank {rank}"
        self.internal = internal
        #: The status-sized window ranges this core read lately, newest last: one read again
        #: is a poll (a loop that reads two status areas alternately polls both).
        self.held_reads: OrderedDict[tuple, None] = OrderedDict()
        #: The last GM argument bytes this core read, their value and how often in a row.
        self.gm_last: tuple = (None, b"", 0)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        kwargs = kwargs or {}
        result = func(*args, **kwargs)
        self.after(func, args, kwargs, result)
        return result

    def after(self, func: Any, args: tuple, kwargs: dict, result: Any, plan: Any = None) -> None:
        """Report the flag reads of an operation that ran (``result``) as polls: of the
        arguments ``plan`` names, else of those its schema says it uses (an operator made of
        others seen whole, :mod:`.composite`, also of those it copied)."""
        if not self.windows or self.internal():
            return
        if plan is None:
            plan = _plan(func) + copied(func, args, kwargs, result)
        for i, name, written in plan:
            value = args[i] if i < len(args) else kwargs.get(name)
            if written or not isinstance(value, torch.Tensor) or value.numel() == 0:
                continue
            window = self.windows.get(value.untyped_storage().data_ptr())
            if window is None:
                continue
            size = value.numel() * value.element_size()
            if isinstance(window, GmFlagArea):
                if size <= POLL_BYTES and self._spins(window, runs := byte_runs(value)[0]):
                    self._poll(window, value, runs)
            elif size <= POLL_BYTES:
                self._poll(window, value, byte_runs(value)[0])
            elif (  # flags[idx] of a larger view reads only what idx picks
                picks(func)
                and isinstance(result, torch.Tensor)
                and result.numel() * value.element_size() <= POLL_BYTES
            ):
                runs, nbytes = touched(func, args, i, value)
                if 0 < nbytes <= POLL_BYTES:
                    self._poll(window, value, runs)
            elif size <= HELD_POLL_BYTES and self._again(window, value):  # a status area
                self._poll(window, value, byte_runs(value)[0])

    def _spins(self, area: GmFlagArea, runs: Runs) -> bool:
        """Whether this core read these bytes of ``area``, unchanged, :data:`GM_POLL_AFTER`
        times in a row; notes the read."""
        key = (id(area), tuple(runs))
        seen = b"".join(area.host_bytes(a, b) for a, b in runs)
        last, value, count = self.gm_last
        count = count + 1 if (last, value) == (key, seen) else 1
        self.gm_last = (key, seen, count)
        return count >= GM_POLL_AFTER

    def _again(self, window: WindowAllocation | GmFlagArea, value: torch.Tensor) -> bool:
        """Whether this core read the range of ``value`` among its last :data:`HELD_RECENT`
        status-sized ranges; notes the read."""
        where = (id(window), value.storage_offset(), value.shape, value.stride())
        return seen_lately(self.held_reads, where, HELD_RECENT)

    def _poll(
        self, window: WindowAllocation | GmFlagArea, tensor: torch.Tensor, runs: Runs
    ) -> None:
        """One read of flag bytes (``runs`` of ``tensor``): the scheduler blocks a core that
        reads them unchanged again."""
        lo, hi = runs[0][0], runs[-1][1]

        def read() -> bytes:
            return b"".join(window.host_bytes(a, b) for a, b in runs)

        seen = read()
        dtype = tensor.dtype

        def what() -> str:
            return (
                f"{self.poller} polls bytes [{lo}, {hi}) of {window.name} (domain "
                f"{window.domain}), which keep the value {shown_start(seen, dtype)}: "
                "no rank writes them"
            )

        self.blocker.poll(("flag", window.int_base(), lo, hi), seen, what, read=read)
