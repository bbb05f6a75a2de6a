"""The sanitizer catalogue: every kernel-side misuse gets a precise, prompt report.

One test per mistake (docs/sanitizer.md lists them in the same groups). Each
runs a small emulated world, expects :class:`hp.WorldError` (or a specific
result), and checks the error class and the facts its message must name:
ranks, domain, handle, op, round, expected versus actual values. Every failing
run must leave no thread behind. Deadlock cases run with a timeout far above
their expected duration, so a pass proves detection, not a timeout.
"""

from __future__ import annotations

import inspect
import os
import threading
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from cases import cc_offset, init_hccl, make_tiling
from expect import expects_warning
from threads_left import left_since, threads_now

import hccl_py as hp
from hccl_py import (
    AIC,
    AIV,
    HCCL_FAILED,
    CoreType,
    Hccl,
    HcclDataType,
    HcclReduceOp,
    HcclServerConfig,
)
from hccl_py.core.config import TIMEOUT_ENV, default_timeout
from hccl_py.core.where import raise_site

F32 = HcclDataType.HCCL_DATA_TYPE_FP32
F16 = HcclDataType.HCCL_DATA_TYPE_FP16
I32 = HcclDataType.HCCL_DATA_TYPE_INT32
SUM = HcclReduceOp.HCCL_REDUCE_SUM
MAX = HcclReduceOp.HCCL_REDUCE_MAX
N = 8  # float32 elements per rank in x
X_BYTES = N * 4
WORLD = "hccl_world_group"
#: Far above any case's duration: a case that needs it has failed to detect its mistake.
TIMEOUT = 20.0

Kernel = Callable[[Any, Any, Any], Any]


def comm(tilingGM: Any, index: int = 0, hccl: Hccl | None = None) -> Hccl:
    """Inside a kernel: an Hccl object initialised on context ``index`` for every op."""
    return init_hccl(hccl or Hccl(), tilingGM, index)


