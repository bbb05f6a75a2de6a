"""Windows of gloo ranks on one host: one shared-memory file per rank window.

Every process maps the same file for a given window (``/dev/shm`` where it
exists), so a kernel's ``hp.gm_tensor`` writes into a peer's window reach the
peer's process, as on hardware; the files are sparse and the system commits
their pages only as they are written.

When a domain is created (the world at the start of a run, then every
``hp.new_group``) each member rank creates the files of its own two windows
under names nobody can guess (``O_CREAT | O_EXCL | O_NOFOLLOW``, mode 0600, 128
random bits), so that a file or a symbolic link planted in their place is
refused; it publishes the names through the run's store. Every member then
opens its peers' files (``O_NOFOLLOW``; owner, mode, size and link count
checked), maps them and counts itself in; the last one removes every file of
the domain. The mappings stay valid, so no file outlives the start of a domain,
and no file is left behind by a rank that is killed later. A problem with the
files does not fail the run: it is reported at the first window call. Ranks on
different hosts cannot share memory: the first window call names the hosts.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import re
import secrets
import socket
import stat
import time
from typing import Any, Protocol

import torch

from ...core.config import Config
from ...core.errors import ForgedValueError, HcclTimeoutError
from ...core.group import Group
from ...launcher import sealed, shm_files
from ...launcher import store as kv
from ...launcher.shm_files import FILE_PREFIX, TOKEN_ENV, new_token, remove_files, remove_job_files
from ...server.windows import (
    BUFFSIZE_ENV,
    KINDS,
    HcclNoWindowsError,
    LocalWindows,
    Memory,
    WindowAllocation,
)
from .session import Session

_TOKEN_KEY = "windows/token"
#: How often an AlltoAllvWrite Wait looks at the store.
RENDEZVOUS_POLL_S = 0.002


def _names_key(domain: str, rank: int) -> str:
    return f"windows/{domain}/names/{rank}"


def _mapped_key(domain: str) -> str:
    return f"windows/{domain}/mapped"


def host_id() -> str:
    """This machine: its host name and boot id (two hosts never share memory)."""
    boot = ""
    with contextlib.suppress(OSError), open("/proc/sys/kernel/random/boot_id") as f:
        boot = f.read().strip()
    return f"{socket.gethostname()}/{boot}"


def _too_small(nbytes: int, windows: int) -> str | None:
    """Why the window folder (``/dev/shm``) cannot hold ``windows`` windows of ``nbytes`` bytes, if it cannot."""
    try:
        st = os.statvfs(shm_files.SHM_DIR)
    except OSError as exc:
        return f"cannot read the free space of {shm_files.SHM_DIR}: {exc.strerror}"
    free = st.f_bavail * st.f_frsize
    if free >= windows * nbytes:
        return None
    return (
        f"{shm_files.SHM_DIR} has {free >> 20} MB free, less than the {windows} windows of this rank "
        f"need ({BUFFSIZE_ENV}={nbytes >> 20} MB each): free space in {shm_files.SHM_DIR} or lower "
        f"{BUFFSIZE_ENV} (or hp.run(..., buffsize_mb=))"
    )


def _map(fd: int, path: str, nbytes: int) -> mmap.mmap:
    try:
        return mmap.mmap(fd, nbytes, mmap.MAP_SHARED)
    except (OSError, ValueError) as exc:
        raise HcclNoWindowsError(f"cannot map window file {path}: {exc}") from None


def create_window_file(token: str, nbytes: int) -> tuple[str, mmap.mmap]:
    """Create a new window file of ``nbytes`` (sparse) under an unguessable name; map it.

    The file is created with ``O_EXCL | O_NOFOLLOW`` and mode 0600: an existing
    file or a symbolic link of that name is refused with an
    :class:`HcclNoWindowsError` naming it, and so is a file system too full
    for the window (a full ``/dev/shm`` would otherwise kill the ranks with
    SIGBUS when they write).
    """
    path = os.path.join(shm_files.SHM_DIR, f"{FILE_PREFIX}{token}-{secrets.token_hex(16)}")
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o600)
    except FileExistsError:
        raise HcclNoWindowsError(
            f"refused window file {path}: a file or symbolic link of that name already exists "
            "(window files must be new)"
        ) from None
    except OSError as exc:
        raise HcclNoWindowsError(f"cannot create window file {path}: {exc.strerror}") from None
    shm_files.note_created(path)
    try:
        os.fchmod(fd, 0o600)  # whatever the umask
        os.ftruncate(fd, nbytes)
        return path, _map(fd, path, nbytes)
    except OSError as exc:
        remove_files([path])
        raise HcclNoWindowsError(f"cannot size window file {path}: {exc.strerror}") from None
    except BaseException:
        remove_files([path])
        raise
    finally:
        os.close(fd)


#: The random part of a window file's name (:func:`create_window_file`).
_FILE_ID = re.compile(r"[0-9a-f]{32}")
#: A job's token as launchers and rank 0 make them (:func:`new_token`), and this run's number.
_TOKEN = re.compile(r"[0-9A-Za-z_]{1,64}")


def _not_ours(path: str, token: str) -> str | None:
    """Why ``path`` is not a window file of the job ``token`` (as :func:`create_window_file`
    names them), or None: only such paths are opened or removed, whatever a store says."""
    name = os.path.basename(path)
    head = f"{FILE_PREFIX}{token}-"
    if (
        os.path.dirname(path) == shm_files.SHM_DIR
        and name.startswith(head)
        and _FILE_ID.fullmatch(name[len(head) :])
    ):
        return None
    return f"refused window file {path!r}: not a window file of this job in {shm_files.SHM_DIR}"


def open_window_file(path: str, nbytes: int, token: str) -> mmap.mmap:
    """Map a peer's window file of the job ``token``, refusing any other path, a link, another
    owner, another mode or size."""
    not_ours = _not_ours(path, token)
    if not_ours is not None:
        raise HcclNoWindowsError(not_ours)
    try:
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise HcclNoWindowsError(f"refused window file {path}: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        problem = (
            "not a regular file"
            if not stat.S_ISREG(st.st_mode)
            else f"owned by uid {st.st_uid}, not by this user ({os.geteuid()})"
            if st.st_uid != os.geteuid()
            else f"mode {stat.S_IMODE(st.st_mode):o}, not 600"
            if stat.S_IMODE(st.st_mode) != 0o600
            else f"{st.st_nlink} links to it, not 1"
            if st.st_nlink != 1
            else f"{st.st_size} bytes, not {nbytes} (do the ranks set different {BUFFSIZE_ENV}?)"
            if st.st_size != nbytes
            else None
        )
        if problem is not None:
            raise HcclNoWindowsError(f"refused window file {path}: {problem}")
        return _map(fd, path, nbytes)
    finally:
        os.close(fd)


def _record(key: str, raw: bytes, token: str) -> dict[str, str]:
    """A rank's published window record (store key ``key``): its host, its files' paths or its
    problem. A record that is not sealed with the run's secret where there is one, or that
    names a path that is not one of the job's window files, is that rank's problem: its paths
    are neither opened nor removed."""
    try:
        record = sealed.load_json(key, raw)
    except ForgedValueError as exc:
        return {"host": "", "error": f"its window record was refused: {exc}"}
    fields = ("host", "error", *KINDS)
    if not isinstance(record, dict) or not all(isinstance(record.get(k, ""), str) for k in fields):
        return {"host": "", "error": f"published an unreadable window record {raw[:80]!r}"}
    for kind in KINDS:
        not_ours = _not_ours(record[kind], token) if kind in record else None
        if not_ours is not None:
            return {"host": record["host"], "error": not_ours}
    return record


class WindowHost(Protocol):
    """What the shared windows need of their rank's server (``DistServer``)."""

    backend_name: str
    config: Config
    #: This run's number (in the token of window file names) and its part of the store.
    run: int
    session: Session
    store: Any

    def group_timeout(self) -> float:
        """Seconds creating a domain may wait for its ranks."""
        ...

    def publish(self, key: str, value: bytes) -> None:
        """Set ``key`` in the run's store (deleted after the run)."""
        ...

    def count_in(self, key: str) -> int:
        """Count this rank in at store counter ``key`` (once); how many ranks are in."""
        ...


