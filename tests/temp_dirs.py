"""Temporary folders of the test session that a killed session does not leave behind.

A session killed with SIGKILL runs no ``atexit`` handler and no fixture's
``finally``: its folders stay. Each folder's name carries the pid of the session
that made it (``<prefix><pid>-<random>``), and making one removes this user's
folders of that prefix whose session no longer runs.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile

from hccl_py.launcher.liveness import pid_alive


def sweep(prefix: str, base: str | None = None) -> list[str]:
    """Remove this user's ``<prefix><pid>-*`` folders in ``base`` whose pid no longer runs."""
    base = base or tempfile.gettempdir()
    removed = []
    with contextlib.suppress(OSError), os.scandir(base) as entries:
        for entry in entries:
            pid, sep, _ = entry.name[len(prefix) :].partition("-")
            if not (entry.name.startswith(prefix) and sep and pid.isdigit()):
                continue
            if not entry.is_dir(follow_symlinks=False):
                continue
            if entry.stat(follow_symlinks=False).st_uid != os.geteuid() or pid_alive(int(pid)):
                continue
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(entry.name)
    return removed


def owned_temp(prefix: str, base: str | None = None) -> str:
    """A new folder ``<prefix><this pid>-<random>``, after sweeping those of dead sessions."""
    sweep(prefix, base)
    return tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-", dir=base)
