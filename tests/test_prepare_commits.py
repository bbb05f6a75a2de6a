"""A Prepare[True]'s Commits: one server call for all its rounds, seen as one Commit each.

``AllGather[True](..., repeat)`` commits every round at Prepare, as ``repeat``
Commits in a row (a fine-grained AlltoAllV: its steps, ``stepSize`` per Commit).
Unless the debug log or a trace shows each Commit, the client hands them to the
server in one call (``Server.commit(task, rounds)``). Everything that hears a
Commit must still hear each round: the server, the notes of a core that does not
send, the buffer race check's marks, the steps of a fine-grained task.
"""

from __future__ import annotations

import logging
from typing import Any

import cases
import numpy as np
import pytest
import torch
from cases import RUN_TIMEOUT, init_hccl
from hccl_py.backends.emu.world import EmuWorld
from test_iterate import client, tiling

import hccl_py as hp
from hccl_py import Hccl

FP32 = hp.HcclDataType.HCCL_DATA_TYPE_FP32
N = 4  # elements per rank and round
REPEAT = 3


def _spy(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int, range]]:
    """(domain rank, handle, rounds) of every Commit the emulator's server hears."""
    heard: list[tuple[int, int, range]] = []
    real = EmuWorld.commit

    def commit(self: EmuWorld, task: Any, rounds: range) -> None:
        heard.append((task.rank, task.handle, rounds))
        real(self, task, rounds)

    monkeypatch.setattr(EmuWorld, "commit", commit)
    return heard


def _gather(xGM: Any, yGM: Any, tilingGM: Any) -> None:
    h = init_hccl(Hccl(), tilingGM, ops=("AllGather",))
    handle = h.AllGather[True](xGM, yGM, N, FP32, REPEAT * N, REPEAT)
    for _ in range(REPEAT):
        h.Wait(handle)
    hp.SyncAll()
    h.Finalize()


def _gather_rank() -> np.ndarray:
    x = torch.arange(N * REPEAT, dtype=torch.float32) + 100 * hp.get_rank()
    y = torch.zeros(hp.get_world_size() * N * REPEAT)
    hp.launch(_gather, x, y, cases.make_tiling())
    return y.numpy()


def _gathered(ranks: int) -> np.ndarray:
    """numpy: round r puts rank j's r-th block of N at j * REPEAT * N + r * N (strideCount
    REPEAT * N): the inputs side by side."""
    return np.concatenate([np.arange(N * REPEAT, dtype=np.float32) + 100 * j for j in range(ranks)])


def test_a_prepare_with_commit_hands_the_server_every_round_in_one_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    heard = _spy(monkeypatch)
    results = hp.run(_gather_rank, world_size=2, timeout=RUN_TIMEOUT)
    assert sorted(heard) == [(0, 0, range(REPEAT)), (1, 0, range(REPEAT))]
    for got in results:
        np.testing.assert_array_equal(got, _gathered(2))


