"""Windows of gloo ranks: anonymous shared memory that no run leaves behind (issue 23, items 2
and 3).

The unit tests drive the domain set-up with an in-process store and threads standing for the
ranks; the process tests run real gloo ranks and look at their memory maps and descriptors.
"""

from __future__ import annotations

import gc
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
from hccl_py.backends.dist.shm_windows import SharedWindows, create_window, open_window
from hccl_py.core.errors import ForgedValueError
from hccl_py.core.group import Group
from hccl_py.core.platform import get_platform
from hccl_py.launcher import sealed
from hccl_py.launcher.liveness import process_state
from hccl_py.server.windows import KINDS

NBYTES = 1 << 20
#: Seconds a launched job may take to print its readiness line, and its ranks to exit.
READY_S, EXIT_S = 150.0, 30.0
PID = str(os.getpid())

#: Each test is a unit of its own under xdist (conftest.py): none shares a module's jobs.
pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux memfds"),
    pytest.mark.spread,
]


def window_descriptors(pid: int | str = "self") -> list[str]:
    """The window memfds that process ``pid`` holds open (mappings no longer used closed first)."""
    gc.collect()
    folder = f"/proc/{pid}/fd"
    names = []
    for fd in os.listdir(folder):
        try:
            names.append(os.readlink(f"{folder}/{fd}"))
        except OSError:  # closed meanwhile (the listing's own descriptor)
            continue
    return [n for n in names if n.startswith(f"/memfd:{shm_windows.NAME_PREFIX}")]


def window_mappings(pid: int | str = "self") -> set[str]:
    """The window memfds that process ``pid`` maps."""
    with open(f"/proc/{pid}/maps") as f:
        return {
            line.split(maxsplit=5)[5].strip()
            for line in f
            if f"/memfd:{shm_windows.NAME_PREFIX}" in line
        }


# ------------------------------------------------------------------ making windows
def test_windows_are_private_anonymous_and_unguessable() -> None:
    first, second = create_window(NBYTES), create_window(NBYTES)
    try:
        for window in (first, second):
            st = os.fstat(window.fd)
            assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600
            assert st.st_size == NBYTES and st.st_uid == os.geteuid()
            fd, ident = window.ref.split("/")
            assert int(fd) == window.fd and len(ident) == 32
            name = os.readlink(f"/proc/self/fd/{window.fd}")
            assert name == f"/memfd:hccl_py-window-{ident} (deleted)"
        assert first.ref.split("/")[1] != second.ref.split("/")[1]
    finally:
        os.close(first.fd)
        os.close(second.fd)


def test_a_window_is_shared_memory_that_outlives_its_descriptor() -> None:
    before = len(window_descriptors())
    window = create_window(NBYTES)
    peer = open_window(PID, window.ref, NBYTES)
    os.close(window.fd)
    torch.frombuffer(peer, dtype=torch.uint8)[7] = 42
    assert torch.frombuffer(window.mapping, dtype=torch.uint8)[7] == 42
    assert len(window_descriptors()) == before + 2  # each mapping's own (Python's mmap dups)


