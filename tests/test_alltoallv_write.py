"""AlltoAllvWrite on Ascend 950 (issue 13, item 4): slices land in the peers' CCU windows.

The slice layout follows the documentation's example kernel: peer j's data is
bytes [j * S, (j + 1) * S) of usrIn, split in two halves (one per die) on the
CCU server; every sender writes at remoteWinOffset = rankId * S.
"""

from __future__ import annotations

import functools
import threading
from typing import Any

import numpy as np
import pytest
import torch
from hccl_py.backends.emu.world import EmuWorld

import hccl_py as hp
from hccl_py import Hccl, HcclCMDType, Mc2CcTiling, Mc2CcTilingConfig, Mc2InitTiling
from hccl_py.core.group import Group
from hccl_py.kernel.context import current_rank_context
from hccl_py.server.protocol import EXCHANGE, Server

S = 10  # bytes per peer (odd halves on purpose: 5 and 5, then 10 = 5 + 5)
CCU = hp.HcclServerType.HCCL_SERVER_TYPE_CCU
AICPU = hp.HcclServerType.HCCL_SERVER_TYPE_AICPU


class WriteTiling(hp.TilingData):
    _fields_ = [("init", Mc2InitTiling), ("write", Mc2CcTiling)]


def tiling() -> WriteTiling:
    t = WriteTiling()
    cfg = Mc2CcTilingConfig(
        "hccl_world_group", HcclCMDType.HCCL_CMD_HALF_ALLTOALLV, "AlltoAllvWrite=level0:fullmesh"
    )
    assert cfg.GetTiling(t.init) == 0 and cfg.GetTiling(t.write) == 0
    return t


