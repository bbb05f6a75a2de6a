"""A kernel that rewrites a BatchWrite's item list or an item's source before the copies land.

The AI CPU server reads both when it runs the BatchWrite, some time after the call:
a rewrite before the copies landed may be used or not. While the copies are pending
(late and seeded schedules) the emulator reports such a write; a rewrite after the
Wait, or after the receiver's flag that the data arrived, is no race.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_windows import FLAG, a2_items, a3_items, client, run_kernel, tiling, wait_flag

import hccl_py as hp
from hccl_py import HcclDataType

pytestmark = pytest.mark.runner_kinds

M = 8
FP32 = HcclDataType.HCCL_DATA_TYPE_FP32


def rewriting(platform: str, what: str, when: str):
    """A kernel that sends M floats and a flag to the next rank with one BatchWrite, then
    rewrites ``what`` ("items" or "source") ``when`` ("before" or "after" the Wait)."""

    def kernel(out, tilingGM):
        h = client(tilingGM)
        me, dim = h.GetRankId(), h.GetRankDim()
        peer = (me + 1) % dim
        local = h.GetWindowsOutAddr(me)
        src, flag, info = local, local + 1024, local + 4096
        hp.gm_tensor(src, torch.float32, M)[:] = torch.arange(M) + 10 * me
        hp.gm_tensor(flag, torch.int32, 8)[:] = 1
        dst = h.GetWindowsInAddr(peer)
        if platform == "A2":
            items = a2_items(
                [
                    (int(src), int(dst), M, int(FP32), peer),
                    (int(flag), int(dst + FLAG), 1, 2, peer),
                ]
            )
        else:
            items = a3_items([(int(src), int(dst), 4 * M), (int(flag), int(dst + FLAG), 32)])
        hp.gm_tensor(info, torch.uint8, items.numel())[:] = items
        handle = h.BatchWrite[True](info, 2)
        if when == "after":
            h.Wait(handle)  # the server ran the BatchWrite: its copies landed
        if what == "items":
            hp.gm_tensor(info, torch.uint8, 8)[:] = 0x5A
        elif what == "same":  # the bytes it holds already, as MoeDistributeCombineSetup's 1.0f
            hp.gm_tensor(src, torch.float32, M)[:] = torch.arange(M) + 10 * me
        else:
            hp.gm_tensor(src, torch.float32, M)[:] = -1.0
        if when == "before":
            h.Wait(handle)
        wait_flag(h.GetWindowsInAddr(me) + FLAG, 1)
        hp.gm_tensor(out, torch.float32, M)[:] = hp.gm_tensor(
            h.GetWindowsInAddr(me), torch.float32, M
        )
        h.Finalize()

    return kernel


def run(platform: str, what: str, when: str, **kw):
    per = {"ranks_per_server": 1} if platform == "A2" else {}
    return run_kernel(
        rewriting(platform, what, when), n=2, out_len=M, platform=platform, **per, **kw
    )


WANT = np.stack([np.arange(M) + 10, np.arange(M)])


@pytest.mark.parametrize("platform", ["A2", "A3"])
@pytest.mark.parametrize("what", ["items", "source"])
def test_a_rewrite_before_the_copies_landed_is_reported(platform: str, what: str) -> None:
    # the default (eager) schedule lands the copies at the call: the rewrite comes later
    np.testing.assert_array_equal(np.array(run(platform, what, "before")), WANT)
    with pytest.raises(hp.WorldError) as info:
        run(platform, what, "before", schedule="late")
    err = info.value.failures[0]
    assert isinstance(err, hp.HcclRaceError), err
    assert (err.op, err.handle) == ("BatchWrite", 0), err
    text = str(err)
    assert "BatchWrite read race: rank" in text, text
    kind = "item 0 of the item list" if what == "items" else "item 0's source"
    assert kind in text, text
    assert text.count("test_batch_write_pending.py:") >= 2, text  # both lines
    want_bytes = "[4096, 4104)" if what == "items" else "[0, 32)"
    assert f"writes bytes {want_bytes} of" in text, text
    with pytest.raises(hp.WorldError) as info:
        run(platform, what, "before", explore=8)
    seed = info.value.seed
    assert isinstance(info.value.failures[0], hp.HcclRaceError), info.value
    assert seed is not None and seed >= 1
    with pytest.raises(hp.WorldError):  # the seed replays it
        run(platform, what, "before", seed=seed)


@pytest.mark.parametrize("platform", ["A2", "A3"])
@pytest.mark.parametrize("what", ["items", "source"])
def test_a_rewrite_after_the_landing_is_no_race(platform: str, what: str) -> None:
    for schedule in ("eager", "late"):
        got = run(platform, what, "after", schedule=schedule)
        np.testing.assert_array_equal(np.array(got), WANT)
    got = run(platform, what, "after", explore=8)
    np.testing.assert_array_equal(np.array(got), WANT)


@pytest.mark.parametrize("platform", ["A2", "A3"])
def test_rewriting_the_same_bytes_before_the_landing_is_no_race(platform: str) -> None:
    """Every core of the shipping MoeDistributeCombineSetup stores the 1.0f that its status
    items send, while another core's status BatchWrite may be pending: the server reads the
    same bytes either way."""
    for schedule in ("eager", "late"):
        np.testing.assert_array_equal(
            np.array(run(platform, "same", "before", schedule=schedule)), WANT
        )
    np.testing.assert_array_equal(np.array(run(platform, "same", "before", explore=8)), WANT)


# ------------------------------------------- one write, several findings (every one judged)
SUM = hp.HcclReduceOp.HCCL_REDUCE_SUM
#: What ``mixed`` puts side by side in one GM tensor, lowest address first.
LAYOUTS = {
    "source, send": ("source", "send"),
    "send, source": ("send", "source"),
    "source, items": ("source", "items"),
}


def mixed(order: tuple[str, str], changed: frozenset[str]):
    """A kernel whose one torch write covers a pending BatchWrite's source and, beside it
    (``order``), an AllReduce's pending send range or the BatchWrite's item list; it writes
    new bytes into the parts named in ``changed`` and their own bytes into the others."""

    def kernel(buf, out, tilingGM):
        h = client(tilingGM)
        me = h.GetRankId()
        at = {name: buf + 256 * k for k, name in enumerate(order)}
        hp.gm_tensor(buf, torch.float32, 256)[:] = 0.5
        whole = hp.gm_tensor(buf, torch.float32, 128)  # the parts; the rest lies past them
        src, info = at["source"], at.get("items", buf + 512)
        hp.gm_tensor(src, torch.float32, M)[:] = torch.arange(M) + 10 * me
        items = a3_items([(int(src), int(h.GetWindowsInAddr(1 - me)), 4 * M)])
        hp.gm_tensor(info, torch.uint8, items.numel())[:] = items
        written = whole.clone()  # reads only: the server reads these bytes, nobody writes them
        for name in changed:
            written[(at[name] - buf) // 4 : (at[name] - buf) // 4 + M] = -7.0
        handle = h.BatchWrite[True](info, 1)
        reduce = h.AllReduce[True](at.get("send", buf + 768), out, M, FP32, SUM)
        whole[:] = written  # one write of everything: every finding of it counts
        h.Wait(reduce)
        h.Wait(handle)
        h.Finalize()

    def main() -> list[float]:
        buf, out = torch.zeros(256), torch.zeros(M)
        hp.launch(kernel, buf, out, tiling())
        return out.tolist()

    return main


def mixed_race(layout: str, changed: set[str]) -> str:
    """The text of the race report of ``mixed`` under the late schedule."""
    with pytest.raises(hp.WorldError) as info:
        hp.run(
            mixed(LAYOUTS[layout], frozenset(changed)), world_size=2, platform="A3", schedule="late"
        )
    err = info.value.failures[0]
    assert isinstance(err, hp.HcclRaceError), err
    return str(err)


def test_a_same_bytes_source_before_a_collective_race_does_not_hide_it() -> None:
    """Before the fix only the first finding (in address order) was judged: the source,
    rewritten with its own bytes, was no race, so the AllReduce's send range beside it,
    rewritten with new bytes before the Wait, went unreported (a missed report)."""
    text = mixed_race("source, send", {"send"})
    assert "collective buffer race: rank" in text, text
    assert "writes bytes [256, 288) of" in text, text  # the send range, not the source
    assert "AllReduce" in text, text


def test_a_collective_race_before_a_same_bytes_source_is_reported() -> None:
    text = mixed_race("send, source", {"send"})
    assert "collective buffer race: rank" in text, text
    assert "writes bytes [0, 32) of" in text, text


def test_a_same_bytes_source_before_a_changed_item_list_does_not_hide_it() -> None:
    """The same for two findings of one BatchWrite: before the fix the unchanged source
    (first) hid the item list rewritten further along."""
    text = mixed_race("source, items", {"items"})
    assert "BatchWrite read race: rank" in text, text
    assert "(item 0 of the item list)" in text, text
    assert "writes bytes [256, 320) of" in text, text  # the 64-byte item


def test_a_changed_source_before_a_same_bytes_item_list_is_reported() -> None:
    text = mixed_race("source, items", {"source"})
    assert "BatchWrite read race: rank" in text, text
    assert "(item 0's source)" in text, text


def test_rewriting_the_same_bytes_of_every_finding_is_no_race() -> None:
    """Every finding of the write is a same-bytes rewrite: none is a race (no false report)."""
    got = hp.run(
        mixed(LAYOUTS["source, items"], frozenset()), world_size=2, platform="A3", schedule="late"
    )
    want = [[1.0] * M, [1.0] * M]  # the AllReduce of 0.5 + 0.5 (its send range: buf + 768)
    np.testing.assert_array_equal(np.array(got), np.array(want))


#: Floats of the own-destination test: more bytes than a flag (a read of a flag is a poll).
OWN = 4 * M


def own_destination(order: str):
    """A kernel whose BatchWrite copies OWN floats into the rank's own In window (A3 allows any
    rank's window), then reads them there: after its Wait ("wait"), after polling a flag item
    sent behind the data ("flag"), or with nothing in between ("none")."""

    def kernel(out, tilingGM):
        h = client(tilingGM)
        me = h.GetRankId()
        src, info = h.GetWindowsOutAddr(me), h.GetWindowsOutAddr(me) + 4096
        flag = src + 1024
        hp.gm_tensor(src, torch.float32, OWN)[:] = torch.arange(OWN) + 10 * me
        hp.gm_tensor(flag, torch.int32, 8)[:] = 1
        dst = h.GetWindowsInAddr(me)
        items = a3_items([(int(src), int(dst), 4 * OWN), (int(flag), int(dst + FLAG), 32)])
        hp.gm_tensor(info, torch.uint8, items.numel())[:] = items
        handle = h.BatchWrite[True](info, 2)
        if order == "wait":
            h.Wait(handle)
        elif order == "flag":
            wait_flag(dst + FLAG, 1)
        hp.gm_tensor(out, torch.float32, OWN)[:] = hp.gm_tensor(dst, torch.float32, OWN)
        if order != "wait":
            h.Wait(handle)
        h.Finalize()

    return kernel


def _own(order: str, **kw) -> list:
    return run_kernel(own_destination(order), n=2, out_len=OWN, platform="A3", poison=True, **kw)


def test_reading_the_own_destination_before_the_wait_is_reported() -> None:
    """A rank's own BatchWrite lands in its own window when the server runs it, not at the
    call: reading the destination before the Wait (or a flag item behind the data) reads
    whatever was there (before 2026-11-30 only a peer's read of it was checked)."""
    want = np.stack([np.arange(OWN), np.arange(OWN) + 10])
    for order in ("wait", "flag"):
        for schedule in ("eager", "late"):
            np.testing.assert_array_equal(np.array(_own(order, schedule=schedule)), want)
        np.testing.assert_array_equal(np.array(_own(order, explore=4)), want)
    with pytest.raises(hp.WorldError) as info:
        _own("none", schedule="late")
    err = info.value.failures[0]
    assert isinstance(err, hp.HcclRaceError), err
    text = str(err)
    assert "which rank 0 sent to its own window with a BatchWrite at" in text, text
    assert text.count("test_batch_write_pending.py:") >= 2, text  # the read and the BatchWrite
    assert "have rank 0 Wait for the BatchWrite before reading" in text, text


def _write_own_plain(out, tilingGM) -> tuple:
    """In a kernel: one BatchWrite of OWN floats (10 * rank + i) into the rank's own plain GM
    ``out``; the Hccl object and the BatchWrite's handle."""
    h = client(tilingGM)
    me = h.GetRankId()
    src, info = h.GetWindowsOutAddr(me), h.GetWindowsOutAddr(me) + 4096
    hp.gm_tensor(src, torch.float32, OWN)[:] = torch.arange(OWN) + 10 * me
    items = a3_items([(int(src), int(out), 4 * OWN)])
    hp.gm_tensor(info, torch.uint8, items.numel())[:] = items
    return h, h.BatchWrite[True](info, 1)


def plain_destination(order: str):
    """A kernel whose BatchWrite copies OWN floats into the rank's own plain GM (``out``, a
    kernel argument: an A3 item may write there), then reads or writes ``out`` after its Wait
    ("wait") or before it ("read", "write")."""

    def kernel(out, tilingGM):
        h, handle = _write_own_plain(out, tilingGM)
        if order == "wait":
            h.Wait(handle)
        if order in ("wait", "read"):
            assert float(hp.gm_tensor(out, torch.float32, OWN).sum()) >= 0
        if order == "write":
            hp.gm_tensor(out, torch.float32, 1)[:] = -1.0
        if order != "wait":
            h.Wait(handle)
        h.Finalize()

    return kernel


@pytest.mark.parametrize("order", ["read", "write"])
def test_an_access_of_the_own_plain_gm_destination_before_the_wait_is_reported(order: str) -> None:
    """Until stop 64 a BatchWrite into the rank's own plain GM (not a window) was in neither race
    check: a read or a write of the destination before the Wait went unreported on every
    schedule (an Hcomm ReadNbi into plain GM was checked)."""
    want = np.stack([np.arange(OWN), np.arange(OWN) + 10])
    for kw in ({}, {"schedule": "late"}, {"explore": 4}):  # valid: the same data every time
        got = run_kernel(plain_destination("wait"), n=2, out_len=OWN, platform="A3", **kw)
        np.testing.assert_array_equal(np.array(got), want)
    with pytest.raises(hp.WorldError) as info:  # the default schedule, no poison: found
        run_kernel(plain_destination(order), n=2, out_len=OWN, platform="A3")
    for rank, err in info.value.failures.items():
        if isinstance(err, hp.HcclPeerError):
            continue
        assert isinstance(err, hp.HcclRaceError), err
        text = str(err)
        verb = "reads" if order == "read" else "writes"
        assert f"BatchWrite race: rank {rank} {verb} bytes [0, " in text, text
        assert "before the Wait of the BatchWrite (handle 0)" in text, text
        assert text.count("test_batch_write_pending.py:") == 2, text  # the access and the call
        assert (err.op, err.handle) == ("BatchWrite", 0)


def two_plain_writes(read: str):
    """Two BatchWrites into halves of the rank's own plain GM (``out``); after the Wait of the
    first, a read of the first half ("first") or of the second, which that Wait does not order
    ("second")."""
    half = OWN // 2

    def kernel(out, tilingGM):
        h = client(tilingGM)
        me = h.GetRankId()
        src, info = h.GetWindowsOutAddr(me), h.GetWindowsOutAddr(me) + 4096
        hp.gm_tensor(src, torch.float32, OWN)[:] = torch.arange(OWN) + 10 * me
        handles = []
        for k in range(2):
            items = a3_items([(int(src + 4 * half * k), int(out + 4 * half * k), 4 * half)])
            at = info + 64 * k
            hp.gm_tensor(at, torch.uint8, items.numel())[:] = items
            handles.append(h.BatchWrite[True](at, 1))
        h.Wait(handles[0])
        first = 0 if read == "first" else half
        assert float(hp.gm_tensor(out + 4 * first, torch.float32, half).sum()) >= 0
        h.Wait(handles[1])
        h.Finalize()

    return kernel


def test_a_wait_orders_its_batch_write_not_a_later_one() -> None:
    """A Wait orders its BatchWrite and those before it: until stop 64 the marks of every
    BatchWrite of the rank went at any Wait (the emulator lands them all there)."""
    want = np.stack([np.arange(OWN), np.arange(OWN) + 10])
    got = run_kernel(two_plain_writes("first"), n=2, out_len=OWN, platform="A3")
    np.testing.assert_array_equal(np.array(got), want)
    with pytest.raises(hp.WorldError) as info:
        run_kernel(two_plain_writes("second"), n=2, out_len=OWN, platform="A3")
    err = info.value.failures[0]
    assert isinstance(err, hp.HcclRaceError), err
    assert (err.op, err.handle) == ("BatchWrite", 1)
    assert f"reads bytes [{2 * OWN}, {4 * OWN}) of out" in str(err), err


def read_after_finalize(order: str):
    """A BatchWrite of OWN floats into the rank's own plain GM (``out``), then a Finalize and a
    read of ``out``: ``order`` is "async" (Finalize[False] alone), "wait-async" (Wait, then
    Finalize[False]) or "sync" (Finalize[True])."""

    def kernel(out, tilingGM):
        h, handle = _write_own_plain(out, tilingGM)
        if order == "wait-async":
            h.Wait(handle)
        (h.Finalize if order == "sync" else h.Finalize[False])()
        assert float(hp.gm_tensor(out, torch.float32, OWN).sum()) >= 0

    return kernel


def test_finalize_false_does_not_order_a_batch_write() -> None:
    """Finalize<false> waits for nothing (hccl_aicpu_impl.h, Finalize: both `if constexpr
    (sync)` blocks skipped), so a read of a BatchWrite's destination after it, with no Wait,
    races with the copy. Until stop 65 Finalize<false> ordered the rank's BatchWrites as
    Finalize<true> does: the read went unreported on every schedule."""
    want = np.stack([np.arange(OWN), np.arange(OWN) + 10])
    for order in ("wait-async", "sync"):  # valid: a Wait, or Finalize<true>, orders it
        for kw in ({}, {"schedule": "late"}):
            got = run_kernel(read_after_finalize(order), n=2, out_len=OWN, platform="A3", **kw)
            np.testing.assert_array_equal(np.array(got), want)
    with pytest.raises(hp.WorldError) as info:
        run_kernel(read_after_finalize("async"), n=2, out_len=OWN, platform="A3")
    err = info.value.failures[0]
    assert isinstance(err, hp.HcclRaceError), err
    assert (err.op, err.handle) == ("BatchWrite", 0), err
    assert "BatchWrite race: rank 0 reads bytes [0, " in str(err), err