def busy(seconds: float) -> None:
    """Compute (in Python, so a stopped rank ends at once) for ``seconds``."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def rank() -> int:
    return hp.get_rank()


def spmd(
    kernel: Kernel,
    *,
    y_elems: int | None = None,
    dtype: torch.dtype = torch.float32,
    block_dim: int = 1,
    kernel_type: str = "aiv",
    domains: int = 1,
    skip: Callable[[int], bool] = lambda r: False,
) -> Callable[[], tuple[torch.Tensor, torch.Tensor]]:
    """The per-rank function: launch ``kernel(xGM, yGM, tilingGM)`` with x = rank + 1, y = 0.

    Ranks for which ``skip(rank)`` is true return without launching anything.
    """

    def main() -> tuple[torch.Tensor, torch.Tensor]:
        r, n = hp.get_rank(), hp.get_world_size()
        x = torch.full((N,), float(r + 1), dtype=dtype)
        y = torch.zeros(y_elems or N * n, dtype=dtype)
        groups = {0: hp.world_group()}
        if domains == 2:
            groups[1] = hp.new_group(range(n))
        if not skip(r):
            hp.launch(
                kernel,
                x,
                y,
                make_tiling(groups=groups),
                block_dim=block_dim,
                kernel_type=kernel_type,
                groups=groups,
            )
        return x, y

    return main


def fails(fn: Callable[[], Any], n: int = 2, **run_kw: Any) -> hp.WorldError:
    """Run ``fn`` on ``n`` ranks; it must fail, promptly, leaving no thread running."""
    baseline = threads_now()
    run_kw.setdefault("timeout", TIMEOUT)
    with pytest.raises(hp.WorldError) as info:
        hp.run(fn, world_size=n, **run_kw)
    assert not left_since(baseline), f"threads still running: {left_since(baseline)}"
    return info.value


def check(err: hp.WorldError, cls: type, *facts: str, rank: int | None = None) -> hp.HcclError:
    """``err`` has a root cause of class ``cls`` (on ``rank``) and its message names every fact."""
    roots = err.root_causes
    found = [e for r, e in roots.items() if isinstance(e, cls) and rank in (None, r)]
    assert found, (
        f"no {cls.__name__} root cause{f' on rank {rank}' if rank is not None else ''}:\n{err}"
    )
    text = str(err)
    for fact in facts:
        assert fact in text, f"{fact!r} missing from the report:\n{text}"
    return found[0]


# ============================================================ 1. cross-rank mismatch


def _mismatch_kernel(variant: Callable[[Hccl, Any, Any, int], int]) -> Kernel:
    def kernel(x: Any, y: Any, t: Any) -> None:
        h = comm(t)
        handle = variant(h, x, y, rank())
        h.Wait(handle)
        h.Finalize()

    return kernel


MISMATCHES = {
    "op kind": (
        lambda h, x, y, r: (
            h.AllReduce[True](x, y, N, F32, SUM) if r == 0 else h.AllGather[True](x, y, N, F32)
        ),
        ("the op of", "rank 0 has AllReduce, rank 1 has AllGather"),
    ),
    "count": (
        lambda h, x, y, r: h.AllGather[True](x, y, N - r, F32),
        ("the count of", "rank 0 has 8, rank 1 has 7", "expected 8, got 7"),
    ),
    "dtype": (
        lambda h, x, y, r: h.AllGather[True](x, y, N, F32 if r == 0 else I32),
        ("the data type of", "rank 0 has FP32, rank 1 has INT32"),
    ),
    "reduce op": (
        lambda h, x, y, r: h.AllReduce[True](x, y, N, F32, SUM if r == 0 else MAX),
        ("the reduce op of", "rank 0 has SUM, rank 1 has MAX"),
    ),
    "repeat": (
        lambda h, x, y, r: h.AllReduce[True](x, y, N // 2, F32, SUM, 1 + r),
        ("the repeat of", "rank 0 has 1, rank 1 has 2"),
    ),
    "strideCount": (
        lambda h, x, y, r: h.AllGather[True](x, y, N // 2, F32, N // 2 + 4 * r),
        ("the strideCount of", "rank 0 has 4, rank 1 has 8"),
    ),
}


@expects_warning("dtype-mismatch")
@pytest.mark.parametrize("what", list(MISMATCHES))
def test_mismatch_of_task_fields(what: str) -> None:
    variant, facts = MISMATCHES[what]
    err = fails(spmd(_mismatch_kernel(variant)))
    for r in (0, 1):
        check(err, hp.HcclMismatchError, *facts, rank=r)
    check(err, hp.HcclMismatchError, WORLD, "handle 0", "round 0", "task #0")


def test_mismatch_alltoallv_counts_between_sender_and_receiver() -> None:
    def kernel(x: Any, y: Any, t: Any) -> None:
        h = comm(t)
        r = rank()
        recv_counts = [2, 2] if r == 0 else [3, 2]  # rank 0 sends 2 to rank 1, which expects 3
        handle = h.AlltoAllV[True](x, [2, 2], [0, 2], F32, y, recv_counts, [0, 4], F32)
        h.Wait(handle)
        h.Finalize()

    err = fails(spmd(kernel), platform="A3")
    check(
        err,
        hp.HcclMismatchError,
        "rank 0 sends 2 elements to rank 1, which expects 3",
        "sendCounts_0[1] != recvCounts_1[0]",
        "expected 3, got 2",
        "op AlltoAllV",
    )


def test_mismatch_number_of_tasks_per_rank() -> None:
    def kernel(x: Any, y: Any, t: Any) -> None:
        h = comm(t)
        a = h.AllGather[True](x, y, N, F32)
        h.Wait(a)
        if rank() == 0:
            b = h.AllReduce[True](x, y, N, F32, SUM)
            h.Wait(b)
        h.Finalize()

    err = fails(spmd(kernel))
    check(
        err,
        hp.HcclMismatchError,
        "different numbers of tasks",
        "rank 1 finalized after 1 task(s)",
        "rank 0 prepared handle 1",
        "AllReduce",
        rank=0,
    )


# ============================================================ 2. deadlock


def test_deadlock_rank_returns_without_its_part() -> None:
    def kernel(x: Any, y: Any, t: Any) -> None:
        h = comm(t)
        handle = h.AllGather[True](x, y, N, F32)
        h.Wait(handle)
        h.Finalize()

    err = fails(spmd(kernel, skip=lambda r: r == 1))
    check(
        err,
        hp.HcclDeadlockError,
        "rank 0 waits for round 0 of handle 0 AllGather",
        "ranks [1] have not prepared",
        "returned from their function",
        WORLD,
    )


def test_deadlock_wait_behind_an_uncommitted_earlier_task() -> None:
    """Wait order differs from Prepare order where it hangs: an earlier task is never committed."""

    def kernel(x: Any, y: Any, t: Any) -> None:
        h = comm(t)
        first = h.AllReduce(x, y, N, F32, SUM)  # committed only after the Wait below
        second = h.AllGather[True](x, y, N, F32)
        h.Wait(second)
        h.Commit(first)
        h.Finalize()

    err = fails(spmd(kernel, y_elems=3 * N))
    check(
        err,
        hp.HcclDeadlockError,
        "wait for round 0 of handle 1 AllGather",
        "the server runs the tasks of a domain in Prepare order",
        "task #0 (handle 0, AllReduce",
        "have not committed round 0",
    )


def test_wait_order_differs_from_prepare_order() -> None:
    def kernel(x: Any, y: Any, t: Any) -> None:
        h = comm(t)
        a = h.AllGather[True](x, y, N // 2, F32)
        b = h.AllGather[True](x + X_BYTES // 2, y + N * 4, N // 2, F32)
        h.Wait(b)
        h.Wait(a)
        h.Finalize()

    err = fails(spmd(kernel))
    check(
        err,
        hp.HcclUsageError,
        "Wait(handle 0) after Wait(handle 1)",
        "must follow Prepare order",
        "handle 0",
        "op AllGather",
    )


def test_wait_order_only_warns_in_non_strict_mode() -> None:
    def kernel(x: Any, y: Any, t: Any) -> None:
        h = comm(t)
        a = h.AllGather[True](x, y, N // 2, F32)
        b = h.AllGather[True](x + X_BYTES // 2, y + N * 4, N // 2, F32)
        h.Wait(b)
        assert h.Wait(a) == 0
        h.Finalize()

    with pytest.warns(hp.HcclWarning, match="must follow Prepare order"):
        results = hp.run(spmd(kernel), world_size=2, strict=False, timeout=TIMEOUT)
    assert torch.equal(results[0][1][:4], torch.ones(4))
    assert {(w.kind, w.handle, w.op) for w in results.warnings[0]} == {
        ("wait-order", 0, "AllGather")
    }


def test_deadlock_query_loop_spins_forever() -> None:
    """A bounded Query loop on a round no one will ever commit: the spinner reports it."""

    def kernel(x: Any, y: Any, t: Any) -> None:
        h = comm(t)
        if rank() == 0:
            handle = h.AllGather[True](x, y, N, F32)
            for _ in range(10**8):
                if h.Query(handle) >= 1:
                    break
            h.Finalize()
        else:
            h.AllGather(x, y, N, F32)  # prepared, never committed
            other = h.AllReduce[True](x, y, N, F32, SUM)
            h.Wait(other)
            h.Finalize()

    err = fails(spmd(kernel))
    check(
        err,
        hp.HcclDeadlockError,
        "rank 0 polls Query for round 0 of handle 0 AllGather",
        "rank 1 waits for round 0 of handle 1 AllReduce",
        "ranks [1] have not committed round 0",
    )


def test_deadlock_query_loop_of_the_last_rank_standing() -> None:
    def kernel(x: Any, y: Any, t: Any) -> None:
        h = comm(t)
        handle = h.AllGather[True](x, y, N, F32)
        while h.Query(handle) < 1:
            pass
        h.Finalize()

    err = fails(spmd(kernel, skip=lambda r: r == 1))
    check(err, hp.HcclDeadlockError, "rank 0 polls Query", "ranks [1] have not prepared")


@pytest.mark.parametrize("polls", [3, 7, 200])
def test_bounded_query_loop_that_goes_on_is_no_deadlock(polls: int) -> None:
    """Every rank queries its uncommitted handle ``polls`` times, gives up, then commits.

    While every rank polls, nothing else can run; a poller is let read on, as on
    hardware, so the loops end and the AllGather completes (no false report).
    """

    def kernel(x: Any, y: Any, t: Any) -> None:
        h = comm(t)
        handle = h.AllGather(x, y, N, F32)
        seen = {h.Query(handle) for _ in range(polls)}
        assert seen == {0}, seen
        h.Commit(handle)
        assert h.Wait(handle) == 0
        h.Finalize()

    out = hp.run(spmd(kernel), world_size=2, timeout=TIMEOUT)
    for _, y in out:
        assert y.tolist() == [1.0] * N + [2.0] * N


def test_query_loop_past_the_quiet_allowance_is_a_deadlock() -> None:
    """One read more than the emulator lets a lone poller make is reported, on every rank."""
    from hccl_py.backends.emu.polls import QUIET_READS

    def kernel(x: Any, y: Any, t: Any) -> None:
        h = comm(t)
        handle = h.AllGather(x, y, N, F32)
        for _ in range(2 * QUIET_READS):
            h.Query(handle)
        h.Commit(handle)
        h.Wait(handle)
        h.Finalize()

    err = fails(spmd(kernel))
    check(err, hp.HcclDeadlockError, "ranks 0-1: poll Query for round 0 of handle 0 AllGather")


def test_deadlock_core_waits_after_the_finalize() -> None:
    """A Wait that a SyncAll orders after the sending core's Finalize hangs in every schedule.

    (Without that SyncAll it is a race: tests/test_finalize_hazard.py.)
    """

    def kernel(x: Any, y: Any, t: Any) -> None:
        h = comm(t)
        handle = h.AllGather[True](x, y, N, F32)
        if hp.GetBlockIdx() == 0:
            h.Finalize()  # resets the finished-turn counters that core 1 then polls
            hp.SyncAll()
        else:
            hp.SyncAll()
            h.Wait(handle)

    err = fails(spmd(kernel, block_dim=2))
    check(
        err,
        hp.HcclCoreError,
        "AIV core 1 waits for handle 0 round 0 after AIV core 0 finalized",
        "hangs in every schedule",
        "SyncAll()",
        WORLD,
    )


def test_deadlock_core_skips_syncall() -> None:
    def kernel(x: Any, y: Any, t: Any) -> None:
        h = comm(t)
        handle = h.AllGather[True](x, y, N, F32)
        h.Wait(handle)
        if hp.GetBlockIdx() == 1:
            return  # returns without the barrier
        hp.SyncAll()
        h.Finalize()

    err = fails(spmd(kernel, block_dim=2))
    check(
        err,
        hp.HcclDeadlockError,
        "SyncAll can never complete",
        "AIV core 1 returned from the kernel",
        "1 of 2 cores arrived",
    )


def test_deadlock_two_domains_wait_on_each_other() -> None:
    def kernel(x: Any, y: Any, t: Any) -> None:
        h0, h1 = comm(t, 0), comm(t, 1)
        y2 = y + N * 4
        if rank() == 0:
            a = h0.AllReduce[True](x, y, N, F32, SUM)
            h1.InterHcclGroupSync(0, a)
            b = h1.AllReduce[True](x, y2, N, F32, SUM)
        else:
            b = h1.AllReduce[True](x, y2, N, F32, SUM)
            h0.InterHcclGroupSync(1, b)
            a = h0.AllReduce[True](x, y, N, F32, SUM)
        h0.Wait(a)
        h1.Wait(b)
        h0.Finalize()
        h1.Finalize()

    err = fails(spmd(kernel, domains=2))
    check(
        err,
        hp.HcclDeadlockError,
        "blocked by InterHcclGroupSync on task #0 of domain group_0_1",
        "blocked by InterHcclGroupSync on task #0 of domain hccl_world_group",
    )


# ============================================================ 3. unfinished business


def test_unfinished_prepared_never_committed_then_finalize() -> None:
    def kernel(x: Any, y: Any, t: Any) -> None:
        h = comm(t)
        h.AllReduce(x, y, N, F32, SUM)
        h.Finalize()

    err = fails(spmd(kernel))
    check(
        err,
        hp.HcclUnfinishedError,
        "handle 0",
        "committed 0 of 1 rounds",
        "op AllReduce",
        "round 0",
        WORLD,
    )


def test_unfinished_prepared_never_committed_at_kernel_exit() -> None:
    def kernel(x: Any, y: Any, t: Any) -> None:
        h = comm(t)
        h.AllReduce(x, y, N, F32, SUM)

    err = fails(spmd(kernel))
    check(err, hp.HcclUnfinishedError, "handle 0 (AllReduce", "0 of 1 rounds committed", WORLD)


def test_unfinished_missing_finalize() -> None:
    def kernel(x: Any, y: Any, t: Any) -> None:
        h = comm(t)
        h.AllGather[True](x, y, N, F32)

    err = fails(spmd(kernel))
    check(err, hp.HcclUnfinishedError, "Finalize() was never called", "rank 0", "rank 1")


def test_a_finalize_on_another_core_than_the_sending_one_is_named() -> None:
    """Finalize guarded by the last block instead of the sending one (a porter's trial): the
    report said "Finalize() was never called", and the porter looked for a missing call."""

    def kernel(x: Any, y: Any, t: Any) -> None:
        h = comm(t)
        handle = h.AllGather[True](x, y, N, F32)
        h.Wait(handle)
        hp.SyncAll()
        if hp.GetBlockIdx() == hp.GetBlockNum() - 1:
            h.Finalize()

    err = fails(spmd(kernel, block_dim=2))
    check(
        err,
        hp.HcclUnfinishedError,
        "Finalize() was called on AIV core 1 but not on AIV core 0, the core that sends the tasks",
        "call Finalize on the sending core",
    )
    assert "never called" not in str(err)


def test_unfinished_some_rounds_committed() -> None:
    def kernel(x: Any, y: Any, t: Any) -> None:
        h = comm(t)
        handle = h.AllReduce(x, y, N // 4, F32, SUM, 3)
        h.Commit(handle)
        h.Commit(handle)
        h.Finalize()

    err = fails(spmd(kernel))
    check(err, hp.HcclUnfinishedError, "committed 2 of 3 rounds", "round 2", "handle 0")


def test_fewer_waits_than_rounds_then_finalize_is_valid() -> None:
    """MatmulAllReduce's pattern: Wait a repeated handle once, let Finalize wait for the rest."""

    def kernel(x: Any, y: Any, t: Any) -> None:
        h = comm(t)
        handle = h.AllGather[True](x, y, N // 2, F32, N, 2)
        assert h.Wait(handle) == 0  # round 0 only
        h.Finalize()  # waits until round 1 finished too

    out = hp.run(spmd(kernel), world_size=2, timeout=TIMEOUT)
    assert out.warnings == {}
    for _, y in out:
        assert y.tolist() == [1.0] * N + [2.0] * N  # both rounds of both ranks landed


def test_extra_commit_beyond_repeat_is_a_warning() -> None:
    """The official client ignores a Commit beyond repeat and logs it: a warning, in strict mode too."""

    def kernel(x: Any, y: Any, t: Any) -> None:
        h = comm(t)
        handle = h.AllGather[True](x, y, N, F32)
        h.Commit(handle)
        assert h.last_error is not None and "extra Commit" in h.last_error
        assert h.Wait(handle) == 0
        h.Finalize()

    with pytest.warns(hp.HcclWarning, match="extra Commit"):
        out = hp.run(spmd(kernel), world_size=2, timeout=TIMEOUT)
    for rank, found in sorted(out.warnings.items()):
        (w,) = found
        assert (w.kind, w.rank, w.handle, w.op, w.round) == (
            "extra-commit",
            rank,
            0,
            "AllGather",
            1,
        )
        assert "expected <= 1 commits, got 2" in str(w)
    err = fails(spmd(kernel), warnings_as_errors={"extra-commit"})
    check(err, hp.HcclUsageError, "extra Commit", "handle 0", "op AllGather", "round 1")


def test_idle_core_wait_returns_minus_one_without_report() -> None:
    """MatmulReduceScatter's pattern: every core Waits, idle cores never Commit and get -1."""

    def kernel(x: Any, y: Any, t: Any) -> None:
        h = comm(t)
        idle = hp.GetBlockIdx() != 0
        handle = h.AllGather(x, y, N, F32)
        if not idle:
            h.Commit(handle)
        got = h.Wait(handle)
        assert got == (-1 if idle else 0), (hp.GetBlockIdx(), got)
        hp.SyncAll()
        h.Finalize()

    out = hp.run(spmd(kernel, block_dim=4), world_size=2, timeout=TIMEOUT)
    assert out.warnings == {}
    for _, y in out:
        assert y.tolist() == [1.0] * N + [2.0] * N


# ============================================================ 4. bounds and overlap


def _bounds_case(call: Callable[[Hccl, Any, Any], int], **spmd_kw: Any) -> Callable[[], Any]:
    def kernel(x: Any, y: Any, t: Any) -> None:
        h = comm(t)
        handle = call(h, x, y)
        h.Wait(handle)
        h.Finalize()

    return spmd(kernel, **spmd_kw)


def test_bounds_send_range_past_the_end() -> None:
    err = fails(_bounds_case(lambda h, x, y: h.AllReduce[True](x, y, N + 1, F32, SUM), y_elems=16))
    check(
        err,
        hp.HcclBoundsError,
        "send range of round 0, block 0 is bytes [0, 36)",
        f"outside its {X_BYTES} bytes",
        "op AllReduce",
        "handle 0",
        f"expected [0, {X_BYTES}), got [0, 36)",
    )


def test_bounds_receive_range_past_the_end() -> None:
    err = fails(_bounds_case(lambda h, x, y: h.AllGather[True](x, y, N, F32), y_elems=N))
    check(err, hp.HcclBoundsError, "recv range of round 0, block 1 is bytes [32, 64)", "32 bytes")


def test_bounds_with_repeat_and_stride() -> None:
    call = lambda h, x, y: h.AllGather[True](x, y, 4, F32, 9, 2)  # noqa: E731
    err = fails(_bounds_case(call, y_elems=16))
    check(
        err,
        hp.HcclBoundsError,
        "recv range of round 1, block 1 is bytes [52, 68)",
        "outside its 64 bytes",
        "round 1",
    )


def test_bounds_address_before_the_allocation() -> None:
    err = fails(_bounds_case(lambda h, x, y: h.AllGather[True](x - 4, y, N, F32)))
    check(err, hp.HcclBoundsError, "send range of round 0, block 0 is bytes [-4, 28)")


def test_bounds_alltoallv_displacement_past_the_end() -> None:
    call = lambda h, x, y: h.AlltoAllV[True](x, [1, 1], [0, N], F32, y, [1, 1], [0, 1], F32)  # noqa: E731
    err = fails(_bounds_case(call), platform="A3")
    check(
        err, hp.HcclBoundsError, "send range of round 0, block 1 is bytes [32, 36)", "op AlltoAllV"
    )


def test_bounds_raise_even_in_non_strict_mode() -> None:
    err = fails(
        _bounds_case(lambda h, x, y: h.AllReduce[True](x, y, N + 1, F32, SUM), y_elems=16),
        strict=False,
    )
    check(err, hp.HcclBoundsError, "outside its 32 bytes")


def test_null_address_fails_the_prepare() -> None:
    err = fails(_bounds_case(lambda h, x, y: h.AllGather[True](hp.NULL, y, N, F32)))
    check(err, hp.HcclUsageError, "sendBuf is null", "op AllGather")

    def kernel(x: Any, y: Any, t: Any) -> int:
        return comm(t).AllGather[True](x, hp.NULL, N, F32)

    got: list[int] = []
    hp.run(spmd(lambda x, y, t: got.append(kernel(x, y, t))), world_size=1, strict=False)
    assert got == [HCCL_FAILED]


def test_overlap_between_rounds_of_one_task() -> None:
    call = lambda h, x, y: h.AllGather[True](x, y, 4, F32, 0, 2)  # noqa: E731
    err = fails(_bounds_case(call))
    check(err, hp.HcclOverlapError, "receive ranges overlap", "strideCount >= repeat * count")


def test_alltoallv_overlap_advice_names_its_own_arguments() -> None:
    """AlltoAllV has no strideCount: the report says how to space rdispls instead."""
    call = lambda h, x, y: h.AlltoAllV[True](x, [1, 1], [0, 2], F32, y, [1, 1], [0, 1], F32, 2)  # noqa: E731
    err = fails(_bounds_case(call), platform="A3")
    check(
        err,
        hp.HcclOverlapError,
        "receive ranges overlap: round 0 block 1 and round 1 block 0 write the same bytes of y; "
        "each peer's rounds need their own elements [rdispls[p], rdispls[p] + repeat * "
        "recvCounts[p]) (here peer 1: [1, 3), peer 0: [0, 2)): space rdispls by at least "
        "repeat * recvCounts",
    )
    assert "strideCount" not in str(err)


def test_overlap_send_partially_covers_receive() -> None:
    call = lambda h, x, y: h.AllReduce[True](x, x + 4, N // 2, F32, SUM)  # noqa: E731
    err = fails(_bounds_case(call))
    check(
        err,
        hp.HcclOverlapError,
        "send range of round 0 block 0 (bytes [0, 16)) overlaps receive range of round 0 block 0 "
        "(bytes [4, 20))",
        "op AllReduce",
    )


def test_overlap_of_two_storages_that_share_memory() -> None:
    """Send and receive tensors over one numpy array (two torch storages, one memory): their
    ranges overlap as if they were views of one tensor."""

    def main() -> None:
        mem = np.zeros(2 * N, dtype=np.float32)
        x, y = torch.from_numpy(mem[:N]), torch.from_numpy(mem[N // 2 : N // 2 + N])
        hp.launch(_bounds_case_kernel, x, y, make_tiling())

    err = fails(main)
    check(
        err,
        hp.HcclOverlapError,
        f"send range of round 0 block 0 (bytes [{-2 * N}, ",
        "op AllReduce",
    )


def _bounds_case_kernel(x: Any, y: Any, t: Any) -> None:
    h = comm(t)
    h.Wait(h.AllReduce[True](x, y, N, F32, SUM))
    h.Finalize()


def test_overlap_round_writes_what_a_later_round_reads() -> None:
    call = lambda h, x, y: h.AllReduce[True](x, x + 8, 2, F32, SUM, 2)  # noqa: E731
    err = fails(_bounds_case(call))
    check(err, hp.HcclOverlapError, "send range of round 1 block 0 (bytes [8, 16))", "round 0")


def test_overlap_policy_warn_lets_the_task_run() -> None:
    call = lambda h, x, y: h.AllReduce[True](x, x + 4, N // 2, F32, SUM)  # noqa: E731
    with pytest.warns(hp.HcclWarning, match="overlaps receive range"):
        result = hp.run(_bounds_case(call), world_size=2, overlap="warn", timeout=TIMEOUT)
    assert [w.kind for w in result.warnings[1]] == ["overlap"]


def test_in_place_forms_are_allowed() -> None:
    """AllReduce with sendBuf == recvBuf and AllGather from the rank's own block of recvBuf."""

    def kernel(x: Any, y: Any, t: Any) -> None:
        h = comm(t)
        a = h.AllReduce[True](x, x, N, F32, SUM)
        b = h.AllGather[True](y + rank() * X_BYTES, y, N, F32)
        h.Wait(a)
        h.Wait(b)
        h.Finalize()

    def main() -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.full((N,), float(rank() + 1))
        y = torch.full((2 * N,), float(rank() + 1))
        hp.launch(kernel, x, y, make_tiling())
        return x, y

    for schedule, poison in (("eager", False), ("late", True)):
        results = hp.run(main, world_size=2, schedule=schedule, poison=poison, timeout=TIMEOUT)
        for x, y in results:
            assert torch.equal(x, torch.full((N,), 3.0))
            assert torch.equal(y, torch.tensor([1.0] * N + [2.0] * N))


# ============================================================ 5. core misuse


def test_core_prepare_from_aic_and_aiv_without_server_config() -> None:
    def kernel(x: Any, y: Any, t: Any) -> None:
        h = comm(t)
        h.AllGather[True](x, y, N, F32)

    err = fails(spmd(kernel, kernel_type="mix_aic_1_2"))
    check(err, hp.HcclCoreError, "both AIC and AIV block 0 without an HcclServerConfig")


@pytest.mark.parametrize("aic_first", [True, False], ids=["aic-finalizes-first", "aiv-sends-first"])
def test_finalize_of_the_other_block_0_without_server_config(aic_first: bool) -> None:
    """Without an HcclServerConfig every block 0 is a working core (InitWorkingFlag): an AIC
    block 0 Finalize beside AIV block 0's tasks writes a FINALIZE message into the sender's
    first slot, and the kernel hangs on hardware. Reported in either order (a SyncAll orders
    them): at the AIC core's Finalize, or at the AIV core's Prepare."""

    def kernel(x: Any, y: Any, t: Any) -> None:
        h = comm(t)
        block0 = hp.GetBlockIdx() == 0
        if hp.g_coreType == AIC and block0 and aic_first:
            h.Finalize()
        hp.SyncAll[False]()
        if hp.g_coreType == AIV and block0:
            h.Wait(h.AllGather[True](x, y, N, F32))
        hp.SyncAll[False]()
        if block0 and (hp.g_coreType == AIV or not aic_first):
            h.Finalize()

    err = fails(spmd(kernel, kernel_type="mix_aic_1_2"), strict=False)
    check(
        err,
        hp.HcclCoreError,
        "AIC block 0 finalizes while AIV block 0 sends the tasks",
        "makes block 0 of every core type a working core",
    )


def _block_1_kernel(x: Any, y: Any, t: Any) -> None:
    """HcclServerConfig{DEFAULT, 1}: AIC block 1 sends and finalizes, AIV block 1 finalizes."""
    h = comm(t, hccl=Hccl[hp.HCCL_SERVER_TYPE_AICPU, HcclServerConfig(CoreType.DEFAULT, 1)]())
    if hp.GetBlockIdx() == 1:
        if hp.g_coreType == AIC:
            h.Wait(h.AllGather[True](x, y, N, F32))
        h.Finalize()


def test_the_second_working_core_of_a_server_config_s_block_is_named() -> None:
    err = fails(spmd(_block_1_kernel, kernel_type="mix_aic_1_2", block_dim=2), explore=4)
    check(err, hp.HcclCoreError, "AIV block 1 finalizes while AIC block 1 sends", "{DEFAULT, 1}")


def test_debug_mode_1_has_no_second_working_core() -> None:
    """Under debugMode 1 (HCCL_ONLY_COMPUTE) the client waits for nothing: no hang, no report,
    whichever block 0 finalizes first (before, some schedules reported one)."""

    def tiling() -> Any:
        t = make_tiling()
        cfg = hp.Mc2CcTilingConfig("hccl_world_group", hp.HcclCMDType.HCCL_CMD_ALLGATHER, "")
        assert cfg.SetDebugMode(1) == 0 and cfg.GetTiling(t.mc2InitTiling) == 0
        return t

    def main() -> None:
        hp.launch(_aic_sends_kernel, torch.ones(N), torch.zeros(2 * N), tiling(),
                  block_dim=1, kernel_type="mix_aic_1_2")  # fmt: skip

    with pytest.warns(hp.HcclWarning, match="compute-only"):
        result = hp.run(main, world_size=2, explore=8, timeout=TIMEOUT)
    assert {w.kind for w in result.all_warnings()} == {"compute-only"}


def _aic_sends_kernel(x: Any, y: Any, t: Any) -> None:
    """AIC block 0 sends and finalizes, AIV block 0 finalizes (the default config)."""
    h = comm(t)
    if hp.g_coreType == AIC:
        h.Wait(h.AllGather[True](x, y, N, F32))
    h.Finalize()


def _shared_object_kernel(second: Callable[[Hccl, int], Any], commit: bool) -> Kernel:
    """AIV core 0 prepares on one object; after a barrier the AIC core uses the same object."""
    shared: dict[int, tuple[Hccl, int]] = {}
    config = HcclServerConfig(CoreType.ON_AIV, 0)

    def kernel(x: Any, y: Any, t: Any) -> None:
        if hp.g_coreType == AIV:
            h = comm(t, hccl=Hccl[hp.HCCL_SERVER_TYPE_AICPU, config]())
            shared[rank()] = (h, h.AllGather(x, y, N, F32, commit=commit))
        hp.SyncAll[False]()
        if hp.g_coreType == AIC:
            h, handle = shared[rank()]
            second(h, handle)

    return kernel


def test_core_commit_from_another_core_type() -> None:
    kernel = _shared_object_kernel(lambda h, hd: h.Commit(hd), commit=False)
    err = fails(spmd(kernel, kernel_type="mix_aic_1_1"))
    check(err, hp.HcclCoreError, "Commit from an AIC core of a handle prepared on AIV", "handle 0")


def test_core_wait_from_another_core_type() -> None:
    kernel = _shared_object_kernel(lambda h, hd: h.Wait(hd), commit=True)
    err = fails(spmd(kernel, kernel_type="mix_aic_1_1"))
    check(
        err,
        hp.HcclCoreError,
        "Wait from an AIC core of a handle prepared on AIV",
        "expected AIV, got AIC",
    )


def test_core_second_hccl_object_on_one_context() -> None:
    def kernel(x: Any, y: Any, t: Any) -> None:
        first = comm(t)
        first.AllGather[True](x, y, N, F32)
        comm(t).AllReduce[True](x, y, N, F32, SUM)

    err = fails(spmd(kernel))
    check(err, hp.HcclCoreError, "a second Hccl object sends on the same context", "handle 0")


def test_core_finalize_false_on_a2() -> None:
    def kernel(x: Any, y: Any, t: Any) -> None:
        h = comm(t)
        handle = h.AllGather[True](x, y, N, F32)
        h.Wait(handle)
        h.Finalize[False]()

    err = fails(spmd(kernel))
    check(err, hp.HcclUsageError, "Finalize<false> is only allowed on Atlas A3", "Atlas A2")


def test_core_syncall_on_aic_core() -> None:
    def kernel(x: Any, y: Any, t: Any) -> None:
        hp.SyncAll()

    err = fails(spmd(kernel, kernel_type="mix_aic_1_1"))
    check(err, hp.HcclCoreError, "SyncAll() (AIV-only by default) called on an AIC core")


# ============================================================ 6. races


def _reader(read_before_wait: bool) -> tuple[Kernel, dict[int, torch.Tensor]]:
    """An AllGather kernel that copies its output before (racy) or after (correct) Wait."""
    seen: dict[int, torch.Tensor] = {}

    def kernel(x: Any, y: Any, t: Any) -> None:
        h = comm(t)
        handle = h.AllGather[True](x, y, N, F32)
        n = hp.get_world_size()
        if read_before_wait:
            seen[rank()] = hp.gm_tensor(y, torch.float32, N * n).clone()
        h.Wait(handle)
        if not read_before_wait:
            seen[rank()] = hp.gm_tensor(y, torch.float32, N * n).clone()
        hp.SyncAll()
        h.Finalize()

    return kernel, seen


def _gathered(n: int) -> torch.Tensor:
    return torch.arange(1, n + 1, dtype=torch.float32).repeat_interleave(N)


def test_race_read_before_wait_is_reported_on_every_schedule() -> None:
    kernel, _ = _reader(read_before_wait=True)
    for options in ({}, {"schedule": "late", "poison": True}, {"seed": 1}):
        err = fails(spmd(kernel), n=1, **options)
        check(err, hp.HcclRaceError, "collective buffer race: rank 0 reads bytes [0, 32) of y at")


def test_a_race_in_a_kernel_of_several_cores_names_the_core() -> None:
    """A race report said "rank 0 reads" in a kernel of several cores: the core that read too
    early is the branch to fix (a new porter's trial)."""

    def kernel(x: Any, y: Any, t: Any) -> None:
        h = comm(t)
        handle = h.AllGather[True](x, y, N, F32)
        if hp.GetBlockIdx() == 1:
            float(hp.gm_tensor(y, torch.float32, 1)[0])  # before the round is ordered
        hp.SyncAll()
        h.Wait(handle)
        hp.SyncAll()
        h.Finalize()

    err = fails(spmd(kernel, block_dim=2), n=1)
    check(err, hp.HcclRaceError, "collective buffer race: rank 0 AIV core 1 reads bytes [0, 4)")


def _hidden_reader() -> tuple[Kernel, dict[int, torch.Tensor]]:
    """An AllGather kernel that copies its output before Wait through a numpy view.

    The view is taken before the Prepare, so the buffer race check cannot see
    the read; the poison can.
    """
    seen: dict[int, torch.Tensor] = {}

    def kernel(x: Any, y: Any, t: Any) -> None:
        h = comm(t)
        view = hp.gm_tensor(y, torch.float32, N * hp.get_world_size()).numpy()
        handle = h.AllGather[True](x, y, N, F32)
        seen[rank()] = torch.from_numpy(view.copy())
        h.Wait(handle)
        h.Finalize()

    return kernel, seen


def test_race_read_the_check_cannot_see_is_exposed_by_late_schedule_and_poison() -> None:
    kernel, seen = _hidden_reader()
    hp.run(spmd(kernel), world_size=1, timeout=TIMEOUT)  # default: eager, no poison
    assert torch.equal(seen[0], _gathered(1)), "the racy kernel passes under the default schedule"
    for n in (1, 2):
        seen.clear()
        hp.run(spmd(kernel), world_size=n, schedule="late", poison=True, timeout=TIMEOUT)
        for r in range(n):
            assert torch.isnan(seen[r]).all(), "reading before Wait must see the poison"


def test_race_correct_kernel_passes_under_both_schedules() -> None:
    kernel, seen = _reader(read_before_wait=False)
    for schedule, poison in (("eager", False), ("late", True)):
        seen.clear()
        hp.run(spmd(kernel), world_size=2, schedule=schedule, poison=poison, timeout=TIMEOUT)
        assert all(torch.equal(seen[r], _gathered(2)) for r in range(2))


def test_race_poison_waits_until_the_server_reaches_the_task() -> None:
    """A later task may overwrite an earlier task's input: the server runs them in order."""

    def kernel(x: Any, y: Any, t: Any) -> None:
        h = comm(t)
        gather = h.AllGather[True](x, y, N // 2, F32)  # reads x[:4]
        reduce = h.AllReduce[True](y + X_BYTES, x, N, F32, SUM)  # then overwrites x
        h.Wait(gather)
        h.Wait(reduce)
        h.Finalize()

    for schedule, poison in (("eager", False), ("late", True)):
        results = hp.run(spmd(kernel), world_size=2, schedule=schedule, poison=poison)
        for x, y in results:
            assert torch.equal(y[:N], torch.tensor([1.0] * 4 + [2.0] * 4)), (schedule, y)
            assert torch.equal(x, torch.zeros(N))


def test_race_poison_marks_integer_outputs_with_ff_bytes() -> None:
    seen: dict[int, torch.Tensor] = {}

    def kernel(x: Any, y: Any, t: Any) -> None:
        h = comm(t)
        view = hp.gm_tensor(y, torch.int32, 2 * N).numpy()  # unseen by the buffer race check
        handle = h.AllGather[True](x, y, N, I32)
        seen[rank()] = torch.from_numpy(view.copy())
        h.Wait(handle)
        h.Finalize()

    hp.run(spmd(kernel, dtype=torch.int32), world_size=2, schedule="late", poison=True)
    assert all(torch.equal(seen[r], torch.full((2 * N,), -1, dtype=torch.int32)) for r in (0, 1))


# ============================================================ 7. exceptions in user code


def test_exception_in_a_kernel_releases_every_rank() -> None:
    def kernel(x: Any, y: Any, t: Any) -> None:
        h = comm(t)
        if rank() == 1:
            raise ValueError("kernel bug on rank 1")
        handle = h.AllGather[True](x, y, N, F32)
        h.Wait(handle)
        h.Finalize()

    err = fails(spmd(kernel))
    check(err, ValueError, "kernel bug on rank 1", "Traceback", "in kernel", rank=1)
    assert isinstance(err.failures[0], hp.HcclPeerError)
    assert "stopped because rank 1 failed: ValueError" in str(err.failures[0])


def test_exception_in_fn_outside_any_kernel() -> None:
    def kernel(x: Any, y: Any, t: Any) -> None:
        h = comm(t)
        handle = h.AllGather[True](x, y, N, F32)
        h.Wait(handle)
        h.Finalize()

    def main() -> None:
        if rank() == 0:
            raise KeyError("missing config on rank 0")
        spmd(kernel)()

    err = fails(main)
    check(err, KeyError, "missing config on rank 0", "Traceback", "in main", rank=0)
    assert isinstance(err.failures[1], hp.HcclPeerError)
    assert "rank 0" in str(err.failures[1])


def test_exception_in_one_core_releases_cores_in_syncall() -> None:
    def kernel(x: Any, y: Any, t: Any) -> None:
        if hp.GetBlockIdx() == 2:
            raise RuntimeError("core 2 crashed")
        hp.SyncAll()

    err = fails(spmd(kernel, block_dim=4), n=1)
    check(err, RuntimeError, "core 2 crashed", "Traceback", "raised on rank 0, AIV core 2")


# ============================================================ 8. timeouts


def _waits_for_a_sleeper(sleep: float) -> Callable[[], Any]:
    def kernel(x: Any, y: Any, t: Any) -> None:
        if rank() == 1:
            busy(sleep)  # outside hccl_py: the deadlock detector cannot see it
        h = comm(t)
        handle = h.AllGather[True](x, y, N, F32)
        h.Wait(handle)
        h.Finalize()

    return spmd(kernel)


def test_timeout_turns_a_hang_into_a_report() -> None:
    err = fails(_waits_for_a_sleeper(3.0), timeout=0.3)
    check(  # one rank runs at a time: the busy rank holds the others up and is reported
        err,
        hp.HcclTimeoutError,
        "rank 1 ran its own code for 0.3 s (the run's timeout)",
        "test_sanitizer.py",
        "busy",  # where it was
        "rank 0 waits for round 0 of handle 0",
        "ranks [1] have not prepared this task",
        "Unfinished tasks:",
        "prepared by ranks [0] of [0, 1]",
        rank=1,
    )
    assert isinstance(err.failures[0], hp.HcclPeerError)


def test_timeout_of_a_query_loop_waiting_for_a_busy_rank() -> None:
    def kernel(x: Any, y: Any, t: Any) -> None:
        if rank() == 1:
            busy(1.0)  # outside hccl_py: the spinner is not in a deadlock
        h = comm(t)
        handle = h.AllGather[True](x, y, N, F32)
        while h.Query(handle) < 1:
            pass
        h.Finalize()

    err = fails(spmd(kernel), timeout=0.3)
    check(
        err,
        hp.HcclTimeoutError,
        "rank 1 ran its own code for 0.3 s (the run's timeout)",
        "rank 0 polls Query for round 0 of handle 0",
        "ranks [1] have not prepared this task",
        rank=1,
    )


def test_a_runner_that_spins_on_hccl_py_calls_is_stopped_and_the_run_ends() -> None:
    """Under a seeded schedule entering an hccl_py call is a switch point under the world lock,
    so a loop of calls that never block holds that lock most of the time. Until 2026-11-30 the
    stop at the run's timeout could land while the runner held it, and the run never ended
    (2 of 3 runs of this kernel); the stop is now sent while the lock is free. Run in a
    thread here, so that a regression fails instead of hanging the suite."""

    def kernel(x: Any, y: Any, t: Any) -> None:
        h = comm(t)
        while rank() == 0 and h.SetCcTilingV2(cc_offset("AllGather", 0)) == 0:
            pass  # never blocks: rank 1's Wait holds the others up
        handle = h.AllGather[True](x, y, N, F32)
        h.Wait(handle)
        h.Finalize()

    for seed in (1, 1, 2):  # the same schedule twice: the stop landed at random
        got: list[BaseException] = []

        def run(seed: int = seed, got: list[BaseException] = got) -> None:
            try:
                hp.run(spmd(kernel), world_size=2, timeout=0.3, seed=seed)
            except BaseException as exc:  # noqa: BLE001 - handed to the test's thread
                got.append(exc)

        runner = threading.Thread(target=run, daemon=True)
        runner.start()
        runner.join(60)
        assert not runner.is_alive(), f"seed {seed}: the run did not end after its timeout"
        assert isinstance(got[0], hp.WorldError), got
        check(got[0], hp.HcclTimeoutError, "rank 0 ran its own code for 0.3 s", "kernel", rank=0)


def test_timeout_default_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TIMEOUT_ENV, "0.25")
    assert default_timeout() == 0.25
    baseline = threads_now()
    with pytest.raises(hp.WorldError) as info:
        hp.run(_waits_for_a_sleeper(0.8), world_size=2)
    assert not left_since(baseline), left_since(baseline)
    check(info.value, hp.HcclTimeoutError, "rank 1 ran its own code for 0.25 s", rank=1)


def test_no_warning_and_no_thread_left_after_a_clean_run() -> None:
    kernel, seen = _reader(read_before_wait=False)
    baseline = threads_now()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        hp.run(spmd(kernel, block_dim=3), world_size=3, timeout=TIMEOUT)
    assert not left_since(baseline), left_since(baseline)
    assert all(torch.equal(seen[r], _gathered(3)) for r in range(3))


def _prepares_a_type_allreduce_does_not_take(x: Any, y: Any, t: Any) -> None:
    h = comm(t)
    h.AllReduce[True](x, y, N, HcclDataType.HCCL_DATA_TYPE_INT64, SUM)  # the porter's line


def launch_bad_prepare() -> None:
    x, y = torch.ones(N), torch.zeros(N * hp.get_world_size())
    hp.launch(_prepares_a_type_allreduce_does_not_take, x, y, make_tiling())


@pytest.mark.parametrize("backend", ["emu", "gloo"])
def test_a_usage_error_points_at_the_kernel_line_that_raised_it(backend: str) -> None:
    """Before, only race reports and warnings named the user's line: a usage, bounds, overlap or
    mismatch error showed hccl_py's frames and a message, and a porter with several Prepares of
    one op could not tell which had failed (a new porter's trial)."""
    lines, first = inspect.getsourcelines(_prepares_a_type_allreduce_does_not_take)
    line = first + next(i for i, text in enumerate(lines) if "the porter's line" in text)
    err = fails(launch_bad_prepare, backend=backend)
    check(err, hp.HcclUsageError, "HCCL_DATA_TYPE_INT64")
    site = f"at test_sanitizer.py:{line} in _prepares_a_type_allreduce_does_not_take"
    assert str(err).count(site) == len(err.root_causes), str(err)


def test_the_raise_site_is_the_innermost_frame_of_the_users_code() -> None:
    package = os.path.dirname(hp.__file__)
    torch_dir = os.path.dirname(torch.__file__)
    text = (
        "Traceback (most recent call last):\n"
        f'  File "{package}/runtime.py", line 225, in run\n'
        '  File "/home/me/kernels/main.py", line 40, in main\n'
        f'  File "{package}/kernel/cores.py", line 297, in _run_core\n'
        '  File "/home/me/kernels/mc2.py", line 12, in kernel\n'
        f'  File "{package}/client/log.py", line 107, in call\n'
        f'  File "{torch_dir}/_tensor.py", line 40, in wrapped\n'
        '  File "<frozen runpy>", line 88, in _run_code\n'
        "hccl_py.core.errors.HcclUsageError: [rank 0] ...\n"
    )
    assert raise_site(text) == "mc2.py:12 in kernel"
    assert raise_site(f'  File "{package}/runtime.py", line 1, in run\n') is None
