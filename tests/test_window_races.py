"""Races in communication windows under poison=True (issue 13, item 5).

A kernel that reads window bytes a peer writes must be ordered after the
write by a flag (a small write that it polls) or a completed Wait. The
emulator's check is tested for what it reports (word for word, with the
places in this file), for what it must not report (flags, polls, Waits,
BatchWrite's last item, strided accesses next to each other, writes over
writes) and for what the data then looks like. Orders that hccl_py cannot
see are forced with a threading.Event shared by the rank threads.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from hccl_py.backends.emu import wait_until
from hccl_py.backends.emu.intervals import IntervalMap
from test_windows import (
    FLAG,
    FP32,
    a3_items,
    client,
    flag_after_batch_write,
    run_kernel,
    tiling,
    wait_flag,
)

import hccl_py as hp

#: Every test here runs on thread and on greenlet runners (tests/conftest.py).
#: Each test is a unit of its own under xdist (conftest.py).
pytestmark = [pytest.mark.runner_kinds, pytest.mark.spread]

M = 32  # floats of data: 128 bytes, more than a flag
HERE = Path(__file__)
WINDOWS = HERE.with_name("test_windows.py")  # where the shared kernels live


def at(marker: str, function: str = "kernel", path: Path = HERE) -> str:
    """``file:line (function)`` of the line of ``path`` that carries ``# <marker>``."""
    source = path.read_text().splitlines()
    line = next(i for i, text in enumerate(source, 1) if text.endswith(f"# {marker}"))
    return f"{path.name}:{line} ({function})"


def race_of(info: pytest.ExceptionInfo, rank: int) -> hp.HcclRaceError:
    err = info.value.failures[rank]
    assert isinstance(err, hp.HcclRaceError), err
    return err


def first_finding(info: pytest.ExceptionInfo) -> str:
    """The first finding line of rank 0's race report."""
    return race_of(info, 0).reason.splitlines()[1]


def early_text(
    reader: int, writer: int, lo: int, hi: int, read: str, wrote: str, queue: bool = False
) -> str:
    """The report of a read that came before ``writer``'s data arrived (its BatchWrite's, with
    ``queue``)."""
    return (
        "window race: a read of window bytes that a peer writes is not ordered with the write:\n"
        f"  - rank {reader} read bytes [{lo}, {hi}) of WindowsIn of rank {reader} (domain "
        f"hccl_world_group) at {read}, which rank {writer} wrote at {wrote}, with no flag or "
        "completed Wait in between: the data may not have arrived yet (the read saw 0xFF there)\n"
        f"Have rank {writer} write a flag after the data"
        + " through the data's BatchWrite queue (its copies land in order; a flag on another "
        "queue needs a QueueBarrier[ALL] before it)"
        * queue
        + f" and rank {reader} poll it until it "
        "holds this round's value before reading (or Wait on a task both ranks committed); "
        "see docs/windows.md#races"
    )


# --------------------------------------------------------------- what is reported
def test_read_without_flag_after_the_peer_wrote_sees_poison_and_is_reported() -> None:
    written = threading.Event()

    def kernel(out, tilingGM):
        h = client(tilingGM)
        me = h.GetRankId()
        if me == 1:
            data = torch.arange(M, dtype=torch.float32)
            hp.gm_tensor(h.GetWindowsInAddr(0), torch.float32, M)[:] = data  # early-write
            written.set()
        else:
            wait_until(written.is_set)
            got = hp.gm_tensor(h.GetWindowsInAddr(0), torch.float32, M).clone()  # early-read
            hp.gm_tensor(out, torch.float32, M)[:] = got
        h.Finalize()

    with pytest.raises(hp.WorldError) as info:
        run_kernel(kernel, n=2, out_len=M, poison=True)
    err = race_of(info, 0)
    assert err.reason == early_text(0, 1, 0, 4 * M, at("early-read"), at("early-write"))
    assert (err.rank, err.domain) == (0, "hccl_world_group")


