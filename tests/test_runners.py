"""The emulator's greenlet runners (``HCCL_PY_EMU_RUNNERS=greenlets``): what stays per runner.

Thread runners are the default and run every other test of the suite; here the
greenlet runners share one thread, and what torch and hccl_py keep per runner
must still travel with each rank.
"""

from __future__ import annotations

import contextlib
import gc
import threading
import weakref
from collections.abc import Callable
from typing import Any

import pytest
import torch
from hccl_py.backends.emu import wait_until
from hccl_py.backends.emu.modes import KernelMode
from hccl_py.backends.emu.runners import RUNNERS_ENV
from hccl_py.backends.emu.scheduler import THREAD_NAME

import hccl_py as hp
from hccl_py.core.current import RunnerLocal


@pytest.fixture(autouse=True)
def _greenlet_runners(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(RUNNERS_ENV, "greenlets")


def test_thread_runners_are_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(RUNNERS_ENV)
    assert len(set(hp.run(threading.get_ident, world_size=3))) == 3


class _CountOps(KernelMode):
    """Counts the aten operations run under it."""

    def __init__(self) -> None:
        super().__init__()
        self.ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        self.ops += 1
        return func(*args, **(kwargs or {}))


def test_every_rank_runs_on_the_one_world_thread() -> None:
    idents = hp.run(threading.get_ident, world_size=4)
    assert len(set(idents)) == 1
    assert idents[0] != threading.get_ident()


def test_grad_mode_and_dispatch_modes_stay_with_their_runner() -> None:
    """Rank 0 blocks inside no_grad and a dispatch mode; rank 1 runs meanwhile without either."""
    ran = threading.Event()

    def main() -> tuple[bool, int, bool]:
        if hp.get_rank() == 0:
            with torch.no_grad(), _CountOps() as mode:
                wait_until(ran.is_set, "rank 1 ran")  # rank 1 runs here
                torch.ones(2).add_(1)
                return torch.is_grad_enabled(), mode.ops, True
        torch.ones(2).add_(1)  # must not count in rank 0's mode
        grad = torch.is_grad_enabled()
        ran.set()
        return grad, 0, torch._C._len_torch_dispatch_stack() == 0

    (grad0, ops0, _), (grad1, _, no_mode1) = hp.run(main, world_size=2)
    assert (grad0, grad1, no_mode1) == (False, True, True)
    assert ops0 == 2  # ones and add_ of rank 0 only


def test_runner_local_attributes_belong_to_one_runner() -> None:
    local = RunnerLocal()
    ran = threading.Event()

    def main() -> object:
        local.name = f"rank {hp.get_rank()}"
        if hp.get_rank() == 0:
            wait_until(ran.is_set, "rank 1 ran")
        else:
            ran.set()
        return local.name

    assert hp.run(main, world_size=2) == ["rank 0", "rank 1"]
    assert getattr(local, "name", None) is None  # the caller's own is untouched


def _across_a_switch(scope: Callable[[], Any], probe: Callable[[], object]) -> list[object]:
    """``probe()`` of rank 0 inside ``scope()``, after it blocked and rank 1 ran; then rank 1's."""
    ran = threading.Event()

    def main() -> object:
        if hp.get_rank() == 0:
            with scope():
                wait_until(ran.is_set, "rank 1 ran")  # rank 1 runs here
                return probe()
        seen = probe()
        ran.set()
        return seen

    return hp.run(main, world_size=2)


def _function_and_pre_dispatch() -> tuple[object, bool]:
    pre_dispatch = torch._C.DispatchKey.PreDispatch
    return torch._C._get_torch_function_state(), torch._C._dispatch_tls_is_dispatch_key_excluded(
        pre_dispatch
    )


def test_torch_function_turned_off_stays_with_its_runner() -> None:
    """Off in rank 1 too, the race check's function mode would not see its ``tolist()`` reads."""
    state = torch._C._TorchFunctionState
    assert _across_a_switch(torch._C.DisableTorchFunctionSubclass, _function_and_pre_dispatch) == [
        (state.SUBCLASSES_DISABLED, False),
        (state.ENABLED, False),
    ]


def _inference_and_autocast() -> tuple[bool, bool, bool, torch.dtype]:
    made = torch.ones(2, 2)
    product = made @ made
    return torch.is_inference_mode_enabled(), made.is_inference(), made.requires_grad, product.dtype


def test_inference_mode_and_autocast_stay_with_their_runner() -> None:
    def scope() -> contextlib.ExitStack:
        stack = contextlib.ExitStack()
        stack.enter_context(torch.inference_mode())
        stack.enter_context(torch.autocast("cpu", dtype=torch.bfloat16))
        return stack

    assert _across_a_switch(scope, _inference_and_autocast) == [
        (True, True, False, torch.bfloat16),
        (False, False, False, torch.float32),
    ]


_PACKED: list[int] = []


def _pack(t: torch.Tensor) -> torch.Tensor:
    _PACKED.append(hp.get_rank())
    return t


def _autograd_switches() -> tuple[list[int], bool, bool, bool, bool]:
    """Whose saved-tensor hook saw this rank's product, and the per-thread autograd switches."""
    _PACKED.clear()
    x = torch.ones(2, requires_grad=True)
    (x * x).sum()
    c = torch._C
    return (
        list(_PACKED),
        c._is_multithreading_enabled(),
        c._is_view_replay_enabled(),
        c._is_fwd_grad_enabled(),
        c._is_grad_layout_enforcement_enabled(),
    )


#: Where torch can show a thread's saved-tensor hooks (2.8 and later), and has the switches.
shows_hooks = pytest.mark.skipif(
    not hasattr(torch._C._autograd, "_top_saved_tensors_default_hooks")
    or not hasattr(torch._C, "_set_grad_layout_enforcement_enabled"),
    reason="this torch cannot show a thread's saved-tensor hooks: they stay with the thread",
)


def _set_for_the_scope(stack: contextlib.ExitStack, setter: Callable, value: bool) -> None:
    setter(not value)
    stack.callback(setter, value)


@shows_hooks
def test_saved_tensor_hooks_and_autograd_switches_stay_with_their_runner() -> None:
    def scope() -> contextlib.ExitStack:
        stack = contextlib.ExitStack()
        stack.enter_context(torch.autograd.graph.saved_tensors_hooks(_pack, lambda t: t))
        stack.enter_context(torch.autograd.set_multithreading_enabled(False))
        stack.enter_context(torch.autograd._force_original_view_tracking(True))
        _set_for_the_scope(stack, torch._C._set_fwd_grad_enabled, True)
        _set_for_the_scope(stack, torch._C._set_grad_layout_enforcement_enabled, True)
        return stack

    assert _across_a_switch(scope, _autograd_switches) == [
        ([0, 0], False, True, False, False),
        ([], True, False, True, True),
    ]


def _hooks_usable() -> str:
    try:
        with torch.autograd.graph.saved_tensors_hooks(_pack, lambda t: t):
            return "usable"
    except RuntimeError as err:
        return str(err)


def test_saved_tensor_hooks_disabled_stay_with_their_runner() -> None:
    def scope() -> contextlib.AbstractContextManager:
        return torch.autograd.graph.disable_saved_tensors_hooks("off in rank 0")

    assert _across_a_switch(scope, _hooks_usable) == ["off in rank 0", "usable"]


_LEFT_DISABLED: list = []  # a generator context manager exits when collected: kept here


@shows_hooks
def test_a_runner_that_ends_with_hooks_disabled_leaves_them_to_no_one() -> None:
    """Rank 1 returns inside ``disable_saved_tensors_hooks``; rank 0, waiting inside its own
    hooks, gets them back and runs on."""
    ran = threading.Event()

    def main() -> object:
        if hp.get_rank() == 0:
            with torch.autograd.graph.saved_tensors_hooks(_pack, lambda t: t):
                wait_until(ran.is_set, "rank 1 ran")
                return _autograd_switches()[0]
        scope = torch.autograd.graph.disable_saved_tensors_hooks("left by rank 1")
        scope.__enter__()
        _LEFT_DISABLED.append(scope)
        ran.set()
        return None

    try:
        assert hp.run(main, world_size=2) == [[0, 0], None]
        assert _hooks_usable() == "usable"  # the caller's thread is not the world's
    finally:
        _LEFT_DISABLED.clear()


class _Noop(torch.overrides.TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        return func(*args, **(kwargs or {}))


def _torch_state() -> tuple[bool, int, int, bool]:
    return (
        torch.is_grad_enabled(),
        torch._C._len_torch_dispatch_stack(),
        torch._C._len_torch_function_stack(),
        torch._C._dispatch_tls_is_dispatch_key_excluded(torch._C.DispatchKey.Python),
    )


def test_a_runner_that_ends_inside_modes_leaves_them_to_no_one() -> None:
    """Rank 0 returns with a dispatch mode and a function mode entered and never exited, grad
    off and torch dispatch turned off: as when a thread ends, none of it reaches rank 1,
    which runs after it on the same thread (before 2026-11-28 rank 0's mode saw rank 1's
    operations)."""
    counter = _CountOps()
    returning = threading.Event()

    def main() -> tuple[bool, int, int, bool]:
        if hp.get_rank() == 0:
            counter.__enter__()
            _Noop().__enter__()
            torch._C._set_grad_enabled(False)
            torch._C._dispatch_tls_set_dispatch_key_excluded(torch._C.DispatchKey.Python, True)
            returning.set()
            return _torch_state()
        wait_until(returning.is_set, "rank 0 returns")  # no hccl_py call after it: it ends
        torch.ones(2).add_(1)
        return _torch_state()

    left, clean = hp.run(main, world_size=2)
    assert left == (False, 1, 1, True)
    assert clean == (True, 0, 0, False)
    assert counter.ops == 0, "rank 0's mode saw rank 1's operations"


def test_what_a_runner_keeps_dies_when_it_ends_in_the_world_thread() -> None:
    """A greenlet runner's context variables die when it ends, as a thread's do.

    Not at some later garbage collection in another thread: the race check's
    numpy views record their holder's writes when they die.
    """
    local = RunnerLocal()
    died: list[str] = []

    class Kept:
        """Something a rank keeps in a runner-local attribute."""

    def main() -> None:
        local.kept = Kept()
        weakref.finalize(local.kept, lambda: died.append(threading.current_thread().name))

    gc.disable()  # nothing but the runner's end may free it
    try:
        hp.run(main, world_size=2)
        assert died == [THREAD_NAME] * 2
    finally:
        gc.enable()


def test_runners_that_block_deep_in_their_stack_do_not_add_up() -> None:
    """Each core starts from the world's thread, not from the runner that blocked before it.

    A greenlet starts with the recursion depth of the one that starts it: cores
    started one from the other, each blocked 150 calls deep, would pass the
    recursion limit (1000) long before the 8 cores of 4 ranks ran.
    """

    def deep(k: int) -> None:
        if k:
            deep(k - 1)
        else:
            hp.SyncAll()

    def main() -> None:
        hp.launch(deep, 150, block_dim=8)

    hp.run(main, world_size=4)


class _WaitsInBackward(torch.autograd.Function):
    """Its backward pass waits until every rank has started its own backward pass."""

    started: list[int] = []

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:  # noqa: ANN001
        return x * 2

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:  # noqa: ANN001
        _WaitsInBackward.started.append(hp.get_rank())
        wait_until(lambda: len(_WaitsInBackward.started) >= 2, "both ranks are in backward")
        return grad * 2


def _backward_that_waits() -> list[float]:
    x = torch.ones(2, requires_grad=True)
    _WaitsInBackward.apply(x).sum().backward()
    return x.grad.tolist()


def test_waiting_inside_a_backward_pass_is_refused_with_what_to_set() -> None:
    _WaitsInBackward.started = []
    with pytest.raises(hp.WorldError) as info:
        hp.run(_backward_that_waits, world_size=2)
    (cause,) = info.value.root_causes.values()
    assert isinstance(cause, hp.HcclError)
    assert str(cause) == (
        "rank0 waits for another rank inside an autograd backward pass (a collective or a "
        "Wait in a backward function): torch runs a backward pass in its thread, and the "
        "emulator's ranks share one thread; set HCCL_PY_EMU_RUNNERS=threads to run every "
        "rank and core as a thread of its own"
    )


def test_thread_runners_wait_inside_backward_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(RUNNERS_ENV, "threads")
    _WaitsInBackward.started = []
    assert hp.run(_backward_that_waits, world_size=2) == [[2.0, 2.0], [2.0, 2.0]]
    assert len(set(hp.run(threading.get_ident, world_size=2))) == 2


def test_an_unknown_runner_kind_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(RUNNERS_ENV, "fibers")
    with pytest.raises(
        ValueError, match="HCCL_PY_EMU_RUNNERS must be one of threads, greenlets, not 'fibers'"
    ):
        hp.run(threading.get_ident, world_size=2)


class _StoppedAsItWoke(BaseException):
    """An interruption delivered to a thread runner as it takes the baton, before its target."""


def _rank_of_two() -> int:
    hp.barrier()
    return hp.get_rank()


def test_a_thread_runner_stopped_as_it_wakes_still_hands_the_baton_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The run's watchdog stops the runner that holds the baton; one stopped before its target
    ran never left the world, and the run waited forever (a run with a tiny timeout hung in a
    quarter of tries). Now the run ends with the failure."""
    from hccl_py.backends.emu.scheduler import Scheduler

    monkeypatch.setenv(RUNNERS_ENV, "threads")
    woke = Scheduler._woke
    stopped: list[str] = []

    def stop_rank_1_once(self: Scheduler, runner: Any) -> None:
        woke(self, runner)
        if runner.rank == 1 and not stopped:
            stopped.append(runner.name)
            raise _StoppedAsItWoke

    monkeypatch.setattr(Scheduler, "_woke", stop_rank_1_once)
    outcome: list[BaseException | list[int]] = []

    def run() -> None:
        try:
            outcome.append(hp.run(_rank_of_two, world_size=2, timeout=30))
        except BaseException as exc:  # noqa: BLE001 - the test reads it
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(120)
    assert not thread.is_alive(), "the run never ended"
    assert stopped and isinstance(outcome[0], hp.WorldError), outcome
    assert "_StoppedAsItWoke" in str(outcome[0])


def _autograd_and_conj() -> tuple[bool, list]:
    """Whether autograd records an operation, and a conjugate view's numbers."""
    x = torch.ones(1, requires_grad=True)
    return (x * 2).grad_fn is not None, (torch.tensor([1 + 2j]).conj() * 1).tolist()


def _poll_then_compute(out: list) -> None:
    """Each rank sets its peer's window flag and polls its own: a rank that polled first gets
    the baton back in the poll, inside its torch dispatch handler."""
    hccl = hp.Hccl()
    hccl.Init(hp.GetHcclContext(0))
    me = hccl.GetRankId()
    hp.gm_tensor(hccl.GetWindowsInAddr(1 - me) + 64, torch.int32, 1)[0] = 1
    while int(hp.gm_tensor(hccl.GetWindowsInAddr(me) + 64, torch.int32, 1)[0]) != 1:
        pass
    out.append(_autograd_and_conj())
    hccl.Finalize()


def _launch_poll() -> list:
    out: list = []
    hp.launch(_poll_then_compute, out)
    return [*out, _autograd_and_conj()]


@pytest.mark.parametrize("seed", [None, 7])
def test_a_runner_that_hands_on_inside_a_flag_poll_keeps_its_dispatch_keys(
    seed: int | None,
) -> None:
    """Until 2026-12-01 the runner that ran next took over the dispatch keys the dispatcher
    excludes inside a dispatch handler: autograd recorded nothing and ``z.conj() * 1`` gave
    ``z`` (wrong numbers), where thread runners computed right."""
    want = (True, [1 - 2j])
    assert hp.run(_launch_poll, world_size=2, seed=seed) == [[want, want]] * 2
