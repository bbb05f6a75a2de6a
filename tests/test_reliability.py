"""Where the emulator could disagree with a real multi-process run, it says so (issue 12).

Shared memory between emulated ranks, async framework handles never waited,
poison with in-place views, dtypes that plain pickle cannot carry between
processes, framework op names in reports, and scripts that multiprocessing
would fail on with an unhelpful traceback.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from cases import cc_offset, init_hccl, make_tiling
from hccl_py.backends.emu.scheduler import THREAD_NAME

import hccl_py as hp
from hccl_py import Hccl
from hccl_py.launcher import wire

#: Each test is a unit of its own under xdist (conftest.py): none shares a module's jobs.
pytestmark = pytest.mark.spread

F32 = hp.HcclDataType.HCCL_DATA_TYPE_FP32
SUM = hp.HcclReduceOp.HCCL_REDUCE_SUM
TIMEOUT = 20.0
N = 4  # float32 elements each rank sends

#: One receive tensor for every emulated rank: the mistake the emulator must report.
SHARED_Y = torch.zeros(2 * N)
#: One send tensor for every rank, only read: legal everywhere.
SHARED_X = torch.arange(float(N))


def gather_kernel(xGM: Any, yGM: Any, tilingGM: Any) -> None:
    hccl = init_hccl(Hccl(), tilingGM)
    hccl.Wait(hccl.AllGather[True](xGM, yGM, N, F32))
    hccl.Finalize()


def rank_values() -> torch.Tensor:
    return torch.arange(float(N)) + 10 * hp.get_rank()


def gather_into(y: torch.Tensor | None = None) -> list[float]:
    y = SHARED_Y if y is None else y
    hp.launch(gather_kernel, rank_values(), y, make_tiling())
    return y.tolist()


def gather_shared_send() -> list[float]:
    y = torch.zeros(2 * N)
    hp.launch(gather_kernel, SHARED_X, y, make_tiling())
    return y.tolist()


GATHERED = list(range(N)) + [10.0 + i for i in range(N)]


# ------------------------------------------------------------------ 1. shared memory
def test_module_level_receive_buffer_is_reported() -> None:
    with pytest.raises(hp.WorldError) as info:
        hp.run(gather_into, world_size=2, backend="emu", timeout=TIMEOUT)
    roots = info.value.root_causes
    assert roots and all(isinstance(e, hp.HcclSharedMemoryError) for e in roots.values())
    text = str(info.value)
    assert "rank 0's receive buffer (yGM) shares memory with rank 1's receive buffer (yGM)" in text
    assert "op AllGather" in text


#: One numpy array under both ranks' receive tensors: each rank's is its own torch storage
#: (``torch.from_numpy`` of its own view), but elements N..2N-1 are both ranks' memory.
ONE_ARRAY = np.zeros(3 * N, dtype=np.float32)


def overlapping_views_of_one_array() -> torch.Tensor:
    """Rank r's ``2 * N`` elements of :data:`ONE_ARRAY` from element ``r * N`` on."""
    r = hp.get_rank()
    return torch.from_numpy(ONE_ARRAY[r * N : r * N + 2 * N])


def test_receive_buffers_of_two_storages_that_share_memory_are_reported() -> None:
    """Sharing is judged by address, not by storage: two storages may be one memory."""
    ONE_ARRAY[:] = 0
    with pytest.raises(hp.WorldError) as info:
        hp.run(lambda: gather_into(overlapping_views_of_one_array()), world_size=2,
               backend="emu", timeout=TIMEOUT)  # fmt: skip
    roots = info.value.root_causes
    assert sorted(roots) == [0, 1], info.value
    assert all(isinstance(e, hp.HcclSharedMemoryError) for e in roots.values())
    assert "rank 0's receive buffer (yGM) shares memory with rank 1's receive buffer (yGM)" in str(
        info.value
    )
    assert not ONE_ARRAY.any(), "a refused task wrote its receive buffer"


def framework_into_overlapping_views(op: str, async_op: bool) -> None:
    out = overlapping_views_of_one_array()
    if op == "all_reduce":
        out.fill_(hp.get_rank() + 1.0)
        work = hp.all_reduce(out, async_op=async_op)
    else:
        work = hp.all_gather_into_tensor(out, torch.full((N,), hp.get_rank() + 1.0),
                                         async_op=async_op)  # fmt: skip
    if work is not None:
        work.wait()


