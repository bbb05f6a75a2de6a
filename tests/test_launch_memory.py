"""Memory across kernel launches in one run (issue 23, item 4).

Every launch's tasks hold its buffers; once every rank returned from the
launch the servers must forget them, so that memory stays flat over
thousands of launches, on the emulator and on gloo (issue 28, goal 5: nothing
per process-group call either). The long soak, which measures the growth per
launch, is marked ``slow``.
"""

from __future__ import annotations

import os

import cases
import numpy as np
import pytest
import torch

import hccl_py as hp
from hccl_py.bench import memory
from hccl_py.launcher import torch_env

#: Each test is a unit of its own under xdist (conftest.py): none shares a module's jobs.
pytestmark = pytest.mark.spread

#: Launches of the memory soak (two 256 KiB buffers each) and the growth of the bytes that
#: malloc holds for the program (every arena, mmapped blocks too; freed memory that glibc keeps
#: is not counted, so the measure is exact to a few KiB) that they may cause: the world's whole
#: process on the emulator (other ranks' launches may be under way: up to 1.5 MiB), each rank's
#: process on gloo. Before issue 23 every launch kept its buffers (512 KiB a launch). Before
#: issue 28 torch's flight recorder kept 1.3 KiB for each of a rank's last 2000 process-group
#: calls: 300 launches grew a gloo rank by 1.2 to 1.3 MiB, 3000 by 2.7 to 2.8 MiB; then 20 to 160
#: KiB over 300 to 4000 launches (see "Memory per launch" in docs/performance.md). On 2026-11-28
#: (at the tree of that morning and at the evening's) 300 launches of 4 gloo ranks grew each rank
#: by 277 to 288 KiB, all of it in the first 100 launches after the warm-up (then 1 to 11 KiB a
#: hundred launches), and one full-suite run saw 554 KiB on one rank: the limit is 1 MiB, still 75
#: times below a launch that keeps its two 256 KiB buffers; the long soak below bounds each launch.
SOAK_ELEMS = 1 << 16
MAX_GROWTH_KIB = {"emu": 8192, "gloo": 1024}

