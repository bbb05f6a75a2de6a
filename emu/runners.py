"""What the scheduler's runners are: OS threads (the default), or greenlets of one thread.

Either way the scheduler runs one runner at a time, in the order it decides:
the same program gives the same interleaving with both kinds.
``HCCL_PY_EMU_RUNNERS=greenlets`` makes a hand-off between ranks a switch of a
fraction of a microsecond instead of waking another OS thread (on 4 ranks a
1 KiB kernel launch about a tenth faster, a framework collective a quarter or
more, docs/performance.md). It is not the default
because of what torch and Python keep per OS thread: torch's autograd engine
keeps the backward pass that a thread runs in that thread's state, so two
ranks whose backward passes wait for each other (a collective inside a
backward function, such as the gradient of ``global_gather``) cannot share
one thread, and a ``threading.local`` of the program is shared by every rank.
A greenlet runner that would block inside a backward pass is refused with an
error that says so.

What torch keeps per thread beyond that (the dispatch and function mode
stacks, grad mode, torch dispatch and ``__torch_function__`` turned off,
inference mode, autocast) travels with a greenlet runner: :func:`take_torch_state`
when it hands the baton on, :func:`put_torch_state` when it runs again.

Thread runners come from a pool of the run (:func:`runner_threads`): a core of a
later launch may run in the OS thread of a core that ended, as a core of a
launch with ``block_dim`` 8 costs a thread start (about 0.2 ms of CPU) otherwise.
Each runner starts in a fresh context (no context variable of an earlier one)
with grad mode on; a thread whose torch state is not a new thread's, or that was
interrupted, is not reused. A ``threading.local`` of the program can keep what an
earlier runner of the same run stored in it: keep per-core state in the kernel's
own variables.
"""

from __future__ import annotations

import contextvars
import os
import threading
from collections.abc import Callable
from typing import NamedTuple, Protocol

import torch

from hccl_py.core.config import env_flag
from hccl_py.core.errors import HcclError
from hccl_py.server.latch import Latch
from hccl_py.server.same_cpu import SAME_CPU_ENV
from hccl_py.server.threads import ThreadPool, raise_in_thread, read_in_a_new_thread

from . import autograd_state

#: Environment variable: ``threads`` (default) or ``greenlets``.
RUNNERS_ENV = "HCCL_PY_EMU_RUNNERS"
RUNNER_KINDS = ("threads", "greenlets")


def runner_kind() -> str:
    """``threads`` or ``greenlets``, from :data:`RUNNERS_ENV`; ValueError for anything else."""
    kind = os.environ.get(RUNNERS_ENV, "").strip().lower() or RUNNER_KINDS[0]
    if kind not in RUNNER_KINDS:
        raise ValueError(f"{RUNNERS_ENV} must be one of {', '.join(RUNNER_KINDS)}, not {kind!r}")
    return kind


def check_settings() -> None:
    """Read the emulator's own settings as it reads them: its runners
    (``HCCL_PY_EMU_RUNNERS``), and with thread runners ``HCCL_PY_SAME_CPU``."""
    if runner_kind() == "threads":
        env_flag(SAME_CPU_ENV, True)


def refuse_inside_backward(name: str) -> None:
    """Runner ``name``, a greenlet, is about to hand the baton on: not inside a backward pass.

    torch runs a backward pass in the thread that started it, and greenlet runners share one.
    """
    if torch._C._current_graph_task_id() != -1:  # inside a backward pass of this thread
        raise HcclError(
            f"{name} waits for another rank inside an autograd backward pass (a "
            "collective or a Wait in a backward function): torch runs a backward pass in "
            "its thread, and the emulator's ranks share one thread; set "
            f"{RUNNERS_ENV}=threads to run every rank and core as a thread of its own"
        )


class _HasThread(Protocol):
    thread: threading.Thread | None


