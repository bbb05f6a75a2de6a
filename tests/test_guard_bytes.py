"""Guard bytes: hccl_py never writes outside the receive ranges of tasks that completed.

Every buffer here is surrounded by (and interleaved with) random bytes that no
task may touch. Successful runs are compared byte for byte with the
independent reference of ``reference.py`` (written ranges get the reference's
data, everything else keeps its initial bytes), also under the late schedule
with poison, whose NaN / 0xFF fill must be overwritten or restored. Failing
runs (every sanitizer category) must leave every buffer exactly as it was,
except the outputs of tasks that finished before the failure; inputs never
change.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import reference as ref
import torch
from cases import OpCase, check_case, init_hccl, make_tiling, run_cases
from threads_left import left_since, threads_now

import hccl_py as hp
from hccl_py import Hccl, HcclDataType, HcclReduceOp

F32 = HcclDataType.HCCL_DATA_TYPE_FP32
SUM = HcclReduceOp.HCCL_REDUCE_SUM
N = 8  # float32 elements of x
GUARD = 24  # random bytes before and after each buffer the kernel is given
TIMEOUT = 20.0
SCHEDULES = [("eager", False), ("late", True)]


# ------------------------------------------------------------- successful runs


def _v_layout(n: int, repeat: int) -> dict[str, tuple[tuple[int, ...], ...]]:
    """AlltoAllV counts (pairwise consistent) and displacements that leave holes between blocks."""
    send_counts = np.array([[1 + (i + j) % 3 for j in range(n)] for i in range(n)])
    recv_counts = send_counts.T

    def displs(counts: np.ndarray, gap: int) -> np.ndarray:
        sizes = counts * repeat + gap
        return np.concatenate([np.zeros((n, 1), int), np.cumsum(sizes, axis=1)[:, :-1]], axis=1)

    def as_tuple(a: np.ndarray) -> tuple[tuple[int, ...], ...]:
        return tuple(tuple(int(v) for v in row) for row in a)

    return dict(
        send_counts=as_tuple(send_counts),
        sdispls=as_tuple(displs(send_counts, 1)),
        recv_counts=as_tuple(recv_counts),
        rdispls=as_tuple(displs(recv_counts, 2)),
    )


def _guarded_cases(n: int) -> list[OpCase]:
    """One case per op with offsets, trailing slack, strides wider than counts and repeat."""
    frame = dict(
        world_size=n,
        repeat=2,
        send_offsets=tuple(8 * (r + 1) for r in range(n)),
        recv_offsets=tuple(4 * (n - r) for r in range(n)),
        send_slack=(GUARD,) * n,
        recv_slack=(GUARD,) * n,
    )
    return [
        OpCase("AllReduce", dtype=ref.FP32, count=5, **frame),
        OpCase("AllGather", dtype=ref.FP32, count=3, stride=8, **frame),
        OpCase("ReduceScatter", dtype=ref.FP16, count=2, stride=5, **frame),
        OpCase("AlltoAll", dtype=ref.INT8, count=3, stride=7, **frame),
        OpCase("AlltoAllV", dtype=ref.INT32, **frame, **_v_layout(n, 2)),
    ]


@pytest.mark.parametrize(("schedule", "poison"), SCHEDULES)
def test_successful_ops_write_only_their_receive_blocks(schedule: str, poison: bool) -> None:
    cases = _guarded_cases(3)
    per_rank = hp.run(
        run_cases,
        world_size=3,
        platform="A3",
        schedule=schedule,
        poison=poison,
        timeout=TIMEOUT,
        args=(cases,),
    )
    for i, case in enumerate(cases):
        check_case(case, [results[i] for results in per_rank])


# ----------------------------------------------------------------- failing runs

Body = Callable[[Hccl, Any, Any, int], None]


def _body(fn: Body) -> Callable[[Any, Any, Any], None]:
    """A kernel that gives ``fn`` the addresses just past the leading guard bytes."""

    def kernel(xGM: Any, yGM: Any, tilingGM: Any) -> None:
        fn(init_hccl(Hccl(), tilingGM), xGM + GUARD, yGM + GUARD, hp.get_rank())

    return kernel


def _initial(rank: int) -> tuple[np.ndarray, np.ndarray]:
    """Random guarded bytes for x (with float data in the middle) and y."""
    rng = np.random.default_rng(rank)
    x = rng.integers(0, 256, GUARD + 4 * N + GUARD, dtype=np.uint8)
    x[GUARD : GUARD + 4 * N] = (np.arange(N, dtype=np.float32) * (rank + 1)).view(np.uint8)
    y = rng.integers(0, 256, GUARD + 8 * N + GUARD, dtype=np.uint8)
    return x, y


def _run_failing(fn: Body, n: int = 2, **run_kw: Any) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Run ``fn`` as a kernel on guarded buffers; it must fail. Returns each rank's final bytes."""
    buffers: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def main() -> None:
        r = hp.get_rank()
        x0, y0 = _initial(r)
        x, y = buffers[r] = torch.from_numpy(x0.copy()), torch.from_numpy(y0.copy())
        if not (fn is _skip_rank_1 and r == 1):
            hp.launch(_body(fn), x, y, make_tiling())

    baseline = threads_now()
    with pytest.raises(hp.WorldError):
        hp.run(main, world_size=n, timeout=run_kw.pop("timeout", TIMEOUT), **run_kw)
    assert not left_since(baseline), left_since(baseline)
    return {r: (x.numpy(), y.numpy()) for r, (x, y) in buffers.items()}


