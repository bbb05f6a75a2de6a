"""The server protocol: what a client sends, whichever backend executes it.

On hardware the kernel-side client writes messages that a server (the AI CPU
or the CCU) executes. hccl_py keeps that split: :class:`hccl_py.client.Hccl`
validates calls and keeps the handle bookkeeping; a :class:`Server` moves the
data. One implementation exists per backend (``hccl_py.backends.emu``, from the ``emu/`` folder, in one process,
``hccl_py.backends.dist`` over torch.distributed for gloo and HCCL).

A :class:`Backend` starts the ranks of a run and gives each one its server.
"""

from __future__ import annotations

import contextlib
import sys
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

import numpy as np

from ..core.config import Config
from ..core.constants import HcclCMDType
from ..core.errors import HcclError
from ..core.gm import Allocation
from ..core.group import Group
from ..core.task import Task
from .agreement import global_rank
from .remote_writes import ChannelKey, Copies, run_copies
from .windows import HcclNoWindowsError


class Tasks(ABC):
    """The task hooks every backend implements: every Prepare, Commit, Wait, Query, Finalize."""

    #: The op types whose rounds this server executes (its executor's table).
    ops: frozenset[HcclCMDType] = frozenset()

    @abstractmethod
    def submit(self, task: Task) -> None:
        """A Prepare call of the sending core: the task exists, no round may run yet."""

    @abstractmethod
    def commit(self, task: Task, rounds: range) -> None:
        """This rank's next ``rounds`` of ``task`` (one Commit, or every round of a
        ``Prepare[True]``): each may run once every rank of its domain committed it."""

    @staticmethod
    def unsupported(task: Task, backend: str) -> HcclError:
        """The error of a task whose op is not one of :attr:`ops` (of the backend ``backend``)."""
        return HcclError(
            f"{task.name} is not supported by the {backend} backend",
            rank=global_rank(task),
            op=task.label,
        )

    def submit_commit(self, task: Task, rounds: range) -> None:
        """A ``Prepare[True]``'s :meth:`submit` and its first Commits (``rounds``) in one call:
        the same as the two in a row (a server may take them under one lock)."""
        self.submit(task)
        self.commit(task, rounds)

    @abstractmethod
    def wait(self, task: Task, round_idx: int) -> None:
        """Block until round ``round_idx`` of ``task`` finished on this rank; raise on failure."""

    @abstractmethod
    def finished(self, task: Task) -> int:
        """How many rounds of ``task`` have finished on this rank (never blocks)."""

    def finalize(  # noqa: B027
        self, group: Group, rank: int, launch: int | None, n_tasks: int
    ) -> None:
        """Domain rank ``rank`` finalized kernel launch ``launch`` after ``n_tasks`` tasks.

        ``launch`` is None for a launch whose tasks were all one-sided (BatchWrite,
        AlltoAllvWrite): ranks do not match those, so such a launch is none of the
        domain's numbered launches.
        """


class Windows:
    """Windows and one-sided copies: GetWindowsInAddr/OutAddr, BatchWrite, AlltoAllvWrite.

    Optional: the defaults are "no windows" (the first window call names
    :attr:`no_windows`) and copies made at once, in order.
    """

    #: Why this backend has no windows (None: it has them); named at the first window call.
    no_windows: str | None = "this backend does not provide communication windows"
    #: Whether an unchanged flag poll may end in a deadlock report: only where every rank is
    #: a thread of this process (a poll cannot see ranks of other processes wait).
    polls_detect_deadlock = False

    def window(self, domain: str, rank: int, kind: str) -> Allocation:
        """Global rank ``rank``'s window ``kind`` ("In"/"Out") of ``domain``; raises without windows."""
        raise HcclNoWindowsError(f"GetWindows{kind}Addr: {self.no_windows}")

    def window_at(self, base: int) -> Allocation | None:
        """The window whose integer base address is ``base`` (for ``GmAddr.from_int``)."""
        return None

    def write_items(
        self,
        task: Task,
        copies: list[tuple[Any, Any, int]],
        queue: tuple[int, int] = (0, 0),
        epoch: int = 0,
    ) -> None:
        """Run one BatchWrite: copy ``nbytes`` from each source to each destination address.

        The addresses are checked already. ``queue`` is the message queue it went on: the
        index of the kernel's context (each Hccl object's InitV2 takes its message area from
        its context) and ``queueID + blockIdx * queueNum`` (0 with one queue); the server
        runs one queue's BatchWrites in order, and those of different queues in no order;
        ``epoch`` is how many QueueBarrier[ALL]s the queue had sent (it lands after every
        write of the rank and context of a lower epoch). The default copies at once, in
        order, which is what any backend whose windows are this process's memory needs (the
        client posts a write behind a barrier only once every queue sent it).
        """
        run_copies(copies)

    def hold_items(self, task: Task) -> None:
        """BatchWrite ``task`` waits behind a QueueBarrier[ALL] that not every queue sent yet;
        the client reads its items and hands them to :meth:`write_items` at the release. For
        reports (the emulator's race check names this call); the default does nothing."""

    def post_writes(self, channel: ChannelKey, copies: Copies) -> None:
        """Hcomm: the doorbell of ``channel`` rang for ``copies`` (checked already, in order).

        They land in order (URMA_DEFAULT_CFG: strongly ordered, fenced). The
        default lands them at once, which any backend whose windows are this
        process's memory may do (a legal timing of a non-blocking write).
        """
        run_copies(copies)

    def hcomm_posted(self, channel: ChannelKey, call: str, copies: Copies) -> None:  # noqa: B027
        """Hcomm: ``call`` posted ``copies`` on ``channel`` (checked already; rung or not).

        A hook for the emulator's race check (the ReadNbi destinations that only a
        Drain orders); the copies go to :meth:`post_writes` at the doorbell.
        """

    def drain_channel(self, channel: ChannelKey) -> None:  # noqa: B027
        """Hcomm ``Drain``: block until every write posted on ``channel`` landed."""

    def flush_writes(  # noqa: B027
        self, domain: str | None = None, rank: int | None = None, handle: int | None = None
    ) -> None:
        """Finish the BatchWrites of domain rank ``rank`` that are still pending (a Wait on
        ``handle``, which orders that one and those before it)."""


