"""Window files of gloo ranks: created safely, removed after any run (issue 23, items 2 and 3).

The unit tests point :data:`SHM_DIR` at a temporary folder and drive the
domain set-up with an in-process store; the process tests look for the files
of their own job only (other jobs may use ``/dev/shm`` meanwhile).
"""

from __future__ import annotations

import json
import os
import queue
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist
from launch_helpers import start
from test_windows import ring_rank

import hccl_py as hp
from hccl_py.backends.dist import shm_windows
from hccl_py.backends.dist.server import DistServer
from hccl_py.backends.dist.shm_windows import SharedWindows, create_window_file, open_window_file
from hccl_py.core.group import Group
from hccl_py.kernel.context import current_rank_context
from hccl_py.launcher import sealed, shm_files
from hccl_py.launcher import store as kv
from hccl_py.launcher.liveness import process_state
from hccl_py.launcher.shm_files import remove_created, remove_job_files
from hccl_py.server.windows import KINDS

NBYTES = 1 << 20
#: Seconds a launched job may take to print its readiness line, and its ranks to exit.
READY_S, EXIT_S = 150.0, 30.0

#: Each test is a unit of its own under xdist (conftest.py): none shares a module's jobs.
pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux files"),
    pytest.mark.spread,
]


@pytest.fixture
def shm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private folder standing for /dev/shm."""
    monkeypatch.setattr(shm_files, "SHM_DIR", str(tmp_path))
    return tmp_path


def _fix_random(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setattr(shm_windows.secrets, "token_hex", lambda n: value)


# ------------------------------------------------------------------ creating files
def test_window_files_are_new_private_and_unguessable(shm: Path) -> None:
    first, _ = create_window_file("job-0", NBYTES)
    second, _ = create_window_file("job-0", NBYTES)
    for path in (first, second):
        st = os.lstat(path)
        assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600
        assert st.st_size == NBYTES
        name = os.path.basename(path)
        assert name.startswith("hccl_py-job-0-") and len(name.rsplit("-", 1)[1]) == 32
    assert first != second


@pytest.mark.parametrize("planted", ["symlink", "file"])
def test_a_planted_link_or_file_is_refused_and_named(
    shm: Path, tmp_path_factory: pytest.TempPathFactory, monkeypatch, planted: str
) -> None:
    _fix_random(monkeypatch, "f" * 32)
    path = shm / f"hccl_py-job-0-{'f' * 32}"
    victim = tmp_path_factory.mktemp("victim") / "precious"
    victim.write_bytes(b"keep me")
    if planted == "symlink":
        path.symlink_to(victim)
    else:
        path.write_bytes(b"planted")
    with pytest.raises(hp.HcclNoWindowsError) as info:
        create_window_file("job-0", NBYTES)
    assert str(info.value) == (
        f"refused window file {path}: a file or symbolic link of that name already exists "
        "(window files must be new)"
    )
    assert victim.read_bytes() == b"keep me"


def _peer_file(shm: Path, problem: str) -> tuple[str, str]:
    """A peer's window file with ``problem``; the words of its refusal."""
    path, _ = create_window_file("job-0", NBYTES)
    if problem == "symlink":
        link = str(shm / f"hccl_py-job-0-{'e' * 32}")
        os.symlink(path, link)
        return link, "Too many levels of symbolic links"
    if problem == "mode":
        os.chmod(path, 0o644)
        return path, "mode 644, not 600"
    if problem == "size":
        os.truncate(path, NBYTES // 2)
        return (
            path,
            f"{NBYTES // 2} bytes, not {NBYTES} (do the ranks set different HCCL_BUFFSIZE?)",
        )
    if problem == "links":
        os.link(path, shm / "hccl_py-job-0-second-name")
        return path, "2 links to it, not 1"
    outside = "/etc/passwd"
    return outside, "not a window file of this job in"


@pytest.mark.parametrize("problem", ["symlink", "mode", "size", "links", "outside"])
def test_a_peer_file_that_is_not_a_window_file_is_refused(shm: Path, problem: str) -> None:
    path, words = _peer_file(shm, problem)
    with pytest.raises(hp.HcclNoWindowsError) as info:
        open_window_file(path, NBYTES, "job-0")
    assert str(info.value).startswith("refused window file")
    assert path in str(info.value) and words in str(info.value), info.value


def test_a_peer_file_is_shared_memory(shm: Path) -> None:
    path, mine = create_window_file("job-0", NBYTES)
    peer = open_window_file(path, NBYTES, "job-0")
    torch.frombuffer(peer, dtype=torch.uint8)[7] = 42
    assert torch.frombuffer(mine, dtype=torch.uint8)[7] == 42


def test_a_full_shm_names_it_and_hccl_buffsize(shm: Path, monkeypatch) -> None:
    monkeypatch.setattr(
        shm_windows.os, "statvfs", lambda path: SimpleNamespace(f_bavail=3, f_frsize=1 << 20)
    )
    (server,) = _servers(1, buffsize_mb=200)
    with pytest.raises(hp.HcclNoWindowsError) as info:
        server.window("dom", 0, "In")
    assert str(info.value) == (
        f"GetWindowsInAddr: rank 0: {shm} has 3 MB free, less than the {len(KINDS)} windows of this rank "
        f"need (HCCL_BUFFSIZE=200 MB each): free space in {shm} or lower HCCL_BUFFSIZE (or "
        "hp.run(..., buffsize_mb=))"
    )
    assert list(shm.iterdir()) == []


# ------------------------------------------------------------ sharing a domain's files
class _Host(DistServer):
    """A gloo server's store side (``WindowHost``) over an in-process store, without groups."""

    def __init__(self, rank: int, store: dist.Store, buffsize_mb: int) -> None:
        self.backend_name = "gloo"
        self.session = SimpleNamespace(rank=rank, store=store, check_abort=lambda: None)
        self.store = store
        self.config = SimpleNamespace(buffsize_mb=buffsize_mb, timeout=60.0)
        self.run = 0
        self._keys: dict[str, None] = {}


def _window_part(rank: int, store: dist.Store, buffsize_mb: int = 1) -> SharedWindows:
    return SharedWindows(_Host(rank, store, buffsize_mb))


def _servers(n: int, buffsize_mb: int = 1) -> list[SharedWindows]:
    """``n`` ranks' shared windows after the domain "dom" of every rank was created."""
    store = dist.HashStore()
    servers = [_window_part(r, store, buffsize_mb) for r in range(n)]
    group = Group(range(n), "dom")
    threads = [threading.Thread(target=s.share, args=(group,)) for s in servers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return servers


def test_every_rank_maps_every_window_and_no_file_remains(shm: Path) -> None:
    servers = _servers(3)
    assert list(shm.iterdir()) == []
    assert len(servers[0].paths) == 3 * len(KINDS)
    for src in servers:
        hp_bytes = src.window("dom", 2, "Out").data
        hp_bytes[src.host.session.rank] = 10 + src.host.session.rank
    for dst in servers:
        assert dst.window("dom", 2, "Out").data[:3].tolist() == [10, 11, 12]


def test_a_rank_without_files_makes_every_rank_say_so(shm: Path, monkeypatch) -> None:
    real = shm_windows.create_window_file
    calls = []

    def second_fails(token: str, nbytes: int):
        calls.append(token)
        if len(calls) == 4:  # rank 1's Out window, whichever rank comes first
            raise hp.HcclNoWindowsError("refused window file X: planted")
        return real(token, nbytes)

    monkeypatch.setattr(shm_windows, "create_window_file", second_fails)
    servers = _servers(2)
    assert list(shm.iterdir()) == []
    for server in servers:
        with pytest.raises(hp.HcclNoWindowsError, match=r"GetWindowsOutAddr: rank \d: refused"):
            server.window("dom", 0, "Out")


def test_alltoallv_write_waits_meet_through_the_store() -> None:
    store = dist.HashStore()
    parts, group = [_window_part(r, store) for r in range(2)], Group([0, 1], "dom")
    got: list[list[bytes]] = []
    peer = threading.Thread(target=lambda: got.append(parts[1].meet(group, "0", "rank 1")))
    peer.start()
    assert parts[0].meet(group, "0", "rank 0") == [b"", b""]
    peer.join()
    assert got == [[b"", b""]]


def test_a_wait_that_no_peer_meets_times_out_naming_the_domain() -> None:
    part = _window_part(0, dist.HashStore())
    part.host.config.timeout = 0.01
    with pytest.raises(hp.HcclTimeoutError) as info:
        part.meet(Group([0, 1], "dom"), "0", "rank 0 waits for handle 0 AlltoAllvWrite")
    assert str(info.value) == (
        "timed out after 0.01 s: rank 0 waits for handle 0 AlltoAllvWrite: not every rank of "
        "domain dom made its AlltoAllvWrite"
    )


def test_an_unreadable_record_in_the_store_is_a_clear_problem(shm: Path) -> None:
    store = dist.HashStore()
    store.set(shm_windows._names_key("dom", 1), b'{"host": 7}')
    server = _window_part(0, store)
    server.share(Group([0, 1], "dom"))
    with pytest.raises(hp.HcclNoWindowsError) as info:
        server.window("dom", 0, "In")
    assert str(info.value).startswith(
        "GetWindowsInAddr: rank 1: its window record was refused: refused the value of store key "
        "'windows/dom/names/1': hccl_py did not write it"
    )
    assert list(shm.iterdir()) == []


@pytest.mark.parametrize("where", ["outside", "another job", "not created"])
def test_a_published_path_that_is_not_the_jobs_window_file_is_never_opened_or_removed(
    shm: Path, tmp_path_factory: pytest.TempPathFactory, where: str
) -> None:
    """Whoever writes to the store can publish any path as a rank's window file: only the job's
    own window files are opened or removed (before, a forged record made the ranks unlink it)."""
    victim = tmp_path_factory.mktemp("victim") / "precious"
    if where == "another job":
        victim = shm / f"hccl_py-job-1-0-{'a' * 32}"
    elif where == "not created":
        victim = shm / "hccl_py-job-0-precious"
    victim.write_bytes(b"keep me")
    store = dist.HashStore()
    key = shm_windows._names_key("dom", 1)
    forged = {"host": shm_windows.host_id(), "error": "", "In": str(victim), "Out": str(victim)}
    store.set(key, sealed.dump_json(key, forged))
    server = _window_part(0, store)
    server.share(Group([0, 1], "dom"))
    with pytest.raises(hp.HcclNoWindowsError) as info:
        server.window("dom", 1, "In")
    assert f"rank 1: refused window file {str(victim)!r}: not a window file of this job" in str(
        info.value
    )
    assert str(victim) not in server.paths
    store.set(kv.ABORT, b"a failed run")
    server.close()  # after a failed run: removes the files it shared and the job's
    assert victim.read_bytes() == b"keep me"
    assert [p for p in shm.iterdir() if p != victim] == []


def test_a_window_record_not_signed_with_the_runs_secret_is_refused(
    shm: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a run secret, a record sealed under another one is that rank's problem, untouched."""
    key = shm_windows._names_key("dom", 1)
    monkeypatch.setenv(sealed.SECRET_ENV, "not this run's")
    store = dist.HashStore()
    path = shm / f"hccl_py-job-0-{'b' * 32}"
    path.write_bytes(b"keep me")
    forged = {"host": shm_windows.host_id(), "error": "", "In": str(path), "Out": str(path)}
    store.set(key, sealed.dump_json(key, forged))
    monkeypatch.setenv(sealed.SECRET_ENV, "this run's")
    server = _window_part(0, store)
    server.token = "job-0"
    server.share(Group([0, 1], "dom"))
    with pytest.raises(hp.HcclNoWindowsError, match="its signature does not match"):
        server.window("dom", 1, "Out")
    assert path.read_bytes() == b"keep me"


@pytest.mark.parametrize("token", ["../x", "a/b", "", "x" * 65])
def test_a_window_token_hccl_py_would_not_make_is_refused(
    shm: Path, monkeypatch: pytest.MonkeyPatch, token: str
) -> None:
    """The job's token goes into the window files' names: one from the store or the environment
    that could leave the window folder, or is not what launchers make, is refused."""
    monkeypatch.setenv(shm_files.TOKEN_ENV, token)
    store = dist.HashStore()
    rank = 0
    if not token:  # from the store, where rank 0 publishes it: rank 1 reads it
        store.set(shm_windows._TOKEN_KEY, sealed.dump_json(shm_windows._TOKEN_KEY, "../up"))
        rank = 1
    server = _window_part(rank, store)
    server.share(Group([rank], "dom"))
    with pytest.raises(hp.HcclNoWindowsError, match="refused the token of window file names"):
        server.window("dom", rank, "In")
    assert list(shm.iterdir()) == []


def test_ranks_on_two_hosts_name_the_hosts_and_leave_no_file(shm: Path) -> None:
    store = dist.HashStore()
    elsewhere = {"host": "far-away/boot", "error": "", "In": "/x/In", "Out": "/x/Out"}
    key = shm_windows._names_key("dom", 1)
    store.set(key, sealed.dump_json(key, elsewhere))
    server = _window_part(0, store)
    server.share(Group([0, 1], "dom"))
    with pytest.raises(hp.HcclNoWindowsError) as info:
        server.window("dom", 1, "Out")
    assert str(info.value) == (
        "GetWindowsOutAddr: the gloo backend keeps windows in shared memory of one host, but "
        f"ranks run on {socket.gethostname()} and far-away: run window kernels with the ranks "
        "on one host, or on the emulator"
    )
    assert list(shm.iterdir()) == []


def test_removing_a_jobs_files_keeps_other_jobs_and_links(shm: Path) -> None:
    mine, _ = create_window_file("job-1-0", NBYTES)
    other, _ = create_window_file("job-2-0", NBYTES)
    link = shm / "hccl_py-job-1-link"
    link.symlink_to(other)
    remove_job_files("job-1")
    assert not os.path.exists(mine) and os.path.exists(other) and link.is_symlink()


def test_a_forced_exit_removes_the_files_this_process_created(shm: Path) -> None:
    path, _ = create_window_file("job-0", NBYTES)
    remove_created()
    assert not os.path.exists(path)


# --------------------------------------------------------------------- real runs
def paths_after_ring() -> list[str]:
    """The ring kernel (each rank writes only its peers' windows); this run's window files."""
    out = ring_rank()
    paths = current_rank_context().server.windows.paths
    assert out and not [p for p in paths if os.path.exists(p)], "files remain during the run"
    return paths


def test_no_file_remains_after_a_clean_gloo_run() -> None:
    per_rank = hp.run(paths_after_ring, world_size=3, backend="gloo", ranks_per_server=1)
    paths = per_rank[0]
    assert len(paths) == 3 * len(KINDS) and all(p == paths for p in per_rank)
    assert all(os.path.basename(p).startswith("hccl_py-") for p in paths)
    assert not [p for p in paths if os.path.exists(p)]


def leave_a_file_and_die(note: str) -> None:
    """As a rank killed while it created its window files: one file stays, the rank dies."""
    if hp.get_rank() == 1:
        path, _ = create_window_file(os.environ[shm_files.TOKEN_ENV] + "-0", 4096)
        Path(note).write_text(path)
        os.kill(os.getpid(), signal.SIGKILL)


def test_hp_run_removes_the_files_of_a_killed_rank(tmp_path: Path) -> None:
    note = tmp_path / "left"
    with pytest.raises(hp.WorldError, match="killed by SIGKILL"):
        hp.run(leave_a_file_and_die, world_size=2, backend="gloo", args=(str(note),))
    path = note.read_text()
    assert path.startswith(shm_files.SHM_DIR) and not os.path.exists(path)


SCRIPT = """
import json, os, threading, hccl_py as hp
from hccl_py.kernel.context import current_rank_context
from test_windows import ring_rank

def main():
    ring_rank()
    paths = current_rank_context().server.windows.paths
    print("ready", os.getpid(), json.dumps(paths), flush=True)
    threading.Event().wait()

if __name__ == "__main__":
    hp.run(main, ranks_per_server=1)
"""


def _ready_lines(proc: subprocess.Popen, n: int) -> list[list[str]]:
    """The ``ready <pid> <paths>`` lines of ``n`` ranks (fails with the output if the job ends)."""
    lines: queue.Queue = queue.Queue()

    def read() -> None:
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    seen, ready, deadline = [], [], time.monotonic() + READY_S
    while len(ready) < n:
        line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
        assert line is not None, "the job ended before its ranks were ready:\n" + "".join(seen)
        seen.append(line)
        if "ready" in line:
            ready.append(line.split("ready", 1)[1].split(maxsplit=1))
    return ready


#: ``python -m hccl_py`` with Ctrl-C's default handler: a Python that starts with SIGINT
#: ignored keeps it ignored, and the pytest worker that starts the runner may have it so (a
#: thread of the worker in C's ``system()`` ignores SIGINT and SIGQUIT for the whole process
#: meanwhile; seen in full runs of the suite: the runner ignored the signal and the ranks lived on).
CTRL_C_RUNNER = (
    "import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "sys.argv[0] = 'hccl_py'; runpy.run_module('hccl_py', run_name='__main__', alter_sys=True)"
)


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT])
def test_no_file_remains_when_the_runner_is_killed(tmp_path: Path, sig: signal.Signals) -> None:
    script = tmp_path / "hold.py"
    script.write_text(SCRIPT)
    tests = str(Path(__file__).parent)
    proc = start(
        [sys.executable, "-c", CTRL_C_RUNNER, "run", "-n", "3", "--backend", "gloo", str(script)],
        PYTHONPATH=tests,
    )
    try:
        ready = _ready_lines(proc, 3)
        pids = [int(pid) for pid, _ in ready]
        paths = json.loads(ready[0][1])
        job = os.path.basename(paths[0]).rsplit("-", 2)[0] + "-"
        assert len(paths) == 3 * len(KINDS) and not [p for p in paths if os.path.exists(p)]
        proc.send_signal(sig)
        deadline = time.monotonic() + EXIT_S
        while any(_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(_alive(p) for p in pids), "the ranks outlived the runner"
        assert not [n for n in os.listdir(shm_files.SHM_DIR) if n.startswith(job)]
    finally:
        proc.kill()
        proc.wait()


def _alive(pid: int) -> bool:
    return process_state(f"{socket.gethostname()}|{pid}") not in ("zombie", "gone")
