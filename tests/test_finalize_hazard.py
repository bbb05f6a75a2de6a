"""Finalize without SyncAll: the race between other cores' Waits and Finalize's counter reset.

The shape is the end of ops-transformer's BatchMatMulReduceScatterAlltoAll: every
AIV core Commits and Waits the last handle, and core 0 (the sending core)
Finalizes right after its own Wait, with no SyncAll. The official client's
``Finalize<true>`` resets the finished-turn counters that the other cores' Waits
poll (hccl_aicpu_impl.h): on hardware they usually poll first, but may hang.
The default schedule runs the kernel as hardware usually does, with a
``finalize-unordered`` warning; exploration finds the schedule that hangs; a Wait
ordered after the Finalize hangs in every schedule and stays an error.
The CCU client of Ascend 950 resets no counter in Finalize (platform_v310/hccl_ccu_v0.h):
the same kernel on it is no race and no hang, in any order.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
import torch
from cases import init_hccl, make_tiling
from expect import expects_warning

import hccl_py as hp
from hccl_py import Hccl, HcclDataType, HcclReduceOp, HcclServerType

F32 = HcclDataType.HCCL_DATA_TYPE_FP32
SUM = HcclReduceOp.HCCL_REDUCE_SUM
AICPU, CCU = HcclServerType.HCCL_SERVER_TYPE_AICPU, HcclServerType.HCCL_SERVER_TYPE_CCU
N = 8  # float32 elements per rank and handle
HANDLES = 2  # like the kernel's AlltoAll handles and its last ReduceScatter
CORES = 4
WORLD = 2
TIMEOUT = 20.0
#: Schedules to explore: far more than a hanging one needs (each seeded schedule in which
#: a Wait polls after the Finalize puts the reset first with probability 1/2).
SCHEDULES = 16


def wait_all(h: Hccl, handles: list[int]) -> None:
    for handle in handles:
        h.Wait(handle)


def shipping_end(h: Hccl, handles: list[int]) -> None:
    """BatchMatMulReduceScatterAlltoAll's end: Wait every handle, then Finalize at once."""
    wait_all(h, handles)
    h.Finalize()


def synced_end(h: Hccl, handles: list[int]) -> None:
    """The fix: every core's last Wait comes before Finalize through a SyncAll."""
    wait_all(h, handles)
    hp.SyncAll()
    h.Finalize()


def wait_after_finalize(h: Hccl, handles: list[int]) -> None:
    """The sending core finalizes, then a SyncAll orders the other cores' Waits after it."""
    if hp.GetBlockIdx() == 0:
        wait_all(h, handles)
        h.Finalize()
        hp.SyncAll()
    else:
        hp.SyncAll()
        wait_all(h, handles)
        h.Finalize()


def query_loops(h: Hccl, handles: list[int]) -> None:
    """Core 0 Waits and Finalizes at once; the other cores poll Query until each handle is
    done instead of Waiting: Query reads the same finished-turn counters."""
    if hp.GetBlockIdx() == 0:
        shipping_end(h, handles)
        return
    for handle in handles:
        while h.Query(handle) < 1:
            pass
    h.Finalize()


def query_after_finalize(h: Hccl, handles: list[int]) -> None:
    """As :func:`wait_after_finalize`, with Query loops on the other cores."""
    if hp.GetBlockIdx() == 0:
        shipping_end(h, handles)
        hp.SyncAll()
        return
    hp.SyncAll()
    query_loops(h, handles)


ENDS = {
    "shipping": shipping_end,
    "synced": synced_end,
    "after": wait_after_finalize,
    "query": query_loops,
    "query-after": query_after_finalize,
}


def allreduce_kernel(end: str, y: torch.Tensor, seen: torch.Tensor, server: Any) -> Any:
    """Every AIV core prepares and commits the AllReduces, ends with ``end``, then reads y."""

    def kernel(x: Any, y_gm: Any, tiling: Any) -> None:
        h = init_hccl(Hccl[server](), tiling)
        handles = [h.AllReduce[False](x, y_gm + i * N * 4, N, F32, SUM, 1) for i in range(HANDLES)]
        for handle in handles:
            h.Commit(handle)
        ENDS[end](h, handles)
        seen[hp.GetBlockIdx()] = y

    return kernel


def main(end: str, server: Any = AICPU) -> torch.Tensor:
    """One launch on ``CORES`` AIV cores; what each core read from y after its Wait."""
    x = torch.arange(N, dtype=torch.float32) + 10 * hp.get_rank()
    y = torch.zeros(HANDLES * N)
    seen = torch.full((CORES, HANDLES * N), float("nan"))
    hp.launch(allreduce_kernel(end, y, seen, server), x, y, make_tiling(), block_dim=CORES)
    return seen


