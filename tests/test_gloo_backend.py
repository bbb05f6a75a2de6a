"""The gloo backend (one process per rank over torch.distributed) beyond the shared semantic tests.

The core semantic tests (worked examples, random ops, call rules) run on gloo
through the ``backend`` fixture. This file covers what is specific to
processes: world sizes 1-4 on the world group, the native reduction path, the
order of ranks inside process groups, mismatches reported from descriptors
exchanged over the process group exactly as the emulator reports them, local deadlocks, rank failures
(exceptions and killed processes) and what cannot be sent to a process.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import cases
import numpy as np
import pytest
import reference as ref
import torch

import hccl_py as hp
from hccl_py import Hccl
from hccl_py.kernel.context import current_rank_context
from hccl_py.launcher.liveness import RankDiedError

#: Each test is a unit of its own under xdist (conftest.py): none shares a module's jobs.
pytestmark = pytest.mark.spread

TIMEOUT = 20.0
FP32 = hp.HcclDataType.HCCL_DATA_TYPE_FP32


def _run(fn: Any, world: int, *args: Any, backend: str = "gloo", **kwargs: Any) -> list:
    return hp.run(
        fn,
        world_size=world,
        backend=backend,
        timeout=kwargs.pop("timeout", TIMEOUT),
        args=args,
        **kwargs,
    )


# ------------------------------------------------------------------ world sizes
@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_every_op_on_the_world_group(world: int) -> None:
    """One case of each op on the world group itself (no sub-group), per world size."""
    rng = np.random.default_rng(world)
    batch = [
        cases.draw_case(lambda lo, hi: int(rng.integers(lo, hi + 1)), op, world) for op in cases.OPS
    ]
    cases.run_and_check(batch, "gloo", world_size=world)
    assert _run(hp.device, world) == [torch.device("cpu")] * world


# ------------------------------------------------------------------ native reductions
def _integer_valued(case: cases.OpCase) -> cases.OpCase:
    """The case with small integer inputs: exact whatever order a process group sums in."""
    rng = np.random.default_rng(case.seed)
    values = tuple(
        tuple(float(v) for v in rng.integers(-3, 4, case.extent("send", r)))
        for r in range(case.world_size)
    )
    return dataclasses.replace(case, values=values)


def test_native_reductions_match_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    """HCCL_PY_REDUCE=native: the process group's own all_reduce / reduce_scatter.

    Covers every reducible type (FP16/BF16 summed in FP32, INT16 in INT32 on
    gloo), SUM/MAX/MIN, strides, repeats, offsets and sub-domains of 1..4 ranks.
    """
    monkeypatch.setenv("HCCL_PY_REDUCE", "native")
    rng = np.random.default_rng(11)
    draw = lambda lo, hi: int(rng.integers(lo, hi + 1))  # noqa: E731
    batch = [
        _integer_valued(cases.draw_case(draw, op, world))
        for op in cases.REDUCING
        for world in (1, 2, 3, 4)
        for _ in range(3)
    ]
    assert {c.dtype for c in batch} >= {ref.FP16, ref.INT16}, "the batch should widen types"
    cases.run_and_check(batch, "gloo", world_size=4)


NAN = float("nan")
#: Rank k's values for the NaN test: each position has a NaN on some rank, next to numbers that
#: gloo's MAX/MIN would keep ([1, NaN, 3, 2] gave 1.0), and the last position has none.
NAN_INPUTS = ([1.0, NAN, 3.0, NAN, 5.0, 2.0], [NAN, 2.0, NAN, 4.0, NAN, -2.0])


def nan_reductions() -> list[list[float]]:
    """MAX and MIN, AllReduce and ReduceScatter, FP32 and FP16 (widened), over NAN_INPUTS."""
    mine = NAN_INPUTS[hp.get_rank()]
    out = []
    for dtype in (torch.float32, torch.float16):
        for op in ("max", "min"):
            x = torch.tensor(mine, dtype=dtype)
            hp.all_reduce(x, op=op)
            out.append(x.float().tolist())
            y = torch.zeros(3, dtype=dtype)
            hp.reduce_scatter_tensor(y, torch.tensor(mine, dtype=dtype), op=op)
            out.append(y.float().tolist())
    return out


def test_native_max_and_min_propagate_nan(monkeypatch: pytest.MonkeyPatch) -> None:
    """gloo's MAX/MIN drop NaN; the native path gives NaN wherever a rank has one, as numpy does."""
    monkeypatch.setenv("HCCL_PY_REDUCE", "native")
    results = _run(nan_reductions, 2)
    stacked = np.array(NAN_INPUTS)
    for rank, got in enumerate(results):
        for i, combine in enumerate([np.maximum, np.minimum] * 2):  # FP32, then FP16
            want = combine.reduce(stacked, axis=0)
            np.testing.assert_array_equal(np.array(got[2 * i]), want)
            np.testing.assert_array_equal(np.array(got[2 * i + 1]), want[3 * rank : 3 * rank + 3])


