"""The suite's bytecode, written once when Python is told not to write any.

With ``PYTHONDONTWRITEBYTECODE`` set (as on machines whose image sets it), no
interpreter caches what it compiles, so each of the several hundred that the
suite starts (launched jobs, samples, ``hp.run`` rank processes importing a
test module) compiles hccl_py and the test helpers from source again: about
0.2 CPU-seconds each, some 40 CPU-seconds a run on 2 cores, and each xdist
worker rewrites every test module's asserts again. The session compiles them
once before the workers start (the test modules as pytest's rewriting hook
reads them back), and removes exactly the files it wrote when it ends, so the
checkout is left as it was found.
"""

from __future__ import annotations

import contextlib
import importlib.util
import py_compile
from pathlib import Path
from typing import Any

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


def test_modules(args: list[str], cwd: Path) -> list[Path]:
    """The test modules that a session of pytest ``args`` (files, folders, ``file::test``)
    collects, and the ``conftest.py`` files of their folders."""
    found: set[Path] = set()
    for arg in args:
        path = (cwd / arg.split("::", 1)[0]).resolve()
        if path.is_dir():
            found.update(path.rglob("test_*.py"))
            found.update(path.rglob("conftest.py"))
        elif path.suffix == ".py" and path.is_file():
            found.update([path, *[c for c in [path.parent / "conftest.py"] if c.is_file()]])
    return sorted(found)


def write_rewritten(config: Any, sources: list[Path]) -> list[Path]:
    """Write pytest's assertion-rewritten bytecode of the test modules ``sources`` where it is
    missing (:func:`test_modules`: only what the session collects).

    Every xdist worker imports every test module through pytest's rewriting hook,
    which reads such a file when one is there and writes none under
    ``PYTHONDONTWRITEBYTECODE``: without it each worker parses and rewrites them all
    again (about 6 CPU-seconds a worker). The files are pytest's own (its cache
    folder and name, its writer), created exclusively; returns the files written, for
    :func:`remove`. Without those names (another pytest) nothing is written.
    """
    try:
        from _pytest.assertion import rewrite

        cache_dir, tail = rewrite.get_cache_dir, rewrite.PYC_TAIL
        rewritten, write = rewrite._rewrite_test, rewrite._write_pyc_fp
    except (ImportError, AttributeError):
        return []
    written = []
    for source in sources:
        cached = cache_dir(source) / (source.name[:-3] + tail)
        if cached.exists():
            continue
        with contextlib.suppress(SyntaxError, OSError):
            stat, code = rewritten(source, config)
            cached.parent.mkdir(exist_ok=True)
            with open(cached, "xb") as out:
                written.append(cached)  # removed at the end even if writing it fails
                write(out, stat, code)
    return written


def remove(written: list[Path]) -> None:
    """Remove the files :func:`write_missing` wrote, and their folders once empty."""
    for cached in written:
        cached.unlink(missing_ok=True)
    for folder in sorted({cached.parent for cached in written}, reverse=True):
        with contextlib.suppress(OSError):
            folder.rmdir()
