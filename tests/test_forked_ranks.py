"""The runner's ranks forked from the fork server behave as ``python script.py args`` did.

Two kinds of check. In-process: :func:`hccl_py.launcher.forked.start` runs small
scripts from this process's fork server, and everything each prints (its
facts, its exit, its traceback) must equal what a fresh ``python script.py``
prints and returns. End to end: ``python -m hccl_py run`` with the fork server
(the default) and with ``HCCL_PY_START_METHOD=spawn`` (fresh interpreters) runs
one probe script, whose facts must agree except for what a fork preloads.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import textwrap
import threading
import time
import zipfile
from multiprocessing import util as mp_util
from pathlib import Path
from typing import IO, Any

import pytest
from launch_helpers import ROOT, launch, launch_env

import hccl_py as hp
from hccl_py.launcher import forked, forkserver
from hccl_py.launcher.supervise import Child, stop

pytestmark = [
    pytest.mark.spread,
    pytest.mark.skipif(sys.platform != "linux", reason="the fork server and /proc are Linux's"),
]

#: Bounds a wait that only ends in a hang when the code is wrong; it never measures speed.
HANG_BOUND_S = 120.0

#: Prints, as JSON, what a script can see of how it was started.
FACTS = """
import json, os, sys
fds = os.listdir("/proc/self/fd")  # the listing's own descriptor is the last one
start_globals = sorted(globals())
import multiprocessing as mp
facts = {
    "name": __name__,
    "file": __file__,
    "doc": __doc__,
    "globals": start_globals,
    "loader": type(__loader__).__name__,
    "spec": repr(__spec__),
    "argv": sys.argv,
    "orig_argv": sys.orig_argv[1:],
    "cmdline": open("/proc/self/cmdline", "rb").read().rstrip(b"\\0").decode().split("\\0"),
    "path0": sys.path[0],
    "cwd": os.getcwd(),
    "fds": sorted(map(int, fds))[:-1],
    "stdin": os.fstat(0).st_ino if 0 in map(int, fds) else None,
    "streams": [
        [s.name, s.mode, s.encoding, s.errors, s.line_buffering, s.write_through]
        for s in (sys.stdout, sys.stderr)
    ],
    "dunder_streams": [sys.stdout is sys.__stdout__, sys.stderr is sys.__stderr__],
    "main_module": sys.modules["__main__"].__dict__ is globals(),
    "leads_session": os.getsid(0) == os.getpid() == os.getpgid(0),
    "process": repr(mp.current_process()),
    "parent_process": repr(mp.parent_process()),
    "start_method": mp.get_start_method(allow_none=True),
}
mp.set_start_method("spawn")  # refused if multiprocessing kept the fork server's
"""


def _read_all(stream: IO[bytes]) -> str:
    """Everything ``stream`` gives until EOF; fails where EOF never comes (a write end leaked)."""
    box: list[bytes] = []
    reader = threading.Thread(target=lambda: box.append(stream.read()), daemon=True)
    reader.start()
    reader.join(HANG_BOUND_S)
    assert box, "the rank's pipe never reached EOF: a write end of it stayed open"
    stream.close()
    return box[0].decode()


@pytest.fixture(scope="module")
def ctx() -> Any:
    if forkserver.start_method() != "forkserver":
        pytest.skip("HCCL_PY_START_METHOD or TMPDIR rule out the fork server here")
    return forkserver.mp_context(main=False)


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONUNBUFFERED": "1"}


def _forked(ctx: Any, script: Path, *args: str) -> tuple[int, str, str]:
    """Exit code, stdout and stderr of ``script`` run by a rank forked from ``ctx``."""
    proc, out, err = forked.start(ctx, str(script), args, _env(), "test-rank")
    texts = _read_all(out), _read_all(err)
    proc.join(HANG_BOUND_S)
    return proc.exitcode, *texts


def _fresh(script: Path, *args: str) -> tuple[int, str, str]:
    """Exit code, stdout and stderr of ``python script args`` (in a session of its own)."""
    out = subprocess.run(
        [sys.executable, str(script), *args],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=HANG_BOUND_S,
        start_new_session=True,
    )
    return out.returncode, out.stdout, out.stderr


CASES = {
    "facts": FACTS + "print(json.dumps(facts))",
    "exit code": "print('leaving', end='')\nimport sys\nsys.exit(3)",
    "exit message": "import sys\nsys.exit('a message')",
    "exit code past 255": "raise SystemExit(256 + 7)",
    "traceback": """
        def fail():
            raise ValueError("boom")
        try:
            {}["key"]
        except KeyError:
            fail()
    """,
    "syntax error": "x = (1,\n",
    "keyboard interrupt": """
        import atexit
        atexit.register(print, "atexit ran")
        raise KeyboardInterrupt
    """,
    "killed": "import os, signal\nos.kill(os.getpid(), signal.SIGTERM)",
    "threads and atexit": """
        import atexit, ctypes, sys, threading, time
        def late():
            time.sleep(0.2)
            print("thread done")
        threading.Thread(target=late).start()
        atexit.register(print, "atexit ran")
        ctypes.CDLL(None).printf(b"C stdio, no newline ")
        sys.excepthook = lambda kind, *rest: print("hook saw", kind.__name__)
        raise RuntimeError("x")
    """,
    "excepthook outside any except": """
        import sys
        sys.excepthook = lambda *args: print("being handled:", sys.exc_info()[0])
        raise ValueError("x")
    """,
    "broken excepthook": """
        import sys
        def hook(*args):
            raise TypeError("the hook broke")
        sys.excepthook = hook
        raise ValueError("the original")
    """,
}


@pytest.mark.parametrize("case", CASES)
def test_a_forked_rank_is_python_script_py(ctx: Any, tmp_path: Path, case: str) -> None:
    """Output and exit code equal a fresh interpreter's: facts, exits, tracebacks, signals."""
    script = tmp_path / "sub" / "script.py"
    script.parent.mkdir()
    script.write_text(textwrap.dedent(CASES[case]))
    forked_run = _forked(ctx, script, "an arg", "-x")
    assert forked_run == _fresh(script, "an arg", "-x")
    if case == "facts":
        facts = json.loads(forked_run[1])
        assert facts["name"] == "__main__" and facts["file"] == str(script)
        assert facts["argv"] == [str(script), "an arg", "-x"]
        assert facts["path0"] == str(script.parent.resolve())
        assert facts["leads_session"] and facts["fds"] == [0, 1, 2]
    if case == "traceback":
        assert forked_run[0] == 1 and forked_run[2].count("Traceback") == 2  # the chain, once
        assert "hccl_py" not in forked_run[2] and "Process " not in forked_run[2]