class Spawned:
    """A greenlet runner as its spawner sees it: ``join``/``is_alive`` like a thread, and its OS thread's ``ident``."""

    def __init__(self, world: _HasThread) -> None:
        self._world = world
        #: Set when the runner ends.
        self.ended = Latch()

    def end(self) -> None:
        """The runner ended: whoever joins it goes on."""
        self.ended.set()

    @property
    def ident(self) -> int | None:
        """The ident of the OS thread that runs the runner (the world's thread)."""
        thread = self._world.thread
        return None if thread is None else thread.ident

    def is_alive(self) -> bool:
        """Whether the runner has not ended yet."""
        return not self.ended.done

    def join(self, timeout: float | None = None) -> None:
        """Wait (at most ``timeout`` seconds) until the runner ended."""
        self.ended.wait(timeout)

    def interrupt(self, exc: type[BaseException]) -> bool:
        """Raise ``exc`` in the world's thread, in whichever runner it runs (the one that holds
        the baton, when the world stops a stuck one)."""
        ident = self.ident
        if ident is None or not self.is_alive():
            return False
        raise_in_thread(ident, exc)
        return True

    @staticmethod
    def run(target: Callable[[], None]) -> None:
        """Run the runner's ``target`` in a context of its own, dropped when it returns.

        As a thread's context is when the thread ends: what the runner keeps in
        context variables (a :class:`~hccl_py.core.current.RunnerLocal`, a numpy
        view of a window that the race check watches until it dies) dies in the
        runner, not at a later garbage collection in whatever thread runs it. The torch
        state it leaves on the thread goes with it too (:func:`drop_torch_state`,
        :func:`.autograd_state.clear`), as it would with a thread.
        """
        try:
            contextvars.Context().run(target)
        finally:
            if not _new_thread():  # (the common case: nothing left to drop)
                drop_torch_state()
                autograd_state.clear()


#: The dispatch keys that ``torch._C._DisableTorchDispatch`` excludes (the world lock's
#: :class:`~.watch.Unwatched` holds it while hccl_py works): thread state too.
_PYTHON_KEYS = (
    torch._C.DispatchKey.Python,
    torch._C.DispatchKey.PythonTLSSnapshot,
    torch._C.DispatchKey.PreDispatch,
)
_FUNCTION_ON = torch._C._TorchFunctionState.ENABLED
_NONE_OFF = (False,) * len(_PYTHON_KEYS)
_AUTOCAST_DEVICES = tuple(torch._C._autocast_supported_devices())


#: Inference mode, autocast and dispatch modes turned off all change this set.
_PLAIN_EXCLUDED = read_in_a_new_thread(torch._C._dispatch_tls_local_exclude_set)


def _plain() -> bool:
    """Whether the calling thread's torch state is a new thread's: nothing for a runner to take."""
    return (
        torch.is_grad_enabled()
        and not torch._C._len_torch_dispatch_stack()
        and not torch._C._len_torch_function_stack()
        and torch._C._get_torch_function_state() == _FUNCTION_ON
        and torch._C._dispatch_tls_local_exclude_set() == _PLAIN_EXCLUDED
    )


#: Everything :func:`take_torch_state` and :func:`refuse_inside_backward` look at, read in one
#: go from C (asked at every hand-off): the backward pass, :func:`_plain`'s torch state and
#: :mod:`.autograd_state`'s.
_READERS = (
    torch._C._current_graph_task_id,
    torch.is_grad_enabled,
    torch._C._len_torch_dispatch_stack,
    torch._C._len_torch_function_stack,
    torch._C._get_torch_function_state,
    torch._C._dispatch_tls_local_exclude_set,
    *autograd_state.READERS,
)
_NEW_THREAD = read_in_a_new_thread(lambda: tuple(map(autograd_state.CALL, _READERS)))


def _new_thread() -> bool:
    """Whether the calling thread is in no backward pass and its torch state is a new thread's:
    a runner has nothing to take, and a pool thread whose runner ended may run another."""
    return tuple(map(autograd_state.CALL, _READERS)) == _NEW_THREAD


def hand_on(name: str) -> TorchState | None:
    """Runner ``name``, a greenlet, hands the baton on: :func:`refuse_inside_backward`, then
    :func:`take_torch_state`; both answered by one read in the common case (nothing to take)."""
    if _new_thread():
        return None
    refuse_inside_backward(name)
    return take_torch_state()


def drop_torch_state() -> None:
    """Leave the calling thread's mode stacks, grad mode and torch dispatch and function
    switches as a new thread's: what a greenlet runner that ended left on the world's thread
    (a mode it entered and never exited) must not reach the runners that run next.

    Inference mode and autocast are left: their guards restore them when the runner's
    objects die, as their context managers go with the runner's context.
    """
    if _plain():
        return
    while torch._C._len_torch_dispatch_stack():
        torch._C._pop_torch_dispatch_stack(None)
    while torch._C._len_torch_function_stack():
        torch._C._pop_torch_function_stack()
    torch._C._set_grad_enabled(True)
    for key in _PYTHON_KEYS:
        torch._C._dispatch_tls_set_dispatch_key_excluded(key, False)
    torch._C._set_torch_function_state(_FUNCTION_ON)


#: What to do when the OS has no thread left for a runner.
FEWER_THREADS = (
    "Each rank, and each core of a launch, runs in an OS thread of its own by default: set "
    f"{RUNNERS_ENV}=greenlets to run them all in one OS thread, or run fewer ranks"
)


