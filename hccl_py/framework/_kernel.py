"""The internal kernel behind every framework collective, and its asynchronous handle.

A framework op is a small single-core AIV kernel that uses hccl_py's own
:class:`~hccl_py.client.Hccl` client (InitV2 + SetCcTilingV2 with a tiling built
here, then Prepare/Commit/Wait/Finalize), so it runs through the rank's server
on whichever backend is active. Unlike :func:`hccl_py.launch`, the kernel's
core context lives in a :class:`FrameworkKernel` object rather than for the
duration of one call: :meth:`FrameworkKernel.start` prepares and commits on the
calling rank thread and returns, and :meth:`FrameworkKernel.complete` (called
by :meth:`Work.wait`) waits, finalizes and runs the launch's exit check then.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

import torch

from ..client import Hccl
from ..core.constants import HcclCMDType, HcclReduceOp
from ..core.errors import HcclUsageError
from ..core.gm import GmAddr, to_gm
from ..core.report import user_frame
from ..kernel.context import (
    Group,
    current_core_context,
    current_rank_context,
    set_core_context,
    set_rank_context,
)
from ..kernel.cores import GetHcclContext, LaunchState
from ..ops import OPS, op_name
from ..tiling import (
    GROUP_NAME_SIZE,
    Mc2CcTiling,
    Mc2CcTilingConfig,
    Mc2InitTiling,
    TilingData,
    offsetof,
)

_C = HcclCMDType


class _FrameworkTiling(TilingData):
    _fields_ = [("mc2InitTiling", Mc2InitTiling), ("ccTiling", Mc2CcTiling)]


def build_tiling(group: Group, op: HcclCMDType, reduce_op: HcclReduceOp) -> _FrameworkTiling:
    """The host-side tiling of one framework kernel: one cc tiling for ``op`` on ``group``.

    The client takes the domain from the kernel context, so a group name longer
    than the tiling's field holds (127 bytes and the NUL that GetTiling's strcpy_s
    copies) is clipped rather than refused. The client
    only reads a tiling, so calls of the same op on the same group share one.
    """
    return _tiling(group.name, HcclCMDType(op), HcclReduceOp(reduce_op))


@functools.lru_cache(maxsize=256)
def _tiling(group_name: str, op: HcclCMDType, reduce_op: HcclReduceOp) -> _FrameworkTiling:
    tiling = _FrameworkTiling()
    name = group_name.encode()[: GROUP_NAME_SIZE - 1].decode(errors="ignore")
    cfg = Mc2CcTilingConfig(name, op, OPS[op].alg_config, int(reduce_op))
    if cfg.GetTiling(tiling.mc2InitTiling) or cfg.GetTiling(tiling.ccTiling):
        raise HcclUsageError(f"cannot build the tiling of {op_name(op)}: {cfg.last_error}")
    return tiling


class _FrameworkHccl(Hccl):
    """An internal client of one framework collective; reports name the user's call."""

    def __init__(self, server_type: int, caller: str) -> None:
        super().__init__(server_type)
        self.framework = caller


