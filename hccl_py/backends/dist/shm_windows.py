"""Windows of gloo ranks on one host: one anonymous shared-memory file per rank window.

Every process maps the same memory for a given window, so a kernel's
``hp.gm_tensor`` writes into a peer's window reach the peer's process, as on
hardware; the system commits the pages only as they are written.

When a domain is created (the world at the start of a run, then every
``hp.new_group``) each member rank makes its two windows as ``memfd_create``
files: files in no folder, whose memory the system frees when the last process
that maps them ends, so that no run, clean or killed, leaves a file behind. It
publishes their descriptors (its pid, the descriptor and a random 128-bit name)
through the run's store. Every member then opens its peers' windows through
``/proc/<pid>/fd/<fd>``, which the system allows only to processes of the same
user, checks the name, owner and size of what it opened, maps them and says so
in the store; each rank closes its descriptors once every member has (the
mappings stay). A problem with the windows does not fail the run: it is
reported at the first window call. Ranks on different hosts cannot share
memory: the first window call names the hosts.
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
from typing import Any, NamedTuple, Protocol

import torch

from ...core.config import Config
from ...core.errors import ForgedValueError, HcclTimeoutError
from ...core.group import Group
from ...launcher import sealed
from ...launcher import store as kv
from ...server.windows import (
    BUFFSIZE_ENV,
    KINDS,
    HcclNoWindowsError,
    LocalWindows,
    Memory,
    WindowAllocation,
)
from .session import Session

#: How often an AlltoAllvWrite Wait looks at the store.
RENDEZVOUS_POLL_S = 0.002
#: The name of a window's memfd: this prefix and 32 random hex digits.
NAME_PREFIX = "hccl_py-window-"
#: A published window: ``<descriptor>/<the random part of its name>``.
_REF = re.compile(r"([0-9]{1,9})/([0-9a-f]{32})")
_PID = re.compile(r"[1-9][0-9]{0,9}")


def _names_key(domain: str, rank: int) -> str:
    return f"windows/{domain}/names/{rank}"


def _mapped_key(domain: str, rank: int) -> str:
    return f"windows/{domain}/mapped/{rank}"


def host_id() -> str:
    """This machine: its host name and boot id (two hosts never share memory)."""
    boot = ""
    with contextlib.suppress(OSError), open("/proc/sys/kernel/random/boot_id") as f:
        boot = f.read().strip()
    return f"{socket.gethostname()}/{boot}"


class OwnWindow(NamedTuple):
    """A window this rank made: its memfd, what peers open it by, and this rank's mapping."""

    fd: int
    ref: str
    mapping: mmap.mmap


def _map(fd: int, what: str, nbytes: int) -> mmap.mmap:
    try:
        return mmap.mmap(fd, nbytes, mmap.MAP_SHARED)
    except (OSError, ValueError) as exc:
        raise HcclNoWindowsError(f"cannot map {what}: {exc}") from None


def create_window(nbytes: int) -> OwnWindow:
    """Make a window of ``nbytes`` (sparse) as a memfd of mode 0600 under a random name; map it.

    A system that cannot make one (no ``memfd_create``, no memory for the
    window's size) raises :class:`HcclNoWindowsError` saying so.
    """
    ident = secrets.token_hex(16)
    memfd_create = getattr(os, "memfd_create", None)
    if memfd_create is None:
        raise HcclNoWindowsError(
            "the gloo backend's windows need memfd_create (Linux): run window kernels on the emulator"
        )
    try:
        fd = memfd_create(NAME_PREFIX + ident, os.MFD_CLOEXEC)
    except OSError as exc:
        raise HcclNoWindowsError(f"cannot make a window (memfd_create): {exc.strerror}") from None
    try:
        os.fchmod(fd, 0o600)
        os.ftruncate(fd, nbytes)
        return OwnWindow(fd, f"{fd}/{ident}", _map(fd, f"a window of {nbytes} bytes", nbytes))
    except OSError as exc:
        os.close(fd)
        raise HcclNoWindowsError(
            f"cannot size a window to {nbytes} bytes ({BUFFSIZE_ENV}={nbytes >> 20} MB): "
            f"{exc.strerror}"
        ) from None
    except BaseException:
        os.close(fd)
        raise


