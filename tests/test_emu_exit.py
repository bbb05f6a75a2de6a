"""``os._exit`` in an emulated rank fails that rank instead of ending the shared process."""

from __future__ import annotations

import os

import pytest

import hccl_py as hp


def _exits_on_rank_1(code: int) -> None:
    if hp.get_rank() == 1:
        os._exit(code)
    hp.barrier()


def test_os_exit_in_a_rank_fails_the_run_and_names_the_rank() -> None:
    real = os._exit
    with pytest.raises(hp.WorldError, match=r"rank 1: RankExit: rank 1 called os\._exit\(0\)"):
        hp.run(_exits_on_rank_1, world_size=2, timeout=30, args=(0,))
    assert os._exit is real  # the real one is back after the run


def _core_exits() -> None:
    if hp.GetBlockIdx() == 1:
        os._exit(3)
    hp.SyncAll()


def test_os_exit_in_a_kernel_core_fails_its_rank() -> None:
    with pytest.raises(hp.WorldError, match=r"rank 0 called os\._exit\(3\)"):
        hp.run(lambda: hp.launch(_core_exits, block_dim=2), world_size=1, timeout=30)


def _forks_a_child_that_exits() -> int:
    pid = os.fork()
    if pid == 0:
        os._exit(7)  # the child's own process: the real exit
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_process_forked_from_a_rank_exits_as_usual() -> None:
    assert hp.run(_forks_a_child_that_exits, world_size=1, timeout=30) == [7]
