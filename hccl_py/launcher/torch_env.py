"""What a rank sets in torch's environment before it creates the default process group.

torch's flight recorder keeps a record (about 1.3 KiB, with a Python stack) of
each of the last ``TORCH_FR_BUFFER_SIZE`` collectives of every process group,
2000 by default, for the dump that torch writes when an NCCL collective times
out. On gloo nothing reads it, and a rank's memory grew by 2.5 MiB over its
first 2000 process-group calls (issue 28, goal 5). hccl_py reports its own
hangs (who waits for whom), so a rank that creates the default process group
turns the recorder off unless the user chose a size.
"""

from __future__ import annotations

import ipaddress
import os
import socket

from .spec import RankSpec

#: torch's flight-recorder size variables (the second is its older NCCL name).
FLIGHT_RECORDER_ENV = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")


def quiet_flight_recorder() -> None:
    """Turn torch's flight recorder off in this process, unless the user set its size.

    Call it before the process creates its first process group: torch reads
    the size once, when the recorder is first used.
    """
    if not any(os.environ.get(name) for name in FLIGHT_RECORDER_ENV):
        os.environ[FLIGHT_RECORDER_ENV[0]] = "0"


#: The variable that sets the intra-op threads of every torch process (OpenMP's own).
THREADS_ENV = "OMP_NUM_THREADS"


def rank_threads(local_ranks: int) -> None:
    """One intra-op thread per rank process when several share this host, as torchrun does.

    torch starts one OpenMP thread per core in every process, and those threads
    spin for a while after each parallel operation (a copy of 256 KiB is one).
    Four rank processes on two cores then spend most of their CPU spinning: a
    64 KiB AllGather on 4 gloo ranks took 31 ms of CPU per rank and 152 ms of wall
    time, 4.6 and 13 ms with one thread (docs/performance.md). torchrun sets
    ``OMP_NUM_THREADS=1`` for the same reason; a value the user set is kept.
    """
    if local_ranks > 1 and not os.environ.get(THREADS_ENV):
        import torch

        torch.set_num_threads(1)


#: gloo's choice of network interfaces (comma-separated names); unset, gloo binds its sockets
#: to the address the host name resolves to, on most cluster nodes an outside one.
GLOO_IFNAME_ENV = "GLOO_SOCKET_IFNAME"
#: Linux's interface flag for a loopback interface (``IFF_LOOPBACK``).
_IFF_LOOPBACK = 0x8


def loopback_interface() -> str | None:
    """The name of this host's loopback interface (``lo`` on Linux), or None if none is found."""
    names = [name for _, name in socket.if_nameindex()] if hasattr(socket, "if_nameindex") else []
    for name in names:
        try:
            with open(f"/sys/class/net/{name}/flags") as f:
                if int(f.read().strip(), 16) & _IFF_LOOPBACK:
                    return name
        except (OSError, ValueError):
            continue
    return next((name for name in ("lo", "lo0") if name in names), None)


#: The launcher's count of ranks on this host (torchrun's, hccl_py's runner's).
LOCAL_RANKS_ENV = "LOCAL_WORLD_SIZE"


def one_host(spec: RankSpec, local_ranks: int | None) -> bool:
    """Whether every rank of ``spec``'s world runs on this host: ``hp.run``'s own ranks, every
    rank local to this host by the launcher's count (None: the launcher gives none), or a
    store on a loopback address."""
    if spec.store_path or local_ranks == spec.world_size:
        return True
    try:
        return ipaddress.ip_address(socket.gethostbyname(spec.host)).is_loopback
    except (OSError, ValueError):
        return False


def local_ranks() -> int | None:
    """How many ranks a launcher says run on this host (``LOCAL_WORLD_SIZE``); None where it
    does not say (a count to trust, not a guess)."""
    local = os.environ.get(LOCAL_RANKS_ENV, "").strip()
    return int(local) if local.isascii() and local.isdigit() and int(local) > 0 else None


def loopback_gloo(spec: RankSpec) -> None:
    """Where every rank runs on this host (:func:`one_host`), gloo's sockets listen on the
    loopback interface only.

    gloo's peers connect to each other without authentication, so its listening sockets must
    not face the network when nothing outside the host needs them. A choice the user made
    (``GLOO_SOCKET_IFNAME``) is kept; runs across hosts keep gloo's own choice.
    """
    if not os.environ.get(GLOO_IFNAME_ENV) and one_host(spec, local_ranks()):
        name = loopback_interface()
        if name is not None:
            os.environ[GLOO_IFNAME_ENV] = name
