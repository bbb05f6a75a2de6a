"""A Prepare[True]'s Commits: one server call for all its rounds, seen as one Commit each.

``AllGather[True](..., repeat)`` commits every round at Prepare, as ``repeat``
Commits in a row (a fine-grained AlltoAllV: its steps, ``stepSize`` per Commit).
Unless the debug log or a trace shows each Commit, the client hands them to the
server in one call (``Server.commit(task, rounds)``). Everything that hears a
Commit must still hear each round: the server, the notes of a core that does not
send, the buffer race check's marks, the steps of a fine-grained task. And the
run must be the one that Commits one at a time give, under every seeded schedule
(which decides after each Commit whether the server runs a ready round) and under
poison: the same seed replays the same interleaving with the debug log on or off.
"""

from __future__ import annotations

import logging
import re
from typing import Any

import cases
import numpy as np
import pytest
import torch
from cases import RUN_TIMEOUT, init_hccl
from expect import expects_warning
from hccl_py.backends.emu.policies import SeededPolicy
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
    # (the last rank to commit then commits them one at a time inside: see below)
    whole = [call for call in heard if len(call[2]) == REPEAT]
    assert sorted(whole) == [(0, 0, range(REPEAT)), (1, 0, range(REPEAT))]
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


SEEDS = range(24)


def _query_after_prepare(xGM: Any, yGM: Any, tilingGM: Any, seen: list) -> None:
    """What Query says right after the Prepare: which rounds the schedule has run by then."""
    h = init_hccl(Hccl(), tilingGM, ops=("AllGather",))
    handle = h.AllGather[True](xGM, yGM, N, FP32, REPEAT * N, REPEAT)
    seen.append(h.Query(handle))
    for _ in range(REPEAT):
        h.Wait(handle)
    hp.SyncAll()
    h.Finalize()


def _querying_rank() -> tuple[list, list]:
    x = torch.arange(N * REPEAT, dtype=torch.float32) + 100 * hp.get_rank()
    y, seen = torch.zeros(hp.get_world_size() * N * REPEAT), []
    hp.launch(_query_after_prepare, x, y, cases.make_tiling(), seen)
    return seen, y.tolist()


def _two_tasks(xGM: Any, yGM: Any, tilingGM: Any, seen: list) -> None:
    """A one-round task, then a task of REPEAT rounds: a rank may commit the second while a
    seeded schedule has left the first one's round ready and not run."""
    h = init_hccl(Hccl(), tilingGM, ops=("AllGather",))
    first = h.AllGather[True](xGM, yGM, N, FP32, REPEAT * N)
    second = h.AllGather[True](xGM, yGM + 2 * N * REPEAT * 4, N, FP32, REPEAT * N, REPEAT)
    seen.append((h.Query(first), h.Query(second)))
    for handle in (first, second, second, second):
        h.Wait(handle)
    hp.SyncAll()
    h.Finalize()


def _two_task_rank() -> tuple[list, list]:
    x = torch.arange(N * REPEAT, dtype=torch.float32) + 100 * hp.get_rank()
    y, seen = torch.zeros(2 * hp.get_world_size() * N * REPEAT), []
    hp.launch(_two_tasks, x, y, cases.make_tiling(), seen)
    return seen, y.tolist()


def _step_query(x: Any, y: Any, tilingGM: Any, seen: list) -> None:
    """A fine-grained AlltoAllV of stepSize 2 on 2 ranks: one Commit is both steps."""
    h = client(tilingGM)
    counts, displs = [N, N], [0, N]
    handle = h.AlltoAllV(x, counts, displs, FP32, y, counts, displs, FP32)
    h.Commit(handle)
    seen.append(h.Query(handle))
    h.Wait(handle)
    h.Finalize()


def _stepping_rank() -> tuple[list, list]:
    x, y, seen = torch.arange(2.0 * N) + 10 * hp.get_rank(), torch.zeros(2 * N), []
    hp.launch(_step_query, x, y, tiling(2), seen)
    return seen, y.tolist()


def _seeded(fn: Any, **options: Any) -> list:
    return [hp.run(fn, world_size=2, seed=seed, timeout=RUN_TIMEOUT, **options) for seed in SEEDS]


def _one_commit_per_round(monkeypatch: pytest.MonkeyPatch) -> None:
    """The server hears each round in a call of its own (the protocol before ranges)."""
    real = EmuWorld.commit

    def commit(self: EmuWorld, task: Any, rounds: range) -> None:
        for round_idx in rounds:
            real(self, task, range(round_idx, round_idx + 1))

    monkeypatch.setattr(EmuWorld, "commit", commit)


