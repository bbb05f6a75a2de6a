"""What one run leaves to the next in this process: nothing that changes what it shows.

A buffer passed without a name is ``bufN`` and ``int(addr)`` of it is ``(N + 1) << 34``.
Until 2026-11-30 one count for the whole process gave N: an exploration's schedules
went on from the count of the schedules before them, so a failure found by ``explore``
named another buffer than the replay of its seed, and a result holding ``int(addr)``
differed between schedules (a false "schedule-dependent result"). Each rank now numbers
its own buffers from 0 in every run. Python's registry of shown warnings outlived a run
too: the same warning of a second ``hp.run`` was not shown.
"""

from __future__ import annotations

import functools
import re
import warnings

import pytest
import torch
from cases import init_hccl, make_tiling

import hccl_py as hp
from hccl_py import Hccl, HcclDataType

N = 8
F32 = HcclDataType.HCCL_DATA_TYPE_FP32


def _record_address(x: hp.GmAddr, table: hp.GmAddr) -> None:
    hp.gm_tensor(table, torch.int64, 1)[0] = int(x)


def _addresses() -> int:
    table = torch.zeros(1, dtype=torch.int64)
    hp.launch(_record_address, torch.zeros(4), table, block_dim=1)
    return int(table[0])


def test_each_rank_numbers_its_buffers_from_0() -> None:
    """Every rank's first buffer has the same integer, in every run and every schedule: a
    kernel that keeps addresses (pointer tables) computes the same on every schedule."""
    first = 1 << 34  # the launch's first argument: buffer 0 of its rank
    assert hp.run(_addresses, world_size=3) == [first] * 3
    assert hp.run(_addresses, world_size=3) == [first] * 3  # not counted on from the last run
    assert hp.run(_addresses, world_size=3, explore=4) == [first] * 3
    assert hp.run(_addresses, world_size=3, seed=1) == [first] * 3


def _early_read(x: hp.GmAddr, y: hp.GmAddr, tilingGM: hp.GmAddr) -> None:
    """Core 1 reads the AllGather's output with nothing ordering it after core 0's Wait."""
    hccl = init_hccl(Hccl(), tilingGM, ops=["AllGather"])
    handle = hccl.AllGather[True](x, y, N, F32, 0)
    if hp.GetBlockIdx() == 0:
        hccl.Wait(handle)
    else:
        float(hp.gm_tensor(y, torch.float32, N).sum())
    hp.SyncAll()
    hccl.Finalize()


def _launch_early_read() -> None:
    x = torch.ones(N)
    y = torch.zeros(N * hp.get_world_size())
    kernel = functools.partial(_early_read)  # no parameter names: its buffers are bufN
    hp.launch(kernel, x, y, make_tiling(), block_dim=2, kernel_type="aiv")


def _report(**options: object) -> hp.WorldError:
    with pytest.raises(hp.WorldError, match="HcclRaceError") as caught:
        hp.run(_launch_early_read, world_size=1, timeout=30, **options)
    return caught.value


def test_an_explored_failure_names_the_buffers_its_replay_names() -> None:
    found = _report(explore=10)
    replayed = _report(seed=found.seed, poison=True)
    buffers = re.findall(r"\bbuf\d+\b", str(found))
    assert buffers and buffers == re.findall(r"\bbuf\d+\b", str(replayed))
    assert str(found).partition("\nschedule")[0] == str(replayed)


def _init_twice() -> None:
    hccl = Hccl()
    hccl.Init(hp.GetHcclContext(0))
    hccl.Init(hp.GetHcclContext(0))
    hccl.Finalize()


def _launch_init_twice() -> None:
    hp.launch(_init_twice)


def test_a_second_run_shows_its_warnings_again() -> None:
    """Shown once per hp.run call (an exploration's schedules share one), as gloo's rank
    processes, which start afresh, show them."""
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("default")
        hp.run(_launch_init_twice, world_size=2)
        hp.run(_launch_init_twice, world_size=2)
        hp.run(_launch_init_twice, world_size=2, explore=3)
    kinds = [w.message.kind for w in shown if isinstance(w.message, hp.HcclWarning)]
    assert kinds == ["repeated-init"] * 6


_KEPT: list = []


def _keep_address(x: hp.GmAddr) -> None:
    _KEPT.append((x, int(x)))


def _resolve_kept() -> str:
    try:
        hp.GmAddr.from_int(_KEPT[0][1])
    except hp.HcclBoundsError as exc:
        return str(exc)
    return "resolved"


def test_an_earlier_runs_integer_address_resolves_to_nothing() -> None:
    """Even while its buffer lives on (kept here), as another rank process's would not."""
    hp.run(lambda: hp.launch(_keep_address, torch.zeros(4)), world_size=1)
    try:
        said = hp.run(_resolve_kept, world_size=1)[0]
    finally:
        _KEPT.clear()
    assert "points into no GM allocation" in said