#: Element counts of at least EXACT_SPLIT_MIN_BYTES, not a multiple of 3 ranks.
SPLIT_COUNTS = {torch.float32: 20_001, torch.float16: 40_003, torch.bfloat16: 32_771}


def large_exact_all_reduces() -> list[torch.Tensor]:
    """Per rank: exact AllReduces (SUM, MAX, MIN) of rounds that take the reduce-scatter path,
    on the world group and on a group whose domain order reverses the world's; rank 0 holds
    a NaN every 97 elements, and every third element is +0.0 or -0.0 on every rank."""
    reverse = hp.new_group([2, 1, 0])
    rank = hp.get_rank()
    gen = torch.Generator().manual_seed(rank)
    out = []
    for dtype, count in SPLIT_COUNTS.items():
        for op, group in (("sum", None), ("max", None), ("min", None), ("sum", reverse)):
            x = (torch.randn(count, generator=gen) * 1000).to(dtype)
            if rank == 0:  # NaNs in every chunk: their bits must not depend on the cut
                x[::97] = NAN
            # MAX and MIN ties of +0.0 and -0.0 in every chunk's tail: the same sign however cut
            x[::3] = torch.where(torch.arange(count)[::3] % (rank + 2) == 0, -0.0, 0.0).to(dtype)
            hp.all_reduce(x, op=op, group=group)
            out.append(x)
    return out


def test_exact_all_reduce_of_large_rounds_is_bit_identical_to_the_emulator() -> None:
    """Large exact AllReduce rounds reduce-scatter then all-gather (not gather every input);
    every element is still reduced in rank order, so the bytes equal the emulator's."""
    from hccl_py.backends.dist.rounds import EXACT_SPLIT_MIN_BYTES

    assert min(c * t.itemsize for t, c in SPLIT_COUNTS.items()) >= EXACT_SPLIT_MIN_BYTES
    gloo = _run(large_exact_all_reduces, 3)
    emu = _run(large_exact_all_reduces, 3, backend="emu")
    for rank, (ours, theirs) in enumerate(zip(gloo, emu, strict=True)):
        for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
            assert torch.equal(a.view(torch.uint8), b.view(torch.uint8)), f"rank {rank}, case {i}"
    assert not torch.equal(gloo[0][0], emu[0][0] * 0), "the reduction ran"


def test_poisoned_late_rounds_still_land(monkeypatch: pytest.MonkeyPatch) -> None:
    """poison=True and the late schedule on gloo: receive ranges are poisoned once reached, then filled."""
    batch = cases.numpy_cases(5, 6)
    per_rank = hp.run(
        cases.run_cases,
        world_size=max(c.world_size for c in batch),
        backend="gloo",
        platform="A3",
        timeout=TIMEOUT,
        schedule="late",
        poison=True,
        args=(batch,),
    )
    for i, case in enumerate(batch):
        cases.check_case(case, [results[i] for results in per_rank])


# ------------------------------------------------------------------ rank order in groups
def _group_kernel(sendGM: Any, recvGM: Any, tilingGM: Any, case: cases.OpCase, idx: int) -> None:
    hccl = cases.init_hccl(Hccl(), tilingGM, ops=(case.op,))
    send, recv = sendGM + case.offset("send", idx), recvGM + case.offset("recv", idx)
    handle = cases.prepare(hccl, case, idx, send, recv)
    for _ in range(case.repeat):
        hccl.Wait(handle)
    hccl.Finalize()


