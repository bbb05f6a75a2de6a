"""The suite's bytecode, written once when Python is told not to write any.

With ``PYTHONDONTWRITEBYTECODE`` set (as on machines whose image sets it), no
interpreter caches what it compiles, so each of the several hundred that the
suite starts (launched jobs, samples, ``hp.run`` rank processes importing a
test module) compiles hccl_py and the test helpers from source again: about
0.2 CPU-seconds each, some 40 CPU-seconds a run on 2 cores. The session
compiles them once before the workers start, and removes exactly the files it
wrote when it ends, so the checkout is left as it was found.
"""

from __future__ import annotations

import contextlib
import importlib.util
import py_compile
from pathlib import Path

#: Source folders of the project that the suite's processes import from.
SOURCE_DIRS = ("hccl_py", "emu", "tests", "samples")


def write_missing(root: Path) -> list[Path]:
    """Compile every module under :data:`SOURCE_DIRS` that has no cached bytecode yet.

    Returns the files written, for :func:`remove`. A module that does not compile
    is left alone: importing it reports the error as it always would.
    """
    written = []
    for folder in SOURCE_DIRS:
        for source in sorted((root / folder).rglob("*.py")):
            cached = Path(importlib.util.cache_from_source(str(source)))
            if cached.exists():
                continue
            with contextlib.suppress(py_compile.PyCompileError, OSError):
                py_compile.compile(str(source), cfile=str(cached), doraise=True)
                written.append(cached)
    return written


def remove(written: list[Path]) -> None:
    """Remove the files :func:`write_missing` wrote, and their folders once empty."""
    for cached in written:
        cached.unlink(missing_ok=True)
    for folder in sorted({cached.parent for cached in written}, reverse=True):
        with contextlib.suppress(OSError):
            folder.rmdir()
