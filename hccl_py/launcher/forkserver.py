"""multiprocessing's fork server, preloaded with torch and hccl_py: where rank processes come from.

Both ``hp.run`` (:mod:`.spawn`) and the runner (:mod:`.script`, through :mod:`.forked`)
start their rank processes from it when :func:`start_method` says so: a child forked
from a process that has imported numpy, torch and hccl_py once skips those imports
(about 2.5 CPU-seconds per rank).
"""

from __future__ import annotations

import contextlib
import inspect
import os
import signal
import socket
import sys
import tempfile
import threading
import warnings
from collections.abc import Sequence
from multiprocessing import connection as mp_connection
from multiprocessing import forkserver as mp_forkserver
from multiprocessing import process as mp_process
from multiprocessing import resource_tracker
from multiprocessing import util as mp_util
from typing import Any

from ..core import errors

#: Start method of the rank processes hp.run and the runner start (:data:`START_METHODS`).
START_METHOD_ENV = "HCCL_PY_START_METHOD"
#: What it may name: multiprocessing's fork server, fresh interpreters, or a plain fork of
#: hp.run's process (the runner starts fresh interpreters for anything but the fork server).
START_METHODS = ("forkserver", "spawn", "fork")
#: Comma-separated modules the fork server imports once, besides :data:`PRELOAD`.
PRELOAD_ENV = "HCCL_PY_PRELOAD"
#: What the fork server imports before forking ranks ("__main__": the main script, as spawn would).
PRELOAD = ("__main__", "numpy", "torch", "torch.distributed")
#: Heavy modules preloaded too when this process uses them (test modules import them), and
#: the packages whose loaded modules are preloaded too: hccl_py's own (the backend's server,
#: the client ...), which each rank would otherwise import again (about 0.2 s per rank and run).
WORTH_PRELOADING = ("pytest", "hypothesis")
PRELOAD_PACKAGES = ("hccl_py",)


#: The longest path a Unix socket may have (``sun_path`` holds 108 bytes with the final NUL).
SOCKET_PATH_MAX = 107
#: What the fork server's socket name adds to multiprocessing's folder: "/listener-" and 8 letters.
LISTENER_NAME_LEN = len("/listener-") + 8


def socket_folder() -> str:
    """multiprocessing's ``pymp-*`` folder, where the fork server listens; before this process
    has made it, a name as long as it will have, without making it: a process killed before
    its first rank starts would leave the folder behind, with nothing of its run to remove it."""
    made = mp_process.current_process()._config.get("tempdir")
    if made:
        return made
    base = getattr(mp_util, "_get_base_temp_dir", None)  # newer Pythons: /tmp for a long TMPDIR
    return os.path.join(tempfile.gettempdir() if base is None else base(tempfile), "pymp-XXXXXXXX")


def forkserver_fits() -> bool:
    """Whether the fork server's Unix socket path fits under multiprocessing's temporary folder.

    multiprocessing listens in a ``pymp-*`` folder under TMPDIR; under a long TMPDIR (a
    deeply nested test folder, say) the path is too long for a Unix socket and starting
    the fork server fails with a bare ``OSError: AF_UNIX path too long``.
    """
    return len(socket_folder()) + LISTENER_NAME_LEN <= SOCKET_PATH_MAX


def start_method() -> str:
    """``$HCCL_PY_START_METHOD`` (one of :data:`START_METHODS`), else the fork server on Linux
    where its socket path fits, else spawn."""
    asked = os.environ.get(START_METHOD_ENV)
    if asked and asked not in START_METHODS:
        raise errors.HcclUsageError(
            f"{START_METHOD_ENV} must be one of {', '.join(START_METHODS)}, not {asked!r}"
        )
    if asked == "forkserver" and not forkserver_fits():
        raise errors.HcclUsageError(
            f"{START_METHOD_ENV}=forkserver: the fork server's socket would be "
            f"{socket_folder()}/listener-XXXXXXXX, longer than the {SOCKET_PATH_MAX} "
            "characters a Unix socket path may have; set TMPDIR to a shorter folder, or "
            f"{START_METHOD_ENV}=spawn"
        )
    if asked:
        return asked
    return "forkserver" if sys.platform.startswith("linux") and forkserver_fits() else "spawn"


def mp_context(main: bool = True, also: Sequence[str] = ()) -> Any:
    """torch.multiprocessing's context for :func:`start_method`.

    For the fork server it also sets what the server imports once when this
    process starts it (one server per process: later calls change nothing once
    it runs): :data:`PRELOAD` (without ``"__main__"`` unless ``main``: the
    runner's ranks run another script than the runner's), the heavy modules and
    hccl_py modules this process has loaded, ``also`` and ``$HCCL_PY_PRELOAD``.
    """
    import torch.multiprocessing as mp

    method = start_method()
    ctx = mp.get_context(method)
    if method == "forkserver":
        revive_socket_folder()
        base = [m for m in PRELOAD if main or m != "__main__"]
        extra = [m for m in os.environ.get(PRELOAD_ENV, "").split(",") if m]
        loaded = sorted(m for m in sys.modules if m.partition(".")[0] in PRELOAD_PACKAGES)
        worth = [m for m in WORTH_PRELOADING if m in sys.modules]
        ctx.set_forkserver_preload([*base, *worth, *loaded, *also, *extra])
    return ctx