def _peer_ref(problem: str, tmp_path: Path) -> tuple[str, str, str, list[int]]:
    """A published (pid, ref) with ``problem``; the words of its refusal; descriptors to close."""
    window = create_window(NBYTES)
    fd, ident = window.ref.split("/")
    if problem == "name":
        return PID, f"{fd}/{'e' * 32}", f"not the window hccl_py-window-{'e' * 32}", [window.fd]
    if problem == "size":
        os.ftruncate(window.fd, NBYTES // 2)
        words = f"{NBYTES // 2} bytes, not {NBYTES} (do the ranks set different HCCL_BUFFSIZE?)"
        return PID, window.ref, words, [window.fd]
    if problem == "a file":
        victim = tmp_path / "precious"
        victim.write_bytes(b"keep me")
        other = os.open(victim, os.O_RDWR)
        return PID, f"{other}/{ident}", f"it is {victim}, not the window", [window.fd, other]
    if problem == "closed":
        os.close(window.fd)
        return PID, window.ref, "cannot open the window", []
    if problem == "pid":
        return "../1", window.ref, "not a window hccl_py publishes", [window.fd]
    return PID, "../../etc/passwd", "not a window hccl_py publishes", [window.fd]


@pytest.mark.parametrize("problem", ["name", "size", "a file", "closed", "pid", "path"])
def test_a_peer_window_that_is_not_a_window_is_refused(tmp_path: Path, problem: str) -> None:
    pid, ref, words, fds = _peer_ref(problem, tmp_path)
    try:
        with pytest.raises(hp.HcclNoWindowsError) as info:
            open_window(pid, ref, NBYTES)
        assert words in str(info.value), info.value
    finally:
        for fd in fds:
            os.close(fd)
    if problem == "a file":
        assert (tmp_path / "precious").read_bytes() == b"keep me"


def test_a_window_the_system_cannot_size_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_room(fd: int, length: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(shm_windows.os, "ftruncate", no_room)
    before = window_descriptors()
    with pytest.raises(hp.HcclNoWindowsError) as info:
        create_window(200 << 20)
    assert str(info.value) == (
        "cannot size a window to 209715200 bytes (HCCL_BUFFSIZE=200 MB): No space left on device"
    )
    assert window_descriptors() == before


# ------------------------------------------------------------ sharing a domain's windows
class _Host(DistServer):
    """A gloo server's store side (``WindowHost``) over an in-process store, without groups."""

    def __init__(self, rank: int, store: dist.Store, buffsize_mb: int) -> None:
        self.backend_name = "gloo"
        self.session = SimpleNamespace(rank=rank, store=store, check_abort=lambda: None)
        self.store = store
        self.config = SimpleNamespace(
            buffsize_mb=buffsize_mb, timeout=60.0, platform=get_platform("A3")
        )
        self._keys: dict[str, None] = {}

    def group_timeout(self) -> float:
        return 5.0


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


def test_every_rank_maps_every_window_and_no_descriptor_remains() -> None:
    before = len(window_descriptors())
    servers = _servers(3)
    # each rank's mappings of the 3 ranks' windows hold one each; the published ones are closed
    assert len(window_descriptors()) == before + 3 * 3 * len(KINDS)
    assert len(window_mappings()) >= 3 * len(KINDS)
    for src in servers:
        hp_bytes = src.window("dom", 2, "Out").data
        hp_bytes[src.host.session.rank] = 10 + src.host.session.rank
    for dst in servers:
        assert dst.window("dom", 2, "Out").data[:3].tolist() == [10, 11, 12]


def test_a_rank_without_windows_makes_every_rank_say_so(monkeypatch) -> None:
    before = window_descriptors()
    real = shm_windows.create_window
    calls = []

    def fourth_fails(nbytes: int):
        calls.append(nbytes)
        if len(calls) == 4:  # rank 1's Out window, whichever rank comes first
            raise hp.HcclNoWindowsError("cannot size a window: planted")
        return real(nbytes)

    monkeypatch.setattr(shm_windows, "create_window", fourth_fails)
    servers = _servers(2)
    assert window_descriptors() == before
    for server in servers:
        with pytest.raises(hp.HcclNoWindowsError, match=r"GetWindowsOutAddr: rank \d: cannot size"):
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


def _alone(store: dist.Store, rank: int = 0) -> SharedWindows:
    """Rank ``rank`` of a 2-rank domain "dom" whose other rank published and mapped already."""
    other = 1 - rank
    store.set(shm_windows._mapped_key("dom", other), b"1")
    server = _window_part(rank, store)
    server.share(Group([0, 1], "dom"))
    return server


def test_an_unreadable_record_in_the_store_is_a_clear_problem() -> None:
    before = window_descriptors()
    store = dist.HashStore()
    store.set(shm_windows._names_key("dom", 1), b'{"host": 7}')
    server = _alone(store)
    with pytest.raises(hp.HcclNoWindowsError) as info:
        server.window("dom", 0, "In")
    assert str(info.value).startswith(
        "GetWindowsInAddr: rank 1: its window record was refused: refused the value of store key "
        "'windows/dom/names/1': hccl_py did not write it"
    )
    assert window_descriptors() == before


def test_a_record_naming_another_descriptor_is_refused_untouched(tmp_path: Path) -> None:
    """Whoever writes to the store can publish any descriptor as a rank's window: only a window
    that hccl_py made under the published name is mapped."""
    victim = tmp_path / "precious"
    victim.write_bytes(b"keep me")
    before = window_descriptors()
    other = os.open(victim, os.O_RDWR)
    try:
        store = dist.HashStore()
        key = shm_windows._names_key("dom", 1)
        ref = f"{other}/{'a' * 32}"
        forged = {"host": shm_windows.host_id(), "error": "", "pid": PID, "In": ref, "Out": ref}
        store.set(key, sealed.dump_json(key, forged))
        server = _alone(store)
        with pytest.raises(hp.HcclNoWindowsError) as info:
            server.window("dom", 1, "In")
        assert f"rank 1: refused the window /proc/{PID}/fd/{other} of process {PID}: it is " in (
            str(info.value)
        )
    finally:
        os.close(other)
    assert victim.read_bytes() == b"keep me"
    assert window_descriptors() == before


def test_a_window_record_not_signed_with_the_runs_secret_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With a run secret, a record sealed under another one is that rank's problem, unopened."""
    key = shm_windows._names_key("dom", 1)
    monkeypatch.setenv(sealed.SECRET_ENV, "not this run's")
    store = dist.HashStore()
    window = create_window(NBYTES)
    try:
        ref = window.ref
        forged = {"host": shm_windows.host_id(), "error": "", "pid": PID, "In": ref, "Out": ref}
        store.set(key, sealed.dump_json(key, forged))
        monkeypatch.setenv(sealed.SECRET_ENV, "this run's")
        server = _alone(store)
        with pytest.raises(hp.HcclNoWindowsError, match="its signature does not match"):
            server.window("dom", 1, "Out")
        assert (("dom", 1, "Out")) not in server.maps
    finally:
        os.close(window.fd)


def test_ranks_on_two_hosts_name_the_hosts_and_keep_no_descriptor() -> None:
    before = window_descriptors()
    store = dist.HashStore()
    elsewhere = {"host": "far-away/boot", "error": "", "pid": "1", "In": "3/x", "Out": "4/x"}
    key = shm_windows._names_key("dom", 1)
    store.set(key, sealed.dump_json(key, elsewhere))
    server = _alone(store)
    with pytest.raises(hp.HcclNoWindowsError) as info:
        server.window("dom", 1, "Out")
    assert str(info.value) == (
        "GetWindowsOutAddr: the gloo backend keeps windows in shared memory of one host, but "
        f"ranks run on {socket.gethostname()} and far-away: run window kernels with the ranks "
        "on one host, or on the emulator"
    )
    assert window_descriptors() == before


def test_a_rank_that_never_maps_ends_the_wait_naming_the_domain() -> None:
    """Descriptors are closed once every member mapped: a member that never does is named
    after the domain's time limit, and this rank's descriptors are closed all the same."""
    store = dist.HashStore()
    key = shm_windows._names_key("dom", 1)
    store.set(key, sealed.dump_json(key, {"host": "far-away/boot", "error": "gone"}))
    server = _window_part(0, store)
    server.host.group_timeout = lambda: 0.05
    before = window_descriptors()
    try:  # not pytest.raises: its traceback would keep this rank's windows mapped
        server.share(Group([0, 1], "dom"))
    except hp.HcclTimeoutError as exc:
        message = str(exc)
    else:
        pytest.fail("the wait for a rank that never maps did not end")
    assert message == (
        "timed out after 0.05 s: ranks did not map the windows of domain dom: "
        "['windows/dom/mapped/1']"
    )
    assert window_descriptors() == before


# --------------------------------------------------------------------- real runs
def windows_after_ring() -> tuple[int, set[str]]:
    """The ring kernel (each rank writes only its peers' windows); how many window descriptors
    this rank holds, and the windows it maps."""
    assert ring_rank()
    return len(window_descriptors()), window_mappings()


def test_a_gloo_run_maps_every_window_and_keeps_no_published_descriptor() -> None:
    per_rank = hp.run(windows_after_ring, world_size=3, backend="gloo", ranks_per_server=1)
    for fds, maps in per_rank:
        assert len(maps) == 3 * len(KINDS) and maps == per_rank[0][1]
        assert fds == len(maps)  # one per mapping (Python's mmap keeps one): none published


SCRIPT = """
import json, os, threading, hccl_py as hp
from test_windows import ring_rank

def main():
    ring_rank()
    print("ready", os.getpid(), flush=True)
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
def test_window_memory_goes_with_the_ranks_when_the_runner_is_killed(
    tmp_path: Path, sig: signal.Signals
) -> None:
    script = tmp_path / "hold.py"
    script.write_text(SCRIPT)
    tests = str(Path(__file__).parent)
    proc = start(
        [sys.executable, "-c", CTRL_C_RUNNER, "run", "-n", "3", "--backend", "gloo", str(script)],
        PYTHONPATH=tests,
    )
    try:
        pids = [int(pid) for pid, *_ in _ready_lines(proc, 3)]
        maps = [window_mappings(pid) for pid in pids]
        assert len(maps[0]) == 3 * len(KINDS) and all(m == maps[0] for m in maps)
        proc.send_signal(sig)
        deadline = time.monotonic() + EXIT_S
        while any(_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(_alive(p) for p in pids), "the ranks outlived the runner"
        assert _window_holders(maps[0]) == [], "a window outlived its ranks"
    finally:
        proc.kill()
        proc.wait()


def _window_holders(names: set[str]) -> list[int]:
    """Processes of this user that map one of the windows ``names``."""
    holders = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if window_mappings(entry) & names:
                    holders.append(int(entry))
            except OSError:  # ended meanwhile, or not ours
                continue
    return holders


def _alive(pid: int) -> bool:
    return process_state(f"{socket.gethostname()}|{pid}") not in ("zombie", "gone")


def test_an_alltoallv_write_wait_ends_only_on_every_ranks_own_sealed_arrival(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Until stop 65 the ranks counted in at one store counter, to which any process that
    reaches the store can add: rank 0's Wait then returned before rank 1's copies landed.
    Each rank's arrival is now a key of its own, sealed with the run's secret."""
    monkeypatch.setenv("HCCL_PY_SECRET", "s" * 64)
    store = dist.HashStore()
    group = Group([0, 1], "dom")
    store.add("rendezvous/dom/0", 5)  # what a counter-based wait would have counted
    part = _window_part(0, store)
    part.host.config.timeout = 0.05
    with pytest.raises(hp.HcclTimeoutError, match="not every rank of domain dom made"):
        part.meet(group, "0", "rank 0 waits for handle 0 AlltoAllvWrite")
    store.set("rendezvous/dom/0/1", b"hccl_py/1 json - true")  # unsigned: not rank 1's
    with pytest.raises(
        ForgedValueError, match="refused the value of store key 'rendezvous/dom/0/1'"
    ):
        part.meet(group, "0", "rank 0 waits for handle 0 AlltoAllvWrite")
