"""A process-group call whose peer failed while its data was on the way (gloo, HCCL).

The rank reads that data before it stops, so that its own check of it (a task descriptor
against a peer's framework collective) reports what it found, instead of only "stopped
because rank 0 failed". Until stop 69 the wait stopped at the first look after the peer's
report, however close the call was to its end.
"""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from hccl_py.backends.dist.session import Session
from hccl_py.backends.dist.waits import finishes_within
from hccl_py.core.errors import HcclMismatchError, HcclPeerError


class Call:
    """A process-group call (``dist.Work``) that ends when :meth:`end` is called."""

    def __init__(self) -> None:
        self.future: torch.futures.Future = torch.futures.Future()

    def get_future(self) -> torch.futures.Future:
        return self.future

    def is_completed(self) -> bool:
        return self.future.done()

    def wait(self) -> bool:
        self.future.wait()
        return True

    def end(self) -> None:
        self.future.set_result([])


class Board:
    """The wait board, as far as one wait uses it."""

    rank = 0

    def post(self, record: dict) -> int:
        return 1

    def read(self) -> dict:
        return {}

    def end(self, wait_id: int, failed: bool) -> None:
        pass


def session_whose_peer_failed() -> Any:
    """The part of a :class:`Session` that :meth:`Session.await_peers` reads: rank 1 of 2, whose
    peer rank 0 reported a mismatch."""
    report = HcclMismatchError("rank 0 called all_gather_into_tensor")
    report.hccl_rank = 0

    def check_abort() -> None:
        raise HcclPeerError(f"stopped because rank 0 failed: {report}")

    board = Board()
    backend = SimpleNamespace(device_async=False)
    return SimpleNamespace(rank=1, abort=report, check_abort=check_abort, board=board,
                           backend=backend)  # fmt: skip


def await_peers(session: Any, call: Call) -> None:
    Session.await_peers(session, call, (0, 1), "task check", "hccl_world_group", 30.0,
                        lambda rank: False)  # fmt: skip


def test_a_call_whose_data_comes_after_the_peers_report_is_read() -> None:
    call = Call()
    threading.Timer(0.1, call.end).start()  # after the wait's first look (every 50 ms)
    await_peers(session_whose_peer_failed(), call)
    assert call.is_completed()


def test_a_call_that_does_not_end_stops_at_the_peers_report() -> None:
    call = Call()
    with pytest.raises(HcclPeerError, match="stopped because rank 0 failed"):
        await_peers(session_whose_peer_failed(), call)
    assert not call.is_completed()
    call.end()


def test_finishes_within_says_whether_the_call_ended_in_time() -> None:
    call = Call()
    assert not finishes_within(call, 0.02)
    call.end()
    assert finishes_within(call, 0.0)
