"""hp.run's rough edges: a world too large for the OS's threads, flag and integer arguments,
and report fields that show a string the user passed as a string."""

from __future__ import annotations

import gc
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from cases import RUN_TIMEOUT, init_hccl, make_tiling
from hccl_py.backends.emu.scheduler import THREAD_NAME as WORLD_THREAD
from hccl_py.backends.emu.world import EmuWorld

import hccl_py as hp
from hccl_py import Hccl
from hccl_py.core.errors import HcclError, describe
from hccl_py.framework._common import listed
from hccl_py.kernel.context import current_rank_context
from hccl_py.server.threads import IDLE_NAME

FP32 = hp.HcclDataType.HCCL_DATA_TYPE_FP32


def _worlds() -> int:
    """How many emulated worlds this process still holds."""
    gc.collect()
    return sum(type(o) is EmuWorld for o in gc.get_objects())


def _refuse_threads_after(
    monkeypatch: pytest.MonkeyPatch, allowed: int, name: str = IDLE_NAME
) -> None:
    """Let ``allowed`` threads named ``name`` (pool threads: the emulator's rank runners) start,
    then fail every later start as the OS does when it has no thread left to give."""
    start = threading.Thread.start
    count = [0]

    def limited(self: threading.Thread) -> None:
        if self.name == name:
            count[0] += 1
            if count[0] > allowed:
                raise RuntimeError("can't start new thread")
        start(self)

    monkeypatch.setattr(threading.Thread, "start", limited)


def _assert_no_thread_left(before: set[threading.Thread]) -> None:
    """No thread started since ``before`` outlives the run: each is joined (a thread whose job
    ended may still be on its way out), and none is alive after 30 s. Threads of ``before``
    that ended meanwhile (an idle pool thread of an earlier test) do not count."""
    deadline = time.monotonic() + 30
    for thread in set(threading.enumerate()) - before:
        thread.join(max(0.0, deadline - time.monotonic()))
    assert not [t.name for t in set(threading.enumerate()) - before if t.is_alive()]


ADVICE = (
    "Each rank, and each core of a launch, runs in an OS thread of its own by default: set "
    "HCCL_PY_EMU_RUNNERS=greenlets to run them all in one OS thread, or run fewer ranks"
)


@pytest.mark.parametrize("allowed", [0, 3])
def test_a_world_the_os_has_no_threads_for_is_refused_and_leaves_nothing_behind(
    monkeypatch: pytest.MonkeyPatch, allowed: int
) -> None:
    """Before, the thread start's raw RuntimeError came out of hp.run and the runners that had
    started stayed behind, each a thread waiting for a turn that never came."""
    monkeypatch.setenv("HCCL_PY_EMU_RUNNERS", "threads")
    ran: list[int] = []
    before, worlds = set(threading.enumerate()), _worlds()
    _refuse_threads_after(monkeypatch, allowed)
    with pytest.raises(hp.HcclRunnerStartError) as info:
        hp.run(lambda: ran.append(hp.get_rank()), world_size=6, timeout=RUN_TIMEOUT)
    assert isinstance(info.value, HcclError)
    assert str(info.value) == (
        f"hp.run(world_size=6) on the emulator started {allowed} of its 6 rank runners, then "
        "the OS refused to start another thread (can't start new thread); the started ones "
        f"were stopped before running any code. {ADVICE}"
    )
    del info
    assert ran == []
    _assert_no_thread_left(before)
    assert _worlds() == worlds
    # What the message suggests: greenlet runners need no thread per rank.
    monkeypatch.setenv("HCCL_PY_EMU_RUNNERS", "greenlets")
    assert hp.run(hp.get_rank, world_size=6, timeout=RUN_TIMEOUT) == list(range(6))


