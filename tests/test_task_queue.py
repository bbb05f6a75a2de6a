"""The domain task-queue state machine (hccl_py/server/task_queue.py) and the two servers that use it.

The first part drives the state machine alone, from tables of steps (no
ranks, no threads): Prepare order, the late schedule, InterHcclGroupSync
dependencies, failure spreading, why a round is not done, retiring a launch
and the poison bookkeeping. The second part runs one small program on the
emulator and on gloo and compares what they report and what poison leaves.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any

import cases
import pytest
import torch
from hccl_py.backends.emu.world import EmuWorld
from mutants import samples_on_path

import hccl_py as hp
from hccl_py import Hccl
from hccl_py.core.errors import HcclError
from hccl_py.server.positions import Position
from hccl_py.server.task_queue import TaskBoard

FP32 = hp.HcclDataType.HCCL_DATA_TYPE_FP32


@dataclasses.dataclass(eq=False)
class FakeTask:
    """What the state machine reads of a task."""

    domain_name: str
    seq: int
    rank: int
    rank_dim: int = 2
    repeat: int = 2
    launch: int = 0
    deps: tuple[Any, ...] = ()


class Program:
    """A board and the tasks of a table's steps, by (domain, seq, rank)."""

    def __init__(self, late: bool = False, ranks: int = 2, repeat: int = 2) -> None:
        self.restored: list[Any] = []
        self.failures = 0
        self.board = TaskBoard(late=late, restore=self.restored.append, on_failure=self._failed)
        self.ranks = ranks
        self.repeat = repeat
        self.tasks: dict[tuple[str, int, int], FakeTask] = {}

    def _failed(self) -> None:
        self.failures += 1

    def task(self, dom: str, seq: int, rank: int) -> FakeTask:
        return self.tasks[(dom, seq, rank)]

    def at(self, dom: str, seq: int) -> Position:
        return self.board.domains[dom].positions[seq]

    def run(self, steps: list[tuple]) -> None:
        """Apply ``steps``: ("submit", dom, seq, ranks[, deps, launch]), ("commit", dom, seq,
        ranks, round or range of rounds), ("run", dom, seq) claims and finishes one round,
        ("fail", dom, seq), ("release",)."""
        for verb, *args in steps:
            getattr(self, f"_{verb}")(*args)

    def _submit(
        self, dom: str, seq: int, ranks: list[int], deps: tuple = (), launch: int = 0
    ) -> None:
        for rank in ranks:
            dep_tasks = tuple(self.task(d, s, rank) for d, s in deps)
            task = FakeTask(dom, seq, rank, self.ranks, self.repeat, launch, dep_tasks)
            self.tasks[(dom, seq, rank)] = task
            self.board.submit(task)

    def _commit(self, dom: str, seq: int, ranks: list[int], rounds: int | range) -> None:
        """One Commit of round ``rounds``, or (a range) a Prepare[True]'s Commits of them all."""
        if isinstance(rounds, int):
            rounds = range(rounds, rounds + 1)
        for rank in ranks:
            self.board.commit(self.task(dom, seq, rank), rounds, poison=True)

    def _run(self, dom: str, seq: int) -> None:
        position = self.board.claim([self.at(dom, seq)])
        assert position is not None, (
            f"{dom}#{seq} cannot run: {self.board.why(self.at(dom, seq), 0)}"
        )
        self.board.finish(position)

    def _fail(self, dom: str, seq: int) -> None:
        self.board.fail(self.at(dom, seq), HcclError(f"{dom}#{seq} broke"))

    def _release(self) -> None:
        self.board.release()


def claimed(program: Program) -> tuple[str, int] | None:
    """The key of the round the board lets start next (left running), or None."""
    position = program.board.claim()
    return None if position is None else position.key