def test_the_early_read_sees_0xff_where_the_data_has_not_arrived() -> None:
    written = threading.Event()
    seen = {}

    def kernel(out, tilingGM):
        h = client(tilingGM)
        me = h.GetRankId()
        win = h.GetWindowsInAddr(0)
        if me == 0:
            hp.gm_tensor(win, torch.float32, 2 * M)[:] = -1.0  # the owner's own bytes
        if me == 1:
            wait_until(written.is_set)
            hp.gm_tensor(win + 4 * M, torch.float32, M)[:] = 5.0
            written.clear()
        else:
            written.set()
            wait_until(lambda: not written.is_set())
            seen["first"] = hp.gm_tensor(win, torch.float32, 2 * M).clone().numpy()
            seen["second"] = hp.gm_tensor(win, torch.float32, 2 * M).clone().numpy()
        h.Finalize()

    run_kernel(kernel, n=2, out_len=1, poison=True)
    first, second = seen["first"], seen["second"]
    np.testing.assert_array_equal(first[:M], -1.0)  # the owner's bytes: no peer wrote them
    assert np.isnan(first[M:]).all()  # the peer's: not arrived at the first look
    assert (first[M:].view(np.uint32) == 0xFFFFFFFF).all()
    np.testing.assert_array_equal(second, np.r_[[-1.0] * M, [5.0] * M])  # a second look: a poll


def test_a_look_at_other_bytes_of_the_write_is_no_second_look() -> None:
    """A second look is a poll only where it reads bytes the first look read: until stop 69
    reading one half of a peer's write early and then the other half once counted as a poll
    that saw the data, and the kernel, which never looked at either half twice, went
    unreported."""
    written = threading.Event()

    def kernel(out, tilingGM):
        h = client(tilingGM)
        win = h.GetWindowsInAddr(0)
        if h.GetRankId() == 1:
            hp.gm_tensor(win, torch.float32, 2 * M)[:] = 3.0  # halves-write
            written.set()
        else:
            wait_until(written.is_set)
            low = hp.gm_tensor(win, torch.float32, M).sum()  # low-half
            high = hp.gm_tensor(win + 4 * M, torch.float32, M).sum()  # high-half
            hp.gm_tensor(out, torch.float32, 2)[:] = torch.stack([low, high])
        h.Finalize()

    with pytest.raises(hp.WorldError) as info:
        run_kernel(kernel, n=2, out_len=2, poison=True)
    first = first_finding(info)
    assert first.startswith("  - rank 0 read bytes [0, 256) of WindowsIn of rank 0"), first
    assert f"which rank 1 wrote at {at('halves-write')}" in first, first


def test_two_cores_reading_once_each_is_no_poll() -> None:
    """Each core of a rank reads the peer's data once, unordered: a poll is one core looking
    again. Until stop 69 the second core's read counted as the rank's second look, and
    neither was reported."""
    written = threading.Event()

    def kernel(out, tilingGM):
        h = client(tilingGM)
        win = h.GetWindowsInAddr(0)
        if h.GetRankId() == 1:
            if hp.GetBlockIdx() == 0:
                hp.gm_tensor(win, torch.float32, M)[:] = 4.0  # core-write
                written.set()
        else:
            wait_until(written.is_set)
            got = hp.gm_tensor(win, torch.float32, M).sum()  # core-read
            hp.gm_tensor(out + 4 * hp.GetBlockIdx(), torch.float32, 1)[0] = got
        hp.SyncAll()
        h.Finalize()

    def main() -> list[float]:
        out = torch.zeros(2)
        hp.launch(kernel, out, tiling(), block_dim=2)
        return out.tolist()

    with pytest.raises(hp.WorldError) as info:
        hp.run(main, world_size=2, poison=True)
    assert first_finding(info) == (
        "  - rank 0 read bytes [0, 128) of WindowsIn of rank 0 (domain hccl_world_group) at "
        f"{at('core-read')}, which rank 1 wrote at {at('core-write')}, with no flag or "
        "completed Wait in between: the data may not have arrived yet (the read saw 0xFF there)"
    )


