"""The runner's rank processes forked from the fork server, each made into ``python script args``.

``python -m hccl_py run --backend gloo script.py`` used to start every rank as
a fresh interpreter, which imported torch again (about 2.5 CPU-seconds per
rank). :func:`start` forks it from multiprocessing's fork server instead
(:func:`.forkserver.mp_context`, preloaded with numpy, torch and hccl_py), and
the child, :func:`become_script`, turns itself into what ``python script args``
would have been: a session of its own, the runner's pipes as stdout and stderr
(unbuffered, as ``PYTHONUNBUFFERED=1`` makes them) and the runner's stdin, the
rank's environment, ``sys.argv``, ``sys.path`` with the script's folder first,
the script run as a fresh ``__main__`` module, and Python's own exit: the
traceback of an uncaught exception as Python prints it and code 1,
``sys.exit(n)`` as n, an uncaught KeyboardInterrupt as death by SIGINT, non-daemon
threads joined and ``atexit`` functions run first.

What a fork cannot give: the interpreter options of the runner (``-X dev``,
``-W``, ``-O`` ...) apply to the ranks too, every rank has the runner's hash
seed (``PYTHONHASHSEED``) and the modules the fork server imported are already
imported; objects still alive at exit are not finalized (Python does not promise
that either).
"""

from __future__ import annotations

import atexit
import builtins
import contextlib
import ctypes
import importlib
import importlib.util
import io
import locale
import os
import signal
import sys
import threading
import tokenize
import traceback
import types
import zipfile
from dataclasses import dataclass
from importlib.machinery import SourceFileLoader
from multiprocessing import process
from multiprocessing.connection import Connection
from typing import IO, Any, NoReturn

from .liveness import PARENT_ENV, end_own_group, pid_alive, remove_orphan_dirs

#: Python's exit code when flushing stdout fails at exit.
FLUSH_FAILED = 120


@dataclass(frozen=True)
class ScriptRun:
    """What ``python script args`` would have had in a fresh interpreter."""

    #: ``sys.argv``: the script as given, then its arguments.
    argv: tuple[str, ...]
    #: The script's absolute path (:func:`absolute`): ``__file__``, the name in tracebacks.
    path: str
    env: dict[str, str]
    sys_path: tuple[str, ...]


def runs_forked(script: str) -> bool:
    """Whether a forked rank runs ``script`` as Python would: readable Python source.

    A Python whose multiprocessing lacks what a forked rank resets, a zip
    archive, a compiled ``.pyc``, a file this process cannot read, and
    source that does not decode in its declared encoding or has a NUL byte
    (which Python reports otherwise for a file than ``compile`` does) get a
    fresh interpreter, which runs (or refuses) them as Python does.
    """
    if script.endswith(".pyc") or not _internals_present():
        return False
    try:
        with open(script, "rb") as f:
            source = f.read()
        source.decode(tokenize.detect_encoding(io.BytesIO(source).readline)[0])
    except (OSError, SyntaxError, UnicodeDecodeError):
        return False
    return (
        b"\0" not in source
        and source[:2] != importlib.util.MAGIC_NUMBER[:2]
        and not zipfile.is_zipfile(io.BytesIO(source))
    )


def _internals_present() -> bool:
    """Whether multiprocessing has the private state :func:`_forget_the_fork_server` resets
    and the runner reads (:func:`.forkserver.fork_server_pid`, :func:`.forkserver.stop_fork_server`).

    It is CPython's own (checked on 3.11); where a version lacks a piece, ranks
    start as fresh interpreters instead.
    """
    from multiprocessing import context, forkserver, resource_tracker

    server = forkserver._forkserver
    return (
        hasattr(server, "_forkserver_alive_fd")
        and hasattr(server, "_forkserver_pid")
        and hasattr(server, "_stop")
        and hasattr(resource_tracker._resource_tracker, "_fd")
        and hasattr(process, "_current_process")
        and hasattr(process, "_parent_process")
        and hasattr(context._default_context, "_actual_context")
    )


def absolute(script: str) -> str:
    """The script's path as Python makes it absolute for ``__file__``: joined, not normalized."""
    return script if os.path.isabs(script) else os.getcwd() + os.sep + script


