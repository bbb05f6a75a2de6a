"""Soak: hundreds of random kernels in one session, correct ones and broken ones mixed (issue 12).

Every correct case must match the numpy reference, every broken one must get
its report, and the process must not leak threads, file descriptors or memory
from one run to the next.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import cases
import pytest
import test_reliability as broken
from launch_helpers import SLOW

import hccl_py as hp

#: Each test is a unit of its own under xdist (conftest.py).
pytestmark = [SLOW, pytest.mark.spread]

#: Random cases per emulator run, and runs (200 cases in all); gloo gets 50 in two runs.
EMU_BATCH, EMU_RUNS = 20, 10
GLOO_BATCH, GLOO_RUNS = 25, 2
#: A broken program after each emulator run: (function, args, the error class it must raise).
MISUSE: list[tuple[Any, tuple, Any]] = [
    (broken.gather_into, (), hp.HcclSharedMemoryError),
    (broken.skips_its_part, (), hp.HcclDeadlockError),
    (broken.never_waited, ("all_reduce",), hp.HcclUnfinishedError),
    (broken.in_place_views, (2,), (hp.HcclOverlapError, hp.HcclBoundsError)),
    (broken.lone_all_reduce, (), hp.HcclDeadlockError),
]


def _resources() -> tuple[int, int, int]:
    """Threads, open file descriptors and resident memory (bytes) of this process."""
    fds = len(os.listdir("/proc/self/fd"))
    with open("/proc/self/statm") as f:
        rss = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    return threading.active_count(), fds, rss


def _misuse(k: int) -> None:
    fn, args, cls = MISUSE[k % len(MISUSE)]
    with pytest.raises(hp.WorldError) as info:
        hp.run(fn, world_size=2, backend="emu", args=args, timeout=5.0)
    roots = info.value.root_causes.values()
    assert roots and all(isinstance(e, cls) for e in roots), f"{fn.__name__}: {info.value}"


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="reads /proc")
def test_emulator_soak() -> None:
    cases.run_and_check(cases.numpy_cases(1000, EMU_BATCH), "emu", world_size=8)  # warm-up
    _misuse(0)
    threads, fds, rss = _resources()
    for k in range(EMU_RUNS):
        batch = cases.numpy_cases(2000 + k, EMU_BATCH)
        cases.run_and_check(batch, "emu", schedule=("eager", "late")[k % 2], world_size=8)
        _misuse(k)
    threads_after, fds_after, rss_after = _resources()
    assert threads_after == threads, "threads left running"
    assert fds_after <= fds + 2, f"file descriptors grew from {fds} to {fds_after}"
    assert rss_after - rss < 300 * 2**20, f"memory grew by {(rss_after - rss) >> 20} MiB"


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="reads /proc")
def test_gloo_soak() -> None:
    cases.run_and_check(cases.numpy_cases(1000, 4), "gloo", world_size=8)  # starts the fork server
    threads, fds, _ = _resources()
    for k in range(GLOO_RUNS):
        cases.run_and_check(cases.numpy_cases(3000 + k, GLOO_BATCH), "gloo", world_size=8)
    threads_after, fds_after, _ = _resources()
    assert threads_after == threads and fds_after <= fds + 2, "the runs left threads or files"
