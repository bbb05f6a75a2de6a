"""Where the user's code is: which frames are hccl_py's, torch's or Python's own, and the line
a report points a porter at.

A rank's failure travels between processes with its traceback as text (a gloo rank's
outcome, the abort reason), so :func:`raise_site` finds the line in that text: the innermost
frame that is neither hccl_py's nor a library's.
"""

from __future__ import annotations

import functools
import os
import re
import sys
import sysconfig

#: The hccl_py package folder: frames of files under it are hccl_py's, not the user's.
PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
#: A frame line of a formatted traceback.
_FRAME = re.compile(r'^  File "(?P<path>[^"]+)", line (?P<line>\d+), in (?P<fn>.+)$', re.M)


def _folder(path: str) -> str:
    return os.path.join(os.path.abspath(path), "")


@functools.cache
def _folders() -> tuple[tuple[str, ...], tuple[str, ...], str, tuple[str, ...]]:
    """(hccl_py's folders, torch's, the standard library's, the installed packages')."""
    emu = sys.modules.get("hccl_py.backends.emu")
    ours = (PACKAGE_DIR, *map(_folder, getattr(emu, "__path__", [])))
    torch = sys.modules.get("torch")
    paths = sysconfig.get_paths()
    return (
        ours,
        tuple(map(_folder, getattr(torch, "__path__", []))),
        _folder(paths["stdlib"]),
        (_folder(paths["purelib"]), _folder(paths["platlib"])),
    )


def ours(path: str) -> bool:
    """Whether ``path`` is one of hccl_py's files (its emulator's too)."""
    return os.path.abspath(path).startswith(_folders()[0])


def library(path: str) -> bool:
    """Whether ``path`` is torch's or Python's own code: frozen modules (``<frozen os>``) and
    the standard library's folder, but for the packages installed in it, whose code may be a
    kernel's (``<string>`` is code of the user's too)."""
    if path.startswith("<"):
        return path.startswith("<frozen ")
    path = os.path.abspath(path)
    _, torch, stdlib, installed = _folders()
    return path.startswith(torch) or (path.startswith(stdlib) and not path.startswith(installed))


def raise_site(traceback_text: str) -> str | None:
    """``file:line in function`` of the innermost frame of ``traceback_text`` in a file of the
    user's (not hccl_py's, not a library's, not code without a file), if any."""
    site = None
    for match in _FRAME.finditer(traceback_text):
        path = match["path"]
        if path.startswith("<") or ours(path) or library(path):
            continue
        site = f"{os.path.basename(path)}:{match['line']} in {match['fn']}"
    return site
