"""The settings every rank of a gloo or HCCL run must share, compared when the run starts.

``HCCL_PY_REDUCE``, ``HCCL_PY_CHECK_TASKS`` and ``HCCL_PY_CARRY_FIRST_ROUND``
decide which process-group calls a collective makes (an exact AllReduce gathers
where a native one reduces; a checked task all-gathers descriptors first; a
carried round rides in that all-gather and widens the next rows). Ranks that
differ in them call different collectives at the same point, which gloo answers
with a hang or an abort. Each process reads them from its own environment, and
hosts of one run may differ, so at the start of every run each rank compares its
settings with rank 0's and names the difference instead.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass

import torch.distributed as dist

from ...core.config import env_flag
from ...core.errors import HcclMismatchError, HcclUsageError
from ...core.plain import json_or
from ...launcher import store as kv
from ...launcher.spec import under_launcher

#: "1"/"0": compare task descriptors across ranks through the store (default: on for gloo).
CHECK_ENV = "HCCL_PY_CHECK_TASKS"
#: "1"/"0": a small first round rides in the task check's exchange (default: on).
CARRY_ENV = "HCCL_PY_CARRY_FIRST_ROUND"
#: "exact"/"native": how AllReduce and ReduceScatter reduce (default: exact on gloo).
REDUCE_ENV = "HCCL_PY_REDUCE"
#: Rank 0's settings, in the run's store.
KEY = "settings"


@dataclass(frozen=True)
class Settings:
    """This rank's settings: ``check_tasks``, ``carry`` (a first round rides in the task
    check's exchange) and ``exact`` (reductions)."""

    check_tasks: bool
    carry: bool
    exact: bool

    @classmethod
    def read(cls, check_tasks: bool, exact: bool) -> Settings:
        """The settings from this process's environment, over the backend's defaults."""
        reduce = os.environ.get(REDUCE_ENV) or ("exact" if exact else "native")  # empty: unset
        if reduce not in ("exact", "native"):
            raise ValueError(f"{REDUCE_ENV} must be 'exact' or 'native', not {reduce!r}")
        return cls(env_flag(CHECK_ENV, check_tasks), env_flag(CARRY_ENV, True), reduce == "exact")

    def by_name(self) -> dict[str, str]:
        """The settings by variable name, as the environment spells them."""
        return {
            REDUCE_ENV: "exact" if self.exact else "native",
            CHECK_ENV: str(int(self.check_tasks)),
            CARRY_ENV: str(int(self.carry)),
        }

    def check_same(
        self,
        rank: int,
        store: dist.Store,
        publish: Callable[[str, bytes], None],
        timeout: float,
        interrupt: Callable[[], None],
    ) -> None:
        """Rank 0 publishes its settings in the run's ``store``; every other rank waits for
        them (``timeout`` seconds, ``interrupt()`` raising when a peer failed) and raises
        :class:`HcclMismatchError` naming each setting that differs."""
        mine = self.by_name()
        if rank == 0:
            publish(KEY, json.dumps(mine, sort_keys=True).encode())
            return
        kv.wait_keys(
            store,
            [KEY],
            timeout,
            lambda missing: f"rank {rank} waits for rank 0's settings at the start of the run",
            interrupt,
        )
        theirs = json_or(store.get(KEY))
        if not isinstance(theirs, dict):
            raise HcclUsageError(
                f"rank {rank} cannot read rank 0's settings in the run's store", rank=rank
            )
        differ = [name for name in mine if theirs.get(name) != mine[name]]
        if differ:
            listed = "; ".join(
                f"{n}: rank {rank} {mine[n]}, rank 0 {theirs.get(n)}" for n in differ
            )
            raise HcclMismatchError(
                f"rank {rank}'s hccl_py settings differ from rank 0's ({listed}): they decide "
                "which process-group calls a collective makes, so set them alike on every rank",
                rank=rank,
            )


def check_settings() -> None:
    """Read the gloo and HCCL backends' settings as their ranks read them, how long a store
    may take to answer and, where hccl_py starts the rank processes (no launcher did), how it
    starts them (``HCCL_PY_START_METHOD``: an HcclUsageError, as the launch raises it)."""
    from ...launcher.forkserver import start_method

    Settings.read(check_tasks=True, exact=True)
    kv.answer_s()
    if not under_launcher():
        start_method()
