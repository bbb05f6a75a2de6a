"""Host side of Hcomm: channels to peers and their HCCL buffers, as ``mc2_context.cpp`` gets them.

ops-transformer's ``Mc2Context::GetHcclCommResource`` fills the kernel input
``MoeCommContext`` with one channel per peer (``HcclChannelDescInit``,
``HcclChannelAcquire``) and each peer's HCCL buffer (``HcclChannelGetHcclBuffer``;
its own: ``HcclGetHcclBuffer``). Here the communicator is an hccl_py
:class:`~hccl_py.core.group.Group` (``hp.world_group()`` or ``hp.new_group``), a
channel handle is a uint64 that only the acquiring rank may use, and a rank's
HCCL buffer is its In window of the domain (the memory ``GetWindowsInAddr``
returns, ``HCCL_BUFFSIZE`` bytes).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Any

from ..core.config import as_index
from ..core.constants import CommEngine, CommProtocol
from ..core.errors import HcclUsageError
from ..core.gm import GmAddr, what_is
from ..core.group import Group
from ..core.report import plain_repr
from ..kernel.context import RankContext, current_rank_context

#: Channel handles carry this tag in their top 16 bits ("HC"), then the owner's rank + 1.
HANDLE_TAG = 0x4843 << 48


@dataclass(frozen=True)
class HcclChannelDesc:
    """``HcclChannelDesc``: the peer (a rank of the communicator) and the protocol of one channel."""

    remoteRank: int  # noqa: N815
    protocol: CommProtocol = CommProtocol.COMM_PROTOCOL_UBC_CTP


@dataclass
class Channel:
    """One acquired channel: its owner, its peer, and the writes posted but not committed yet."""

    handle: int
    owner: int
    peer: int
    group: Group
    protocol: CommProtocol
    #: Copies posted with ``commit=False`` since the last doorbell (Commit, WriteNbi[True]).
    uncommitted: list = field(default_factory=list)
    #: Requests posted on the channel so far (the SQ's ``wqeCnt``), and how many of them the
    #: doorbell submitted: a Drain waits for the count it reads at its call, not for later ones.
    posted: int = 0
    rung: int = 0
    #: The requests posted with ``commit=False`` since the last doorbell: the rank's launch
    #: number and what a report names (call, line, core); how many a kernel's end reported.
    unrung: list = field(default_factory=list)
    unrung_said: int = 0

    @property
    def key(self) -> tuple[int, int]:
        """The servers' key of this channel."""
        return (self.owner, self.handle)


_channels: weakref.WeakKeyDictionary[RankContext, dict[int, Channel]] = weakref.WeakKeyDictionary()


def channels_of(ctx: RankContext) -> dict[int, Channel]:
    """The channels rank ``ctx`` acquired, by handle."""
    return _channels.setdefault(ctx, {})


def owner_of(handle: int) -> int | None:
    """The rank that acquired ``handle`` by its tag, or None for no channel handle."""
    if not isinstance(handle, int) or handle >> 48 != HANDLE_TAG >> 48:
        return None
    return ((handle >> 32) & 0xFFFF) - 1


def _comm(comm: Any, call: str) -> Group:
    if comm is None:
        return current_rank_context().world_group
    if not isinstance(comm, Group):
        _refuse(call, f"comm must be an hp.Group (the communicator), not {what_is(comm)}")
    problem = current_rank_context().unknown_group(comm)
    if problem:
        _refuse(call, problem)
    return comm


