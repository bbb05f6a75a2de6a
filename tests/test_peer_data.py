"""A process-group call whose peer failed while its data was on the way (gloo, HCCL).

The wait reads that data before it stops, so that the rank's own check of it (a task
descriptor against a peer's framework collective) reports what it found, instead of only
"stopped because rank 0 failed". Until stop 69 the wait stopped at the first look after the
peer's report, however close the call was to its end. No timing here: the call ends when it
has been asked a given number of times whether it has.
"""

from __future__ import annotations

import pytest
import torch

from hccl_py.backends.dist.waits import PEER_DATA_S, finishes_within, watch_work
from hccl_py.core.errors import HcclPeerError


class Call:
    """A process-group call (``dist.Work``) that ends at its ``ends_at``-th ``is_completed()``
    (never, with None)."""

    def __init__(self, ends_at: int | None) -> None:
        self.future: torch.futures.Future = torch.futures.Future()
        self.ends_at, self.asked = ends_at, 0

    def get_future(self) -> torch.futures.Future:
        return self.future

    def is_completed(self) -> bool:
        self.asked += 1
        if self.asked == self.ends_at:
            self.future.set_result([])
        return self.future.done()

    def wait(self) -> bool:
        self.future.wait()
        return True


def peer_failed() -> None:
    """A wait's look after rank 0 reported a failure."""
    raise HcclPeerError("stopped because rank 0 failed: HcclMismatchError: ...")


def nobody_left() -> None:
    """The wait's check after a failed call: nothing to add."""


@pytest.mark.parametrize("device_async", [False, True])
def test_a_call_that_ends_after_the_peers_report_is_read(device_async: bool) -> None:
    """Asked once before the watch, it ends while the wait, stopped by the look, asks again."""
    call = Call(ends_at=3)
    watch_work(call, 0.01, peer_failed, nobody_left, device_async=device_async)
    assert call.future.done() and call.asked == 3


@pytest.mark.parametrize("device_async", [False, True])
def test_a_call_that_does_not_end_stops_at_the_peers_report(device_async: bool) -> None:
    call = Call(ends_at=None)
    with pytest.raises(HcclPeerError, match="stopped because rank 0 failed"):
        watch_work(call, 0.01, peer_failed, nobody_left, device_async=device_async)
    assert not call.future.done() and call.asked > 2
    call.future.set_result([])  # the abandoned call ends, as a peer's exit makes it


def test_finishes_within_says_whether_the_call_ended_in_time() -> None:
    assert not finishes_within(Call(ends_at=None), 0.02)
    assert finishes_within(Call(ends_at=2), PEER_DATA_S)
    assert finishes_within(Call(ends_at=1), 0.0)
