"""Reports on many ranks fold identical per-rank states: ``ranks 0-7: ...`` (issue 27, item 9)."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import pytest
import torch
from cases import init_hccl, make_tiling

import hccl_py as hp
from hccl_py.core.grouping import group_rank_lines, rank_ranges
from hccl_py.server.blocking import Blocker


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
    # the emulator's Wait lines name their core too (before: "ranks 0-7: wait for round 0 ...")
    assert "  - ranks 0-7: AIV core 1 waits for round 0 of handle 0 AllGather(" in text, text
    assert "  - ranks 0-7: wait for its kernel: 0 of 2 cores returned" in text
    detail = "\n".join(r.getMessage() for r in caplog.records if "deadlock" in r.getMessage())
    for rank in range(8):
        assert f"  - rank {rank} AIV core 0 waits in SyncAll" in detail, detail
        assert f"  - rank {rank} AIV core 1 waits for round 0 of handle 0" in detail, detail


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


def test_identical_states_of_several_threads_of_a_rank_are_counted() -> None:
    """Lines that do not name their core: three threads of rank 0 in the same state were
    "ranks 0: wait x" (before 2026-11-30), as if rank 0 were several ranks."""
    lines = ["rank 0 waits x"] * 3 + ["rank 1 waits x"] * 3 + ["rank 2 waits x", "rank 3 waits x"]
    assert group_rank_lines(lines) == ["ranks 0-1, 3 threads each: wait x", "ranks 2-3: wait x"]
    assert group_rank_lines(lines[:2]) == ["rank 0, 2 threads: wait x"]


def test_the_state_names_each_core_and_a_core_in_a_process_group_call() -> None:
    """Real threads (gloo's): the state names the core of each waiting core's thread, and a core
    waiting in a process group's call for its rank's round (on the blocker's ``calling``) is no
    thread "running outside hccl_py calls", nor one that waits in vain (no deadlock: its call
    ends when the peers join). Before 2026-11-30 it read "rank 0 waits for round 0" three times,
    folded into "ranks 0: wait for round 0", and "1 thread(s) running outside hccl_py calls"."""
    blocker = Blocker(timeout=60.0)
    blocker.enter(4)
    release, called, errors = threading.Event(), threading.Event(), []

    def in_call() -> None:
        me = threading.get_ident()
        blocker.calling[me] = "rank 0 waits for the process group of domain d: an exchange"
        called.set()
        release.wait(60)
        blocker.calling.pop(me)

    def wait(timeout: float) -> None:
        try:
            blocker.wait_for(release.is_set, "rank 0 waits for round 0", timeout)
        except hp.HcclError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=in_call, name="rank0-AIV0")]
    threads += [threading.Thread(target=wait, args=(60,), name=f"rank0-AIV{i}") for i in (2, 3)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 30
    while not (called.is_set() and len(blocker.blocked) == 2):
        assert time.monotonic() < deadline, "the threads never got there"
        time.sleep(0.001)
    timing_out = threading.Thread(target=wait, args=(0.1,), name="rank0-AIV1")
    timing_out.start()
    timing_out.join(60)
    release.set()
    blocker.notify()
    for thread in threads:
        thread.join(60)
    assert len(errors) == 1 and isinstance(errors[0], hp.HcclTimeoutError), errors
    text = str(errors[0])
    assert "waiting for rank 0 AIV core 1 waits for round 0;" in text, text
    assert text.endswith(
        "State of the world:\n"
        "  - rank 0 AIV core 0 waits for the process group of domain d: an exchange\n"
        "  - rank 0 AIV core 1 waits for round 0\n"
        "  - rank 0 AIV core 2 waits for round 0\n"
        "  - rank 0 AIV core 3 waits for round 0"
    ), text


class _UnprintableError(Exception):
    """An error whose message cannot be made: its ``__str__`` raises."""

    def __str__(self) -> str:
        raise RuntimeError("no message")


def _raise_unprintable() -> None:
    if hp.get_rank() == 0:
        raise _UnprintableError
    hp.barrier()


@pytest.mark.parametrize("seed", [None, 1])
def test_an_error_whose_message_fails_is_reported_as_tracebacks_show_it(seed: int | None) -> None:
    """Until 2026-12-01 the report (and the peer's stop) called its str(): hp.run raised the
    RuntimeError of its __str__ instead of the WorldError."""
    with pytest.raises(hp.WorldError) as info:
        hp.run(_raise_unprintable, world_size=2, seed=seed)
    text = str(info.value)
    assert "rank 0: _UnprintableError: <exception str() failed>" in text
    assert (
        "rank 1: HcclPeerError: [rank 1] stopped because rank 0 failed: _UnprintableError: "
        "<exception" in text
    )


@pytest.mark.parametrize("secret", [None, "s"])
def test_a_gloo_rank_whose_error_message_fails_reports_it(
    monkeypatch: pytest.MonkeyPatch, secret: str | None
) -> None:
    """gloo sends the error as a record with its message: making it called str() too, so the
    rank died of the RuntimeError and the report said it exited before reporting an outcome."""
    if secret is not None:
        monkeypatch.setenv("HCCL_PY_SECRET", secret)
    with pytest.raises(hp.WorldError) as info:
        hp.run(_raise_unprintable, world_size=2, backend="gloo", timeout=60)
    text = str(info.value)
    assert "rank 0: _UnprintableError: <exception str() failed>" in text, text
    assert "before reporting an outcome" not in text, text
