"""A kernel stuck in its own code on gloo ends at the run's timeout, with where it runs.

A flag polled through a tensor view the kernel holds (``while int(flag[0]) != 1``, the usual
AscendC idiom of a GlobalTensor read in a loop) makes no hccl_py call: before, on gloo, such a
poll of a flag nobody writes ran for ever when every rank polled, and under the runner also when
a peer had returned (a new porter's trial). Its rank's watchdog now stops the kernel thread.
"""

from __future__ import annotations

import inspect
import os
import sysconfig
import threading
import time

import pytest
import torch
from test_windows import FLAG, client, tiling

import hccl_py as hp
from hccl_py.server.stalls import KernelStalls

TIMEOUT = 1.0
#: A longer one where a valid kernel's stretches of own code and waits must each stay below it
#: with room to spare on a loaded machine.
CALLS_TIMEOUT = 3.0

#: Each test is a unit of its own under xdist (conftest.py): none shares a module's jobs.
pytestmark = pytest.mark.spread


def _poll_held_view(tilingGM: hp.GmAddr) -> None:
    h = client(tilingGM)
    me = h.GetRankId()
    flag = hp.gm_tensor(h.GetWindowsInAddr(me) + FLAG, torch.int32, 1)
    while int(flag[0]) != 1:  # nobody writes it
        pass


def every_rank_polls_a_held_view() -> None:
    hp.launch(_poll_held_view, tiling())


def test_every_rank_polling_a_held_view_ends_at_the_timeout_naming_the_line() -> None:
    with pytest.raises(hp.WorldError) as info:
        hp.run(every_rank_polls_a_held_view, world_size=2, backend="gloo", timeout=TIMEOUT)
    assert sorted(info.value.failures) == [0, 1]
    lines, first = inspect.getsourcelines(_poll_held_view)
    line = first + next(i for i, text in enumerate(lines) if "nobody writes it" in text)
    site = f"at test_kernel_stalls.py:{line} in _poll_held_view"
    assert str(info.value).count(site) == 2, str(info.value)  # the kernel's line, not launch's
    for rank, error in info.value.failures.items():
        assert isinstance(error, hp.HcclTimeoutError), repr(error)
        text = str(error)
        assert (
            f"rank {rank} ran its kernel's own code for {TIMEOUT:g} s (the run's timeout)" in text
        )
        assert "while int(flag[0]) != 1:  # nobody writes it" in text, text
        assert "hccl_py/kernel" not in text, "only the kernel's own frames are shown"


def _core_waits_for_a_flag_no_core_sets(flagGM: hp.GmAddr) -> None:
    flag = hp.gm_tensor(flagGM, torch.int32, 1)
    if hp.GetBlockIdx() == 1:
        while int(flag[0]) == 0:
            pass


def one_core_polls_a_kernel_argument() -> None:
    hp.launch(_core_waits_for_a_flag_no_core_sets, torch.zeros(1, dtype=torch.int32), block_dim=2)


def test_the_stuck_core_is_named_and_the_others_return() -> None:
    with pytest.raises(hp.WorldError) as info:
        hp.run(one_core_polls_a_kernel_argument, world_size=1, backend="gloo", timeout=TIMEOUT)
    error = info.value.failures[0]
    assert isinstance(error, hp.HcclTimeoutError), repr(error)
    assert "rank 0 AIV core 1 ran its kernel's own code for" in str(error), error
    assert "while int(flag[0]) == 0:" in str(error)


