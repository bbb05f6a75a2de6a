"""Run several samples one after the other in one process, each as ``python samples/X.py`` would.

``python tests/sample_batch.py samples/a.py samples/b.py`` (also under
``python -m hccl_py run``, torchrun or msrun) runs each sample as a fresh
``__main__`` with the samples folder first on ``sys.path`` and its own
``sys.argv``, shows warnings anew for each (a warning one sample gave is not
hidden in the next), and prints every line the sample wrote, to stdout or
stderr, as ``<sample>| <line>`` as soon as the line is complete, then
``<sample>| exit <code>``. One process pays for importing torch once instead
of once per sample; the lines keep samples apart even where ranks of a
launcher share one output, and a batch killed in a sample keeps the lines that
sample printed so far.
"""

from __future__ import annotations

import contextlib
import io
import os
import runpy
import sys
import threading
import traceback
import warnings

#: What a sample's lines start with in the batch's output: ``<sample>| ``.
SEPARATOR = "| "


class _Lines(io.TextIOBase):
    """A text stream that writes each complete line at once, as ``<sample>| <line>``."""

    def __init__(self, name: str, fd: int) -> None:
        super().__init__()
        self.name, self.fd = name, fd
        self.pending = ""
        self.lock = threading.Lock()  # emulated ranks may print from threads of their own

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        with self.lock:
            lines = (self.pending + text).splitlines(keepends=True)
            self.pending = ""
            # a last piece without its line end (or a "\r" whose "\n" may follow) waits
            if lines and (lines[-1].endswith("\r") or lines[-1].splitlines()[0] == lines[-1]):
                self.pending = lines.pop()
            for line in lines:
                self.emit(line.splitlines()[0])
        return len(text)

    def end(self, code: int) -> None:
        """Write what is left of an unfinished last line, then the sample's exit code."""
        if self.pending:
            self.emit(self.pending)
            self.pending = ""
        self.emit(f"exit {code}")

    def emit(self, line: str) -> None:
        # one write per line: ranks of a launcher share the pipe, and print() may write a
        # line and its newline apart (unbuffered output), which another rank's line splits
        os.write(self.fd, f"{self.name}{SEPARATOR}{line}\n".encode())


def run_one(path: str) -> int:
    """Run the sample at ``path`` as ``__main__``; print its prefixed lines; return its exit code."""
    sys.stdout.flush()
    lines = _Lines(os.path.basename(path), sys.stdout.fileno())
    code = 0
    argv, sys.argv = sys.argv, [path]
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    try:
        with (
            warnings.catch_warnings(),
            contextlib.redirect_stdout(lines),
            contextlib.redirect_stderr(lines),
        ):
            warnings.simplefilter("default")
            try:
                runpy.run_path(path, run_name="__main__")
            except SystemExit as done:
                code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
            except BaseException:  # noqa: BLE001 - reported like an uncaught exception, then go on
                traceback.print_exc()
                code = 1
    finally:
        sys.argv = argv
        sys.path.pop(0)
    lines.end(code)
    return code


def main(paths: list[str]) -> int:
    """Run every sample of ``paths``; the batch's own exit code is 0 unless a sample crashed it."""
    for path in paths:
        run_one(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
