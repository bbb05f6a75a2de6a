"""Whether a rank's process still lives: its pid on this host, its heartbeat in the store.

The one liveness judgement of the package: the ranks (while they wait for each
other), the supervisors and msrun's scheduler all ask :class:`Peers`.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import shutil
import signal
import socket
import sys
import threading
import time
from typing import Any

from ..core import errors
from . import store as kv

#: Seconds the other ranks get to stop by themselves after one rank failed, before they are killed.
GRACE_S = 3.0
#: How long the supervisor waits for a rank's stack dump, and how many of its lines it quotes.
STACK_WAIT_S = 1.0
STACK_LINES = 24
#: How often a live process bumps its heartbeat, and after how long without one it counts as dead.
HEARTBEAT_S = 0.5
STALE_S = 10.0


#: Set by hccl_py's runner and by hp.run for the rank processes they start: their pid.
PARENT_ENV = "HCCL_PY_PARENT_PID"
#: Folder where a rank process writes its Python stacks when its supervisor sends SIGUSR1.
STACKS_ENV = "HCCL_PY_STACK_DIR"
#: Folders of a job (os.pathsep-separated) that its rank processes remove when the process
#: that started them is killed: it cannot remove them itself (hp.run's store folder, the fork
#: server's socket folder).
ORPHAN_DIRS_ENV = "HCCL_PY_ORPHAN_DIRS"
#: Name prefixes of the only folders :func:`remove_orphan_dirs` removes.
ORPHAN_PREFIXES = ("hccl_py-", "pymp-")
_stack_files: list[Any] = []


def stack_file(folder: str, rank: int) -> str:
    return os.path.join(folder, f"stack-{rank}.txt")


def dump_stacks_on_request(rank: int) -> None:
    """Let the supervisor ask this process where its threads are (SIGUSR1, see :data:`STACKS_ENV`).

    A folder that cannot take the file (a variable set by hand to a missing folder) only
    costs the stacks in a hang report: the rank runs on without them.
    """
    folder = os.environ.get(STACKS_ENV)
    if not folder or not hasattr(signal, "SIGUSR1") or _stack_files:
        return
    try:
        out = open(stack_file(folder, rank), "x")  # noqa: SIM115 - open for the signal handler
    except OSError:
        return
    _stack_files.append(out)
    faulthandler.register(signal.SIGUSR1, file=out, all_threads=True)


def ask_stack(pid: int, folder: str, rank: int) -> str:
    """The Python stacks of rank process ``pid`` (which must have called dump_stacks_on_request)."""
    path = stack_file(folder, rank)
    try:
        os.kill(pid, signal.SIGUSR1)
    except (ProcessLookupError, AttributeError):
        return ""
    deadline = time.monotonic() + STACK_WAIT_S
    text, previous = "", None
    while time.monotonic() < deadline and (not text or text != previous):
        time.sleep(0.05)
        previous = text
        with contextlib.suppress(OSError), open(path) as f:
            text = f.read()
    # The signal runs in the main thread, where the rank's own code runs: its block only.
    main = text[text.find("Current thread") :] if "Current thread" in text else text
    lines = [line for line in main.splitlines() if line.strip()]
    return "\n".join(lines[:STACK_LINES])


_watching: set[int] = set()


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` runs on this host (a zombie, ended but not reaped, does not)."""
    return _pid_state(pid) == "alive"


