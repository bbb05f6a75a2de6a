"""AlltoAllV: the documentation's uneven 4-rank example, equal counts, repeat, zero counts.

AlltoAllV exists on Atlas A3 (and 950), not on A2, so these tests run on "A3".
"""

from __future__ import annotations

from typing import Any

import cases
import numpy as np
import pytest
import reference as ref
import torch
from cases import RUN_TIMEOUT, init_hccl

import hccl_py as hp
from hccl_py import Hccl, HcclDataType

FP32 = HcclDataType.HCCL_DATA_TYPE_FP32

# The documentation's arrays, [rank][peer].
SEND_COUNTS = ((3, 3, 3, 3), (2, 2, 3, 2), (1, 4, 4, 4), (3, 3, 3, 3))
SDISPLS = ((0, 3, 6, 9), (0, 2, 4, 7), (0, 1, 5, 9), (0, 3, 6, 9))
RECV_COUNTS = ((3, 2, 1, 3), (3, 2, 4, 3), (3, 3, 4, 3), (3, 2, 4, 3))
RDISPLS = ((0, 3, 5, 6), (0, 3, 5, 9), (0, 3, 6, 10), (0, 3, 5, 9))
DOC = dict(send_counts=SEND_COUNTS, sdispls=SDISPLS, recv_counts=RECV_COUNTS, rdispls=RDISPLS)
# x_i[k] = 100 * i + k, so each received value names its sender and position.
DOC_EXPECTED = (
    (0, 1, 2, 100, 101, 200, 300, 301, 302),
    (3, 4, 5, 102, 103, 201, 202, 203, 204, 303, 304, 305),
    (6, 7, 8, 104, 105, 106, 205, 206, 207, 208, 306, 307, 308),
    (9, 10, 11, 107, 108, 209, 210, 211, 212, 309, 310, 311),
)
BUF = 16  # elements in x and y (>= every rank's extent)
GUARD = -1.0
KINDS = ("list", "tuple", "numpy", "torch", "gm")


def _arrays(rank: int, kind: str) -> list[Any]:
    rows = [SEND_COUNTS[rank], SDISPLS[rank], RECV_COUNTS[rank], RDISPLS[rank]]
    if kind == "gm":
        return [torch.tensor(r, dtype=torch.int64, device=hp.device()) for r in rows]
    return [cases.as_array(r, kind) for r in rows]


def _doc_kernel(
    xGM: Any, yGM: Any, tilingGM: Any, sc: Any, sd: Any, rc: Any, rd: Any, record: list
) -> None:
    hccl = init_hccl(Hccl(), tilingGM, ops=("AlltoAllV",))
    handle = hccl.AlltoAllV[True](xGM, sc, sd, FP32, yGM, rc, rd, FP32)
    record.append((handle, hccl.Wait(handle)))
    hccl.Finalize()


def doc_rank() -> dict[str, tuple]:
    """Per rank: (record, y) of the documentation's AlltoAllV for every way of passing arrays.

    ``gm`` passes the arrays as uint64 tensors through the launch (GM addresses).
    """
    rank = hp.get_rank()
    out = {}
    for kind in KINDS:
        x = torch.arange(BUF, dtype=torch.float32) + 100 * rank
        y = torch.full((BUF,), GUARD)
        record: list = []
        hp.launch(_doc_kernel, x, y, cases.make_tiling(), *_arrays(rank, kind), record)
        out[kind] = (record, tuple(y.tolist()))
    return out


def test_documentation_uneven_example(backend: str) -> None:
    out = hp.run(doc_rank, world_size=4, backend=backend, platform="A3", timeout=RUN_TIMEOUT)
    for rank, per_kind in enumerate(out):
        want = DOC_EXPECTED[rank] + (GUARD,) * (BUF - len(DOC_EXPECTED[rank]))
        for kind, (record, y) in per_kind.items():
            assert record == [(0, 0)], f"rank {rank} {kind}"
            assert y == want, f"rank {rank}, arrays as {kind}"


