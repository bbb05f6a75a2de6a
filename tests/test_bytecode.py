"""The session's bytecode (tests/bytecode.py): written where missing, and only that removed."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import bytecode


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