def HcclChannelAcquire(  # noqa: N802
    comm: Group | None, engine: CommEngine, channelDescs: list[HcclChannelDesc], channelNum: int
) -> list[int]:
    """``HcclChannelAcquire``: one channel handle per descriptor, to its ``remoteRank``.

    C++ fills the ``channels`` array and returns HCCL_SUCCESS; this returns the
    handles. ``comm`` None is the world.
    """
    ctx = current_rank_context()
    me = ctx.rank
    group = _comm(comm, "HcclChannelAcquire")
    if me not in group.ranks:
        _refuse("HcclChannelAcquire", f"rank {me} is not in communicator {group.name}")
    if not _member(engine, CommEngine) or engine != CommEngine.COMM_ENGINE_AIV:
        shown = CommEngine(engine).name if _member(engine, CommEngine) else plain_repr(engine)
        _refuse(
            "HcclChannelAcquire",
            f"engine {shown}: hccl_py's Hcomm runs on AIV cores (COMM_ENGINE_AIV)",
        )
    if not isinstance(channelDescs, (list, tuple)) or not all(
        isinstance(d, HcclChannelDesc) for d in channelDescs
    ):
        _refuse(
            "HcclChannelAcquire",
            f"channelDescs must be a list of hp.HcclChannelDesc, not {what_is(channelDescs)}",
        )
    if isinstance(channelNum, bool) or channelNum != len(channelDescs):
        _refuse(
            "HcclChannelAcquire",
            f"channelNum {plain_repr(channelNum)} but {len(channelDescs)} descriptors",
        )
    mine = channels_of(ctx)
    handles = []
    for desc in channelDescs:
        r = as_index(desc.remoteRank)
        if r is None:
            _refuse(
                "HcclChannelAcquire",
                f"a descriptor's remoteRank must be an int (a rank of communicator {group.name}), "
                f"not {what_is(desc.remoteRank)}",
            )
        if not 0 <= r < group.size or group.ranks[r] == me:
            _refuse(
                "HcclChannelAcquire",
                f"remoteRank {plain_repr(r)} is not another rank of communicator {group.name} "
                f"(size {group.size}, this rank is {group.ranks.index(me)})",
            )
        if not _member(desc.protocol, CommProtocol):
            _refuse(
                "HcclChannelAcquire",
                f"the protocol {plain_repr(desc.protocol)} of the descriptor of remoteRank {r} "
                "is no CommProtocol",
            )
        handle = HANDLE_TAG | (me + 1) << 32 | len(mine)
        mine[handle] = Channel(handle, me, group.ranks[r], group, CommProtocol(desc.protocol))
        handles.append(handle)
    return handles


def _member(value: Any, enum: type) -> bool:
    """Whether ``value`` is an int value of ``enum`` (bools, floats, unhashables are not)."""
    return (
        isinstance(value, int) and not isinstance(value, bool) and value in enum._value2member_map_  # type: ignore[attr-defined]
    )


def _refuse(call: str, why: str) -> None:
    """Raise the HcclUsageError of a host call that rank ``rank`` made wrong."""
    rank = current_rank_context().rank
    raise HcclUsageError(f"rank {rank} {call}: {why}", rank=rank, op=call)


def _buffer(ctx: RankContext, group: Group, rank: int) -> tuple[GmAddr, int]:
    alloc = ctx.server.window(group.name, rank, "In")
    return GmAddr(alloc, 0), alloc.nbytes


def HcclGetHcclBuffer(comm: Group | None = None) -> tuple[GmAddr, int]:  # noqa: N802
    """``HcclGetHcclBuffer``: this rank's HCCL buffer (its In window) and its size."""
    ctx = current_rank_context()
    group = _comm(comm, "HcclGetHcclBuffer")
    if group.rank_of(ctx.rank) is None:  # it has no buffer there (as HcclChannelAcquire says)
        _refuse("HcclGetHcclBuffer", f"rank {ctx.rank} is not in communicator {group.name}")
    return _buffer(ctx, group, ctx.rank)


def channel_of(ctx: Any, channel: Any) -> Any:
    """The channel this rank acquired under the handle ``channel`` (an int, a numpy integer or a
    0-d integer tensor: the uint64 handle however the kernel keeps it), or None."""
    number = as_index(channel)
    return None if number is None else channels_of(ctx).get(number)


def HcclChannelGetHcclBuffer(comm: Group | None, channel: int) -> tuple[GmAddr, int]:  # noqa: N802
    """``HcclChannelGetHcclBuffer``: the HCCL buffer of ``channel``'s peer and its size."""
    ctx = current_rank_context()
    call = "HcclChannelGetHcclBuffer"
    group = _comm(comm, call)
    found = channel_of(ctx, channel)
    if found is None:
        _refuse(call, f"this rank acquired no channel {plain_repr(channel)}")
    if found.group.name != group.name:
        _refuse(
            call,
            f"channel {found.handle:#x} was acquired on communicator {found.group.name}, not "
            f"{group.name}",
        )
    return _buffer(ctx, found.group, found.peer)
