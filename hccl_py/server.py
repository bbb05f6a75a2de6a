"""The server protocol: what a client sends, whichever backend executes it.

On hardware the kernel-side client writes messages that a server (the AI CPU
or the CCU) executes. hccl_py keeps that split: :class:`hccl_py.client.Hccl`
validates calls and keeps the handle bookkeeping; a :class:`Server` moves the
data. One implementation exists per backend (``emu.world`` in one process,
``hccl_py.backends.dist`` over torch.distributed for gloo and HCCL).

A :class:`Backend` starts the ranks of a run and gives each one its server.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

from .context import Config
from .task import Task


class Server(ABC):
    """Executes the tasks that the clients of one rank (or of a whole emulated world) send."""

    @abstractmethod
    def submit(self, task: Task) -> None:
        """A Prepare call of the sending core: the task exists, no round may run yet."""

    @abstractmethod
    def commit(self, task: Task, round_idx: int) -> None:
        """Round ``round_idx`` of ``task`` may run once every rank of its domain committed it."""

    @abstractmethod
    def wait(self, task: Task, round_idx: int) -> None:
        """Block until round ``round_idx`` of ``task`` finished on this rank; raise on failure."""

    @abstractmethod
    def finished(self, task: Task) -> int:
        """How many rounds of ``task`` have finished on this rank (never blocks)."""

    def finalize(self, group: Any, rank: int, launch: int, n_tasks: int) -> None:  # noqa: B027
        """Domain rank ``rank`` finalized kernel launch ``launch`` after ``n_tasks`` tasks (optional)."""


class Backend(ABC):
    """Starts the ranks of one run and returns their results."""

    name: str = ""

    @abstractmethod
    def run(
        self, fn: Callable[..., Any], args: tuple, world_size: int | None, config: Config
    ) -> list[Any]:
        """Run ``fn(*args)`` once per rank; return the per-rank results or raise WorldError."""