def expected() -> np.ndarray:
    """What every core of every rank reads: the sum of the ranks' x."""
    xs = np.arange(N, dtype=np.float32) + 10 * np.arange(WORLD, dtype=np.float32)[:, None]
    return np.tile(xs.sum(axis=0), (CORES, HANDLES))


def kinds(result: Any) -> dict[int, list[str]]:
    """The warning kinds each rank reported."""
    return {rank: [w.kind for w in ws] for rank, ws in result.warnings.items()}


def deadlock_of(err: hp.WorldError) -> str:
    """The text of the run's deadlock report (a root cause)."""
    found = [e for e in err.root_causes.values() if isinstance(e, hp.HcclDeadlockError)]
    assert found, f"no deadlock report:\n{err}"
    return str(found[0])


@expects_warning("finalize-unordered")
def test_default_schedule_runs_the_shipping_kernel_with_one_warning_per_rank() -> None:
    result = hp.run(main, world_size=WORLD, args=("shipping",), timeout=TIMEOUT)
    for seen in result:
        np.testing.assert_array_equal(seen.numpy(), expected())
    assert kinds(result) == {rank: ["finalize-unordered"] for rank in range(WORLD)}
    text = str(result.warnings[0][0])
    for fact in ("AIV core 0's Finalize", "handle 0 round 0", "SyncAll()", "may poll after"):
        assert fact in text, f"{fact!r} missing from: {text}"


@expects_warning("finalize-unordered")
def test_exploring_finds_the_hang_and_its_seed_replays_it() -> None:
    with pytest.raises(hp.WorldError) as info:
        hp.run(main, world_size=WORLD, args=("shipping",), explore=SCHEDULES, timeout=TIMEOUT)
    err = info.value
    assert isinstance(err.seed, int) and err.seed >= 1
    assert f"replay: hp.run(..., seed={err.seed}, poison=True)" in str(err)
    report = deadlock_of(err)
    assert re.search(
        r"AIV core [1-3] waits for round 0 of handle [01] AllReduce\(.*\) in domain hccl_world_group",
        report,
    )
    for fact in (
        "forever",
        "AIV core 0's Finalize reset the finished-turn counters",
        "no SyncAll() between",
        "[finalize-unordered]",
    ):
        assert fact in report, f"{fact!r} missing from:\n{report}"
    with pytest.raises(hp.WorldError) as again:
        hp.run(main, world_size=WORLD, args=("shipping",), seed=err.seed, timeout=TIMEOUT)
    assert deadlock_of(again.value) == report


def test_syncall_before_finalize_gives_no_warning_in_any_schedule() -> None:
    result = hp.run(main, world_size=WORLD, args=("synced",), explore=SCHEDULES, timeout=TIMEOUT)
    for seen in result:
        np.testing.assert_array_equal(seen.numpy(), expected())
    # Any HcclWarning in any schedule would fail the run (pyproject.toml makes them errors).
    assert not any(kinds(result).values())


def _flag_barrier_main(block_dim: int, mode: int = 1) -> list[float]:
    """A 1:2 mixed kernel whose AIV cores each Wait the AllReduce, then pass a CrossCore
    barrier of the AIV cores of their AI core before the sending core (AIV 0) Finalizes:
    mode 1, or a round trip through their AIC: mode 2 (every AIV core's Set releases the
    AIC, whose Set releases them) or mode 4 (each AIV core's flag to the AIC, which answers
    each one)."""

    def kernel(x: Any, y_gm: Any, tiling: Any) -> None:
        if hp.g_coreType != hp.AIV:
            if mode == 2:
                hp.CrossCoreWaitFlag(5)
                hp.CrossCoreSetFlag[2, hp.PIPE_FIX](6)
            elif mode == 4:  # AIV0's flag 3 arrives as 3, AIV1's as 19; 19 answers AIV1's 3
                hp.CrossCoreWaitFlag[4, hp.PIPE_FIX](3)
                hp.CrossCoreWaitFlag[4, hp.PIPE_FIX](19)
                hp.CrossCoreSetFlag[4, hp.PIPE_FIX](3)
                hp.CrossCoreSetFlag[4, hp.PIPE_FIX](19)
            return
        h = init_hccl(Hccl(), tiling)
        h.Wait(h.AllReduce[True](x, y_gm, N, F32, SUM, 1))
        hp.CrossCoreSetFlag[mode, hp.PIPE_MTE3](5 if mode == 2 else 3)
        hp.CrossCoreWaitFlag[mode, hp.PIPE_MTE3](6 if mode == 2 else 3)
        h.Finalize()

    y = torch.zeros(N)
    x = torch.arange(N, dtype=torch.float32) + 10 * hp.get_rank()
    hp.launch(kernel, x, y, make_tiling(), block_dim=block_dim, kernel_type="mix_aic_1_2")
    return y.tolist()


