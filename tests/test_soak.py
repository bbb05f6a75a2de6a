"""Soak: hundreds of random kernels in one session, correct ones and broken ones mixed (issue 12).

Every correct case must match the numpy reference, every broken one must get
its report, and the process must not leak threads, file descriptors or memory
from one run to the next, nor from one kernel launch to the next within a run
(issue 23).
"""

from __future__ import annotations

import os
import threading
from typing import Any

import cases
import numpy as np
import pytest
import test_reliability as broken
import torch

import hccl_py as hp

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


#: Launches of the memory soak (two 256 KiB buffers each) and the growth of resident memory
#: they may cause: the world's whole process on the emulator, each rank's process on gloo.
#: Before issue 23 every launch kept its buffers: 300 launches grew the emulator by 600 MiB
#: and each gloo rank by 150 to 300 MiB; now about 35 MiB and 12 MiB, whatever the count.
SOAK_ELEMS = 1 << 16
MAX_GROWTH_MB = {"emu": 150, "gloo": 64}


def _all_reduce_kernel(xGM: hp.GmAddr, yGM: hp.GmAddr, tilingGM: hp.GmAddr) -> None:
    hccl = cases.init_hccl(hp.Hccl(), tilingGM, ops=["AllReduce"])
    fp32, total = hp.HcclDataType.HCCL_DATA_TYPE_FP32, hp.HcclReduceOp.HCCL_REDUCE_SUM
    hccl.Wait(hccl.AllReduce[True](xGM, yGM, SOAK_ELEMS, fp32, total))
    hccl.Finalize()


def launches_growth(n: int) -> tuple[int, float]:
    """Resident memory growth (MiB) over ``n`` AllReduce launches after a warm-up; a result."""
    tiling = cases.make_tiling()

    def once() -> torch.Tensor:
        y = torch.zeros(SOAK_ELEMS)
        hp.launch(_all_reduce_kernel, torch.ones(SOAK_ELEMS), y, tiling)
        return y

    for _ in range(20):
        once()
    before = _resources()[2]
    for _ in range(n):
        y = once()
    return (_resources()[2] - before) >> 20, float(y[-1])


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="reads /proc")
@pytest.mark.parametrize("launches", [300, pytest.param(3000, marks=pytest.mark.slow)])
@pytest.mark.parametrize("backend_name", ["emu", "gloo"])
def test_memory_stays_flat_across_launches(backend_name: str, launches: int) -> None:
    n = 4
    got = hp.run(launches_growth, world_size=n, backend=backend_name, args=(launches,))
    growth = np.array([mb for mb, _ in got])
    assert [last for _, last in got] == [float(n)] * n
    assert (growth < MAX_GROWTH_MB[backend_name]).all(), (
        f"{launches} launches grew the ranks by {growth.tolist()} MiB"
    )