def _pid_state(pid: int) -> str:
    """State of process ``pid`` on this host: "alive", "zombie" (ended, not reaped) or "gone"."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return "gone"
    except PermissionError:
        return "alive"
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return "zombie" if stat.read().rsplit(")", 1)[1].split()[0] == "Z" else "alive"
    except OSError:
        return "alive"


def watch_parent(rank: int | None) -> None:
    """Exit this rank process within a second of the process that started it dying (armed
    before the rank joins its store: a rank stuck joining a store that is gone ends too).

    Rank processes of ``hp.run`` (forked by multiprocessing's fork server) and
    of the runner would otherwise outlive a killed parent, blocked in a
    collective that never completes. Does nothing without :data:`PARENT_ENV`
    (under torchrun and msrun their own agents do this).
    """
    parent = starter()
    if parent is None or parent in _watching:
        return
    _watching.add(parent)

    def watch() -> None:
        while pid_alive(parent) and os.getppid() != 1:
            time.sleep(HEARTBEAT_S)
        leave_reparented(rank)

    threading.Thread(target=watch, name="hccl_py-parent-watch", daemon=True).start()


def starter() -> int | None:
    """The pid of the process that started this rank's run (:data:`PARENT_ENV`), if set."""
    raw = os.environ.get(PARENT_ENV, "")
    return int(raw) if raw.isdigit() else None


def leave_reparented(rank: int | None) -> None:
    """End this rank process, whose parent ended (:func:`leave_orphaned`): where the process
    that started the run lives (only a fork server between them ended), say so and leave its
    folders to it."""
    parent = starter()
    if parent is not None and pid_alive(parent):
        leave_orphaned(
            rank,
            "the process that forked this rank is gone (the process that started this run, "
            f"pid {parent}, lives on and removes its folders)",
            own_dirs=False,
        )
    gone = (
        "the parent process"
        if parent is None
        else f"the process that started this run (pid {parent})"
    )
    leave_orphaned(rank, f"{gone} is gone")


def leave_orphaned(rank: int | None, why: str, own_dirs: bool = True) -> None:
    """End this rank process, whose parent is gone: say ``why``, remove the run's folders, end
    what it started in its process group, exit 1.

    Whichever watch notices first (the parent's pid, or this process's parent
    changing), the run's temporary folders (:data:`ORPHAN_DIRS_ENV`) go with it, and so
    does what the rank's function started (:func:`end_own_group`): no supervisor is left
    to end them once this process is gone. ``own_dirs`` False: the process that made the
    folders lives (only a fork server between it and this rank ended) and removes them.
    """
    try:  # the parent may have held the other end of stderr: it can be gone too
        who = "a rank that had not joined yet" if rank is None else f"rank {rank}"
        print(f"hccl_py: {who}: {why}; exiting", file=sys.stderr, flush=True)
    finally:
        try:
            if own_dirs:
                remove_orphan_dirs()
            end_own_group()
        finally:
            os._exit(1)


def join_file_store(path: str, rank: int | None) -> Any:
    """The file store of ``hp.run`` at ``path`` (made before any rank started); where it is gone,
    the run was stopped while this rank was forked: end this process (:func:`leave_orphaned`).

    torch's ``FileStore`` would wait 5 minutes for a missing folder holding the GIL, so no
    watch of the parent could end the rank meanwhile (it and the fork server lived on).
    """
    if not os.path.exists(path):
        why = f"the run's store {path} is gone: the process that started this run stopped it"
        leave_orphaned(rank, f"{why} before this rank joined", own_dirs=False)
    return kv.file_store(path)


def remove_orphan_dirs() -> None:
    """Remove the folders of :data:`ORPHAN_DIRS_ENV`: the process that made them is gone.

    Only temporary folders of this user whose names hccl_py or multiprocessing chose
    (:data:`ORPHAN_PREFIXES`) are removed; several ranks may do it at once.
    """
    for folder in os.environ.get(ORPHAN_DIRS_ENV, "").split(os.pathsep):
        name = os.path.basename(folder.rstrip(os.sep))
        if not name.startswith(ORPHAN_PREFIXES):
            continue
        with contextlib.suppress(OSError):
            if os.lstat(folder).st_uid == os.getuid():
                shutil.rmtree(folder, ignore_errors=True)


class RankDiedError(errors.HcclError):
    """A rank's process ended without reporting an outcome (killed, crashed or exited early)."""

    how = ""


def rank_died(rank: int, how: str) -> RankDiedError:
    """The failure of ``rank``, which ``how`` ended ("was killed by SIGKILL") without a report."""
    first, _, where = how.partition("\n")
    error = RankDiedError(
        f"rank {rank} {first} before reporting an outcome"
        + (f"; its Python stacks then:\n{where}" if where else "")
    )
    error.how = how
    error.hccl_rank = rank
    return error


def exit_text(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


def process_state(where: str) -> str:
    """State of the process ``host|pid``: "alive", "zombie" (ended, not reaped), "gone" or "remote"."""
    host, _, pid = where.partition("|")
    if host != socket.gethostname() or not pid.isdigit():
        return "remote"
    return _pid_state(int(pid))


class Peers:
    """Whether the other ranks' processes still live, judged from the store.

    A rank on this host is gone when its process no longer runs; its heartbeat
    is not read, so a machine too loaded to run the heartbeat thread on time
    (or this process's own threads holding the interpreter) never makes a live
    rank look dead. A rank on another host is gone when neither of its heartbeats
    has moved for :data:`STALE_S` seconds: its process's own (a thread, which the
    rank's code starves while it holds the interpreter in one long C call) and,
    under hccl_py's runner, the one its host's runner writes while the process runs.
    """

    def __init__(self, store: Any) -> None:
        self.store = store
        self.beats: dict[int, tuple[tuple[int, bytes], float]] = {}

    def gone(self, rank: int) -> str | None:
        """How ``rank`` ended ("exited (killed or crashed)", ...), or None while it lives."""
        where = kv.pid_key(rank)
        if self.store.check([where]):
            state = process_state(self.store.get(where).decode(errors="replace"))
            if state in ("zombie", "gone"):
                return "exited (killed or crashed)"
            if state == "alive":
                return None  # its process runs on this host: slow (an overloaded machine), not dead
        now = time.monotonic()
        host_beat = kv.host_heartbeat_key(rank)
        beat = (
            int(self.store.add(kv.heartbeat_key(rank), 0)),
            self.store.get(host_beat) if self.store.check([host_beat]) else b"",
        )
        last = self.beats.get(rank)
        if last is None or last[0] != beat:
            self.beats[rank] = (beat, now)
        elif now - last[1] > STALE_S:
            return f"stopped responding for {STALE_S:g} s (killed?)"
        return None


def end_own_group() -> None:
    """SIGKILL the other processes of the process group this rank leads (its own session):
    what its script started and left running would outlive the run and hold its output
    pipes. Read from ``/proc`` while the rank is alive, so the group is certainly its own."""
    me = os.getpid()
    if os.getpgrp() == me:
        kill_group_members(me)


def kill_group_members(pgid: int) -> None:
    """SIGKILL every process of process group ``pgid`` (read from ``/proc``) but ``pgid``
    itself. Its leader's own call (:func:`end_own_group`), or its supervisor's once the
    leader ended (a rank killed by a signal cannot clean up): the group's number is not given
    to another process while it has members, so the processes found are the group's."""
    if not os.path.isdir("/proc"):
        return
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == pgid:
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            if int(fields[2]) == pgid:  # state, ppid, pgrp
                os.kill(int(name), signal.SIGKILL)
        except (OSError, ValueError, IndexError):  # gone meanwhile, or not readable
            continue
