"""Waits on a device's process group (torch_npu's HCCL): a call's future completes when the
call is queued on the device's stream, so hccl_py asks ``Work.is_completed`` instead; its
process groups get a time limit above HCCL's own; bench times what the device ran.

torch_npu is not installed here: a fake Work behaves as torch_npu's (its future complete at
once, ``is_completed`` false until the device ran the call), as read in its source
(``ProcessGroupHCCL::collective``, ``WorkHCCL::isCompleted``).
"""

from __future__ import annotations

import threading

import pytest
import torch

from hccl_py.backends.dist import npu
from hccl_py.backends.dist.hccl import HcclBackend
from hccl_py.backends.dist.server import DistBackend
from hccl_py.backends.dist.waits import watch_work
from hccl_py.bench.sweep import median_time


class QueuedWork:
    """A process-group call that the device runs after it was queued: its future is
    complete at once, ``is_completed`` turns true when the test says the device ran it."""

    def __init__(self) -> None:
        self.ran = threading.Event()
        self.waited = False
        self.future = torch.futures.Future()
        self.future.set_result(None)

    def get_future(self) -> torch.futures.Future:
        return self.future

    def is_completed(self) -> bool:
        return self.ran.is_set()

    def wait(self) -> bool:
        self.waited = True
        return True


class PeerGoneError(Exception):
    pass


def test_a_device_wait_looks_for_absent_peers_until_the_device_ran_the_call() -> None:
    """Before, the wait ended at once (the future was complete) and never looked: a peer that
    never joined left the rank blocked in the next host read, with no report."""
    work, looks = QueuedWork(), []

    def look() -> None:
        looks.append(1)
        if len(looks) == 3:
            raise PeerGoneError("rank 1 returned without calling all_gather_into_tensor")

    with pytest.raises(PeerGoneError):
        watch_work(work, 0.001, look, lambda: None, device_async=True)
    assert len(looks) == 3 and not work.waited


def test_a_device_wait_ends_when_the_device_ran_the_call() -> None:
    work, looks = QueuedWork(), []

    def look() -> None:
        looks.append(1)
        if len(looks) == 2:
            work.ran.set()  # the device finishes while the rank waits

    watch_work(work, 0.001, look, lambda: None, device_async=True)
    assert len(looks) == 2 and work.waited


def test_gloo_waits_on_the_future_and_hccl_on_the_device() -> None:
    assert DistBackend.device_async is False and HcclBackend.device_async is True


@pytest.mark.parametrize(
    ("env", "limit"), [(None, 1836.0), ("600", 600.0), ("soon", 1836.0), ("-5", 1836.0)]
)
def test_hccl_groups_wait_longer_than_hccl_itself(
    monkeypatch: pytest.MonkeyPatch, env: str | None, limit: float
) -> None:
    """torch_npu warns at every group whose limit is at most HCCL_EXEC_TIMEOUT, and its
    watchdog would end the process before hccl_py's own report (which names who is missing)."""
    if env is None:
        monkeypatch.delenv("HCCL_EXEC_TIMEOUT", raising=False)
    else:
        monkeypatch.setenv("HCCL_EXEC_TIMEOUT", env)
    assert npu.exec_timeout() == limit
    hccl = HcclBackend.__new__(HcclBackend)  # without torch_npu: the limit is plain arithmetic
    assert hccl.pg_timeout(150.0) > limit
    assert hccl.pg_timeout(5000.0) == 5000.0
    assert DistBackend.pg_timeout(hccl, 150.0) == 150.0  # gloo keeps hccl_py's limit


def test_bench_times_each_call_until_the_device_ran_it() -> None:
    """On an NPU a timed call returns once its collectives are queued: each one is timed up to
    the device's end (the sync after it), starting from an idle device (the sync before)."""
    events: list[str] = []
    median_time(lambda: events.append("call"), 3, lambda: events.append("sync"))
    assert events == ["sync", "call", "sync"] * 3