def test_a_kernel_that_fails_on_data_that_had_not_arrived_reports_the_early_read() -> None:
    """The 0xFF of an early read makes many kernels fail before they return (a count that is
    NaN, an address past the window): the report is the read that fed it, with the failure
    as its cause. Until stop 69 the kernel's own error came alone, and the early read that
    explains it was dropped."""
    written = threading.Event()

    def kernel(out, tilingGM):
        h = client(tilingGM)
        win = h.GetWindowsInAddr(0)
        if h.GetRankId() == 1:
            hp.gm_tensor(win, torch.float32, M)[:] = 2.0  # count-write
            written.set()
        else:
            wait_until(written.is_set)
            counts = hp.gm_tensor(win, torch.float32, M).clone()  # count-read
            hp.gm_tensor(out, torch.float32, 1)[0] = int(counts[0])
        h.Finalize()

    with pytest.raises(hp.WorldError) as info:
        run_kernel(kernel, n=2, out_len=1, poison=True)
    err = race_of(info, 0)
    assert isinstance(err.__cause__, ValueError), err.__cause__
    lines = err.reason.splitlines()
    assert lines[1].startswith(f"  - rank 0 read bytes [0, 128) of WindowsIn of rank 0 (domain "
                               f"hccl_world_group) at {at('count-read')}, which rank 1 wrote at "
                               f"{at('count-write')}"), lines  # fmt: skip
    assert lines[2] == (
        "  and then the kernel failed (ValueError: cannot convert float NaN to integer), most "
        "likely on the 0xFF it read where the data had not arrived"
    )


def test_read_before_the_peer_writes_is_reported_when_the_reader_returns() -> None:
    read = threading.Event()

    def kernel(out, tilingGM):
        h = client(tilingGM)
        me = h.GetRankId()
        win = h.GetWindowsInAddr(0)
        if me == 1:
            wait_until(read.is_set)
            hp.gm_tensor(win + 256, torch.float32, M)[:] = 7.0  # stale-write
        else:
            got = hp.gm_tensor(win + 256, torch.float32, M).sum()  # stale-read
            hp.gm_tensor(out, torch.float32, 1)[0] = got
            read.set()
            while hp.gm_tensor(win + 256, torch.float32, 1)[0] != 7.0:  # a flag of its own
                pass
        h.Finalize()

    with pytest.raises(hp.WorldError) as info:
        run_kernel(kernel, n=2, out_len=1, poison=True)
    assert first_finding(info) == (
        "  - rank 0 read bytes [256, 384) of WindowsIn of rank 0 (domain hccl_world_group) at "
        f"{at('stale-read')} before rank 1 wrote them at {at('stale-write')}, with no flag or "
        "completed Wait in between: the read may have seen the old bytes or the new ones"
    )


def test_a_reader_that_returned_before_the_write_is_reported_by_the_writer() -> None:
    returned = threading.Event()

    def kernel(out, tilingGM):
        h = client(tilingGM)
        win = h.GetWindowsInAddr(0)
        if h.GetRankId() == 1:
            wait_until(returned.is_set)
            hp.gm_tensor(win, torch.float32, M)[:] = 3.0  # orphan-write
        else:
            hp.gm_tensor(out, torch.float32, M)[:] = hp.gm_tensor(win, torch.float32, M)
        h.Finalize()

    def main() -> list[float]:
        out = torch.zeros(M)
        hp.launch(kernel, out, tiling())
        if hp.get_rank() == 0:
            returned.set()
        return out.tolist()

    with pytest.raises(hp.WorldError) as info:
        hp.run(main, world_size=2, poison=True)
    err = race_of(info, 1)
    assert err.rank == 1
    assert f"before rank 1 wrote them at {at('orphan-write')}" in err.reason
    assert "rank 0 read bytes [0, 128) of WindowsIn of rank 0" in err.reason


