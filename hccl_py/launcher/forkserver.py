"""multiprocessing's fork server, preloaded with torch and hccl_py: where rank processes come from.

Both ``hp.run`` (:mod:`.spawn`) and the runner (:mod:`.script`, through :mod:`.forked`)
start their rank processes from it when :func:`start_method` says so: a child forked
from a process that has imported numpy, torch and hccl_py once skips those imports
(about 2.5 CPU-seconds per rank).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Sequence
from multiprocessing import forkserver as mp_forkserver
from multiprocessing import util as mp_util
from typing import Any

from ..core import errors

#: Start method of the rank processes hp.run and the runner start ("forkserver" or "spawn").
START_METHOD_ENV = "HCCL_PY_START_METHOD"
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


def forkserver_fits() -> bool:
    """Whether the fork server's Unix socket path fits under multiprocessing's temporary folder.

    multiprocessing listens in a ``pymp-*`` folder under TMPDIR; under a long TMPDIR (a
    deeply nested test folder, say) the path is too long for a Unix socket and starting
    the fork server fails with a bare ``OSError: AF_UNIX path too long``.
    """
    return len(mp_util.get_temp_dir()) + LISTENER_NAME_LEN <= SOCKET_PATH_MAX


def start_method() -> str:
    """``$HCCL_PY_START_METHOD``, else the fork server on Linux where its socket path fits, else spawn."""
    asked = os.environ.get(START_METHOD_ENV)
    if asked == "forkserver" and not forkserver_fits():
        raise errors.HcclUsageError(
            f"{START_METHOD_ENV}=forkserver: the fork server's socket would be "
            f"{mp_util.get_temp_dir()}/listener-XXXXXXXX, longer than the {SOCKET_PATH_MAX} "
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
        base = [m for m in PRELOAD if main or m != "__main__"]
        extra = [m for m in os.environ.get(PRELOAD_ENV, "").split(",") if m]
        loaded = sorted(m for m in sys.modules if m.partition(".")[0] in PRELOAD_PACKAGES)
        worth = [m for m in WORTH_PRELOADING if m in sys.modules]
        ctx.set_forkserver_preload([*base, *worth, *loaded, *also, *extra])
    return ctx


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
