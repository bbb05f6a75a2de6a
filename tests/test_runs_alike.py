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


def _take_address(x: hp.GmAddr, out: list) -> None:
    out.append((x, int(x)))


def _inner_run() -> None:
    hp.launch(_take_address, torch.full((4,), 7.0), [])


def _outer_rank() -> bool:
    """A rank that runs another world while it keeps an integer address of its own."""
    out: list = []
    hp.launch(_take_address, torch.zeros(4), out)
    hp.run(_inner_run, world_size=1)
    addr, value = out[0]
    return hp.GmAddr.from_int(value) == addr


def test_a_nested_run_numbers_its_buffers_apart() -> None:
    """Its ranks have address spaces of their own: the outer rank's integer still finds the
    outer rank's buffer (one count per rank number had made it the inner run's)."""
    assert hp.run(_outer_rank, world_size=1) == [True]


_INIT_TWICE = "def init_twice(hccl, ctx):\n    hccl.Init(ctx)\n    hccl.Init(ctx)\n"


def _from_file(name: str):
    space = {"__name__": name}
    exec(compile(_INIT_TWICE, f"{name}.py", "exec"), space)
    return space["init_twice"]


_IN_TWO_FILES = [_from_file("first_kernel_file"), _from_file("second_kernel_file")]


def _init_twice_in_two_files() -> None:
    for init_twice in _IN_TWO_FILES:
        hccl = Hccl()
        init_twice(hccl, hp.GetHcclContext(0))
        hccl.Finalize()


def test_the_same_warning_at_the_same_line_of_two_files_is_shown_for_each() -> None:
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("default")
        hp.run(lambda: hp.launch(_init_twice_in_two_files), world_size=1)
    places = [(w.filename, w.lineno) for w in shown if isinstance(w.message, hp.HcclWarning)]
    assert places == [("first_kernel_file.py", 3), ("second_kernel_file.py", 3)]