def test_a_flag_written_directly_after_a_batch_write_does_not_order_its_copies() -> None:
    kernel = flag_after_batch_write(M)
    for schedule in ("eager", "late"):
        with pytest.raises(hp.WorldError) as info:
            run_kernel(kernel, n=2, out_len=M, ranks_per_server=1, poison=True, schedule=schedule)
        (reader,) = info.value.root_causes  # the rank that reads first in the fixed schedule
        err = race_of(info, reader)
        assert err.reason == early_text(
            reader,
            1 - reader,
            0,
            4 * M,
            at("batch-read", path=WINDOWS),
            at("batch-write", path=WINDOWS),
            queue=True,
        )


# ------------------------------------------------------------ what is not reported
def receive_all(h: hp.Hccl, out: hp.GmAddr) -> None:
    """Poll every sender's flag, then copy the M floats each one sent to ``out``; Finalize."""
    me, dim = h.GetRankId(), h.GetRankDim()
    for src in range(dim):
        wait_flag(h.GetWindowsInAddr(me) + FLAG + 4 * src, 1)
    got = hp.gm_tensor(h.GetWindowsInAddr(me), torch.float32, dim * M)
    hp.gm_tensor(out, torch.float32, dim * M)[:] = got
    h.Finalize()


def check_every_schedule(kernel, n: int, sent_by, **run_kw) -> None:
    """Under poison, on both schedules: every rank got ``sent_by(s)`` from every sender s."""
    want = np.concatenate([sent_by(s) for s in range(n)])
    for schedule in ("eager", "late"):
        got = run_kernel(kernel, n=n, out_len=n * M, poison=True, schedule=schedule, **run_kw)
        np.testing.assert_array_equal(np.array(got), np.tile(want, (n, 1)))


def test_data_then_flag_polled_by_the_receiver_is_clean_on_8_ranks() -> None:
    n = 8

    def kernel(out, tilingGM):
        h = client(tilingGM)
        me, dim = h.GetRankId(), h.GetRankDim()
        for peer in range(dim):
            data = torch.arange(M, dtype=torch.float32) + 100 * me
            hp.gm_tensor(h.GetWindowsInAddr(peer) + 4 * M * me, torch.float32, M)[:] = data
            hp.gm_tensor(h.GetWindowsInAddr(peer) + FLAG + 4 * me, torch.int32, 1)[0] = 1
        receive_all(h, out)

    check_every_schedule(kernel, n, lambda s: np.arange(M) + 100 * s)


def test_a_flag_inside_the_data_polled_with_one_large_read_is_clean() -> None:
    def kernel(out, tilingGM):
        h = client(tilingGM)
        me = h.GetRankId()
        win = h.GetWindowsInAddr(0)
        if me == 1:
            block = torch.full((M,), 9.0)
            block[-1] = 1.0  # the flag: the last element of the one copy
            hp.gm_tensor(win, torch.float32, M)[:] = block
        else:
            while True:
                block = hp.gm_tensor(win, torch.float32, M).clone()
                if block[-1] == 1.0:
                    break
            hp.gm_tensor(out, torch.float32, M)[:] = block
        h.Finalize()

    got = run_kernel(kernel, n=2, out_len=M, poison=True)
    np.testing.assert_array_equal(got[0], [9.0] * (M - 1) + [1.0])


def test_a_completed_wait_orders_writes_made_before_the_commit_only() -> None:
    written = threading.Event()

    def kernel(out, tilingGM):
        h = client(tilingGM)
        me = h.GetRankId()
        win = h.GetWindowsInAddr(0)
        mode = int(hp.gm_tensor(out, torch.float32, 1)[0])
        if me == 1 and mode == 0:
            hp.gm_tensor(win, torch.float32, M)[:] = 4.0
            written.set()
        send = hp.gm_tensor(out, torch.float32, 1)
        handle = h.AllReduce[True](out, out + 4 * M, 1, FP32, hp.HCCL_REDUCE_SUM)
        if me == 1 and mode == 1:
            hp.gm_tensor(win, torch.float32, M)[:] = 4.0  # after-commit
            written.set()
        assert h.Wait(handle) == 0
        if me == 0:
            wait_until(written.is_set)
            send[:] = hp.gm_tensor(win, torch.float32, M).sum()  # after-wait
        h.Finalize()

    def main(mode: int) -> float:
        out = torch.zeros(M + 1)
        out[0] = mode
        hp.launch(kernel, out, tiling())
        return float(out[0])

    assert hp.run(main, world_size=2, poison=True, args=(0,))[0] == 4.0 * M
    written.clear()
    with pytest.raises(hp.WorldError) as info:
        hp.run(main, world_size=2, poison=True, args=(1,))
    err = race_of(info, 0)
    assert err.reason == early_text(0, 1, 0, 4 * M, at("after-wait"), at("after-commit"))