def _busy_with_hccl_py_calls(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        hp.SyncAll()  # an hccl_py call (one core: it waits for nobody)
        time.sleep(0.01)


def calls_hccl_py_longer_than_the_timeout() -> bool:
    hp.launch(_busy_with_hccl_py_calls, 1.5 * TIMEOUT)
    return True


def test_a_kernel_that_keeps_calling_hccl_py_is_not_stopped() -> None:
    """Each hccl_py call starts the clock again: only code that calls none for the timeout ends."""
    got = hp.run(
        calls_hccl_py_longer_than_the_timeout, world_size=2, backend="gloo", timeout=TIMEOUT
    )
    assert got == [True, True]


def _cores_meet_by_flags(xGM: hp.GmAddr) -> None:
    for _ in range(12):
        time.sleep(CALLS_TIMEOUT / 10)  # a tile's compute
        hp.CrossCoreSetFlag[0, hp.Pipe.PIPE_MTE3](1)  # mode 0: the AIV cores meet
        hp.CrossCoreWaitFlag(1)


def _waits_in_a_flag(xGM: hp.GmAddr) -> None:
    if hp.GetBlockIdx() == 0:
        time.sleep(0.6 * CALLS_TIMEOUT)  # then waits 0.7 of the timeout for core 1 at the flag
    else:
        for _ in range(2):
            time.sleep(0.65 * CALLS_TIMEOUT)
            hp.gm_tensor(xGM, torch.float32, 1)  # an hccl_py call: its clock starts again
    hp.CrossCoreSetFlag[0, hp.Pipe.PIPE_MTE3](1)  # mode 0: a barrier of the AIV cores
    hp.CrossCoreWaitFlag(1)


def _waits_in_a_collective(xGM: hp.GmAddr) -> None:
    time.sleep(0.6 * CALLS_TIMEOUT)  # then waits 0.7 of the timeout for rank 1
    hp.all_reduce(torch.ones(2))


def pipelines_longer_than_the_timeout() -> bool:
    hp.launch(_cores_meet_by_flags, torch.zeros(1), block_dim=2)
    hp.launch(_waits_in_a_flag, torch.zeros(1), block_dim=2)
    if hp.get_rank() == 0:
        hp.launch(_waits_in_a_collective, torch.zeros(1))
    else:  # its part of rank 0's all_reduce, late
        time.sleep(1.3 * CALLS_TIMEOUT)
        hp.all_reduce(torch.ones(2))
    return True


def test_hccl_py_calls_that_serial_does_not_wrap_start_the_clock_again() -> None:
    """A review of the first version: CrossCore flags, a wait in one, and a framework
    collective inside a kernel did not count as hccl_py calls, so valid kernels whose own code
    between calls was short were stopped (inside hccl_py's waits, with an empty stack)."""
    got = hp.run(
        pipelines_longer_than_the_timeout, world_size=2, backend="gloo", timeout=CALLS_TIMEOUT
    )
    assert got == [True, True]


def test_a_thread_inside_an_hccl_py_call_is_never_stopped() -> None:
    stalls = KernelStalls(timeout=0.0)
    inside, leave, stopped = threading.Event(), threading.Event(), []

    def kernel() -> None:
        try:
            with stalls.kernel(3, "AIC core 0"):
                with stalls:  # an hccl_py call that waits (a Wait, a framework collective)
                    inside.set()
                    leave.wait(10)
                while True:  # then its own code, for ever
                    time.sleep(0.001)
        except hp.HcclTimeoutError as exc:
            stopped.append(str(exc))

    thread = threading.Thread(target=kernel)
    thread.start()
    assert inside.wait(10)
    stalls.stop_stuck()
    assert stalls.stopped == set(), "stopped inside an hccl_py call"
    leave.set()
    deadline = time.monotonic() + 10
    while thread.is_alive() and time.monotonic() < deadline:
        stalls.stop_stuck()
        thread.join(0.01)
    assert not thread.is_alive() and len(stopped) == 1
    assert stopped[0].startswith("[rank 3] rank 3 AIC core 0 ran its kernel's own code for 0 s")
    assert stalls.threads == {}


def test_what_counts_as_a_kernels_own_code() -> None:
    """A review: a kernel exec'd from a string or installed under site-packages (inside the
    standard library's folder on most installs) was taken for library code and never stopped,
    and a frozen standard-library frame for the kernel's own."""
    from hccl_py.core.where import library, ours

    site = sysconfig.get_paths()["purelib"]
    assert library("<frozen os>")
    assert not library("<string>")
    assert not library(os.path.join(site, "my_kernels", "mc2.py"))
    assert library(os.path.join(os.path.dirname(threading.__file__), "threading.py"))
    assert library(torch.__file__)
    assert ours(hp.__file__) and not ours(torch.__file__)