def _bounds_on_rank_1(h: Hccl, x: Any, y: Any, r: int) -> None:
    handle = h.AllGather[True](x, y, N + r, F32)  # rank 1 reads past the end of x
    h.Wait(handle)
    h.Finalize()


def _mismatch(h: Hccl, x: Any, y: Any, r: int) -> None:
    handle = h.AllGather[True](x, y, N - r, F32)
    h.Wait(handle)
    h.Finalize()


def _overlap_on_rank_0(h: Hccl, x: Any, y: Any, r: int) -> None:
    send = x + 4 if r == 0 else x
    handle = h.AllReduce[True](send, x if r == 0 else y, N - 1, F32, SUM)
    h.Wait(handle)
    h.Finalize()


def _uncommitted_on_rank_1(h: Hccl, x: Any, y: Any, r: int) -> None:
    handle = h.AllGather(x, y, N, F32)
    if r == 0:
        h.Commit(handle)
        h.Wait(handle)
    h.Finalize()


def _skip_rank_1(h: Hccl, x: Any, y: Any, r: int) -> None:
    handle = h.AllGather[True](x, y, N, F32)
    h.Wait(handle)
    h.Finalize()


def _exception_on_rank_1(h: Hccl, x: Any, y: Any, r: int) -> None:
    handle = h.AllGather(x, y, N, F32)
    if r == 1:
        raise ValueError("bug after Prepare, before Commit of rank 1")
    h.Commit(handle)
    h.Wait(handle)
    h.Finalize()


FAILING = {
    "bounds": _bounds_on_rank_1,
    "mismatch": _mismatch,
    "overlap": _overlap_on_rank_0,
    "uncommitted": _uncommitted_on_rank_1,
    "deadlock": _skip_rank_1,
    "exception": _exception_on_rank_1,
}


@pytest.mark.parametrize(("schedule", "poison"), SCHEDULES)
@pytest.mark.parametrize("name", list(FAILING))
def test_failing_runs_write_nothing(name: str, schedule: str, poison: bool) -> None:
    final = _run_failing(FAILING[name], schedule=schedule, poison=poison)
    for r, (x, y) in final.items():
        x0, y0 = _initial(r)
        np.testing.assert_array_equal(x, x0, err_msg=f"{name}: rank {r} x changed")
        np.testing.assert_array_equal(y, y0, err_msg=f"{name}: rank {r} y changed")


@pytest.mark.parametrize(("schedule", "poison"), SCHEDULES)
def test_failure_keeps_outputs_of_completed_tasks_only(schedule: str, poison: bool) -> None:
    """A completed AllReduce keeps its result; the mismatched AllGather after it writes nothing."""

    def body(h: Hccl, x: Any, y: Any, r: int) -> None:
        done = h.AllReduce[True](x, y, N, F32, SUM)
        h.Wait(done)
        bad = h.AllGather[True](x, y + 4 * N, N // 2 - r, F32)
        h.Wait(bad)
        h.Finalize()

    final = _run_failing(body, schedule=schedule, poison=poison)
    total = sum(np.arange(N, dtype=np.float32) * (r + 1) for r in range(2))
    for r, (x, y) in final.items():
        x0, y0 = _initial(r)
        want = y0.copy()
        want[GUARD : GUARD + 4 * N] = total.view(np.uint8)
        np.testing.assert_array_equal(x, x0, err_msg=f"rank {r}: x changed")
        np.testing.assert_array_equal(y, want, err_msg=f"rank {r}: y")


def test_poison_never_touches_in_place_inputs() -> None:
    """In-place AllReduce under the late schedule with poison: the input is read intact."""

    def main() -> np.ndarray:
        x0, _ = _initial(hp.get_rank())
        x = torch.from_numpy(x0.copy())

        def kernel(xGM: Any, tilingGM: Any) -> None:
            h = init_hccl(Hccl(), tilingGM)
            data = xGM + GUARD
            handle = h.AllReduce[True](data, data, N, F32, SUM, 1)
            h.Wait(handle)
            h.Finalize()

        hp.launch(kernel, x, make_tiling())
        return x.numpy()

    results = hp.run(main, world_size=3, schedule="late", poison=True, timeout=TIMEOUT)
    total = sum(np.arange(N, dtype=np.float32) * (r + 1) for r in range(3))
    for r, x in enumerate(results):
        want = _initial(r)[0]
        want[GUARD : GUARD + 4 * N] = total.view(np.uint8)
        np.testing.assert_array_equal(x, want, err_msg=f"rank {r}")
