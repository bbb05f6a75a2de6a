"""What Commit, Wait, Query and Finalize do with a handle, by the lifecycle of its op.

The op table names each op's lifecycle (:attr:`hccl_py.ops.OpSpec.lifecycle`); a
handle takes it at Prepare (``"fine-grained"`` for an AlltoAllV whose tiling has
stepSize > 0). ``HandleControl.commit``/``wait``/``query``/``finalize`` check what every
handle shares (the object is usable, the handle exists, this core committed the
round) and leave the rest to the handle's lifecycle, so that an op with a new kind
of handle adds one class here instead of a branch in each call.
"""

from __future__ import annotations

from typing import Any, Protocol

from ..core.constants import HCCL_SUCCESS
from ..server.protocol import Server
from .handle import Handle
from .sender import calling_core
from .state import ClientState


class Steps(Protocol):
    """Step counting of fine-grained handles (:class:`.finegrained.FineGrainedSteps`)."""

    def commit_steps(self, info: Handle) -> range: ...
    def wait(self, info: Handle, h: int) -> int: ...


class Writes(Protocol):
    """AlltoAllvWrite's Commit and Wait (:class:`.half_alltoallv.WindowWriter`)."""

    def commit(self, h: int) -> None: ...
    def wait(self, h: int) -> None: ...


class Control(Protocol):
    """What a lifecycle calls on the client (:class:`.control.HandleControl` has it)."""

    server: Server
    state: ClientState
    steps: Steps
    writes: Writes

    def ok(self, value: Any = ...) -> Any: ...
    def not_committed(self, info: Handle, h: int) -> int: ...
    def wait_round(self, info: Handle, h: int) -> int: ...
    def queue_num(self) -> int: ...
    def note_local_commit(self, core: Any, h: int, round_idx: int) -> None: ...


class Lifecycle:
    """What every lifecycle shares: a Wait beyond this core's Commits returns -1 at once."""

    #: Whether the handle is a task of the server's queue (Finalize counts those).
    queued = True

    def wait(self, client: Control, info: Handle, h: int) -> int:
        """This core's Wait of its next committed round."""
        if info.waits >= info.commits:
            return client.not_committed(info, h)
        return self._wait(client, info, h)

    def _wait(self, client: Control, info: Handle, h: int) -> int:
        raise NotImplementedError


class Rounds(Lifecycle):
    """The server runs each committed round; Wait and Query ask it (the collectives)."""

    def commit(self, client: Control, info: Handle, h: int, n: int = 1) -> None:
        """This core's Commits of the next ``n`` rounds."""
        first = info.commits
        info.commits += n
        self._send(client, info, h, range(first, info.commits))

    @staticmethod
    def _send(client: Control, info: Handle, h: int, rounds: range) -> None:
        """Hand server rounds ``rounds`` of ``info``'s task to the server."""
        if info.task is not None:
            if info.unsent:  # a Prepare[True]: the task and its first rounds in one call
                info.unsent = False
                client.server.submit_commit(info.task, rounds)
            else:
                client.server.commit(info.task, rounds)
            return
        core = calling_core()  # not the sending core: counted here, named if a round then hangs
        for round_idx in rounds:
            client.note_local_commit(core, h, round_idx)

    def _wait(self, client: Control, info: Handle, h: int) -> int:
        return client.wait_round(info, h)

    def finished(self, client: Control, info: Handle, h: int) -> int:
        """Query: how many rounds finished."""
        task = info.task or client.state.polled_task(h, calling_core())
        return 0 if task is None else client.server.finished(task)

    def drain(self, client: Control, info: Handle, h: int) -> None:
        """Finalize<true> on the sending core: wait until the task's last server round (a
        fine-grained task's last step) finished."""
        client.server.wait(info.task, info.task.repeat - 1)


class FineGrained(Rounds):
    """Fine-grained AlltoAllV (tiling stepSize > 0): Commit and Wait advance by steps.

    The server's rounds of its task are the steps (``Task.steps``): each Commit lets
    the server run ``stepSize`` more of them, as the official server runs each step
    once it is committed, and Query counts finished steps (the finished turns).
    """

    def commit(self, client: Control, info: Handle, h: int, n: int = 1) -> None:
        first = info.steps_committed
        for _ in range(n):
            client.steps.commit_steps(info)
        if info.steps_committed > first:
            self._send(client, info, h, range(first, info.steps_committed))

    def wait(self, client: Control, info: Handle, h: int) -> int:
        return client.steps.wait(info, h)


class BatchWrites(Lifecycle):
    """BatchWrite: one-sided copies, always committed at Prepare; no task of the server's queue."""

    queued = False

    def commit(self, client: Control, info: Handle, h: int, n: int = 1) -> None:
        info.commits += n

    def _wait(self, client: Control, info: Handle, h: int) -> int:
        if not client.queue_num():
            client.server.flush_writes(client.state.group.name, client.state.rank, h)
        info.waits += 1
        return client.ok(HCCL_SUCCESS)

    def finished(self, client: Control, info: Handle, h: int) -> int:
        return info.repeat

    def drain(self, client: Control, info: Handle, h: int) -> None:
        """Finalize leaves BatchWrite copies to the receivers' flag polls."""


class WindowWrites(BatchWrites):
    """AlltoAllvWrite (Ascend 950): Commit sends the copies, Wait meets every peer."""

    def commit(self, client: Control, info: Handle, h: int, n: int = 1) -> None:
        for _ in range(n):
            info.commits += 1
            client.writes.commit(h)

    def _wait(self, client: Control, info: Handle, h: int) -> int:
        client.writes.wait(h)
        info.waits += 1
        return client.ok(HCCL_SUCCESS)

    def drain(self, client: Control, info: Handle, h: int) -> None:
        if not info.waits:
            client.writes.wait(h)


class ComputeOnly(Lifecycle):
    """A task under the tiling's debugMode 1 (HCCL_ONLY_COMPUTE): the client writes its
    messages without waiting for anything and the server does not communicate, so no data
    moves; Wait returns 0 once the round is committed and the finished count Query reads
    stays 0 (hccl_aicpu_impl.h: ``debugMode_ != HCCL_ONLY_COMPUTE`` in every poll)."""

    queued = False

    def commit(self, client: Control, info: Handle, h: int, n: int = 1) -> None:
        if not info.step_size:
            info.commits += n
            return
        for _ in range(n):  # a fine-grained handle counts its steps alike
            client.steps.commit_steps(info)

    def wait(self, client: Control, info: Handle, h: int) -> int:
        if not info.step_size:
            return super().wait(client, info, h)
        if info.steps_waited >= info.steps_committed:
            return client.not_committed(info, h)
        info.steps_waited += info.step_size
        info.waits = -(-info.steps_waited // client.state.rank_dim)
        return client.ok(HCCL_SUCCESS)

    def _wait(self, client: Control, info: Handle, h: int) -> int:
        info.waits += 1
        return client.ok(HCCL_SUCCESS)

    def finished(self, client: Control, info: Handle, h: int) -> int:
        return 0

    def drain(self, client: Control, info: Handle, h: int) -> None:
        """Finalize waits for nothing."""


#: Lifecycle name (the op table's, plus "fine-grained" and "compute-only") -> what the client
#: does.
LIFECYCLES = {
    "compute-only": ComputeOnly(),
    "rounds": Rounds(),
    "fine-grained": FineGrained(),
    "batch-write": BatchWrites(),
    "window-write": WindowWrites(),
}