@pytest.mark.parametrize("async_op", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("op", ["all_reduce", "all_gather_into_tensor"])
def test_framework_outputs_of_two_storages_that_share_memory_are_reported(
    op: str, async_op: bool
) -> None:
    """Carried in the exchange or run as a task, the clash is reported on every rank (before,
    an async all_reduce returned [3, 3, 3, 3, 4, 4, 4, 4] on rank 1 without a word)."""
    ONE_ARRAY[:] = 0
    with pytest.raises(hp.WorldError) as info:
        hp.run(framework_into_overlapping_views, world_size=2, args=(op, async_op),
               timeout=TIMEOUT)  # fmt: skip
    roots = info.value.root_causes
    assert sorted(roots) == [0, 1], info.value
    assert all(isinstance(e, hp.HcclSharedMemoryError) for e in roots.values()), info.value


@pytest.mark.parametrize("backend", ["emu", "gloo"])
def test_args_give_every_rank_its_own_tensor(backend: str) -> None:
    y = torch.zeros(2 * N)
    results = hp.run(gather_into, world_size=2, backend=backend, args=(y,), timeout=TIMEOUT)
    assert results == [GATHERED, GATHERED]
    assert torch.equal(y, torch.zeros(2 * N)), "the caller's tensor changed"


def test_read_only_sharing_stays_silent() -> None:
    results = hp.run(gather_shared_send, world_size=2, backend="emu", timeout=TIMEOUT)
    assert results.warnings == {}
    assert results == [[0.0, 1, 2, 3] * 2] * 2


def test_objects_in_args_other_than_tensors_stay_shared() -> None:
    box: list[int] = []

    def main(shared: list[int]) -> bool:
        shared.append(hp.get_rank())
        return shared is box

    assert hp.run(main, world_size=2, backend="emu", args=(box,)) == [True, True]
    assert sorted(box) == [0, 1]


# ------------------------------------------------------------------ 3. poison and in-place views
def in_place_views(start: int) -> list[float]:
    """AllGather whose send tensor is a view into the receive tensor, ``start`` elements in."""
    r = hp.get_rank()
    y = torch.zeros(2 * N)
    y[r * N : (r + 1) * N] = rank_values()
    x = y[start + r * N : start + r * N + N] if start else y[r * N : (r + 1) * N]
    hp.launch(gather_kernel, x, y, make_tiling())
    return y.tolist()


def in_place_all_reduce() -> list[float]:
    base = torch.zeros(3 * N)
    base[N : 2 * N] = rank_values()
    x = base[N : 2 * N]
    y = base[N : 2 * N]  # another view of the same bytes: AllReduce in place

    def kernel(xGM: Any, yGM: Any, tilingGM: Any) -> None:
        hccl = init_hccl(Hccl(), tilingGM)
        hccl.Wait(hccl.AllReduce[True](xGM, yGM, N, F32, SUM))
        hccl.Finalize()

    hp.launch(kernel, x, y, make_tiling())
    return base.tolist()


@pytest.mark.parametrize(("schedule", "poison"), [("eager", False), ("late", True)])
def test_in_place_views_give_the_same_numbers_with_poison(schedule: str, poison: bool) -> None:
    kw = {"world_size": 2, "backend": "emu", "schedule": schedule, "poison": poison}
    assert hp.run(in_place_views, args=(0,), timeout=TIMEOUT, **kw) == [GATHERED] * 2
    summed = [0.0] * N + [10.0 + 2 * i for i in range(N)] + [0.0] * N
    assert hp.run(in_place_all_reduce, timeout=TIMEOUT, **kw) == [summed] * 2


def test_partly_overlapping_views_are_reported() -> None:
    with pytest.raises(hp.WorldError) as info:
        hp.run(in_place_views, world_size=2, backend="emu", args=(2,), timeout=TIMEOUT)
    overlap = [e for e in info.value.root_causes.values() if isinstance(e, hp.HcclOverlapError)]
    assert overlap, str(info.value)
    assert "send range of round 0 block 0 (bytes [8, 24)) overlaps receive range" in str(overlap[0])


# ------------------------------------------------------------------ 2. unwaited async handles
def never_waited(name: str) -> None:
    x = torch.ones(N)
    if name == "all_reduce":
        hp.all_reduce(x, async_op=True)
    else:
        hp.alltoall_single(torch.zeros(N), x, sync_op=False)


@pytest.mark.parametrize(
    ("backend", "name"), [("emu", "all_reduce"), ("emu", "alltoall_single"), ("gloo", "all_reduce")]
)
def test_async_handle_never_waited_is_reported(backend: str, name: str) -> None:
    with pytest.raises(hp.WorldError) as info:
        hp.run(never_waited, world_size=2, backend=backend, args=(name,), timeout=TIMEOUT)
    roots = info.value.root_causes
    assert roots, str(info.value)  # on the emulator the first rank to return stops the other
    for rank, error in roots.items():
        assert isinstance(error, hp.HcclUnfinishedError)
        assert error.rank == rank
        assert (
            f"1 asynchronous collective(s) never waited: {name} started at test_reliability.py:"
            in str(error)
        )


# ------------------------------------------------------------------ 10. framework names
def lone_all_reduce() -> None:
    if hp.get_rank() == 0:
        hp.all_reduce(torch.ones(N))


def test_deadlock_report_names_the_framework_call() -> None:
    with pytest.raises(hp.WorldError) as info:
        hp.run(lone_all_reduce, world_size=2, backend="emu", timeout=TIMEOUT)
    text = str(info.value)
    assert isinstance(info.value.root_causes[0], hp.HcclDeadlockError)
    assert (
        "rank 0 waits in all_reduce (framework collective #0 of hccl_world_group) for ranks [1], "
        "which have not called it" in text
    )


# ------------------------------------------------------------------ 5. every dtype between processes
@pytest.mark.parametrize(
    "dtype",
    [
        torch.float8_e4m3fn,
        torch.float8_e5m2,
        torch.float8_e8m0fnu,
        torch.uint16,
        torch.uint32,
        torch.uint64,
        torch.complex32,
        torch.bfloat16,
        torch.bool,
        torch.int8,
    ],
)
# torch warns that complex32 is experimental whenever one is made: this test is about them
@pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental:UserWarning")
def test_wire_round_trips_every_dtype(dtype: torch.dtype) -> None:
    raw = torch.arange(24, dtype=torch.uint8).view(2, 3, 4)
    size = dtype.itemsize
    values = raw.reshape(-1)[: 24 - 24 % size].view(dtype).reshape(-1)
    strided = values[::2]  # not contiguous
    scalar = values[0].clone()  # 0-dim
    back = wire.loads(wire.dumps({"v": values, "s": strided, "0": scalar}))
    for key, want in (("v", values), ("s", strided), ("0", scalar)):
        got = back[key]
        assert got.dtype == dtype and got.shape == want.shape
        assert bytes(got.contiguous().reshape(-1).view(torch.uint8).numpy()) == bytes(
            want.contiguous().reshape(-1).view(torch.uint8).numpy()
        )


def gather_fp8(x: torch.Tensor) -> torch.Tensor:
    out = torch.zeros(2 * x.numel(), dtype=x.dtype)
    hp.all_gather_into_tensor(out, x)
    return out


def test_fp8_travels_to_and_from_gloo_ranks() -> None:
    x = torch.tensor([0.5, 1.0, -2.0, 448.0]).to(torch.float8_e4m3fn)
    results = hp.run(gather_fp8, world_size=2, backend="gloo", args=(x,), timeout=TIMEOUT)
    want = np.tile(x.float().numpy(), 2)
    for out in results:
        assert out.dtype == torch.float8_e4m3fn
        np.testing.assert_array_equal(out.float().numpy(), want)


# ------------------------------------------------------------------ 12. scripts
SCRIPT = """
import hccl_py as hp

def main():
    return hp.get_rank()

{call}
"""


def _run_script(tmp_path: Path, name: str, call: str) -> subprocess.CompletedProcess:
    path = tmp_path / name
    path.write_text(textwrap.dedent(SCRIPT.format(call=call)))
    return subprocess.run(
        [sys.executable, name], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )


def test_script_without_main_guard_is_told_what_to_change(tmp_path: Path) -> None:
    out = _run_script(tmp_path, "job.py", 'print(hp.run(main, world_size=2, backend="gloo"))')
    assert out.returncode != 0
    assert (
        "the hp.run call at job.py:7 is not inside an 'if __name__ == \"__main__\":'" in out.stderr
    )
    assert "bootstrapping phase" not in out.stderr


def test_guarded_script_runs(tmp_path: Path) -> None:
    call = 'if __name__ == "__main__":\n    print(hp.run(main, world_size=2, backend="gloo"))'
    out = _run_script(tmp_path, "job.py", call)
    assert out.returncode == 0, out.stderr
    # torch 2.9's gloo prints "[Gloo] Rank 0 is connected to 1 peer ranks ..." on stdout itself
    printed = out.stdout if "[Gloo]" not in out.stdout else out.stdout.splitlines()[-1]
    assert printed.strip() == "[0, 1]"


def test_script_named_like_a_standard_module(tmp_path: Path) -> None:
    call = 'if __name__ == "__main__":\n    print(hp.run(main, world_size=2, backend="emu"))'
    out = _run_script(tmp_path, "queue.py", call)
    assert out.returncode != 0
    assert "your script queue.py has the name of Python's standard module 'queue'" in out.stderr
    assert "Rename the script (e.g. my_queue.py)" in out.stderr


def test_standard_module_run_as_main_is_not_a_shadow() -> None:
    """``python -m timeit`` runs the standard library's own file: nothing is shadowed."""
    out = subprocess.run(
        [sys.executable, "-m", "timeit", "-n", "1", "-r", "1", "-s", "import hccl_py", "pass"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "1 loop" in out.stdout


# ------------------------------------------------------------------ 6. nothing outlives its job
SLEEPER = """
import os
import subprocess
import sys
import time
from pathlib import Path

import hccl_py as hp


def main():
    child = subprocess.Popen(["sleep", "120"])  # started by main and left running
    pids = f"{os.getpid()} {os.getppid()} {child.pid}"
    Path(sys.argv[1], f"{hp.get_rank()}.pids").write_text(pids)
    time.sleep(120)


if __name__ == "__main__":
    hp.run(main, world_size=2, backend="gloo", timeout=300)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with contextlib.suppress(OSError), open(f"/proc/{pid}/stat") as f:
        return f.read().split()[2] != "Z"  # a zombie has ended
    return True


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
@pytest.mark.parametrize("how", ["hp.run", "hp.run spawn", "runner"])
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_killing_the_parent_leaves_no_process(
    tmp_path: Path, short_tmp: Path, how: str, sig: int
) -> None:
    """Neither a process nor a temporary folder outlives a killed run (store, fork server socket,
    what a rank's function started: before 2026-11-30 a rank whose hp.run caller was killed
    exited and left that running)."""
    _kill_the_run(tmp_path, short_tmp, how, lambda parent: parent.send_signal(sig))


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
@pytest.mark.parametrize("how", ["hp.run", "runner"])
def test_sigterm_to_the_whole_process_group_leaves_nothing(
    tmp_path: Path, short_tmp: Path, how: str
) -> None:
    """``timeout N python script.py`` sends SIGTERM to the parent and its ranks at once: the
    parent still stops the ranks and removes its store and stack folder and the fork server's
    socket folder (before, hp.run's parent died at once and left them), and exits with 143."""
    code = _kill_the_run(
        tmp_path, short_tmp, how, lambda parent: os.killpg(parent.pid, signal.SIGTERM)
    )
    assert code in (128 + signal.SIGTERM, -signal.SIGTERM, 1), code


def _kill_the_run(
    tmp_path: Path, short_tmp: Path, how: str, kill: Callable[[subprocess.Popen], None]
) -> int | None:
    """Start :data:`SLEEPER` (``how``), ``kill`` its parent once both ranks run, and check that
    no process and nothing in its temporary folder outlives it; the parent's exit code."""
    script = tmp_path / "sleeper.py"
    script.write_text(SLEEPER)
    cmd = [sys.executable, str(script), str(tmp_path)]
    if how == "runner":
        cmd = [sys.executable, "-m", "hccl_py", "run", "-n", "2", "--backend", "gloo", *cmd[1:]]
    temp = short_tmp
    parent = subprocess.Popen(
        cmd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "TMPDIR": str(temp), "HCCL_PY_START_METHOD": how.partition(" ")[2]},
        start_new_session=True,  # a process group of its own, as under timeout(1)
    )
    try:
        deadline = time.monotonic() + 60
        while len(list(tmp_path.glob("*.pids"))) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        pids = {int(p) for f in tmp_path.glob("*.pids") for p in f.read_text().split()}
        assert len(pids) >= 2, "the ranks did not start"
        pids.discard(parent.pid)
        kill(parent)
        code = parent.wait(30)
        deadline = time.monotonic() + HANG_BOUND_S  # they end soon; a loaded machine is slower
        while any(map(_alive, pids)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not [p for p in pids if _alive(p)], "a rank process or fork server outlived its job"
        left = sorted(p.name for p in temp.iterdir())
        assert not left, f"the killed run left {left} in its temporary folder"
        return code
    finally:
        parent.kill()
        parent.wait()


# ------------------------------------------------------------------ 7, 8. timeouts and hang reports
def spin_forever() -> None:
    if hp.get_rank() == 0:
        while True:
            pass


def lone_waiter() -> None:
    """Rank 0 gathers, rank 1 computes forever: rank 1, holding every other rank up, times out."""
    if hp.get_rank() == 1:
        while True:
            pass
    gather_into(torch.zeros(2 * N))


def skips_its_part() -> None:
    if hp.get_rank() == 0:
        gather_into(torch.zeros(2 * N))


#: A run that must end on its own ends well within this (seconds); it only turns a hang into a
#: failure and never measures speed: a loaded machine makes the run slower, not wrong.
HANG_BOUND_S = 60.0
#: Runs of one hang scenario, whose reports must all be the same text (a lone waiter's run spins a
#: core for its whole timeout, so each run costs that much CPU).
HANG_REPEATS = 8


def _timed_failure(fn: Any, timeout: float) -> tuple[hp.WorldError, float]:
    start = time.monotonic()
    with pytest.raises(hp.WorldError) as info:
        hp.run(fn, world_size=2, backend="emu", timeout=timeout)
    return info.value, time.monotonic() - start


def test_rank_stuck_in_its_own_code_ends_the_run() -> None:
    err, took = _timed_failure(spin_forever, 0.5)
    assert took < HANG_BOUND_S
    (cause,) = err.root_causes.values()
    assert isinstance(cause, hp.HcclTimeoutError) and cause.rank == 0
    text = str(cause)
    assert "rank 0 ran its own code for 0.5 s (the run's timeout)" in text
    assert "test_reliability.py" in text and "in spin_forever" in text
    time.sleep(0.2)
    assert not [t for t in threading.enumerate() if t.name == THREAD_NAME], "a rank still runs"


def test_ranks_whose_turn_comes_after_the_run_failed_do_not_start() -> None:
    """Until stop 64 the ranks after a rank stuck in its own code were started into theirs once
    it stopped (a rank sleeping past the timeout made a 4-rank run take four sleeps), and each
    was reported as "still running its own code" after a failure that came before it ran."""
    started: list[int] = []

    def body() -> None:
        started.append(hp.get_rank())
        spin_forever()

    with pytest.raises(hp.WorldError) as info:
        hp.run(body, world_size=3, backend="emu", timeout=0.5)
    assert started == [0]
    assert sorted(info.value.failures) == [0], info.value
    assert isinstance(info.value.failures[0], hp.HcclTimeoutError)


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), "10", True, [1]])
def test_bad_timeouts_are_refused_up_front(bad: Any) -> None:
    with pytest.raises(ValueError, match="timeout must be a positive number of seconds"):
        hp.run(spin_forever, world_size=2, backend="emu", timeout=bad)


@pytest.mark.parametrize("bad", ["0", "-1", "x", "nan"])
def test_a_bad_hccl_py_timeout_is_refused_up_front(
    monkeypatch: pytest.MonkeyPatch, bad: str
) -> None:
    """Before, "x" was float()'s own error and 0 or -1 a watchdog that stopped ranks before
    they ran (a run hung in a quarter of tries)."""
    monkeypatch.setenv("HCCL_PY_TIMEOUT", bad)
    with pytest.raises(ValueError, match="HCCL_PY_TIMEOUT must be a positive number of seconds"):
        hp.run(spin_forever, world_size=2, backend="emu")


@pytest.mark.parametrize(
    "call, words",
    [
        (lambda: hp.run(5, world_size=2), "hp.run needs the function every rank runs, not 5"),
        (
            lambda: hp.run(spin_forever, world_size=2, args=5),
            "args must be a tuple of the function's arguments, not 5",
        ),
        (
            lambda: hp.run(spin_forever, world_size=2, args="ab"),
            "args must be a tuple of the function's arguments, not 'ab'",
        ),
        (
            lambda: hp.run(lambda: hp.launch(5, torch.zeros(1)), world_size=1),
            "hp.launch needs the kernel function, not 5",
        ),
    ],
    ids=["fn", "args-int", "args-str", "kernel"],
)
def test_what_is_not_a_function_or_arguments_is_named(call: Any, words: str) -> None:
    """Before: a raw "'int' object is not iterable" from hp.run, "'ab'" split into two
    arguments, and every rank's "'int' object is not callable" from deep inside."""
    with pytest.raises((TypeError, hp.WorldError)) as info:
        call()
    assert words in str(info.value)


@pytest.mark.parametrize("bad, words", [("abc", "must be an integer"), ("0", "1..65536")])
def test_a_bad_hccl_py_world_size_is_named(
    monkeypatch: pytest.MonkeyPatch, bad: str, words: str
) -> None:
    monkeypatch.setenv("HCCL_PY_WORLD_SIZE", bad)
    with pytest.raises(ValueError, match="HCCL_PY_WORLD_SIZE") as info:
        hp.run(spin_forever)
    assert words in str(info.value)


def test_infinite_timeout_is_supported() -> None:
    assert (
        hp.run(
            gather_into,
            world_size=2,
            backend="emu",
            args=(torch.zeros(2 * N),),
            timeout=float("inf"),
        )
        == [GATHERED] * 2
    )


@pytest.mark.parametrize(
    ("scenario", "rank", "cause", "words"),
    [
        (
            skips_its_part,
            0,
            hp.HcclDeadlockError,
            "ranks [1] have not prepared this task (ranks [1] returned",
        ),
        (
            lone_waiter,
            1,
            hp.HcclTimeoutError,
            "rank 1 ran its own code for 0.3 s (the run's timeout)",
        ),
    ],
)
def test_hang_reports_are_the_same_every_time(
    scenario: Any, rank: int, cause: type, words: str
) -> None:
    reports, durations = set(), []
    for _ in range(HANG_REPEATS):
        err, took = _timed_failure(scenario, 0.3)
        durations.append(took)
        roots = err.root_causes
        assert list(roots) == [rank] and isinstance(roots[rank], cause), str(err)
        text = str(err)
        assert words in text
        assert f"rank {rank} failed: " not in str(err.failures.get(rank, ""))
        lines = [line for line in text.splitlines() if line.strip()]
        assert len(lines) == len(set(lines)), f"a line repeats:\n{text}"
        reports.add(text)
    assert len(reports) == 1, "\n-----\n".join(sorted(reports))
    assert max(durations) < HANG_BOUND_S, durations


def test_gloo_rank_stuck_in_its_own_code_ends_the_run() -> None:
    start = time.monotonic()
    with pytest.raises(hp.WorldError) as info:
        hp.run(spin_forever, world_size=2, backend="gloo", timeout=2.0)
    assert time.monotonic() - start < HANG_BOUND_S  # it ends: the stack dump, then the kill
    text = str(info.value.failures[0])
    assert "rank 0 was still running 2 s after rank 1 returned (the run's timeout)" in text
    assert "test_reliability.py" in text and "in spin_forever" in text


# ------------------------------------------------------------------ 11. garbage arguments
GARBAGE = [None, float("inf"), float("nan"), 2**70, -5, "4", np.int64(2), np.float32(4.0), 3.5,
           True, [1], object()]  # fmt: skip
#: Each call with its regular arguments; one at a time is replaced by garbage.
PREPARES = {
    "AllGather": ("x", "y", 4, F32, 0, 1),
    "AllReduce": ("x", "y", 4, F32, SUM, 1),
    "ReduceScatter": ("x", "y", 2, F32, SUM, 0, 1),
    "AlltoAll": ("x", "y", 2, F32, 0, 1),
    "Wait": (0,),
    "Commit": (0,),
    "Query": (0,),
    "InterHcclGroupSync": (1, 0),
    "SetCcTilingV2": (cc_offset("AllGather"),),
    "AlltoAllV": ("x", [2], [0], F32, "y", [2], [0], F32, 1),
    "Finalize": (),
    "GetWindowsInAddr": (0,),
    "GetWindowsOutAddr": (0,),
}


def garbage_findings(
    calls: dict[str, tuple],
    make: Callable[[], Hccl],
    resolve: Callable[[Hccl, Any], Any],
    must_refuse: bool = False,
) -> list[str]:
    """Call each of ``calls`` with one argument at a time replaced by each GARBAGE value.

    ``make`` gives a fresh initialised client, ``resolve(hccl, a)`` a regular
    argument's value. What a call says (its HcclError or ``last_error``) must be
    a specific report: no other exception, no "None" for a value that is not
    None, no "not a int"; with ``must_refuse`` every garbage value must be
    refused or warned about. Returns the calls that broke a rule.
    """
    bad = []
    for name, regular in calls.items():
        for i, g in ((i, g) for i in range(len(regular)) for g in GARBAGE):
            hccl = make()
            args = [resolve(hccl, a) for a in regular]
            args[i] = g
            call = getattr(hccl, name)
            raw = False
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", hp.HcclWarning)
                try:
                    (call[True] if name in hp.ops.BY_NAME else call)(*args)
                    said = hccl.last_error or ""
                except hp.HcclError as e:
                    said = str(e)
                except Exception as e:  # noqa: BLE001 - the finding
                    raw, said = True, f"{type(e).__name__}: {e}"
            hccl.Finalize()
            vague = (g is not None and "None" in said) or "not a int" in said
            if raw or vague or (must_refuse and not said):
                bad.append(f"{name} arg {i} = {g!r}: {said or 'accepted'}")
    return bad


def garbage_kernel(xGM: Any, yGM: Any, tilingGM: Any, bad: list) -> None:
    buffers = {"x": xGM, "y": yGM}
    bad += garbage_findings(
        PREPARES,
        lambda: init_hccl(Hccl(), tilingGM),
        lambda hccl, a: buffers.get(a, a) if isinstance(a, str) else a,
    )


def launch_garbage() -> list[str]:
    bad: list[str] = []
    hp.launch(garbage_kernel, torch.ones(8), torch.zeros(16), make_tiling(), bad)
    for g in GARBAGE:
        try:
            hp.launch(idle_kernel, block_dim=g)
            if not isinstance(g, np.int64):
                bad.append(f"block_dim={g!r} accepted")
        except ValueError as e:
            assert "block_dim must be an int in 1..65535" in str(e)
    return bad


def idle_kernel() -> None:
    """A kernel with nothing to do."""


def test_garbage_arguments_reach_the_api_validation() -> None:
    (bad,) = hp.run(launch_garbage, world_size=1, strict=False, platform="A3", timeout=TIMEOUT)
    assert bad == []


@pytest.mark.parametrize("g", GARBAGE)
def test_garbage_server_configs_are_refused_clearly(g: Any) -> None:
    with pytest.raises(ValueError, match="server config must be an HcclServerConfig or a"):
        Hccl[hp.HCCL_SERVER_TYPE_AICPU, g]()
    for make, legal in (
        (lambda: hp.HcclServerConfig(hp.CoreType.ON_AIV, g), {2, -5}),  # an int64 blockId
        (lambda: hp.HcclServerConfig(g, 0), {2}),
    ):
        if isinstance(g, (int, np.integer)) and not isinstance(g, bool) and g in legal:
            assert make().blockId in (0, g)
            continue
        with pytest.raises(ValueError, match="HcclServerConfig needs a CoreType"):
            make()


def _host_findings(calls: dict[str, Callable[[Any], Any]]) -> list[str]:
    """Each call with each GARBAGE value: it may succeed or raise a ValueError, nothing else."""
    bad = []
    for name, call in calls.items():
        for g in GARBAGE:
            try:
                call(g)
            except ValueError as e:
                if "None" in str(e) and g is not None:
                    bad.append(f"{name}({g!r}): vague: {e}")
            except Exception as e:  # noqa: BLE001 - the finding
                bad.append(f"{name}({g!r}): {type(e).__name__}: {e}")
    return bad


def host_garbage() -> list[str]:
    """Arguments of the host-side calls inside a rank (issue 27 item 13)."""
    return _host_findings(
        {
            "new_group": hp.new_group,
            "launch(groups=)": lambda g: hp.launch(idle_kernel, groups=g),
            "launch(kernel_type=)": lambda g: hp.launch(idle_kernel, kernel_type=g),
            "GetHcclContext": lambda g: hp.launch(lambda: hp.GetHcclContext(g)),
        }
    )


def test_garbage_host_arguments_get_a_value_error() -> None:
    bad = _host_findings(
        {
            "run(world_size=)": lambda g: hp.run(idle_kernel, world_size=g, timeout=TIMEOUT),
            "run(warnings_as_errors=)": lambda g: hp.run(
                idle_kernel, world_size=1, warnings_as_errors=g, timeout=TIMEOUT
            ),
        }
    )
    (inside,) = hp.run(host_garbage, world_size=1, timeout=TIMEOUT)
    assert bad + inside == []
    with pytest.raises(ValueError, match=r"\(unknown: 'overlapp'\)"):
        hp.run(idle_kernel, world_size=1, warnings_as_errors={"overlapp"})
    one = hp.run(lambda: hp.get_rank(), world_size=1, warnings_as_errors="overlap")
    assert one == [0], "one kind given as a string is that kind, not its letters"


# ------------------------------------------------------------------ 9. one traceback per job
FAILING_JOB = """
import torch

import hccl_py as hp


def main():
    if hp.get_rank() == 1:
        {}["missing"]
    hp.all_reduce(torch.ones(2))


if __name__ == "__main__":
    hp.run(main)
"""


def test_runner_prints_the_root_traceback_once(tmp_path: Path) -> None:
    (tmp_path / "job.py").write_text(FAILING_JOB)
    cmd = [sys.executable, "-m", "hccl_py", "run", "-n", "4", "--backend", "gloo", "job.py"]
    out = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    text = out.stdout + out.stderr
    assert out.returncode == 1
    assert text.count("Traceback (most recent call last)") == 1, text
    assert "hccl_py: 4 of 4 ranks failed; first failure: rank 1: KeyError: 'missing'" in text
    for rank in (0, 2, 3):
        assert f"rank {rank} (this process): HcclPeerError" in text


def test_a_live_process_on_this_host_is_never_judged_by_its_heartbeat(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Liveness on an overloaded machine: a rank whose process runs on this host is alive,
    however long its heartbeat stands still; only a rank on another host is judged by it."""
    import socket

    import torch.distributed as dist

    from hccl_py.launcher import liveness
    from hccl_py.launcher import store as kv

    monkeypatch.setattr(liveness, "STALE_S", 0.0)
    store = dist.HashStore()
    store.set(kv.pid_key(0), f"{socket.gethostname()}|{os.getpid()}")
    store.set(kv.pid_key(1), "another-host|4242")
    peers = liveness.Peers(store)
    for _ in range(2):  # the second look sees both heartbeats unchanged
        here, remote = peers.gone(0), peers.gone(1)
        time.sleep(0.01)
    assert here is None
    assert remote is not None and "stopped responding" in remote


def test_a_rank_on_another_host_lives_while_its_runner_writes_its_host_heartbeat(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A rank of another host that held the interpreter in one long C call (its heartbeat
    thread starved) was reported "stopped responding for 10 s (killed?)" while it ran: its
    host's runner now writes a heartbeat of its own while the rank's process runs."""
    import torch.distributed as dist

    from hccl_py.launcher import liveness, supervise
    from hccl_py.launcher import store as kv

    monkeypatch.setattr(liveness, "STALE_S", -1.0)  # any look without a change: gone
    store = dist.HashStore()
    for rank in (0, 1):
        store.set(kv.pid_key(rank), f"another-host|{4242 + rank}")
    running = supervise.Child(0, None, session=False)
    ended = supervise.Child(1, None, session=False)
    peers = liveness.Peers(store)
    for _ in range(2):  # rank 0's own heartbeat never moves; its runner's does
        supervise.beat([running, ended], {1: 0}, store)
        busy, exited = peers.gone(0), peers.gone(1)
    assert busy is None
    assert exited is not None and "stopped responding" in exited
    assert not store.check([kv.host_heartbeat_key(1)]), "no heartbeat for a process that ended"


def test_a_forged_host_heartbeat_leaves_the_runner_store_connection_open() -> None:
    """The runner writes host heartbeats with ``set``: an ``add`` to a key that another
    process set to something other than a number makes torch close the connection, which
    the runner needs to report a dead rank."""
    import torch.distributed as dist

    from hccl_py.launcher import store as kv
    from hccl_py.launcher import supervise

    server = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    client = kv.connect("127.0.0.1", server.port, is_master=False, timeout=5.0)
    server.set(kv.host_heartbeat_key(0), b"not a number")
    # a set is not answered: read it back on the same connection, so that the store took it
    # before the runner's (from another connection) and not after
    assert server.get(kv.host_heartbeat_key(0)) == b"not a number"
    supervise.beat([supervise.Child(0, None, session=False)], {}, client)
    assert client.get(kv.host_heartbeat_key(0)).isdigit()
    client.set("still", b"open")


def test_a_stack_folder_that_cannot_take_the_file_leaves_the_rank_running(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """HCCL_PY_STACK_DIR (set by the runner and hp.run for their ranks) naming a missing
    folder ended every gloo rank with a FileNotFoundError; now only the stacks are missing."""
    from hccl_py.launcher import liveness

    registered = []
    monkeypatch.setattr(liveness.faulthandler, "register", lambda *a, **k: registered.append(a))
    monkeypatch.setattr(liveness, "_stack_files", [])
    monkeypatch.setenv(liveness.STACKS_ENV, str(tmp_path / "missing"))
    liveness.dump_stacks_on_request(0)
    assert (liveness._stack_files, registered) == ([], [])
    monkeypatch.setenv(liveness.STACKS_ENV, str(tmp_path))
    liveness.dump_stacks_on_request(0)
    assert (tmp_path / "stack-0.txt").exists() and len(registered) == 1
    liveness._stack_files.pop().close()


# ------------------------------------------------------------------ nothing made before the ranks start
def test_choosing_the_start_method_makes_no_folder(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """hp.run and the runner read the start method before anything that unwinds on SIGTERM
    runs: it must not make multiprocessing's pymp-* folder, which a kill then would leave."""
    from multiprocessing import process as mp_process

    from hccl_py.launcher import forkserver

    config = {k: v for k, v in mp_process.current_process()._config.items() if k != "tempdir"}
    monkeypatch.setattr(mp_process.current_process(), "_config", config)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.delenv(forkserver.START_METHOD_ENV, raising=False)
    assert forkserver.start_method() == "forkserver"
    assert os.listdir(tmp_path) == [] and "tempdir" not in config
    assert forkserver.socket_folder() == str(tmp_path / "pymp-XXXXXXXX")


def test_sigterm_while_the_runner_starts_unwinds(monkeypatch: pytest.MonkeyPatch) -> None:
    """SIGTERM as the runner starts its fork server (before any rank) stops the run as one
    during it does (exit 143, nothing started left): it used to end the runner at once,
    leaving the fork server's folder to nobody."""
    from hccl_py.launcher import script as runner

    assert threading.current_thread() is threading.main_thread()

    def terminated_here(opts: object) -> None:
        signal.getsignal(signal.SIGTERM)(signal.SIGTERM, None)

    monkeypatch.setattr(runner, "_fork_server", terminated_here)
    monkeypatch.setenv("HCCL_PY_SECRET", "this test's")  # else the runner sets one for good
    before = signal.getsignal(signal.SIGTERM)
    opts = runner.RunnerOptions("job.py", (), 2, "gloo")
    assert runner.run_script(opts) == 128 + signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) is before


# ------------------------------------------------------------------ the fork server under a long TMPDIR
@pytest.mark.parametrize("asked", [None, "forkserver", "spawn"])
def test_a_long_tmpdir_does_not_break_hp_run(monkeypatch: pytest.MonkeyPatch, asked) -> None:
    """A socket path past 107 characters: spawn by default, a clear error if forkserver is asked."""
    from hccl_py.launcher import forkserver

    folder = "/" + "d" * 60 + "/pymp-abcdefgh"  # 75 characters: the socket path needs 93
    monkeypatch.setattr(forkserver, "socket_folder", lambda: folder)
    if asked is None:
        monkeypatch.delenv(forkserver.START_METHOD_ENV, raising=False)
    else:
        monkeypatch.setenv(forkserver.START_METHOD_ENV, asked)
    assert forkserver.forkserver_fits()
    expected = asked or ("forkserver" if sys.platform.startswith("linux") else "spawn")
    assert forkserver.start_method() == expected
    monkeypatch.setattr(forkserver, "socket_folder", lambda: folder.replace("d" * 60, "d" * 80))
    assert not forkserver.forkserver_fits()
    if asked == "forkserver":
        with pytest.raises(hp.HcclUsageError, match="set TMPDIR to a shorter folder"):
            forkserver.start_method()
    else:
        assert forkserver.start_method() == "spawn"