@pytest.mark.parametrize(
    "fn, options",
    [(_querying_rank, {}), (_two_task_rank, {}), (_stepping_rank, {"platform": "A3"})],
    ids=["rounds", "two-tasks", "steps"],
)
def test_every_seeded_schedule_runs_as_with_one_commit_per_round(
    monkeypatch: pytest.MonkeyPatch, fn: Any, options: dict
) -> None:
    """A seeded schedule may run a ready round after any Commit (before: a Query right after
    the Prepare saw other rounds finished in 5 of these 24 seeds, and a fine-grained
    Commit's steps in 2)."""
    together = _seeded(fn, **options)
    with monkeypatch.context() as patch:
        _one_commit_per_round(patch)
        one_by_one = _seeded(fn, **options)
    assert together == one_by_one


def test_while_a_round_waits_to_run_the_schedule_is_asked_after_each_commit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A server timing that leaves every ready round for later while a runner can go: the
    first task's round waits when a rank commits the second task's rounds (under seed 8, before
    any other rank committed them), and the schedule is asked after each of those Commits, as
    one Commit per round asks it (before: once)."""
    asked: list[bool] = []

    def run_round(self: SeededPolicy, runners_can_go: bool) -> bool:
        asked.append(runners_can_go)
        return not runners_can_go

    monkeypatch.setattr(SeededPolicy, "run_round", run_round)
    together = hp.run(_two_task_rank, world_size=2, seed=8, timeout=RUN_TIMEOUT)
    asked_together, asked[:] = list(asked), []
    with monkeypatch.context() as patch:
        _one_commit_per_round(patch)
        one_by_one = hp.run(_two_task_rank, world_size=2, seed=8, timeout=RUN_TIMEOUT)
    assert asked_together == asked and together == one_by_one


def test_a_seed_replays_the_same_schedule_with_the_debug_log_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The debug log makes each Commit a call of its own: the schedule must not see it."""
    plain = _seeded(_querying_rank)
    caplog.set_level(logging.DEBUG, logger="hccl_py")
    assert _seeded(_querying_rank) == plain


def _overlapping(xGM: Any, tilingGM: Any) -> None:
    """Round 1 receives into the bytes round 0 sends (kept by overlap="warn")."""
    h = init_hccl(Hccl(), tilingGM, ops=("AllGather",))
    handle = h.AllGather[True](xGM + N * 4, xGM, N, FP32, 3 * N, 2)
    h.Wait(handle)
    h.Wait(handle)
    hp.SyncAll()
    h.Finalize()


def _overlapping_rank() -> list:
    x = torch.arange(8.0 * N) + 100 * hp.get_rank()
    hp.launch(_overlapping, x, cases.make_tiling())
    return x.tolist()