def test_argv_and_file_keep_the_script_path_as_given(ctx: Any, tmp_path: Path) -> None:
    """A relative path: argv[0] as given, __file__ joined to the folder (not normalized)."""
    script = tmp_path / "given.py"
    script.write_text("import sys\nprint(sys.argv[0], __file__)")
    given = os.path.relpath(script)
    if given.startswith(os.sep):  # no relative path from here: nothing to check
        pytest.skip("the temporary folder has no relative path from the current folder")
    _, out, _ = _forked(ctx, Path(given))
    assert out.split() == [given, os.getcwd() + os.sep + given]
    assert _fresh(Path(given))[1] == out


def test_a_rank_and_what_it_started_are_stopped_together(ctx: Any, tmp_path: Path) -> None:
    """The rank leads its own process group: stopping it stops the processes it started."""
    script = tmp_path / "parent.py"
    script.write_text(
        "import subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
        "print(child.pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    proc, out, err = forked.start(ctx, str(script), (), _env(), "test-rank")
    grandchild = int(out.readline())
    try:
        stop([Child(0, proc, session=True)])
        assert proc.exitcode == -signal.SIGTERM
        deadline = time.monotonic() + HANG_BOUND_S
        while _alive(grandchild) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(grandchild), "the process the rank started outlived it"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(grandchild, signal.SIGKILL)
        proc.kill()
        _read_all(out), _read_all(err)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_only_python_source_is_forked(tmp_path: Path) -> None:
    """A zip archive, a .pyc, an unreadable file or source Python reads in its own way (bytes
    that do not decode, a NUL) gets a fresh interpreter instead."""
    source = tmp_path / "plain.py"
    source.write_text("print(1)\n")
    archive = tmp_path / "app.pyz"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("__main__.py", "print(1)\n")
    compiled = tmp_path / "compiled"
    compiled.write_bytes(__import__("importlib.util").util.MAGIC_NUMBER + b"\0" * 12)
    latin = tmp_path / "latin.py"
    latin.write_bytes(b"# -*- coding: latin-1 -*-\nprint('\xe9')\n")
    undecodable = tmp_path / "undecodable.py"
    undecodable.write_bytes(b"print('\xff')\n")  # Python names it in its own words
    nul = tmp_path / "nul.py"
    nul.write_bytes(b"print(1)\0\n")
    assert forked.runs_forked(str(source)) and forked.runs_forked(str(latin))
    assert not forked.runs_forked(str(undecodable)) and not forked.runs_forked(str(nul))
    assert not forked.runs_forked(str(archive))
    assert not forked.runs_forked(str(compiled))
    assert not forked.runs_forked(str(tmp_path / "missing.py"))
    assert not forked.runs_forked(str(tmp_path / "x.pyc"))


def test_a_python_without_the_state_a_rank_resets_starts_fresh_interpreters(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from multiprocessing import resource_tracker

    source = tmp_path / "plain.py"
    source.write_text("print('hi')\n")
    assert forked.runs_forked(str(source))
    monkeypatch.delattr(resource_tracker._resource_tracker, "_fd")
    assert not forked.runs_forked(str(source))


def test_sys_path_starts_with_the_scripts_real_folder(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (real / "s.py").write_text("")
    (tmp_path / "link.py").symlink_to(real / "s.py")
    path = forked.script_sys_path(str(tmp_path / "link.py"), {})
    assert path[0] == str(real.resolve()) and list(path[1:]) == sys.path[1:]
    assert (
        list(forked.script_sys_path(str(real / "s.py"), {"PYTHONSAFEPATH": "1"})) == (sys.path[1:])
    )


# ------------------------------------------------------------------ through the runner
PROBE = (
    FACTS
    + """
facts["preloaded"] = "torch" in sys.modules
facts["env"] = dict(os.environ)
facts["sys_path"] = sys.path
facts["pid"], facts["ppid"] = os.getpid(), os.getppid()
with open(f"/proc/{os.getppid()}/cmdline", "rb") as f:
    facts["parent"] = f.read().decode().split(chr(0))
import numpy.random
facts["random"] = numpy.random.random()
rank = os.environ["RANK"]
# written whole, then renamed: the other rank reads it as soon as the name exists
with open(os.path.join(sys.argv[1], rank + ".part"), "w") as f:
    json.dump(facts, f)
os.replace(os.path.join(sys.argv[1], rank + ".part"), os.path.join(sys.argv[1], rank + ".json"))
print("stdout of rank", rank)
print("stderr of rank", rank, file=sys.stderr)
if rank == "1":  # rank 0 leaves first, so that this rank's exit alone fails the job
    import time
    while not os.path.exists(os.path.join(sys.argv[1], "0.json")):
        time.sleep(0.02)
    with open(os.path.join(sys.argv[1], "0.json")) as f:
        first = json.load(f)["pid"]
    while os.path.exists(f"/proc/{first}"):
        time.sleep(0.02)
    sys.exit(3)
"""
)
#: Facts that differ between ranks, or between a forked and a fresh rank by design.
PER_PROCESS = ("pid", "ppid", "parent", "random", "preloaded", "env")
#: The runner's variables that each run picks anew (a port, a token, a folder ...).
PER_RUN_ENV = (
    "MASTER_PORT",
    "HCCL_PY_PARENT_PID",
    "HCCL_PY_SECRET",
    "HCCL_PY_ORPHAN_DIRS",
    "HCCL_PY_START_METHOD",
)


def _run_probe(
    folder: Path, temp: Path, method: str
) -> tuple[subprocess.CompletedProcess, list[dict]]:
    """Run the probe on 2 ranks from ``folder`` (TMPDIR ``temp``, left empty); the runner's
    result and each rank's facts."""
    out = launch(
        [sys.executable, "-m", "hccl_py", "run", "-n", "2", "--backend", "gloo"]
        + [os.path.relpath(folder / "probe.py", ROOT), str(folder)],
        TMPDIR=str(temp),
        HCCL_PY_START_METHOD=method,
        HCCL_PY_PRELOAD="numpy.random",  # seeded once in the fork server: each rank reseeds it
    )
    ranks = []
    for rank in range(2):
        facts = folder / f"{rank}.json"
        assert facts.exists(), f"{method}: rank {rank} wrote no facts\n{out.stdout}\n{out.stderr}"
        ranks.append(json.loads(facts.read_text()))
        (folder / f"{rank}.json").unlink()
    left = sorted(p.name for p in temp.iterdir())
    assert not left, f"the run left {left} in its TMPDIR"
    return out, ranks


def test_the_runner_forks_ranks_that_match_fresh_ones(tmp_path: Path, short_tmp: Path) -> None:
    """The same probe with the fork server and with fresh interpreters: every fact agrees."""
    (tmp_path / "probe.py").write_text(PROBE)
    runs = {method: _run_probe(tmp_path, short_tmp, method) for method in ("forkserver", "spawn")}
    for method, (out, ranks) in runs.items():
        assert out.returncode == 3, out.stderr
        assert "[rank 0] stdout of rank 0" in out.stdout.splitlines()
        assert "[rank 1] stderr of rank 1" in out.stderr.splitlines()
        assert "hccl_py: exit codes: rank 1 exited with code 3" in out.stderr, out.stderr
        assert [r["preloaded"] for r in ranks] == [method == "forkserver"] * 2
        assert ranks[0]["random"] != ranks[1]["random"], method
        for rank, facts in enumerate(ranks):
            assert facts["env"]["RANK"] == str(rank) and facts["name"] == "__main__"
            assert facts["leads_session"] and facts["fds"] == [0, 1, 2]
    for fork, fresh in zip(runs["forkserver"][1], runs["spawn"][1], strict=True):
        differ = {
            k: (fork[k], fresh[k]) for k in fork if k not in PER_PROCESS and fork[k] != fresh[k]
        }
        assert not differ, differ
        envs = [{k: v for k, v in f["env"].items() if k not in PER_RUN_ENV} for f in (fork, fresh)]
        assert envs[0] == envs[1]
    # the runner's fork server is a fork of the runner, which has imported torch already,
    # not a fresh interpreter that imports it again
    parents = [r["parent"] for r in runs["forkserver"][1]]
    assert parents[0] == parents[1] and parents[0][1:4] == ["-m", "hccl_py", "run"], parents
    server = runs["forkserver"][1][0]["ppid"]  # the fork server: it ends with the runner
    deadline = time.monotonic() + HANG_BOUND_S
    while _alive(server) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(server), "the fork server outlived the runner"


@pytest.mark.parametrize(
    "asked, long_tmpdir, expected",
    [
        (None, False, "forkserver"),
        ("spawn", False, None),
        (None, True, None),
        ("forkserver", True, "set TMPDIR to a shorter folder"),
        ("fork", False, None),  # fresh interpreters: the runner forks only its fork server
        # before, any other value started fresh interpreters in the runner, and in hp.run
        # reached multiprocessing's own "cannot find context" error
        ("nosuch", False, "HCCL_PY_START_METHOD must be one of forkserver, spawn, fork, not"),
    ],
)
def test_how_the_runner_starts_its_ranks(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, asked, long_tmpdir, expected
) -> None:
    """The fork server by default; fresh interpreters when asked or where its socket cannot be."""
    from hccl_py.launcher import script as runner

    monkeypatch.setattr(runner, "mp_context", lambda main, also: "forkserver")
    if long_tmpdir:
        folder = "/" + "d" * 100 + "/pymp-abcdefgh"
        monkeypatch.setattr(forkserver, "socket_folder", lambda: folder)
    if asked is None:
        monkeypatch.delenv(forkserver.START_METHOD_ENV, raising=False)
    else:
        monkeypatch.setenv(forkserver.START_METHOD_ENV, asked)
    script = tmp_path / "job.py"
    script.write_text("print(1)\n")
    opts = runner.RunnerOptions(str(script), (), 2, "gloo")
    if expected and " " in expected:
        with pytest.raises(runner.LaunchError, match=expected):
            runner._fork_server(opts)
    else:
        assert runner._fork_server(opts) == expected


def test_the_fork_server_is_a_fork_only_where_that_is_safe(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Another thread in the process, or a multiprocessing whose server loop is not the one
    the fork runs: the exec'd fork server is left to start (nothing is forked here)."""
    before = forkserver.fork_server_pid()
    alone = threading.active_count() == 1  # an xdist worker may run a thread of its own
    assert forkserver.can_fork_as_server() == alone
    release = threading.Event()
    other = threading.Thread(target=release.wait)
    other.start()
    try:
        assert not forkserver.can_fork_as_server()
        assert not forkserver.fork_as_server()
    finally:
        release.set()
        other.join()
    assert forkserver.can_fork_as_server() == alone

    def newer_main(listener_fd, alive_r, preload, main_path=None, sys_path=None, *, authkey_r=None):
        raise AssertionError("never called")

    monkeypatch.setattr(forkserver.mp_forkserver, "main", newer_main)
    assert not forkserver.can_fork_as_server() and not forkserver.fork_as_server()
    assert forkserver.fork_server_pid() == before


def test_a_failed_fork_leaves_the_exec_d_server_to_start(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """No process to spare for the fork: False, and nothing of it is left (fds, socket)."""
    # nothing is forked here: the worker's own threads (xdist's) do not matter
    monkeypatch.setattr(forkserver, "can_fork_as_server", lambda: True)
    monkeypatch.setattr(mp_util, "get_temp_dir", lambda: str(tmp_path))
    before = forkserver.fork_server_pid()

    def no_fork() -> int:
        raise BlockingIOError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(forkserver.os, "fork", no_fork)
    forkserver.resource_tracker.ensure_running()  # its pipe is multiprocessing's, kept on purpose
    fds = sorted(os.listdir("/proc/self/fd"))
    assert not forkserver.fork_as_server()
    assert forkserver.fork_server_pid() == before
    assert sorted(os.listdir("/proc/self/fd")) == fds
    assert not list(tmp_path.iterdir()), "the server's socket file was left behind"


def test_a_sigterm_pending_at_the_fork_leaves_the_server_recorded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """SIGTERM is blocked across the fork and raised as the mask comes back: by then the new
    server must be recorded, or the runner's clean-up (stop_fork_server) cannot end it."""
    assert threading.current_thread() is threading.main_thread()
    server = forkserver.mp_forkserver._forkserver
    for name in ("_forkserver_pid", "_forkserver_address", "_forkserver_alive_fd"):
        monkeypatch.setattr(server, name, None)
    monkeypatch.setattr(forkserver, "can_fork_as_server", lambda: True)

    def forked_as_sigterm_comes() -> int:  # to this thread, which blocks it now
        signal.pthread_kill(threading.get_ident(), signal.SIGTERM)
        return 2**22 + 1  # a pid no process has: nothing is forked

    class StoppedError(Exception):
        pass

    def stop(signum: int, frame: object) -> None:
        raise StoppedError

    monkeypatch.setattr(forkserver.os, "fork", forked_as_sigterm_comes)
    forkserver.resource_tracker.ensure_running()
    previous = signal.signal(signal.SIGTERM, stop)
    try:
        with pytest.raises(StoppedError):
            forkserver.fork_as_server()
    finally:
        signal.signal(signal.SIGTERM, previous)
        if server._forkserver_alive_fd is not None:
            os.close(server._forkserver_alive_fd)
        if server._forkserver_address is not None:
            os.unlink(server._forkserver_address)
    assert server._forkserver_pid == 2**22 + 1


def test_a_signal_to_the_runners_process_group_stops_every_rank(
    tmp_path: Path, short_tmp: Path
) -> None:
    """``kill -TERM -PGID`` (a shell's ``kill %1``, GNU timeout): the fork server is not in it.

    The runner stops the ranks and reads how they ended; a fork server killed with
    the runner would have left them running and read them as "exited with code 255".
    """
    script = tmp_path / "sleeper.py"
    script.write_text("import os, time\nprint('pid', os.getpid(), flush=True)\ntime.sleep(600)\n")
    runner = subprocess.Popen(
        [sys.executable, "-m", "hccl_py", "run", "-n", "2", "--backend", "gloo", str(script)],
        cwd=ROOT,
        env=launch_env(TMPDIR=str(short_tmp)),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group, as a shell's job
    )
    try:
        lines: list[str] = []
        pids: dict[int, int] = {}
        while len(pids) < 2 and (line := runner.stdout.readline()):
            lines.append(line)
            if found := re.match(r"\[rank (\d)\] pid (\d+)$", line.strip()):
                pids[int(found[1])] = int(found[2])
        assert len(pids) == 2, "".join(lines)
        os.killpg(runner.pid, signal.SIGTERM)
        out = "".join(lines) + runner.communicate(timeout=HANG_BOUND_S)[0]
    finally:
        runner.kill()
        runner.wait()
    assert runner.returncode == 128 + signal.SIGTERM, out
    assert f"rank 0 (pid {pids[0]}) was killed by SIGTERM" in out, out
    assert f"rank 1 (pid {pids[1]}) was killed by SIGTERM" in out, out
    assert not [p for p in pids.values() if _alive(p)], "a rank outlived its runner"
    assert not list(short_tmp.iterdir())


class _GonePipe:
    """A standard stream whose reader was killed: every write fails as a broken pipe does."""

    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    def flush(self) -> None:
        raise BrokenPipeError(32, "Broken pipe")


def test_an_uncaught_error_with_stderr_gone_does_not_escape_its_report(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A rank whose runner was killed fails (its store is gone) and cannot print why either:
    the report gives up quietly, so the rank still removes the runner's folders and exits as
    Python would (before, the broken pipe escaped and the process left by multiprocessing's
    exit, the folders behind)."""

    def printing_hook(kind: type, value: BaseException, tb: Any) -> None:
        print(f"{kind.__name__}: {value}", file=sys.stderr)  # as a rank's hook prints

    monkeypatch.setattr(sys, "stderr", _GonePipe())
    monkeypatch.setattr(sys, "excepthook", printing_hook)
    forked._print_uncaught(RuntimeError("the store is gone"), None)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_zombie_runner_counts_as_gone() -> None:
    """A runner killed but not yet reaped by its parent has ended: its ranks clean up after it."""
    from hccl_py.launcher.liveness import pid_alive, process_state

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        where = f"{os.uname().nodename}|{child.pid}"
        deadline = time.monotonic() + 60
        while process_state(where) != "zombie" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert process_state(where) == "zombie"
        assert not pid_alive(child.pid)
        assert pid_alive(os.getpid())
    finally:
        child.wait()


@pytest.mark.parametrize("starter_lives", [True, False], ids=["fork server gone", "starter gone"])
def test_a_rank_whose_fork_server_ended_leaves_the_starters_folders(
    starter_lives: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rank reparented while the process that started the run lives (a killed fork server)
    said "the process that started this run (pid P) is gone" of a live P, and removed that
    process's folders, whose own cleanup then failed (until stop 64)."""
    from hccl_py.launcher import liveness

    left: list[tuple] = []
    done = threading.Event()

    def leave(rank: int | None, why: str, own_dirs: bool = True) -> None:
        left.append((rank, why, own_dirs))  # the real one ends the process: the first counts
        done.set()

    starter = os.getpid() if starter_lives else 2**22 + 7  # a pid no process has
    monkeypatch.setenv(liveness.PARENT_ENV, str(starter))
    monkeypatch.setattr(liveness, "_watching", set())
    monkeypatch.setattr(liveness, "leave_orphaned", leave)
    monkeypatch.setattr(liveness.os, "getppid", lambda: 1)  # reparented to init
    liveness.watch_parent(3)
    assert done.wait(60)
    rank, why, own_dirs = left[0]
    assert rank == 3 and own_dirs is not starter_lives
    if starter_lives:
        assert why.startswith("the process that forked this rank is gone"), why
        assert f"pid {starter}, lives on" in why
    else:
        assert why == f"the process that started this run (pid {starter}) is gone"


def _runner_on_two_gloo_ranks(script: Path, short_tmp: Path) -> subprocess.CompletedProcess:
    """``python -m hccl_py run -n 2 --backend gloo script``, its output captured."""
    return subprocess.run(
        [sys.executable, "-m", "hccl_py", "run", "-n", "2", "--backend", "gloo", str(script)],
        cwd=ROOT,
        env=launch_env(TMPDIR=str(short_tmp)),
        capture_output=True,
        text=True,
        timeout=HANG_BOUND_S,
    )


def test_processes_a_rank_started_end_with_the_run(tmp_path: Path, short_tmp: Path) -> None:
    """A rank's own child (``subprocess.Popen(["sleep", "300"])``) outlived the run, and the
    runner waited 5 s for each rank's output pipe the child held open."""
    script = tmp_path / "parent.py"
    script.write_text(
        "import subprocess, sys\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'])\n"
        "print('child', child.pid, flush=True)\n"
    )
    out = _runner_on_two_gloo_ranks(script, short_tmp)
    children = [int(p) for p in re.findall(r"\] child (\d+)$", out.stdout, re.M)]
    assert out.returncode == 0 and len(children) == 2, out.stdout + out.stderr
    _assert_gone(children)


def _assert_gone(pids: list[int]) -> None:
    """Every process of ``pids`` ends (within a bound), else it is killed and the test fails."""
    try:
        deadline = time.monotonic() + 10.0  # reaped by init: gone once it is
        while any(_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not [p for p in pids if _alive(p)], "a rank's child outlived the run"
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _starts_a_child() -> int:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"]).pid


def test_processes_a_rank_of_hp_run_started_end_with_it() -> None:
    """The same for the ranks hp.run starts itself (each now leads a session of its own)."""
    _assert_gone(hp.run(_starts_a_child, world_size=2, backend="gloo", timeout=HANG_BOUND_S))


def test_processes_a_killed_rank_started_end_with_the_run(tmp_path: Path, short_tmp: Path) -> None:
    """A rank that SIGKILL ends cannot kill what it started (its ``end_own_group`` never runs):
    the runner kills what is left of the rank's process group once it sees the rank ended."""
    script = tmp_path / "killed.py"
    script.write_text(
        "import os, signal, subprocess, sys\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'])\n"
        "print('child', child.pid, flush=True)\n"
        "if os.environ['RANK'] == '1':\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    out = _runner_on_two_gloo_ranks(script, short_tmp)
    children = [int(p) for p in re.findall(r"\] child (\d+)$", out.stdout, re.M)]
    assert out.returncode != 0 and len(children) == 2, out.stdout + out.stderr
    assert "rank 1 was killed by SIGKILL" in out.stdout + out.stderr, out.stdout + out.stderr
    _assert_gone(children)


def _starts_a_child_and_dies(folder: str) -> None:
    pid = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"]).pid
    Path(folder, f"{hp.get_rank()}.pid").write_text(str(pid))
    if hp.get_rank() == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    hp.barrier()


def test_processes_a_killed_rank_of_hp_run_started_end_with_it(tmp_path: Path) -> None:
    """The same for a rank that hp.run started itself."""
    with pytest.raises(hp.WorldError, match="rank 1"):
        hp.run(_starts_a_child_and_dies, 2, "gloo", timeout=60, args=(str(tmp_path),))
    _assert_gone([int(f.read_text()) for f in tmp_path.glob("*.pid")])


def test_a_rank_that_exits_with_0_inside_hp_run_is_a_failure(
    tmp_path: Path, short_tmp: Path
) -> None:
    """``os._exit(0)`` in the middle of a run: the runner counted the rank as a success, said
    "1 of 2 ranks failed" and never named it (the other rank's failure was the only report)."""
    script = tmp_path / "quits.py"
    script.write_text(
        "import os\nimport hccl_py as hp\n\n"
        "def main():\n"
        "    if hp.get_rank() == 1:\n"
        "        os._exit(0)\n"
        "    hp.barrier()\n\n"
        "hp.run(main)\n"
    )
    out = _runner_on_two_gloo_ranks(script, short_tmp)
    assert out.returncode == 1, out.stderr
    assert (
        "hccl_py: 2 of 2 ranks failed; first failure: rank 1: RankDiedError: rank 1 exited "
        "with code 0 inside hp.run before reporting an outcome" in out.stderr
    ), out.stderr


def test_ctrl_c_in_one_rank_ends_it_as_sigint_would(tmp_path: Path, short_tmp: Path) -> None:
    """A KeyboardInterrupt inside one rank's function is reported to the others, and the rank
    then dies by SIGINT, as backends.md says of forked ranks; before, hp.run turned it into the
    rank's WorldError and the rank "exited with code 1"."""
    script = tmp_path / "interrupted.py"
    script.write_text(
        "import os, signal\nimport hccl_py as hp\n\n"
        "def main():\n"
        "    if hp.get_rank() == 1:\n"
        "        os.kill(os.getpid(), signal.SIGINT)\n"
        "    hp.barrier()\n\n"
        "hp.run(main)\n"
    )
    out = _runner_on_two_gloo_ranks(script, short_tmp)
    assert out.returncode == 1, out.stderr
    assert "first failure: rank 1: KeyboardInterrupt" in out.stderr, out.stderr
    assert "rank 1 was killed by SIGINT" in out.stderr, out.stderr


_CTRL_C_IN_THE_FORK = """
import os, signal
from hccl_py.launcher import forkserver

armed = [True]

def interrupt():  # Ctrl-C landing while the fork's hooks run in the runner
    if armed[0]:
        armed[0] = False
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(1000):
            pass

os.register_at_fork(after_in_parent=interrupt)
try:
    forkserver.fork_as_server()
    print("went on")
except KeyboardInterrupt:
    print("interrupted")
finally:
    forkserver.stop_fork_server()
"""


def test_ctrl_c_while_the_runner_forks_its_server_is_not_lost(short_tmp: Path) -> None:
    """A SIGINT that landed in the fork's hooks was printed as "Exception ignored" and lost:
    the run went on and exited 0 (seen once by a Ctrl-C hunt). Signals wait out the fork."""
    out = subprocess.run(
        [sys.executable, "-c", _CTRL_C_IN_THE_FORK],
        cwd=ROOT,
        env=launch_env(TMPDIR=str(short_tmp)),
        capture_output=True,
        text=True,
        timeout=HANG_BOUND_S,
    )
    assert out.stdout.splitlines() == ["interrupted"], out.stdout + out.stderr


def _rank() -> int:
    return hp.get_rank()


def test_a_fork_server_whose_folder_was_removed_is_started_again() -> None:
    """A cleaner of /tmp removed this process's pymp-* folder during a long session (a helper's
    differential run): every later gloo hp.run failed with a bare FileNotFoundError. The folder
    is made again and a new fork server started."""
    if forkserver.start_method() != "forkserver":
        pytest.skip("the fork server is the start method on Linux only")
    assert hp.run(_rank, world_size=2, backend="gloo") == [0, 1]
    folder, first = mp_util.get_temp_dir(), forkserver.fork_server_pid()
    assert first is not None
    shutil.rmtree(folder)
    assert hp.run(_rank, world_size=2, backend="gloo") == [0, 1]
    assert os.path.isdir(folder) and stat.S_IMODE(os.stat(folder).st_mode) == 0o700
    assert forkserver.fork_server_pid() not in (None, first), "the old server's socket is gone"
