"""Per-thread execution context: which rank (and which core of a kernel) is running.

``hp.run`` gives every rank a :class:`RankContext`; ``hp.launch`` gives every
core a :class:`CoreContext`. Module-level helpers (``get_rank``,
``GetBlockIdx`` ...) read them, so user code needs no handle to pass around.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch

from ..core.buffer_numbers import BufferNumbers
from ..core.config import Config, c_int
from ..core.current import bind_rank, current_rank, locked
from ..core.errors import HcclWarning
from ..core.group import Group, world
from ..server.blocking import Blocker
from ..server.protocol import Server


class RankContext:
    """Everything one rank's threads share: its rank, the server, options, counters."""

    def __init__(
        self,
        rank: int,
        world_size: int,
        config: Config,
        server: Server,
        blocker: Blocker,
        device: torch.device | None = None,
        thread_init: Callable[[], None] | None = None,
    ) -> None:
        self.rank = rank
        self.world_size = world_size
        self.config = config
        self.server = server
        #: The server's serial lock (:attr:`Server.serial <hccl_py.server.protocol.Server.serial>`),
        #: fixed for the server's life: every client call takes it, so it is an attribute.
        self.serial: contextlib.AbstractContextManager = server.serial
        #: ``serial_run(fn, *args)``: ``fn(*args)`` holding ``serial``, in one frame where the
        #: lock has a ``held_call`` of its own (the emulator's world lock).
        self.serial_run: Callable[..., Any] = getattr(server.serial, "held_call", None) or (
            functools.partial(locked, server.serial)
        )
        self.blocker = blocker
        self.device = device or torch.device("cpu")
        #: Called in every thread that binds this context (e.g. to make the rank's NPU current).
        self.thread_init = thread_init
        self.world_group = world(world_size)
        #: The groups this rank may name, by name: the world and those its new_group made.
        self.groups: dict[str, Group] = {self.world_group.name: self.world_group}
        self._seq: Counter[str] = Counter()
        self._group_count: Counter[tuple[int, ...]] = Counter()
        self._lock = threading.Lock()
        #: Kernel launches per domain name, and AlltoAllvWrite tasks per domain name: the
        #: numbers that tell one launch's (one write's) meetings from the next.
        self.launches: Counter[str] = Counter()
        self.window_writes: Counter[str] = Counter()
        #: The HcclWarnings this rank's calls gave, in order (``hp.run(...).warnings``).
        self.warnings: list[HcclWarning] = []
        #: Its buffers' numbers in this run: its own address space, whatever other ranks and
        #: other runs (nested, concurrent, explored schedules) allocate.
        self.buffers = BufferNumbers()
        #: Asynchronous framework ops not waited yet: id -> what and where it was started.
        self.open_work: dict[int, str] = {}

    def next_seq(self, group: Group) -> int:
        """The position of the next task this rank sends in ``group``."""
        with self._lock:
            seq = self._seq[group.name]
            self._seq[group.name] += 1
            return seq

    def new_group(self, ranks: Sequence[int]) -> Group:
        """A sub-domain; every rank that calls it with the same ranks gets an equal group."""
        given = ranks
        listed = not isinstance(ranks, (str, bytes)) and isinstance(ranks, Iterable)
        ranks = tuple(ranks) if listed else ()
        if not listed or not all(c_int(r) is not None for r in ranks):
            raise ValueError(
                f"new_group needs a sequence of distinct int ranks in 0..{self.world_size - 1}, "
                f"not {given!r}"
            )
        ranks = tuple(int(r) for r in ranks)
        bad = [r for r in ranks if not 0 <= r < self.world_size]
        if not ranks or bad or len(set(ranks)) != len(ranks):
            raise ValueError(
                f"new_group({list(ranks)}): ranks must be distinct and in 0..{self.world_size - 1}"
            )
        with self._lock:
            k = self._group_count[ranks]
            self._group_count[ranks] += 1
        suffix = f"#{k}" if k else ""
        group = Group(ranks, f"group_{'_'.join(map(str, ranks))}{suffix}")
        self.server.on_new_group(group)
        self.groups[group.name] = group
        return group

    def unknown_group(self, group: Group) -> str | None:
        """Why ``group`` names no communicator here (made by hand, not by new_group), or None."""
        if self.groups.get(group.name) == group:
            return None
        return (
            f"{group!r} is not a group this rank created: pass the object hccl_py.new_group "
            "returned (or hccl_py.world_group()); a Group made by hand names no communicator"
        )

    def check_group(self, group: Group, where: str) -> None:
        """A ValueError unless ``group`` is the world or one this rank's new_group returned
        (an ``hp.Group`` made by hand has no process group on gloo and hccl) and this rank is
        a member."""
        problem = self.unknown_group(group)
        if problem:
            raise ValueError(f"{where}: {problem}")
        if group.rank_of(self.rank) is None:
            raise ValueError(f"{where}: rank {self.rank} is not a member of {group!r}")


_core: contextvars.ContextVar[Any] = contextvars.ContextVar("hccl_py_core", default=None)


def set_rank_context(ctx: RankContext | None) -> None:
    """Bind ``ctx`` to the calling thread (None unbinds)."""
    bind_rank(ctx)
    if ctx is not None and ctx.thread_init is not None:
        ctx.thread_init()


#: The calling thread's rank context (a :class:`RankContext`); raises outside ``hp.run`` when
#: ``required`` (the default). The same function as :func:`hccl_py.core.current.current_rank`:
#: every framework call and launch asks several times, and a wrapper doubled the cost.
current_rank_context = current_rank


#: Bind a kernel core context to the calling runner (None unbinds): the context variable's own
#: setter (every core run sets and resets it; the token it returns is not needed).
set_core_context: Callable[[Any], Any] = _core.set


#: The calling runner's core context, or None outside a kernel (``current_core_context()``:
#: the context variable's own getter, asked at every client call).
current_core_context: Callable[[], Any] = _core.get


def core_name(core: Any) -> str:
    """``AIV core 1``: a core of a running kernel (a ``CoreContext``), as reports name it."""
    return f"{core.kind._name_} core {core.block_idx}"  # (``name`` is two Python calls)


def get_rank() -> int:
    """This rank's index in the world."""
    return current_rank_context().rank


def get_world_size() -> int:
    """Number of ranks in the world."""
    return current_rank_context().world_size


def device() -> torch.device:
    """The device this rank's tensors live on (CPU on the emulator and gloo, the NPU on HCCL)."""
    return current_rank_context().device


def new_group(ranks: Sequence[int]) -> Group:
    """A communication sub-domain of the given global ranks (call it on every rank)."""
    return current_rank_context().new_group(ranks)


def world_group() -> Group:
    """The domain of all ranks (``hccl_world_group``)."""
    return current_rank_context().world_group
