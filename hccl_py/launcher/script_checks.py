"""Clear messages for script mistakes that Python or multiprocessing report badly.

A script path that is no Python file (missing, a folder, binary data):
:func:`script_problem` says so before the runner starts anything.

A script named like a standard-library module (``queue.py``, ``signal.py``):

Python puts the script's folder first on ``sys.path``, so when torch (or the
rank processes that the gloo backend starts) imports the standard module of
that name, it gets the script instead, which imports hccl_py half-way through
torch's own import. The result is a circular-import traceback deep inside
torch that says nothing about the cause; this module names it. Imports nothing
but the standard library, so it can run before torch.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import sys
import sysconfig
import tokenize
import zipfile

#: How much of a script :func:`script_problem` reads to tell source from binary data.
HEAD_BYTES = 1 << 16


def _undecodable(path: str) -> str | None:
    """Why the bytes of ``path`` are no text in the encoding Python reads it in (its coding
    line's, else UTF-8), or None."""
    encoding = "utf-8"
    try:
        with open(path, "rb") as f:
            encoding, _ = tokenize.detect_encoding(f.readline)
            f.seek(0)
            f.read().decode(encoding)
    except (SyntaxError, UnicodeDecodeError, LookupError) as exc:
        return f"is not a Python source file (its bytes are no {encoding} text: {exc})"
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    return None


def script_problem(path: str) -> str | None:
    """Why Python cannot run ``path`` as a script (missing, a folder, unreadable, binary), or None.

    A zip archive, a compiled ``.pyc`` and a folder holding ``__main__.py`` run
    (Python runs them too); a file with a NUL byte otherwise is binary data or
    text saved as UTF-16, which Python refuses as source.
    """
    if os.path.isdir(path):
        if os.path.isfile(os.path.join(path, "__main__.py")):
            return None
        what = "is a directory without __main__.py"
    elif not os.path.exists(path):
        what = "does not exist"
    elif not os.path.isfile(path):
        what = "is not a regular file"
    else:
        try:
            with open(path, "rb") as f:
                head = f.read(HEAD_BYTES)
        except OSError as exc:
            what = f"cannot be read ({exc.strerror or exc})"
        else:
            compiled = path.endswith(".pyc") or head[:2] == importlib.util.MAGIC_NUMBER[:2]
            if compiled or zipfile.is_zipfile(path):
                return None
            if b"\0" in head:
                what = (
                    "is not a Python source file (it holds NUL bytes: binary data, or UTF-16 text)"
                )
            else:
                what = _undecodable(path)
                if what is None:
                    return None
    return (
        f"the script {path!r} {what}; give the path of a Python file (relative to the current "
        "directory or absolute)"
    )


def shadowing_script() -> str | None:
    """The path of the main script when it is imported in place of a standard module."""
    path = getattr(sys.modules.get("__main__"), "__file__", None)
    if not path:
        return None
    stem = os.path.splitext(os.path.basename(path))[0]
    shadow = sys.modules.get(stem)
    if stem not in sys.stdlib_module_names or shadow is None or _in_stdlib(path):
        return None
    shadow_path = getattr(shadow, "__file__", None)
    if shadow_path and os.path.realpath(shadow_path) == os.path.realpath(path):
        return path
    return None


def _in_stdlib(path: str) -> bool:
    """Whether ``path`` is the standard library's own file (``python -m timeit`` runs it as main)."""
    stdlib = os.path.realpath(sysconfig.get_paths()["stdlib"])
    return os.path.dirname(os.path.realpath(path)) == stdlib


def check_script_name() -> None:
    """Raise ImportError when the main script shadows a standard-library module."""
    path = shadowing_script()
    if path is None:
        return
    name = os.path.basename(path)
    stem = os.path.splitext(name)[0]
    raise ImportError(
        f"your script {name} has the name of Python's standard module {stem!r}: Python puts "
        f"the script's folder first on sys.path, so 'import {stem}' (done by torch and by "
        f"hccl_py's rank processes) loads your script instead. Rename the script (e.g. "
        f"my_{name}) and delete any {stem}.pyc / __pycache__ entry next to it"
    )


def _is_main_guard(node: ast.stmt) -> bool:
    if not isinstance(node, ast.If) or not isinstance(node.test, ast.Compare):
        return False
    sides = [node.test.left, *node.test.comparators]
    names = {s.id for s in sides if isinstance(s, ast.Name)}
    values = {s.value for s in sides if isinstance(s, ast.Constant)}
    return names == {"__name__"} and values == {"__main__"}


def unguarded_call() -> str | None:
    """``script.py:12`` when the main script's top-level code calls us outside its main guard."""
    frame = sys._getframe(1)
    while frame is not None and not (
        frame.f_code.co_name == "<module>" and frame.f_globals.get("__name__") == "__main__"
    ):
        frame = frame.f_back
    path = getattr(sys.modules.get("__main__"), "__file__", None)
    if frame is None or not path or frame.f_code.co_filename != path:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, ValueError):
        return None
    line = frame.f_lineno
    guarded = any(
        _is_main_guard(node) and node.lineno <= line <= (node.end_lineno or node.lineno)
        for node in tree.body
    )
    return None if guarded else f"{os.path.basename(path)}:{line}"