def _padded_rank(kind: str) -> tuple[float, ...]:
    """The documentation's AlltoAllV with uint64_t[32] arrays (AlltoAllAllGatherBatchMatMul's)."""
    rank = hp.get_rank()
    x = torch.arange(BUF, dtype=torch.float32) + 100 * rank
    y = torch.full((BUF,), GUARD)
    padded = [list(r) + [7777] * (32 - len(r)) for r in _arrays(rank, "list")]
    if kind == "gm":
        padded = [torch.tensor(r, dtype=torch.int64) for r in padded]
    hp.launch(_doc_kernel, x, y, cases.make_tiling(), *padded, [])
    return tuple(y.tolist())


@pytest.mark.parametrize("kind", ["list", "gm"])
def test_arrays_longer_than_rank_dim_are_read_up_to_rank_dim(kind: str) -> None:
    """The official client reads the first rankDim entries of each array (hccl_aicpu_common.h)."""
    out = hp.run(_padded_rank, world_size=4, platform="A3", timeout=RUN_TIMEOUT, args=(kind,))
    for rank, y in enumerate(out):
        want = DOC_EXPECTED[rank]
        assert y[: len(want)] == want
        assert set(y[len(want) :]) <= {GUARD}


def test_documentation_example_matches_reference_with_offsets(backend: str) -> None:
    """The same arrays on random FP16 data, shifted buffer addresses and guard bytes."""
    case = cases.OpCase(
        op="AlltoAllV",
        world_size=4,
        dtype=ref.FP16,
        send_offsets=(2, 0, 6, 4),
        recv_offsets=(0, 8, 2, 4),
        send_slack=(4, 2, 0, 6),
        recv_slack=(2, 4, 6, 0),
        seed=7,
        **DOC,
    )
    cases.run_and_check([case], backend)


def _equal_kernel(xGM: Any, yGM: Any, zGM: Any, tilingGM: Any, count: int, n: int) -> None:
    """AlltoAllV with equal counts into y, AlltoAll of the same count into z."""
    hccl = init_hccl(Hccl(), tilingGM, ops=("AlltoAllV", "AlltoAll"))
    counts = [count] * n
    displs = [count * j for j in range(n)]
    hv = hccl.AlltoAllV[True](xGM, counts, displs, FP32, yGM, counts, displs, FP32)
    ha = hccl.AlltoAll[True](xGM, zGM, count, FP32)
    hccl.Wait(hv)
    hccl.Wait(ha)
    hccl.Finalize()


def equal_rank(count: int) -> tuple[np.ndarray, np.ndarray]:
    """Per rank: y of AlltoAllV with equal counts and z of AlltoAll."""
    rank, n = hp.get_rank(), hp.get_world_size()
    x = torch.arange(count * n, dtype=torch.float32) + 1000 * rank
    y = torch.full((count * n,), GUARD)
    z = torch.full((count * n,), GUARD)
    hp.launch(_equal_kernel, x, y, z, cases.make_tiling(), count, n)
    return y.numpy(), z.numpy()


def test_equal_counts_match_all_to_all(backend: str) -> None:
    n, count = 4, 5
    out = hp.run(
        equal_rank, world_size=n, backend=backend, platform="A3", timeout=RUN_TIMEOUT, args=(count,)
    )
    for j, (y, z) in enumerate(out):
        want = np.concatenate(
            [np.arange(count * j, count * (j + 1), dtype=np.float32) + 1000 * i for i in range(n)]
        )
        np.testing.assert_array_equal(y, want, err_msg=f"rank {j} AlltoAllV")
        np.testing.assert_array_equal(z, want, err_msg=f"rank {j} AlltoAll")


def _doubled(displs: tuple) -> tuple:
    return tuple(tuple(2 * d for d in row) for row in displs)


@pytest.mark.parametrize("commit", ["template", "each", "all"])
def test_repeat_uses_counts_as_round_step(backend: str, commit: str) -> None:
    """repeat=2: round r reads sdispls[j] + r*sendCounts[j] and writes rdispls[i] + r*recvCounts[i]."""
    case = cases.OpCase(
        op="AlltoAllV",
        world_size=4,
        dtype=ref.INT16,
        repeat=2,
        send_counts=SEND_COUNTS,
        recv_counts=RECV_COUNTS,
        sdispls=_doubled(SDISPLS),
        rdispls=_doubled(RDISPLS),
        recv_slack=(2, 2, 2, 2),
        commit=commit,
        seed=11,
    )
    cases.run_and_check([case], backend)