class SharedWindows:
    """The windows of one gloo rank's server, in shared memory of one host.

    The server builds one and forwards its window hooks to it; it shares the
    windows of every domain this rank is a member of (:meth:`share`).
    """

    def __init__(self, host: WindowHost) -> None:
        self.host = host
        #: This job's token in window file names (the launcher's, or rank 0's of this run).
        self.token: str | None = None
        #: The window files of this run's domains (each removed once every member mapped it).
        self.paths: list[str] = []
        #: (domain, global rank, kind) -> the shared mapping of that window.
        self.maps: dict[tuple[str, int, str], mmap.mmap] = {}
        #: domain -> why its windows cannot be used (named at the first window call).
        self.problems: dict[str, str] = {}
        self.local = LocalWindows(host.config.buffsize_mb, memory=self._memory)

    def _token(self) -> str:
        """This job's token, agreed with rank 0 at the first domain."""
        if self.token is None:
            token = os.environ.get(TOKEN_ENV, "")
            if not token:
                if self.host.session.rank == 0:
                    self.host.publish(_TOKEN_KEY, sealed.dump_json(_TOKEN_KEY, new_token()))
                self._wait([_TOKEN_KEY], "rank 0 did not publish the token of window files")
                token = sealed.load_json(_TOKEN_KEY, self.host.store.get(_TOKEN_KEY))
            if not isinstance(token, str) or not _TOKEN.fullmatch(token):
                raise HcclNoWindowsError(
                    f"refused the token of window file names {token!r}: hccl_py makes them of "
                    "letters, digits and '_' (at most 64)"
                )
            self.token = f"{token}-{self.host.run}"
        return self.token

    def share(self, group: Group) -> None:
        """Create this rank's window files, map every member's, let the last one remove them."""
        host = self.host
        me, name = host.session.rank, group.name
        nbytes = host.config.buffsize_mb << 20
        own: dict[str, tuple[str, mmap.mmap]] = {}
        mine: dict[str, str] = {"host": host_id(), "error": ""}
        token = ""
        try:
            token = self._token()
            full = _too_small(nbytes, len(KINDS))
            if full is not None:
                raise HcclNoWindowsError(full)
            for kind in KINDS:
                own[kind] = create_window_file(token, nbytes)
        except HcclNoWindowsError as exc:
            mine["error"] = exc.reason
        finally:
            mine.update({kind: path for kind, (path, _) in own.items()})
            key = _names_key(name, me)
            host.publish(key, sealed.dump_json(key, mine))
        published = self._published(group, token)
        mapped: dict[tuple[int, str], mmap.mmap] = {}
        problem = self._hosts_problem(published) or next(
            (f"rank {r}: {p['error']}" for r, p in published.items() if p.get("error")), None
        )
        paths = [p[kind] for p in published.values() for kind in KINDS if kind in p]
        if problem is not None:
            remove_files(path for path, _ in own.values())
        else:
            try:
                for r, p in published.items():
                    for kind in KINDS:
                        mapped[(r, kind)] = (
                            own[kind][1] if r == me else open_window_file(p[kind], nbytes, token)
                        )
            except HcclNoWindowsError as exc:
                problem, mapped = exc.reason, {}
            if host.count_in(_mapped_key(name)) == group.size:
                remove_files(paths)
        self.paths.extend(paths)
        self.maps.update({(name, r, kind): m for (r, kind), m in mapped.items()})
        if problem is not None:
            self.problems[name] = problem

    def _published(self, group: Group, token: str) -> dict[int, dict[str, str]]:
        """Every member's published window files of the job ``token`` (or the problem it had),
        by global rank."""
        keys = [_names_key(group.name, r) for r in group.ranks]
        self._wait(keys, f"ranks did not publish their window files of domain {group.name}")
        values = kv.get_all(self.host.store, keys)
        return {
            r: _record(key, raw, token)
            for r, key, raw in zip(group.ranks, keys, values, strict=True)
        }

    def _wait(self, keys: list[str], what: str) -> None:
        """Wait for ``keys`` in the run's store; a failure of another rank ends the wait."""
        kv.wait_keys(
            self.host.store,
            keys,
            self.host.group_timeout(),  # part of creating the domain, as its process group
            lambda missing: f"{what}: {missing}",
            self.host.session.check_abort,
        )

    def _hosts_problem(self, published: dict[int, dict[str, str]]) -> str | None:
        mine = host_id()
        hosts = {p["host"] for p in published.values() if p["host"]}  # "": an unreadable record
        others = sorted({h.split("/")[0] for h in hosts if h != mine})
        if not others:
            return None
        return (
            f"the {self.host.backend_name} backend keeps windows in shared memory of one host, "
            f"but ranks run on {socket.gethostname()} and {', '.join(others)}: run window "
            "kernels with the ranks on one host, or on the emulator"
        )

    def window(self, domain: str, rank: int, kind: str) -> WindowAllocation:
        """``rank``'s window, or the problem its domain's files had (HcclNoWindowsError)."""
        problem = self.problems.get(domain)
        if problem is None and (domain, rank, kind) not in self.maps:
            problem = f"domain {domain} has no shared window of rank {rank} on this rank"
        if problem is not None:
            raise HcclNoWindowsError(f"GetWindows{kind}Addr: {problem}")
        return self.local.window(domain, rank, kind)

    def window_at(self, base: int) -> WindowAllocation | None:
        """The window whose integer base address is ``base``, if this rank used it."""
        return self.local.window_at(base)

    def _memory(self, domain: str, rank: int, kind: str) -> Memory:
        """The window's shared mapping, made when the domain was created."""
        mapping = self.maps[(domain, rank, kind)]
        return lambda nbytes: (torch.frombuffer(mapping, dtype=torch.uint8, count=nbytes), mapping)

    def meet(self, group: Group, key: str, what: str) -> list[bytes]:
        """Count this rank in at ``key`` through the store; poll until every rank of ``group`` is.

        A write into a window of shared memory is done when its call returns,
        so every rank's arrival means that their copies landed.
        """
        name = f"rendezvous/{group.name}/{key}"
        timeout = self.host.config.timeout
        deadline = time.monotonic() + timeout
        while self.host.count_in(name) < group.size:
            self.host.session.check_abort()
            if time.monotonic() > deadline:
                raise HcclTimeoutError(
                    f"timed out after {timeout:g} s: {what}: not every rank of "
                    f"domain {group.name} made its AlltoAllvWrite"
                )
            time.sleep(RENDEZVOUS_POLL_S)
        return [b""] * group.size

    def close(self) -> None:
        """After a failed run, remove the window files that may remain."""
        try:
            failed = self.host.session.store.check([kv.ABORT])
        except RuntimeError:  # the store's host is gone: the job ended
            failed = True
        if failed:
            remove_files(self.paths)
            if self.token is not None:
                remove_job_files(self.token)
