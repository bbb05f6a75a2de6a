"""Communication windows, integer addresses and BatchWrite on the emulator (issue 13).

Every data check compares against a numpy reference computed independently
of hccl_py; every report is checked for its facts (window, rank, offset,
HCCL_BUFFSIZE).
"""

from __future__ import annotations

import resource
import warnings

import numpy as np
import pytest
import torch
from test_reliability import garbage_findings

import hccl_py as hp
from hccl_py import (
    Hccl,
    HcclCMDType,
    HcclDeadlockError,
    HcclRaceError,
    Mc2CcTiling,
    Mc2CcTilingConfig,
    Mc2InitTiling,
)
from hccl_py.explore import HcclScheduleError
from hccl_py.ops.batch_write import ITEM_DTYPES
from hccl_py.server.windows import MAX_BUFFSIZE_MB, shown_value

#: Every test here runs on thread and on greenlet runners (tests/conftest.py).
pytestmark = pytest.mark.runner_kinds

FP32 = hp.HcclDataType.HCCL_DATA_TYPE_FP32
FLAG = 1 << 20  # byte offset of the flags in the In window, past the data


class BwTiling(hp.TilingData):
    _fields_ = [("init", Mc2InitTiling), ("bw", Mc2CcTiling), ("ar", Mc2CcTiling)]


def tiling(queue_num: int = 0) -> BwTiling:
    """A tiling with a BatchWrite and an AllReduce Mc2CcTiling."""
    t = BwTiling()
    cfg = Mc2CcTilingConfig(
        "hccl_world_group", HcclCMDType.HCCL_CMD_BATCH_WRITE, "BatchWrite=level0:fullmesh"
    )
    if queue_num:
        assert cfg.SetQueueNum(queue_num) == 0
    assert cfg.GetTiling(t.init) == 0
    assert cfg.GetTiling(t.bw) == 0
    cfg.SetOpType(HcclCMDType.HCCL_CMD_ALLREDUCE)
    cfg.SetAlgConfig("AllReduce=level0:doublering")
    assert cfg.GetTiling(t.ar) == 0
    return t


def client(tilingGM: hp.GmAddr) -> Hccl:
    t = hp.GET_TILING_DATA_WITH_STRUCT(BwTiling, tilingGM)
    h = Hccl()
    h.InitV2(hp.GetHcclContext(0), t)
    assert h.SetCcTilingV2(hp.offsetof(BwTiling, "bw")) == 0
    assert h.SetCcTilingV2(hp.offsetof(BwTiling, "ar")) == 0
    return h


def a2_items(rows: list[tuple[int, int, int, int, int]]) -> torch.Tensor:
    """A2 items (localBuf, remoteBuf, count, dataType, remoteRankId) as GM bytes."""
    items = np.zeros(len(rows), dtype=ITEM_DTYPES["A2"])
    for k, row in enumerate(rows):
        items[k] = row
    return torch.from_numpy(items.view(np.uint8).copy())


def a3_items(rows: list[tuple[int, int, int]]) -> torch.Tensor:
    """A3 items (src, dst, length bytes) as GM bytes."""
    items = np.zeros(len(rows), dtype=ITEM_DTYPES["A3"])
    for k, (src, dst, length) in enumerate(rows):
        items[k]["length"] = length
        items[k]["srcLow"], items[k]["srcHigh"] = src & 0xFFFFFFFF, src >> 32
        items[k]["dstLow"], items[k]["dstHigh"] = dst & 0xFFFFFFFF, dst >> 32
    return torch.from_numpy(items.view(np.uint8).copy())


def wait_flag(addr: hp.GmAddr, value: int) -> None:
    """Poll an int32 flag in a window until it holds ``value`` (as MoE kernels do)."""
    while int(hp.gm_tensor(addr, torch.int32, 1)[0]) != value:
        pass


def run_kernel(kernel, n: int = 4, out_len: int = 8, queue_num: int = 0, **run_kw):
    """Launch ``kernel(out, tilingGM)`` once per rank; the per-rank ``out`` tensors."""

    def main() -> list[float]:
        out = torch.zeros(out_len)
        hp.launch(kernel, out, tiling(queue_num))
        return out.tolist()

    return hp.run(main, world_size=n, **run_kw)


# ------------------------------------------------------------------ windows
def test_peers_read_and_write_each_others_windows() -> None:
    n, m = 4, 8

    def kernel(out, tilingGM):
        h = client(tilingGM)
        me, dim = h.GetRankId(), h.GetRankDim()
        peer = (me + 1) % dim
        data = hp.gm_tensor(h.GetWindowsInAddr(peer) + 4 * m * me, torch.float32, m)
        data[:] = torch.arange(m, dtype=torch.float32) + 100 * me
        hp.gm_tensor(h.GetWindowsInAddr(peer) + FLAG, torch.int32, 1)[0] = 1
        wait_flag(h.GetWindowsInAddr(me) + FLAG, 1)
        src = (me - 1) % dim
        got = hp.gm_tensor(h.GetWindowsInAddr(me) + 4 * m * src, torch.float32, m)
        hp.gm_tensor(out, torch.float32, m)[:] = got
        h.Finalize()

    got = np.array(run_kernel(kernel, n=n, out_len=m))
    want = np.stack([np.arange(m) + 100 * ((r - 1) % n) for r in range(n)])
    np.testing.assert_array_equal(got, want)


def test_windows_are_mapped_lazily_for_64_ranks() -> None:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    def kernel(out, tilingGM):
        h = client(tilingGM)
        me = h.GetRankId()
        win = h.GetWindowsOutAddr(me)
        hp.gm_tensor(win + win.alloc.nbytes - 4, torch.int32, 1)[0] = me
        other = h.GetWindowsInAddr((me + 1) % h.GetRankDim())
        hp.gm_tensor(out, torch.float32, 2)[:] = torch.tensor(
            [float(win.alloc.nbytes), float(other.alloc.touched)]
        )
        h.Finalize()

    got = np.array(run_kernel(kernel, n=64, out_len=2))
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    np.testing.assert_array_equal(got[:, 0], np.full(64, 200 << 20))
    np.testing.assert_array_equal(got[:, 1], np.zeros(64))  # In windows were never touched
    assert grown_kib < 2 << 20, (
        f"64 ranks x 2 windows of 200 MB grew the process by {grown_kib} KiB"
    )


def test_buffsize_from_run_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    def kernel(out, tilingGM):
        h = client(tilingGM)
        hp.gm_tensor(out, torch.float32, 1)[0] = h.GetWindowsInAddr(0).alloc.nbytes
        h.Finalize()

    assert run_kernel(kernel, n=2, out_len=1, buffsize_mb=3) == [[3 << 20]] * 2
    monkeypatch.setenv("HCCL_BUFFSIZE", "5")
    assert run_kernel(kernel, n=2, out_len=1) == [[5 << 20]] * 2
    with pytest.raises(ValueError, match="buffsize_mb must be a whole number of MB"):
        run_kernel(kernel, n=2, out_len=1, buffsize_mb=0)


