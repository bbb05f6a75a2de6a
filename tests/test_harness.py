"""The suite's own harness: the session's bytecode (tests/bytecode.py), written where missing
and only that removed, and the refusal of a pytest-xdist that cannot group (tests/conftest.py)."""

from __future__ import annotations

import importlib.util
import types
from pathlib import Path

import bytecode
import conftest
import pytest


def _cached(source: Path) -> Path:
    return Path(importlib.util.cache_from_source(str(source)))


def test_missing_bytecode_is_written_and_only_that_is_removed(tmp_path: Path) -> None:
    pkg = tmp_path / "hccl_py"
    (pkg / "sub").mkdir(parents=True)
    fresh = pkg / "sub" / "fresh.py"
    fresh.write_text("X = 1\n")
    kept = pkg / "kept.py"
    kept.write_text("Y = 2\n")
    broken = pkg / "broken.py"
    broken.write_text("def (:\n")
    kept_cache = _cached(kept)
    kept_cache.parent.mkdir()
    kept_cache.write_bytes(b"someone else's")

    written = bytecode.write_missing(tmp_path)

    assert written == [_cached(fresh)]
    assert _cached(fresh).read_bytes()[:4] == importlib.util.MAGIC_NUMBER
    assert not _cached(broken).exists()
    bytecode.remove(written)
    assert not _cached(fresh).parent.exists()
    assert kept_cache.read_bytes() == b"someone else's"


def test_rewritten_test_modules_are_written_where_missing_and_read_back(
    tmp_path: Path, pytestconfig: pytest.Config
) -> None:
    """What the session writes for the workers is what pytest's own hook reads back: a test
    module whose asserts are rewritten (an assertion error shows the compared values)."""
    from _pytest.assertion import rewrite

    (tmp_path / "test_fresh.py").write_text("def check(x):\n    assert x == 1\n")
    (tmp_path / "test_broken.py").write_text("def (:\n")
    (tmp_path / "helper.py").write_text("Y = 2\n")
    kept = tmp_path / "conftest.py"
    kept.write_text("")
    cached = {
        p.name: rewrite.get_cache_dir(p) / (p.name[:-3] + rewrite.PYC_TAIL)
        for p in (tmp_path / "test_fresh.py", tmp_path / "test_broken.py", kept)
    }
    cached["conftest.py"].parent.mkdir()
    cached["conftest.py"].write_bytes(b"someone else's")

    sources = bytecode.test_modules([str(tmp_path)], Path.cwd())
    assert sources == sorted([kept, tmp_path / "test_broken.py", tmp_path / "test_fresh.py"])
    one = bytecode.test_modules(["test_fresh.py::check"], tmp_path)  # and its folder's conftest
    assert one == [kept, tmp_path / "test_fresh.py"]
    written = bytecode.write_rewritten(pytestconfig, sources)

    assert written == [cached["test_fresh.py"]]
    code = rewrite._read_pyc(tmp_path / "test_fresh.py", cached["test_fresh.py"])
    namespace: dict = {}
    exec(code, namespace)  # noqa: S102 - the module written above
    with pytest.raises(AssertionError, match="assert 2 == 1"):
        namespace["check"](2)
    bytecode.remove(written)
    assert not cached["test_fresh.py"].exists()
    assert cached["conftest.py"].read_bytes() == b"someone else's"


@pytest.mark.parametrize(
    ("slots", "version", "refused"),
    [
        (("_id", "name"), "3.8.0", True),  # pytest 9.2's structured ids, xdist 3.8: #1386
        (("_id", "name"), "3.9.0", False),  # an xdist that may have fixed it is let through
        (("_id", "name"), "3.10.1", False),
        (("_nodeid", "name"), "3.8.0", False),  # pytest before 9.2
    ],
)
def test_an_xdist_that_cannot_group_is_refused(
    monkeypatch: pytest.MonkeyPatch, slots: tuple[str, ...], version: str, refused: bool
) -> None:
    monkeypatch.setitem(conftest.sys.modules, "xdist", types.SimpleNamespace(__version__=version))
    monkeypatch.setattr(pytest.Item, "__slots__", slots, raising=False)
    assert conftest._xdist_cannot_group() is refused
