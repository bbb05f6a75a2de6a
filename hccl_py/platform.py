"""Platform profiles (spec section 7): which calls each Ascend generation allows."""

from __future__ import annotations

from dataclasses import dataclass

from .constants import HcclCMDType, HcclServerType

_C = HcclCMDType
_BASIC = frozenset(
    {_C.HCCL_CMD_ALLREDUCE, _C.HCCL_CMD_ALLGATHER, _C.HCCL_CMD_REDUCE_SCATTER, _C.HCCL_CMD_ALLTOALL}
)


@dataclass(frozen=True)
class Platform:
    """What one platform supports; see docs/api.md for the table."""

    name: str
    server: HcclServerType
    ops: frozenset[HcclCMDType]
    group_sync_counts_as_task: bool
    finalize_async_allowed: bool
    max_alltoall_ranks: int | None = None
    max_task_bytes: int | None = None

    def supports(self, op: HcclCMDType) -> bool:
        """Whether a Prepare of ``op`` is allowed on this platform."""
        return op in self.ops


PLATFORMS: dict[str, Platform] = {
    "A2": Platform(
        name="Atlas A2",
        server=HcclServerType.HCCL_SERVER_TYPE_AICPU,
        ops=_BASIC | {_C.HCCL_CMD_BATCH_WRITE},
        group_sync_counts_as_task=False,
        finalize_async_allowed=False,
    ),
    "A3": Platform(
        name="Atlas A3",
        server=HcclServerType.HCCL_SERVER_TYPE_AICPU,
        ops=_BASIC | {_C.HCCL_CMD_ALLTOALLV, _C.HCCL_CMD_BATCH_WRITE},
        group_sync_counts_as_task=True,
        finalize_async_allowed=True,
        max_alltoall_ranks=128,
    ),
    "950": Platform(
        name="Ascend 950",
        server=HcclServerType.HCCL_SERVER_TYPE_CCU,
        ops=_BASIC | {_C.HCCL_CMD_ALLTOALLV},
        group_sync_counts_as_task=False,
        finalize_async_allowed=False,
        max_task_bytes=256 * 1024 * 1024,
    ),
}


def get_platform(name: str | Platform) -> Platform:
    """Look up a platform profile by its short name ("A2", "A3", "950")."""
    if isinstance(name, Platform):
        return name
    try:
        return PLATFORMS[str(name).upper()]
    except KeyError:
        raise ValueError(f"unknown platform {name!r}; choose one of {sorted(PLATFORMS)}") from None
