"""The MoE window sample's broken variants: their reports, word for word (issue 13, item 7).

The sample (samples/moe_distribute_window.py) passes on its own (tests/test_samples.py);
here two of the failures its kind of kernel is known for on hardware are put in:
a flag value reused from the previous round, and windows smaller than the
kernel's layout assumes (HCCL_BUFFSIZE).
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

import hccl_py as hp

SAMPLES_DIR = Path(__file__).resolve().parent.parent / "samples"


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
    head, *lines = re.sub(r"polled \d+ times", "polled N times", err.reason).splitlines()
    assert head == "deadlock: every running thread waits and none of them can make progress:"
    assert sorted(lines) == [
        f"  - rank {r} polls bytes [1048580, 1048584) of WindowsIn of rank {r} (domain "
        "hccl_world_group), which keep the value 0x01000000: no rank writes them [polled N "
        "times without change]"
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
