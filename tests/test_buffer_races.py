"""Happens-before checks for collective buffers (issue 25, item 4).

Between the Commit of a round and the Wait (or a Query that reports it done)
that orders it, the server may read the round's send bytes and write its
receive bytes at any moment. A kernel that reads those receive bytes, or
writes either, in that window gets an HcclRaceError at the access, on every
schedule (the default one included), naming the handle, op, round, bytes and
both lines. Correct kernels (Wait, Query, in-place forms, a later task's Wait,
Finalize) get no report; what the check cannot see is a warning.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from cases import init_hccl, make_tiling
from expect import expects_warning
from hccl_py.backends.emu.modes import KernelMode
from hccl_py.backends.emu.world_lock import Unwatched
from test_sanitizer import F32, SUM, TIMEOUT, comm
from test_window_races import at

import hccl_py as hp

#: Every test here runs on thread and on greenlet runners (tests/conftest.py).
pytestmark = pytest.mark.runner_kinds

HERE = Path(__file__)
N = 8  # float32 elements each rank sends
SCHEDULES = [{}, {"schedule": "late"}, {"seed": 1}, {"seed": 2}]
Kernel = Callable[[Any, Any, Any], Any]


def run(kernel: Kernel, *, skip_local: bool = False, block_dim: int = 1, **options: Any) -> list:
    """Launch ``kernel(xGM, yGM, tilingGM)`` on 2 ranks (A3): x = rank + 1 (N floats), y = 0 (2N)."""

    def main() -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.full((N,), float(hp.get_rank() + 1))
        y = torch.zeros(2 * N)
        hp.launch(kernel, x, y, make_tiling(skip_local=skip_local), block_dim=block_dim)
        return x, y

    return hp.run(main, world_size=2, **{"platform": "A3", "timeout": TIMEOUT} | options)


def race(kernel: Kernel, **options: Any) -> hp.HcclRaceError:
    """Rank 0's report of a run that must fail with it."""
    with pytest.raises(hp.WorldError) as info:
        run(kernel, **options)
    err = info.value.failures[0]
    assert isinstance(err, hp.HcclRaceError), err
    return err


# ------------------------------------------------------------------ the programs
def all_gather(h: hp.Hccl, x: Any, y: Any) -> int:
    return h.AllGather[True](x, y, N, F32)  # commit-AllGather