def runner_threads() -> ThreadPool:
    """A pool for the thread runners of one run: a thread is reused only while its torch state
    is a new thread's; :meth:`~hccl_py.server.threads.ThreadPool.close` it when the run ends."""
    return ThreadPool(fresh=_new_thread, what="runner", advice=f". {FEWER_THREADS}")


class TorchState(NamedTuple):
    """What :func:`take_torch_state` took off the thread for one runner."""

    grad: bool
    dispatch: list
    function: list
    off: tuple[bool, ...]
    function_state: torch._C._TorchFunctionState
    #: Guards entered when it was taken, exited (last first) when it is put back: inference
    #: mode off (its exit restores the runner's whole autograd state and dispatch key set),
    #: autocast off.
    guards: list
    #: (device type, dtype) of each device type whose autocast was on.
    autocast: list[tuple[str, torch.dtype]]
    #: Autograd's per-thread switches and saved-tensor hooks, where not a new thread's.
    autograd: autograd_state.AutogradState | None
    #: A guard that left a new thread's excluded dispatch keys when the runner handed on
    #: inside a torch dispatch handler (a flag poll: the dispatcher excludes autograd, Conjugate,
    #: Negative and the other keys above Python there); its exit puts the runner's back first.
    keys: torch._C._ForceDispatchKeyGuard | None = None


def take_torch_state() -> TorchState | None:
    """Take the calling runner's torch state off the thread: its mode stacks, its grad mode,
    whether it turned torch dispatch modes off and whether it turned ``__torch_function__`` off
    (``torch._C.DisableTorchFunction``, ``DisableTorchFunctionSubclass``), its inference mode,
    its autocast and autograd's per-thread switches (:mod:`.autograd_state`).

    None when there is nothing to take (no mode, grad enabled, dispatch and torch function
    on, no inference mode, no autocast, autograd as in a new thread), the common case.
    """
    if _plain():
        autograd = autograd_state.take()
        if autograd is None:
            return None
        return TorchState(True, [], [], _NONE_OFF, _FUNCTION_ON, [], [], autograd)
    grad = torch.is_grad_enabled()
    n_dispatch = torch._C._len_torch_dispatch_stack()
    n_function = torch._C._len_torch_function_stack()
    off = tuple(torch._C._dispatch_tls_is_dispatch_key_excluded(k) for k in _PYTHON_KEYS)
    function_state = torch._C._get_torch_function_state()
    inference = torch.is_inference_mode_enabled()
    autocast = torch._C._is_any_autocast_enabled()
    guards = [torch._C._InferenceMode(False)] if inference else []
    casts = []
    if autocast:
        casts = [
            (d, torch.get_autocast_dtype(d))
            for d in _AUTOCAST_DEVICES
            if torch.is_autocast_enabled(d)
        ]
        guards.append(torch._C._DisableAutocast())
    for guard in guards:
        guard.__enter__()
    dispatch = [torch._C._pop_torch_dispatch_stack(None) for _ in range(n_dispatch)]
    function = [torch._C._pop_torch_function_stack() for _ in range(n_function)]
    torch._C._set_grad_enabled(True)
    for key in _PYTHON_KEYS:
        torch._C._dispatch_tls_set_dispatch_key_excluded(key, False)
    torch._C._set_torch_function_state(_FUNCTION_ON)
    autograd = autograd_state.take()
    keys = None
    if torch._C._dispatch_tls_local_exclude_set() != _PLAIN_EXCLUDED:
        include = torch._C._dispatch_tls_local_include_set()
        keys = torch._C._ForceDispatchKeyGuard(include, _PLAIN_EXCLUDED)
        keys.__enter__()
    return TorchState(grad, dispatch, function, off, function_state, guards, casts, autograd, keys)


def put_torch_state(state: TorchState | None) -> None:
    """Put back what :func:`take_torch_state` took."""
    if state is None:
        return
    if state.keys is not None:
        state.keys.__exit__(None, None, None)
    for mode in reversed(state.function):
        torch._C._push_on_torch_function_stack(mode)
    for mode in reversed(state.dispatch):
        torch._C._push_on_torch_dispatch_stack(mode)
    torch._C._set_grad_enabled(state.grad)
    for key, excluded in zip(_PYTHON_KEYS, state.off, strict=True):
        torch._C._dispatch_tls_set_dispatch_key_excluded(key, excluded)
    torch._C._set_torch_function_state(state.function_state)
    autograd_state.put(state.autograd)
    for guard in reversed(state.guards):
        guard.__exit__(None, None, None)
    for device, dtype in state.autocast:
        torch.set_autocast_dtype(device, dtype)