@pytest.mark.parametrize("mode", [1, 2, 4])
def test_a_crosscore_barrier_of_an_ai_core_orders_the_waits_of_its_aiv_cores(mode: int) -> None:
    """Mode 1 completes once every AIV core of the AI core set it, the mode-2 Set that releases
    the AIC likewise, and in mode 4 the AIC answers each AIV core after both flags came; so
    each one's Wait comes before AIV 0's Finalize: no warning on any schedule (before
    2026-11-30, only SyncAll and mode 0 counted, and every run warned finalize-unordered;
    the cores' vector clocks now follow every chain of flags, emu and gloo alike)."""
    got = hp.run(_flag_barrier_main, world_size=WORLD, args=(1, mode), explore=SCHEDULES)
    assert got == [expected()[0, :N].tolist()] * WORLD
    assert not any(kinds(got).values())


@expects_warning("finalize-unordered")
def test_a_mode1_barrier_of_another_ai_core_orders_nothing() -> None:
    """With two AI cores, AI core 1's AIV cores pass their own mode-1 barrier, not AIV 0's."""
    result = hp.run(_flag_barrier_main, world_size=WORLD, args=(2,), timeout=TIMEOUT)
    assert kinds(result) == {rank: ["finalize-unordered"] for rank in range(WORLD)}
    assert "AIV core 2's Wait" in str(result.warnings[0][0]), result.warnings[0][0]


def test_a_wait_ordered_after_finalize_hangs_in_every_schedule() -> None:
    with pytest.raises(hp.WorldError) as info:
        hp.run(main, world_size=WORLD, args=("after",), explore=4, timeout=TIMEOUT)
    err = info.value
    assert err.seed is None, "the default schedule must already fail"
    roots = [e for e in err.root_causes.values() if isinstance(e, hp.HcclCoreError)]
    assert roots, f"no HcclCoreError root cause:\n{err}"
    text = str(err)
    for fact in (
        "AIV core 1 waits for handle 0 round 0 after AIV core 0 finalized",
        "hangs in every schedule",
        "hccl_world_group",
    ):
        assert fact in text, f"{fact!r} missing from:\n{text}"


@expects_warning("finalize-unordered")
def test_query_loops_race_the_finalize_as_waits_do() -> None:
    """Query reads the finished-turn counters that Finalize resets (hccl_aicpu_impl.h, Query:
    WaitFinishCntFromGm(pos, 0)): the default schedule warns, as for a Wait; exploring finds a
    schedule whose Query loop reads 0 forever, and its seed replays it."""
    result = hp.run(main, world_size=WORLD, args=("query",), timeout=TIMEOUT)
    for seen in result:
        np.testing.assert_array_equal(seen.numpy(), expected())
    assert kinds(result) == {rank: ["finalize-unordered"] for rank in range(WORLD)}
    assert "Query of handle" in str(result.warnings[0][0]), result.warnings[0][0]
    with pytest.raises(hp.WorldError) as info:
        hp.run(main, world_size=WORLD, args=("query",), explore=SCHEDULES, timeout=TIMEOUT)
    report = deadlock_of(info.value)
    assert re.search(r"AIV core [1-3] polls Query for handle [01] in domain", report), report
    assert "reads 0 forever: AIV core 0's Finalize reset the finished-turn counters" in report
    with pytest.raises(hp.WorldError) as again:
        hp.run(main, world_size=WORLD, args=("query",), seed=info.value.seed, timeout=TIMEOUT)
    assert deadlock_of(again.value) == report


def test_a_query_loop_ordered_after_finalize_is_a_deadlock_in_every_schedule() -> None:
    with pytest.raises(hp.WorldError) as info:
        hp.run(main, world_size=WORLD, args=("query-after",), explore=4, timeout=TIMEOUT)
    assert info.value.seed is None, "the default schedule must already fail"
    report = deadlock_of(info.value)
    assert "AIV core 1 polls Query for handle 0 in domain hccl_world_group" in report, report


@expects_warning("finalize-unordered")
def test_gloo_runs_the_shipping_kernel_with_the_warning() -> None:
    result = hp.run(main, world_size=WORLD, args=("shipping",), backend="gloo", timeout=TIMEOUT)
    for seen in result:
        np.testing.assert_array_equal(seen.numpy(), expected())
    assert kinds(result) == {rank: ["finalize-unordered"] for rank in range(WORLD)}


@pytest.mark.parametrize("end", ["shipping", "after"])
def test_the_ccu_clients_finalize_resets_nothing_so_no_order_hangs(end: str) -> None:
    """The CCU client's Finalize Waits for the last handle and sends the finalize message;
    another core's Wait polls the round's CKE or the working core's soft-sync count
    (finishCntGM_), which Finalize leaves alone: no warning, no hang, in any schedule."""
    result = hp.run(
        main,
        world_size=WORLD,
        args=(end, CCU),
        platform="950",
        explore=SCHEDULES,
        timeout=TIMEOUT,
    )
    for seen in result:
        np.testing.assert_array_equal(seen.numpy(), expected())
    assert not any(kinds(result).values())