BOTH = [0, 1]
#: (steps, the round the board starts next: (domain, seq) or None)
CLAIMS = {
    "first-position-first": (
        [("submit", "a", 0, BOTH), ("submit", "a", 1, BOTH), ("commit", "a", 1, BOTH, 0),
         ("commit", "a", 0, BOTH, 0)],
        ("a", 0),
    ),
    "later-position-waits-for-the-earlier": (
        [("submit", "a", 0, BOTH), ("submit", "a", 1, BOTH), ("commit", "a", 1, BOTH, 0)],
        None,
    ),
    "runs-after-the-earlier-finished": (
        [("submit", "a", 0, BOTH), ("submit", "a", 1, BOTH), ("commit", "a", 0, BOTH, 0),
         ("commit", "a", 0, BOTH, 1), ("commit", "a", 1, BOTH, 0), ("run", "a", 0),
         ("run", "a", 0)],
        ("a", 1),
    ),
    "every-rank-must-commit": (
        [("submit", "a", 0, BOTH), ("commit", "a", 0, [0], 0)],
        None,
    ),
    "every-rank-must-commit-the-next-round": (
        [("submit", "a", 0, BOTH), ("commit", "a", 0, BOTH, 0), ("run", "a", 0),
         ("commit", "a", 0, [0], 1)],
        None,
    ),
    "every-rank-must-submit": (
        [("submit", "a", 0, [0]), ("commit", "a", 0, [0], 0)],
        None,
    ),
    "dependency-unfinished": (
        [("submit", "a", 0, BOTH), ("submit", "b", 0, BOTH, [("a", 0)]),
         ("commit", "b", 0, BOTH, 0)],
        None,
    ),
    "dependency-finished": (
        [("submit", "a", 0, BOTH), ("submit", "b", 0, BOTH, [("a", 0)]),
         ("commit", "a", 0, BOTH, 0), ("commit", "a", 0, BOTH, 1), ("run", "a", 0),
         ("run", "a", 0), ("commit", "b", 0, BOTH, 0)],
        ("b", 0),
    ),
    "a-seq-gap-does-not-block": (
        [("submit", "a", 1, BOTH), ("commit", "a", 1, BOTH, 0)],
        ("a", 1),
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", list(CLAIMS))
def test_claim_follows_prepare_order_commits_and_dependencies(name: str) -> None:
    steps, want = CLAIMS[name]
    program = Program()
    program.run(steps)
    assert claimed(program) == want


def test_late_schedule_starts_only_released_rounds() -> None:
    program = Program(late=True)
    program.run([("submit", "a", 0, BOTH), ("commit", "a", 0, BOTH, 0)])
    assert claimed(program) is None
    assert program.board.why(program.at("a", 0), 0).kind == "runnable"
    program.run([("release",)])
    assert claimed(program) == ("a", 0)


#: (steps, the round asked about (domain, seq, round), the kind of answer, its ranks)
WHYS = {
    "not-submitted": ([("submit", "a", 0, [1])], ("a", 0, 0), "not submitted", (0,)),
    "not-committed": (
        [("submit", "a", 0, BOTH), ("commit", "a", 0, [1], 0)], ("a", 0, 0), "not committed", (0,)
    ),
    "earlier-round": (
        [("submit", "a", 0, BOTH), ("commit", "a", 0, BOTH, 0), ("commit", "a", 0, BOTH, 1)],
        ("a", 0, 1), "earlier round", (),
    ),
    "earlier-task": (
        [("submit", "a", 0, BOTH), ("submit", "a", 1, BOTH), ("commit", "a", 1, BOTH, 0)],
        ("a", 1, 0), "earlier task", (),
    ),
    "dependency": (
        [("submit", "a", 0, BOTH), ("submit", "b", 0, BOTH, [("a", 0)]),
         ("commit", "b", 0, BOTH, 0)],
        ("b", 0, 0), "dependency", (),
    ),
    "runnable": ([("submit", "a", 0, BOTH), ("commit", "a", 0, BOTH, 0)], ("a", 0, 0), "runnable", ()),
    "finished": (
        [("submit", "a", 0, BOTH), ("commit", "a", 0, BOTH, 0), ("run", "a", 0)],
        ("a", 0, 0), "finished", (),
    ),
    "failed": ([("submit", "a", 0, BOTH), ("fail", "a", 0)], ("a", 0, 0), "failed", ()),
}  # fmt: skip


@pytest.mark.parametrize("name", list(WHYS))
def test_why_a_round_is_not_done(name: str) -> None:
    steps, (dom, seq, round_idx), kind, ranks = WHYS[name]
    program = Program()
    program.run(steps)
    why = program.board.why(program.at(dom, seq), round_idx)
    assert (why.kind, why.ranks) == (kind, ranks)
    if kind == "earlier task":
        assert why.position is program.at(dom, seq - 1)
    if kind == "dependency":
        assert why.dep is program.task("a", 0, 0) and why.position is program.at("a", 0)


def test_a_failure_spreads_to_later_positions_and_dependents() -> None:
    program = Program()
    program.run(
        [("submit", "a", 0, BOTH), ("submit", "a", 1, BOTH), ("submit", "b", 0, BOTH, [("a", 1)]),
         ("commit", "b", 0, BOTH, 0), ("fail", "a", 0)]
    )  # fmt: skip
    dom = program.board.domains["a"]
    assert str(dom.failure_at(0)) == "a#0 broke"
    behind = "task #0 of domain a failed, so the server never reaches the later tasks of the domain"
    assert str(dom.failure_at(1)).startswith(behind)
    assert str(dom.failure_at(7)).startswith(behind), "a position nobody submitted yet"
    program.run([("submit", "a", 2, BOTH)])
    assert str(program.at("a", 2).error).startswith(behind), "submitted after the failure"
    assert program.at("b", 0).error is None, "a dependent fails once the server reaches it"
    assert claimed(program) is None
    assert str(program.at("b", 0).error).startswith(
        "task #1 of domain a, which this task waits for through InterHcclGroupSync, failed"
    )
    assert program.failures == 2
    assert program.board.unfinished() == []


def test_a_position_keeps_its_first_error_and_new_ones_fail_behind_the_lowest() -> None:
    program = Program()
    program.run([("submit", "a", 0, BOTH), ("submit", "a", 1, BOTH), ("fail", "a", 1)])
    program.run([("fail", "a", 0), ("fail", "a", 1), ("submit", "a", 2, BOTH)])
    assert str(program.at("a", 1).error) == "a#1 broke"
    assert str(program.at("a", 2).error).startswith("task #0 of domain a failed")
    assert program.board.domains["a"].first_failure() is program.at("a", 0).error
    assert program.failures == 2, "failing a failed position changes nothing"


def test_retire_forgets_finished_positions_of_returned_launches() -> None:
    program = Program()
    steps: list[tuple] = []
    for seq, launch in enumerate([0, 0, 1]):
        steps += [("submit", "a", seq, BOTH, (), launch), ("commit", "a", seq, BOTH, 0),
                  ("commit", "a", seq, BOTH, 1), ("run", "a", seq), ("run", "a", seq)]  # fmt: skip
    steps += [("submit", "a", 3, BOTH, (), 1)]
    program.run(steps)
    dom = program.board.domains["a"]
    assert dom.retire(0) == range(0, 2)
    assert dom.retire(1) == range(2, 3), "stops at the unfinished position #3"
    assert sorted(dom.positions) == [3]
    assert dom.rounds_done(1, 2) == 2 and dom.failure_at(1) is None
    stand_in = dom.position(program.task("a", 0, 1))
    assert stand_in.finished and stand_in is not dom.get(0)


def test_poison_is_due_once_reached_forgotten_when_run_and_restored_when_never_run() -> None:
    program = Program(repeat=1)
    program.run(
        [("submit", "a", 0, BOTH), ("submit", "a", 1, BOTH), ("commit", "a", 0, BOTH, 0),
         ("commit", "a", 1, BOTH, 0)]
    )  # fmt: skip
    board = program.board
    due = [(p.key, t.rank, r) for p, t, r in board.poison_due()]
    assert due == [(("a", 0), 0, 0), (("a", 0), 1, 0)], "position #1 is not reached yet"
    assert board.poison_due() == [], "each round is due once"
    board.poisoned(program.at("a", 0), 0, "saved a#0")
    program.run([("run", "a", 0)])
    assert program.at("a", 0).poisoned == {}, "the round ran: nothing to restore"
    due = [(p.key, t.rank, r) for p, t, r in board.poison_due()]
    assert due == [(("a", 1), 0, 0), (("a", 1), 1, 0)]
    board.poisoned(program.at("a", 1), 0, "saved a#1")
    program.run([("fail", "a", 1)])
    assert program.restored == ["saved a#1"]
    program.run([("commit", "a", 1, BOTH, 1)])
    assert board.poison_due() == [] and board.unpoisoned == {}, "a failed task is never poisoned"


def test_rounds_committed_in_one_call_count_and_are_poisoned_as_one_by_one() -> None:
    """A Prepare[True] hands the server all its rounds at once (``commit(task, range)``)."""
    at_once, one_by_one = Program(repeat=3), Program(repeat=3)
    at_once.run([("submit", "a", 0, BOTH), ("commit", "a", 0, BOTH, range(3))])
    one_by_one.run([("submit", "a", 0, BOTH)] + [("commit", "a", 0, BOTH, r) for r in range(3)])
    for program in (at_once, one_by_one):
        assert program.at("a", 0).committed == {0: 3, 1: 3}
        due = [(t.rank, r) for _, t, r in program.board.poison_due()]
        assert due == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]
        for _ in range(3):
            program.run([("run", "a", 0)])
        assert program.at("a", 0).finished and claimed(program) is None


def _ready_now(board: TaskBoard) -> frozenset:
    """The positions whose next round may start now (asking never fails one in these tables)."""
    return frozenset(
        p.key for dom in board.domains.values() for p in dom.positions.values() if board.ready(p)
    )


@pytest.mark.parametrize("name", list(CLAIMS))
def test_what_ready_answers_changes_only_with_the_board_version(name: str) -> None:
    """The emulator keeps its "has the server work" answer per board version: every transition
    that changes an answer of ``ready`` moves the version on, and asking moves nothing."""
    steps, _ = CLAIMS[name]
    program = Program()
    board = program.board
    calls = {verb: getattr(board, verb) for verb in ("submit", "commit", "claim", "finish")}

    def checked(verb: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            version, ready = board.version, _ready_now(board)
            assert board.version == version, "asking ready moved the version"
            result = calls[verb](*args, **kwargs)
            assert board.version != version or _ready_now(board) == ready, (
                f"{verb}{args[:1]} changed what ready answers without moving the version"
            )
            return result

        return call

    for verb in calls:
        setattr(board, verb, checked(verb))
    program.run(steps)
    while (position := board.claim()) is not None:  # every round that can run, runs
        board.finish(position)
    moved = board.version
    program.run([("fail", steps[0][1], steps[0][2])])
    assert board.version != moved, "a failure moves the version on"


# ---------------------------------------------------------------- both servers
def _spread_kernel(xGM: Any, yGM: Any, tilingGM: Any, first: int) -> None:
    """Task #0 disagrees across ranks; the Wait for task #1 meets the failure it spreads."""
    hccl = cases.init_hccl(Hccl(), tilingGM, ops=("AllGather",))
    hccl.AllGather[True](xGM, yGM, first, FP32, 0)
    hccl.Wait(hccl.AllGather[True](xGM, yGM + 128, 2, FP32, 0))


def spreading_rank() -> tuple[str, list[float]]:
    """Rank r's first AllGather has 4 + r elements; returns the report and the receive buffer."""
    y = torch.full((64,), 7.0)
    try:
        hp.launch(_spread_kernel, torch.ones(8), y, cases.make_tiling(), 4 + hp.get_rank())
    except hp.HcclError as error:
        return str(error), y.tolist()
    return "", y.tolist()


@pytest.fixture(scope="module")
def spread_runs() -> dict[str, list]:
    return {
        backend: hp.run(spreading_rank, world_size=2, backend=backend, timeout=20.0, poison=True)
        for backend in ("emu", "gloo")
    }


def test_a_spreading_failure_reads_the_same_on_both_backends(spread_runs: dict) -> None:
    for backend, per_rank in spread_runs.items():
        for rank, (said, _) in enumerate(per_rank):
            assert (
                "task #0 of domain hccl_world_group failed, so the server never reaches" in said
            ), f"{backend} rank {rank}: {said}"
    assert [said for said, _ in spread_runs["gloo"]] == [said for said, _ in spread_runs["emu"]]


def test_poisoned_rounds_that_never_ran_are_restored_on_both_backends(spread_runs: dict) -> None:
    for backend, per_rank in spread_runs.items():
        for rank, (_, y) in enumerate(per_rank):
            assert y == [7.0] * 64, f"{backend} rank {rank}: the failed rounds left {y[:12]}"


def test_the_emulators_kept_answer_is_a_fresh_one_at_every_switch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Explored schedules of a sample whose AllGather waits for an AlltoAll through
    InterHcclGroupSync: at every switch the kept answer equals one asked afresh."""
    kept, answers = EmuWorld._has_work, []

    def checking(world: EmuWorld) -> bool:
        board = world.board
        fresh = bool(world.writes.pending) or any(board.ready(p) for p in list(board.pending))
        answers.append(kept(world))
        assert answers[-1] == fresh, f"kept {answers[-1]}, asked afresh {fresh}"
        return answers[-1]

    monkeypatch.setattr(EmuWorld, "_has_work", checking)
    with samples_on_path():
        sample = importlib.import_module("alltoall_allgather_custom")
        per_rank = hp.run(sample.main, world_size=4, platform=sample.PLATFORM, explore=6)
    assert all("FAIL" not in line for lines in per_rank for line in lines), per_rank
    assert True in answers and False in answers, "both answers were asked for"
