"""Rank processes on one host use one intra-op thread each unless the user chose (torchrun's rule)."""

from __future__ import annotations

import os

import pytest
import torch

import hccl_py as hp
from hccl_py.launcher import torch_env


def threads() -> int:
    return torch.get_num_threads()


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="one core: torch's default is one thread")
def test_gloo_ranks_on_one_host_use_one_thread_each(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without it, four ranks on two cores spend most of their CPU in spinning OpenMP threads."""
    monkeypatch.delenv(torch_env.THREADS_ENV, raising=False)
    assert hp.run(threads, world_size=2, backend="gloo", timeout=30.0) == [1, 1]


@pytest.mark.parametrize(
    "local_ranks, env, expected",
    [(4, None, 1), (4, "3", 3), (1, None, 3)],
    ids=["several-ranks", "user-choice-kept", "alone-on-the-host"],
)
def test_rank_threads_rule(
    monkeypatch: pytest.MonkeyPatch, local_ranks: int, env: str | None, expected: int
) -> None:
    before = torch.get_num_threads()
    torch.set_num_threads(3)
    if env is None:
        monkeypatch.delenv(torch_env.THREADS_ENV, raising=False)
    else:
        monkeypatch.setenv(torch_env.THREADS_ENV, env)
    try:
        torch_env.rank_threads(local_ranks)
        assert torch.get_num_threads() == expected
    finally:
        torch.set_num_threads(before)