def test_batch_write_whose_last_item_is_the_flag_is_clean_a3() -> None:
    n = 3

    def kernel(out, tilingGM):
        h = client(tilingGM)
        me, dim = h.GetRankId(), h.GetRankDim()
        local = h.GetWindowsOutAddr(me)
        hp.gm_tensor(local, torch.float32, M)[:] = torch.arange(M) + 10.0 * me
        hp.gm_tensor(local + 1024, torch.int32, 1)[0] = 1
        rows = []
        for p in range(dim):
            rows.append((int(local), int(h.GetWindowsInAddr(p) + 4 * M * me), 4 * M))
            rows.append((int(local + 1024), int(h.GetWindowsInAddr(p) + FLAG + 4 * me), 4))
        hp.gm_tensor(local + 4096, torch.uint8, 64 * len(rows))[:] = a3_items(rows)
        assert h.BatchWrite[True](local + 4096, len(rows)) == 0
        receive_all(h, out)

    check_every_schedule(kernel, n, lambda s: np.arange(M) + 10.0 * s, platform="A3")


ROWS, COLS = 40, 4  # the window table of the column tests: rank 1 writes column 0


def _column_reads(clean: Callable, racy: Callable, marker: str) -> None:
    """Rank 1 writes column 0 of a (ROWS, COLS) float table in a window, rank 0 column 1; then
    rank 0 reads the table with ``clean`` (no report: it reads none of rank 1's bytes) and, in
    a second run, with ``racy``, which reads column 0: reported for exactly its bytes, at the
    line of ``racy`` marked ``# marker``."""
    written = threading.Event()

    def kernel(out, tilingGM):
        h = client(tilingGM)
        table = hp.gm_tensor(h.GetWindowsInAddr(0), torch.float32, ROWS * COLS).view(ROWS, COLS)
        if h.GetRankId() == 1:
            table[:, 0] = 1.0  # column 0 only, 160 bytes in 40 pieces
            written.set()
        else:
            table[:, 1] = 2.0
            wait_until(written.is_set)
            read = racy if int(hp.gm_tensor(out + 4, torch.int32, 1)[0]) else clean
            hp.gm_tensor(out, torch.float32, 1)[0] = read(table)
        h.Finalize()

    def main(peek: int) -> float:
        out = torch.zeros(2)
        out[1:].view(torch.int32)[0] = peek
        hp.launch(kernel, out, tiling())
        return float(out[0])

    assert hp.run(main, world_size=2, poison=True, args=(0,))[0] == 2.0 * ROWS
    written.clear()
    with pytest.raises(hp.WorldError) as info:
        hp.run(main, world_size=2, poison=True, args=(1,))
    lines = race_of(info, 0).reason.splitlines()
    assert lines[1].startswith(f"  - rank 0 read bytes [0, {4 * COLS * (ROWS - 1) + 4}) of ")
    assert f"at {at(marker, '<lambda>')}, which rank 1 wrote at" in lines[1]


def test_strided_accesses_are_checked_byte_for_byte() -> None:
    """Columns 1-3 (nobody else wrote them) are no race; column 0, 160 bytes in 40 pieces, is."""
    _column_reads(
        lambda table: table[:, 1:].sum(),
        lambda table: table[:, 0].sum(),  # strided-read
        "strided-read",
    )


