"""``hp.print_rank0`` prints once per job: on rank 0 inside hp.run, in rank 0's process outside."""

from __future__ import annotations

import pytest

import hccl_py as hp


def _main() -> int:
    hp.print_rank0("hello from rank", hp.get_rank())
    return hp.get_rank()


def test_inside_run_only_rank_0_prints(capsys: pytest.CaptureFixture) -> None:
    assert hp.run(_main, world_size=4) == [0, 1, 2, 3]
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("hello")]
    assert lines == ["hello from rank 0"]


@pytest.mark.parametrize(("rank", "printed"), [(None, True), ("0", True), ("3", False)])
def test_outside_run_the_process_of_rank_0_prints(
    capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch, rank: str | None, printed: bool
) -> None:
    if rank is None:
        monkeypatch.delenv("RANK", raising=False)
    else:
        monkeypatch.setenv("RANK", rank)
    hp.print_rank0("done", end="!\n")
    assert capsys.readouterr().out == ("done!\n" if printed else "")