def revive_socket_folder() -> None:
    """Make multiprocessing's ``pymp-*`` folder of this process again if something removed it
    (a cleaner of the temporary folder, during a long session), and stop the fork server that
    listened there: the next start starts a new one, as the first did.

    Before, every later start failed with a bare ``FileNotFoundError``. The folder is made
    new (mode 0700); a path that something else took meanwhile is refused, naming it.
    """
    folder = mp_process.current_process()._config.get("tempdir")
    server = mp_forkserver._forkserver
    address = getattr(server, "_forkserver_address", None)
    if folder is None or (os.path.isdir(folder) and (address is None or os.path.exists(address))):
        return
    stop_fork_server()
    try:
        os.mkdir(folder, 0o700)
    except FileExistsError:
        st = os.lstat(folder)
        if not (os.path.isdir(folder) and not os.path.islink(folder) and st.st_uid == os.geteuid()):
            raise errors.HcclRunnerStartError(
                f"multiprocessing's folder {folder} of this process was removed, and something "
                "else took its path: the fork server cannot listen there; start a new process"
            ) from None
    except OSError as exc:
        raise errors.HcclRunnerStartError(
            f"multiprocessing's folder {folder} of this process was removed and cannot be made "
            f"again ({exc.strerror}): start a new process"
        ) from None


def fork_server_pid() -> int | None:
    """The pid of this process's fork server, None while it has none running."""
    return mp_forkserver._forkserver._forkserver_pid


def stop_fork_server() -> None:
    """End this process's fork server now; the next start starts a new one.

    Left to itself it ends when this process does, running the clean-up of an
    interpreter with torch loaded first (about a CPU-second); killed, it has
    nothing to clean up. multiprocessing's own stop then reaps it and removes
    its socket.
    """
    pid = fork_server_pid()
    if pid is None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(OSError):
        mp_forkserver._forkserver._stop()


#: The parameters of multiprocessing's fork server ``main`` that :func:`fork_as_server` calls
#: (CPython 3.11 and 3.12; later versions add an authentication key, and get the exec'd server).
SERVER_MAIN_PARAMETERS = ("listener_fd", "alive_r", "preload", "main_path", "sys_path")


def can_fork_as_server() -> bool:
    """Whether :func:`fork_as_server` may make this process's fork server a fork of it.

    Only while no other Python thread runs here (a fork copies the calling
    thread alone, with whatever locks the others held) and where
    multiprocessing's fork server is the one it was written against.
    """
    server = mp_forkserver._forkserver
    return (
        threading.active_count() == 1
        and tuple(inspect.signature(mp_forkserver.main).parameters) == SERVER_MAIN_PARAMETERS
        and all(
            hasattr(server, name) for name in ("_lock", "_preload_modules", "_forkserver_address")
        )
        and hasattr(resource_tracker._resource_tracker, "_fd")
    )


def fork_as_server() -> bool:
    """Start this process's fork server (:func:`mp_context`'s) as a fork of this process.

    multiprocessing starts it as a fresh interpreter, which imports torch again
    (about 2.5 CPU-seconds); the runner has imported it already, so its fork
    serves the ranks as well, at the cost of a fork. The fork runs
    multiprocessing's own server loop: it imports the preload modules this
    process lacks, then serves and reaps the ranks, and the runner talks to it
    (and stops it) exactly as to the exec'd one. Returns False, starting
    nothing, when a server runs already, :func:`can_fork_as_server` says no or
    the fork fails.
    """
    server = mp_forkserver._forkserver
    if not can_fork_as_server():
        return False
    with server._lock:
        if server._forkserver_pid is not None:
            return False
        resource_tracker.ensure_running()
        for stream in (sys.stdout, sys.stderr):  # else the fork would write it out again
            with contextlib.suppress(Exception):
                stream.flush()
        with socket.socket(socket.AF_UNIX) as listener:
            address = mp_connection.arbitrary_address("AF_UNIX")
            listener.bind(address)
            os.chmod(address, 0o600)
            listener.listen()
            alive_r, alive_w = os.pipe()
            # Ctrl-C waits until the fork is done: one that lands in the fork's hooks in this
            # process is printed as "ignored" and lost (the run went on and exited 0)
            mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
            try:
                with warnings.catch_warnings():
                    # Python 3.12+ warns of a fork with native threads: torch keeps one, idle,
                    # exactly as in the exec'd server that forks every rank after importing torch
                    warnings.simplefilter("ignore", DeprecationWarning)
                    pid = os.fork()
                if pid == 0:  # the runner's SIGTERM handler is not the ranks': as if exec'd
                    signal.signal(signal.SIGTERM, signal.SIG_DFL)
                else:  # recorded before a pending SIGTERM is raised: stop_fork_server finds it
                    os.close(alive_r)
                    server._forkserver_address = address
                    server._forkserver_alive_fd = alive_w
                    server._forkserver_pid = pid
            except OSError:  # no process to spare now: multiprocessing's own server will try
                os.close(alive_r)
                os.close(alive_w)
                with contextlib.suppress(OSError):
                    os.unlink(address)
                return False
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # a pending one is raised here
            if pid == 0:
                _serve(listener.fileno(), alive_r, list(server._preload_modules))
    return True


def _serve(listener_fd: int, alive_r: int, preload: list[str]) -> None:
    """In the fork: keep only stdio and the server's two fds, then run multiprocessing's server."""
    code = 1
    try:
        keep = {0, 1, 2, listener_fd, alive_r}
        for fd in [int(name) for name in os.listdir("/proc/self/fd")]:
            if fd not in keep:
                with contextlib.suppress(OSError):
                    os.close(fd)
        resource_tracker._resource_tracker._fd = None  # the runner's, closed above
        mp_forkserver.main(listener_fd, alive_r, [m for m in preload if m != "__main__"])
        code = 0
    except SystemExit as exc:  # the server's loop ends so when the runner closes its pipe
        code = 0 if exc.code is None else 1
    except BaseException:  # noqa: BLE001 - reported as the exec'd server would
        sys.excepthook(*sys.exc_info())
    finally:
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        os._exit(code)
