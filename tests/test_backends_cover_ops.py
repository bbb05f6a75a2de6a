"""Every backend executes exactly the op table's executable ops, with a round function for each."""

from __future__ import annotations

import pytest
from hccl_py.backends.emu import executor
from hccl_py.backends.emu.world import EmuWorld

from hccl_py.backends.dist import rounds as pg_rounds
from hccl_py.backends.dist.server import DistServer
from hccl_py.ops import EXECUTABLE, OPS

SERVERS = {"emu": (EmuWorld, executor.ROUNDS), "dist": (DistServer, pg_rounds.ROUNDS)}


@pytest.mark.parametrize("name", sorted(SERVERS))
def test_backend_claims_the_executable_ops(name: str) -> None:
    server, rounds = SERVERS[name]
    assert server.ops == EXECUTABLE, sorted(server.ops ^ EXECUTABLE)
    assert set(rounds) == set(server.ops)
    assert all(callable(rounds[op]) for op in server.ops)


def test_every_kernel_op_is_in_the_table_once() -> None:
    names = [spec.name for spec in OPS.values()]
    assert len(names) == len(set(names))
    assert all(spec.cmd == cmd for cmd, spec in OPS.items())
    assert set(OPS) > EXECUTABLE, "declared-only ops (BatchWrite) are not executable yet"