def run_on_group(ranks: list[int], batch: list[cases.OpCase], sorted_pg: bool) -> list:
    """Per rank: run ``batch`` on ``hp.new_group(ranks)``; the domain index is the position in ``ranks``.

    With ``sorted_pg`` the process group is created with sorted ranks (as torch
    versions without ``sort_ranks`` do), so PG ranks differ from domain indices.
    """
    if sorted_pg:
        import hccl_py.backends.dist.server as backend_dist

        backend_dist._NEW_GROUP_SORTS = False
    group = hp.new_group(ranks)
    idx = group.rank_of(hp.get_rank())
    if idx is None:
        return [None] * len(batch)
    results = []
    for case in batch:
        send_np, recv_np = cases.rank_buffers(case, idx)
        send, recv = torch.from_numpy(send_np.copy()), torch.from_numpy(recv_np.copy())
        hp.launch(
            _group_kernel,
            send,
            recv,
            cases.make_tiling(case.skip_local, {0: group}),
            case,
            idx,
            groups={0: group},
        )
        results.append(cases.CaseResult(send.numpy(), recv.numpy()))
    return results


@pytest.mark.parametrize("sorted_pg", [False, True], ids=["pg-in-domain-order", "pg-sorted"])
def test_domain_order_differs_from_global_order(sorted_pg: bool) -> None:
    """``hp.new_group([2, 0, 3])``: domain rank 0 is global rank 2; every op honours that order."""
    ranks = [2, 0, 3]
    rng = np.random.default_rng(3)
    draw = lambda lo, hi: int(rng.integers(lo, hi + 1))  # noqa: E731
    batch = [
        dataclasses.replace(cases.draw_case(draw, op, len(ranks)), block_dim=1, commit="template")
        for op in (*cases.OPS, "AllGather", "AlltoAll")
    ]
    batch[-2:] = [dataclasses.replace(c, skip_local=True) for c in batch[-2:]]
    per_rank = _run(run_on_group, 4, ranks, batch, sorted_pg, platform="A3")
    assert per_rank[1] == [None] * len(batch)
    for i, case in enumerate(batch):
        _check_buffers(case, [per_rank[g][i] for g in ranks])


def _check_buffers(case: cases.OpCase, results: list) -> None:
    """Receive buffers equal the reference, send buffers are untouched."""
    inputs = [cases.rank_buffers(case, r) for r in range(case.world_size)]
    want = cases.expected_recvs(case, [s for s, _ in inputs], [r for _, r in inputs])
    for idx, res in enumerate(results):
        cases.assert_bytes_equal(res.recv, want[idx], f"{case} domain rank {idx}: recvBuf")
        cases.assert_bytes_equal(res.send, inputs[idx][0], f"{case} domain rank {idx}: sendBuf")


# ------------------------------------------------------------------ mismatches
def _tiling() -> cases.KernelTiling:
    return cases.make_tiling()


def _gather_kernel(xGM: Any, yGM: Any, tilingGM: Any, counts: list[int]) -> None:
    hccl = cases.init_hccl(Hccl(), tilingGM, ops=("AllGather",))
    handles = [hccl.AllGather[True](xGM, yGM, c, FP32, 0) for c in counts]
    for handle in handles:
        hccl.Wait(handle)
    hccl.Finalize()


def mismatching_rank(plan: dict[int, list[int] | None]) -> None:
    """Rank r prepares AllGathers of ``plan[r]`` counts (None: launches nothing)."""
    counts = plan[hp.get_rank()]
    if counts is None:
        return
    x = torch.ones(8)
    y = torch.zeros(8 * hp.get_world_size())
    hp.launch(_gather_kernel, x, y, _tiling(), counts)


def _root_causes(plan: dict, backend: str, **kwargs: Any) -> dict[int, BaseException]:
    with pytest.raises(hp.WorldError) as info:
        _run(mismatching_rank, len(plan), plan, backend=backend, **kwargs)
    return info.value.root_causes


@pytest.mark.parametrize(
    "plan",
    [{0: [4], 1: [5]}, {0: [4], 1: [4, 4]}],
    ids=["different-counts", "different-task-numbers"],
)
def test_mismatch_is_reported_as_on_the_emulator(plan: dict) -> None:
    """Descriptors exchanged over the process group give the emulator's very report (same code)."""
    gloo = _root_causes(plan, "gloo", timeout=10.0)
    emu = _root_causes(plan, "emu", timeout=10.0)
    assert gloo, "every rank failed only because of a peer?"
    for errors in (gloo, emu):
        assert all(isinstance(e, hp.HcclMismatchError) for e in errors.values()), errors
    assert {str(e) for e in gloo.values()} <= {str(e) for e in emu.values()}


