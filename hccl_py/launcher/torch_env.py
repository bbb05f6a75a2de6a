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

import os

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
