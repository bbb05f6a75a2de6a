"""Reports on many ranks fold identical per-rank states: ``ranks 0-7: ...`` (issue 27, item 9)."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import torch
from cases import init_hccl, make_tiling

import hccl_py as hp
from hccl_py.core.grouping import group_rank_lines, rank_ranges


def test_rank_ranges_fold_consecutive_ranks() -> None:
    assert rank_ranges([6, 0, 2, 1, 3, 9, 8]) == "0-3, 6, 8-9"
    assert rank_ranges([4]) == "4"


def test_identical_states_share_one_line() -> None:
    lines = [
        "rank 1 waits x",
        "rank 0 waits x",
        "rank 2 AIV core 0 waits y",
        "no rank",
        "rank 3 waits x",
    ]
    assert group_rank_lines(lines) == [
        "ranks 0-1, 3: wait x",
        "rank 2 AIV core 0 waits y",
        "no rank",
    ]


def _stuck(xGM: Any, yGM: Any, tilingGM: Any) -> None:
    """Core 1 commits and waits; the sending core 0 never commits, so the round never runs."""
    hccl = init_hccl(hp.Hccl(), tilingGM, ops=("AllGather",))
    handle = hccl.AllGather(xGM, yGM, 4, hp.HCCL_DATA_TYPE_FP32, 0)
    if hp.GetBlockIdx() == 1:
        hccl.Commit(handle)
        hccl.Wait(handle)
    hp.SyncAll()
    hccl.Finalize()


def _stuck_rank() -> None:
    x, y = torch.ones(4), torch.zeros(4 * hp.get_world_size())
    hp.launch(_stuck, x, y, make_tiling(), block_dim=2)


def test_an_8_rank_deadlock_report_is_short_with_the_detail_in_the_debug_log(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.DEBUG, logger="hccl_py"), pytest.raises(hp.WorldError) as info:
        hp.run(_stuck_rank, world_size=8, timeout=20.0)
    text = str(info.value)
    assert all(isinstance(e, hp.HcclDeadlockError) for e in info.value.failures.values())
    assert len(text.splitlines()) < 20, text
    assert text.count("HcclDeadlockError") == 1, text
    assert "  ranks 0-7: HcclDeadlockError: deadlock" in text
    assert "  - ranks 0-7: AIV core 0 waits in SyncAll: 1 of 2 cores arrived" in text
    assert "  - ranks 0-7: wait for its kernel: 0 of 2 cores returned" in text
    detail = "\n".join(r.getMessage() for r in caplog.records if "deadlock" in r.getMessage())
    for rank in range(8):
        assert f"  - rank {rank} AIV core 0 waits in SyncAll" in detail, detail


def test_states_come_in_the_order_of_their_numbers() -> None:
    """Byte ranges and cores sort by number: [4, 8) before [12, 16), core 2 before core 10
    (before, as text: [12, 16) first)."""
    lines = [
        "rank 0 AIV core 10 polls bytes [40, 44)",
        "rank 0 AIV core 3 polls bytes [12, 16)",
        "rank 0 AIV core 1 polls bytes [4, 8)",
    ]
    assert group_rank_lines(lines) == [lines[2], lines[1], lines[0]]


def _last_rank_polls_before_committing(xGM: Any, yGM: Any, tilingGM: Any) -> None:
    hccl = init_hccl(hp.Hccl(), tilingGM, ops=("AllGather",))
    handle = hccl.AllGather(xGM, yGM, 4, hp.HCCL_DATA_TYPE_FP32, 0)
    if hccl.GetRankId() == hccl.GetRankDim() - 1:  # waits for a flag nobody sets
        flag = hp.gm_tensor(hccl.GetWindowsInAddr(hccl.GetRankId()), torch.int32, 1)
        while int(flag[0]) != 1:
            pass
    hccl.Commit(handle)
    hccl.Wait(handle)
    hccl.Finalize()


def _polling_rank() -> None:
    x, y = torch.ones(4), torch.zeros(4 * hp.get_world_size())
    hp.launch(_last_rank_polls_before_committing, x, y, make_tiling())


@pytest.mark.parametrize("seed", [None, 1, 2, 3, 4, 5])
def test_rounds_committed_per_rank_are_listed_in_rank_order(seed: int | None) -> None:
    """The unfinished task's line lists each rank's committed rounds by rank (before, in the
    order the schedule had the ranks prepare: {2: 1, 0: 1, 3: 0, 1: 1})."""
    with pytest.raises(hp.WorldError) as info:
        hp.run(_polling_rank, world_size=4, seed=seed, timeout=20)
    line = next(x for x in str(info.value).splitlines() if "rounds committed per rank" in x)
    assert "rounds committed per rank {0: 1, 1: 1, 2: 1, 3: 0}" in line, line