def script_sys_path(script: str, env: dict[str, str]) -> tuple[str, ...]:
    """``sys.path`` of ``python script`` started from this interpreter with ``env``.

    Python puts the script's real folder first (unless ``PYTHONSAFEPATH``) where
    this process has its own first entry (the current folder under ``-m``).
    """
    tail = sys.path if getattr(sys.flags, "safe_path", False) else sys.path[1:]
    head = [] if env.get("PYTHONSAFEPATH") else [os.path.dirname(os.path.realpath(script))]
    return (*head, *tail)


def start(
    ctx: Any, script: str, args: tuple[str, ...], env: dict[str, str], name: str
) -> tuple[Any, IO[bytes], IO[bytes]]:
    """Start ``python script *args`` with ``env`` from ``ctx``'s fork server.

    Returns the started ``multiprocessing.Process`` and the read ends of its
    stdout and stderr pipes; this process keeps no write end, so they reach EOF
    when the rank (and whatever it started) has ended.
    """
    run = ScriptRun((script, *args), absolute(script), dict(env), script_sys_path(script, env))
    pipes = [os.pipe(), os.pipe()]
    ends = [Connection(w, readable=False) for _, w in pipes]
    try:
        stdin = Connection(os.dup(0), writable=False)
    except OSError:  # this process has no stdin: neither has the rank
        stdin = None
    try:
        args = (run, _ServerStdin(), stdin, *ends)
        proc = ctx.Process(target=become_script, args=args, name=name)
        proc.start()
    except BaseException:
        for r, _ in pipes:
            os.close(r)
        raise
    finally:
        for end in (*ends, stdin):
            if end is not None:
                end.close()
    return proc, os.fdopen(pipes[0][0], "rb"), os.fdopen(pipes[1][0], "rb")


class _ServerStdin:
    """Unpickles, in the forked child, into the fd of the fork server's ``sys.stdin``.

    The fork server made that a /dev/null that it opened without closing (as
    multiprocessing does in its children, see :func:`_take_stdio`); the child
    unpickles its arguments before multiprocessing replaces ``sys.stdin`` again.
    """

    def __reduce__(self) -> tuple[Any, tuple]:
        return _stdin_fd, ()


def _stdin_fd() -> int | None:
    try:
        return sys.stdin.fileno()
    except (AttributeError, OSError, ValueError):
        return None


def become_script(
    run: ScriptRun,
    server_stdin: int | None,
    stdin: Connection | None,
    stdout: Connection,
    stderr: Connection,
) -> NoReturn:
    """The forked rank's main: become ``python script args``, run it and exit as Python would.

    ``server_stdin``: the fd of the fork server's stdin (:class:`_ServerStdin`),
    closed with the rest of what multiprocessing left in this process.
    """
    os.setsid()
    _forget_the_fork_server(server_stdin)
    _take_stdio(stdin, stdout, stderr, unbuffered=bool(run.env.get("PYTHONUNBUFFERED")))
    os.environ.clear()
    os.environ.update(run.env)
    sys.argv = list(run.argv)
    sys.orig_argv = [sys.executable, *run.argv]
    _show_as(sys.orig_argv)
    sys.path = list(run.sys_path)
    importlib.invalidate_caches()
    np_random = sys.modules.get("numpy.random")
    if np_random is not None:  # seeded in the fork server: each rank draws its own numbers
        np_random.seed()
    try:
        code = run_main(run.path)
    finally:  # whatever ended the script
        runner = os.environ.get(PARENT_ENV, "")
        if runner.isdigit() and not pid_alive(int(runner)):  # killed: its folders are left to us
            remove_orphan_dirs()
    exit_as_python(code, rank=True)


