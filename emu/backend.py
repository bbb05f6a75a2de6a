"""Runs the ranks of an emulated world as threads of this process."""

from __future__ import annotations

import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

import torch

from hccl_py.config import Config
from hccl_py.context import RankContext, set_rank_context
from hccl_py.errors import HcclTimeoutError, WorldError
from hccl_py.server import Backend

from .world import EmuWorld

#: Seconds the other ranks get to stop after one rank failed, before they are reported as hung.
GRACE_SECONDS = 5.0


class EmuBackend(Backend):
    """N ranks in one process, each a thread with its own memory and rank context."""

    name = "emu"

    def run(
        self, fn: Callable[..., Any], args: tuple, world_size: int | None, config: Config
    ) -> list[Any]:
        n = 4 if world_size is None else int(world_size)
        if n < 1:
            raise ValueError(f"world_size must be >= 1, not {world_size}")
        world = EmuWorld(n, config)
        results: list[Any] = [None] * n
        failures: dict[int, BaseException] = {}

        per_rank = [own_copy(args) for _ in range(n)]

        def body(rank: int) -> None:
            set_rank_context(RankContext(rank, n, config, world, world.blocker))
            try:
                results[rank] = fn(*per_rank[rank])
            except BaseException as exc:  # noqa: BLE001 - collected and re-raised as WorldError
                exc.hccl_rank = rank
                exc.hccl_traceback = traceback.format_exc()
                failures[rank] = exc
                world.blocker.fail(exc)
            finally:
                set_rank_context(None)
                world.rank_returned(rank)
                world.blocker.leave()

        threads = [
            threading.Thread(target=body, args=(r,), name=f"rank{r}", daemon=True) for r in range(n)
        ]
        world.blocker.enter(n)
        for t in threads:
            t.start()
        _join(threads, world, failures)
        if failures:
            raise WorldError(failures, n)
        return results


def own_copy(value: Any, memo: dict[int, torch.Tensor] | None = None) -> Any:
    """One rank's copy of ``hp.run``'s ``args``: every tensor cloned, as a gloo rank unpickles its own.

    Tensors inside tuples, lists and dicts are cloned (the same tensor twice
    stays one tensor; a container without tensors is not copied); other objects are shared, as threads of one process
    share them (an Event that coordinates ranks keeps working). A tensor that
    two ranks still share is reported when one of them writes it
    (:mod:`hccl_py.sanitizer.sharing`).
    """
    memo = {} if memo is None else memo
    if isinstance(value, torch.Tensor):
        if id(value) not in memo:
            memo[id(value)] = value.clone()
        return memo[id(value)]
    if type(value) in (list, tuple):
        items = [own_copy(v, memo) for v in value]
        same = all(a is b for a, b in zip(items, value, strict=True))
        return value if same else type(value)(items)
    if type(value) is dict:
        items = {k: own_copy(v, memo) for k, v in value.items()}
        return value if all(items[k] is v for k, v in value.items()) else items
    return value


def _join(
    threads: list[threading.Thread], world: EmuWorld, failures: dict[int, BaseException]
) -> None:
    """Wait for every rank; once one failed, give the others a grace period, then report them."""
    deadline = None
    for rank, t in enumerate(threads):
        while t.is_alive():
            if deadline is None and world.blocker.error is not None:
                deadline = time.monotonic() + GRACE_SECONDS
            t.join(0.05 if deadline is None else max(0.0, deadline - time.monotonic()))
            if deadline is not None and time.monotonic() >= deadline and t.is_alive():
                failures.setdefault(
                    rank,
                    HcclTimeoutError(
                        f"rank {rank} did not stop within {GRACE_SECONDS:g} s after another rank failed "
                        "(it is not inside an hccl_py call)",
                        rank=rank,
                    ),
                )
                break
