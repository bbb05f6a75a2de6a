"""Fine-grained AlltoAllV (Atlas A3): tiling ``stepSize > 0``, Commit/Wait by steps, ``Iterate``.

An AlltoAllV whose Mc2CcTiling has ``stepSize > 0`` counts ``rankDim`` steps
per round (one per peer): ``AlltoAllV[True]`` commits ``repeat * rankDim``
steps, each Commit and each Wait advances by ``stepSize`` steps, and
``Iterate`` hands out the peers whose data is in place, in the pairwise order
of the official client. The emulator runs a round once all of its steps are
committed, so a Wait of a step waits for the whole round that contains it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..core.constants import HCCL_FAILED, HCCL_SUCCESS, HcclCMDType
from ..core.template import template
from .log import logged
from .onesided import OneSidedCalls
from .state import Handle

_A2AV = HcclCMDType.HCCL_CMD_ALLTOALLV


def slice_order(rank: int, dim: int, first: int, n: int, sync: bool) -> np.ndarray:
    """Peers of slices ``first .. first + n - 1``: rank, rank-1, ... (sync) or rank, rank+1, ..."""
    steps = np.arange(first, first + n, dtype=np.int64) % dim
    return (rank - steps) % dim if sync else (rank + steps) % dim


class FineGrainedCalls(OneSidedCalls):
    """Step counting of fine-grained AlltoAllV and the ``Iterate`` call."""

    def _step_size(self, op: HcclCMDType) -> int:
        """The tiling's stepSize for a fine-grained AlltoAllV on a platform with Iterate, else 0."""
        if op != _A2AV or op not in self._cc or self.state is None:
            return 0
        if not self.state.rank_ctx.config.platform.has_iterate:
            return 0
        return int(self._cc[op].stepSize)

    def _commit_steps(self, info: Handle) -> int:
        """Count one Commit of a fine-grained handle; the number of rounds it completes."""
        total = info.repeat * self.state.rank_dim
        info.steps_committed = min(total, info.steps_committed + info.step_size)
        return info.steps_committed // self.state.rank_dim - info.commits

    def _commits_per_prepare(self, info: Handle) -> int:
        """How many Commits ``[True]`` stands for: repeat, or repeat*rankDim steps in stepSize."""
        if not info.step_size:
            return info.repeat
        return -(-info.repeat * self.state.rank_dim // info.step_size)

    def _fine_wait(self, info: Handle, h: int) -> int:
        """Wait of a fine-grained handle: ``stepSize`` more steps must be finished."""
        if info.steps_waited >= info.steps_committed:
            return self._carry_on(
                "wait-not-committed",
                f"Wait returns -1 at once: this core waited {info.steps_waited} and committed "
                f"{info.steps_committed} steps of handle {h}",
                ret=HCCL_FAILED,
                warn=self.state.sender is self,
                handle=h,
                op="AlltoAllV",
            )
        core = self._core()
        if core.kind != info.kind:
            return self._wrong_core(core, info, h, "AlltoAllV")
        info.steps_waited += info.step_size
        round_idx = min(info.repeat, -(-info.steps_waited // self.state.rank_dim)) - 1
        self.state.record_wait(core, h, round_idx)
        task = info.task or self.state.task(h, core)
        self.server.wait(task, round_idx)
        self.state.observe_turn(core, h, round_idx)
        info.waits = round_idx + 1
        return self._ok(HCCL_SUCCESS)

    @template("sync")
    @logged
    def Iterate(self, handleId: int, seqSlices: Any, seqSliceLen: int, sync: bool = True) -> int:
        """Fill ``seqSlices`` with the next ``seqSliceLen`` peers whose data is in place.

        Returns ``seqSliceLen``, 0 once every step of every round was handed out,
        or -1 (null or empty array, not a fine-grained handle, not initialised).
        With ``sync`` (the default) it Waits every ``stepSize`` slices itself.
        """
        if self.state is None or self._mode not in ("InitV2", "Init"):
            return self._fail("Iterate: initialisation has not been done properly")
        platform = self.state.rank_ctx.config.platform
        if not platform.has_iterate:
            return self._fail(f"Iterate is not supported on {platform.name}")
        n = seqSliceLen if isinstance(seqSliceLen, (int, np.integer)) else -1
        if seqSlices is None or isinstance(n, bool) or n <= 0 or len(seqSlices) < n:
            return self._fail(
                "Iterate: seqSlices must be an array of at least seqSliceLen > 0 entries",
                actual=seqSliceLen,
            )
        info = self._handle(handleId)
        if info is None or not info.step_size:
            return self._fail(
                f"Iterate: handle {handleId} is not a fine-grained AlltoAllV (tiling stepSize > 0)",
                handle=handleId,
            )
        dim, rank = self.state.rank_dim, self.state.rank
        if info.slice >= dim * info.repeat:
            return self._ok(0)
        n = int(n)
        if sync:
            marks = np.arange(info.slice, info.slice + n) + 1
            for _ in range(int(np.count_nonzero(marks % info.step_size == 0))):
                self.Wait(handleId)
        order = slice_order(rank, dim, info.slice, n, sync)
        if isinstance(seqSlices, torch.Tensor):
            seqSlices[:n] = torch.from_numpy(order).to(seqSlices.dtype)
        else:
            seqSlices[:n] = order.tolist() if isinstance(seqSlices, list) else order
        info.slice += n
        return self._ok(n)
