"""Platform profiles (spec section 7): which calls each Ascend generation allows."""

from __future__ import annotations

from dataclasses import dataclass

from .constants import HcclCMDType, HcclServerType
from .ops import OPS


@dataclass(frozen=True)
class Platform:
    """What one platform supports; see docs/api.md for the table."""

    #: The short name the op table uses ("A2", "A3", "950").
    short: str
    name: str
    #: The default server (what a kernel and the framework use).
    server: HcclServerType
    finalize_async_allowed: bool
    max_alltoall_ranks: int | None = None
    #: Servers a kernel may also name (Ascend 950 runs the AI CPU server too since 2026-05).
    other_servers: frozenset[HcclServerType] = frozenset()
    #: Whether ``Query`` exists (not on Ascend 950).
    has_query: bool = True
    max_task_bytes: int | None = None

    @property
    def ops(self) -> frozenset[HcclCMDType]:
        """The kernel ops this platform has, as the op table says."""
        return frozenset(cmd for cmd, spec in OPS.items() if self.short in spec.platforms)

    @property
    def servers(self) -> frozenset[HcclServerType]:
        """Every server type a kernel may name on this platform."""
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
    ),
    "A3": Platform(
        short="A3",
        name="Atlas A3",
        server=HcclServerType.HCCL_SERVER_TYPE_AICPU,
        finalize_async_allowed=True,
        max_alltoall_ranks=128,
    ),
    "950": Platform(
        short="950",
        name="Ascend 950",
        server=HcclServerType.HCCL_SERVER_TYPE_CCU,
        other_servers=frozenset({HcclServerType.HCCL_SERVER_TYPE_AICPU}),
        has_query=False,
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