def test_with_the_debug_log_on_each_commit_is_a_call_of_its_own(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    heard = _spy(monkeypatch)
    caplog.set_level(logging.DEBUG, logger="hccl_py")
    results = hp.run(_gather_rank, world_size=2, timeout=RUN_TIMEOUT)
    one_by_one = [(rank, 0, range(r, r + 1)) for rank in (0, 1) for r in range(REPEAT)]
    assert sorted(heard, key=lambda c: (c[0], c[2].start)) == one_by_one
    commits = [m for m in caplog.messages if m.startswith("rank 0 AIV core 0: Commit(0)")]
    assert commits == [f"rank 0 AIV core 0: Commit(0) round {r} -> None" for r in range(REPEAT)]
    for got in results:
        np.testing.assert_array_equal(got, _gathered(2))


def _read_round_2_early(xGM: Any, yGM: Any, tilingGM: Any) -> None:
    """Rank 0 reads round 2's receive bytes after the Waits of rounds 0 and 1 only."""
    h = init_hccl(Hccl(), tilingGM, ops=("AllGather",))
    handle = h.AllGather[True](xGM, yGM, N, FP32, REPEAT * N, REPEAT)
    h.Wait(handle)
    h.Wait(handle)
    if hp.get_rank() == 0:
        hp.gm_tensor(yGM + 2 * N * 4, torch.float32, N).sum()
    h.Wait(handle)
    h.Finalize()


def test_a_read_of_the_last_rounds_bytes_before_its_wait_is_a_race_of_that_round() -> None:
    def rank() -> None:
        x, y = torch.ones(N * REPEAT), torch.zeros(2 * N * REPEAT)
        hp.launch(_read_round_2_early, x, y, cases.make_tiling())

    with pytest.raises(hp.WorldError) as info:
        hp.run(rank, world_size=2, timeout=RUN_TIMEOUT)
    err = info.value.failures[0]
    assert isinstance(err, hp.HcclRaceError), err
    assert (err.handle, err.op, err.round) == (0, "AllGather", 2)
    assert "bytes [32, 48) of yGM" in str(err)


def _commit_on_block_1(xGM: Any, yGM: Any, tilingGM: Any) -> None:
    """The sending core commits round 0 only; block 1 commits both at Prepare, then waits."""
    h = init_hccl(Hccl(), tilingGM, ops=("AllGather",))
    if hp.GetBlockIdx() == 1:
        handle = h.AllGather[True](xGM, yGM, N, FP32, 2 * N, 2)
        h.Wait(handle)
        h.Wait(handle)
    else:
        handle = h.AllGather(xGM, yGM, N, FP32, 2 * N, 2)
        h.Commit(handle)
        h.Wait(handle)
    hp.SyncAll()
    h.Finalize()


def test_a_hang_on_the_last_round_committed_at_prepare_on_another_core_names_both() -> None:
    """hccl_aicpu_impl.h: Commit counts per core; only the working core's count reaches GM.
    Block 1 counted both rounds at its Prepare, so its second Wait waits for round 1,
    which block 0 never committed."""

    def rank() -> None:
        x, y = torch.zeros(2 * N), torch.zeros(2 * 2 * N)
        hp.launch(_commit_on_block_1, x, y, cases.make_tiling(), block_dim=2)

    with pytest.raises(hp.WorldError) as info:
        hp.run(rank, world_size=2, timeout=RUN_TIMEOUT)
    err = info.value.failures[0]
    assert isinstance(err, hp.HcclDeadlockError), err
    assert (
        "[AIV core 1 committed round 1, but only the sending core's Commits reach the server "
        "and AIV core 0 has not committed it]"
    ) in err.reason


def _early_step_read(x: Any, y: Any, tilingGM: Any) -> None:
    """Fine-grained AlltoAllV (stepSize 1, 2 ranks: 2 steps, one Commit each at Prepare);
    rank 0 reads the block that step 0 writes before any Wait."""
    h = client(tilingGM)
    counts, displs = [N, N], [0, N]
    handle = h.AlltoAllV[True](x, counts, displs, FP32, y, counts, displs, FP32)
    if hp.get_rank() == 0:
        hp.gm_tensor(y, torch.float32, N).sum()
    h.Wait(handle)
    h.Wait(handle)
    h.Finalize()


def test_every_step_committed_at_prepare_is_marked_for_the_race_check() -> None:
    def rank() -> None:
        hp.launch(_early_step_read, torch.ones(2 * N), torch.zeros(2 * N), tiling(1))

    with pytest.raises(hp.WorldError) as info:
        hp.run(rank, world_size=2, platform="A3", timeout=RUN_TIMEOUT)
    err = info.value.failures[0]
    assert isinstance(err, hp.HcclRaceError), err
    assert (err.handle, err.op, err.round) == (0, "AlltoAllV", 0)
    assert "bytes [0, 16) of" in str(err)
