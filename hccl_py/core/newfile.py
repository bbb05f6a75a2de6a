"""Output files created new: never over an existing file, never through a symbolic link."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

#: Flags of a new output file: it must not exist, and a link at its path is not followed.
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | os.O_CLOEXEC


def exists_message(what: str, path: str | Path) -> str:
    """Why ``path`` (for ``what``) cannot be written: something is there already."""
    return (
        f"{what} {str(path)!r} exists; hccl_py creates its output files new (it never "
        "overwrites a file or writes through a link): remove it or choose another path"
    )


#: The files this process created, by absolute path: their identity as it left them (a file
#: made again or rewritten at the path, even on the same inode, differs).
_MINE: dict[str, tuple[int, ...]] = {}


def _identity(st: os.stat_result) -> tuple[int, ...]:
    """A file as this process left it: the change time too, which no one can set back."""
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def is_mine(path: str | Path) -> bool:
    """Whether ``path`` is a regular file (not a link) this process created and left as it is,
    which it may replace: a second ``hp.run`` with the same trace path writes it again."""
    key = os.path.abspath(path)
    try:
        st = os.lstat(key)
    except OSError:
        return False
    return _MINE.get(key) == _identity(st) and os.path.isfile(key)


@contextlib.contextmanager
def create_new(path: str | Path, what: str = "output") -> Iterator[BinaryIO]:
    """``path`` opened for writing as a new file (mode 0666 less the umask), its folder made;
    a FileExistsError that says so when anything (a file, a link) is at ``path``, unless it
    is a file this process created (:func:`is_mine`), which is replaced. If the writing fails
    (a full disk, an exception of the caller's), the file is removed, not left truncated."""
    out, key = Path(path), os.path.abspath(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd = -1
    if is_mine(key):
        fd = os.open(key, os.O_WRONLY | _NOFOLLOW | os.O_CLOEXEC)
        if _MINE.get(key) != _identity(os.fstat(fd)):  # replaced meanwhile: not ours to write
            os.close(fd)
            fd = -1
        else:
            os.ftruncate(fd, 0)
    if fd < 0:
        try:
            fd = os.open(out, _FLAGS, 0o666)
        except FileExistsError:
            raise FileExistsError(exists_message(what, path)) from None
    with os.fdopen(fd, "wb") as f:
        try:
            yield f
            f.flush()
        except BaseException:  # a full disk, Ctrl-C: no truncated file stays under the name
            _remove_if_same(key, os.fstat(f.fileno()))
            raise
        _MINE[key] = _identity(os.fstat(f.fileno()))


def _remove_if_same(path: str, st: os.stat_result) -> None:
    """Remove ``path`` if it is still the file ``st`` (not one that replaced it meanwhile)."""
    _MINE.pop(path, None)
    with contextlib.suppress(OSError):
        now = os.lstat(path)
        if (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino):
            os.unlink(path)


def write_new(path: str | Path, data: bytes, what: str = "output") -> None:
    """Write ``data`` to ``path`` as a new file (:func:`create_new`)."""
    with create_new(path, what) as f:
        f.write(data)