def reduce_scatter(h: hp.Hccl, x: Any, y: Any) -> int:
    return h.ReduceScatter[True](x, y, N // 2, F32, SUM)  # commit-ReduceScatter


def alltoallv(h: hp.Hccl, x: Any, y: Any) -> int:
    counts, displs = [N // 2] * 2, [0, N // 2]
    return h.AlltoAllV[True](x, counts, displs, F32, y, counts, displs, F32)  # commit-AlltoAllV


def all_reduce(h: hp.Hccl, x: Any, y: Any) -> int:
    return h.AllReduce[True](x, y, N, F32, SUM)  # commit-AllReduce


def alltoall(h: hp.Hccl, x: Any, y: Any) -> int:
    return h.AlltoAll[True](x, y, N // 2, F32)  # commit-AlltoAll


PREPARES = {
    "AllGather": all_gather,
    "ReduceScatter": reduce_scatter,
    "AlltoAllV": alltoallv,
    "AllReduce": all_reduce,
    "AlltoAll": alltoall,
}
DESCRIBED = {
    "AllReduce": "AllReduce(FP32, count=8, SUM, repeat=1)",
    "AlltoAll": "AlltoAll(FP32, count=4, repeat=1)",
    "AllGather": "AllGather(FP32, count=8, repeat=1)",
    "ReduceScatter": "ReduceScatter(FP32, count=4, SUM, repeat=1)",
    "AlltoAllV": "AlltoAllV(FP32, sendCounts=[4, 4], recvCounts=[4, 4], repeat=1)",
}


def read_receive(x: Any, y: Any) -> None:
    hp.gm_tensor(y, torch.float32, 4).sum()  # read-recv


def write_send(x: Any, y: Any) -> None:
    hp.gm_tensor(x, torch.float32, 2)[:] = 0.0  # write-send


def write_receive(x: Any, y: Any) -> None:
    hp.gm_tensor(y, torch.float32, 2)[:] = 0.0  # write-recv


#: hazard -> (access, verb, bytes, buffer, what the server does, what the race risks)
HAZARDS = {
    "read-recv": (
        read_receive,
        "reads",
        "bytes [0, 16) of yGM",
        "writes these bytes (the receive buffer)",
        "the read may see the old bytes or the new ones",
    ),
    "write-send": (
        write_send,
        "writes",
        "bytes [0, 8) of xGM",
        "reads these bytes (the send buffer)",
        "the server may send the old bytes or the new ones",
    ),
    "write-recv": (
        write_receive,
        "writes",
        "bytes [0, 8) of yGM",
        "writes these bytes (the receive buffer)",
        "the round may overwrite the kernel's write, or not",
    ),
}


def racy(op: str, hazard: str) -> Kernel:
    """Rank 0 makes ``hazard``'s access between the Commit and the Wait of ``op``."""

    def kernel(xGM: Any, yGM: Any, tilingGM: Any) -> None:
        h = comm(tilingGM)
        handle = PREPARES[op](h, xGM, yGM)
        if hp.get_rank() == 0:
            HAZARDS[hazard][0](xGM, yGM)
        h.Wait(handle)
        h.Finalize()

    return kernel


# --------------------------------------------------------------- what is reported
@pytest.mark.parametrize("hazard", sorted(HAZARDS))
@pytest.mark.parametrize("op", sorted(PREPARES))
def test_each_hazard_is_reported_with_both_lines_on_every_schedule(op: str, hazard: str) -> None:
    """On thread and greenlet runners alike (a greenlet runner that holds the world lock
    turned dispatch modes off on the shared thread: the next runner must get them back)."""
    access, verb, where, server, risk = HAZARDS[hazard]
    want = (
        f"[rank 0, domain hccl_world_group, handle 0, op {op}, round 0] collective buffer race: "
        f"rank 0 {verb} {where} at {at(hazard, access.__name__, HERE)} before the Wait of round 0 "
        f"of handle 0 ({DESCRIBED[op]}), committed at "
        f"{at('commit-' + op, PREPARES[op].__name__, HERE)}: the server {server} when the round "
        f"runs, so {risk}. Call Wait(0) (or Query until it reports the round done) before "
        "accessing them; see docs/sanitizer.md#buffer-races"
    )
    for options in SCHEDULES:  # whether the round ran already does not matter
        err = race(racy(op, hazard), **options)
        assert str(err) == want, options
        assert (err.handle, err.op, err.round, err.domain) == (0, op, 0, "hccl_world_group")


def test_a_read_through_tolist_is_a_read_under_poison() -> None:
    def kernel(xGM: Any, yGM: Any, tilingGM: Any) -> None:
        h = comm(tilingGM)
        handle = all_gather(h, xGM, yGM)
        hp.gm_tensor(yGM, torch.float32, 2 * N)[N:].tolist()  # tolist
        h.Wait(handle)
        h.Finalize()

    err = race(kernel, poison=True)  # reads that bypass aten are looked at under poison
    assert f"reads bytes [32, 64) of yGM at {at('tolist', 'kernel', HERE)}" in str(err)
    run(kernel)  # not otherwise: they would cost every tensor method a Python call


def test_each_round_is_ordered_by_its_own_wait() -> None:
    """Round 0 waited, round 1 not: a read of round 0's bytes is fine, of round 1's a race."""
    half = N // 2

    def kernel(xGM: Any, yGM: Any, tilingGM: Any) -> None:
        h = comm(tilingGM)
        handle = h.AllGather[True](xGM, yGM, half, F32, N, 2)  # two rounds
        h.Wait(handle)
        out = hp.gm_tensor(yGM, torch.float32, 2 * N)
        out[:half].sum()  # round 0 of rank 0's block: waited
        out[N : N + half].sum()  # round 0 of rank 1's block: waited
        out[half:N].sum()  # round-1
        h.Wait(handle)
        h.Finalize()

    err = race(kernel)
    assert err.round == 1
    assert f"reads bytes [16, 32) of yGM at {at('round-1', 'kernel', HERE)}" in str(err)


#: Indexing operations on the receive buffer of a two-round AllGather after the Wait of round 0:
#: each touches only the elements it picks. ``ok`` picks round 0's elements (rank 0's block
#: is elements 0-3, rank 1's 8-11), ``late`` adds one of round 1's (element 5 or 6).
ROUND0 = [0, 1, 8, 11]
PICKS: dict[str, Callable[[torch.Tensor, list[int]], Any]] = {
    "index": lambda out, at: out[torch.tensor(at)].sum(),
    "bool mask": lambda out, at: out[torch.isin(torch.arange(2 * N), torch.tensor(at))].sum(),
    "index_select": lambda out, at: torch.index_select(out, 0, torch.tensor(at)).sum(),
    "gather": lambda out, at: torch.gather(out, 0, torch.tensor(at)).sum(),
    "take": lambda out, at: torch.take(out, torch.tensor(at)).sum(),
    "masked_select": lambda out, at: torch.masked_select(
        out, torch.isin(torch.arange(2 * N), torch.tensor(at))
    ).sum(),
    "embedding": lambda out, at: torch.nn.functional.embedding(
        torch.tensor(at), out.view(-1, 1)
    ).sum(),
    "index_put_": lambda out, at: out.index_put_((torch.tensor(at),), torch.tensor(1.0)),
    "setitem": lambda out, at: out.__setitem__(torch.tensor(at), 1.0),
    "scatter_": lambda out, at: out.scatter_(0, torch.tensor(at), 1.0),
    "index_fill_": lambda out, at: out.index_fill_(0, torch.tensor(at), 1.0),
    "index_add_": lambda out, at: out.index_add_(0, torch.tensor(at), torch.ones(len(at))),
    "masked_fill_": lambda out, at: out.masked_fill_(
        torch.isin(torch.arange(2 * N), torch.tensor(at)), 1.0
    ),
    "index_copy_": lambda out, at: out.index_copy_(0, torch.tensor(at), torch.ones(len(at))),
    "masked_scatter_": lambda out, at: out.masked_scatter_(
        torch.isin(torch.arange(2 * N), torch.tensor(at)), torch.ones(2 * N)
    ),
    "scatter_add_": lambda out, at: out.scatter_add_(0, torch.tensor(at), torch.ones(len(at))),
    "scatter_reduce_": lambda out, at: out.scatter_reduce_(
        0, torch.tensor(at), torch.ones(len(at)), "amax"
    ),
}
WRITES = {name for name in PICKS if name.endswith("_")} | {"setitem"}


def _picking(pick: str, at: list[int]) -> Kernel:
    def kernel(xGM: Any, yGM: Any, tilingGM: Any) -> None:
        h = comm(tilingGM)
        handle = h.AllGather[True](xGM, yGM, N // 2, F32, N, 2)  # two rounds
        h.Wait(handle)
        if hp.get_rank() == 0:
            PICKS[pick](hp.gm_tensor(yGM, torch.float32, 2 * N), at)
        h.Wait(handle)
        h.Finalize()

    return kernel


@pytest.mark.parametrize("pick", sorted(PICKS))
def test_an_indexing_operation_touches_only_the_elements_it_picks(pick: str) -> None:
    """A gather from the rows of a finished round, out of a view that spans a pending one,
    is no race; picking one element of the pending round is, and the report names only its
    bytes. Before 2026-11-28 the whole view counted, a false report."""
    for options in SCHEDULES:
        run(_picking(pick, ROUND0), **options)
    late = 6 if pick in WRITES else 5
    err = race(_picking(pick, [*ROUND0, late]))
    assert err.round == 1
    verb = "writes" if pick in WRITES else "reads"
    where = f"bytes [{late * 4}, {late * 4 + 4}) of yGM at {HERE.name}:"  # the PICKS line
    assert f"rank 0 {verb} {where}" in str(err), str(err)


# ----------------------------------------------------------- what is not reported
def _kernel(op: str, order: Callable[[hp.Hccl, int], None]) -> Kernel:
    """Prepare ``op``, order it with ``order(h, handle)``, then read and write every byte."""

    def kernel(xGM: Any, yGM: Any, tilingGM: Any) -> None:
        h = comm(tilingGM)
        handle = PREPARES[op](h, xGM, yGM)
        order(h, handle)
        hp.gm_tensor(yGM, torch.float32, 2 * N).add_(1.0)
        hp.gm_tensor(xGM, torch.float32, N).mul_(2.0)
        h.Finalize()

    return kernel


def _query_until_done(h: hp.Hccl, handle: int) -> None:
    while h.Query(handle) < 1:
        pass


@pytest.mark.parametrize("op", sorted(PREPARES))
@pytest.mark.parametrize("order", ["Wait", "Query"])
def test_wait_or_a_query_that_reports_done_orders_the_round(op: str, order: str) -> None:
    wait = {"Wait": lambda h, handle: h.Wait(handle), "Query": _query_until_done}[order]
    for options in SCHEDULES:
        for x, y in run(_kernel(op, wait), **options):
            assert torch.equal(x, x[0] * torch.ones(N)) and x[0] in (2.0, 4.0)
            assert not (y == 0).any(), "every received element was incremented"


def test_a_query_that_reports_not_done_orders_nothing() -> None:
    """Under the late schedule the first Query returns 0: the read after it is a race."""

    def kernel(xGM: Any, yGM: Any, tilingGM: Any) -> None:
        h = comm(tilingGM)
        handle = all_gather(h, xGM, yGM)
        assert h.Query(handle) == 0
        read_receive(xGM, yGM)
        h.Wait(handle)
        h.Finalize()

    err = race(kernel, schedule="late")
    assert f"reads bytes [0, 16) of yGM at {at('read-recv', 'read_receive', HERE)}" in str(err)


def test_the_wait_of_a_later_task_orders_an_earlier_one_and_finalize_orders_all() -> None:
    def kernel(xGM: Any, yGM: Any, tilingGM: Any) -> None:
        h = comm(tilingGM)
        first = all_gather(h, xGM, yGM)
        second = h.AllReduce[True](xGM, xGM, N, F32, SUM)
        h.Wait(second)  # the server ran the AllGather before it
        read_receive(xGM, yGM)
        third = h.AllGather[True](xGM, yGM, N, F32)
        h.Finalize()  # waits for the last round of every handle
        read_receive(xGM, yGM)
        assert (first, second, third) == (0, 1, 2)

    for _x, y in run(kernel):
        assert torch.equal(y, torch.full((2 * N,), 3.0))


def test_in_place_all_reduce_gives_no_false_report_and_its_race_is_found() -> None:
    def kernel(xGM: Any, yGM: Any, tilingGM: Any, early: bool) -> None:
        h = comm(tilingGM)
        hp.gm_tensor(xGM, torch.float32, N).add_(1.0)  # the input, before the Commit
        handle = h.AllReduce[True](xGM, xGM, N, F32, SUM)
        if early:
            hp.gm_tensor(xGM, torch.float32, N).sum()  # in-place-early
        h.Wait(handle)
        hp.gm_tensor(xGM, torch.float32, N).mul_(2.0)
        h.Finalize()

    def main(early: bool) -> torch.Tensor:
        x = torch.full((N,), float(hp.get_rank() + 1))
        hp.launch(kernel, x, torch.zeros(1), make_tiling(), early)
        return x

    for options in SCHEDULES:
        out = hp.run(main, world_size=2, timeout=TIMEOUT, args=(False,), **options)
        assert all(torch.equal(x, torch.full((N,), 10.0)) for x in out)
    with pytest.raises(hp.WorldError) as info:
        hp.run(main, world_size=2, timeout=TIMEOUT, args=(True,))
    assert f"at {at('in-place-early', 'kernel', HERE)}" in str(info.value.failures[0])


def test_the_own_block_of_an_in_place_all_gather_may_be_read_but_not_written() -> None:
    """The round writes back what it read there: reading it early is no race, writing is."""

    def kernel(xGM: Any, yGM: Any, tilingGM: Any, write: bool) -> None:
        h = comm(tilingGM)
        me = h.GetRankId()
        own = yGM + me * N * 4
        hp.gm_tensor(own, torch.float32, N).fill_(float(me + 1))
        handle = h.AllGather[True](own, yGM, N, F32)
        hp.gm_tensor(own, torch.float32, N).sum()  # the rank's own data: no race
        if write:
            hp.gm_tensor(own, torch.float32, 1).fill_(0.0)  # own-write
        h.Wait(handle)
        h.Finalize()

    def main(write: bool) -> torch.Tensor:
        y = torch.zeros(2 * N)
        hp.launch(kernel, torch.zeros(1), y, make_tiling(), write)
        return y

    for y in hp.run(main, world_size=2, timeout=TIMEOUT, args=(False,), schedule="late"):
        assert torch.equal(y, torch.tensor([1.0] * N + [2.0] * N))
    with pytest.raises(hp.WorldError) as info:
        hp.run(main, world_size=2, timeout=TIMEOUT, args=(True,))
    err = info.value.failures[0]
    assert f"writes bytes [0, 4) of yGM at {at('own-write', 'kernel', HERE)}" in str(err)
    assert "(the send buffer)" in str(err)


@pytest.mark.parametrize("options", [{}, {"poison": True}, {"poison": True, "schedule": "late"}])
def test_skip_local_rank_copy_keeps_a_copy_made_before_the_commit(options: dict) -> None:
    """The kernel copies its own block before the round is committed (as A2 kernels do): before,
    poison filled that block, which the round never writes, with NaN over the copy."""

    def kernel(xGM: Any, yGM: Any, tilingGM: Any) -> None:
        h = comm(tilingGM)
        me = h.GetRankId()
        own = hp.gm_tensor(yGM + me * N * 4, torch.float32, N)
        own.copy_(hp.gm_tensor(xGM, torch.float32, N))  # the local copy, by the kernel
        h.Wait(all_gather(h, xGM, yGM))
        h.Finalize()

    for _x, y in run(kernel, skip_local=True, platform="A2", **options):
        assert torch.equal(y, torch.tensor([1.0] * N + [2.0] * N))


def test_skip_local_rank_copy_leaves_the_own_block_to_the_kernel() -> None:
    def kernel(xGM: Any, yGM: Any, tilingGM: Any) -> None:
        h = comm(tilingGM)
        me = h.GetRankId()
        handle = all_gather(h, xGM, yGM)
        own = hp.gm_tensor(yGM + me * N * 4, torch.float32, N)
        own.copy_(hp.gm_tensor(xGM, torch.float32, N))  # the local copy, by the kernel
        h.Wait(handle)
        h.Finalize()

    for _x, y in run(kernel, skip_local=True, platform="A2"):
        assert torch.equal(y, torch.tensor([1.0] * N + [2.0] * N))


def test_cores_that_wait_read_without_report() -> None:
    def kernel(xGM: Any, yGM: Any, tilingGM: Any) -> None:
        h = comm(tilingGM)
        handle = all_gather(h, xGM, yGM)  # every core commits; block 0 sends
        h.Wait(handle)
        read_receive(xGM, yGM)
        hp.SyncAll()
        h.Finalize()

    for options in SCHEDULES:
        for _x, y in run(kernel, block_dim=3, **options):
            assert torch.equal(y, torch.tensor([1.0] * N + [2.0] * N))


@expects_warning("buffer-race")
def test_a_numpy_view_of_pending_bytes_is_a_warning_not_an_error_under_poison() -> None:
    def kernel(xGM: Any, yGM: Any, tilingGM: Any, seen: list) -> None:
        h = comm(tilingGM)
        handle = all_gather(h, xGM, yGM)
        view = hp.gm_tensor(yGM, torch.float32, 2 * N).numpy()  # numpy-view
        h.Wait(handle)
        seen.append(float(view.sum()))  # read after the Wait: correct, and not seen by the check
        h.Finalize()

    def main() -> list:
        seen: list = []
        x = torch.full((N,), float(hp.get_rank() + 1))
        hp.launch(kernel, x, torch.zeros(2 * N), make_tiling(), seen)
        return seen

    result = hp.run(main, world_size=2, platform="A3", timeout=TIMEOUT, poison=True)
    assert list(result) == [[24.0], [24.0]]
    for rank in (0, 1):
        (warning,) = result.warnings[rank]
        assert warning.kind == "buffer-race"
        assert (warning.handle, warning.op, warning.round) == (0, "AllGather", 0)
        assert f"numpy view taken at {at('numpy-view', 'kernel', HERE)}" in str(warning)


@expects_warning("buffer-race")
def test_numpy_views_taken_again_at_one_line_are_one_warning() -> None:
    """A loop that takes the view of one pending round at one line three times: one warning."""

    def kernel(xGM: Any, yGM: Any, tilingGM: Any) -> None:
        h = comm(tilingGM)
        handle = all_gather(h, xGM, yGM)
        for _ in range(3):
            hp.gm_tensor(yGM, torch.float32, 2 * N).numpy()
        h.Wait(handle)
        h.Finalize()

    def main() -> None:
        x = torch.full((N,), float(hp.get_rank() + 1))
        hp.launch(kernel, x, torch.zeros(2 * N), make_tiling())

    result = hp.run(main, world_size=2, platform="A3", timeout=TIMEOUT, poison=True)
    for rank in (0, 1):
        assert [w.kind for w in result.warnings[rank]] == ["buffer-race"]


def test_a_warning_of_the_emulator_points_at_the_kernel_line() -> None:
    """Python's warning names the user's line, not the emulator's (whose folder, ``emu/`` in a
    checkout, lies outside ``hccl_py/``): the same text in a checkout and an installed wheel."""

    def kernel(xGM: Any, yGM: Any, tilingGM: Any) -> None:
        h = comm(tilingGM)
        handle = all_gather(h, xGM, yGM)
        hp.gm_tensor(yGM, torch.float32, 2 * N).numpy()  # numpy-view-line
        h.Wait(handle)
        h.Finalize()

    def main() -> None:
        x = torch.full((N,), float(hp.get_rank() + 1))
        hp.launch(kernel, x, torch.zeros(2 * N), make_tiling())

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        hp.run(main, world_size=2, platform="A3", timeout=TIMEOUT, poison=True)
    shown = [(Path(w.filename), w.lineno) for w in caught if "[buffer-race]" in str(w.message)]
    line = at("numpy-view-line", "kernel", HERE).split(":")[1].split(" ")[0]
    assert shown == [(HERE, int(line))] * 2, shown


def _two_domains(synced: bool, unsynced_rank: int | None = None) -> Kernel:
    """AllGather x -> y on domain 0, AllReduce of x in place on domain 1; only the latter waited
    (``unsynced_rank``: the one rank that leaves out the InterHcclGroupSync)."""

    def kernel(xGM: Any, yGM: Any, tilingGM: Any) -> None:
        first_domain = init_hccl(hp.Hccl(), tilingGM, 0, ops=("AllGather",))
        second_domain = init_hccl(hp.Hccl(), tilingGM, 1, ops=("AllReduce",))
        gather = all_gather(first_domain, xGM, yGM)
        if synced and hp.get_rank() != unsynced_rank:
            second_domain.InterHcclGroupSync(0, gather)
        second_domain.Wait(second_domain.AllReduce[True](xGM, xGM, N, F32, SUM))
        read_receive(xGM, yGM)
        second_domain.Finalize()
        first_domain.Finalize()

    return kernel


def _on_two_domains(kernel: Kernel, **options: Any) -> list:
    def main() -> tuple[torch.Tensor, torch.Tensor]:
        groups = {0: hp.world_group(), 1: hp.new_group(range(2))}
        x = torch.full((N,), float(hp.get_rank() + 1))
        y = torch.zeros(2 * N)
        hp.launch(kernel, x, y, make_tiling(groups=groups), groups=groups)
        return x, y

    return hp.run(main, world_size=2, timeout=TIMEOUT, **options)


@pytest.mark.parametrize("unsynced", [0, 1])
def test_a_rank_whose_own_sync_is_missing_is_reported_though_its_peer_synced(
    unsynced: int,
) -> None:
    """Each rank's server follows that rank's own InterHcclGroupSync: the peer's sync holds back
    the peer's server, not this rank's, which may send x before its own AllGather read it. The
    emulator runs the round after every rank's dependencies (so its numbers were right), and
    until stop 64 its race check ordered every rank by them too: no report, where gloo sent the
    AllReduce's result over x before the AllGather read it."""
    for options in ({}, {"schedule": "late"}, {"seed": 3}):
        with pytest.raises(hp.WorldError) as info:
            _on_two_domains(_two_domains(synced=True, unsynced_rank=unsynced), **options)
        err = info.value.failures[unsynced]
        assert isinstance(err, hp.HcclRaceError), err
        assert (err.rank, err.op, err.handle) == (unsynced, "AllReduce", 0)
        assert "race between domains: the server writes bytes [0, 32) of x" in str(err)


def test_a_wait_orders_the_tasks_its_task_depends_on_through_inter_hccl_group_sync() -> None:
    for options in SCHEDULES:
        for x, y in _on_two_domains(_two_domains(synced=True), **options):
            assert torch.equal(y, torch.tensor([1.0] * N + [2.0] * N))
            assert torch.equal(x, torch.full((N,), 3.0))
    with pytest.raises(hp.WorldError) as info:  # without the sync nothing orders the AllGather
        _on_two_domains(_two_domains(synced=False))
    err = info.value.failures[0]
    # found at the AllReduce's Commit: it writes x in place, which the AllGather of the other
    # domain sends, and the two domains' servers may run them in either order
    assert isinstance(err, hp.HcclRaceError) and (err.op, err.handle) == ("AllReduce", 0)
    assert "race between domains: the server writes bytes [0, 32) of x" in str(err)
    assert "reads them for round 0 of handle 0 (AllGather" in str(err)


def _chained(order: str) -> Kernel:
    """Domain 0 gathers x into mid, domain 1 gathers mid into y; ``order``: what orders the
    second after the first ("sync": InterHcclGroupSync, "wait": a Wait before its Commit)."""

    def kernel(xGM: Any, midGM: Any, yGM: Any, tilingGM: Any) -> None:
        first_domain = init_hccl(hp.Hccl(), tilingGM, 0, ops=("AllGather",))
        second_domain = init_hccl(hp.Hccl(), tilingGM, 1, ops=("AllGather",))
        gather = first_domain.AllGather[True](xGM, midGM, N, F32, 0)
        if order == "sync":
            second_domain.InterHcclGroupSync(0, gather)
        if order == "wait":
            first_domain.Wait(gather)
        second_domain.Wait(second_domain.AllGather[True](midGM, yGM, 2 * N, F32, 0))
        if order != "wait":
            first_domain.Wait(gather)
        second_domain.Finalize()
        first_domain.Finalize()

    def main() -> torch.Tensor:
        groups = {0: hp.world_group(), 1: hp.new_group([1, 0])}
        x, mid, y = torch.full((N,), hp.get_rank() + 1.0), torch.zeros(2 * N), torch.zeros(4 * N)
        hp.launch(kernel, x, mid, y, make_tiling(groups=groups), groups=groups)
        return y

    return main


@pytest.mark.parametrize("order", ["sync", "wait"])
def test_a_round_of_one_domain_ordered_after_another_domains_round_is_no_race(order: str) -> None:
    for options in SCHEDULES:
        for y in hp.run(_chained(order), world_size=2, timeout=TIMEOUT, **options):
            # every rank's mid is [1] * N + [2] * N; domain 1 gathers rank 1's, then rank 0's
            assert y.tolist() == ([1.0] * N + [2.0] * N) * 2, y


def test_a_round_that_sends_another_domains_pending_receive_range_is_a_race() -> None:
    """The two domains' servers run their tasks independently (gloo's domains do): without an
    InterHcclGroupSync or a Wait, domain 1 may send mid before domain 0 wrote it. Before
    2026-11-30 the emulator ran the older round first and reported nothing, while gloo sent
    the zeros."""
    with pytest.raises(hp.WorldError) as info:
        hp.run(_chained("none"), world_size=2, timeout=TIMEOUT)
    err = info.value.failures[0]
    assert isinstance(err, hp.HcclRaceError) and (err.op, err.handle) == ("AllGather", 0)
    assert err.domain == "group_1_0"
    assert "race between domains: the server reads bytes [0, 64) of mid" in str(err)
    assert "writes them for round 0 of handle 0 (AllGather" in str(err)
    assert "of domain hccl_world_group" in str(err)


def _gated(write_after_commit: bool) -> Kernel:
    """Domain 1's AllReduce of z (committed at its Prepare) waits through InterHcclGroupSync
    for domain 0's AllGather of x, committed later: z may be written until that Commit, as
    BatchMatMulReduceScatterAlltoAll writes a ReduceScatter<true>'s input after its Prepare."""

    def kernel(xGM: Any, yGM: Any, zGM: Any, tilingGM: Any) -> None:
        first_domain = init_hccl(hp.Hccl(), tilingGM, 0, ops=("AllGather",))
        second_domain = init_hccl(hp.Hccl(), tilingGM, 1, ops=("AllReduce",))
        gather = first_domain.AllGather[False](xGM, yGM, N, F32, 0)
        second_domain.InterHcclGroupSync(0, gather)
        reduce = second_domain.AllReduce[True](zGM, zGM, N, F32, SUM)
        hp.gm_tensor(zGM, torch.float32, N)[:] = hp.get_rank() + 1.0  # the server cannot start yet
        first_domain.Commit(gather)
        if write_after_commit:
            hp.gm_tensor(zGM, torch.float32, 2)[:] = 0.0  # now it may
        first_domain.Wait(gather)
        second_domain.Wait(reduce)
        second_domain.Finalize()
        first_domain.Finalize()

    def main() -> torch.Tensor:
        groups = {0: hp.world_group(), 1: hp.new_group(range(2))}
        x, y, z = torch.ones(N), torch.zeros(2 * N), torch.zeros(N)
        hp.launch(kernel, x, y, z, make_tiling(groups=groups), groups=groups)
        return z

    return main


def test_a_task_behind_an_uncommitted_inter_hccl_group_sync_dependency_races_from_its_commit() -> (
    None
):
    for options in SCHEDULES:
        result = hp.run(_gated(False), world_size=2, timeout=TIMEOUT, **options)
        assert all(torch.equal(z, torch.full((N,), 3.0)) for z in result)
    with pytest.raises(hp.WorldError) as info:
        hp.run(_gated(True), world_size=2, timeout=TIMEOUT)
    err = info.value.failures[0]
    assert isinstance(err, hp.HcclRaceError) and (err.op, err.handle) == ("AllReduce", 0), err
    assert "writes bytes [0, 8) of zGM" in str(err), err


def test_exploring_reports_a_missing_wait_in_its_first_schedule() -> None:
    with pytest.raises(hp.WorldError) as info:
        run(racy("AllGather", "read-recv"), explore=3)
    assert isinstance(info.value.failures[0], hp.HcclRaceError)
    assert info.value.seed is None, "the default schedule (a plain hp.run) finds it"


def test_the_world_lock_keeps_dispatch_modes_away_from_hccl_py_s_own_work() -> None:
    """Its own operations would only be skipped by the watch: they do not reach it at all."""
    seen: list[str] = []

    class Seen(KernelMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
            seen.append(func.overloadpacket.__name__)
            return func(*args, **(kwargs or {}))

    lock = Unwatched(threading.RLock())
    t = torch.zeros(4)
    with Seen():
        with lock:
            t.add_(1)
            with lock:  # nested: still off, and still off after the inner exit
                t.mul_(2)
            t.sub_(1)
            assert lock._is_owned()
        t.neg_()  # after the outermost exit: seen again
    assert seen == ["neg_"]
    assert not lock._is_owned()


#: Reads through operators made of others (CompositeImplicitAutograd), which a dispatch mode
#: sees whole inside torch.inference_mode(): aten.to.dtype marks its tensor as only viewed.
COMPOSITE_READS = {
    "double": lambda t: t.double(),
    "to-half": lambda t: t.to(torch.float16),
    "type": lambda t: t.type(torch.float64),
    "contiguous-of-transposed": lambda t: t.view(2, 8).t().contiguous(),
}


def _read_in_inference_mode(how: str, wait_first: bool) -> Kernel:
    def kernel(xGM: Any, yGM: Any, tilingGM: Any) -> None:
        h = comm(tilingGM)
        handle = all_gather(h, xGM, yGM)
        if wait_first:
            h.Wait(handle)
        with torch.inference_mode():
            got = COMPOSITE_READS[how](hp.gm_tensor(yGM, torch.float32, 2 * N))
        if not wait_first:
            h.Wait(handle)
        h.Finalize()
        want = COMPOSITE_READS[how](torch.tensor([1.0] * N + [2.0] * N))
        assert not wait_first or torch.equal(got, want)

    return kernel


@pytest.mark.parametrize("how", sorted(COMPOSITE_READS))
def test_a_read_in_inference_mode_is_a_read(how: str) -> None:
    """Until stop 65 a read of a pending receive buffer through ``.double()``, ``.to(dtype)``,
    ``.type()`` or ``.contiguous()`` of a transposed view inside ``torch.inference_mode()``
    went unreported (the watch saw the operator whole, whose tensor is only viewed); outside
    inference mode it was reported. The watch now counts the tensor as read when the result
    is no view of it."""
    run(_read_in_inference_mode(how, wait_first=True))  # ordered by its Wait: no report
    err = race(_read_in_inference_mode(how, wait_first=False))
    assert "collective buffer race: rank 0 reads bytes [0, 64) of yGM" in str(err), err
    assert (err.handle, err.op, err.round) == (0, "AllGather", 0)