@pytest.mark.parametrize(
    "value", ["", " ", "0", "2x", "2 ", " 2", "+2", "2_0", "\uff12", "00000000002", "-2"]
)
def test_an_empty_or_bad_hccl_buffsize_is_refused(
    value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """HCCL takes its default (200 MB) only for an unset HCCL_BUFFSIZE: a set value, the
    empty one too, must be a number >= 1 (ParseCclBufferSize: SalStrToULong("") fails and
    the communicator's init with it). Until 2026-12-01 an empty value gave 200 MB here, and
    "2 ", " 2", "+2", "2_0" and a full-width digit were read as 2 (and 11 digits as their
    number): HCCL takes at most 10 characters, every one an ASCII digit (IsAllDigit)."""
    monkeypatch.setenv("HCCL_BUFFSIZE", value)
    with pytest.raises(ValueError) as info:
        hp.run(lambda: None, world_size=1)
    assert str(info.value) == (
        f"HCCL_BUFFSIZE must be a whole number of MB in 1..{MAX_BUFFSIZE_MB} written in 1 to 10 "
        f"decimal digits, not {value!r}"
    )
    monkeypatch.delenv("HCCL_BUFFSIZE")
    assert hp.run(lambda: hp.HcclGetHcclBuffer()[1], world_size=1, platform="A3") == [200 << 20]


def test_window_overflow_names_window_rank_offset_and_buffsize() -> None:
    def kernel(out, tilingGM):
        h = client(tilingGM)
        peer = (h.GetRankId() + 1) % h.GetRankDim()
        hp.gm_tensor(h.GetWindowsInAddr(peer) + (1 << 20) - 4, torch.float32, 2)[:] = 1.0

    with pytest.raises(hp.WorldError) as info:
        run_kernel(kernel, n=2, buffsize_mb=1)
    err = info.value.failures[0]
    assert isinstance(err, hp.HcclBoundsError)
    assert err.reason == (
        "GM view: bytes [1048572, 1048580) of WindowsIn of rank 1 fall outside its 1048576 "
        "bytes (HCCL_BUFFSIZE=1 MB = 1048576 bytes, domain hccl_world_group; raise "
        "HCCL_BUFFSIZE or hp.run(..., buffsize_mb=) if the kernel needs more)"
    )


def test_rank_beyond_rank_dim_gives_null_without_raising() -> None:
    def kernel(out, tilingGM):
        h = client(tilingGM)
        addr = h.GetWindowsOutAddr(h.GetRankDim())
        hp.gm_tensor(out, torch.float32, 2)[:] = torch.tensor([float(addr.is_null), int(addr)])
        h.Finalize()

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = run_kernel(kernel, n=2, out_len=2)
    assert result == [[1.0, 0.0]] * 2
    assert result.warnings[0][0].kind == "window-rank"
    assert "GetWindowsOutAddr(2): rankId must be less than rankDim 2" in str(caught[0].message)


def test_negative_rank_reads_as_a_large_uint32_and_gives_null() -> None:
    def kernel(out, tilingGM):
        h = client(tilingGM)
        addr = h.GetWindowsInAddr(-1)
        hp.gm_tensor(out, torch.float32, 1)[0] = float(addr.is_null)
        h.Finalize()

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = run_kernel(kernel, n=2, out_len=1)
    assert result == [[1.0]] * 2
    assert (
        "GetWindowsInAddr(-1): rankId (a uint32: -1 reads as 4294967295) must be less than "
        "rankDim 2; the official client returns a null address" in str(caught[0].message)
    )


#: One-sided calls with regular arguments (``W`` is this rank's Out window); one at a
#: time is replaced by each value of test_reliability.GARBAGE.
ONE_SIDED = {
    "GetWindowsInAddr": (0,),
    "GetWindowsOutAddr": (1,),
    "BatchWrite": ("W", 1, 0),
    "QueueBarrier": (0,),
}


@pytest.mark.parametrize("platform", ["A2", "A3"])
def test_garbage_arguments_of_one_sided_calls_get_clear_reports(platform: str) -> None:
    def kernel(out, tilingGM, bad):
        out_window = lambda h, a: h.GetWindowsOutAddr(0) if a == "W" else a  # noqa: E731
        bad += garbage_findings(ONE_SIDED, lambda: client(tilingGM), out_window, must_refuse=True)

    def main() -> list[str]:
        bad: list[str] = []
        hp.launch(kernel, torch.zeros(8), tiling(2), bad)
        return bad

    assert hp.run(main, world_size=2, platform=platform, strict=False) == [[], []]


def test_no_windows_on_ascend_950() -> None:
    def main() -> None:
        def kernel():
            h = Hccl()
            h.Init(hp.GetHcclContext(0))
            h.GetWindowsInAddr(0)

        hp.launch(kernel)

    with pytest.raises(hp.WorldError, match="GetWindowsInAddr is not supported on Ascend 950"):
        hp.run(main, world_size=2, platform="950")


def test_windows_as_prepare_buffers() -> None:
    n, m = 3, 6

    def kernel(out, tilingGM):
        h = client(tilingGM)
        me = h.GetRankId()
        send, recv = h.GetWindowsOutAddr(me), h.GetWindowsInAddr(me)
        hp.gm_tensor(send, torch.float32, m)[:] = torch.arange(m) * (me + 1)
        h.Wait(h.AllReduce[True](send, recv, m, FP32, hp.HCCL_REDUCE_SUM))
        hp.gm_tensor(out, torch.float32, m)[:] = hp.gm_tensor(recv, torch.float32, m)
        hp.SyncAll()
        h.Finalize()

    got = np.array(run_kernel(kernel, n=n, out_len=m))
    want = np.arange(m) * sum(range(1, n + 1))
    np.testing.assert_array_equal(got, np.tile(want, (n, 1)))


# ------------------------------------------------------------ integer addresses
def test_int_and_from_int_round_trip() -> None:
    def kernel(out, tilingGM):
        h = client(tilingGM)
        win = h.GetWindowsInAddr(1)
        assert hp.GmAddr.from_int(int(win + 40)) == win + 40
        assert hp.GmAddr.from_int(int(out + 4)) == out + 4
        assert hp.GmAddr.from_int(0).is_null and int(hp.NULL) == 0
        with pytest.raises(hp.HcclBoundsError, match="points into no GM allocation"):
            hp.GmAddr.from_int(int(win) + (1 << 40))
        with pytest.raises(hp.HcclBoundsError, match=r"past its end at 1048576 bytes \(HCCL_BUFF"):
            hp.GmAddr.from_int(int(win) + (1 << 20) + 1)
        value = int(win)
        hp.gm_tensor(out, torch.float32, 2)[:] = torch.tensor(
            [float(value >> 32), float(value & 0xFFFFFFFF)]
        )
        h.Finalize()

    got = run_kernel(kernel, n=3, out_len=2, buffsize_mb=1)
    assert got[0] == got[1] == got[2], "a window's integer address is the same on every rank"


# ------------------------------------------------------------------ BatchWrite
def test_batch_write_a2_ring_with_flag_in_the_items() -> None:
    n, m = 4, 5

    def kernel(out, tilingGM):
        h = client(tilingGM)
        me, dim = h.GetRankId(), h.GetRankDim()
        peer = (me + 1) % dim
        local = h.GetWindowsOutAddr(me)
        hp.gm_tensor(local, torch.float32, m)[:] = torch.arange(m) + 10 * me
        hp.gm_tensor(local + 64, torch.int32, 1)[0] = 7
        info = local + 4096
        hp.gm_tensor(info, torch.uint8, 64)[:] = a2_items(
            [
                (int(local), int(h.GetWindowsInAddr(peer)), m, int(FP32), peer),
                (int(local + 64), int(h.GetWindowsInAddr(peer) + FLAG), 1, 2, peer),
            ]
        )
        handle = h.BatchWrite[True](info, 2)
        assert handle == 0 and h.Query(handle) == 1 and h.Wait(handle) == 0
        wait_flag(h.GetWindowsInAddr(me) + FLAG, 7)
        hp.gm_tensor(out, torch.float32, m)[:] = hp.gm_tensor(
            h.GetWindowsInAddr(me), torch.float32, m
        )
        h.Finalize()

    want = np.stack([np.arange(m) + 10 * ((r - 1) % n) for r in range(n)])
    for schedule in ("eager", "late"):
        got = run_kernel(kernel, n=n, out_len=m, ranks_per_server=1, schedule=schedule, poison=True)
        np.testing.assert_array_equal(np.array(got), want)


def flag_after_batch_write(m: int):
    """A kernel with the bug: a direct flag write is not ordered after BatchWrite's copy."""

    def kernel(out, tilingGM):
        h = client(tilingGM)
        me, dim = h.GetRankId(), h.GetRankDim()
        peer = (me + 1) % dim
        local = h.GetWindowsOutAddr(me)
        hp.gm_tensor(local, torch.float32, m)[:] = 1.0 + me
        hp.gm_tensor(local + 4096, torch.uint8, 32)[:] = a2_items(
            [(int(local), int(h.GetWindowsInAddr(peer)), m, int(FP32), peer)]
        )
        h.BatchWrite[True](local + 4096, 1)  # batch-write
        hp.gm_tensor(h.GetWindowsInAddr(peer) + FLAG, torch.int32, 1)[0] = 1
        wait_flag(h.GetWindowsInAddr(me) + FLAG, 1)
        got = hp.gm_tensor(h.GetWindowsInAddr(me), torch.float32, m)
        hp.gm_tensor(out, torch.float32, m)[:] = got  # batch-read
        h.Finalize()

    return kernel


def test_race_flag_written_directly_after_batch_write_reads_stale_data() -> None:
    # 48 bytes: read as a flag, so no race report; the data is not there yet. An A2 item keeps
    # its old bytes until it lands (no poison: the shipping A2 MoE kernels' flags are -1, the
    # poison's pattern), so under the late schedule a rank reads the old zeros, a result that
    # differs from the eager one, which explore reports as schedule-dependent
    m = 12
    kernel = flag_after_batch_write(m)
    eager = np.array(run_kernel(kernel, n=2, out_len=m, ranks_per_server=1))
    np.testing.assert_array_equal(eager, [[2.0] * m, [1.0] * m])
    late = np.array(
        run_kernel(kernel, n=2, out_len=m, ranks_per_server=1, schedule="late", poison=True)
    )
    assert (late == 0.0).all(axis=1).any(), late  # a rank read the old zeros
    with pytest.raises(HcclScheduleError, match="schedule-dependent"):
        run_kernel(kernel, n=2, out_len=m, ranks_per_server=1, explore=8)


def _a2_item_to(dst_rank_of: object):
    """A kernel whose rank r BatchWrites one FP32 (its rank + 5) to rank ``dst_rank_of(r)``'s
    In window at FLAG - 64, then reads its own In window there after a Finalize and a barrier."""

    def kernel(out, tilingGM):
        h = client(tilingGM)
        me = hp.get_rank()
        peer = dst_rank_of(me)
        local = h.GetWindowsOutAddr(me)
        hp.gm_tensor(local + 64, torch.float32, 1)[0] = me + 5
        hp.gm_tensor(local, torch.uint8, 32)[:] = a2_items(
            [(int(local + 64), int(h.GetWindowsInAddr(peer) + FLAG - 64), 1, int(FP32), peer)]
        )
        ret = h.BatchWrite[True](local, 1)
        h.Finalize()
        hp.barrier()
        got = hp.gm_tensor(h.GetWindowsInAddr(me) + FLAG - 64, torch.float32, 1)
        hp.gm_tensor(out, torch.float32, 2)[:] = torch.tensor([float(ret), float(got[0])])

    return kernel


def test_batch_write_a2_to_the_own_rank_warns_and_copies() -> None:
    """BatchWrite.md (A2): the destination card of an item cannot be the own card, and one
    rank per server does not lift that. The shipping fullmesh MoE dispatch and combine send
    such an item at 16 ranks and more (docs/notes/mc2-kernels.md, section 25), so it is a
    warning and the copy runs (before 2026-11-28: an HcclUsageError)."""
    with pytest.warns(
        hp.HcclWarning, match=r"item 0: remoteRankId [01] names this rank: on Atlas A2"
    ):
        got = run_kernel(_a2_item_to(lambda me: me), n=2, out_len=2, ranks_per_server=1)
    assert got == [[0.0, 5.0], [0.0, 6.0]]


def test_batch_write_a2_refuses_a_source_outside_the_windows() -> None:
    # BatchWrite.md (A2): localBuf is "the window address of the data this end sends"; its
    # example copies inputGM into the Out window first. RDMA reads registered memory only.
    def kernel(out, tilingGM):
        h = client(tilingGM)
        local = h.GetWindowsOutAddr(hp.get_rank())
        peer = 1 - hp.get_rank()
        hp.gm_tensor(local, torch.uint8, 32)[:] = a2_items(
            [(int(out), int(h.GetWindowsInAddr(peer)), 1, int(FP32), peer)]
        )
        hp.gm_tensor(out, torch.float32, 1)[0] = h.BatchWrite[True](local, 1)
        h.Finalize()

    with pytest.raises(hp.WorldError) as info:
        run_kernel(kernel, n=2, ranks_per_server=1)
    reason = info.value.failures[0].reason
    assert reason.startswith("BatchWrite: item 0: the source ")
    assert reason.endswith(
        "is not a communication window; on Atlas A2 localBuf is a window address (BatchWrite.md: "
        "copy the data into GetWindowsOutAddr's window first), RDMA reads no other memory"
    )


@pytest.mark.parametrize(("count", "end"), [(2**62, 2**64 + 64), (2**63 + 1, 2**65 + 68)])
def test_batch_write_a2_count_whose_bytes_pass_2_64_is_a_bounds_error(count: int, end: int) -> None:
    """An A2 item's ``count * size`` of 2**64 bytes or more is out of every window. Before the
    review of 2026-11-28 hccl_py multiplied in uint64: 2**62 FP32 elements wrapped to 0 bytes
    and 2**63 + 1 to 4 bytes, and the call copied that little without a report."""

    def kernel(out, tilingGM):
        h = client(tilingGM)
        me, peer = hp.get_rank(), 1 - hp.get_rank()
        local = h.GetWindowsOutAddr(me)
        hp.gm_tensor(local, torch.uint8, 32)[:] = a2_items(
            [(int(local + 64), int(h.GetWindowsInAddr(peer)), count, int(FP32), peer)]
        )
        hp.gm_tensor(out, torch.float32, 1)[0] = h.BatchWrite[True](local, 1)
        h.Finalize()

    with pytest.raises(hp.WorldError) as info:
        run_kernel(kernel, n=2, ranks_per_server=1)
    err = info.value.failures[0]
    assert isinstance(err, hp.HcclBoundsError), info.value
    assert f"BatchWrite: item 0: source: bytes [64, {end}) of WindowsOut of rank 0" in err.reason


def test_batch_write_a2_to_a_peer_on_the_same_server_warns_and_copies() -> None:
    with pytest.warns(hp.HcclWarning) as seen:
        got = run_kernel(_a2_item_to(lambda me: 1 - me), n=2, out_len=2)
    assert got == [[0.0, 6.0], [0.0, 5.0]]
    reasons = sorted(str(w.message) for w in seen)
    assert any(
        "BatchWrite: item 0: rank 0 and rank 1 are both on server 0 (ranks_per_server=8): on "
        "Atlas A2 BatchWrite.md allows items only towards ranks on other servers, never the own "
        "rank; the shipping fullmesh MoE dispatch and combine (16 ranks and more) send such "
        "items, so hccl_py copies it [batch-write-server]" in r
        for r in reasons
    ), reasons


def test_batch_write_a2_remote_rank_must_own_the_window() -> None:
    def kernel(out, tilingGM):
        h = client(tilingGM)
        local = h.GetWindowsOutAddr(h.GetRankId())
        hp.gm_tensor(local, torch.uint8, 32)[:] = a2_items(
            [(int(local + 64), int(h.GetWindowsInAddr(2)), 1, int(FP32), 1)]
        )
        h.BatchWrite[True](local, 1)

    with pytest.raises(hp.WorldError, match="remoteRankId is 1 but remoteBuf points into a wind"):
        run_kernel(kernel, n=3, ranks_per_server=1)


def test_batch_write_item_past_the_window_is_a_bounds_error_even_non_strict() -> None:
    def kernel(out, tilingGM):
        h = client(tilingGM)
        local = h.GetWindowsOutAddr(h.GetRankId())
        dst = h.GetWindowsInAddr(1 - h.GetRankId()) + (1 << 20) - 8
        hp.gm_tensor(local, torch.uint8, 32)[:] = a2_items(
            [(int(local + 64), int(dst), 4, int(FP32), 1 - h.GetRankId())]
        )
        h.BatchWrite[True](local, 1)

    with pytest.raises(hp.WorldError) as info:
        run_kernel(kernel, n=2, ranks_per_server=1, buffsize_mb=1, strict=False)
    err = info.value.failures[0]
    assert isinstance(err, hp.HcclBoundsError)
    assert err.reason.startswith(
        "BatchWrite: item 0: destination: bytes [1048568, 1048584) of WindowsIn of rank 1 "
        "fall outside its 1048576 bytes (HCCL_BUFFSIZE=1 MB"
    )


def test_batch_write_a3_queues_barrier_and_async_finalize() -> None:
    n, m = 3, 6

    def kernel(out, tilingGM):
        h = client(tilingGM)
        me, dim = h.GetRankId(), h.GetRankDim()
        assert h.GetQueueNum() == 2
        local = h.GetWindowsOutAddr(me)
        hp.gm_tensor(local, torch.float32, m)[:] = torch.arange(m) - me
        rows = [(int(local), int(h.GetWindowsInAddr(p) + 4 * m * me), 4 * m) for p in range(dim)]
        hp.gm_tensor(local + 4096, torch.uint8, 64 * dim)[:] = a3_items(rows)
        assert h.BatchWrite[True](local + 4096, dim, 1) == 0
        assert h.Wait(0) == 0
        h.QueueBarrier[hp.ScopeType.ALL](1)
        hp.SyncAll()
        h.Finalize[False]()

    def main() -> list[float]:
        hp.launch(kernel, torch.zeros(1), tiling(queue_num=2))
        hp.barrier()  # every rank's kernel (and its BatchWrite) has returned
        group = hp.world_group()
        win = hp.GmAddr(hp.kernel.context.current_rank_context().server.window(group.name, 0, "In"))
        return hp.gm_tensor(win, torch.float32, n * m).tolist()

    got = hp.run(main, world_size=n, platform="A3")
    want = np.concatenate([np.arange(m) - r for r in range(n)])
    np.testing.assert_array_equal(np.array(got[0]), want)


def test_async_finalize_on_a3_core_without_tasks_is_allowed() -> None:
    # moe_distribute_combine_setup (arch22): every AIV core Finalize<false>s, the cores that
    # have no peer to write to (startRankId_ >= worldSize_) without any task of their own
    def kernel(out, tilingGM):
        h = client(tilingGM)
        me = h.GetRankId()
        if hp.GetBlockIdx() == 0:
            local = h.GetWindowsOutAddr(me)
            hp.gm_tensor(local, torch.float32, 1)[0] = 7.0 + me
            dst = h.GetWindowsInAddr(me) + 64
            hp.gm_tensor(local + 4096, torch.uint8, 64)[:] = a3_items([(int(local), int(dst), 4)])
            h.BatchWrite[True](local + 4096, 1, 1)
        hp.SyncAll()
        h.Finalize[False]()

    def main() -> list[float]:
        hp.launch(kernel, torch.zeros(1), tiling(queue_num=2), block_dim=2, kernel_type="aiv")
        hp.barrier()
        group = hp.world_group()
        win = hp.kernel.context.current_rank_context().server.window(
            group.name, hp.get_rank(), "In"
        )
        return hp.gm_tensor(hp.GmAddr(win) + 64, torch.float32, 1).tolist()

    assert hp.run(main, world_size=2, platform="A3") == [[7.0], [8.0]]


def _data_then_flag_kernel(flag_queue: int, barrier: tuple[int, ...] = ()):
    """Rank 0 sends 64 float32 rows on queue 0, then a 1.0f flag on ``flag_queue`` (A3
    items); rank 1 polls the flag and reads the rows (moe_distribute_combine_setup's data
    and status items: the kernel puts both on the peer's queue so that the flag lands last),
    then acknowledges them in rank 0's window, which rank 0 waits for before it returns (its
    pending copies would land when its launch ends); a QueueBarrier[ALL] on each queue of
    ``barrier`` comes between data and flag."""
    m = 64
    ack = FLAG + 64

    def kernel(out, tilingGM):
        h = client(tilingGM)
        me = h.GetRankId()
        win = h.GetWindowsInAddr(1)
        if me == 0:
            local = h.GetWindowsOutAddr(0)
            hp.gm_tensor(local, torch.float32, m + 1)[:] = torch.arange(m + 1.0) + 1
            data = a3_items([(int(local), int(win), 4 * m)])
            flag = a3_items([(int(local + 4 * m), int(win + FLAG), 4)])
            hp.gm_tensor(local + 4096, torch.uint8, 128)[:] = torch.cat([data, flag])
            h.BatchWrite[True](local + 4096, 1, 0)
            for queue in barrier:
                h.QueueBarrier[hp.ScopeType.ALL](queue)
            h.BatchWrite[True](local + 4096 + 64, 1, flag_queue)
            wait_flag(h.GetWindowsInAddr(0) + ack, 1)
        else:
            wait_flag(win + FLAG, 0x42820000)  # 65.0f
            hp.gm_tensor(out, torch.float32, m)[:] = hp.gm_tensor(win, torch.float32, m)
            hp.gm_tensor(h.GetWindowsInAddr(0) + ack, torch.int32, 1)[0] = 1
        h.Finalize[False]()

    return kernel


def test_one_queues_batch_writes_land_in_order_on_every_schedule() -> None:
    got = run_kernel(_data_then_flag_kernel(0), n=2, out_len=64, queue_num=2, platform="A3",
                     explore=16, poison=True)  # fmt: skip
    assert got[1] == [float(v) for v in range(1, 65)]


@pytest.mark.parametrize("explore", [None, 16])
def test_a_flag_on_another_queue_may_land_before_the_data(explore: int | None) -> None:
    """Before 2026-11-28 every pending BatchWrite of a rank landed in posting order, whatever
    its queue: a kernel that announced its data on another queue passed every schedule. Until
    2026-11-30 the window race check still counted a rank's BatchWrite queues as one: only a
    schedule that landed the flag first showed it, as a schedule-dependent result (rank 1
    read the rows' poison). Each queue has its own clock now: the read of the rows is a race
    on every schedule under poison, the default one included."""
    with pytest.raises(hp.WorldError) as info:
        run_kernel(_data_then_flag_kernel(1), n=2, out_len=64, queue_num=2, platform="A3",
                   explore=explore, poison=True)  # fmt: skip
    err = info.value.failures[1]
    assert isinstance(err, HcclRaceError), info.value
    assert "rank 1 read bytes [0, 256) of WindowsIn of rank 1" in str(err)
    assert "which rank 0 wrote at test_windows.py:" in str(err)  # its data BatchWrite
    assert "flag after the data through the data's BatchWrite queue (its copies" in str(err)


def test_a_queue_barrier_orders_the_flag_after_another_queues_data() -> None:
    # QueueBarrier.md: the barrier holds the later BatchWrites of its queue until the tasks
    # of every queue in its scope (ALL) are done; its example barriers every queue
    got = run_kernel(_data_then_flag_kernel(1, barrier=(0, 1)), n=2, out_len=64, queue_num=2,
                     platform="A3", explore=16, poison=True)  # fmt: skip
    assert got[1] == [float(v) for v in range(1, 65)]


def test_a_barrier_on_some_queues_only_is_a_deadlock_report_naming_it() -> None:
    """hccl_py reads QueueBarrier[ALL] as a barrier of every queue of the rank (docs/fidelity.md
    lists it as open): the flag behind it waits for queue 0, which never sends the barrier."""
    with pytest.raises(hp.WorldError) as info:
        run_kernel(_data_then_flag_kernel(1, barrier=(1,)), n=2, out_len=64, queue_num=2,
                   platform="A3")  # fmt: skip
    assert isinstance(info.value.failures[0], HcclDeadlockError)
    assert "waits behind QueueBarrier #0 until all 2 queues of the rank sent it" in str(info.value)


def test_a3_item_type_is_reserved_and_not_read() -> None:
    # BatchWrite.md (A3): type is a reserved field; the shipping A3 setup kernels
    # (moe_distribute_dispatch_setup/combine_setup arch22) write an HcclDataType there
    m = 6

    def kernel(out, tilingGM):
        h = client(tilingGM)
        me, dim = h.GetRankId(), h.GetRankDim()
        local = h.GetWindowsOutAddr(me)
        hp.gm_tensor(local, torch.float32, m)[:] = torch.arange(m) + 10 * me
        peer = (me + 1) % dim
        items = a3_items([(int(local), int(h.GetWindowsInAddr(peer)), 4 * m)])
        items.view(torch.int64)[0] = int(hp.HcclDataType.HCCL_DATA_TYPE_FP16)
        hp.gm_tensor(local + 4096, torch.uint8, 64)[:] = items
        hp.gm_tensor(out, torch.float32, 1)[0] = h.BatchWrite[True](local + 4096, 1)
        h.Finalize()

    def main() -> list[float]:
        out = torch.zeros(1)
        hp.launch(kernel, out, tiling())
        hp.barrier()
        group = hp.world_group()
        win = hp.kernel.context.current_rank_context().server.window(
            group.name, hp.get_rank(), "In"
        )
        return out.tolist() + hp.gm_tensor(hp.GmAddr(win), torch.float32, m).tolist()

    got = hp.run(main, world_size=2, platform="A3")
    for rank in (0, 1):
        assert got[rank] == [0.0] + [float(v + 10 * (1 - rank)) for v in range(m)]


#: What a Finalize[True] after a task with several queues raises (its wait never ends).
QUEUED_FINALIZE = r"Finalize\[True\] with queueNum 2 after a task would wait forever"


def test_finalize_true_with_queues_after_a_task_would_hang() -> None:
    """hccl_aicpu_impl.h: with queueNum != 0 Query is always 0, so Finalize<true>'s loop
    ``while (Query(curHandleId_) < handleIdRepeat_[curHandleId_])`` never ends after a task;
    before 2026-11-28 hccl_py accepted it. Without a task (curHandleId_ -1) it does not wait."""

    def kernel(out, tilingGM, send: bool):
        h = client(tilingGM)
        if send:
            me = h.GetRankId()
            local = h.GetWindowsOutAddr(me)
            hp.gm_tensor(local + 4096, torch.uint8, 64)[:] = a3_items(
                [(int(local), int(h.GetWindowsInAddr(1 - me)), 16)]
            )
            h.BatchWrite[True](local + 4096, 1, 0)
        h.Finalize()

    def main(send: bool) -> None:
        hp.launch(kernel, torch.zeros(1), tiling(queue_num=2), send)

    assert hp.run(main, args=(False,), world_size=2, platform="A3") == [None, None]
    with pytest.raises(hp.WorldError, match=QUEUED_FINALIZE) as info:
        hp.run(main, args=(True,), world_size=2, platform="A3", strict=False)
    assert isinstance(info.value.failures[0], hp.HcclUnfinishedError)


def _one_batch_write(h: Hccl) -> int:
    """A BatchWrite on queue 0 of 32 bytes into the peer's In window (a task with queues: a
    collective is refused with queueNum > 0)."""
    me = h.GetRankId()
    stage = h.GetWindowsOutAddr(me)
    items = a3_items([(int(stage), int(h.GetWindowsInAddr(1 - me)), 32)])
    hp.gm_tensor(stage + 1024, torch.uint8, 64)[:] = items
    return h.BatchWrite[True](stage + 1024, 1, 0)


def test_wait_with_queues_returns_0_at_once_before_any_check() -> None:
    # hccl_aicpu_impl.h, HcclImpl<AICPU>::Wait: queueNum_ != 0 -> HCCL_SUCCESS before the handle checks
    errors = []

    def kernel(out, tilingGM):
        h = client(tilingGM)
        got = [h.Wait(-1), h.Wait(63), h.Wait(5)]  # out of range, never prepared
        handle = _one_batch_write(h)
        got += [h.Wait(handle), h.Wait(handle), h.Wait(handle)]  # beyond its one round
        errors.append(h.last_error)
        hp.gm_tensor(out, torch.float32, len(got))[:] = torch.tensor(got, dtype=torch.float32)
        h.Finalize()

    def main() -> list[float]:
        out = torch.zeros(32)
        out[16:20] = 1.0
        with pytest.raises(hp.HcclUnfinishedError, match=QUEUED_FINALIZE):
            hp.launch(kernel, out, tiling(queue_num=2))
        return out[:6].tolist()

    got = hp.run(main, world_size=2, platform="A3")  # strict: the Waits raised nothing
    assert got == [[0.0] * 6] * 2
    assert errors == [None, None]
    assert not any(got.warnings.values())


def test_query_with_queues_returns_0_for_any_handle_in_range() -> None:
    # hccl_aicpu_impl.h, HcclImpl<AICPU>::Query: the init and range checks, then
    # queueNum_ != 0 -> 0 before the handle is looked up (prepared or not)
    errors = []

    def kernel(out, tilingGM):
        h = client(tilingGM)
        got = [h.Query(0), h.Query(62)]  # in range, never prepared
        handle = _one_batch_write(h)
        got.append(h.Query(handle))
        h.QueueBarrier[hp.ScopeType.ALL](0)
        got.append(h.Query(handle))  # its round ran: still 0 with several queues
        errors.append(h.last_error)
        got += [h.Query(63), h.Query(-1)]  # out of range: -1
        errors.append(h.last_error)
        hp.gm_tensor(out, torch.float32, len(got))[:] = torch.tensor(got, dtype=torch.float32)
        h.Finalize()

    def main() -> list[float]:
        out = torch.zeros(32)
        with pytest.raises(hp.HcclUnfinishedError, match=QUEUED_FINALIZE):
            hp.launch(kernel, out, tiling(queue_num=2))
        return out[:6].tolist()

    got = hp.run(main, world_size=2, platform="A3", strict=False)
    assert got == [[0.0, 0.0, 0.0, 0.0, -1.0, -1.0]] * 2
    assert errors[0] is None
    assert "Query: handle -1 is out of range" in errors[1]


@pytest.mark.parametrize(
    ("platform", "call", "message"),
    [
        ("A3", lambda h, info: h.BatchWrite[True](info, 2048), "itemNum must be below 2048"),
        ("A3", lambda h, info: h.BatchWrite[True](info, 0), "itemNum must be a positive int"),
        ("A3", lambda h, info: h.BatchWrite[True](info, 1, 2), "queueID 2 is not below"),
        ("A2", lambda h, info: h.BatchWrite[True](info, 1, 1), "Atlas A2 has one BatchWrite queue"),
        ("950", lambda h, info: h.BatchWrite[True](info, 1), "not supported on Ascend 950"),
        ("A3", lambda h, info: h.QueueBarrier[hp.ScopeType.QUEUE](0), "only ScopeType.ALL"),
        ("A2", lambda h, info: h.QueueBarrier[hp.ScopeType.ALL](0), "not supported on Atlas A2"),
        ("A2", lambda h, info: h.GetQueueNum(), "GetQueueNum is not supported on Atlas A2"),
    ],
)
def test_batch_write_and_queue_rules(platform, call, message) -> None:
    def kernel(out, tilingGM):
        t = hp.GET_TILING_DATA_WITH_STRUCT(BwTiling, tilingGM)
        h = Hccl[hp.HcclServerType.HCCL_SERVER_TYPE_AICPU]()
        h.InitV2(hp.GetHcclContext(0), t)
        h.SetCcTilingV2(hp.offsetof(BwTiling, "bw"))
        info = out + 0
        result = call(h, info)
        hp.gm_tensor(out, torch.float32, 1)[0] = -2 if result is None else result
        return h.last_error

    def main() -> str:
        out = torch.zeros(64)
        errors = []
        hp.launch(lambda o, t: errors.append(kernel(o, t)), out, tiling(2))
        return errors[0], float(out[0])

    (reason, result), _ = hp.run(main, world_size=2, platform=platform, strict=False)
    assert message in reason
    assert result in (-1.0, 0.0, -2.0)


def test_flag_that_nobody_writes_ends_in_a_deadlock_report() -> None:
    def kernel(out, tilingGM):
        h = client(tilingGM)
        wait_flag(h.GetWindowsInAddr(h.GetRankId()) + FLAG, 1)

    with pytest.raises(hp.WorldError) as info:
        run_kernel(kernel, n=2, timeout=60)
    err = info.value.failures[0]
    assert isinstance(err, hp.HcclDeadlockError)
    for rank in (0, 1):
        assert (
            f"rank {rank} polls bytes [1048576, 1048580) of WindowsIn of rank {rank} (domain "
            "hccl_world_group), which keep the value 0 (int32; bytes 00 00 00 00): no rank writes them"
        ) in err.reason


#: Reads of a status poll before the test gives up: far more than the emulator's deadlock
#: detection needs (emu/polls.py, QUIET_READS), a few seconds of handing the baton around.
STATUS_POLL_BOUND = 50_000


def _poll_status_blocks(state: hp.GmAddr, nbytes: int) -> float:
    """The A3 MoE combine's WaitDispatch: one read of a token's K status blocks of 32 bytes
    (``nbytes = K * 32``) until all are 1.0f, that is their sum is ``8 * K``; the last sum."""
    got = 0.0
    for _ in range(STATUS_POLL_BOUND):
        got = float(hp.gm_tensor(state, torch.float32, nbytes // 4).sum())
        if got == nbytes // 4:
            break
    return got


@pytest.mark.parametrize("nbytes", [64, 96, 512])
def test_a_poll_of_k_status_blocks_that_nobody_writes_is_a_deadlock(nbytes: int) -> None:
    """A poll through one read of more than 64 bytes is a poll too: before 2026-11-28 it only
    let the others run, so a flag nobody writes never ended the run (no deadlock report, no
    timeout: the pollers kept handing the baton to each other)."""

    def kernel(out, tilingGM):
        h = client(tilingGM)
        _poll_status_blocks(h.GetWindowsInAddr(h.GetRankId()) + FLAG, nbytes)

    with pytest.raises(hp.WorldError) as info:
        run_kernel(kernel, n=2, timeout=20)
    err = info.value.failures[0]
    assert isinstance(err, hp.HcclDeadlockError), info.value
    shown = "[0.0" + ", 0.0" * 15 + "] (float32; bytes" + " 00" * 64 + ")"
    more = "" if nbytes == 64 else f" and {nbytes - 64} more bytes"
    for rank in (0, 1):
        assert (
            f"rank {rank} polls bytes [1048576, {1048576 + nbytes}) of WindowsIn of rank {rank} "
            f"(domain hccl_world_group), which keep the value {shown}{more}: no rank writes them"
        ) in err.reason


@pytest.mark.parametrize("nbytes", [96, 512])
def test_a_poll_of_k_status_blocks_sees_them_on_every_explored_schedule(nbytes: int) -> None:
    """Rank 1 spends the PCT schedules' priority changes in a first launch, then writes the
    blocks of ranks 0 and 2, which poll them. Before 2026-11-28 a large poll only paused, and
    under a PCT schedule the two pollers handed the baton to each other for ever."""

    def busy(scratch):
        for _ in range(2000):  # switch points
            hp.gm_tensor(scratch, torch.float32, 1)

    def kernel(out, tilingGM):
        h = client(tilingGM)
        if h.GetRankId() == 1:
            for peer in (0, 2):
                hp.gm_tensor(h.GetWindowsInAddr(peer) + FLAG, torch.float32, nbytes // 4)[:] = 1
        else:
            got = _poll_status_blocks(h.GetWindowsInAddr(h.GetRankId()) + FLAG, nbytes)
            hp.gm_tensor(out, torch.float32, 1)[0] = got

    def main() -> float:
        out = torch.zeros(1)
        hp.launch(busy, out)
        hp.launch(kernel, out, tiling())
        return float(out[0])

    assert hp.run(main, world_size=3, timeout=20, explore=16) == [nbytes / 4, 0.0, nbytes / 4]


def _round_robin_kernel(nbytes: int, writer: bool):
    """The combine's LocalWindowCopy with two tokens: rank 0 polls their status blocks round
    robin (token a, token b, a again ...) until both are complete; rank 1 writes them when
    ``writer``. Rank 0 runs first on the default schedule, so it polls before they come."""

    def kernel(out, tilingGM):
        h = client(tilingGM)
        state = h.GetWindowsInAddr(0) + FLAG
        if h.GetRankId() == 1 and writer:
            for token in (1, 0):
                hp.gm_tensor(state + 1024 * token, torch.float32, nbytes // 4)[:] = 1
        elif h.GetRankId() == 0:
            done = [False, False]
            for _ in range(STATUS_POLL_BOUND):
                for token in (0, 1):
                    view = hp.gm_tensor(state + 1024 * token, torch.float32, nbytes // 4)
                    done[token] = done[token] or float(view.sum()) == nbytes // 4
                if all(done):
                    break
            hp.gm_tensor(out, torch.float32, 1)[0] = sum(done)

    return kernel


@pytest.mark.parametrize("nbytes", [32, 96, 512])
def test_a_round_robin_poll_of_two_tokens_status_blocks_sees_them(nbytes: int) -> None:
    """Before 2026-11-28 views of more than 64 bytes were polls only when viewed twice in a
    row: the round-robin loop held the baton until the run's timeout (HcclTimeoutError)."""
    got = run_kernel(_round_robin_kernel(nbytes, writer=True), n=2, out_len=1, timeout=5)
    assert got == [[2.0], [0.0]]


@pytest.mark.parametrize("nbytes", [32, 96])
def test_a_round_robin_poll_that_nobody_answers_is_a_deadlock(nbytes: int) -> None:
    with pytest.raises(hp.WorldError) as info:
        run_kernel(_round_robin_kernel(nbytes, writer=False), n=2, out_len=1, timeout=5)
    err = info.value.failures[0]
    assert isinstance(err, hp.HcclDeadlockError), info.value
    assert f"rank 0 polls bytes [1048576, {1048576 + nbytes}) of WindowsIn" in err.reason


def test_rereading_a_word_of_ones_own_window_in_a_bounded_loop_is_no_deadlock() -> None:
    """A kernel writes its own status word, then reads it again a few times (no poll forever)."""

    def kernel(out, tilingGM):
        h = client(tilingGM)
        word = hp.gm_tensor(h.GetWindowsInAddr(h.GetRankId()) + FLAG, torch.int32, 1)
        word[0] = 7
        hp.gm_tensor(out, torch.float32, 1)[0] = float(sum(int(word[0]) for _ in range(4)))

    assert run_kernel(kernel, n=2, out_len=1, timeout=60) == [[28.0], [28.0]]


def test_a_bounded_check_of_a_peers_flag_repeated_per_token_ends_on_every_schedule() -> None:
    """AttentionToFFN's CheckFlagAndSetTableGM, once per token: rank 0 reads rank 1's flag
    until it is no longer 1, and it is 0 at once, so each loop ends at its first read; then it
    writes the flag that rank 1 polls. The unchanged reads make rank 0 a blocked poller (the
    emulator cannot tell), which must be let read on. Before 2026-11-28 a PCT schedule let
    only the poller of highest priority read on, rank 1, a thousand times, and declared a
    deadlock that no hardware run can have."""

    def kernel(out, tilingGM):
        h = client(tilingGM)
        flag = h.GetWindowsInAddr(1) + FLAG
        if h.GetRankId() == 1:
            wait_flag(flag, 1)
        else:
            for _ in range(4):  # one check per token sent
                while int(hp.gm_tensor(flag, torch.int32, 1)[0]) == 1:
                    pass
            hp.gm_tensor(flag, torch.int32, 1)[0] = 1
        hp.gm_tensor(out, torch.float32, 1)[0] = 1.0

    assert run_kernel(kernel, n=2, out_len=1, timeout=20, explore=16) == [[1.0], [1.0]]


def _unwritten_flag_kernel(out, tilingGM):
    h = client(tilingGM)
    if h.GetRankId() == 0:
        wait_flag(h.GetWindowsInAddr(0) + FLAG, 1)
    else:
        hp.gm_tensor(h.GetWindowsInAddr(0) + FLAG + 4, torch.int32, 1)[0] = 1  # the next flag
    h.Finalize()


def unwritten_flag_rank() -> None:
    hp.launch(_unwritten_flag_kernel, torch.zeros(1), tiling())


@pytest.mark.one_runner_kind  # gloo: no emulator runners
def test_flag_that_nobody_writes_on_gloo_times_out_naming_the_flag() -> None:
    """Other processes may write a flag: a vain poll ends in the timeout, which names it."""
    with pytest.raises(hp.WorldError) as info:
        hp.run(unwritten_flag_rank, world_size=2, backend="gloo", timeout=3)
    err = info.value.failures[0]
    assert type(err).__name__ == "HcclTimeoutError", info.value
    assert str(err).startswith(
        "timed out after 3 s polling: rank 0 polls bytes [1048576, 1048580) of WindowsIn of "
        "rank 0 (domain hccl_world_group), which keep the value 0 (int32; bytes 00 00 00 00): no rank wrote "
        "them [polled "
    ), err


def test_slots_taken_by_queue_barriers_are_named_in_the_refusal() -> None:
    # platform_v220/hccl_aicpu.h, QueueBarrier: ++curMsgPosition_, a message slot like a Prepare
    errors = []

    def kernel(out, tilingGM):
        h = client(tilingGM)
        for _ in range(63):
            h.QueueBarrier[hp.ScopeType.ALL](0)
        hp.gm_tensor(out, torch.float32, 1)[0] = h.BatchWrite[True](out, 1, 0)
        errors.append(h.last_error)
        h.Finalize()

    assert run_kernel(kernel, n=1, platform="A3", queue_num=2, strict=False) == [[-1.0] + [0.0] * 7]
    assert errors == [
        "[rank 0, domain hccl_world_group, op BatchWrite] BatchWrite: the domain already used 63 "
        "of its 64 message slots (0 Prepare, 63 InterHcclGroupSync or QueueBarrier); the last "
        "one is Finalize's"
    ]


def test_queue_id_beyond_queue_num_zero_is_refused() -> None:
    def kernel(out, tilingGM):
        h = client(tilingGM)
        hp.gm_tensor(out, torch.float32, 1)[0] = h.BatchWrite[True](out, 1, 1)
        assert "queueID 1 needs a tiling with queueNum > 1" in h.last_error
        h.Finalize()

    assert (
        run_kernel(kernel, n=2, out_len=8, platform="A3", strict=False) == [[-1.0] + [0.0] * 7] * 2
    )


# --------------------------------------------------------------- on every backend
RING = 5


def _ring_kernel(out, tilingGM):
    """Direct copy into the next rank's window, then BatchWrite to the one after; flags in between."""
    h = client(tilingGM)
    me, dim = h.GetRankId(), h.GetRankDim()
    nxt, far = (me + 1) % dim, (me + 2) % dim
    direct = hp.gm_tensor(h.GetWindowsInAddr(nxt), torch.float32, RING)
    direct[:] = torch.arange(RING) + 10 * me
    hp.gm_tensor(h.GetWindowsInAddr(nxt) + FLAG, torch.int32, 1)[0] = 1
    local = h.GetWindowsOutAddr(me)
    hp.gm_tensor(local, torch.float32, RING)[:] = torch.arange(RING) - 10 * me
    hp.gm_tensor(local + 64, torch.int32, 1)[0] = 2
    hp.gm_tensor(local + 4096, torch.uint8, 64)[:] = a2_items(
        [
            (int(local), int(h.GetWindowsInAddr(far) + 256), RING, int(FP32), far),
            (int(local + 64), int(h.GetWindowsInAddr(far) + FLAG + 4), 1, 2, far),
        ]
    )
    h.BatchWrite[True](local + 4096, 2)
    wait_flag(h.GetWindowsInAddr(me) + FLAG, 1)
    wait_flag(h.GetWindowsInAddr(me) + FLAG + 4, 2)
    got = hp.gm_tensor(out, torch.float32, 2 * RING)
    got[:RING] = hp.gm_tensor(h.GetWindowsInAddr(me), torch.float32, RING)
    got[RING:] = hp.gm_tensor(h.GetWindowsInAddr(me) + 256, torch.float32, RING)
    h.Finalize()


def ring_rank() -> list[float]:
    out = torch.zeros(2 * RING)
    hp.launch(_ring_kernel, out, tiling())
    return out.tolist()


def test_windows_and_batch_write_on_every_backend(backend: str) -> None:
    n = 3
    got = np.array(hp.run(ring_rank, world_size=n, backend=backend, ranks_per_server=1))
    want = np.stack(
        [
            np.concatenate(
                [np.arange(RING) + 10 * ((r - 1) % n), np.arange(RING) - 10 * ((r - 2) % n)]
            )
            for r in range(n)
        ]
    )
    np.testing.assert_array_equal(got, want)


def test_backends_without_windows_say_so_at_the_first_window_call() -> None:
    from hccl_py.backends.dist.server import DistServer

    server = DistServer.__new__(DistServer)
    server.backend_name = "hccl"
    with pytest.raises(hp.HcclNoWindowsError) as info:
        server.window("hccl_world_group", 0, "In")
    assert str(info.value) == (
        "GetWindowsInAddr: the hccl backend does not map communication windows: the NPU "
        "communicator owns them and hccl_py has no access to them; run window kernels on the "
        "emulator (backend='emu') or on gloo processes of one host"
    )


def test_the_hccl_server_refuses_window_meetings_and_meets_exchanges_on_its_groups() -> None:
    from hccl_py.backends.dist.server import DistServer
    from hccl_py.core.group import Group
    from hccl_py.server.protocol import EXCHANGE

    server = DistServer.__new__(DistServer)
    server.backend_name, server.domains = "hccl", {}
    group = Group([0, 1], "g")
    with pytest.raises(hp.HcclNoWindowsError, match="^rank 0 waits: the hccl backend does not"):
        server.meet(group, 0, "0", "rank 0 waits")
    assert server.meet(group, 0, EXCHANGE, "all_reduce", b"{}") is None  # no process group
    assert server.meet(Group([3], "one"), 0, EXCHANGE, "all_reduce", b"{}") == [b"{}"]


def test_batch_write_on_some_ranks_does_not_shift_the_collectives() -> None:
    m = 3

    def kernel(out, tilingGM):
        h = client(tilingGM)
        me = h.GetRankId()
        if me == 0:  # only rank 0 has a peer on another server
            local = h.GetWindowsOutAddr(0)
            hp.gm_tensor(local, torch.uint8, 32)[:] = a2_items(
                [(int(local + 64), int(h.GetWindowsInAddr(1)), 1, int(FP32), 1)]
            )
            assert h.BatchWrite[True](local, 1) == 0
        x = hp.gm_tensor(out, torch.float32, m)
        x[:] = torch.arange(m) + me
        assert h.Wait(h.AllReduce[True](out, out, m, FP32, hp.HCCL_REDUCE_SUM)) == 0
        h.Finalize()

    got = np.array(run_kernel(kernel, n=2, out_len=m, ranks_per_server=1))
    np.testing.assert_array_equal(got, np.tile(2 * np.arange(m) + 1, (2, 1)))


@pytest.mark.parametrize(
    ("raw", "dtype", "shown"),
    [
        (bytes([1, 0, 0, 0]), torch.int32, "1 (int32; bytes 01 00 00 00)"),
        (bytes([0, 0, 128, 63]), torch.float32, "1.0 (float32; bytes 00 00 80 3f)"),
        (bytes([7, 0, 0, 0, 0, 0, 0, 0, 2, 0]), torch.int16, "[7, 0, 0, 0, 2] (int16; bytes "),
        (bytes([1, 2, 3]), torch.int32, "bytes 01 02 03"),
    ],
)
def test_polled_values_are_shown_as_the_kernel_reads_them(
    raw: bytes, dtype: torch.dtype, shown: str
) -> None:
    assert shown_value(raw, dtype).startswith(shown)


def _doc_multi_queue_rank() -> list[list[int]]:
    """BatchWrite.md's A3 example "point-to-point over multiple queues", call for call.

    Stand-in: the two items live in a workspace tensor instead of inputGM.
    """
    x = torch.arange(16, dtype=torch.uint8) + 10 * hp.get_rank()
    out1, out2 = torch.zeros(16, dtype=torch.uint8), torch.zeros(16, dtype=torch.uint8)
    workspace = torch.zeros(128, dtype=torch.uint8)

    def kernel(inputGM, outputGM1, outputGM2, workspaceGM, tilingGM):
        h = client(tilingGM)
        rows = [(int(inputGM), int(outputGM1), 16), (int(inputGM), int(outputGM2), 16)]
        hp.gm_tensor(workspaceGM, torch.uint8, 128)[:] = a3_items(rows)
        for queue in range(h.GetQueueNum()):
            h.BatchWrite[True](workspaceGM + 64 * queue, 1, queue)
        for queue in range(h.GetQueueNum()):
            h.QueueBarrier[hp.ScopeType.ALL](queue)
        h.Finalize[False]()

    hp.launch(kernel, x, out1, out2, workspace, tiling(queue_num=2))
    return [out1.tolist(), out2.tolist()]


def test_batch_write_into_this_ranks_own_gm_on_a3() -> None:
    """The documented A3 example writes into the kernel's outputGM1/outputGM2, not a window."""
    for rank, (out1, out2) in enumerate(hp.run(_doc_multi_queue_rank, world_size=2, platform="A3")):
        want = list(range(10 * rank, 10 * rank + 16))
        assert out1 == want and out2 == want


def test_batch_write_on_a2_writes_only_windows() -> None:
    """A2 items travel by RDMA, which reaches only window memory: a GM destination is refused."""

    def kernel(out, tilingGM):
        h = client(tilingGM)
        me = h.GetRankId()
        src = h.GetWindowsOutAddr(me)
        items = a2_items([(int(src), int(out), 1, int(FP32), 1 - me)])
        hp.gm_tensor(src + 4096, torch.uint8, items.numel())[:] = items
        return h.BatchWrite[True](src + 4096, 1), h.last_error

    def main() -> tuple[int, str]:
        got = []
        hp.launch(lambda out, t: got.append(kernel(out, t)), torch.zeros(4), tiling())
        return got[0]

    for handle, reason in hp.run(main, world_size=2, ranks_per_server=1, strict=False):
        assert handle == -1
        assert "is not a communication window" in reason
        assert "on Atlas A2 BatchWrite goes over RDMA" in reason


def _context_fields_rank() -> dict:
    """What the A2 combine and the A3 v2 full-mesh helpers read from GetHcclContext(0)."""
    got = {}

    def kernel(tilingGM):
        h = client(tilingGM)
        ctx = hp.GetHcclContext(0)
        me, dim = ctx.rankId, ctx.rankNum
        got["ids"] = (me, dim, ctx.localUsrRankId, ctx.rankSize, ctx.winSize, ctx.winExpSize)
        got["a2"] = all(
            int(ctx.windowsIn[r]) == int(h.GetWindowsInAddr(r))
            and int(ctx.windowsOut[r]) == int(h.GetWindowsOutAddr(r))
            for r in range(dim)
        )
        # iterated as Python sequences (before, the entry past the end raised HcclUsageError,
        # which does not end a for loop)
        got["iterated"] = [int(w) for w in ctx.windowsIn] == [
            int(h.GetWindowsInAddr(r)) for r in range(dim)
        ] and [int(r.nextDevicePtr.windowsOut) for r in ctx.remoteRes] == [
            int(ctx.remoteRes[r].nextDevicePtr.windowsOut) for r in range(dim)
        ]
        mine = ctx.remoteRes[me].nextDevicePtr
        got["local"] = [int(ctx.localWindowsIn), int(ctx.localWindowsOut), int(ctx.localWindowsExp)]
        got["remote"] = [int(mine.windowsIn), int(mine.windowsOut), int(mine.windowsExp)]
        # the status word of the full-mesh helpers: each rank flags its peer's Exp window
        peer = ctx.remoteRes[(me + 1) % dim].nextDevicePtr.windowsExp
        hp.gm_tensor(peer + 4 * me, torch.int32, 1)[0] = 10 + me
        hp.SyncAll()

    def read_flag(tilingGM):
        ctx = hp.GetHcclContext(0)
        prev = (ctx.rankId - 1) % ctx.rankNum
        got["flag"] = int(hp.gm_tensor(ctx.localWindowsExp + 4 * prev, torch.int32, 1)[0])

    hp.launch(kernel, tiling())
    hp.barrier()  # every rank flagged its peer
    hp.launch(read_flag, tiling())
    return got


def test_context_fields_have_the_cpp_names() -> None:
    out = hp.run(_context_fields_rank, world_size=3, platform="A3", buffsize_mb=2)
    for rank, got in enumerate(out):
        assert got["ids"] == (rank, 3, rank, 3, 2 << 20, 2 << 20)
        assert got["a2"] and got["iterated"]
        assert got["local"] == got["remote"]
        assert len(set(got["local"])) == 3, "In, Out and Exp are three windows"
        assert got["flag"] == 10 + (rank - 1) % 3


def test_a3_context_says_its_windows_are_ccl_buffers() -> None:
    """AttentionToFFN and FFNToAttention (ops-transformer mc2/attention_to_ffn,
    mc2/ffn_to_attention) read ``userMemType`` and take ``remoteRes[r]`` when it is 0 (CCL
    buffer), ``userMemRes[r].addr`` otherwise: hccl_py's windows are CCL buffers, and
    ``userMemRes``, which HCCL fills only for user memory, says so when read."""

    def main() -> tuple[int, str]:
        got = []

        def kernel(tilingGM):
            ctx = hp.GetHcclContext(0)
            try:
                ctx.userMemRes[0]
            except hp.HcclUsageError as e:
                got.append((ctx.userMemType, str(e)))

        hp.launch(kernel, tiling())
        return got[0]

    for mem_type, message in hp.run(main, world_size=2, platform="A3", buffsize_mb=2):
        assert mem_type == 0
        assert "userMemRes[0]: the context's userMemType is 0 (CCL buffer)" in message
        assert "remoteRes[r].nextDevicePtr->windowsIn" in message


def test_a_window_only_kernel_needs_no_finalize() -> None:
    """It sent the server nothing (docs/windows.md, Finalize in window kernels)."""

    def kernel(out, tilingGM):
        h = client(tilingGM)
        me, dim = h.GetRankId(), h.GetRankDim()
        hp.gm_tensor(h.GetWindowsInAddr((me + 1) % dim), torch.float32, 1)[0] = me + 1
        hp.SyncAll()

    result = run_kernel(kernel, n=2)
    assert result.warnings == {}


def _ring_on_held_flags(write_next: bool):
    """Each rank holds a view of its own flag and spins on it; optionally its peer writes it."""

    def kernel(out, tilingGM):
        h = client(tilingGM)
        me, dim = h.GetRankId(), h.GetRankDim()
        flag = hp.gm_tensor(h.GetWindowsInAddr(me) + FLAG, torch.int32, 1)
        if write_next:
            hp.gm_tensor(h.GetWindowsInAddr((me + 1) % dim) + FLAG, torch.int32, 1)[0] = 1
        while int(flag[0]) != 1:  # a poll through a tensor the kernel holds
            pass
        hp.gm_tensor(out, torch.float32, 1)[0] = 1.0
        h.Finalize()

    return kernel


def test_a_ring_polling_held_flags_runs_on_eight_ranks() -> None:
    got = run_kernel(_ring_on_held_flags(write_next=True), n=8, out_len=1)
    assert got == [[1.0]] * 8


def _ring_on_indexed_flags(write_next: bool):
    """Each rank polls its flag as ``flags[torch.tensor([k])]`` of a 4 KiB view of its window."""

    def kernel(out, tilingGM):
        h = client(tilingGM)
        me, dim = h.GetRankId(), h.GetRankDim()
        flags = hp.gm_tensor(h.GetWindowsInAddr(me) + FLAG - 2048, torch.int32, 1024)
        k = torch.tensor([2048 // 4])  # FLAG, picked out of the large view
        if write_next:
            hp.gm_tensor(h.GetWindowsInAddr((me + 1) % dim) + FLAG, torch.int32, 1)[0] = 1
        while int(flags[k]) != 1:  # an indexed poll: aten.index reads 4 of 4096 bytes
            pass
        hp.gm_tensor(out, torch.float32, 1)[0] = 1.0
        h.Finalize()

    return kernel


def test_a_flag_picked_by_a_tensor_index_is_a_poll() -> None:
    """The poll reads only the picked element: the scheduler sees it (no 60 s timeout of a
    spinning runner), the ring runs, and a flag nobody writes is a deadlock naming 4 bytes."""
    assert run_kernel(_ring_on_indexed_flags(write_next=True), n=4, out_len=1) == [[1.0]] * 4
    with pytest.raises(hp.WorldError) as info:
        run_kernel(_ring_on_indexed_flags(write_next=False), n=2, out_len=1, timeout=600)
    err = info.value.failures[0]
    assert isinstance(err, hp.HcclDeadlockError), info.value
    assert "rank 0 polls bytes [1048576, 1048580) of WindowsIn of rank 0" in err.reason


def test_held_flags_nobody_writes_are_one_deadlock_report_on_eight_ranks() -> None:
    with pytest.raises(hp.WorldError) as info:
        run_kernel(_ring_on_held_flags(write_next=False), n=8, out_len=1, timeout=600)
    err = info.value.failures[0]
    assert isinstance(err, hp.HcclDeadlockError), info.value  # at once, not the 600 s timeout
    lines = err.reason.splitlines()[1:9]
    assert lines == [
        f"  - rank {r} polls bytes [1048576, 1048580) of WindowsIn of rank {r} (domain "
        "hccl_world_group), which keep the value 0 (int32; bytes 00 00 00 00): no rank writes them"
        for r in range(8)
    ]


def _one_sided_only(out, tilingGM):
    """A launch whose only task is a BatchWrite of 4 floats to the next rank."""
    h = client(tilingGM)
    me, dim = h.GetRankId(), h.GetRankDim()
    local = h.GetWindowsOutAddr(me)
    hp.gm_tensor(local, torch.float32, 4)[:] = 1.0
    info = local + 4096
    peer = (me + 1) % dim
    item = (int(local), int(h.GetWindowsInAddr(peer)), 4, int(FP32), peer)
    hp.gm_tensor(info, torch.uint8, 32)[:] = a2_items([item])
    h.Wait(h.BatchWrite[True](info, 1))
    h.Finalize()


def _all_reduce(xGM, yGM, tilingGM):
    h = client(tilingGM)
    h.Wait(h.AllReduce[True](xGM, yGM, 4, FP32, hp.HCCL_REDUCE_SUM))
    h.Finalize()


def one_sided_launch_on_rank_0_only() -> list[float]:
    x, y, t = torch.full((4,), hp.get_rank() + 1.0), torch.zeros(4), tiling()
    hp.launch(_all_reduce, x, y, t)
    if hp.get_rank() == 0:  # ranks do not match one-sided tasks: a launch of them is its own
        hp.launch(_one_sided_only, torch.zeros(4), t)
    y.zero_()
    hp.launch(_all_reduce, x, y, t)
    return y.tolist()


@pytest.mark.parametrize("backend", ["emu", "gloo"])
def test_a_launch_of_one_sided_tasks_on_one_rank_shifts_no_later_launch(backend: str) -> None:
    """Before 2026-11-28 such a launch took a launch number of the domain on rank 0 alone, so
    the next AllReduce was a false 'different numbers of tasks' on both backends."""
    got = hp.run(
        one_sided_launch_on_rank_0_only,
        world_size=2,
        backend=backend,
        platform="A2",
        ranks_per_server=1,
        timeout=30,
    )
    assert got == [[3.0] * 4, [3.0] * 4]


def _held_status_kernel(nbytes: int, copy_to_ub: bool, writer: bool):
    """A literal port of a status poll: the kernel sets up its GlobalTensor once and reads it
    on every turn of its loop (``DataCopy`` into a UB buffer, or a ReduceSum straight from
    it), as MoeEpDispatchEpilogue's WaitDispatch does; rank 1 writes the status when
    ``writer``. Rank 0 runs first on the default schedule, so it polls before the status
    comes."""

    def kernel(out, tilingGM):
        h = client(tilingGM)
        state = h.GetWindowsInAddr(0) + FLAG
        if h.GetRankId() == 1 and writer:
            hp.gm_tensor(state, torch.int32, nbytes // 4)[:] = 1
        elif h.GetRankId() == 0:
            status = hp.gm_tensor(state, torch.int32, nbytes // 4)
            ub = torch.zeros(nbytes // 4, dtype=torch.int32)
            got = 0
            for _ in range(STATUS_POLL_BOUND):
                if copy_to_ub:
                    ub[:] = status
                    got = int(ub.sum())
                else:
                    got = int(status.sum())
                if got == nbytes // 4:
                    break
            hp.gm_tensor(out, torch.float32, 1)[0] = got

    return kernel


@pytest.mark.parametrize("copy_to_ub", [True, False])
@pytest.mark.parametrize("nbytes", [128, 4096])
def test_a_held_view_of_a_status_area_is_polled(nbytes: int, copy_to_ub: bool) -> None:
    """Before 2026-11-28 only reads of at most 64 bytes of a held view were polls: rank 0
    spun in its loop with the baton, rank 1 never ran, and the run ended at the timeout
    (or at the loop's bound, with the status unseen)."""
    got = run_kernel(_held_status_kernel(nbytes, copy_to_ub, True), n=2, timeout=60)
    assert got[0][0] == nbytes // 4


@pytest.mark.parametrize("copy_to_ub", [True, False])
def test_a_held_view_of_a_status_area_nobody_writes_is_a_deadlock(copy_to_ub: bool) -> None:
    with pytest.raises(hp.WorldError) as info:
        run_kernel(_held_status_kernel(128, copy_to_ub, False), n=2, timeout=60)
    err = info.value.failures[0]
    assert isinstance(err, hp.HcclDeadlockError), info.value
    assert (
        "rank 0 polls bytes [1048576, 1048704) of WindowsIn of rank 0 (domain hccl_world_group), "
        "which keep the value [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0] (int32; bytes"
    ) in err.reason
    assert "and 64 more bytes: no rank writes them" in err.reason


def test_held_views_of_two_status_areas_read_in_turn_are_polled() -> None:
    """A loop that reads two status areas alternately (each a held view of 128 bytes) polls
    both. Before the fix only a range read again with no other window read between was a
    poll: rank 0 spun with the baton, rank 1 never wrote, and the loop ended at its bound
    with neither status seen (0 instead of 64)."""

    def kernel(out, tilingGM):
        h = client(tilingGM)
        state = h.GetWindowsInAddr(0) + FLAG
        if h.GetRankId() == 1:
            hp.gm_tensor(state, torch.int32, 32)[:] = 1
            hp.gm_tensor(state + 1024, torch.int32, 32)[:] = 1
        else:
            first = hp.gm_tensor(state, torch.int32, 32)
            second = hp.gm_tensor(state + 1024, torch.int32, 32)
            got = 0
            for _ in range(STATUS_POLL_BOUND):
                got = int(first.sum()) + int(second.sum())
                if got == 64:
                    break
            hp.gm_tensor(out, torch.float32, 1)[0] = got

    got = run_kernel(kernel, n=2, timeout=60)
    assert got[0][0] == 64
