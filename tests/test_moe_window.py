"""The MoE window sample's broken variants: their reports, word for word (issue 13, item 7).

The sample (samples/moe_distribute_window.py) passes on its own (tests/test_samples.py);
here two of the failures its kind of kernel is known for on hardware are put in:
a flag value reused from the previous round, and windows smaller than the
kernel's layout assumes (HCCL_BUFFSIZE).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from hccl_py.backends.emu import wait_until

import hccl_py as hp

#: Every test here runs on thread and on greenlet runners (tests/conftest.py).
pytestmark = pytest.mark.runner_kinds

SAMPLES_DIR = Path(__file__).resolve().parent.parent / "samples"
SOURCE = Path(__file__).read_text().splitlines()
SAMPLE_SOURCE = (SAMPLES_DIR / "moe_distribute_window.py").read_text().splitlines()


@pytest.fixture
def sample(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.syspath_prepend(str(SAMPLES_DIR))
    spec = importlib.util.spec_from_file_location(
        "moe_distribute_window", SAMPLES_DIR / "moe_distribute_window.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setitem(sys.modules, "moe_distribute_window", module)
    return module


def test_flag_value_reused_from_round_one_ends_in_a_deadlock_report(sample, monkeypatch) -> None:
    send_rows = sample.send_rows

    def stale_flags(hccl, tiling, rows_for, data_off, status_off):
        """The bug: every round announces its rows with round one's flag value (epoch 1)."""
        stale = type(tiling).from_buffer_copy(tiling)
        stale.epoch = 1
        send_rows(hccl, stale, rows_for, data_off, status_off)

    monkeypatch.setattr(sample, "send_rows", stale_flags)
    with pytest.raises(hp.WorldError) as info:
        hp.run(sample.main, world_size=4, timeout=60, **sample.RUN_KWARGS)
    err = info.value.failures[0]
    assert isinstance(err, hp.HcclDeadlockError)
    head, *lines = err.reason.splitlines()
    assert head == "deadlock: every running thread waits and none of them can make progress:"
    assert lines == [  # one line per rank, in rank order, the flag's value by its dtype
        f"  - rank {r} polls bytes [1048580, 1048584) of WindowsIn of rank {r} (domain "
        "hccl_world_group), which keep the value 1 (int32; bytes 01 00 00 00): no rank writes them"
        for r in range(4)
    ]


def test_windows_smaller_than_the_layout_report_the_overflow(sample) -> None:
    with pytest.raises(hp.WorldError) as info:
        hp.run(sample.main, world_size=4, buffsize_mb=1, timeout=60, **sample.RUN_KWARGS)
    err = info.value.failures[0]
    assert isinstance(err, hp.HcclBoundsError)
    assert str(err) == (
        "[rank 0] GM view: bytes [1048576, 1048584) of WindowsIn of rank 0 fall outside its "
        "1048576 bytes (HCCL_BUFFSIZE=1 MB = 1048576 bytes, domain hccl_world_group; raise "
        "HCCL_BUFFSIZE or hp.run(..., buffsize_mb=) if the kernel needs more)"
    )


@pytest.mark.parametrize("schedule", ["eager", "late"])
def test_the_sample_is_clean_under_poison(sample, schedule: str) -> None:
    """Its flags order every read after the write it needs: no window race, the same results."""
    plain = hp.run(sample.main, world_size=4, **sample.RUN_KWARGS)
    checked = hp.run(
        sample.main, world_size=4, poison=True, schedule=schedule, timeout=120, **sample.RUN_KWARGS
    )
    assert checked == plain
    assert all(v.split()[3] == "PASS" for verdicts in checked for v in verdicts), checked


def test_rows_copied_before_their_flag_is_polled_are_a_window_race(sample, monkeypatch) -> None:
    """The bug: the receiver copies each sender's whole slot first, then polls its flag."""
    n = 4
    sent = []

    def broken_receive(hccl, tiling, data_off, status_off):
        me, dim = hccl.GetRankId(), hccl.GetRankDim()
        win = hccl.GetWindowsInAddr(me)
        sent.append(me)
        wait_until(lambda: len(sent) == n, "every rank has sent")  # an order hccl_py does not see
        received = []
        for s in range(dim):
            slot = hp.gm_tensor(win + data_off + s * sample.CAP * sample.ROW_BYTES, FP32, SLOT)
            early = slot.clone()  # early-copy
            while int(hp.gm_tensor(win + status_off + s * 8 + 4, INT32, 1)[0]) != tiling.epoch:
                pass
            count = int(hp.gm_tensor(win + status_off + s * 8, INT32, 1)[0])
            received.append(early[: count * sample.W].reshape(count, sample.W))
        return received

    SLOT = sample.CAP * sample.W
    FP32, INT32 = sample.FP32, sample.INT32
    monkeypatch.setattr(sample, "receive_rows", broken_receive)
    with pytest.raises(hp.WorldError) as info:
        hp.run(sample.main, world_size=n, poison=True, timeout=60, **sample.RUN_KWARGS)
    races = {r: e for r, e in info.value.failures.items() if isinstance(e, hp.HcclRaceError)}
    assert races, info.value
    rank, err = min(races.items())
    head, *findings, advice = err.reason.splitlines()
    assert head == (
        "window race: a read of window bytes that a peer writes is not ordered with the write:"
    )
    line = next(i for i, t in enumerate(SOURCE, 1) if t.endswith("# early-copy"))
    sends = next(i for i, t in enumerate(SAMPLE_SOURCE, 1) if "hp.gm_tensor(dst + data_off" in t)
    routes = [sample.routing_of(r, n * sample.LOCAL_EXPERTS)[0] for r in range(n)]
    senders = [
        s for s in range(n) if s != rank and (routes[s] // sample.LOCAL_EXPERTS == rank).any()
    ]
    want = []
    for s in senders:
        lo = s * sample.CAP * sample.ROW_BYTES
        rows = int((routes[s] // sample.LOCAL_EXPERTS == rank).sum())
        want.append(
            f"  - rank {rank} read bytes [{lo}, {lo + rows * sample.ROW_BYTES}) of WindowsIn of "
            f"rank {rank} (domain hccl_world_group) at test_moe_window.py:{line} "
            f"(broken_receive), which rank {s} wrote at moe_distribute_window.py:{sends} "
            "(send_rows), with no flag or completed Wait in between: the data may not have "
            "arrived yet (the read saw 0xFF there)"
        )
    assert findings == want[: len(findings)] and len(findings) == min(len(want), 4)
    assert advice.startswith(f"Have rank {senders[0]} write a flag after the data and rank {rank}")
