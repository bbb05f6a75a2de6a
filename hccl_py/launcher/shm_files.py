"""Where the gloo ranks' window files live, and removing those that a killed job left behind.

The files themselves are created and shared by
:mod:`hccl_py.backends.dist.shm_windows`; this module holds what the launchers need
too: their folder and name prefix, the job token that ``hp.run`` and the
runner hand their ranks (:data:`TOKEN_ENV`), and the removal of a job's files
(by the launcher when its ranks have ended, by a rank forced to exit).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import tempfile
from collections.abc import Iterable

from .liveness import on_forced_exit

#: Where window files go: shared memory where the system has it.
SHM_DIR = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()  # noqa: S108
#: Names of window files: ``hccl_py-<job token>-<run>-<random>``.
FILE_PREFIX = "hccl_py-"
#: Set by hp.run and the runner for the ranks they start: the job's token in window file
#: names, so that they can remove the files of ranks that were killed.
TOKEN_ENV = "HCCL_PY_SHM_TOKEN"
#: Files this process created and has not seen removed (removed when it is forced to exit).
_created: set[str] = set()


def new_token() -> str:
    """A token for the window files of a job started by hp.run or the runner."""
    return secrets.token_hex(8)


def note_created(path: str) -> None:
    """This process created the window file ``path`` (see :func:`remove_created`)."""
    _created.add(path)


def remove_files(paths: Iterable[str]) -> None:
    """Unlink window files (those already gone are skipped)."""
    for path in paths:
        with contextlib.suppress(OSError):
            os.unlink(path)
        _created.discard(path)


def remove_created() -> None:
    """Remove the window files this process created and has not seen removed (forced exit)."""
    remove_files(list(_created))


def remove_job_files(token: str) -> None:
    """Remove the window files of the job ``token`` that remain (their ranks were killed).

    Only regular files of this user are removed; symbolic links are not followed.
    """
    head = f"{FILE_PREFIX}{token}-"
    with contextlib.suppress(OSError), os.scandir(SHM_DIR) as entries:
        mine = [
            e.path
            for e in entries
            if e.name.startswith(head)
            and e.is_file(follow_symlinks=False)
            and e.stat(follow_symlinks=False).st_uid == os.geteuid()
        ]
        remove_files(mine)


on_forced_exit(remove_created)