def test_repeat_three_by_hand(backend: str) -> None:
    """2 ranks, 1 element to each peer per round, 3 rounds: y_j = [x_0[j*3 + r], x_1[j*3 + r]]."""
    n, rounds = 2, 3
    case = cases.OpCase(
        op="AlltoAllV",
        world_size=n,
        dtype=ref.INT32,
        repeat=rounds,
        send_counts=((1, 1), (1, 1)),
        recv_counts=((1, 1), (1, 1)),
        sdispls=((0, 3), (0, 3)),
        rdispls=((0, 3), (0, 3)),
        seed=3,
    )
    sends = [cases.rank_buffers(case, r)[0].view(np.int32) for r in range(n)]
    recvs = [cases.rank_buffers(case, r)[1] for r in range(n)]
    want = cases.expected_recvs(case, [s.view(np.uint8) for s in sends], recvs)
    for j in range(n):
        got = want[j].view(np.int32)
        np.testing.assert_array_equal(got[0:3], sends[0][3 * j : 3 * j + 3])
        np.testing.assert_array_equal(got[3:6], sends[1][3 * j : 3 * j + 3])
    cases.run_and_check([case], backend)


def test_all_zero_counts_write_nothing(backend: str) -> None:
    zero = ((0, 0, 0), (0, 0, 0), (0, 0, 0))
    case = cases.OpCase(
        op="AlltoAllV",
        world_size=3,
        dtype=ref.FP32,
        repeat=2,
        send_counts=zero,
        recv_counts=zero,
        sdispls=zero,
        rdispls=((0, 1, 2),) * 3,
        recv_slack=(16, 16, 16),
        send_slack=(8, 8, 8),
        seed=5,
    )
    cases.run_and_check([case], backend)


def _empty_block_kernel(xGM: Any, yGM: Any, tilingGM: Any, record: list) -> None:
    """Rank 0 sends one element to each rank; rank 1 sends nothing, its displacements past x."""
    hccl = init_hccl(Hccl(), tilingGM, ops=("AlltoAllV",))
    rank, far = hccl.GetRankId(), [1000, 1000]
    sc, sd = ([1, 1], [0, 1]) if rank == 0 else ([0, 0], far)
    rc, rd = ([1, 0], [0, 1000]) if rank == 0 else ([1, 0], [1, 1000])
    handle = hccl.AlltoAllV[True](xGM, sc, sd, FP32, yGM, rc, rd, FP32)
    record += [handle, hccl.Wait(handle)]
    hccl.Finalize()


def test_an_empty_block_may_have_a_displacement_past_the_buffer() -> None:
    """A zero count moves nothing, so its displacement addresses no byte: one past the end of
    either buffer is no bounds error."""

    def main() -> tuple[list, list]:
        record: list = []
        y = torch.full((2,), GUARD)
        x = torch.arange(2, dtype=torch.float32) + 100 * hp.get_rank()
        hp.launch(_empty_block_kernel, x, y, cases.make_tiling(), record)
        return record, y.tolist()

    out = hp.run(main, world_size=2, platform="A3", timeout=RUN_TIMEOUT)
    assert list(out) == [([0, 0], [0.0, GUARD]), ([0, 0], [GUARD, 1.0])]


# --------------------------------------------------------------- bad calls


def _mismatch_kernel(xGM: Any, yGM: Any, tilingGM: Any, record: list) -> None:
    """Rank 1 expects 2 elements from rank 0, which sends 1."""
    hccl = init_hccl(Hccl(), tilingGM, ops=("AlltoAllV",))
    rank = hccl.GetRankId()
    recv = [[1, 1], [2, 1]][rank]
    handle = hccl.AlltoAllV[True](xGM, [1, 1], [0, 1], FP32, yGM, recv, [0, 4], FP32)
    record.append(handle)
    hccl.Wait(handle)
    hccl.Finalize()


