"""gloo's own sockets listen on the loopback interface where every rank runs on this host.

gloo binds the sockets its peers connect to on the address the host name resolves to (on most
cluster nodes an outside one), and those connections are not authenticated. A run whose ranks
all share this host has no use for an outside address, so its ranks set ``GLOO_SOCKET_IFNAME``
to the loopback interface, unless the user chose one.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

import hccl_py as hp
from hccl_py.launcher import torch_env
from hccl_py.launcher.spec import RankSpec

LOOPBACK = torch_env.loopback_interface()


def _spec(host: str, world: int = 4, store_path: str | None = None) -> RankSpec:
    return RankSpec("env", "worker", 0, world, 0, host, 29500, False, store_path)


@pytest.mark.parametrize(
    "spec, local, expected",
    [
        (_spec("192.0.2.7", store_path="/private/store"), 1, True),  # hp.run's own ranks
        (_spec("192.0.2.7"), 4, True),  # every rank local by the launcher's count
        (_spec("127.0.0.1"), 2, True),
        (_spec("localhost"), 2, True),
        (_spec("192.0.2.7"), 2, False),  # ranks on other hosts reach this one from outside
    ],
    ids=["hp-run", "all-local", "loopback-store", "localhost", "other-hosts"],
)
def test_one_host_rule(spec: RankSpec, local: int, expected: bool) -> None:
    assert torch_env.one_host(spec, local) is expected


@pytest.mark.skipif(LOOPBACK is None, reason="no loopback interface found")
@pytest.mark.parametrize(
    "user, local, spec, expected",
    [
        (None, "2", _spec("127.0.0.1"), LOOPBACK),
        ("eth7", "2", _spec("127.0.0.1"), "eth7"),  # the user's choice is kept
        (None, "2", _spec("192.0.2.7", world=4), None),  # across hosts: gloo's own choice
        (None, "4", _spec("192.0.2.7", world=4), LOOPBACK),  # every rank here by the count
        # no count from the launcher (msrun, RANK/WORLD_SIZE variables): across hosts maybe
        (None, None, _spec("192.0.2.7", world=4), None),
    ],
    ids=["one-host", "user-choice-kept", "across-hosts", "all-local", "no-local-count"],
)
def test_loopback_gloo_sets_the_interface(
    monkeypatch: pytest.MonkeyPatch,
    user: str | None,
    local: str | None,
    spec: RankSpec,
    expected: str | None,
) -> None:
    for name, value in ((torch_env.GLOO_IFNAME_ENV, user), (torch_env.LOCAL_RANKS_ENV, local)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    torch_env.loopback_gloo(spec)
    assert os.environ.get(torch_env.GLOO_IFNAME_ENV) == expected


def _listening_addresses() -> tuple[str | None, set[str]]:
    """This rank's ``GLOO_SOCKET_IFNAME`` and the local addresses of its listening TCP sockets
    (hex, as ``/proc/net/tcp`` writes them)."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not Path(table).exists():
            continue
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # LISTEN, one of ours
                found.add(fields[1].split(":")[0])
    return os.environ.get(torch_env.GLOO_IFNAME_ENV), found


#: 127.0.0.1 and ::1 (and ::ffff:127.0.0.1) in /proc/net's byte order.
_LOOPBACK_HEX = {"0100007F", "00000000000000000000000001000000", "0000000000000000FFFF00000100007F"}


@pytest.mark.skipif(
    LOOPBACK is None or not sys.platform.startswith("linux"), reason="Linux sockets"
)
def test_gloo_ranks_of_hp_run_listen_on_loopback_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(torch_env.GLOO_IFNAME_ENV, raising=False)
    results = hp.run(_listening_addresses, world_size=2, backend="gloo", timeout=60.0)
    for ifname, addresses in results:
        assert ifname == LOOPBACK
        assert addresses and addresses <= _LOOPBACK_HEX, addresses
