"""Windows and one-sided calls: GetWindowsInAddr/OutAddr, BatchWrite, QueueBarrier, GetQueueNum.

The official AI CPU client sends BatchWrite like any Prepare but always
commits it (its ``commit`` template argument is ignored), takes the queue from
``queueID`` and the message slot from ``queueID + blockIdx * queueNum``; with
several queues (``queueNum > 0``) every core sends its own messages and Wait
returns 0 at once. The server reads the items from GM and copies each source
range into a window; no peer takes part, so nothing is matched across ranks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..core import report
from ..core.config import c_int
from ..core.constants import (
    HCCL_MAX_HANDLE_ID,
    INVALID_HANDLE_ID,
    MAX_QUE_NUM,
    HcclCMDType,
    ScopeType,
)
from ..core.errors import HcclBoundsError, InvalidCall
from ..core.gm import NULL, GmAddr, what_is
from ..kernel.cores import CoreContext
from ..ops.batch_write import ITEM_DTYPES, decode_items
from ..server.windows import WindowAllocation
from .binding import Binding
from .convert import checked_gm, no_tiling, slots_used
from .failures import Failures
from .handle import Handle
from .sender import calling_core, core_problem, has_other_cores, is_sender

if TYPE_CHECKING:
    from .state import ClientState

_BW = HcclCMDType.HCCL_CMD_BATCH_WRITE


def _passed(state: ClientState, epoch: int, slots: int) -> bool:
    """Whether all ``slots`` queues of the rank sent QueueBarriers 0..``epoch - 1``.

    QueueBarrier.md: the barrier holds its queue's later BatchWrites until the tasks of
    every queue in its scope (ALL) are done, "so that all queues are synchronised"; the
    server runs nothing behind it before every queue reached it (docs/windows.md).
    """
    return all(state.barrier_arrivals.get(i, 0) >= slots for i in range(epoch))


def _split(items: list, test: Callable[[Any], bool]) -> tuple[list, list]:
    """``items`` that pass ``test`` and those that do not, each in order."""
    passed: list = []
    failed: list = []
    for item in items:
        (passed if test(item) else failed).append(item)
    return passed, failed


class OneSided:
    """The window and one-sided calls of one Hccl object."""

    def __init__(self, binding: Binding, failures: Failures) -> None:
        self._binding = binding
        self._failures = failures

    # ------------------------------------------------------------------ windows
    def window(self, rankId: Any, kind: str) -> GmAddr:
        """GetWindows{kind}Addr(rankId): the window's GM address, or the null address."""
        b, breach = self._binding, self._failures.breach
        call = f"GetWindows{kind}Addr"
        if b.state is None:
            return breach("not-initialised", f"{call}: the Hccl object is not initialised", NULL)
        platform = b.state.rank_ctx.config.platform
        if not platform.has_windows:
            return breach("unsupported", f"{call} is not supported on {platform.name}", NULL)
        r = c_int(rankId)
        if r is None:
            return breach(
                "bad-argument", f"{call}: rankId must be an int, not {what_is(rankId)}", NULL
            )
        dim = b.state.rank_dim
        if not 0 <= r < dim:
            wrapped = f" (a uint32: {r} reads as {r % 2**32})" if r < 0 else ""
            return breach(
                "window-rank",
                f"{call}({r}): rankId{wrapped} must be less than rankDim {dim}; the official "
                "client returns a null address",
                NULL,
                expected=f"< {dim}",
                actual=r,
            )
        group = b.state.group
        alloc = b.server.window(group.name, group.ranks[r], kind)
        return self._failures.ok(GmAddr(alloc, 0))

    # ------------------------------------------------------------------- queues
    def get_queue_num(self) -> int:
        """GetQueueNum: the tiling's queueNum; 0 where the platform has no queues."""
        b, breach = self._binding, self._failures.breach
        if b.state is None:
            return breach("not-initialised", "GetQueueNum: the Hccl object is not initialised", 0)
        platform = b.state.rank_ctx.config.platform
        if not platform.has_queues:
            return breach("unsupported", f"GetQueueNum is not supported on {platform.name}", 0)
        return self._failures.ok(b.queue_num())

    def queue_barrier(self, queueID: Any, scope: ScopeType) -> None:
        """QueueBarrier: a barrier message on queue ``queueID``."""
        b, breach = self._binding, self._failures.breach
        if self._failures.unusable(b, "QueueBarrier"):
            return
        platform = b.state.rank_ctx.config.platform
        if not platform.has_queues:
            breach("unsupported", f"QueueBarrier is not supported on {platform.name}", None)
            return
        if scope != ScopeType.ALL:
            breach(
                "unsupported",
                f"QueueBarrier[{scope.name}]: only ScopeType.ALL is supported",
                None,
                expected="ALL",
                actual=scope.name,
            )
            return
        problem = self._queue_problem(queueID)
        if problem:
            breach("bad-argument", f"QueueBarrier: {problem}", None)
            return
        b.n_syncs += 1
        state, core = b.state, calling_core()
        slot, slots = self._slots(core, int(queueID))
        with state.rank_ctx.blocker.lock:
            index = state.barriers_sent.get(slot, 0)
            state.barriers_sent[slot] = index + 1
            state.barrier_arrivals[index] = state.barrier_arrivals.get(index, 0) + 1
            released, state.held = _split(state.held, lambda h: _passed(state, h[0][3], slots))
            for write, _ in released:
                del state.rank_ctx.blocker.held[id(write)]
        for write, _ in released:  # the last queue's barrier lets the server run them
            self._release(write)
        self._failures.ok(None)

    def _release(self, write: tuple) -> None:
        """The server runs a held BatchWrite: it reads the item list now, not at the call, so a
        rewrite the kernel ordered before the release is what lands (as on hardware)."""
        task, _, queue, epoch = write
        try:
            copies = self._copies(task.send, task.count, task.handle)
        except InvalidCall as bad:
            self._failures.breach(
                bad.rule,
                f"QueueBarrier released the held BatchWrite (handle {task.handle}), whose item "
                f"list the server reads now: {bad.reason}",
                None,
                handle=task.handle,
                op="BatchWrite",
                **bad.facts,
            )
            return
        self._binding.server.write_items(task, copies, queue, epoch)

    def _slots(self, core: CoreContext, q: int) -> tuple[int, int]:
        """Queue ``q``'s message slot on ``core`` and the rank's number of slots.

        ``queueNum`` slots per block, ``commBlockNum`` blocks (the launch's cores of
        this kind when the tiling sets none).
        """
        b = self._binding
        n = max(b.queue_num(), 1)
        blocks = b.comm_block_num() or core.launch.cores_of_kind[core.kind]
        return q + core.block_idx * n, blocks * n

    def _queue_problem(self, queueID: Any) -> str | None:
        q = c_int(queueID)
        n = self._binding.queue_num()
        if q is None:
            return f"queueID must be an int, not {what_is(queueID)}"
        if q < 0:
            return f"queueID must not be negative, got {q}"
        platform = self._binding.state.rank_ctx.config.platform
        if q and not platform.has_queues:
            return f"queueID {q}: {platform.name} has one BatchWrite queue (queue 0)"
        if n == 0 and q != 0:
            return (
                f"queueID {q} needs a tiling with queueNum > {q} (SetQueueNum); it has queueNum 0"
            )
        if n and q >= n:
            return f"queueID {q} is not below the tiling's queueNum {n}"
        block = calling_core().block_idx
        if n and (slot := q + block * n) >= MAX_QUE_NUM:
            return (
                f"queueID {q} of block {block} is message queue {slot} "
                f"(queueID + GetBlockIdx() * queueNum {n}), past the message area's "
                f"{MAX_QUE_NUM} queues (hccl_msg.h MAX_QUE_NUM): the client would write it over "
                "the memory behind them"
            )
        return None

    # --------------------------------------------------------------- BatchWrite
    def batch_write(self, batchWriteInfo: Any, itemNum: Any, queueID: Any) -> int:
        """BatchWrite: the handle id, or -1 (nothing sent) for a call the client rejects."""
        b, failures = self._binding, self._failures
        name = "BatchWrite"
        if failures.unusable(b, name, op=name):
            return INVALID_HANDLE_ID
        try:
            queues = self._check_batch_write(batchWriteInfo, itemNum, queueID)
        except InvalidCall as bad:
            return failures.refuse(name, bad)
        core = calling_core()
        handle = len(b.handles)
        sends = not b.compute_only and (queues > 0 or is_sender(b.config, core))
        task = None
        if sends:
            problem = None if queues else core_problem(b, core, True)
            if problem:
                return failures.breach(
                    "sending-core", f"{name}: {problem}", INVALID_HANDLE_ID, op=name
                )
            state = b.state
            task = state.one_sided_task(_BW, handle, batchWriteInfo, int(itemNum))
            try:
                copies = self._copies(batchWriteInfo, int(itemNum), handle)
            except InvalidCall as bad:
                # with one sender, the other cores never read the items: they got this handle
                alone = not queues and has_other_cores(core)
                return failures.refuse(name, bad, alone=alone, handle=handle)
            if not queues:
                state.sender = b
                state.sender_core = core
            # the message queue: the official client's queueID + GetBlockIdx() * queueNum; its
            # epoch (barriers sent): the write lands after the rank's writes of lower epochs
            slot, slots = self._slots(core, int(queueID)) if queues else (0, 1)
            queue = (state.context.index, slot)  # each context has its own message area
            write = (task, copies, queue, state.barriers_sent.get(slot, 0))
            with state.rank_ctx.blocker.lock:
                # behind a QueueBarrier[ALL] that not every queue of the rank has sent yet: the
                # server holds it (the core goes on) until the last queue sends it
                held = not _passed(state, write[3], slots)
                if held:
                    what = (
                        f"a BatchWrite on queue {queueID} of core {core.block_idx} waits behind "
                        f"QueueBarrier #{write[3] - 1} until all {slots} queues of the rank sent it"
                    )
                    state.held.append((write, what))
                    state.rank_ctx.blocker.held[id(write)] = f"rank {state.rank_ctx.rank}: {what}"
            if held:  # its server reads the items at the release; a report names this call
                b.server.hold_items(task)
            else:
                b.server.write_items(*write)
        b.handles.append(
            Handle(_BW, 1, core.kind, commits=1, task=task, compute_only=b.compute_only)
        )
        return failures.ok(handle)

    def _check_batch_write(self, info: Any, itemNum: Any, queueID: Any) -> int:
        """The official client's checks (and the documented limits); the tiling's queueNum."""
        platform = self._binding.state.rank_ctx.config.platform
        if not platform.supports(_BW) or platform.batch_write_format is None:
            raise InvalidCall("unsupported", f"BatchWrite is not supported on {platform.name}")
        if not self._binding.has_tiling(_BW):
            raise no_tiling("BatchWrite", _BW)
        checked_gm(info, "batchWriteInfo")
        n = c_int(itemNum)
        if n is None or n <= 0:
            raise InvalidCall("bad-argument", "itemNum must be a positive int", actual=itemNum)
        if platform.max_batch_items and n > platform.max_batch_items:
            raise InvalidCall(
                "platform-limit",
                f"itemNum must be below {platform.max_batch_items + 1} on {platform.name}",
                expected=f"<= {platform.max_batch_items}",
                actual=n,
            )
        problem = self._queue_problem(queueID)
        if problem:
            raise InvalidCall("bad-argument", problem)
        if len(self._binding.handles) >= HCCL_MAX_HANDLE_ID:
            raise InvalidCall(
                "handle-limit",
                f"the domain already used its {HCCL_MAX_HANDLE_ID} handles",
                expected=f"< {HCCL_MAX_HANDLE_ID} tasks",
            )
        if len(self._binding.handles) + self._binding.n_syncs >= HCCL_MAX_HANDLE_ID:
            raise InvalidCall(
                "handle-limit", slots_used(len(self._binding.handles), self._binding.n_syncs)
            )
        return self._binding.queue_num()

    def _copies(self, info: GmAddr, n: int, handle: int) -> list[tuple[GmAddr, GmAddr, int]]:
        """Read and check the ``n`` items at ``info``: (source, destination, bytes) per item."""
        state = self._binding.state
        config = state.rank_ctx.config
        fmt = config.platform.batch_write_format
        size = ITEM_DTYPES[fmt].itemsize
        try:
            raw = info.read_bytes(n * size)
        except HcclBoundsError as exc:
            raise InvalidCall(
                "bounds",
                f"the {n} items of {size} bytes at batchWriteInfo: {exc.reason}",
            ) from None
        items = decode_items(raw, fmt)
        if items.problem is not None:
            k, why = items.problem
            raise InvalidCall("bad-argument", f"item {k}: {why}", actual=why)
        me = state.rank_ctx.rank
        copies = []
        local = None
        for k in range(n):
            nbytes = int(items.nbytes[k])
            src = self._item_addr(k, "source", int(items.src[k]), nbytes)
            dst = self._item_addr(k, "destination", int(items.dst[k]), nbytes)
            if src.rank != me:
                raise InvalidCall(
                    "foreign-memory",
                    f"item {k}: the source points into rank {src.rank}'s memory; BatchWrite "
                    f"reads this rank's (rank {me}) memory",
                    expected=me,
                    actual=src.rank,
                )
            if fmt == "A2" and not isinstance(src.alloc, WindowAllocation):
                raise InvalidCall(
                    "foreign-memory",
                    f"item {k}: the source {src!r} is not a communication window; on "
                    f"{config.platform.name} localBuf is a window address (BatchWrite.md: copy "
                    "the data into GetWindowsOutAddr's window first), RDMA reads no other memory",
                )
            self._check_destination(k, dst)
            if items.remote_rank is not None:
                why = self._check_a2_peer(k, int(items.remote_rank[k]), dst)
                local = local or why
            copies.append((src, dst, nbytes))
        # once per rank and run: the shipping MoE kernels send such items in every launch
        if local is not None and all(
            w.kind != "batch-write-server" for w in state.rank_ctx.warnings
        ):
            report.warn(
                "batch-write-server",
                f"BatchWrite: {local}: on {config.platform.name} BatchWrite.md allows items only "
                "towards ranks on other servers, never the own rank; the shipping fullmesh MoE "
                "dispatch and combine (16 ranks and more) send such items, so hccl_py copies it",
                handle=handle,
            )
        return copies

    def _check_destination(self, k: int, dst: GmAddr) -> None:
        """Where an item may write: any window; on A3 also this rank's own GM.

        BatchWrite's documented A3 example copies inputGM into the kernel's
        outputGM1/outputGM2 (an SDMA copy on the card); A2 items travel by RDMA,
        which reaches only the registered window memory (localBuf/remoteBuf are
        "window addresses" in the item format). An item's address is an integer,
        read in this rank's own address space (``GmAddr.from_int``): outside the
        windows it can only name this rank's GM, so no other rank's is checked for.
        """
        if isinstance(dst.alloc, WindowAllocation):
            return
        platform = self._binding.state.rank_ctx.config.platform
        if platform.batch_write_format == "A2":
            raise InvalidCall(
                "foreign-memory",
                f"item {k}: the destination {dst!r} is not a communication window "
                f"(GetWindowsInAddr/GetWindowsOutAddr); on {platform.name} BatchWrite goes "
                "over RDMA, which reaches only window memory",
            )

    def _item_addr(self, k: int, what: str, value: int, nbytes: int) -> GmAddr:
        try:
            addr = GmAddr.from_int(value)
            if addr.is_null:
                raise HcclBoundsError(f"the {what} address is null")
            addr.check_range(nbytes, f"item {k}: {what}")
        except HcclBoundsError as exc:
            reason = exc.reason if exc.reason.startswith("item ") else f"item {k}: {exc.reason}"
            raise InvalidCall("bounds", reason) from None
        return addr

    def _check_a2_peer(self, k: int, remote: int, dst: GmAddr) -> str | None:
        """Atlas A2: remoteRankId names the destination window's owner; why the item breaks
        BatchWrite.md's rule of another server, if it does."""
        state = self._binding.state
        config = state.rank_ctx.config
        if not 0 <= remote < state.rank_dim:
            raise InvalidCall(
                "bad-argument",
                f"item {k}: remoteRankId {remote} is not a rank of the domain (rankDim "
                f"{state.rank_dim})",
                expected=f"< {state.rank_dim}",
                actual=remote,
            )
        peer = state.group.ranks[remote]
        if dst.rank != peer:
            raise InvalidCall(
                "bad-argument",
                f"item {k}: remoteRankId is {remote} but remoteBuf points into a window of "
                f"rank {dst.rank}",
                expected=peer,
                actual=dst.rank,
            )
        me, per = state.rank_ctx.rank, config.ranks_per_server
        if config.platform.batch_write_remote_only and me // per == peer // per:
            return (
                f"item {k}: remoteRankId {remote} names this rank"
                if peer == me
                else f"item {k}: rank {me} and rank {peer} are both on server {me // per} "
                f"(ranks_per_server={per})"
            )
        return None
