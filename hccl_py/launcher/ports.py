"""Who holds a TCP port on this host: for the message of a store that cannot listen or join."""

from __future__ import annotations

import contextlib
import os

#: The socket state of a listening TCP socket in /proc/net/tcp.
_LISTEN = "0A"


def _listening_inodes(port: int) -> set[str]:
    """Inodes of the sockets listening on ``port`` (IPv4 and IPv6) in this network namespace."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                listening = len(fields) > 9 and fields[3] == _LISTEN
                if listening and int(fields[1].rsplit(":", 1)[1], 16) == port:
                    inodes.add(fields[9])
    return inodes


def _command(pid: str) -> str:
    with contextlib.suppress(OSError), open(f"/proc/{pid}/cmdline", "rb") as f:
        return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    return "?"


def port_holder(port: int) -> str:
    """What holds ``port`` on this host, in words ("pid 12 (python -m ...)"), as far as we can see."""
    if not os.path.isdir("/proc/net"):
        return "a process this host does not say (no /proc here)"
    inodes = _listening_inodes(port)
    if not inodes:
        return "no process of this host listens on it (another host, or it was just freed)"
    wanted = {f"socket:[{inode}]" for inode in inodes}
    holders = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            fds = os.listdir(f"/proc/{pid}/fd")
            if any(os.readlink(f"/proc/{pid}/fd/{fd}") in wanted for fd in fds):
                holders.append(f"pid {pid} ({_command(pid)[:160]})")
    if not holders:
        return "a process this user cannot inspect (another user's) listens on it"
    return ", ".join(holders)
