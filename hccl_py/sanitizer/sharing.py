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

from collections.abc import Sequence

from ..core.errors import HcclSharedMemoryError
from ..core.gm import GmAddr
from ..core.task import Task

#: ``(storage address, first byte, end byte)`` of the bytes a buffer spans (bytes of its storage).
Extent = tuple[int, int, int]


def _extent(addr: GmAddr) -> Extent | None:
    """The extent of the allocation ``addr`` points into."""
    alloc = addr.alloc
    if alloc is None or alloc.memory is None or not alloc.memory[0] or not alloc.nbytes:
        return None
    storage, base = alloc.memory
    return storage, base, base + alloc.nbytes


def first_clash(
    buffers: Sequence[tuple[Extent | None, Extent | None]],
) -> tuple[int, int, str] | None:
    """Per rank ``(written, read)`` extents (None: no such buffer): the first written extent of
    one rank that shares bytes with another rank's buffer, as ``(writer, other, "recv" or
    "send")`` (the other's buffer), or None. Compared by address, not by storage: two
    storages may be one memory (``torch.from_numpy`` of overlapping views of one array)."""
    spans = [
        (extent[0] + extent[1], extent[0] + extent[2], i, side)
        for i, (written, read) in enumerate(buffers)
        for side, extent in (("send", read), ("recv", written))
        if extent is not None
    ]
    for lo, hi, writer, side in spans:
        if side != "recv":
            continue
        for o_lo, o_hi, other, o_side in spans:
            if other != writer and lo < o_hi and o_lo < hi:
                return writer, other, o_side
    return None


def shared_between_ranks(tasks: list[Task]) -> HcclSharedMemoryError | None:
    """The first receive buffer of one rank's task that shares bytes with another rank's buffer."""
    clash = first_clash([(_extent(t.recv), _extent(t.send)) for t in tasks])
    return None if clash is None else _report(tasks[clash[0]], tasks[clash[1]], clash[2])


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
