"""Fine-grained AlltoAllV (Atlas A3): tiling ``stepSize > 0``, Commit/Wait by steps, ``Iterate``.

An AlltoAllV whose Mc2CcTiling has ``stepSize > 0`` counts ``rankDim`` steps
per round (one per peer): ``AlltoAllV[True]`` commits ``repeat * rankDim``
steps, each Commit and each Wait advances by ``stepSize`` steps, and
``Iterate`` hands out the peers whose data is in place, in the pairwise order
of the official client. The server runs each step once every rank committed it
(its task's rounds are the steps, ``Task.steps``): step k of a round moves
each rank's block for peer rank + k.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from ..core.config import c_int
from ..core.constants import HCCL_FAILED, HCCL_SUCCESS, HcclCMDType
from ..core.gm import what_is
from .binding import Binding, unknown_handle_text
from .failures import Failures
from .handle import Handle
from .sender import calling_core

_A2AV = HcclCMDType.HCCL_CMD_ALLTOALLV


def slice_order(rank: int, dim: int, first: int, n: int, sync: bool) -> np.ndarray:
    """Peers of slices ``first .. first + n - 1``: rank, rank-1, ... (sync) or rank, rank+1, ..."""
    steps = np.arange(first, first + n, dtype=np.int64) % dim
    return (rank - steps) % dim if sync else (rank + steps) % dim


class FineGrainedSteps:
    """Step counting of fine-grained AlltoAllV handles and the ``Iterate`` call."""

    def __init__(self, binding: Binding, failures: Failures) -> None:
        self._binding = binding
        self._failures = failures

    def step_size(self, op: HcclCMDType) -> int:
        """The tiling's stepSize for a fine-grained AlltoAllV on a platform with Iterate, else 0."""
        b = self._binding
        if op != _A2AV or op not in b.cc or b.state is None:
            return 0
        if not b.state.rank_ctx.config.platform.has_iterate:
            return 0
        return int(b.cc[op].stepSize)

    def commit_steps(self, info: Handle) -> range:
        """Count one Commit of a fine-grained handle; the steps it commits."""
        dim = self._binding.state.rank_dim
        first = info.steps_committed
        info.steps_committed = min(info.repeat * dim, first + info.step_size)
        info.commits = info.steps_committed // dim
        return range(first, info.steps_committed)

    def commits_per_prepare(self, info: Handle) -> int:
        """How many Commits ``[True]`` stands for: repeat, or repeat*rankDim steps in stepSize."""
        if not info.step_size:
            return info.repeat
        return -(-info.repeat * self._binding.state.rank_dim // info.step_size)

    def wait(self, info: Handle, h: int) -> int:
        """Wait of a fine-grained handle: ``stepSize`` more steps must be finished."""
        b = self._binding
        state = b.state
        if info.steps_waited >= info.steps_committed:
            return self._failures.breach(
                "wait-not-committed" if state.sender is b else "wait-not-committed-idle",
                f"Wait returns -1 at once: this core waited {info.steps_waited} and committed "
                f"{info.steps_committed} steps of handle {h}",
                HCCL_FAILED,
                handle=h,
                op="AlltoAllV",
            )
        core = calling_core()
        if core.kind != info.kind:
            return self._failures.wrong_core(core, info, h, "AlltoAllV")
        first, total = info.steps_waited, info.repeat * state.rank_dim
        if first + info.step_size > total:
            return self._failures.breach(
                "step-wait-beyond",
                f"Wait of steps [{first}, {first + info.step_size}) of handle {h}, which has "
                f"{total} steps ({info.repeat} x {state.rank_dim} peers): the official client "
                f"waits until {first + info.step_size} steps finished (hccl_aicpu_impl.h, Wait: "
                "waitCnt += stepSize), one no Commit can start, so it hangs; choose a stepSize "
                "that divides repeat x rankDim (Iterate[True] Waits at every stepSize-th slice "
                "of a call, also at slices past the last step: hccl_aicpu.h, Iterate)",
                HCCL_FAILED,
                handle=h,
                op="AlltoAllV",
                round=(first + info.step_size - 1) // state.rank_dim,  # past the last round
                expected=f"<= {total} steps",
                actual=first + info.step_size,
            )
        info.steps_waited = first + info.step_size
        last = info.steps_waited - 1
        state.record_wait(core, h, last)
        task = info.task or state.task(h, core)
        for step in range(first, info.steps_waited):
            b.server.wait(task, step)
        state.observe_turn(core, h, last)
        info.waits = -(-info.steps_waited // state.rank_dim)
        return self._failures.ok(HCCL_SUCCESS)

    def iterate(
        self,
        handleId: Any,
        seqSlices: Any,
        seqSliceLen: Any,
        sync: bool,
        wait: Callable[[int], int],
    ) -> int:
        """Iterate: fill ``seqSlices``; with ``sync``, ``wait`` (the object's Wait) every stepSize."""
        b, breach = self._binding, self._failures.breach
        if b.state is None or b.mode not in ("InitV2", "Init"):
            return breach("not-initialised", "Iterate: initialisation has not been done properly")
        platform = b.state.rank_ctx.config.platform
        if not platform.has_iterate:
            return breach("unsupported", f"Iterate is not supported on {platform.name}")
        n = c_int(seqSliceLen)
        if n is None or n <= 0:
            return breach(
                "bad-argument",
                "Iterate: seqSliceLen must be an int > 0",
                handle=handleId,
                actual=what_is(seqSliceLen),
            )
        writable = (  # a 1-d array of numbers: one peer per entry, no bools, no autograd leaf
            isinstance(seqSlices, list)
            or (
                isinstance(seqSlices, torch.Tensor)
                and seqSlices.dim() == 1
                and seqSlices.dtype != torch.bool
                and not seqSlices.requires_grad
            )
            or (
                isinstance(seqSlices, np.ndarray)
                and seqSlices.ndim == 1
                and seqSlices.dtype != np.bool_
                and seqSlices.flags.writeable
            )
        )
        if not writable or len(seqSlices) < n:
            return breach(
                "bad-argument",
                "Iterate: seqSlices must be a list, a 1-d number tensor (not requiring grad) or a "
                f"writable 1-d numpy array of at least seqSliceLen ({n}) entries (the kernel's "
                "uint16_t array)",
                handle=handleId,
                actual=what_is(seqSlices),
            )
        info = b.handle(handleId)
        if info is None or not info.step_size or b.state.rank_dim < 2:
            return breach(
                "not-fine-grained",
                unknown_handle_text(
                    "Iterate",
                    handleId,
                    "is not a fine-grained AlltoAllV (tiling stepSize > 0) of a domain of 2 or "
                    "more ranks (the client's steps per repeat are rankDim)",
                ),
                handle=handleId,
            )
        dim, rank = b.state.rank_dim, b.state.rank
        if info.slice >= dim * info.repeat:
            return self._failures.ok(0)
        n = int(n)
        if sync:
            marks = np.arange(info.slice, info.slice + n) + 1
            for _ in range(int(np.count_nonzero(marks % info.step_size == 0))):
                wait(handleId)
        order = slice_order(rank, dim, info.slice, n, sync)
        if isinstance(seqSlices, torch.Tensor):
            seqSlices[:n] = torch.from_numpy(order).to(seqSlices.dtype)
        else:
            seqSlices[:n] = order.tolist() if isinstance(seqSlices, list) else order
        info.slice += n
        return self._failures.ok(n)