#: The ``key`` of a framework collective's exchange of its arguments: each rank's next
#: exchange in the domain (a server numbers them in call order, as a process group orders
#: its calls). Every other key names a meeting over windows (AlltoAllvWrite's Wait).
EXCHANGE = "framework exchange"
#: The most data bytes a framework op carries in its exchange, beside its record.
MAX_EXCHANGE_BYTES = 1 << 20
#: The most bytes one rank's payload in an exchange holds (:meth:`Meetings.room`): up to
#: :data:`MAX_EXCHANGE_BYTES` of data, and room for the record beside them.
EXCHANGE_ROOM_BYTES = MAX_EXCHANGE_BYTES + (64 << 10)
#: The most bytes a framework op other than an all-gather carries in its exchange, its record
#: included: its rows hold each rank's whole input, which every rank receives.
NARROW_EXCHANGE_BYTES = 4096
#: The largest all-reduce input whose exchange rows widen to carry it when its reductions are
#: exact: an exact all-reduce gathers every rank's input up to that size anyway (at it, the
#: gloo backend's task would split into an all-to-all and an all-gather).
WIDE_REDUCE_BYTES = 64 << 10


#: What an exchange gives each rank: its payload's bytes, or a view of them where the process
#: backends received them (data that rides along is not copied again).
Payload = bytes | memoryview


class Spliced:
    """A payload to send that is a record and data riding after a NUL byte, kept as two parts
    until they are written where they travel (:func:`put`): the data, up to a MiB, is not
    joined to its record in a new bytes object first. Its ``len`` is the joined length."""

    __slots__ = ("record", "data", "_length")

    def __init__(self, record: bytes, data: memoryview) -> None:
        self.record, self.data = record, data
        self._length = len(record) + 1 + data.nbytes

    def __len__(self) -> int:
        return self._length

    def __bytes__(self) -> bytes:
        return b"".join((self.record, b"\0", self.data))


#: What a rank sends in an exchange: its payload's bytes, or its record and data apart.
Outgoing = bytes | Spliced


def put(payload: Outgoing, out: np.ndarray) -> int:
    """Write as much of ``payload`` as fits into the uint8 array ``out``, from its start; the
    number of bytes written."""
    if type(payload) is not Spliced:
        kept = min(len(payload), out.size)
        out[:kept] = np.frombuffer(payload, np.uint8, count=kept)
        return kept
    at = 0
    for part in (payload.record, b"\0", payload.data):
        kept = min(len(part) if type(part) is bytes else part.nbytes, out.size - at)
        out[at : at + kept] = np.frombuffer(part, np.uint8, count=kept)
        at += kept
    return at


def record_of(payload: Outgoing) -> bytes:
    """The record of a payload to send, without the data that rides after it."""
    if type(payload) is Spliced:
        return payload.record
    return payload[: record_length(payload)]


class Met(list):
    """Every member's payloads of one meeting where the members share one process: the same
    object for every member, which keeps what the first member read from them (``reading``,
    set by that reader) for the others. Nobody may change the list."""

    __slots__ = ("reading",)


#: This rank's pieces of an exchange's data, one per group rank, made only when the exchange
#: carries them (:meth:`Meetings.meet_pieces`).
Pieces = Callable[[], list[memoryview]]