def test_greenlet_runners_whose_thread_the_os_refuses_are_refused_and_leave_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Greenlet runners run in one thread of the world: before, its start's raw RuntimeError
    came out of hp.run and the world stayed registered."""
    monkeypatch.setenv("HCCL_PY_EMU_RUNNERS", "greenlets")
    ran: list[int] = []
    before, worlds = set(threading.enumerate()), _worlds()
    _refuse_threads_after(monkeypatch, 0, WORLD_THREAD)
    with pytest.raises(hp.HcclRunnerStartError) as info:
        hp.run(lambda: ran.append(hp.get_rank()), world_size=3, timeout=RUN_TIMEOUT)
    assert str(info.value) == (
        "the OS refused to start a thread for the world's greenlet runners (can't start new "
        "thread); no rank ran any code"
    )
    assert info.value.refusal == "can't start new thread"
    del info
    assert ran == []
    _assert_no_thread_left(before)
    assert _worlds() == worlds


def test_a_launch_the_os_has_no_threads_for_fails_its_rank_clearly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before, the core's thread start failed with a raw RuntimeError, and the runner it was
    for stayed in the world, a turn nobody could take: once handed the baton, the run hung."""
    monkeypatch.setenv("HCCL_PY_EMU_RUNNERS", "threads")
    before = set(threading.enumerate())
    _refuse_threads_after(monkeypatch, 2 + 2)  # the two ranks, then two cores of rank 0

    ran: list[tuple[int, int]] = []

    def kernel() -> None:
        ran.append((hp.get_rank(), hp.GetBlockIdx()))
        hp.SyncAll()

    def main() -> None:
        hp.launch(kernel, block_dim=4)

    with pytest.raises(hp.WorldError) as info:
        hp.run(main, world_size=2, timeout=RUN_TIMEOUT)
    # no core of rank 0 ran the kernel (before, cores 0 and 1 did, on a partial launch)
    assert [core for rank, core in ran if rank == 0] == []
    refused = info.value.failures[0]
    assert isinstance(refused, hp.HcclRunnerStartError)
    assert str(refused) == (
        f"the OS refused to start a thread for runner rank0-AIV2 (can't start new thread). {ADVICE}"
    )
    del info, refused
    _assert_no_thread_left(before)


@pytest.mark.parametrize(
    ("name", "value"),
    [(name, value) for name in ("strict", "poison", "summary", "record") for value in ("no", 0)]
    + [("strict", None), ("record", None)],
)
def test_flags_take_only_true_or_false(name: str, value: object) -> None:
    """Before, poison="no" (any truthy value) turned the sanitizer on. (None is poison's and
    summary's default: the environment decides.)"""
    with pytest.raises(TypeError) as info:
        hp.run(hp.get_rank, world_size=1, timeout=RUN_TIMEOUT, **{name: value})
    assert str(info.value) == f"{name} must be True or False, not {value!r}"


@pytest.mark.parametrize("variable", ["HCCL_PY_POISON", "HCCL_PY_SUMMARY"])
def test_flag_variables_say_on_or_off(monkeypatch: pytest.MonkeyPatch, variable: str) -> None:
    """Before, any value but 0 turned the flag on: HCCL_PY_POISON=no poisoned."""

    def main() -> bool:  # a summary records the run
        config = current_rank_context().config
        return config.poison if variable == "HCCL_PY_POISON" else config.record

    for value, on in (("no", False), ("False", False), ("0", False), ("yes", True), ("1", True)):
        monkeypatch.setenv(variable, value)
        assert hp.run(main, 1, timeout=RUN_TIMEOUT) == [on], value
    monkeypatch.setenv(variable, "nope")
    with pytest.raises(ValueError) as info:
        hp.run(main, 1, timeout=RUN_TIMEOUT)
    assert str(info.value) == (
        f"{variable} must be 1 or 0 (or true/false, yes/no, on/off), not 'nope'"
    )


def test_flags_take_numpy_bools_as_bools() -> None:
    """Before, a framework collective refused async_op=np.False_, and hp.run kept a numpy bool
    in the run's options."""

    def main() -> list[type]:
        hp.barrier(async_op=np.False_)
        config = current_rank_context().config
        return [type(config.strict), type(config.poison), type(config.record)]

    got = hp.run(main, 2, strict=np.True_, poison=np.False_, record=np.True_, timeout=RUN_TIMEOUT)
    assert got == [[bool, bool, bool]] * 2