def test_an_indexed_read_is_checked_for_the_elements_it_picks() -> None:
    """``table[rows, 1]`` reads column 1 only: a peer's write of column 0 is no race for it,
    and the same gather of column 0 is reported for exactly those bytes (before 2026-11-28
    every element of ``table`` counted as read)."""
    rows = torch.arange(ROWS)
    _column_reads(
        lambda table: table[rows, torch.full((ROWS,), 1)].sum(),
        lambda table: table[rows, torch.full((ROWS,), 0)].sum(),  # indexed-read
        "indexed-read",
    )


def test_peers_adding_into_the_same_bytes_are_not_reported() -> None:
    n = 4

    def kernel(out, tilingGM):
        h = client(tilingGM)
        me, dim = h.GetRankId(), h.GetRankDim()
        acc = hp.gm_tensor(h.GetWindowsInAddr(0), torch.float32, M)
        acc += 1.0  # an atomic add on hardware (SetAtomicAdd); writes only
        hp.gm_tensor(h.GetWindowsInAddr(0) + FLAG + 4 * me, torch.int32, 1)[0] = 1
        if me == 0:
            for src in range(dim):
                wait_flag(h.GetWindowsInAddr(0) + FLAG + 4 * src, 1)
            hp.gm_tensor(out, torch.float32, M)[:] = acc
        h.Finalize()

    got = run_kernel(kernel, n=n, out_len=M, poison=True)
    assert all(0.0 < v <= n for v in got[0]), got[0]  # += from threads is not atomic here


def test_without_poison_nothing_is_checked() -> None:
    written = threading.Event()

    def kernel(out, tilingGM):
        h = client(tilingGM)
        win = h.GetWindowsInAddr(0)
        if h.GetRankId() == 1:
            hp.gm_tensor(win, torch.float32, M)[:] = 6.0
            written.set()
        else:
            wait_until(written.is_set)
            hp.gm_tensor(out, torch.float32, M)[:] = hp.gm_tensor(win, torch.float32, M)
        h.Finalize()

    assert run_kernel(kernel, n=2, out_len=M)[0] == [6.0] * M


# ------------------------------------------------------------------ IntervalMap
def test_interval_map_against_a_byte_array() -> None:
    rng = np.random.default_rng(5)
    size = 300
    imap, ref = IntervalMap(), np.zeros(size, dtype=np.int64)
    values = {k: object() for k in range(1, 9)}
    for _ in range(400):
        lo = int(rng.integers(0, size))
        hi = int(rng.integers(lo, min(size, lo + 60) + 1))
        v = int(rng.integers(0, 9))
        imap.assign(lo, hi, values.get(v))
        ref[lo:hi] = v
        got = np.zeros(size, dtype=np.int64)
        names = {id(o): k for k, o in values.items()}
        for a, b, value in imap.overlapping(0, size):
            assert a < b
            got[a:b] = names[id(value)]
        np.testing.assert_array_equal(got, ref)
        q_lo = int(rng.integers(0, size))
        q_hi = int(rng.integers(q_lo, size + 1))
        pieces = list(imap.overlapping(q_lo, q_hi))
        assert all(q_lo <= a < b <= q_hi for a, b, _ in pieces)
        assert sum(b - a for a, b, _ in pieces) == int((ref[q_lo:q_hi] != 0).sum())


def test_interval_map_updates_of_whole_pieces_and_gaps_against_bytes() -> None:
    """Marks added to and taken from a few fixed ranges, as the buffer race check does: the
    updates of exactly one piece or of a gap (a shortcut) give what byte-wise updates give."""
    rng = np.random.default_rng(11)
    size = 64
    ranges = [(0, 16), (16, 32), (8, 24), (40, 64), (0, 64), (32, 40)]
    imap, ref = IntervalMap(), [() for _ in range(size)]
    for _ in range(600):
        lo, hi = ranges[int(rng.integers(len(ranges)))]
        mark = int(rng.integers(4))
        if rng.random() < 0.5:
            imap.update(lo, hi, lambda old, m=mark: (*(old or ()), m))
            ref[lo:hi] = [(*old, mark) for old in ref[lo:hi]]
        else:
            imap.update(lo, hi, lambda old, m=mark: tuple(v for v in old or () if v != m) or None)
            ref[lo:hi] = [tuple(v for v in old if v != mark) for old in ref[lo:hi]]
        got = [() for _ in range(size)]
        for a, b, value in imap.overlapping(0, size):
            assert a < b and value
            got[a:b] = [value] * (b - a)
        assert got == ref
        assert len(imap) == len({(a, b) for a, b, _ in imap.overlapping(0, size)})