def write_rank(server: int = CCU, local_size: int | None = None, block_dim: int = 1) -> list[int]:
    """Every rank sends bytes (50 * rank + j) to peer j; returns its window's first bytes.

    ``local_size`` is AlltoAllvWrite's localDataSize (default: the bytes peers write here).
    """
    rank, n = hp.get_rank(), hp.get_world_size()
    x = (torch.arange(n * S) // S + 50 * rank).to(torch.uint8)
    received = torch.zeros(n * S, dtype=torch.uint8)

    def kernel(xGM, outGM, tilingGM):
        t = hp.GET_TILING_DATA_WITH_STRUCT(WriteTiling, tilingGM)
        h = Hccl[server]()
        h.InitV2(hp.GetHcclContext(0), t)
        h.SetCcTilingV2(hp.offsetof(WriteTiling, "write"))
        me, dim = h.GetRankId(), h.GetRankDim()
        sizes = [S // 2] * dim + [S - S // 2] * dim
        offsets = [j * S for j in range(dim)] + [j * S + S // 2 for j in range(dim)]
        size = dim * S if local_size is None else local_size
        handle = h.AlltoAllvWrite[True](xGM, offsets, sizes, me * S, size)
        assert h.Wait(handle) == 0
        window = hp.GetHcclContext(0).windowsOut[0]  # this rank's own window, as 950 kernels read
        hp.gm_tensor(outGM, torch.uint8, dim * S)[:] = hp.gm_tensor(window, torch.uint8, dim * S)
        hp.SyncAll()
        h.Finalize()

    hp.launch(kernel, x, received, tiling(), block_dim=block_dim)
    return received.tolist()


def test_alltoallv_write_puts_every_slice_in_its_peer_window(backend: str) -> None:
    n = 4
    got = np.array(hp.run(write_rank, world_size=n, platform="950", backend=backend))
    want = np.stack([np.repeat(50 * np.arange(n) + j, S) for j in range(n)])
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("local_size", [0, 512 + 4 * S, 1 << 20])
def test_local_data_size_bounds_nothing(local_size: int) -> None:
    """localDataSize is the bytes peers write here (0 when none): the CCU client only stores it.

    The 950 dispatch kernel passes 512 + its own experts' bytes, more than usrIn
    holds; the combine kernel passes 0. Bounds are checked on the slices.
    """
    n = 2
    got = np.array(hp.run(write_rank, world_size=n, platform="950", args=(CCU, local_size)))
    want = np.stack([np.repeat(50 * np.arange(n) + j, S) for j in range(n)])
    np.testing.assert_array_equal(got, want)


def _write_bounds_error(offsets: Any, sizes: Any) -> hp.HcclBoundsError:
    """Rank 0's error of an AlltoAllvWrite on 950 with these usrIn slices (``strict=False``)."""

    def kernel(xGM, tilingGM):
        h = Hccl[CCU]()
        h.InitV2(hp.GetHcclContext(0), hp.GET_TILING_DATA_WITH_STRUCT(WriteTiling, tilingGM))
        h.SetCcTilingV2(hp.offsetof(WriteTiling, "write"))
        h.AlltoAllvWrite[True](xGM, offsets, sizes, 0, 8)

    def main():
        hp.launch(kernel, torch.zeros(8, dtype=torch.uint8), tiling())

    with pytest.raises(hp.WorldError) as info:
        hp.run(main, world_size=2, platform="950", strict=False)
    err = info.value.failures[0]
    assert isinstance(err, hp.HcclBoundsError)
    return err


def test_a_slice_read_past_usr_in_is_a_bounds_error() -> None:
    err = _write_bounds_error([0, 0, 4, 6], [4, 4, 4, 4])
    assert "usrIn's slice for rank 1 (die 1)" in err.reason
    assert "[6, 10)" in err.reason


def test_a_uint64_size_past_int64_is_a_bounds_error() -> None:
    """2**64 - 1 (-1 stored as uint64) was a raw OverflowError in the slice arithmetic."""
    err = _write_bounds_error([0, 0, 4, 4], np.array([4, (1 << 64) - 1, 4, 4], dtype=np.uint64))
    assert "sendSizes holds 18446744073709551615, a byte count past the end" in err.reason


def test_alltoallv_write_on_the_950_ai_cpu_server_returns_minus_one() -> None:
    """platform_v310/hccl_aicpu.h: the AI CPU client's AlltoAllvWrite returns -1 on 950."""

    def kernel(xGM, tilingGM):
        h = Hccl[AICPU]()
        h.InitV2(hp.GetHcclContext(0), hp.GET_TILING_DATA_WITH_STRUCT(WriteTiling, tilingGM))
        h.SetCcTilingV2(hp.offsetof(WriteTiling, "write"))
        return h.AlltoAllvWrite[True](xGM, [0, 1], [1, 1], 0, 2), h.last_error

    def main():
        out = []
        hp.launch(
            lambda x, t: out.append(kernel(x, t)), torch.zeros(2, dtype=torch.uint8), tiling()
        )
        return out[0]

    for handle, reason in hp.run(main, world_size=2, platform="950", strict=False):
        assert handle == -1
        assert "not supported by the AI CPU server on Ascend 950" in reason
        assert "HCCL_SERVER_TYPE_CCU" in reason


def test_alltoallv_write_only_on_950() -> None:
    def kernel(tilingGM):
        h = Hccl()
        h.InitV2(hp.GetHcclContext(0), hp.GET_TILING_DATA_WITH_STRUCT(WriteTiling, tilingGM))
        h.SetCcTilingV2(hp.offsetof(WriteTiling, "write"))
        return h.AlltoAllvWrite[True](tilingGM, [0, 0], [1, 1], 0, 1), h.last_error

    def main():
        out = []
        hp.launch(lambda t: out.append(kernel(t)), tiling())
        return out[0]

    result, reason = hp.run(main, world_size=2, platform="A3", strict=False)[0]
    assert result == -1 and reason.endswith("AlltoAllvWrite is not supported on Atlas A3")


def test_alltoallv_write_slice_past_the_window_is_a_bounds_error() -> None:
    """The 950 window holds twice HCCL_BUFFSIZE (ops-transformer's arch35 hosts: "A5 actually
    allocates twice HCCL_BUFFSIZE"); until 2026-12-01 it held HCCL_BUFFSIZE."""

    def kernel(xGM, tilingGM):
        h = Hccl[CCU]()
        h.InitV2(hp.GetHcclContext(0), hp.GET_TILING_DATA_WITH_STRUCT(WriteTiling, tilingGM))
        h.SetCcTilingV2(hp.offsetof(WriteTiling, "write"))
        assert hp.GetHcclContext(0).winSize == 2 << 20
        h.AlltoAllvWrite[True](xGM, [0, 0, 4, 4], [4, 4, 4, 4], (2 << 20) - 6, 8)

    def main():
        hp.launch(kernel, torch.zeros(8, dtype=torch.uint8), tiling())

    with pytest.raises(hp.WorldError) as info:
        hp.run(main, world_size=2, platform="950", buffsize_mb=1, strict=False)
    err = info.value.failures[0]
    assert isinstance(err, hp.HcclBoundsError)
    assert err.reason.startswith(
        "AlltoAllvWrite: AlltoAllvWrite into rank 0: bytes [2097150, 2097154) of WindowsOut of "
        "rank 0 fall outside its 2097152 bytes (HCCL_BUFFSIZE=1 MB, 2 times that on this "
        "platform = 2097152 bytes"
    )


@pytest.mark.parametrize("block_dim", [1, 2])
def test_a_rank_without_its_alltoallv_write_is_a_deadlock(block_dim: int) -> None:
    """With 2 cores, the second core's Wait is named as waiting for the first's meeting."""

    def kernel(xGM, tilingGM):
        h = Hccl[CCU]()
        h.InitV2(hp.GetHcclContext(0), hp.GET_TILING_DATA_WITH_STRUCT(WriteTiling, tilingGM))
        h.SetCcTilingV2(hp.offsetof(WriteTiling, "write"))
        if h.GetRankId() == 0:
            h.Wait(h.AlltoAllvWrite[True](xGM, [0, 2, 1, 3], [1, 1, 1, 1], 0, 4))

    def main():
        hp.launch(kernel, torch.zeros(4, dtype=torch.uint8), tiling(), block_dim=block_dim)

    with pytest.raises(hp.WorldError) as info:
        hp.run(main, world_size=2, platform="950", timeout=30)
    err = info.value.failures[0]
    assert isinstance(err, hp.HcclDeadlockError)
    waits = "rank 0 waits" if block_dim == 1 else "rank 0 AIV core 0 waits"
    assert (
        f"{waits} for handle 0 AlltoAllvWrite in domain hccl_world_group: ranks [1] have "
        "not made their AlltoAllvWrite (ranks [1] returned from their function)"
    ) in err.reason
    other = "AlltoAllvWrite in domain hccl_world_group, which another core of the rank"
    assert (other in err.reason) == (block_dim == 2)


@pytest.mark.parametrize("kw", [{}, {"explore": 8}], ids=str)
def test_every_core_may_wait_for_the_alltoallv_write(kw: dict[str, Any]) -> None:
    """Each of 3 AIV cores makes the call and Waits; the rank meets its peers once. Every
    core's Wait after the first was a raw KeyError in the emulator's meeting (or a false
    deadlock report, when a core came after the meeting had ended)."""
    n = 3
    got = np.array(hp.run(write_rank, world_size=n, platform="950", args=(CCU, None, 3), **kw))
    want = np.stack([np.repeat(50 * np.arange(n) + j, S) for j in range(n)])
    np.testing.assert_array_equal(got, want)


def _write_then_all_reduce() -> list[int]:
    received = write_rank()
    t = torch.ones(2)
    hp.all_reduce(t)
    return received + t.tolist()


def test_the_wait_and_framework_exchanges_meet_through_one_hook(monkeypatch) -> None:
    """AlltoAllvWrite's Wait and a framework collective's exchange both call Server.meet."""
    calls = []
    real = EmuWorld.meet

    def meet(self, group, rank, key, what, payload=b""):
        calls.append((group.ranks[rank], key, what, payload))
        return real(self, group, rank, key, what, payload)

    monkeypatch.setattr(EmuWorld, "meet", meet)
    got = hp.run(_write_then_all_reduce, world_size=2, platform="950")
    assert [r[-2:] for r in got] == [[2.0, 2.0]] * 2
    waits = sorted(c[:3] for c in calls if c[1] != EXCHANGE)
    assert waits == [
        (r, "0", f"rank {r} waits for handle 0 AlltoAllvWrite in domain hccl_world_group")
        for r in range(2)
    ]
    exchanges = sorted((c[0], c[2]) for c in calls if c[1] == EXCHANGE)
    assert exchanges == [(0, "all_reduce"), (1, "all_reduce")]
    assert all(c[3] for c in calls if c[1] == EXCHANGE), "an exchange carries its record"


class _NoMeetings(Server):
    """A server with the protocol's defaults only: no windows, no direct meetings."""

    def submit(self, task):
        raise AssertionError("no task expected")

    commit = wait = finished = submit


def test_a_server_without_meetings_refuses_the_wait_and_lets_exchanges_fall_back() -> None:
    server, group = _NoMeetings(), Group([0, 1], "g")
    assert server.meet(group, 0, EXCHANGE, "all_reduce", b"{}") is None
    with pytest.raises(hp.HcclNoWindowsError) as info:
        server.meet(group, 0, "0", "rank 0 waits for handle 0 AlltoAllvWrite in domain g")
    assert str(info.value) == (
        "rank 0 waits for handle 0 AlltoAllvWrite in domain g: this backend does not provide "
        "communication windows"
    )


def test_alltoallv_write_under_the_late_schedule_with_poison() -> None:
    n = 3
    got = np.array(hp.run(write_rank, world_size=n, platform="950", schedule="late", poison=True))
    want = np.stack([np.repeat(50 * np.arange(n) + j, S) for j in range(n)])
    np.testing.assert_array_equal(got, want)


def _status_rank() -> list[int]:
    """The 950 MoE kernels' status word: per core at windowsOut[0], flipped on every launch."""
    flips = []

    def kernel(tilingGM):
        context = hp.GetHcclContext(0)
        h = Hccl[CCU]()
        h.InitV2(context, hp.GET_TILING_DATA_WITH_STRUCT(WriteTiling, tilingGM))
        h.SetCcTilingV2(hp.offsetof(WriteTiling, "write"))
        status = hp.gm_tensor(context.windowsOut[0] + 4 * hp.GetBlockIdx(), torch.int32, 1)
        flips.append(int(status[0]))
        status[0] = 1 - status[0]
        hp.SyncAll()
        h.Finalize()

    for _ in range(3):
        hp.launch(kernel, tiling())
    return flips


def test_windows_out_0_is_this_ranks_own_window_on_950() -> None:
    """Every rank reads 0, 1, 0: no rank flips another rank's status word."""
    assert hp.run(_status_rank, world_size=3, platform="950") == [[0, 1, 0]] * 3


def test_other_entries_of_the_ccu_context_are_refused() -> None:
    def main() -> str:
        def kernel():
            return hp.GetHcclContext(0).windowsIn[1]

        try:
            hp.launch(kernel)
        except hp.HcclUsageError as err:
            return str(err)
        return ""

    reason = hp.run(main, world_size=2, platform="950")[0]
    assert "windowsIn[1]: on Ascend 950 the context is the CCU's" in reason


def _mte_context_rank(engine: int) -> dict:
    """A 950 launch whose tiling asks for ``engine`` (``SetCommEngine``) for the world group."""
    t = WriteTiling()
    cfg = Mc2CcTilingConfig("hccl_world_group", HcclCMDType.HCCL_CMD_ALLTOALL, "", 0)
    assert cfg.SetCommEngine(engine) == 0
    assert cfg.GetTiling(t.init) == 0 and cfg.GetTiling(t.write) == 0
    got = {}

    def kernel(tilingGM):
        ctx = hp.GetHcclContext(0)
        me, dim = ctx.rankId, ctx.rankDim
        got["dim"] = (dim, ctx.rankNum, len(ctx.windowsIn))
        windows = [ctx.windowsIn[r] for r in range(dim)]  # every rank's, on every rank
        hp.gm_tensor(windows[(me + 1) % dim] + 4 * me, torch.int32, 1)[0] = 10 + me

    def read(tilingGM):
        ctx = hp.GetHcclContext(0)
        prev = (ctx.rankId - 1) % ctx.rankDim
        got["flag"] = int(hp.gm_tensor(ctx.windowsIn[ctx.rankId] + 4 * prev, torch.int32, 1)[0])
        got["same"] = int(ctx.windowsIn[ctx.rankId]) == int(ctx.windowsIn[0])

    try:
        hp.launch(kernel, t)
    except hp.HcclUsageError as err:
        return {"error": str(err)}
    hp.barrier()
    hp.launch(read, t)
    return got


def test_a_950_tiling_for_the_mte_engine_gets_every_ranks_windows() -> None:
    """QuantReduceScatter's host asks for the AIV (MTE) engine, and its kernel reads
    ``windowsIn[r]`` / ``windowsOut[r]`` of every rank r and ``rankDim``."""
    out = hp.run(functools.partial(_mte_context_rank, 3), world_size=3, platform="950")
    for rank, got in enumerate(out):
        assert got == {"dim": (3, 3, 3), "flag": 10 + (rank - 1) % 3, "same": rank == 0}


@pytest.mark.parametrize("engine", [0, 6])
def test_a_950_tiling_for_another_engine_keeps_the_ccu_context(engine: int) -> None:
    for got in hp.run(functools.partial(_mte_context_rank, engine), world_size=2, platform="950"):
        assert "on Ascend 950 the context is the CCU's" in got["error"]
        assert "SetCommEngine(3)" in got["error"]


class WriteGatherTiling(hp.TilingData):
    _fields_ = [("init", Mc2InitTiling), ("write", Mc2CcTiling), ("ag", Mc2CcTiling)]


def _write_then_gather() -> list[int]:
    """An AlltoAllvWrite, then an AllGather, on the CCU client: one message slot each."""
    t = WriteGatherTiling()
    cfg = Mc2CcTilingConfig(
        "hccl_world_group", HcclCMDType.HCCL_CMD_HALF_ALLTOALLV, "AlltoAllvWrite=level0:fullmesh"
    )
    assert cfg.GetTiling(t.init) == 0 and cfg.GetTiling(t.write) == 0
    cfg.SetOpType(HcclCMDType.HCCL_CMD_ALLGATHER)
    cfg.SetAlgConfig("AllGather=level0:fullmesh")
    assert cfg.GetTiling(t.ag) == 0
    n = hp.get_world_size()
    x = torch.full((n * S,), hp.get_rank() + 1, dtype=torch.uint8)
    y = torch.zeros(4 * n, dtype=torch.uint8)

    def kernel(xGM, yGM, tilingGM):
        h = Hccl[CCU]()
        h.InitV2(hp.GetHcclContext(0), hp.GET_TILING_DATA_WITH_STRUCT(WriteGatherTiling, tilingGM))
        h.SetCcTilingV2(hp.offsetof(WriteGatherTiling, "write"))
        h.SetCcTilingV2(hp.offsetof(WriteGatherTiling, "ag"))
        me, dim = h.GetRankId(), h.GetRankDim()
        offsets = [j * S for j in range(dim)] + [j * S + S // 2 for j in range(dim)]
        h0 = h.AlltoAllvWrite[True](xGM, offsets, [S // 2] * 2 * dim, me * S, dim * S)
        assert h.Wait(h0) == 0
        h1 = h.AllGather[True](xGM, yGM, 4, hp.HcclDataType.HCCL_DATA_TYPE_INT8, 0, 1)
        assert h.Wait(h1) == 0
        hp.SyncAll()
        h.Finalize()

    hp.launch(kernel, x, y, t)
    return y.tolist()


def test_an_alltoallv_write_takes_a_ccu_message_slot() -> None:
    """hccl_ccu_v0.h: AlltoAllvWrite[True] sends its one round into slot 0 like any Prepare, and
    the next handle's Wait polls slot 1, where its round went. The CCU slot check (stop 65)
    left the write's round out and reported 'no round was sent to slot 1'."""
    for got in hp.run(_write_then_gather, world_size=2, platform="950"):
        assert got == [1] * 4 + [2] * 4


def _prepare_wakes_a_waiting_core() -> int:
    """Core 1 Waits for an AlltoAllvWrite that core 0 (the sending core) has not prepared; once
    core 1 sleeps, core 0 prepares it and counts the waits still asleep whose condition holds."""
    blocker = current_rank_context().blocker
    waiter: list[int] = []
    stale: list[int] = []
    n = hp.get_world_size()
    x = (torch.arange(n * S) // S + 50 * hp.get_rank()).to(torch.uint8)

    def kernel(xGM: Any, tilingGM: Any) -> None:
        h = Hccl[CCU]()
        h.InitV2(hp.GetHcclContext(0), hp.GET_TILING_DATA_WITH_STRUCT(WriteTiling, tilingGM))
        h.SetCcTilingV2(hp.offsetof(WriteTiling, "write"))
        me, dim = h.GetRankId(), h.GetRankDim()
        sizes = [S // 2] * dim + [S - S // 2] * dim
        offsets = [j * S for j in range(dim)] + [j * S + S // 2 for j in range(dim)]
        if hp.GetBlockIdx() == 1:
            handle = h.AlltoAllvWrite[True](xGM, offsets, sizes, me * S, dim * S)
            waiter.append(threading.get_ident())
            assert h.Wait(handle) == 0
        else:
            while True:  # until core 1 sleeps in its Wait (`blocked` once it released the lock)
                with blocker.lock:
                    if waiter and waiter[0] in blocker.blocked:
                        break
            handle = h.AlltoAllvWrite[True](xGM, offsets, sizes, me * S, dim * S)
            with blocker.lock:
                stale.append(sum(1 for s in blocker.cond._sleepers if s.test and s.test()))
            assert h.Wait(handle) == 0
        hp.SyncAll()
        h.Finalize()

    hp.launch(kernel, x, tiling(), block_dim=2)
    return stale[0]


def test_the_sending_cores_prepare_wakes_a_core_waiting_for_it() -> None:
    """gloo: the AlltoAllvWrite Prepare of the sending core added the task without notifying,
    so another core's Wait for it slept until the run's timeout."""
    got = hp.run(
        _prepare_wakes_a_waiting_core, world_size=2, platform="950", backend="gloo", timeout=10
    )
    assert got == [0, 0]


def _wait_before_the_senders_commit(xGM: Any, outGM: Any, tilingGM: Any) -> None:
    """Core 0, the sending core, prepares with commit=False and commits only after a SyncAll
    that core 1 reaches after its Wait of the handle."""
    h = Hccl[CCU]()
    h.InitV2(hp.GetHcclContext(0), hp.GET_TILING_DATA_WITH_STRUCT(WriteTiling, tilingGM))
    h.SetCcTilingV2(hp.offsetof(WriteTiling, "write"))
    me, dim, core = h.GetRankId(), h.GetRankDim(), hp.GetBlockIdx()
    sizes = [S // 2] * dim + [S - S // 2] * dim
    offsets = [j * S for j in range(dim)] + [j * S + S // 2 for j in range(dim)]
    handle = h.AlltoAllvWrite[core == 1](xGM, offsets, sizes, me * S, dim * S)
    if core == 1:
        h.Wait(handle)
        window = hp.GetHcclContext(0).windowsOut[0]
        hp.gm_tensor(outGM, torch.uint8, dim * S)[:] = hp.gm_tensor(window, torch.uint8, dim * S)
    hp.SyncAll()
    if core == 0:
        h.Commit(handle)
        h.Wait(handle)
    hp.SyncAll()
    h.Finalize()


def _launch_wait_before_commit() -> None:
    x = (torch.arange(2 * S) // S + 50 * hp.get_rank()).to(torch.uint8)
    out = torch.zeros(2 * S, dtype=torch.uint8)
    hp.launch(_wait_before_the_senders_commit, x, out, tiling(), block_dim=2)


def test_another_cores_wait_waits_for_the_sending_cores_commit(backend: str) -> None:
    """Until 2026-12-01 another core's Wait of an AlltoAllvWrite met the peers as soon as the
    sending core had prepared it: it returned before that core's Commit sent the copies, and
    the kernel read a window without them (zeros on the emulator, a timing-dependent mix on
    gloo). The CCU client's Wait on a core that does not send polls the round's completion
    (waitCke, or finishCntGM_ that the working core's Wait advances), which only the sending
    core's Commit brings: this kernel hangs on hardware, and both backends report it."""
    with pytest.raises(hp.WorldError) as info:
        hp.run(
            _launch_wait_before_commit, world_size=2, platform="950", backend=backend, timeout=20
        )
    assert sorted(info.value.failures) == [0, 1], info.value
    for rank, err in info.value.failures.items():
        assert isinstance(err, hp.HcclDeadlockError), err
        assert (
            "AIV core 1 waits for handle 0 AlltoAllvWrite in domain hccl_world_group, which "
            "the sending core has not committed"
        ) in err.reason
        assert "AIV core 0 waits in SyncAll: 1 of 2 cores arrived" in err.reason, rank


BIG = 100  # bytes per slice: more than a flag's 64


def _read_after_a_wait_that_waited_for_nothing(xGM, outGM, tilingGM, *, size: int) -> None:
    """Core 0 sends and commits; core 1, which did not commit, Waits (-1 at once) and reads."""
    h = Hccl[CCU]()
    h.InitV2(hp.GetHcclContext(0), hp.GET_TILING_DATA_WITH_STRUCT(WriteTiling, tilingGM))
    h.SetCcTilingV2(hp.offsetof(WriteTiling, "write"))
    me, dim = h.GetRankId(), h.GetRankDim()
    handle = h.AlltoAllvWrite(xGM, [j * size for j in range(dim)] * 2, [size] * dim + [0] * dim,
                              me * size, dim * size)  # fmt: skip
    if hp.GetBlockIdx() == 0:
        h.Commit(handle)
        assert h.Wait(handle) == 0
    else:
        assert h.Wait(handle) == -1
        window = hp.GetHcclContext(0).windowsOut[0]
        hp.gm_tensor(outGM, torch.uint8, dim * size)[:] = hp.gm_tensor(
            window, torch.uint8, dim * size
        )
    hp.SyncAll()
    h.Finalize()


def _launch_read_after_minus_one(size: int) -> None:
    x = torch.full((2 * size,), 10 + hp.get_rank(), dtype=torch.uint8)
    out = torch.zeros(2 * size, dtype=torch.uint8)
    kernel = functools.partial(_read_after_a_wait_that_waited_for_nothing, size=size)
    hp.launch(kernel, x, out, tiling(), block_dim=2)


@pytest.mark.parametrize("size", [BIG, 40, 16])
def test_a_race_report_of_an_alltoallv_write_names_it_and_its_wait(size: int) -> None:
    """Another core's Wait of an AlltoAllvWrite it did not commit returns -1 at once: reading
    the window then races with the copies (what the kernel reads depends on the schedule, and
    on gloo on timing). Until 2026-12-01 the report named a BatchWrite and advised a flag item
    on the data's queue, neither of which an AlltoAllvWrite has; until stop 69 slices of at
    most 64 bytes counted as flags (a write that orders what it leaves), and such a read went
    unreported: an AlltoAllvWrite carries data, never a flag."""
    with pytest.raises(hp.WorldError) as info:
        hp.run(functools.partial(_launch_read_after_minus_one, size), world_size=2,
               platform="950", schedule="late", poison=True, timeout=20)  # fmt: skip
    err = info.value.failures[0]
    assert isinstance(err, hp.HcclRaceError), err
    text = str(err)
    assert "a read of window bytes that the rank's own AlltoAllvWrite writes" in text, text
    assert "which rank 0 sent to its own window with an AlltoAllvWrite at" in text, text
    assert "read its window after a Wait on its AlltoAllvWrite that returned 0" in text, text
    assert "BatchWrite" not in text, text
