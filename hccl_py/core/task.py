"""Task descriptors: what one Prepare call asks the server to do."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

import torch

from ..ops import OpSpec, op_name, spec_of
from .constants import HcclCMDType, HcclDataType, HcclReduceOp, dtype_size
from .gm import GmAddr, as_elements


@dataclass(eq=False)
class Task:
    """One prepared task of one rank: op, buffers, counts and its place in the domain.

    ``rank`` and ``rank_dim`` are the rank's index and the size of the task's
    domain; ``seq`` is the task's position in the rank's sequence of tasks for
    that domain (tasks with the same ``seq`` on every rank form one collective).
    """

    op: HcclCMDType
    domain: object
    rank: int
    rank_dim: int
    handle: int
    seq: int
    send: GmAddr
    recv: GmAddr
    dtype: HcclDataType
    count: int = 0
    reduce_op: HcclReduceOp | None = None
    stride: int = 0
    repeat: int = 1
    send_counts: tuple[int, ...] | None = None
    sdispls: tuple[int, ...] | None = None
    recv_counts: tuple[int, ...] | None = None
    rdispls: tuple[int, ...] | None = None
    skip_local: bool = False
    #: The server's rounds per round of the kernel's task: ``rank_dim`` for a fine-grained
    #: AlltoAllV (tiling stepSize > 0), which the server runs step by step as they are
    #: committed, one peer pair per step (``repeat`` then counts steps); 1 otherwise.
    steps: int = 1
    deps: tuple[Task | PendingDep, ...] = field(default_factory=tuple)
    #: Which kernel launch of this rank prepared the task, counting the launches that use
    #: the domain (ranks must prepare the same tasks in the same launches).
    launch: int = 0
    #: The framework collective (``all_reduce`` ...) that prepared the task, if any.
    caller: str | None = None
    #: Byte layouts of every round per side, computed once (:mod:`hccl_py.core.layout`).
    layout_cache: dict = field(default_factory=dict, init=False, repr=False, compare=False)
    #: The emulator's per-round views of the buffers, made once per task (not sent anywhere).
    round_views: dict = field(default_factory=dict, init=False, repr=False, compare=False)
    #: One-sided handles (BatchWrite) the object returned before this task: only some ranks
    #: may make them, so ranks compare collective tasks by :attr:`collective_index`.
    one_sided_before: int = 0
    #: Commits of this task's rounds made on other cores than the sending one, by round: each
    #: gives the text a wait report adds while the sending core has not committed that round.
    commit_notes: dict = field(default_factory=dict, compare=False, repr=False)
    #: Name of the task's communication domain (a task's domain never changes).
    domain_name: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        name = getattr(self.domain, "name", None)
        self.domain_name = str(self.domain) if name is None else name

    def replaced(self, **changes: Any) -> Task:
        """A copy with ``changes`` to init fields, as ``dataclasses.replace`` makes it.

        It reads the fields in one pass (``dataclasses.replace`` looks each one up
        in the class's field table); the copy gets a fresh :attr:`layout_cache`.
        """
        init = {name: value for name, value in self.__dict__.items() if name in _INIT_FIELDS}
        return Task(**(init | changes))

    def __getstate__(self) -> dict:
        """What travels to other processes: not the commit notes (functions of this process)
        nor the round views (tensors of this process's memory)."""
        return self.__dict__ | {"commit_notes": {}, "round_views": {}}

    def commit_hint(self, round_idx: int) -> str:
        """`` [core X committed round r, but only the sending core's Commits ...]`` where a core
        that does not send committed round ``round_idx`` and the sending one has not, else ``""``."""
        note = self.commit_notes.get(round_idx)
        text = note() if note is not None else None
        return f" [{text}]" if text else ""

    @property
    def collective_index(self) -> int:
        """The task's position among the collective tasks of its kernel launch and domain."""
        return self.handle - self.one_sided_before

    @property
    def elem_size(self) -> int:
        """Element size in bytes of the task's data type."""
        return dtype_size(self.dtype)

    def memory(self, side: str) -> torch.Tensor:
        """The bytes (uint8) of the allocation that the ``side`` ("send"/"recv") buffer points into."""
        return (self.send if side == "send" else self.recv).alloc.data

    def typed(self, raw: torch.Tensor) -> torch.Tensor:
        """Raw bytes of this task's data reinterpreted as its element type."""
        return as_elements(raw, self.dtype)

    @property
    def spec(self) -> OpSpec:
        """The op table's entry for this task's op."""
        return spec_of(self.op)

    @property
    def name(self) -> str:
        """The AscendC name of the op."""
        return op_name(self.op)

    def describe(self) -> str:
        """A one-line description for error messages."""
        parts = [f"{HcclDataType(self.dtype).name.removeprefix('HCCL_DATA_TYPE_')}"]
        if self.spec.pairwise_counts:
            parts.append(
                f"sendCounts={list(self.send_counts)}, recvCounts={list(self.recv_counts)}"
            )
        else:
            parts.append(f"count={self.count}")
        if self.reduce_op is not None:
            parts.append(HcclReduceOp(self.reduce_op).name.removeprefix("HCCL_REDUCE_"))
        if self.stride:
            parts.append(f"strideCount={self.stride}")
        if self.steps > 1:
            parts.append(
                f"repeat={self.repeat // self.steps} in {self.repeat} fine-grained steps, "
                "the rounds that reports count"
            )
        else:
            parts.append(f"repeat={self.repeat}")
        core = f"{self.name}({', '.join(parts)})"
        return f"{self.caller}'s {core}" if self.caller else core

    @property
    def label(self) -> str:
        """The op as reports name it: ``AllGather``, or ``all_reduce's AllGather``."""
        return f"{self.caller}'s {self.name}" if self.caller else self.name

    def signature(self) -> tuple:
        """What every rank of the domain must agree on for this task position."""
        counts = None if self.send_counts is None else len(self.send_counts)
        return (self.op, self.dtype, self.count, self.reduce_op, self.stride, self.repeat, counts)


#: The fields of a :class:`Task` that its ``__init__`` takes (what :meth:`Task.replaced` may change).
_INIT_FIELDS = frozenset(f.name for f in fields(Task) if f.init)


@dataclass(frozen=True, eq=False)
class PendingDep:
    """An InterHcclGroupSync on handle ``handle`` of domain ``domain_name`` before that domain
    prepared it: the AI CPU server keeps the sync message and retries it until the handle
    is known (``GetServerInfoForSync``: ``HCCL_E_AGAIN``), so later tasks of the syncing
    domain wait for it; ``lookup`` finds its task once prepared."""

    domain_name: str
    handle: int
    lookup: Any

    @property
    def task(self) -> Task | None:
        """The task, once its domain's sending core prepared it."""
        return self.lookup(self.handle)


def resolved(dep: Task | PendingDep) -> Task | None:
    """The task an InterHcclGroupSync dependency names, None while it is not prepared."""
    return dep.task if isinstance(dep, PendingDep) else dep
