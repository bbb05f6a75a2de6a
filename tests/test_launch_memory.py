"""Memory across kernel launches in one run (issue 23, item 4).

Every launch's tasks hold its buffers; once every rank returned from the
launch the servers must forget them, so that memory stays flat over
thousands of launches, on the emulator and on gloo (issue 28, goal 5: nothing
per process-group call either). The 3000-launch variant is marked ``slow``.
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
#: calls: 300 launches grew a gloo rank by 1.2 to 1.3 MiB, 3000 by 2.7 to 2.8 MiB; now 20 to 160 KiB
#: over 300 to 4000 launches (see "Memory per launch" in docs/performance.md).
SOAK_ELEMS = 1 << 16
MAX_GROWTH_KIB = {"emu": 8192, "gloo": 512}


def _all_reduce_kernel(xGM: hp.GmAddr, yGM: hp.GmAddr, tilingGM: hp.GmAddr) -> None:
    hccl = cases.init_hccl(hp.Hccl(), tilingGM, ops=["AllReduce"])
    fp32, total = hp.HcclDataType.HCCL_DATA_TYPE_FP32, hp.HcclReduceOp.HCCL_REDUCE_SUM
    hccl.Wait(hccl.AllReduce[True](xGM, yGM, SOAK_ELEMS, fp32, total))
    hccl.Finalize()


def launches_growth(n: int) -> tuple[float, float]:
    """Heap growth (KiB) over ``n`` AllReduce launches after a warm-up; a result."""
    tiling = cases.make_tiling()

    def once() -> torch.Tensor:
        y = torch.zeros(SOAK_ELEMS)
        hp.launch(_all_reduce_kernel, torch.ones(SOAK_ELEMS), y, tiling)
        return y

    for _ in range(20):
        once()
    before = memory.heap_bytes()
    for _ in range(n):
        y = once()
    return (memory.heap_bytes() - before) / 1024, float(y[-1])


@pytest.mark.skipif(not memory.has_heap_bytes(), reason="reads glibc's mallinfo2 (glibc >= 2.33)")
@pytest.mark.parametrize("launches", [300, pytest.param(3000, marks=pytest.mark.slow)])
@pytest.mark.parametrize("backend_name", ["emu", "gloo"])
def test_memory_stays_flat_across_launches(backend_name: str, launches: int) -> None:
    n = 4
    got = hp.run(launches_growth, world_size=n, backend=backend_name, args=(launches,))
    growth = np.array([kib for kib, _ in got])
    assert [last for _, last in got] == [float(n)] * n
    assert (growth < MAX_GROWTH_KIB[backend_name]).all(), (
        f"{launches} launches grew the ranks' heaps by {growth.round().tolist()} KiB"
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
            hp.launch(_all_reduce_kernel, x, y, tiling)
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