def test_a_framework_flag_that_is_not_a_bool_is_named_with_its_value() -> None:
    def main() -> None:
        hp.barrier(async_op="no")

    with pytest.raises(hp.WorldError) as info:
        hp.run(main, 1, timeout=RUN_TIMEOUT)
    err = info.value.failures[0]
    assert isinstance(err, TypeError)
    assert str(err) == "barrier on rank 0: async_op must be True or False, not 'no'"


def test_integer_options_take_numpy_integers() -> None:
    """Before, seed=np.int64(3) and explore=np.int64(2) were refused as not ints."""

    def main() -> list:
        config = current_rank_context().config
        return [
            config.seed,
            type(config.seed),
            config.ranks_per_server,
            type(config.ranks_per_server),
        ]

    got = hp.run(main, 2, seed=np.int64(3), ranks_per_server=np.int64(1), timeout=RUN_TIMEOUT)
    assert got == [[3, int, 1, int]] * 2
    assert hp.run(hp.get_rank, 2, explore=np.int64(2), timeout=RUN_TIMEOUT) == [0, 1]


def test_seed_and_explore_together_are_refused() -> None:
    """Before 2026-11-30 the seed was dropped silently."""
    with pytest.raises(ValueError, match="seed=3 replays one schedule and explore=2 runs"):
        hp.run(hp.get_rank, 2, seed=3, explore=2, timeout=RUN_TIMEOUT)


def test_a_huge_explore_count_starts_at_once() -> None:
    """The schedules are taken lazily (before, the list of 10**20 seeds was built first: an
    OverflowError, or for 10**9 a MemoryError); a failing program stops at its first one."""

    def main() -> None:
        raise RuntimeError("fails in every schedule")

    with pytest.raises(hp.WorldError) as info:
        hp.run(main, 1, explore=10**20, timeout=RUN_TIMEOUT)
    assert info.value.seed is None and "fails in every schedule" in str(info.value)


def test_integer_options_refuse_what_is_not_an_integer() -> None:
    """Before, ranks_per_server="x" raised int()'s own ValueError, and 2.5 and True were
    taken as 2 and 1."""
    cases = {
        "ranks_per_server": ("x", 2.5, True, np.True_, 0),
        "seed": (2.0, True, -1, "3"),
        "explore": (2.0, True, 0),
    }
    expected = {
        "ranks_per_server": "a positive int",
        "seed": "None or a non-negative int",
        "explore": "a positive number of schedules",
    }
    for name, values in cases.items():
        for value in values:
            with pytest.raises(ValueError) as info:
                hp.run(hp.get_rank, world_size=1, timeout=RUN_TIMEOUT, **{name: value})
            assert str(info.value) == f"{name} must be {expected[name]}, not {value!r}", value


def test_report_fields_quote_strings_that_read_as_other_values() -> None:
    """Before, a string "300" showed as 300, the same as the number."""
    assert describe("count is wrong", {"actual": "300"}) == "count is wrong (got '300')"
    assert describe("count is wrong", {"actual": 300}) == "count is wrong (got 300)"
    for text in ("", " 8", "None", "nan", "[1, 2]", "0x10"):
        assert describe("r", {"actual": text}) == f"r (got {text!r})"
    # Descriptions and names are shown as they are.
    facts = {"domain": "hccl_world_group", "expected": "< 8", "actual": "[0, 16)"}
    assert describe("r", facts) == "[domain hccl_world_group] r (expected < 8, got [0, 16))"
    assert str(HcclError("bad", op="AllReduce", actual="3")) == "[op AllReduce] bad (got '3')"