def _show_as(argv: list[str]) -> None:
    """Make ``ps`` (``/proc/self/cmdline``) show ``argv`` instead of the fork server's command.

    Writes over the fork server's arguments in this process's memory (their room
    is long: the preload list): where that fails, ``ps`` keeps the old line.
    """
    with contextlib.suppress(OSError, ValueError, IndexError):
        with open("/proc/self/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        start, end = int(fields[45]), int(fields[46])  # fields 48 and 49: arg_start, arg_end
        text = b"\0".join(os.fsencode(arg) for arg in argv)
        if start and end > start:
            with open("/proc/self/mem", "r+b", buffering=0) as mem:
                mem.seek(start)
                mem.write(text[: end - start - 1].ljust(end - start, b"\0"))


def run_main(path: str) -> int | None:
    """Run the file ``path`` as a fresh ``__main__`` module; the exit code Python would give.

    An uncaught exception is printed by ``sys.excepthook`` with the traceback
    starting in the script (code 1; None for a KeyboardInterrupt, which ends
    the process by SIGINT).
    """
    main = types.ModuleType("__main__")
    main.__annotations__ = {}
    main.__builtins__ = builtins
    main.__file__ = path
    main.__cached__ = None
    main.__loader__ = SourceFileLoader("__main__", path)
    sys.modules["__main__"] = main
    code = None
    try:
        with io.open_code(path) as f:
            source = f.read()
    except OSError as exc:
        print(
            f"{sys.executable}: can't open file {path!r}: [Errno {exc.errno}] {exc.strerror}",
            file=sys.stderr,
        )
        return 2
    try:
        code = compile(source, path, "exec", dont_inherit=True)
        exec(code, main.__dict__)
    except SystemExit as exc:
        return exit_code(exc)
    except BaseException as exc:  # noqa: BLE001 - printed as Python prints an uncaught one
        uncaught = exc
    else:
        return 0
    _print_uncaught(uncaught, code)  # outside the except: no exception is being handled
    return None if isinstance(uncaught, KeyboardInterrupt) else 1


def exit_as_python(code: int | None, rank: bool = False) -> NoReturn:
    """End the process as the interpreter would after its main module ended with ``code``.

    Joins non-daemon threads, runs the ``atexit`` functions, flushes stdout and
    stderr (code 120 when stdout cannot be flushed) and C's stdio buffers; with
    ``code`` None (an uncaught KeyboardInterrupt) the process then dies by SIGINT. A
    ``rank`` (which leads a session of its own) first ends what it left running there;
    the runner does not (its group may be a shell's pipeline).
    """
    try:
        threading._shutdown()  # what Python's finalization calls: waits for non-daemon threads
    except BaseException:  # noqa: BLE001 - Python reports it and goes on exiting
        traceback.print_exc()
    atexit._run_exitfuncs()
    if not _flush_std_files() and code is not None:
        code = FLUSH_FAILED
    with contextlib.suppress(OSError, AttributeError):  # output C libraries left in stdio buffers
        ctypes.CDLL(None).fflush(None)
    if rank:
        end_own_group()
    if code is None:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
        code = 128 + int(signal.SIGINT)  # what Python exits with where that signal did not kill
    os._exit(code & 0xFF)


def exit_code(exc: SystemExit) -> int:
    """The exit code of an uncaught SystemExit, its message printed as Python prints it."""
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code if -(2**63) <= exc.code < 2**63 else -1
    with contextlib.suppress(Exception):
        print(exc.code, file=sys.stderr)
    return 1


def _print_uncaught(exc: BaseException, code: types.CodeType | None) -> None:
    """Print ``exc`` through ``sys.excepthook`` with its traceback from the script's frame on."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code is not code:
        tb = tb.tb_next
    exc.__traceback__ = tb
    sys.last_type, sys.last_value, sys.last_traceback = type(exc), exc, tb
    try:
        sys.excepthook(type(exc), exc, tb)
    except BaseException as failure:  # noqa: BLE001 - Python reports both, as here
        failure.__traceback__ = failure.__traceback__.tb_next  # from the hook's frame on
        with contextlib.suppress(OSError, ValueError):  # stderr gone (its reader was killed)
            print("Error in sys.excepthook:", file=sys.stderr)
            sys.__excepthook__(type(failure), failure, failure.__traceback__)
            print("\nOriginal exception was:", file=sys.stderr)
            sys.__excepthook__(type(exc), exc, tb)


def _flush_std_files() -> bool:
    """Flush ``sys.stdout`` and ``sys.stderr`` as Python's finalization does; False if stdout failed."""
    ok = True
    for stream in (sys.stdout, sys.stderr):
        if stream is None or getattr(stream, "closed", False):
            continue
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - Python reports a failed stdout and exits with 120
            if stream is sys.stdout:
                ok = False
                print(f"Exception ignored in: {stream!r}", file=sys.stderr)
                traceback.print_exc()
    return ok


def _forget_the_fork_server(server_stdin: int | None) -> None:
    """Make this child a main process again, as a fresh interpreter is.

    multiprocessing made it a child Process: it named it, recorded its parent,
    fixed the start method to the fork server's (a script's own
    ``set_start_method`` would fail) and left it the fork server's "alive" pipe
    and the resource tracker's pipe (which would keep those alive as long as
    this rank), its parent's sentinel and the fork server's /dev/null stdin.
    """
    from multiprocessing import context, forkserver, resource_tracker

    server = forkserver._forkserver
    tracker = resource_tracker._resource_tracker
    parent = process.parent_process()
    stale = [server._forkserver_alive_fd, tracker._fd, getattr(parent, "_sentinel", None)]
    if server_stdin is not None and server_stdin > 2:
        stale.append(server_stdin)
    for fd in stale:
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)
    server._forkserver_alive_fd = None
    server._inherited_fds = None
    tracker._fd = None
    process._current_process = _MainProcess()
    process._parent_process = None
    context._default_context._actual_context = None
    sys.modules.pop("__mp_main__", None)  # the runner's main script, if it was started as one


