"""Preloaded last by the runner's fork server: the server leaves the runner's process group.

A signal to the runner's whole process group (``kill %1`` in a shell, GNU
``timeout``) would otherwise kill the fork server too. It is the parent of the
ranks and reports their exit codes: the runner would then read every rank as
"exited with code 255" and, taking them for ended, not stop the ranks (which
have sessions of their own, as fresh interpreters had). In a session of its
own the server outlives the signal; the runner stops the ranks, then the server.

Importing this module anywhere but in a fork server's preload does nothing.
"""

from __future__ import annotations

import os
import sys


def _imported_by_fork_server() -> bool:
    """Whether multiprocessing's fork server (its ``main``, preloading) imports this module."""
    server = os.path.join("multiprocessing", "forkserver.py")
    frame = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if code.co_name == "main" and code.co_filename.endswith(server):
            return True
        frame = frame.f_back
    return False


if _imported_by_fork_server():
    os.setsid()
