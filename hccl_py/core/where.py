"""Where the user's code is, in a traceback's text: the line a report points a porter at.

A rank's failure travels between processes with its traceback as text (a gloo rank's
outcome, the abort reason), so the line is found in that text: the innermost frame that is
neither hccl_py's nor torch's nor Python's own.
"""

from __future__ import annotations

import os
import re
import sys
import sysconfig

#: A frame line of a formatted traceback.
_FRAME = re.compile(r'^  File "(?P<path>[^"]+)", line (?P<line>\d+), in (?P<fn>.+)$', re.M)


def _library_folders() -> tuple[str, ...]:
    """Folders whose files are not the user's: hccl_py (its emulator too), torch, the stdlib."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    folders = [here, sysconfig.get_paths()["stdlib"]]
    for name in ("hccl_py.backends.emu", "torch"):
        module = sys.modules.get(name)
        folders += list(getattr(module, "__path__", []))
    return tuple(os.path.join(os.path.abspath(f), "") for f in folders)


def raise_site(traceback_text: str) -> str | None:
    """``file:line in function`` of the innermost user frame of ``traceback_text``, if any."""
    folders = _library_folders()
    site = None
    for match in _FRAME.finditer(traceback_text):
        path = match["path"]
        if path.startswith("<") or os.path.abspath(path).startswith(folders):
            continue
        site = f"{os.path.basename(path)}:{match['line']} in {match['fn']}"
    return site