def kernel_or_framework_rank() -> None:
    """Rank 0 calls a framework collective where rank 1 launches a kernel AllGather."""
    x = torch.ones(8)
    y = torch.zeros(8 * hp.get_world_size())
    if hp.get_rank() == 0:
        hp.all_gather_into_tensor(y, x)
    else:
        hp.launch(_gather_kernel, x, y, _tiling(), [8])


def test_a_kernel_task_against_a_framework_collective_is_named_on_both_sides() -> None:
    """The descriptor and the framework arguments travel in the same exchange: each side
    reads what the other called at once, not at the timeout. The kernel's rank reports it
    itself, or, where rank 0's report stopped its core's Wait before its own comparison ended
    (seen once in a whole suite on a loaded machine), quotes that report (docs/backends.md):
    which of the two comes first is up to the machine's timing."""
    with pytest.raises(hp.WorldError) as info:
        _run(kernel_or_framework_rank, 2, timeout=10.0)
    failures = info.value.failures
    assert sorted(failures) == [0, 1], failures
    named = "rank 0 all_gather_into_tensor, rank 1 kernel task #0 (AllGather(FP32, count=8"
    assert isinstance(failures[0], hp.HcclMismatchError), failures
    assert named in str(failures[0])
    if isinstance(failures[1], hp.HcclPeerError):
        assert "stopped because rank 0 failed: HcclMismatchError" in str(failures[1])
        assert named in str(failures[1])
    else:
        assert isinstance(failures[1], hp.HcclMismatchError), failures
        text = "rank 1 compares kernel task #0 (handle 0, AllGather(FP32, count=8"
        assert text in str(failures[1])
        assert "rank 0 did not: it called all_gather_into_tensor" in str(failures[1])
    # the emulator has no exchange to meet in: the same program is a deadlock naming both
    emu = _root_causes_of(kernel_or_framework_rank, 2, backend="emu")
    assert all(isinstance(e, hp.HcclDeadlockError) for e in emu.values()), emu
    text = str(next(iter(emu.values())))
    assert "rank 0 waits in all_gather_into_tensor" in text, text
    assert "rank 1 waits for round 0 of handle 0 AllGather(FP32, count=8" in text, text


def kernel_rank_compares_after_the_peers_report() -> None:
    """:func:`kernel_or_framework_rank`, but rank 1 compares the exchanged records only once
    rank 0's report has stopped its waits (as a loaded machine may order it): where its domain
    thread runs the round, once its function has failed; where the waiting core runs it
    itself, once the report has reached the rank."""
    from hccl_py.backends.dist import first_round
    from hccl_py.kernel.context import current_core_context
    from hccl_py.launcher.store import failed_key

    if hp.get_rank() == 1:
        real, ctx = first_round.received, current_rank_context()

        def stopped() -> bool:
            if current_core_context() is not None:  # the core's own Wait: it cannot fail first
                return ctx.blocker.error is not None
            return ctx.server.session.store.check([failed_key(1)])

        def late(*args: Any, **kwargs: Any) -> Any:
            deadline = time.monotonic() + 20.0
            while not stopped() and time.monotonic() < deadline:
                time.sleep(0.01)
            return real(*args, **kwargs)

        first_round.received = late
    kernel_or_framework_rank()


def test_the_kernel_rank_reports_its_own_finding_when_the_peers_report_came_first() -> None:
    """Until stop 69 a rank whose waits a peer's report stopped before its own comparison of
    the exchanged records ended said only "stopped because rank 0 failed", although it found
    the mismatch itself a moment later; its outcome is now that finding."""
    with pytest.raises(hp.WorldError) as info:
        _run(kernel_rank_compares_after_the_peers_report, 2, timeout=30.0)
    failures = info.value.failures
    assert isinstance(failures[1], hp.HcclMismatchError), failures
    assert "rank 1 compares kernel task #0 (handle 0, AllGather(FP32, count=8" in str(failures[1])
    assert sorted(info.value.root_causes) == [0, 1], failures