def test_a_count_given_as_a_string_is_reported_as_one() -> None:
    def kernel(x, y, tilingGM):
        hccl = init_hccl(Hccl(), tilingGM, ops=["AllReduce"])
        handle = hccl.AllReduce[True](x, y, "4", FP32, hp.HcclReduceOp.HCCL_REDUCE_SUM)
        seen.append((handle, hccl.last_error))

    def main():
        hp.launch(kernel, torch.zeros(4), torch.zeros(4), make_tiling())
        return seen[0]

    seen: list = []
    handle, reason = hp.run(main, world_size=1, strict=False, timeout=RUN_TIMEOUT)[0]
    assert handle == -1
    assert reason.endswith("count must be a non-negative int (got '4')")


def test_long_lists_in_framework_messages_show_strings_quoted() -> None:
    """Before, a list of more than 16 values showed each with str: '1' as 1."""
    ones = ", ".join(["'1'"] * 8)
    assert listed(["1"] * 20) == f"[{ones}, ..., {ones}] (20 entries)"
    assert listed(list(range(20))).startswith("[0, 1, 2, 3, 4, 5, 6, 7, ..., 12, ")


@pytest.mark.parametrize(
    ("value", "on"), [("off", False), ("FALSE", False), ("On", True), ("", True)]
)
def test_the_gloo_settings_read_their_flags_as_every_flag_is_read(
    monkeypatch: pytest.MonkeyPatch, value: str, on: bool
) -> None:
    """Before, anything but 0/false/False/no was on: HCCL_PY_CHECK_TASKS=off turned the check on."""
    from hccl_py.backends.dist.settings import CARRY_ENV, CHECK_ENV, Settings

    monkeypatch.setenv(CHECK_ENV, value)
    monkeypatch.setenv(CARRY_ENV, value)
    settings = Settings.read(check_tasks=True, exact=True)
    assert (settings.check_tasks, settings.carry) == (on, on)
    monkeypatch.setenv(CHECK_ENV, "sometimes")
    with pytest.raises(ValueError, match="HCCL_PY_CHECK_TASKS must be 1 or 0 .* not 'sometimes'"):
        Settings.read(check_tasks=True, exact=True)


