"""Platform profiles (spec section 7): which calls each Ascend generation allows."""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

from ..ops import OPS
from .constants import HcclCMDType, HcclServerType


@dataclass(frozen=True)
class Platform:
    """What one platform supports; see docs/api.md for the table."""

    #: The short name the op table uses ("A2", "A3", "950").
    short: str
    name: str
    #: The default server (what a kernel and the framework use).
    server: HcclServerType
    finalize_async_allowed: bool
    #: Whether Finalize<false> is allowed with any task (Finalize.md restricts only A2, where
    #: it is not, and A3, where it is for BatchWrite tasks; Ascend 950 has no restriction).
    finalize_async_any: bool = False
    max_alltoall_ranks: int | None = None
    #: Servers a kernel may also name (Ascend 950 runs the AI CPU server too since 2026-05).
    other_servers: frozenset[HcclServerType] = frozenset()
    max_task_bytes: int | None = None
    #: Whether GetWindowsInAddr/GetWindowsOutAddr exist (not on Ascend 950).
    has_windows: bool = True
    #: BatchWrite's item format ("A2": 32 bytes, "A3": 64 bytes), None without BatchWrite.
    batch_write_format: str | None = None
    #: Largest itemNum of one BatchWrite (A3 documents itemNum < 2048).
    max_batch_items: int | None = None
    #: Whether BatchWrite must target a rank of another server (Atlas A2).
    batch_write_remote_only: bool = False
    #: Whether the multi-queue calls exist (QueueBarrier, GetQueueNum, queueID > 0).
    has_queues: bool = False
    #: Whether the AI CPU client reads the tiling's queueNum (platform_v220: A2 and A3; the
    #: 950 clients never set it, so a Wait there never returns 0 for it).
    reads_queue_num: bool = True
    #: The ops whose tiling's skipLocalRankCopy leaves the own block unwritten
    #: (SetSkipLocalRankCopy.md: AllGather and AlltoAll on Atlas A2; a reserved field without
    #: effect on A3; the 950 server never reads it).
    skips_local_copy: frozenset[HcclCMDType] = frozenset()
    #: What the host's SetDevType writes as the init tiling's devType on this SoC
    #: (hccl_tiling.cpp): ``SocVersion::ASCEND910B`` (1) for an "Ascend910B" one, else 255.
    dev_type: int = 255
    #: Whether InterHcclGroupSync exists (the 950 AI CPU client's is empty, the CCU client has
    #: none).
    has_group_sync: bool = True
    #: Whether Iterate (fine-grained AlltoAllV, tiling stepSize > 0) exists.
    has_iterate: bool = False
    #: Whether the tiling's algConfig has an effect (SetAlgConfig: a reserved field on A2 and 950).
    uses_alg_config: bool = False
    #: Whether the AI CPU server reads strideCount 0 of an AllGather or ReduceScatter with
    #: repeat > 1 as count * repeat (Ascend 950's, in asc-devkit; A2/A3 servers: count).
    aicpu_zero_stride_spans_repeats: bool = False
    #: How many times HCCL_BUFFSIZE each window holds: Ascend 950 allocates twice the setting
    #: (ops-transformer's arch35 hosts, mc2_tiling_utils.h GetEpWinSize; its kernels halve
    #: the context's winSize).
    window_factor: int = 1

    @property
    def ops(self) -> frozenset[HcclCMDType]:
        """The kernel ops this platform has, as the op table says."""
        return frozenset(cmd for cmd, spec in OPS.items() if self.short in spec.platforms)

    @functools.cached_property
    def servers(self) -> frozenset[HcclServerType]:
        """Every server type a kernel may name on this platform (made once: every InitV2 asks)."""
        return self.other_servers | {self.server}

    def supports(self, op: HcclCMDType) -> bool:
        """Whether a Prepare of ``op`` is allowed on this platform."""
        spec = OPS.get(op)
        return spec is not None and self.short in spec.platforms


PLATFORMS: dict[str, Platform] = {
    "A2": Platform(
        short="A2",
        name="Atlas A2",
        server=HcclServerType.HCCL_SERVER_TYPE_AICPU,
        finalize_async_allowed=False,
        batch_write_format="A2",
        batch_write_remote_only=True,
        skips_local_copy=frozenset({HcclCMDType.HCCL_CMD_ALLGATHER, HcclCMDType.HCCL_CMD_ALLTOALL}),
        dev_type=1,
    ),
    "A3": Platform(
        short="A3",
        name="Atlas A3",
        server=HcclServerType.HCCL_SERVER_TYPE_AICPU,
        finalize_async_allowed=True,
        max_alltoall_ranks=128,
        batch_write_format="A3",
        max_batch_items=2047,
        has_queues=True,
        has_iterate=True,
        uses_alg_config=True,
    ),
    "950": Platform(
        short="950",
        name="Ascend 950",
        server=HcclServerType.HCCL_SERVER_TYPE_CCU,
        other_servers=frozenset({HcclServerType.HCCL_SERVER_TYPE_AICPU}),
        finalize_async_allowed=True,
        finalize_async_any=True,
        max_task_bytes=256 * 1024 * 1024,
        has_windows=False,
        reads_queue_num=False,
        has_group_sync=False,
        aicpu_zero_stride_spans_repeats=True,
        window_factor=2,
    ),
}


#: Ranks per server (Atlas A2 servers hold 8 NPUs); 1 makes every rank a server of its own.
RANKS_PER_SERVER_ENV = "HCCL_PY_RANKS_PER_SERVER"


def ranks_per_server_default() -> int:
    """``HCCL_PY_RANKS_PER_SERVER`` from the environment, or 8."""
    raw = os.environ.get(RANKS_PER_SERVER_ENV) or "8"  # empty: unset, as every variable
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"{RANKS_PER_SERVER_ENV} must be a positive int, not {raw!r}")
    return value


def get_platform(name: str | Platform) -> Platform:
    """Look up a platform profile by its short name ("A2", "A3", "950")."""
    if isinstance(name, Platform):
        return name
    try:
        return PLATFORMS[str(name).upper()]
    except KeyError:
        raise ValueError(f"unknown platform {name!r}; choose one of {sorted(PLATFORMS)}") from None