# ------------------------------------------------------- without touching the script
RACY_SCRIPT = """
import threading

import torch

import hccl_py as hp
from hccl_py.backends.emu import wait_until
from hccl_py import Hccl, HcclCMDType, Mc2CcTilingConfig, Mc2InitTiling

written = threading.Event()


class Tiling(hp.TilingData):
    _fields_ = [("init", Mc2InitTiling)]


def kernel(tilingGM):
    h = Hccl()
    h.InitV2(hp.GetHcclContext(0), tilingGM)
    win = h.GetWindowsInAddr(0)
    if h.GetRankId() == 1:
        hp.gm_tensor(win, torch.float32, 32)[:] = 1.0
        written.set()
    else:
        wait_until(written.is_set)
        print("sum", float(hp.gm_tensor(win, torch.float32, 32).sum()))
    h.Finalize()


def main():
    tiling = Tiling()
    cfg = Mc2CcTilingConfig("hccl_world_group", HcclCMDType.HCCL_CMD_ALLGATHER, "")
    cfg.GetTiling(tiling.init)
    hp.launch(kernel, tiling)


if __name__ == "__main__":
    hp.run(main)
"""


@pytest.mark.one_runner_kind  # the command line runs with HCCL_PY_* cleared: the default runners
def test_run_poison_flag_checks_a_script_that_does_not_ask(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """``run`` without and with ``--poison``, through main() in this process: on the emulator
    the command line runs the script here (runpy); the environment (without HCCL_PY_*
    variables for the runs), sys.argv and sys.path are restored after."""
    from hccl_py.__main__ import main

    script = tmp_path / "racy.py"
    script.write_text(RACY_SCRIPT)
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    monkeypatch.setattr(sys, "path", list(sys.path))
    saved = dict(os.environ)
    try:
        for name in [n for n in os.environ if n.startswith("HCCL_PY_")]:
            del os.environ[name]
        assert main(["run", "-n", "2", str(script)]) == 0, capsys.readouterr().err
        assert "sum 32.0" in capsys.readouterr().out
        with pytest.raises(hp.WorldError) as info:  # Python prints it and exits 1
            main(["run", "-n", "2", "--poison", "--schedule", "late", str(script)])
    finally:
        os.environ.clear()
        os.environ.update(saved)
    assert "sum nan" in capsys.readouterr().out
    assert (
        "rank 0 read bytes [0, 128) of WindowsIn of rank 0 (domain hccl_world_group) at "
        "racy.py:26 (kernel), which rank 1 wrote at racy.py:22 (kernel)" in str(info.value)
    ), info.value


def test_poison_and_schedule_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = {}

    def main() -> None:
        config = hp.kernel.context.current_rank_context().config
        seen[hp.get_rank()] = (config.schedule, config.poison)

    monkeypatch.setenv("HCCL_PY_SCHEDULE", "late")
    monkeypatch.setenv("HCCL_PY_POISON", "1")
    hp.run(main, world_size=2)
    assert seen == {0: ("late", True), 1: ("late", True)}
    hp.run(main, world_size=2, schedule="eager", poison=False)  # the call's own choice wins
    assert seen == {0: ("eager", False), 1: ("eager", False)}
    monkeypatch.delenv("HCCL_PY_SCHEDULE")
    monkeypatch.setenv("HCCL_PY_POISON", "0")
    hp.run(main, world_size=2)
    assert seen == {0: ("eager", False), 1: ("eager", False)}