#: The long soak measures what each launch keeps: 10 segments of 100 launches after the warm-up,
#: the heap's growth over each. A leak of L bytes a launch grows every segment by 100 L, so the
#: median segment (which a one-off step, a cache filling up, cannot move) shows it in 1000
#: launches as clearly as the total of 3000 did; the limit per launch is the 3000-launch soak's
#: (512 KiB / 3000 = 175 bytes on gloo). Measured: 0 to 8 KiB a segment (below 80 bytes a launch)
#: on gloo, 0 to 2 KiB on the emulator. Its buffers are 16 floats: the 300-launch soak, with
#: 256 KiB buffers, fails on a launch that keeps its buffers (150 MiB) or any part of them above
#: 2 KiB on gloo; here the launch's own bookkeeping (tasks, handles, process-group calls) is what
#: can leak, and small buffers make an emulator launch 3 times cheaper and leave its world no
#: other ranks' buffers in flight to count (up to 1.5 MiB with 256 KiB buffers): its limit is
#: 350 bytes a launch, 8 times tighter than the 3000-launch soak's 2.7 KiB.
LONG_SOAK_SEGMENTS, LONG_SOAK_SEGMENT = 10, 100
LONG_SOAK_ELEMS = 16
LONG_SOAK_MAX_BYTES_PER_LAUNCH = {"emu": 350, "gloo": 512 * 1024 // 3000}
#: What a launch keeps is each rank's own bookkeeping, which two gloo processes exercise as four
#: do; four processes on a 2-core machine made this the suite's longest test (29 s against 17 s, alone).
LONG_SOAK_RANKS = {"emu": 4, "gloo": 2}


def _all_reduce_kernel(xGM: hp.GmAddr, yGM: hp.GmAddr, tilingGM: hp.GmAddr, elems: int) -> None:
    hccl = cases.init_hccl(hp.Hccl(), tilingGM, ops=["AllReduce"])
    fp32, total = hp.HcclDataType.HCCL_DATA_TYPE_FP32, hp.HcclReduceOp.HCCL_REDUCE_SUM
    hccl.Wait(hccl.AllReduce[True](xGM, yGM, elems, fp32, total))
    hccl.Finalize()


def segments_growth(segments: int, launches: int, elems: int) -> tuple[list[float], float]:
    """Heap growth (KiB) over each of ``segments`` runs of ``launches`` AllReduce launches of
    ``elems`` floats, after a warm-up; a result."""
    tiling = cases.make_tiling()

    def once() -> torch.Tensor:
        y = torch.zeros(elems)
        hp.launch(_all_reduce_kernel, torch.ones(elems), y, tiling, elems)
        return y

    for _ in range(20):
        once()
    growth = []
    for _ in range(segments):
        before = memory.heap_bytes()
        for _ in range(launches):
            y = once()
        growth.append((memory.heap_bytes() - before) / 1024)
    return growth, float(y[-1])


needs_heap_bytes = pytest.mark.skipif(
    not memory.has_heap_bytes(), reason="reads glibc's mallinfo2 (glibc >= 2.33)"
)


@needs_heap_bytes
@pytest.mark.parametrize("backend_name", ["emu", "gloo"])
def test_memory_stays_flat_across_launches(backend_name: str) -> None:
    n, launches = 4, 300
    args = (1, launches, SOAK_ELEMS)
    got = hp.run(segments_growth, world_size=n, backend=backend_name, args=args)
    growth = np.array([kib for (kib,), _ in got])
    assert [last for _, last in got] == [float(n)] * n
    assert (growth < MAX_GROWTH_KIB[backend_name]).all(), (
        f"{launches} launches grew the ranks' heaps by {growth.round().tolist()} KiB"
    )


@needs_heap_bytes
@pytest.mark.slow
@pytest.mark.parametrize("backend_name", ["emu", "gloo"])
def test_memory_per_launch_stays_flat_over_a_long_soak(backend_name: str) -> None:
    n = LONG_SOAK_RANKS[backend_name]
    args = (LONG_SOAK_SEGMENTS, LONG_SOAK_SEGMENT, LONG_SOAK_ELEMS)
    got = hp.run(segments_growth, world_size=n, backend=backend_name, args=args)
    assert [last for _, last in got] == [float(n)] * n
    growth = np.array([segments for segments, _ in got])  # KiB, a row per rank
    per_launch = np.median(growth, axis=1) * 1024 / LONG_SOAK_SEGMENT
    launches = LONG_SOAK_SEGMENTS * LONG_SOAK_SEGMENT
    assert (per_launch < LONG_SOAK_MAX_BYTES_PER_LAUNCH[backend_name]).all(), (
        f"the ranks' heaps grew by {per_launch.round().tolist()} bytes a launch (median of "
        f"{LONG_SOAK_SEGMENTS} segments of {LONG_SOAK_SEGMENT}; KiB a segment: "
        f"{growth.round().tolist()})"
    )
    total = growth.sum(axis=1)
    assert (total < MAX_GROWTH_KIB[backend_name]).all(), (
        f"{launches} launches grew the ranks' heaps by {total.round().tolist()} KiB"
    )


def test_flight_recorder_is_off_unless_the_user_sized_it(monkeypatch: pytest.MonkeyPatch) -> None:
    env: dict[str, str] = {}
    monkeypatch.setattr(os, "environ", env)
    torch_env.quiet_flight_recorder()
    assert env == {"TORCH_FR_BUFFER_SIZE": "0"}
    env.clear()
    env["TORCH_NCCL_TRACE_BUFFER_SIZE"] = "100"
    torch_env.quiet_flight_recorder()
    assert env == {"TORCH_NCCL_TRACE_BUFFER_SIZE": "100"}


def buffers_freed_at_return() -> list[bool]:
    """Whether a launch's buffers are freed as soon as the caller drops them (no collection)."""
    import gc
    import weakref

    tiling = cases.make_tiling()
    freed = []
    gc.disable()
    try:
        for _ in range(2):
            x, y = torch.ones(SOAK_ELEMS), torch.zeros(SOAK_ELEMS)
            hp.launch(_all_reduce_kernel, x, y, tiling, SOAK_ELEMS)
            refs = [weakref.ref(x), weakref.ref(y)]
            del x, y
            freed.append(all(r() is None for r in refs))
    finally:
        gc.enable()
    return freed


def test_a_launch_keeps_no_buffer_after_it_returned() -> None:
    """No reference cycle (the sending Hccl object and its client state) holds a launch's buffers.

    On gloo, a rank's own process: once its launch returned, nothing of it is left. (The
    emulator's world keeps a domain's finished collective until every rank's launch has
    returned, since the tasks of all ranks sit in one queue: one launch at most.)
    """
    got = hp.run(buffers_freed_at_return, world_size=2, backend="gloo")
    assert got == [[True, True]] * 2
