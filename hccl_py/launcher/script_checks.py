"""Clear messages for two script mistakes that multiprocessing reports badly.

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
import os
import sys
import sysconfig


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