def _root_causes_of(fn: Any, world: int, **kwargs: Any) -> dict[int, BaseException]:
    with pytest.raises(hp.WorldError) as info:
        _run(fn, world, timeout=10.0, **kwargs)
    return info.value.root_causes


def test_peer_that_returned_is_named() -> None:
    """A rank that returns without preparing the task its peer waits for: no hang, a clear report."""
    causes = _root_causes({0: [4], 1: None}, "gloo", timeout=10.0)
    assert isinstance(causes[0], hp.HcclDeadlockError)
    assert "rank 1 returned from its function without preparing task #0" in str(causes[0])


def test_mismatch_without_checks_fails_within_the_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    """HCCL_PY_CHECK_TASKS=0 (HCCL's default): nothing compares the tasks; rank 1's extra
    AllGather ends when its peer's process is gone (or at the timeout), not in a hang."""
    monkeypatch.setenv("HCCL_PY_CHECK_TASKS", "0")
    with pytest.raises(hp.WorldError) as info:
        _run(mismatching_rank, 2, {0: [4], 1: [4, 4]}, timeout=2.0)
    failures = info.value.failures
    assert list(failures) == [1], failures
    assert isinstance(failures[1], (hp.HcclPeerError, hp.HcclTimeoutError)), failures[1]
    assert "AllGather(FP32, count=4" in str(failures[1])


def test_different_counts_without_checks_abort_a_rank_as_gloo_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """HCCL_PY_CHECK_TASKS=0: gloo itself meets messages of different sizes and aborts the
    process that receives the larger one (no Python exception): what the check, a collective
    of its own before the data, prevents (docs/backends.md). The peer ends with the error gloo
    gives it or, on a machine too loaded for it to get there within the runner's grace, is
    stopped: either way one rank, not both, was aborted."""
    monkeypatch.setenv("HCCL_PY_CHECK_TASKS", "0")
    with pytest.raises(hp.WorldError) as info:
        _run(mismatching_rank, 2, {0: [4], 1: [5]}, timeout=10.0)
    causes = info.value.root_causes
    aborted = [
        rank
        for rank, e in causes.items()
        if isinstance(e, RankDiedError) and e.how == "was killed by SIGABRT"
    ]
    assert len(aborted) == 1, causes
    peer = causes.get(1 - aborted[0])
    assert not isinstance(peer, RankDiedError) or "after another rank failed" in str(peer), peer


def sleeping_rank() -> None:
    """Rank 1 sleeps (until the supervisor stops it) instead of preparing the AllGather."""
    if hp.get_rank() == 1:
        time.sleep(60)
    mismatching_rank({0: [4]})


def test_a_rank_that_never_prepares_is_named_at_the_timeout() -> None:
    """The waiting rank names the rank whose descriptor never arrived, not every peer."""
    with pytest.raises(hp.WorldError) as info:
        _run(sleeping_rank, 2, timeout=2.0)
    waiting = info.value.failures[0]
    assert isinstance(waiting, hp.HcclTimeoutError), waiting
    assert "ranks [1] have not joined it" in str(waiting)


def _slow_core_kernel() -> None:
    """Core 1 sleeps in its own code past the run's timeout; core 0 waits for it in SyncAll."""
    if hp.GetBlockIdx() == 1:
        time.sleep(3.5)  # past timeout=1 and the kernel's grace (KERNEL_GRACE_S)
    hp.SyncAll()


def slow_core_rank() -> None:
    hp.launch(_slow_core_kernel, block_dim=2)


def test_a_kernel_that_times_out_is_the_rank_s_own_failure_not_a_peer_s() -> None:
    """Core 0's SyncAll and the rank's wait for its kernel both time out while core 1 sleeps
    (the core's wait first, by the kernel's grace; on a loaded machine maybe the rank's).
    Before 2026-11-30 the two timed out together, and the rank could report the stopped
    core's HcclPeerError, "stopped because rank 0 failed" on rank 0 itself; its peers then
    read a rank that failed so as one that returned without preparing their task (a false
    deadlock report). Whichever fires first, the rank reports a timeout of its own; the state
    of the world in it names the kernel's wait."""
    from hccl_py.core.config import KERNEL_GRACE_S

    assert 1.0 + KERNEL_GRACE_S < 3.5
    with pytest.raises(hp.WorldError) as info:
        _run(slow_core_rank, 2, timeout=1.0)
    for rank, error in info.value.failures.items():
        assert isinstance(error, hp.HcclTimeoutError), error
        assert f"rank {rank} waits for its kernel: 0 of 2 cores returned" in str(error), error
        assert f"stopped because rank {rank} failed" not in str(error)