def open_window(pid: str, ref: str, nbytes: int) -> mmap.mmap:
    """Map the window ``ref`` (``<fd>/<name>``) of process ``pid``, refusing a descriptor that is
    not that window (another name, owner or size)."""
    parsed = _REF.fullmatch(ref)
    if parsed is None or _PID.fullmatch(pid) is None:
        raise HcclNoWindowsError(f"refused window {pid}:{ref!r}: not a window hccl_py publishes")
    number, ident = parsed.groups()
    path, expected = f"/proc/{pid}/fd/{number}", f"/memfd:{NAME_PREFIX}{ident} (deleted)"
    try:  # what the descriptor is, before opening it: nothing else is ever opened
        named = os.readlink(path)
    except OSError as exc:
        raise HcclNoWindowsError(
            f"cannot open the window {path} of process {pid}: {exc.strerror}"
        ) from None
    if named != expected:
        raise HcclNoWindowsError(
            f"refused the window {path} of process {pid}: it is {named}, not the window "
            f"{NAME_PREFIX}{ident}"
        )
    flags = os.O_RDWR | os.O_CLOEXEC | os.O_NOCTTY | os.O_NONBLOCK
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise HcclNoWindowsError(
            f"cannot open the window {path} of process {pid}: {exc.strerror}"
        ) from None
    try:
        try:  # the same descriptor still (the process may have closed it and opened another)
            name = os.readlink(f"/proc/self/fd/{fd}")
        except OSError as exc:
            name = f"unreadable ({exc.strerror})"
        st = os.fstat(fd)
        problem = (
            f"it is {name}, not the window {NAME_PREFIX}{ident}"
            if name != expected
            else f"owned by uid {st.st_uid}, not by this user ({os.geteuid()})"
            if st.st_uid != os.geteuid() or not stat.S_ISREG(st.st_mode)
            else f"{st.st_size} bytes, not {nbytes} (do the ranks set different {BUFFSIZE_ENV}?)"
            if st.st_size != nbytes
            else None
        )
        if problem is not None:
            raise HcclNoWindowsError(f"refused the window {path} of process {pid}: {problem}")
        return _map(fd, f"the window {path} of process {pid}", nbytes)
    finally:
        os.close(fd)


def _record(key: str, raw: bytes) -> dict[str, str]:
    """A rank's published window record (store key ``key``): its host, pid and windows, or its
    problem. A record that is not sealed with the run's secret where there is one is that
    rank's problem: nothing it names is opened."""
    try:
        record = sealed.load_json(key, raw)
    except ForgedValueError as exc:
        return {"host": "", "error": f"its window record was refused: {exc}"}
    fields = ("host", "error", "pid", *KINDS)
    if not isinstance(record, dict) or not all(isinstance(record.get(k, ""), str) for k in fields):
        return {"host": "", "error": f"published an unreadable window record {raw[:80]!r}"}
    return record


class WindowHost(Protocol):
    """What the shared windows need of their rank's server (``DistServer``)."""

    backend_name: str
    config: Config
    session: Session
    store: Any

    def group_timeout(self) -> float:
        """Seconds creating a domain may wait for its ranks."""
        ...

    def publish(self, key: str, value: bytes) -> None:
        """Set ``key`` in the run's store (deleted after the run)."""
        ...


