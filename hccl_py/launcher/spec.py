"""Which launcher started this process, and where its rank and rendezvous store are."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

#: Set by hccl_py's runner in its children: the runner hosts the store at MASTER_ADDR:MASTER_PORT.
STORE_HOSTED_ENV = "HCCL_PY_STORE_HOSTED"


#: Environment variables that mean "a launcher started this process as one rank".
LAUNCHER_ENV = ("MS_ROLE", "RANK_ID", "RANK", "WORLD_SIZE")


def under_launcher() -> bool:
    """Whether msrun, torchrun or our runner started this process as one rank."""
    return any(v in os.environ for v in LAUNCHER_ENV)


class LaunchError(ValueError):
    """The launcher's environment variables are missing or inconsistent."""


@dataclass(frozen=True)
class RankSpec:
    """How this process joins a distributed world."""

    launcher: str  # "msrun", "torchrun", "hccl_py", "env" or "spawn"
    role: str  # "worker", or "scheduler" for msrun's scheduler process
    rank: int | None  # None: handed out through the store (msrun without --node_rank)
    world_size: int
    local_rank: int
    host: str
    port: int
    host_store: bool  # this process runs the store's server
    store_path: str | None = None  # a FileStore instead of a TCPStore (the ranks hp.run starts)

    def __post_init__(self) -> None:
        """A world the ranks can form: a rank outside it would wait for its peers forever."""
        if self.world_size < 1:
            raise LaunchError(
                f"{self.launcher}: the world size must be at least 1, not "
                f"{self.world_size} (WORLD_SIZE, RANK_SIZE or MS_WORKER_NUM)"
            )
        if self.rank is not None and not 0 <= self.rank < self.world_size:
            raise LaunchError(
                f"{self.launcher}: rank {self.rank} is outside 0..{self.world_size - 1}"
                f" of a world of {self.world_size} (RANK, RANK_ID or MS_NODE_ID)"
            )


def _int(env: Mapping[str, str], *names: str, default: int | None = None) -> int:
    for name in names:
        value = env.get(name)
        if value not in (None, ""):
            try:
                return int(value)
            except ValueError:
                raise LaunchError(
                    f"environment variable {name}={value!r} is not an integer"
                ) from None
    if default is None:
        raise LaunchError(f"environment variable {' or '.join(names)} is not set")
    return default


def _address(env: Mapping[str, str], host: str, port: str, who: str) -> tuple[str, int]:
    if not env.get(port):
        raise LaunchError(
            f"{who}: {port} is not set, so the ranks cannot find each other's store "
            f"(set {host} and {port})"
        )
    number = _int(env, port)
    if not 0 < number < 65536:  # torchrun --master-port 0 picks its own but tells its workers 0
        raise LaunchError(
            f"{who}: {port}={number} is no port the ranks can meet at (their store needs a "
            f"port from 1 to 65535 that every rank knows); give the launcher a port number"
        )
    return env.get(host) or "127.0.0.1", number


def spec_from_env(env: Mapping[str, str] | None = None) -> RankSpec:
    """Read this process's rank and rendezvous address from the launcher's variables."""
    env = os.environ if env is None else env
    if "MS_ROLE" in env:
        role = {"MS_SCHED": "scheduler", "MS_WORKER": "worker"}.get(env["MS_ROLE"])
        if role is None:
            raise LaunchError(f"MS_ROLE={env['MS_ROLE']!r}: hccl_py runs as MS_WORKER or MS_SCHED")
        host, port = _address(env, "MS_SCHED_HOST", "MS_SCHED_PORT", "msrun")
        node = env.get("MS_NODE_ID")
        return RankSpec(
            launcher="msrun",
            role=role,
            rank=_int(env, "MS_NODE_ID") if role == "worker" and node not in (None, "") else None,
            world_size=_int(env, "MS_WORKER_NUM", "RANK_SIZE"),
            local_rank=_int(env, "DEVICE_ID", default=0),
            host=host,
            port=port,
            host_store=role == "scheduler",
        )
    rank = _int(env, "RANK", "RANK_ID")
    who = "torchrun" if "TORCHELASTIC_RUN_ID" in env else "launcher"
    host, port = _address(env, "MASTER_ADDR", "MASTER_PORT", who)
    hosted = env.get("TORCHELASTIC_USE_AGENT_STORE") == "True" or env.get(STORE_HOSTED_ENV) == "1"
    return RankSpec(
        launcher="torchrun"
        if who == "torchrun"
        else ("hccl_py" if STORE_HOSTED_ENV in env else "env"),
        role="worker",
        rank=rank,
        world_size=_int(env, "WORLD_SIZE", "RANK_SIZE"),
        local_rank=_int(env, "LOCAL_RANK", "DEVICE_ID", default=rank),
        host=host,
        port=port,
        host_store=rank == 0 and not hosted,
    )