def _last_core_gathers(xGM: Any, yGM: Any, tilingGM: Any) -> None:
    """Cores 1-3 wait in SyncAll; then core 0 all-gathers (rank 1 never prepares) and joins them."""
    hccl = cases.init_hccl(Hccl(), tilingGM, ops=("AllGather",))
    if hp.GetBlockIdx() == 0:
        blocked = current_rank_context().blocker.blocked
        rank_thread = threading.main_thread().ident
        while len([t for t in blocked if t != rank_thread]) < 3:  # (the rank waits too)
            time.sleep(0.001)
        hccl.Wait(hccl.AllGather[True](xGM, yGM, 4, FP32, 0))
    hp.SyncAll()
    hccl.Finalize()


def last_core_gathers_rank() -> None:
    if hp.get_rank() == 1:
        time.sleep(60)  # until the supervisor stops it, once rank 0 failed
    hp.launch(_last_core_gathers, torch.ones(4), torch.zeros(8), _tiling(), block_dim=4)


def test_the_state_of_the_world_names_each_core_and_calls_no_waiter_running() -> None:
    """Cores 1-3 wait in SyncAll while core 0 waits for rank 1: in the task check's exchange
    on the process group (the core runs the round it waits for) or for its round (the domain's
    thread runs it). Whichever wait times out first reports (the SyncAll of a core, or the
    task check, whose report carries the State of the world too); the others are waiting
    then, or have just timed out. Before 2026-11-30 a core in that exchange was "1 thread(s)
    running outside hccl_py calls (computing, sleeping or stuck in user code)", and so was a
    core whose wait had timed out just before (then "2 thread(s)"); the Waits of a rank's
    cores did not name their core (several folded into "ranks 0: wait for ...")."""
    with pytest.raises(hp.WorldError) as info:
        _run(last_core_gathers_rank, 2, timeout=3.0)
    error = info.value.failures[0]
    assert isinstance(error, hp.HcclTimeoutError), error
    state = str(error).split("State of the world:\n")[1]
    assert "running outside hccl_py" not in state and "ranks 0" not in state, state
    lines = state.splitlines()
    timed_out = " [timed out: raises HcclTimeoutError]"
    for core in (1, 2, 3):  # waiting, or timed out: the one whose error came first, or another
        wait = f"  - rank 0 AIV core {core} waits in SyncAll: 3 of 4 cores arrived"
        assert [x for x in lines if x.startswith(wait)] in ([wait], [wait + timed_out]), state
    (core_0,) = [x for x in lines if x.startswith("  - rank 0 AIV core 0 waits for ")]
    assert (
        "the process group of domain hccl_world_group: comparing task descriptors of task #0 "
        "with ranks [1]: ranks [1] have not joined it"
        in core_0
        or "round 0 of handle 0 AllGather(FP32, count=4, repeat=1)" in core_0
    ), state


# ------------------------------------------------------------------ local deadlock
def _out_of_order_kernel(xGM: Any, yGM: Any, tilingGM: Any) -> None:
    hccl = cases.init_hccl(Hccl(), tilingGM, ops=("AllGather",))
    hccl.AllGather(xGM, yGM, 4, FP32, 0)  # handle 0: prepared, never committed
    h1 = hccl.AllGather[True](xGM, yGM + 64, 4, FP32, 0)
    hccl.Wait(h1)


def out_of_order_rank() -> None:
    hp.launch(_out_of_order_kernel, torch.ones(8), torch.zeros(64), _tiling())


def test_wait_behind_an_uncommitted_task_is_a_deadlock() -> None:
    """Tasks of a domain run in Prepare order: waiting for a later one is reported, not hung."""
    with pytest.raises(hp.WorldError) as info:
        _run(out_of_order_rank, 2)
    for error in info.value.failures.values():
        assert isinstance(error, hp.HcclDeadlockError), error
        assert "Prepare order" in str(error) and "not committed by this rank" in str(error)


