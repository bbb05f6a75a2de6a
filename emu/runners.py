"""What the scheduler's runners are: greenlets of one thread (the default), or OS threads.

Greenlets make a hand-off between ranks a switch of a fraction of a
microsecond. torch's autograd engine, though, keeps the backward pass that a
thread runs in that thread's state: two ranks whose backward passes wait for
each other (a collective inside a backward function) cannot share one
thread. ``HCCL_PY_EMU_RUNNERS=threads`` runs every rank and core as an OS
thread instead, as the emulator did before greenlets; a greenlet runner that
would block inside a backward pass is refused with an error that says so.

What torch keeps per thread beyond that (the dispatch and function mode
stacks, grad mode) travels with a greenlet runner: :func:`take_torch_state`
when it hands the baton on, :func:`put_torch_state` when it runs again.
"""

from __future__ import annotations

import os
import threading
from typing import Protocol

import torch

#: Environment variable: ``greenlets`` (default) or ``threads``.
RUNNERS_ENV = "HCCL_PY_EMU_RUNNERS"
RUNNER_KINDS = ("greenlets", "threads")


def runner_kind() -> str:
    """``greenlets`` or ``threads``, from :data:`RUNNERS_ENV`; ValueError for anything else."""
    kind = os.environ.get(RUNNERS_ENV, "").strip().lower() or RUNNER_KINDS[0]
    if kind not in RUNNER_KINDS:
        raise ValueError(f"{RUNNERS_ENV} must be one of {', '.join(RUNNER_KINDS)}, not {kind!r}")
    return kind


def inside_backward() -> bool:
    """Whether the calling thread is running an autograd backward pass."""
    return torch._C._current_graph_task_id() != -1


class _HasThread(Protocol):
    thread: threading.Thread | None


class Spawned:
    """A greenlet runner as its spawner sees it: ``join``/``is_alive`` like a thread, and its OS thread's ``ident``."""

    def __init__(self, world: _HasThread) -> None:
        self._world = world
        self.ended = threading.Event()

    @property
    def ident(self) -> int | None:
        """The ident of the OS thread that runs the runner (the world's thread)."""
        thread = self._world.thread
        return None if thread is None else thread.ident

    def is_alive(self) -> bool:
        """Whether the runner has not ended yet."""
        return not self.ended.is_set()

    def join(self, timeout: float | None = None) -> None:
        """Wait (at most ``timeout`` seconds) until the runner ended."""
        self.ended.wait(timeout)


def take_torch_state() -> tuple[bool, list, list] | None:
    """Take the calling runner's torch state off the thread: its mode stacks, its grad mode.

    None when there is nothing to take (no mode, grad enabled), the common case.
    """
    grad = torch.is_grad_enabled()
    n_dispatch = torch._C._len_torch_dispatch_stack()
    n_function = torch._C._len_torch_function_stack()
    if grad and not n_dispatch and not n_function:
        return None
    dispatch = [torch._C._pop_torch_dispatch_stack(None) for _ in range(n_dispatch)]
    function = [torch._C._pop_torch_function_stack() for _ in range(n_function)]
    torch._C._set_grad_enabled(True)
    return grad, dispatch, function


def put_torch_state(state: tuple[bool, list, list] | None) -> None:
    """Put back what :func:`take_torch_state` took."""
    if state is None:
        return
    grad, dispatch, function = state
    for mode in reversed(function):
        torch._C._push_on_torch_function_stack(mode)
    for mode in reversed(dispatch):
        torch._C._push_on_torch_dispatch_stack(mode)
    torch._C._set_grad_enabled(grad)