class SharedWindows:
    """The windows of one gloo rank's server, in shared memory of one host.

    The server builds one and forwards its window hooks to it; it shares the
    windows of every domain this rank is a member of (:meth:`share`).
    """

    def __init__(self, host: WindowHost) -> None:
        self.host = host
        #: (domain, global rank, kind) -> the shared mapping of that window.
        self.maps: dict[tuple[str, int, str], mmap.mmap] = {}
        #: domain -> why its windows cannot be used (named at the first window call).
        self.problems: dict[str, str] = {}
        config = host.config
        self.local = LocalWindows(
            config.buffsize_mb, memory=self._memory, factor=config.platform.window_factor
        )

    def share(self, group: Group) -> None:
        """Make this rank's windows of ``group``, map every member's; close the descriptors
        once every member has mapped them."""
        host = self.host
        me, name = host.session.rank, group.name
        nbytes = self.local.nbytes
        own: dict[str, OwnWindow] = {}
        mine = {"host": host_id(), "error": "", "pid": str(os.getpid())}
        try:
            try:
                for kind in KINDS:
                    own[kind] = create_window(nbytes)
            except HcclNoWindowsError as exc:
                mine["error"] = exc.reason
            finally:
                mine.update({kind: window.ref for kind, window in own.items()})
                key = _names_key(name, me)
                host.publish(key, sealed.dump_json(key, mine))
            self._map_all(group, own, nbytes)
            host.publish(_mapped_key(name, me), b"1")
            self._wait(
                [_mapped_key(name, r) for r in group.ranks],
                f"ranks did not map the windows of domain {name}",
            )
        finally:
            for window in own.values():
                os.close(window.fd)

    def _map_all(self, group: Group, own: dict[str, OwnWindow], nbytes: int) -> None:
        """Map every member's windows of ``group``, or note the problem one of them has."""
        me, name = self.host.session.rank, group.name
        published = self._published(group)
        problem = self._hosts_problem(published) or next(
            (f"rank {r}: {p['error']}" for r, p in published.items() if p.get("error")), None
        )
        mapped: dict[tuple[int, str], mmap.mmap] = {}
        if problem is None:
            try:
                for r, p in published.items():
                    for kind in KINDS:
                        mapped[(r, kind)] = (
                            own[kind].mapping
                            if r == me
                            else open_window(p.get("pid", ""), p.get(kind, ""), nbytes)
                        )
            except HcclNoWindowsError as exc:
                problem, mapped = f"rank {r}: {exc.reason}", {}
        self.maps.update({(name, r, kind): m for (r, kind), m in mapped.items()})
        if problem is not None:
            self.problems[name] = problem

    def _published(self, group: Group) -> dict[int, dict[str, str]]:
        """Every member's published windows (or the problem it had), by global rank."""
        keys = [_names_key(group.name, r) for r in group.ranks]
        self._wait(keys, f"ranks did not publish their windows of domain {group.name}")
        values = kv.get_all(self.host.store, keys)
        return {r: _record(key, raw) for r, key, raw in zip(group.ranks, keys, values, strict=True)}

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
        """Publish this rank's arrival at ``key``; poll until every rank of ``group`` published.

        A write into a window of shared memory is done when its call returns,
        so every rank's arrival means that their copies landed. Each rank's arrival is a key
        of its own, sealed with the run's secret: a process that reaches the store without it
        cannot end the wait before the copies landed (as an ``add`` to a shared counter could).
        """
        name = f"rendezvous/{group.name}/{key}"
        keys = [f"{name}/{rank}" for rank in group.ranks]
        mine = f"{name}/{self.host.session.rank}"
        self.host.publish(mine, sealed.dump_json(mine, True))
        timeout = self.host.config.timeout
        deadline = time.monotonic() + timeout
        while not self.host.store.check(keys):
            self.host.session.check_abort()
            if time.monotonic() > deadline:
                raise HcclTimeoutError(
                    f"timed out after {timeout:g} s: {what}: not every rank of "
                    f"domain {group.name} made its AlltoAllvWrite"
                )
            time.sleep(RENDEZVOUS_POLL_S)
        for arrival in keys:
            raw = self.host.store.get(arrival)
            if sealed.load_json(arrival, raw) is not True:
                raise sealed.refused(arrival, raw, "hccl_py writes true there")
        return [b""] * group.size