# ------------------------------------------------------------------ failures
def failing_rank(how: str) -> list[float]:
    """All-gather once; then rank 1 fails ``how`` while the others all-gather again."""
    x = torch.full((4,), float(hp.get_rank()))
    y = torch.zeros(4 * hp.get_world_size())
    hp.launch(_gather_kernel, x, y, _tiling(), [4])
    if hp.get_rank() == 1:
        if how == "raise":
            raise ValueError("rank 1 gives up")
        os.kill(os.getpid(), signal.SIGKILL)
    hp.launch(_gather_kernel, x, y, _tiling(), [4])
    return y.tolist()


@pytest.mark.parametrize("how", ["raise", "kill"])
def test_failing_rank_stops_the_world(how: str) -> None:
    """An exception or a killed process on rank 1: one WorldError naming rank 1, others stopped."""
    with pytest.raises(hp.WorldError) as info:
        _run(failing_rank, 3, how, timeout=30.0)
    error = info.value
    assert set(error.failures) == {0, 1, 2}
    assert list(error.root_causes) == [1]
    cause = error.failures[1]
    if how == "raise":
        assert isinstance(cause, ValueError) and str(cause) == "rank 1 gives up"
    else:
        assert "rank 1 was killed by SIGKILL" in str(cause)
    for rank in (0, 2):
        assert isinstance(error.failures[rank], hp.HcclPeerError)
        assert "because rank 1 failed" in str(error.failures[rank])


def rank_and_size() -> tuple[int, int]:
    return hp.get_rank(), hp.get_world_size()


def test_results_come_back_in_rank_order() -> None:
    assert _run(rank_and_size, 3) == [(0, 3), (1, 3), (2, 3)]


def test_function_must_be_picklable() -> None:
    with pytest.raises(TypeError, match="must be picklable"):
        hp.run(lambda: 0, world_size=2, backend="gloo")


# ------------------------------------------------------------------ control bytes over the PG
@pytest.fixture
def one_rank_domain() -> Iterator[Any]:
    """A domain of one rank over a gloo group of this process (no other process)."""
    import datetime

    import torch.distributed as dist

    from hccl_py.backends.dist import rounds

    dist.init_process_group(
        "gloo", store=dist.HashStore(), rank=0, world_size=1, timeout=datetime.timedelta(seconds=10)
    )
    try:
        yield rounds.Domain(dist.group.WORLD, np.array([0]), rounds.Reduction(exact=True))
    finally:
        dist.destroy_process_group()


def test_control_bytes_of_any_length_cross_the_process_group(one_rank_domain: Any) -> None:
    """Descriptors and framework arguments: short ones in one all-gather, long ones in a second."""
    from hccl_py.backends.dist import gathered

    calls = []

    def wait(work: Any) -> None:
        calls.append(work)
        work.wait()

    cpu = torch.device("cpu")
    longer = bytes(range(256)) * (gathered.ROW_BYTES // 256 + 1)
    for payload, n_calls in ((b"", 1), (b'{"op":4}', 1), (longer, 2)):
        calls.clear()
        assert gathered.all_gather_bytes(one_rank_domain, payload, cpu, wait) == [payload]
        assert len(calls) == n_calls, (len(payload), len(calls))


def test_a_forged_control_length_is_refused(
    one_rank_domain: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hccl_py.backends.dist import gathered

    real = gathered._row

    def forged(payload: bytes, width: int) -> bytearray:
        row = real(payload, width)
        row[: gathered._LENGTH_BYTES] = (-5).to_bytes(8, "little", signed=True)
        return row

    monkeypatch.setattr(gathered, "_row", forged)
    with pytest.raises(ValueError, match="domain rank 0 announced -5 bytes of control data"):
        gathered.all_gather_bytes(one_rank_domain, b"{}", torch.device("cpu"), lambda w: w.wait())


def rank0_all_reduce_alone() -> None:
    """Rank 0 calls all_reduce; rank 1 returns without it."""
    if hp.get_rank() == 0:
        hp.all_reduce(torch.ones(4))


def test_framework_peer_that_returned_is_named() -> None:
    """The argument exchange over the process group names a peer that will never call."""
    with pytest.raises(hp.WorldError) as info:
        _run(rank0_all_reduce_alone, 2, timeout=10.0)
    error = info.value.failures[0]
    assert isinstance(error, hp.HcclDeadlockError), error
    assert "rank 1 returned from its function without calling all_reduce" in str(error)