class FrameworkKernel:
    """One framework op: a one-core AIV kernel launch on the calling rank, held open.

    ``caller`` is the user's collective (``all_reduce`` ...): reports name it
    beside the kernel op it runs. ``start`` prepares and commits tasks; ``complete`` waits for them,
    finalizes and checks, exactly as the end of :func:`hccl_py.launch` does.
    """

    def __init__(
        self,
        group: Group,
        op: HcclCMDType,
        caller: str,
        reduce_op: HcclReduceOp = HcclReduceOp.HCCL_REDUCE_SUM,
    ) -> None:
        self.rank_ctx = current_rank_context()
        self.caller = caller
        self.group = group
        self.state = LaunchState(self.rank_ctx, {0: group}, "aiv", 1)
        (self.core,) = self.state.cores
        self.handles: list[int] = []
        tiling = build_tiling(group, op, reduce_op)
        with self._on_core():
            self.hccl = _FrameworkHccl(self.rank_ctx.config.platform.server, caller)
            self._checked(self.hccl.InitV2, GetHcclContext(0), tiling)
            self._checked(self.hccl.SetCcTilingV2, offsetof(_FrameworkTiling, "ccTiling"))

    @contextlib.contextmanager
    def _on_core(self) -> Iterator[None]:
        """Run the body as this kernel's core (and rank, if called from another thread)."""
        previous_rank = current_rank_context(required=False)
        previous_core = current_core_context()
        set_rank_context(self.rank_ctx)
        set_core_context(self.core)
        try:
            yield
        finally:
            set_core_context(previous_core)
            set_rank_context(previous_rank)

    def _checked(self, method: Callable[..., Any], *args: Any) -> Any:
        """Call a client method; raise its recorded error even when strict mode is off."""
        result = method(*args)
        if self.hccl.last_error is not None:
            raise HcclUsageError(self.hccl.last_error)
        return result

    def gm(self, tensor: torch.Tensor, name: str) -> GmAddr:
        """The GM address of a contiguous tensor of this rank."""
        return to_gm(tensor, self.rank_ctx.rank, name)

    def start(self, method: str, *args: Any) -> int:
        """Prepare ``hccl.<method>[True](*args)`` (prepare and commit); return its handle."""
        with self._on_core():
            handle = self._checked(getattr(self.hccl, method)[True], *args)
        self.handles.append(handle)
        return handle

    def all_gather(
        self, src: torch.Tensor, dst: torch.Tensor, data_type: int, names: tuple[str, str]
    ) -> int:
        """Start an AllGather of all of ``src`` into ``dst``; ``names`` label the two buffers."""
        return self.start(
            "AllGather", self.gm(src, names[0]), self.gm(dst, names[1]), src.numel(), data_type
        )

    def wait(self, handle: int) -> None:
        """Wait for one committed handle (before preparing a task that depends on its result)."""
        with self._on_core():
            self._checked(self.hccl.Wait, handle)
        self.handles.remove(handle)

    def complete(self) -> None:
        """Wait for every outstanding handle, finalize, and run the launch's exit check."""
        with self._on_core():
            for handle in self.handles:
                self._checked(self.hccl.Wait, handle)
            self.handles.clear()
            self._checked(self.hccl.Finalize)
        self.state.finish()  # as at the end of hp.launch


class Work:
    """What an asynchronous framework collective returns: ``wait()`` completes it.

    ``finish`` (optional) runs after the data arrived: it copies staged results
    into the caller's tensors, so they change only on ``wait()``.
    """

    def __init__(
        self, kernel: FrameworkKernel | None, finish: Callable[[], None] | None = None
    ) -> None:
        self._kernel = kernel
        self._finish = finish
        self._done = kernel is None
        self._error: BaseException | None = None  # what the first wait() raised
        if kernel is not None:
            kernel.rank_ctx.open_work[id(self)] = f"{kernel.caller} started at {user_frame()}"

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the op finished and its outputs are in place; returns True.

        ``timeout`` is accepted for torch.distributed compatibility; the run's
        timeout (``hp.run(timeout=...)``) bounds every wait. A wait that raised was a wait all
        the same (the op is no collective that was never waited), and a later one raises the
        same error again.
        """
        if self._error is not None:
            raise self._error
        if not self._done:
            try:
                self._kernel.complete()
                if self._finish is not None:
                    self._finish()
            except BaseException as exc:
                self._error = exc
                raise
            finally:
                self._kernel.rank_ctx.open_work.pop(id(self), None)
            self._done = True
        return True

    def is_completed(self) -> bool:
        """Whether ``wait()`` has completed the op."""
        return self._done

    def __repr__(self) -> str:
        return f"<hccl_py Work {'completed' if self._done else 'pending'}>"


def run_async(
    kernel: FrameworkKernel, finish: Callable[[], None] | None, async_op: bool
) -> Work | None:
    """Return a pending handle, or complete the op now and return None (``async_op=False``)."""
    work = Work(kernel, finish)
    if async_op:
        return work
    work.wait()
    return None
