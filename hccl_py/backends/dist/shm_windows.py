"""Windows of gloo ranks on one host: one shared-memory file per rank window.

Every process maps the same file for a given window (``/dev/shm`` where it
exists), so a kernel's ``hp.gm_tensor`` writes into a peer's window reach the
peer's process, as on hardware; the files are sparse and the system commits
their pages only as they are written. The file names carry a token of the run
that world rank 0 publishes through the run's store. Ranks on different hosts
cannot share memory: the first window call names the hosts instead.
"""

from __future__ import annotations

import contextlib
import functools
import mmap
import os
import socket
import tempfile
import uuid
import zlib
from collections.abc import Callable

import torch

from ...core.group import Group
from ...server.windows import HcclNoWindowsError, LocalWindows, WindowAllocation

#: Where window files go: shared memory where the system has it.
SHM_DIR = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()  # noqa: S108
_TOKEN_KEY = "windows/token"


def _host_key(rank: int) -> str:
    return f"windows/host/{rank}"


def host_id() -> str:
    """This machine: its host name and boot id (two hosts never share memory)."""
    boot = ""
    with contextlib.suppress(OSError), open("/proc/sys/kernel/random/boot_id") as f:
        boot = f.read().strip()
    return f"{socket.gethostname()}/{boot}"


def shared_file_memory(path: str, nbytes: int) -> tuple[torch.Tensor, object]:
    """``nbytes`` bytes of the file at ``path`` (created sparse if missing), mapped shared."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        if os.fstat(fd).st_size < nbytes:
            os.ftruncate(fd, nbytes)
        mapping = mmap.mmap(fd, nbytes, mmap.MAP_SHARED)
    finally:
        os.close(fd)
    return torch.frombuffer(mapping, dtype=torch.uint8), mapping


class SharedWindows(LocalWindows):
    """Mixin for the gloo server (a ``DistServer``): windows in shared memory of one host."""

    #: A poll of a window flag cannot see the other processes wait: only the timeout applies.
    polls_detect_deadlock = False

    def start(self, world: Group) -> None:
        """Create the world's process group and publish this host (rank 0 also the token)."""
        super().start(world)
        self._set(_host_key(self.session.rank), host_id().encode())
        if self.session.rank == 0:
            self._set(_TOKEN_KEY, uuid.uuid4().hex.encode())

    def window(self, domain: str, rank: int, kind: str) -> WindowAllocation:
        """``rank``'s window, after checking that every rank runs on this host."""
        if "_window_token" not in self.__dict__:
            hosts = [self.store.get(_host_key(r)).decode() for r in range(self.session.world_size)]
            mine = host_id()
            others = sorted({h.split("/")[0] for h in hosts if h != mine})
            if others:
                raise HcclNoWindowsError(
                    f"GetWindows{kind}Addr: the {self.backend_name} backend keeps windows in "
                    f"shared memory of one host, but ranks run on {socket.gethostname()} and "
                    f"{', '.join(others)}: run window kernels with the ranks on one host, or "
                    "on the emulator"
                )
            self.__dict__["_window_token"] = self.store.get(_TOKEN_KEY).decode()
        return super().window(domain, rank, kind)

    def window_memory(
        self, window: WindowAllocation
    ) -> Callable[[int], tuple[torch.Tensor, object]]:
        """The window's shared file, the same name in every process of the run."""
        tag = zlib.crc32(window.domain.encode())
        name = f"hccl_py-{self.__dict__['_window_token']}-{tag:08x}-{window.rank}-{window.kind}"
        path = os.path.join(SHM_DIR, name)
        self.__dict__.setdefault("_window_files", []).append((window.rank, path))
        return functools.partial(shared_file_memory, path)

    def close(self) -> None:
        """Stop the server and remove the files of this rank's own windows."""
        super().close()
        for rank, path in self.__dict__.get("_window_files", []):
            if rank == self.session.rank:
                with contextlib.suppress(OSError):
                    os.unlink(path)