def joined(payloads: list[Payload], out: np.ndarray | None = None) -> np.ndarray:
    """``payloads`` (received rows or pieces) one after another, in one new uint8 array, or
    written into the uint8 array ``out`` of their total length."""
    arrays = [np.frombuffer(p, np.uint8) for p in payloads]
    if not arrays:
        return np.empty(0, np.uint8) if out is None else out
    return np.concatenate(arrays, out=out)


#: How far into a received view :func:`record_length` looks for the record's end at first,
#: then next (records are short: a view of a wide row is not copied whole to find it).
RECORD_SCAN_BYTES = (1 << 10, 64 << 10)


def record_length(payload: Payload) -> int:
    """The length of the record (JSON text, which never holds a NUL byte) at the start of an
    exchanged payload: a framework collective's arguments or a kernel task's descriptor, each
    optionally followed by a NUL byte and the data that rides along."""
    if isinstance(payload, memoryview):
        for scan in RECORD_SCAN_BYTES:
            end = bytes(payload[:scan]).find(b"\0")
            if end >= 0 or len(payload) <= scan:
                break
        else:
            end = bytes(payload).find(b"\0")
    else:
        end = payload.find(b"\0")
    return len(payload) if end < 0 else end


class Meetings:
    """Direct meetings of the ranks of a domain, outside any task: :meth:`meet`, and for an
    exchange that carries a framework op's data, :meth:`room`, :meth:`widen`,
    :meth:`exact_reductions`, and :meth:`predict` with :meth:`meet_pieces`.

    Needed by framework collectives, which first exchange what every rank was
    asked to do (:func:`hccl_py.framework._common.agree`, at key
    :data:`EXCHANGE`), and by AlltoAllvWrite's Wait, which needs every peer's
    writes into this rank's window to be done (keyed by the write's number in
    its domain). Optional: without it framework collectives exchange their
    descriptions with two AllGather tasks, and AlltoAllvWrite is refused as
    windows are.
    """

    #: Whether the ranks share one address space (the emulator: threads of one process), where
    #: one tensor may be one buffer for several ranks: a framework op whose output is such a
    #: buffer keeps its task, whose check reports it (:mod:`hccl_py.sanitizer.sharing`).
    ranks_share_memory = False

    def meet(
        self, group: Group, rank: int, key: str, what: str, payload: Outgoing = b""
    ) -> list[Payload] | None:
        """Domain rank ``rank`` arrives at ``key`` in ``group``; block until every rank did.

        Returns every rank's ``payload`` in domain-rank order, or None where
        this server cannot meet directly: at :data:`EXCHANGE` the caller then
        exchanges the payloads with two AllGather tasks like any collective.
        A meeting over windows also waits until the copies into the windows
        landed; without windows (the default) it raises HcclNoWindowsError.
        ``what`` names the meeting in reports: the framework collective
        (``all_reduce``), or who waits for what.
        """
        if key == EXCHANGE:
            return None
        raise HcclNoWindowsError(f"{what}: {self.no_windows}")

    def room(self, group: Group) -> int:
        """How many bytes the next :data:`EXCHANGE` of ``group`` carries in one call, its
        arguments included: a framework op whose data fits beside them sends it there and
        runs without a task of its own (:mod:`hccl_py.framework._carry`). A hint: every rank
        decides from what the exchange gave every rank. 0, the default: no room."""
        return 0

    def widen(self, group: Group, need: int) -> None:  # noqa: B027 - optional hook
        """Every rank of ``group`` asks alike, after an exchange, for room for ``need`` bytes in
        the next one (computed from what that exchange gave every rank)."""

    def meet_pieces(
        self, group: Group, rank: int, what: str, payload: Outgoing, pieces: Pieces | None
    ) -> tuple[list[Payload], bool] | None:
        """:meth:`meet` at :data:`EXCHANGE`, where this rank also offers its pieces of a framework
        all-to-all's data, one per group rank: every rank's payload and whether every rank's
        piece for this rank came after it (behind a NUL byte), which only an exchange that
        :meth:`predict` asked for may carry (``pieces`` makes them then, in the exchange's
        turn); where not every rank's came, no payload holds a piece (a piece differs from rank
        to rank). The default carries none."""
        got = self.meet(group, rank, EXCHANGE, what, payload)
        return None if got is None else (got, False)

    def predict(self, group: Group, need: int) -> None:  # noqa: B027 - optional hook
        """Every rank of ``group`` asks alike, after an exchange, for the next one as an
        all-to-all whose blocks hold ``need`` bytes: a record and one piece of data
        (:meth:`meet_pieces`; computed from what that exchange gave every rank)."""

    def exact_reductions(self, group: Group) -> bool:
        """Whether this server reduces ``group``'s data as the emulator does (in rank order,
        :func:`hccl_py.server.reduce.reduce_ranks`): only then may a framework reduction ride
        in its exchange and be reduced by each rank. False, the default."""
        return False