def test_mismatched_counts_are_reported(backend: str) -> None:
    with pytest.raises(hp.WorldError) as info:
        hp.run(
            cases.probe,
            world_size=2,
            backend=backend,
            platform="A3",
            timeout=RUN_TIMEOUT,
            args=(_mismatch_kernel,),
        )
    errors = info.value.failures
    assert set(errors) == {0, 1}
    for rank, err in errors.items():
        assert isinstance(err, hp.HcclMismatchError), (rank, err)
        text = str(err)
        for fact in ("AlltoAllV", "rank 0 sends 1", "rank 1", "expects 2", f"rank {rank}"):
            assert fact in text, (fact, text)


def _bad_array_kernel(xGM: Any, yGM: Any, tilingGM: Any, record: list, which: str) -> None:
    hccl = init_hccl(Hccl(), tilingGM, ops=("AlltoAllV",))
    arrays = {"sc": [1, 1], "sd": [0, 1], "rc": [1, 1], "rd": [0, 1]}
    recv_type = FP32
    if which == "short":
        arrays["sd"] = [0]
    elif which == "negative":
        arrays["rd"] = [0, -1]
    else:
        recv_type = HcclDataType.HCCL_DATA_TYPE_INT32
    a = arrays
    handle = hccl.AlltoAllV(xGM, a["sc"], a["sd"], FP32, yGM, a["rc"], a["rd"], recv_type)
    record.append((handle, hccl.last_error))
    hccl.Finalize()


BAD_ARRAYS = {
    "short": ("sdispls must hold at least 2 integers", "1 given"),
    "negative": ("rdispls", "non-negative"),
    # hccl_aicpu_impl.h, AlltoAllV: sendType == recvType (the message names both types)
    "recvType": (
        "recvType must equal sendType (expected HCCL_DATA_TYPE_FP32, got HCCL_DATA_TYPE_INT32)",
    ),
}


@pytest.mark.parametrize("which", list(BAD_ARRAYS))
def test_bad_arrays_return_minus_one(backend: str, which: str) -> None:
    out = hp.run(
        cases.probe,
        world_size=2,
        backend=backend,
        platform="A3",
        timeout=RUN_TIMEOUT,
        strict=False,
        args=(_bad_array_kernel, which),
    )
    for rank, (record, y) in enumerate(out):
        [(handle, error)] = record
        assert handle == -1
        for fact in (*BAD_ARRAYS[which], "AlltoAllV", f"rank {rank}"):
            assert fact in error, (fact, error)
        assert not y.any(), "a rejected Prepare must send nothing"


def _per_core_counts_kernel(xGM: Any, yGM: Any, tilingGM: Any, record: list) -> None:
    """Block 1 prepares an AlltoAllV of one element per peer; then block 0, the sending core,
    one of two elements per peer into y[4:]: the task is the sending core's, whatever counts
    another core passed (AlltoAllV's count arrays are validated on every call)."""
    hccl = init_hccl(Hccl(), tilingGM, ops=("AlltoAllV",))
    one, two = ((1, 1), (0, 1), (1, 1), (0, 1)), ((2, 2), (0, 2), (2, 2), (4, 6))
    if hp.GetBlockIdx() == 0:
        hp.SyncAll()
    sc, sd, rc, rd = one if hp.GetBlockIdx() == 1 else two
    handle = hccl.AlltoAllV[True](xGM, sc, sd, FP32, yGM, rc, rd, FP32)
    if hp.GetBlockIdx() == 1:
        hp.SyncAll()
    record.append((hp.GetBlockIdx(), handle, hccl.Wait(handle)))
    hp.SyncAll()
    hccl.Finalize()


def per_core_counts_rank() -> tuple[list, list]:
    x = torch.arange(4, dtype=torch.float32) + 100 * hp.get_rank()
    y = torch.full((8,), GUARD)
    record: list = []
    hp.launch(_per_core_counts_kernel, x, y, cases.make_tiling(), record, block_dim=2)
    return sorted(record), y.tolist()


def test_the_sending_core_s_counts_make_the_task() -> None:
    out = hp.run(per_core_counts_rank, world_size=2, platform="A3", timeout=RUN_TIMEOUT)
    for r, (record, y) in enumerate(out):
        assert record == [(0, 0, 0), (1, 0, 0)]
        assert y == [GUARD] * 4 + [2 * r, 2 * r + 1, 100 + 2 * r, 101 + 2 * r], f"rank {r}"