def test_a_gloo_core_the_os_has_no_thread_for_is_named_and_not_counted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The gloo and HCCL backends' cores are pool threads of the rank process: before, a
    refused one was a raw RuntimeError and stayed counted as running user code."""
    from hccl_py.server.blocking import Blocker
    from hccl_py.server.threads import CORE_THREADS

    blocker = Blocker(timeout=RUN_TIMEOUT)
    active = blocker.active
    monkeypatch.setattr(CORE_THREADS, "_idle", [])  # no idle thread to reuse: a new one starts
    _refuse_threads_after(monkeypatch, 0)
    with pytest.raises(hp.HcclRunnerStartError, match="for core rank0-AIV3 .* smaller block_dim"):
        blocker.spawn(lambda: None, "rank0-AIV3")
    assert blocker.active == active


@pytest.mark.parametrize(
    ("trace", "env", "error", "message"),
    [
        (5, {}, TypeError, "trace must be a file path (str or os.PathLike) or None, not int"),
        ("{folder}", {}, ValueError, "trace '{folder}' is a folder; give the path of a file"),
        (
            None,
            {"HCCL_PY_TRACE": "{folder}"},
            ValueError,
            "environment variable HCCL_PY_TRACE '{folder}'",
        ),
        (
            None,
            {"HCCL_PY_LAYOUT": "{folder}"},
            ValueError,
            "environment variable HCCL_PY_LAYOUT '{folder}'",
        ),
    ],
)
def test_output_paths_are_checked_before_any_rank_runs(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    trace: object,
    env: dict[str, str],
    error: type,
    message: str,
) -> None:
    """Before, the whole program ran, then the trace writer's raw TypeError or IsADirectoryError
    lost its results."""
    for name, value in env.items():
        monkeypatch.setenv(name, value.format(folder=tmp_path))
    ran: list[int] = []
    with pytest.raises(error) as info:
        hp.run(
            lambda: ran.append(hp.get_rank()),
            world_size=2,
            trace=trace.format(folder=tmp_path) if isinstance(trace, str) else trace,
        )
    assert str(info.value).startswith(message.format(folder=tmp_path))
    assert ran == []


@pytest.mark.parametrize(
    ("name", "value", "error", "message"),
    [
        ("HCCL_PY_REDUCE", "fast", ValueError, "HCCL_PY_REDUCE must be 'exact' or 'native'"),
        ("HCCL_PY_CARRY_FIRST_ROUND", "maybe", ValueError, "HCCL_PY_CARRY_FIRST_ROUND must be"),
        (
            "HCCL_PY_START_METHOD",
            "nosuch",
            hp.HcclUsageError,
            "HCCL_PY_START_METHOD must be one of forkserver, spawn, fork, not 'nosuch'",
        ),
    ],
)
def test_gloo_variables_are_read_before_the_ranks_start(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, error: type, message: str
) -> None:
    """Before, every rank process died reading it, and the run said only that rank 0 exited
    with code 1 before reporting an outcome (no process starts here: the error comes first)."""
    monkeypatch.setenv(name, value)
    with pytest.raises(error) as info:
        hp.run(hp.get_rank, world_size=2, backend="gloo", timeout=RUN_TIMEOUT)
    assert type(info.value) is error and message in str(info.value)


def test_under_a_launcher_the_start_method_is_not_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """A launcher (torchrun, msrun) starts the ranks: hccl_py never reads HCCL_PY_START_METHOD
    there (nor makes the temporary folder its check of the fork server's socket path makes)."""
    from hccl_py import runtime
    from hccl_py.backends.dist import settings

    monkeypatch.setenv("HCCL_PY_START_METHOD", "nosuch")
    monkeypatch.setattr(settings, "under_launcher", lambda: True)
    runtime.check_environment("gloo")
    monkeypatch.setattr(settings, "under_launcher", lambda: False)
    with pytest.raises(hp.HcclUsageError, match="HCCL_PY_START_METHOD must be one of"):
        runtime.check_environment("gloo")


_INTERRUPTED = """
import _thread, threading, time, torch
import hccl_py as hp

def main():
    t = torch.ones(4)
    for i in range(200000):
        if i == 20 and hp.get_rank() == 0:
            _thread.interrupt_main()  # Ctrl-C while every rank loops in all_reduce
        hp.all_reduce(t)

try:
    hp.run(main, world_size=4, timeout=60)
except KeyboardInterrupt:
    print("interrupted")
ranks = [th for th in threading.enumerate() if th.name.startswith("rank")]
for th in ranks:
    th.join(30)
print("rank threads left:", sum(th.is_alive() for th in ranks))
"""


@pytest.mark.parametrize("runners", ["threads", "greenlets"])
def test_ctrl_c_stops_every_rank_of_the_emulator(runners: str) -> None:
    """Before, Ctrl-C left every rank blocked in its collective: hp.run's clean-up waited 5 s
    for each rank's thread in turn (20 s at 4 ranks), and the threads stayed behind. With
    greenlet runners, until 2026-11-30 hp.run raised at once and the interpreter could exit
    while the runners' thread still ran a rank: "terminate called without an active
    exception", exit 134 (about half the time on a loaded machine)."""
    import os
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", _INTERRUPTED],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "HCCL_PY_EMU_RUNNERS": runners},
    )
    assert done.stdout.splitlines() == ["interrupted", "rank threads left: 0"], done.stderr
    assert done.returncode == 0 and "terminate called" not in done.stderr, done.stderr


@pytest.mark.parametrize("where", ["argument", "environment"])
def test_an_unknown_backend_is_the_runtime_error_the_spec_names(
    where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """framework-ops.md: "RuntimeError when the backend or initialisation is invalid"; it is
    also the ValueError hp.run gives for its other bad arguments (before, only that)."""
    options = {"backend": "bogus"} if where == "argument" else {}
    if where == "environment":
        monkeypatch.setenv("HCCL_PY_BACKEND", "bogus")
    for kind in (RuntimeError, ValueError):
        with pytest.raises(kind, match="unknown backend 'bogus'; choose one of"):
            hp.run(lambda: hp.barrier(), world_size=2, **options)
