"""Memory that two emulated ranks share, where a real run gives each rank its own.

On the emulator every rank is a thread of one process, so a tensor created at
module level (or captured by a closure) is one buffer for every rank; under
gloo, torchrun or msrun each process has its own copy. When one rank's task
writes such a buffer while another rank's task of the same collective reads or
writes it, the emulator would compute something a multi-process run does not:
that is reported. Read-only sharing (the same weights sent by every rank) is
the same on every backend and stays silent.
"""

from __future__ import annotations

from ..core.errors import HcclSharedMemoryError
from ..core.gm import GmAddr
from ..core.task import Task


def _extent(addr: GmAddr) -> tuple[int, int, int] | None:
    """(storage address, first byte, end byte) of the allocation ``addr`` points into."""
    alloc = addr.alloc
    if alloc is None or alloc.memory is None or not alloc.memory[0] or not alloc.nbytes:
        return None
    storage, base = alloc.memory
    return storage, base, base + alloc.nbytes


def shared_between_ranks(tasks: list[Task]) -> HcclSharedMemoryError | None:
    """The first receive buffer of one rank's task that shares bytes with another rank's buffer."""
    used: dict[int, list[tuple[int, int, Task, str]]] = {}
    for task in tasks:
        for side in ("send", "recv"):
            extent = _extent(getattr(task, side))
            if extent is not None:
                used.setdefault(extent[0], []).append((extent[1], extent[2], task, side))
    for entries in used.values():
        if len({task.rank for _, _, task, _ in entries}) < 2:
            continue
        for lo, hi, writer, side in entries:
            if side != "recv":
                continue
            for o_lo, o_hi, other, o_side in entries:
                if other.rank != writer.rank and lo < o_hi and o_lo < hi:
                    return _report(writer, other, o_side)
    return None


def _report(writer: Task, other: Task, other_side: str) -> HcclSharedMemoryError:
    mine = writer.recv.alloc.name
    theirs = getattr(other, other_side).alloc.name
    role = "receive" if other_side == "recv" else "send"
    return HcclSharedMemoryError(
        f"rank {writer.rank}'s receive buffer ({mine}) shares memory with rank {other.rank}'s "
        f"{role} buffer ({theirs}) of the same {writer.label}: the emulated ranks run in one "
        "process, so this tensor is one buffer for both, while under gloo, torchrun or msrun "
        "each rank has its own copy and the results would differ. Create the tensor inside the "
        "rank's function (or pass it through hp.run(args=...), which gives every rank its own "
        "copy)",
        rank=writer.rank,
        domain=writer.domain_name,
        handle=writer.handle,
        op=writer.label,
    )