class Lifecycle:
    """Life-cycle hooks of a run, a kernel launch and a core: every backend may implement them.

    The defaults do nothing. The emulator uses the scopes for its window race
    check and ``serial`` for its world lock; the process backends use ``start``,
    ``on_new_group``, ``forget`` and ``close`` for their process groups.
    """

    #: Held around every client call (a context manager). The emulator's ranks are threads
    #: of one process: holding its world lock lets one rank's call run without handing the
    #: interpreter to another rank at each torch operation (a call that blocks releases it).
    #: Processes need no such lock.
    serial: contextlib.AbstractContextManager = contextlib.nullcontext()

    def start(self, world: Group) -> None:  # noqa: B027 - optional hook
        """A run starts on this rank with ``world`` as its world domain."""

    def on_new_group(self, group: Group) -> None:  # noqa: B027 - optional hook
        """``hp.new_group`` created ``group`` on this rank (every rank calls it, in the same order)."""

    def launch_returned(self, group: Group, rank: int, launch: int) -> None:  # noqa: B027
        """Domain rank ``rank`` returned from kernel launch ``launch`` of ``group`` (no error).

        It will not wait for or query that launch's tasks again: a server may
        forget them (and release their buffers) once they finished.
        """

    def rank_returned(self, rank: int) -> None:  # noqa: B027 - optional hook
        """Global rank ``rank`` returned from its function: it submits and commits no more."""

    def kernel_scope(self, rank: int) -> contextlib.AbstractContextManager:
        """Around a kernel launch of global rank ``rank`` (its cores start and return inside)."""
        return contextlib.nullcontext()

    def kernel_buffers(self, rank: int, buffers: list) -> contextlib.AbstractContextManager:
        """Around a kernel launch of global rank ``rank``: ``buffers`` are the GM allocations of
        its tensor arguments, which its cores may poll (flags between the cores of a rank; none
        for a kernel of one core)."""
        return contextlib.nullcontext()

    def core_scope(self, rank: int, who: str = "") -> contextlib.AbstractContextManager:
        """Around one core's run of a kernel of global rank ``rank``, in the core's thread;
        ``who`` names the core in reports (``AIV core 1``; empty for a kernel of one core)."""
        return contextlib.nullcontext()

    def alone_scope(self, rank: int) -> Any:
        """Around a kernel launch of one core of global rank ``rank`` (the rank's own thread runs
        it): ``kernel_buffers(rank, [])`` around ``kernel_scope(rank)``, with the core's
        ``core_scope(rank)`` as its ``core`` (a server may keep one such object per rank)."""
        return OneCoreLaunch(self, rank)

    def kernel_call(self) -> None:  # noqa: B027 - optional hook
        """A kernel thread is in an hccl_py call that ``serial`` does not wrap (a CrossCore flag):
        it is not stuck in its own code (see :mod:`hccl_py.server.stalls`)."""

    def forget(self) -> None:  # noqa: B027 - optional hook
        """Drop what this rank published for the run (no rank checks it any more)."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release the server's threads and resources at the end of the run."""


class OneCoreLaunch:
    """:meth:`Lifecycle.alone_scope`'s scopes, as nested ``with`` statements enter them."""

    __slots__ = ("buffers", "kernel", "core")

    def __init__(self, server: Lifecycle, rank: int) -> None:
        self.buffers = server.kernel_buffers(rank, [])
        self.kernel = server.kernel_scope(rank)
        self.core = server.core_scope(rank, "")

    def __enter__(self) -> None:
        self.buffers.__enter__()
        try:
            self.kernel.__enter__()
        except BaseException:
            self.buffers.__exit__(*sys.exc_info())  # (no launch scope swallows an error)
            raise

    def __exit__(self, *exc: Any) -> bool:
        try:
            suppressed = bool(self.kernel.__exit__(*exc))
        except BaseException:
            if self.buffers.__exit__(*sys.exc_info()):
                return True
            raise
        return bool(self.buffers.__exit__(*((None,) * 3 if suppressed else exc))) or suppressed


class Server(Tasks, Windows, Meetings, Lifecycle):
    """Executes the tasks that the clients of one rank (or of a whole emulated world) send.

    Its parts: :class:`Tasks` (required), :class:`Windows`, :class:`Meetings` and
    :class:`Lifecycle` (optional, with defaults).
    """


class Backend(ABC):
    """Starts the ranks of one run and returns their results."""

    name: str = ""

    @abstractmethod
    def run(
        self, fn: Callable[..., Any], args: tuple, world_size: int | None, config: Config
    ) -> list[Any]:
        """Run ``fn(*args)`` once per rank; return the per-rank results or raise WorldError."""
