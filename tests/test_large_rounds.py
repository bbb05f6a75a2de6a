"""Large rounds take the emulator's fast paths; they must move exactly the bytes the reference says.

Blocks of 64 KiB and more are copied straight from source to destination
when no receive buffer shares storage with a send buffer, rounds of 1 MiB and
more run on the server's lane thread, and copies use wide integer views where
the alignment allows. Each path is checked against the numpy reference of
tests/reference.py, byte for byte (guards included), with aligned and odd
offsets, skipLocalRankCopy, and the in-place forms that must keep staging.
"""

from __future__ import annotations

import threading
from typing import Any

import cases
import numpy as np
import pytest
import reference as ref
import torch
from hccl_py.backends.emu import executor
from hccl_py.backends.emu.lane import LANE_BYTES
from threads_left import left_since, threads_now

import hccl_py as hp
from hccl_py.core.constants import HcclCMDType

BLOCK = executor.DIRECT_BYTES // 4  # fp32 elements in a block of exactly DIRECT_BYTES


@pytest.mark.parametrize(
    "case",
    [
        cases.OpCase(op="AllGather", world_size=4, dtype=ref.FP32, count=BLOCK, repeat=2,
                     stride=2 * BLOCK),
        cases.OpCase(op="AllGather", world_size=3, dtype=ref.FP16, count=3 * BLOCK + 1,
                     send_offsets=(2, 6, 10), recv_offsets=(4, 2, 0), recv_slack=(8, 8, 8)),
        cases.OpCase(op="AllGather", world_size=4, dtype=ref.INT8, count=4 * BLOCK,
                     skip_local=True),
        cases.OpCase(op="AlltoAll", world_size=4, dtype=ref.FP32, count=BLOCK, repeat=2,
                     stride=3 * BLOCK, skip_local=True),
        cases.OpCase(op="AlltoAll", world_size=2, dtype=ref.INT16, count=2 * BLOCK + 3,
                     send_offsets=(2, 0), recv_offsets=(0, 6)),
        cases.OpCase(op="AllReduce", world_size=4, dtype=ref.FP32, count=LANE_BYTES // 8),
        cases.OpCase(op="AllReduce", world_size=3, dtype=ref.BFP16, count=LANE_BYTES // 4,
                     reduce_op=ref.MAX),
        cases.OpCase(op="ReduceScatter", world_size=4, dtype=ref.FP32, count=BLOCK, repeat=2,
                     stride=2 * BLOCK),
    ],
    ids=lambda c: f"{c.op}-{c.world_size}r-{ref.ELEM_SIZE[c.dtype]}B-{c.count}",
)  # fmt: skip
def test_large_rounds_match_the_reference(case: cases.OpCase) -> None:
    """skipLocalRankCopy has its effect on Atlas A2 only."""
    cases.run_and_check([case], "emu", platform="A2" if case.skip_local else "A3")


def _in_place_gather(count: int) -> list[np.ndarray]:
    """AllGather in place (sendBuf = recvBuf + rank * count): the staged path must be taken."""

    def kernel(yGM: Any, tilingGM: Any) -> None:
        hccl = cases.init_hccl(hp.Hccl(), tilingGM)
        me = hp.get_rank()
        handle = hccl.AllGather[True](yGM + me * count * 4, yGM, count, hp.HCCL_DATA_TYPE_FP32)
        hccl.Wait(handle)
        hccl.Finalize()

    def main() -> np.ndarray:
        n, me = hp.get_world_size(), hp.get_rank()
        y = torch.full((n * count,), -1.0)
        y[me * count : (me + 1) * count] = torch.arange(count, dtype=torch.float32) + 1000 * me
        hp.launch(kernel, y, cases.make_tiling())
        return y.numpy()

    return list(hp.run(main, world_size=4, platform="A3"))


def test_in_place_large_all_gather_keeps_every_block() -> None:
    count = 2 * BLOCK
    want = np.concatenate([np.arange(count, dtype=np.float32) + 1000 * r for r in range(4)])
    for rank, got in enumerate(_in_place_gather(count)):
        assert np.array_equal(got, want), rank


def test_a_failing_round_on_the_lane_is_reported_and_the_lane_ends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(tasks: list, r: int) -> None:
        raise RuntimeError(f"boom in {threading.current_thread().name}")

    monkeypatch.setitem(executor.ROUNDS, HcclCMDType.HCCL_CMD_ALLREDUCE, broken)
    baseline = threads_now()
    case = cases.OpCase(op="AllReduce", world_size=2, dtype=ref.FP32, count=LANE_BYTES // 4)
    with pytest.raises(hp.WorldError) as info:
        cases.run_and_check([case], "emu")
    text = str(info.value)
    assert "round 0 of AllReduce(FP32" in text and "failed: RuntimeError: boom in" in text
    assert "hccl_py-emu-server" in text  # it ran on the lane, not in a rank thread
    assert not left_since(baseline), left_since(baseline)


@pytest.mark.parametrize("schedule", ["eager", "late"])
def test_large_rounds_under_poison(schedule: str) -> None:
    """Poisoning a large round happens on the lane too; the data still arrives intact."""
    case = cases.OpCase(op="AlltoAll", world_size=4, dtype=ref.FP32, count=LANE_BYTES // 16)
    per_rank = hp.run(
        cases.run_cases, world_size=4, platform="A3", poison=True, schedule=schedule,
        args=([case],),
    )  # fmt: skip
    cases.check_case(case, [results[0] for results in per_rank])
