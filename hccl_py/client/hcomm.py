"""``AscendC::Hcomm``: one-sided writes and reads over channels to peers (Ascend 950's URMA).

In Python: ``hcomm = hp.Hcomm[hp.COMM_PROTOCOL_UBC_CTP]()``, ``hcomm.Init(ub, 512)``,
``hcomm.WriteNbi(channel, dst, src, len)`` (``WriteNbi[False]`` posts without the
doorbell), ``ReadNbi``, ``WriteWithNotifyNbi``, ``Commit(channel)``, ``Drain(channel)``.
Every call returns ``HCOMM_SUCCESS`` (0) or ``HCOMM_FAILED`` (-1), as
``impl/adv_api/detail/hcomm/impl/platform_v310/hcomm_aiv_urma.h`` does.

What the official implementation does, and this one with it: a request is
written to the channel's send queue; with ``commit`` (the default) the doorbell
rings for every request posted so far, else ``Commit`` rings it. The remote
address must lie in a buffer registered for the channel (``HcommFindBufferIdx``:
the peer's HCCL buffer), else -1. ``URMA_DEFAULT_CFG`` (strongly ordered, fence:
each request waits for the earlier ones) makes one channel's writes land in the
order they were posted. ``Drain`` polls the completion queue until every request
posted on the channel completed (all cores', as it reads the channel's count).
When the copies land is the server's business (see docs/hcomm.md).
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from ..core.config import as_index, c_int
from ..core.constants import HCOMM_FAILED, HCOMM_SUCCESS, HCOMM_URMA_TMP_BUF_SIZE, CommProtocol
from ..core.current import serialized
from ..core.errors import HcclBoundsError, HcclUsageError, InvalidCall
from ..core.gm import GmAddr, what_is
from ..core.report import plain_repr, user_frame, warn
from ..core.template import checked, template
from ..kernel.context import core_name, current_core_context, current_rank_context
from ..kernel.crosscore import Pipe
from ..server.remote_writes import Copies, Immediate
from ..server.windows import WindowAllocation
from .channels import Channel, channel_of, owner_of
from .convert import checked_gm
from .failures import breach

_UBC_CTP = CommProtocol.COMM_PROTOCOL_UBC_CTP


class Hcomm:
    """``AscendC::Hcomm<commProtocol>`` (``Hcomm[protocol]()``; the default is COMM_PROTOCOL_UBC_CTP)."""

    def __class_getitem__(cls, commProtocol: CommProtocol) -> functools.partial:
        return functools.partial(cls, commProtocol)

    def __init__(self, commProtocol: CommProtocol = _UBC_CTP) -> None:
        known = CommProtocol._value2member_map_
        if isinstance(commProtocol, bool) or not (
            isinstance(commProtocol, int) and commProtocol in known
        ):  # a C++ template argument that is no CommProtocol does not compile
            ctx = current_rank_context(required=False)
            who = "" if ctx is None else f"rank {ctx.rank} "
            raise HcclUsageError(
                f"{who}Hcomm[{plain_repr(commProtocol)}]: the template argument must be a "
                "CommProtocol (hp.COMM_PROTOCOL_UBC_CTP)",
                rank=None if ctx is None else ctx.rank,
            )
        self.commProtocol = CommProtocol(commProtocol)
        self._ready = False

    def _signature_misfit(self, reason: str, op: str) -> int:
        return breach("signature", reason, HCOMM_FAILED, op=op)

    @checked
    @serialized
    def Init(self, buff: Any, len: int) -> int:  # noqa: A002, N802
        """Init(buff, len): the UB work buffer; -1 if ``len`` is below 512 or beyond ``buff``.

        As the official ``len > buff.GetSize()``, ``len`` (bytes) is compared with the
        tensor's element count: a uint8 tensor of ``len`` bytes or more always fits.
        """
        if self._unsupported("Init"):
            return HCOMM_FAILED
        if not isinstance(buff, torch.Tensor):
            return self._fail(
                "bad-argument", "Init", f"buff must be a UB tensor, not {what_is(buff)}"
            )
        size, nbytes = buff.numel(), as_index(len)
        if nbytes is None:
            return self._fail(
                "bad-argument", "Init", f"len must be an int (bytes of buff), not {what_is(len)}"
            )
        if nbytes < HCOMM_URMA_TMP_BUF_SIZE:
            return self._fail(
                "bad-argument",
                "Init",
                f"len {nbytes} must be at least HCOMM_URMA_TMP_BUF_SIZE ({HCOMM_URMA_TMP_BUF_SIZE})",
            )
        if nbytes > size:
            return self._fail(
                "bad-argument",
                "Init",
                f"len {nbytes} is more than buff.GetSize(), its {size} elements of "
                f"{buff.dtype} (the official check compares the bytes with the element count)",
            )
        self._ready = True
        return HCOMM_SUCCESS

    @template("commit")
    @serialized
    def WriteNbi(
        self, channel: int, dst: GmAddr, src: GmAddr, len: int, commit: bool = True
    ) -> int:  # noqa: A002, N802
        """WriteNbi[commit](channel, dst, src, len): ``len`` bytes from this rank to the peer."""
        return self._post("WriteNbi", channel, dst, src, len, commit)

    @template("commit")
    @serialized
    def ReadNbi(self, channel: int, dst: GmAddr, src: GmAddr, len: int, commit: bool = True) -> int:  # noqa: A002, N802
        """ReadNbi[commit](channel, dst, src, len): ``len`` bytes from the peer into this rank."""
        return self._post("ReadNbi", channel, dst, src, len, commit)

    @template("commit")
    @serialized
    def WriteWithNotifyNbi(  # noqa: N802
        self,
        channel: int,
        dst: GmAddr,
        src: GmAddr,
        len: int,  # noqa: A002
        notifyAddr: GmAddr,  # noqa: N803
        notifyVal: int,  # noqa: N803
        commit: bool = True,
    ) -> int:
        """WriteWithNotifyNbi[commit]: a write, then the uint64 ``notifyVal`` at ``notifyAddr``."""
        return self._post(
            "WriteWithNotifyNbi", channel, dst, src, len, commit, (notifyAddr, notifyVal)
        )

    @template("pipe", convert=Pipe)
    @serialized
    def Commit(self, channel: int, *, pipe: Pipe = Pipe.PIPE_S) -> int:  # noqa: N802
        """Commit[pipe]: ring ``channel``'s doorbell for the requests posted with ``commit=False``
        (``pipe``, the C++ template's pipe that rings it, changes nothing here)."""
        found = self._channel("Commit", channel)
        if found is None:
            return HCOMM_FAILED
        self._ring(found)
        return HCOMM_SUCCESS

    @template("pipe", convert=Pipe)
    @serialized
    def Drain(self, channel: int, *, pipe: Pipe = Pipe.PIPE_MTE3) -> int:  # noqa: N802
        """Drain[pipe]: block until every request posted on ``channel`` before it
        completed (``pipe``, the C++ template's pipe that polls, changes nothing here)."""
        found = self._channel("Drain", channel)
        if found is None:
            return HCOMM_FAILED
        ctx = current_rank_context()
        count = found.posted  # the official Drain polls for the wqeCnt it reads now
        if found.rung < count:
            ctx.blocker.wait_for(
                lambda: found.rung >= count,
                lambda: (
                    f"rank {ctx.rank} Drain(channel {found.handle:#x}) waits for "
                    f"{count - found.rung} request(s) posted with commit=False that no Commit "
                    "(or later WriteNbi[True]) on that channel submitted: they never complete"
                ),
            )
        ctx.server.drain_channel(found.key)
        return HCOMM_SUCCESS

    # ------------------------------------------------------------------ internals
    def _fail(self, rule_id: str, call: str, why: str, **facts: Any) -> int:
        ctx = current_rank_context()
        return breach(
            rule_id, f"rank {ctx.rank} Hcomm.{call}: {why}", HCOMM_FAILED, op=call, **facts
        )

    def _unsupported(self, call: str) -> bool:
        """Whether this Hcomm's protocol is not emulated (reported)."""
        if self.commProtocol == _UBC_CTP:
            return False
        own = "its own implementation (hcomm_aiv_roce.h)"
        base = "the base implementation, whose calls return -1"
        has = own if self.commProtocol == CommProtocol.COMM_PROTOCOL_ROCE else base
        self._fail(
            "unsupported",
            call,
            f"Hcomm<{self.commProtocol.name}> is not emulated (only COMM_PROTOCOL_UBC_CTP); "
            f"officially it has {has}",
        )
        return True

    def _channel(self, call: str, channel: Any) -> Channel | None:
        """The calling rank's channel ``channel``, or None after reporting why it is not usable."""
        if self._unsupported(call):
            return None
        if not self._ready:
            self._fail("not-initialised", call, "Hcomm.Init(buff, len) has not succeeded")
            return None
        ctx = current_rank_context()
        found = channel_of(ctx, channel)
        if found is None:
            owner = owner_of(channel)
            whose = (
                f"a channel of rank {owner}"
                if owner is not None and owner != ctx.rank
                else "no channel that HcclChannelAcquire returned to this rank"
            )
            number = as_index(channel)
            shown = what_is(channel) if number is None else f"{number:#x}"
            why = f"rank {ctx.rank} Hcomm.{call}: channel {shown} is {whose}"
            breach("unknown-channel", why, HCOMM_FAILED, op=call, actual=channel)
        return found

    def _post(
        self, call: str, channel: Any, dst: Any, src: Any, nbytes: Any, commit: bool,
        notify: tuple[Any, Any] | None = None,
    ) -> int:  # fmt: skip
        found = self._channel(call, channel)
        if found is None:
            return HCOMM_FAILED
        try:
            copies = self._copies(call, found, dst, src, nbytes, notify)
        except InvalidCall as bad:
            return self._fail(
                bad.rule, call, f"channel {found.handle:#x}: {bad.reason}", **bad.facts
            )
        current_rank_context().server.hcomm_posted(found.key, call, copies)
        found.uncommitted.extend(copies)
        found.posted += 1
        if commit:
            self._ring(found)
        else:
            _note_unrung(found, call)
        return HCOMM_SUCCESS

    def _ring(self, found: Channel) -> None:
        """The doorbell: every request posted so far on ``found`` goes to the server, then a
        Drain that another core started before it wakes (real threads sleep until notified)."""
        copies, found.uncommitted = found.uncommitted, []
        found.unrung, found.unrung_said = [], 0
        ctx = current_rank_context()
        if copies:
            ctx.server.post_writes(found.key, copies)
        blocker = ctx.blocker
        with blocker.lock:
            found.rung = found.posted
            blocker.cond.notify_all()

    def _copies(
        self, call: str, found: Channel, dst: Any, src: Any, nbytes: Any,
        notify: tuple[Any, Any] | None,
    ) -> Copies:  # fmt: skip
        given, nbytes = nbytes, c_int(nbytes)
        if nbytes is None or nbytes < 0:
            raise InvalidCall("bad-argument", f"len must be a non-negative int, not {given!r}")
        reads = call == "ReadNbi"
        remote, local = (src, dst) if reads else (dst, src)
        remote_name, local_name = ("src", "dst") if reads else ("dst", "src")
        _remote(found, remote, nbytes, remote_name)
        _local(found, local, nbytes, local_name)
        copies: Copies = [(src, dst, nbytes)]
        if notify is not None:
            addr, value = notify[0], c_int(notify[1])
            if value is None or not 0 <= value < 2**64:
                raise InvalidCall("bad-argument", f"notifyVal must be a uint64, not {notify[1]!r}")
            _remote(found, addr, 8, "notifyAddr")
            copies.append((Immediate(value), addr, 8))
        return copies


def _note_unrung(found: Channel, call: str) -> None:
    """Remember a request posted with ``commit=False``: the kernel's end reports it if no
    doorbell rang it by then (:func:`_left_unrung`)."""
    core = current_core_context()
    if core is None:  # not in a kernel: no kernel's end to report it at
        return
    launch = core.launch.rank_ctx.buffers.launches  # the rank's launches so far: this one's number
    found.unrung.append((launch, f"{call} at {user_frame()} on {core_name(core)}"))
    core.launch.exit_checks.setdefault(found.key, functools.partial(_left_unrung, found, launch))


def _left_unrung(found: Channel, launch: int) -> None:
    """The kernel of the rank's launch number ``launch`` returned: an ``hcomm-uncommitted``
    warning for the requests its cores posted with ``commit=False`` on ``found`` that no Commit
    (or committed request) rang, and for those left by an earlier launch that raised."""
    left = found.unrung[found.unrung_said :]
    if not left:
        return
    found.unrung_said = len(found.unrung)
    mine = [text for number, text in left if number == launch]
    older = [(number, text) for number, text in left if number != launch]
    before = ""
    if older:  # an earlier launch that raised did not run its end's checks
        numbers = ", ".join(str(n) for n in sorted({number for number, _ in older}))
        plural = "es" if "," in numbers else ""
        before = (
            f"; and {len(older)} left by the rank's launch{plural} {numbers} in this run, which "
            f"raised before its end could report them: {'; '.join(text for _, text in older)}"
        )
    warn(
        "hcomm-uncommitted",
        f"Hcomm: the kernel returned with {len(mine)} request(s) posted with commit=False on "
        f"channel {found.handle:#x} (to rank {found.peer}) and no Commit after them: "
        f"{'; '.join(mine)}{before}. Their doorbell never rang, so they wait in the channel's send "
        "queue until a later launch rings it (a Commit or a committed request on the "
        "channel), or forever; call Commit(channel) before the kernel returns",
        rank=found.owner,
    )


def _remote(found: Channel, addr: Any, nbytes: int, what: str) -> None:
    """``addr`` must lie in the channel peer's HCCL buffer (HcommFindBufferIdx)."""
    addr = checked_gm(addr, what)
    alloc = addr.alloc
    peer = found.peer
    if (
        not isinstance(alloc, WindowAllocation)
        or alloc.rank != peer
        or alloc.kind != "In"
        or alloc.domain != found.group.name
    ):
        raise InvalidCall(
            "foreign-memory",
            f"{what} {addr!r} is not in the HCCL buffer of the channel's peer, rank {peer} (its "
            f"In window of communicator {found.group.name}, HcclChannelGetHcclBuffer); the "
            "official HcommFindBufferIdx fails and the call returns -1",
            expected=f"WindowsIn of rank {peer} in {found.group.name}",
            actual=f"{alloc.name} in {alloc.domain}"
            if isinstance(alloc, WindowAllocation)
            else alloc.name,
        )
    if addr.offset < 0 or addr.offset + nbytes > alloc.nbytes:
        raise InvalidCall(
            "foreign-memory",
            f"{what}: bytes [{addr.offset}, {addr.offset + nbytes}) fall outside rank {peer}'s "
            f"HCCL buffer {alloc.name} of {alloc.nbytes} bytes (HcommFindBufferIdx fails)",
        )


def _local(found: Channel, addr: Any, nbytes: int, what: str) -> None:
    """``addr`` must be this rank's memory, ``nbytes`` of it."""
    addr = checked_gm(addr, what)
    if addr.rank != found.owner:
        raise InvalidCall(
            "foreign-memory",
            f"{what} {addr!r} points into rank {addr.rank}'s memory; it must be this rank's "
            f"(rank {found.owner})",
            expected=found.owner,
            actual=addr.rank,
        )
    try:
        addr.check_range(nbytes, what)
    except HcclBoundsError as exc:
        raise InvalidCall("bounds", exc.reason) from None