@expects_warning("overlap")
def test_poison_reaches_each_round_as_with_one_commit_per_round(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The last rank to commit runs round 0 before round 1 is poisoned (before: every round
    poisoned first, and round 0 sent the NaN of round 1's receive block)."""
    options = {"world_size": 2, "poison": True, "overlap": "warn", "timeout": RUN_TIMEOUT}
    together = hp.run(_overlapping_rank, **options)
    with monkeypatch.context() as patch:
        _one_commit_per_round(patch)
        one_by_one = hp.run(_overlapping_rank, **options)
    np.testing.assert_array_equal(np.array(together), np.array(one_by_one))


@expects_warning("overlap")
def test_a_single_rank_domain_on_gloo_runs_each_round_after_its_commit() -> None:
    """gloo runs a one-rank domain's rounds in the committing thread after each Commit: the
    poisoned result is the emulator's (before: every round poisoned first on gloo, NaN)."""
    options = {"world_size": 1, "poison": True, "overlap": "warn", "timeout": RUN_TIMEOUT}
    emulated = hp.run(_overlapping_rank, **options)
    on_gloo = hp.run(_overlapping_rank, backend="gloo", **options)
    np.testing.assert_array_equal(np.array(on_gloo), np.array(emulated))
    assert not np.isnan(np.array(on_gloo)).any()


def _looped(xGM: Any, yGM: Any, tilingGM: Any) -> None:
    """Two domains whose tasks wait for each other through InterHcclGroupSync (a loop that
    never runs), both receiving into yGM; rank 0 reads it before any Wait, which raises first."""
    world = init_hccl(Hccl(), tilingGM, 0, ops=("AllGather",))
    pair = init_hccl(Hccl(), tilingGM, 1, ops=("AllGather",))
    pair.InterHcclGroupSync(0, 0)
    second = pair.AllGather[True](xGM, yGM, N, FP32, REPEAT * N, REPEAT)
    world.InterHcclGroupSync(1, second)
    first = world.AllGather[True](xGM, yGM, N, FP32, REPEAT * N, REPEAT)
    if hp.get_rank() == 0:
        hp.gm_tensor(yGM, torch.float32, N).sum()
    world.Wait(first)
    pair.Wait(second)
    pair.Finalize()
    world.Finalize()


def _looped_rank() -> None:
    groups = {0: hp.world_group(), 1: hp.new_group(range(hp.get_world_size()))}
    x = torch.arange(N * REPEAT, dtype=torch.float32)
    y = torch.zeros(hp.get_world_size() * N * REPEAT)
    hp.launch(_looped, x, y, cases.make_tiling(groups=groups), groups=groups)


def _race_reports() -> list[str]:
    reports = []
    for seed in [None, *range(8)]:
        with pytest.raises(hp.WorldError) as info:
            hp.run(_looped_rank, world_size=2, seed=seed, timeout=RUN_TIMEOUT)
        err = info.value.failures[0]
        assert isinstance(err, hp.HcclRaceError), err
        # (the line of the Commit: under the split below, the splitting function's)
        reports.append(re.sub(r"committed at \S+ \(\w+\)", "committed at ...", str(err)))
    return reports


def test_the_race_check_holds_rounds_behind_a_loop_of_dependencies_as_one_by_one(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The race check holds a task's rounds back while a task it waits for (here, through the
    loop, the task itself) has rounds this rank has not committed: which round it marks first
    decides which task the report names (before: the world group's task in a batch, the pair's
    one Commit at a time)."""
    together = _race_reports()
    with monkeypatch.context() as patch:
        _one_commit_per_round(patch)
        one_by_one = _race_reports()
    caplog.set_level(logging.DEBUG, logger="hccl_py")
    assert together == one_by_one == _race_reports()
    assert together[0].startswith("[rank 0, domain group_0_1, handle 0, op AllGather, round 0]")


def _server_calls_rank() -> list[tuple[str, int, list[int]]]:
    """(call, handle, rounds) of every submit and commit this gloo rank's server heard, for a
    Prepare[True] and for a Prepare[False] committed round by round."""
    from hccl_py.backends.dist.server import DistServer

    heard: list[tuple[str, int, list[int]]] = []
    real = {name: getattr(DistServer, name) for name in ("submit", "commit", "submit_commit")}

    def spy(name: str) -> Any:
        def call(self: DistServer, task: Any, *rounds: Any, **kwargs: Any) -> None:
            if not kwargs:  # (not submit_commit's own commit)
                heard.append((name, task.handle, list(rounds[0]) if rounds else []))
            real[name](self, task, *rounds, **kwargs)

        return call

    for name in real:
        setattr(DistServer, name, spy(name))
    try:
        _gather_rank()

        def separate(xGM: Any, yGM: Any, tilingGM: Any) -> None:
            h = init_hccl(Hccl(), tilingGM, ops=("AllGather",))
            handle = h.AllGather(xGM, yGM, N, FP32, REPEAT * N, REPEAT)
            for _ in range(REPEAT):
                h.Commit(handle)
                h.Wait(handle)
            hp.SyncAll()
            h.Finalize()

        x = torch.arange(N * REPEAT, dtype=torch.float32)
        hp.launch(separate, x, torch.zeros(hp.get_world_size() * N * REPEAT), cases.make_tiling())
    finally:
        for name, method in real.items():
            setattr(DistServer, name, method)
    return heard


def test_on_gloo_a_prepare_with_commit_submits_and_commits_in_one_server_call() -> None:
    """One lock and one wake-up of the domain's thread instead of a submit and a commit."""
    heard = hp.run(_server_calls_rank, world_size=2, backend="gloo", timeout=RUN_TIMEOUT)
    separate = [("submit", 0, [])] + [("commit", 0, [r]) for r in range(REPEAT)]
    assert heard == [[("submit_commit", 0, list(range(REPEAT))), *separate]] * 2
