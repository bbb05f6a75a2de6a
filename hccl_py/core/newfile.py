"""Output files created new: never over an existing file, never through a symbolic link."""

from __future__ import annotations

import os
from pathlib import Path
from typing import BinaryIO

#: Flags of a new output file: it must not exist, and a link at its path is not followed.
_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | os.O_CLOEXEC


def exists_message(what: str, path: str | Path) -> str:
    """Why ``path`` (for ``what``) cannot be written: something is there already."""
    return (
        f"{what} {str(path)!r} exists; hccl_py creates its output files new (it never "
        "overwrites a file or writes through a link): remove it or choose another path"
    )


def create_new(path: str | Path, what: str = "output") -> BinaryIO:
    """``path`` opened for writing as a new file (mode 0666 less the umask), its folder made;
    a FileExistsError that says so when anything (a file, a link) is at ``path``."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(out, _FLAGS, 0o666)
    except FileExistsError:
        raise FileExistsError(exists_message(what, path)) from None
    return os.fdopen(fd, "wb")


def write_new(path: str | Path, data: bytes, what: str = "output") -> None:
    """Write ``data`` to ``path`` as a new file (:func:`create_new`)."""
    with create_new(path, what) as f:
        f.write(data)