class _MainProcess(process.BaseProcess):
    """``multiprocessing.current_process()`` of a fresh interpreter (the standard library
    deletes its own class of that name once it made that object)."""

    def __init__(self) -> None:
        self._identity = ()
        self._name = "MainProcess"
        self._parent_pid = None
        self._popen = None
        self._closed = False
        self._config = {"authkey": process.AuthenticationString(os.urandom(32)), "semprefix": "/mp"}

    def close(self) -> None:
        """The main process has nothing to close."""


def _take_stdio(
    stdin: Connection | None, stdout: Connection, stderr: Connection, unbuffered: bool
) -> None:
    """Make the runner's pipes (and stdin) this process's fds 0-2 and ``sys.std*`` over them."""
    like = (sys.__stdin__, sys.__stdout__, sys.__stderr__)
    with contextlib.suppress(AttributeError, OSError, ValueError):
        os.close(sys.stdin.fileno())  # multiprocessing's /dev/null, opened without closefd
    for fd, end in ((0, stdin), (1, stdout), (2, stderr)):
        if end is None:
            with contextlib.suppress(OSError):
                os.close(fd)
            continue
        os.dup2(end.fileno(), fd)
        end.close()
    streams = [
        _std_stream(fd, like[fd], unbuffered) if fd or stdin is not None else None
        for fd in range(3)
    ]
    sys.stdin, sys.stdout, sys.stderr = streams
    sys.__stdin__, sys.__stdout__, sys.__stderr__ = streams


def _std_stream(fd: int, like: Any, unbuffered: bool) -> io.TextIOWrapper:
    """A standard stream on ``fd`` made as Python makes it at start-up (``create_stdio``).

    Encoding and errors are those of ``like`` (the fork server's stream: the same
    environment and locale), else the locale's.
    """
    write = fd != 0
    raw_only = write and unbuffered
    buffer = open(fd, "wb" if write else "rb", 0 if raw_only else -1, closefd=False)  # noqa: SIM115
    raw = buffer if raw_only else buffer.raw
    raw.name = ("<stdin>", "<stdout>", "<stderr>")[fd]
    encoding = getattr(like, "encoding", None) or locale.getpreferredencoding(False)
    errors = getattr(like, "errors", None) or ("backslashreplace" if fd == 2 else "strict")
    line_buffering = not unbuffered and (raw.isatty() or fd == 2)
    stream = io.TextIOWrapper(buffer, encoding, errors, "\n", line_buffering, unbuffered)
    stream.mode = "w" if write else "r"
    return stream
