"""A3 BatchWrite over several queues, as the shipping MoE setup kernels use it.

Three behaviours that samples/mc2_moe_distribute_dispatch_setup.py needs of the
emulator: a flag-sized item is never poisoned (a poll sees the old value until it
lands), a BatchWrite behind a QueueBarrier[ALL] lands after every queue's earlier
BatchWrites (also another core's), and copies that a Finalize<false> left running
land before the rank's next launch.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from test_window_races import at as marked_at
from test_windows import FLAG, BwTiling, a3_items, client, tiling, wait_flag

import hccl_py as hp
from hccl_py import Hccl

pytestmark = pytest.mark.runner_kinds

ONE = 1.0


def status_poll(addr: hp.GmAddr) -> int:
    """The teardown's WaitDispatch: until |flag - 1.0| <= eps (a NaN flag ends it too)."""
    while abs(float(hp.gm_tensor(addr, torch.float32, 1)[0]) - ONE) > 1e-6:
        pass
    return int(hp.gm_tensor(addr + 4, torch.int32, 1)[0])


def test_a_flag_sized_item_is_not_poisoned_before_it_lands() -> None:
    """Before the fix a pending 32-byte status block read 0xFF..FF under poison: the NaN flag
    ended the poll at once and the count read -1, which hardware never shows."""

    def kernel(out, tilingGM):
        h = client(tilingGM)
        me = h.GetRankId()
        stage = h.GetWindowsOutAddr(me)
        block = torch.zeros(8, dtype=torch.int32)
        block[0], block[1] = 0x3F800000, 7 + me
        hp.gm_tensor(stage, torch.int32, 8)[:] = block
        hp.gm_tensor(stage + 64, torch.uint8, 64)[:] = a3_items(
            [(int(stage), int(h.GetWindowsInAddr(1 - me) + FLAG), 32)]
        )
        h.BatchWrite[True](stage + 64, 1, 0)
        hp.gm_tensor(out, torch.float32, 1)[0] = status_poll(h.GetWindowsInAddr(me) + FLAG)
        h.Finalize[False]()

    def main() -> list[float]:
        out = torch.zeros(1)
        hp.launch(kernel, out, tiling(queue_num=1))
        return out.tolist()

    got = hp.run(main, world_size=2, platform="A3", poison=True, schedule="late")
    assert got == [[8.0], [7.0]]


def barrier_kernel(out, tilingGM):
    """Core 1 sends the data, core 0 the flag behind a QueueBarrier on every queue."""
    h = client(tilingGM)
    me, core = h.GetRankId(), hp.GetBlockIdx()
    peer = h.GetWindowsInAddr(1 - me)
    stage = h.GetWindowsOutAddr(me) + 4096 * core
    if core == 0:  # the flag: the default schedule runs core 0 first, up to its poll
        hp.gm_tensor(stage, torch.float32, 8)[:] = torch.tensor([ONE] + [0.0] * 7)
        rows = [(int(stage), int(peer + FLAG), 32)]
    else:
        hp.gm_tensor(stage, torch.float32, 64)[:] = torch.arange(64) + me
        rows = [(int(stage), int(peer), 256)]
    hp.gm_tensor(stage + 1024, torch.uint8, 64)[:] = a3_items(rows)
    if core == 1:
        h.BatchWrite[True](stage + 1024, 1, 0)
    h.QueueBarrier(0)
    if core == 0:
        h.BatchWrite[True](stage + 1024, 1, 0)
    if core == 0:
        status_poll(h.GetWindowsInAddr(me) + FLAG)
        hp.gm_tensor(out, torch.float32, 64)[:] = hp.gm_tensor(
            h.GetWindowsInAddr(me), torch.float32, 64
        )
    h.Finalize[False]()


def test_a_batch_write_behind_a_queue_barrier_lands_after_other_cores_earlier_ones() -> None:
    """Before the fix the flag (core 0, behind the barrier) landed before core 1 had even
    posted its data: the receiver read zeros where the peer's rows belong."""

    def main() -> list[float]:
        out = torch.zeros(64)
        hp.launch(barrier_kernel, out, tiling(queue_num=1), block_dim=2, kernel_type="aiv")
        return out.tolist()

    for seed in range(8):  # seeded schedules switch cores at every hccl_py call
        got = hp.run(main, world_size=2, platform="A3", seed=seed)
        for me in (0, 1):
            assert got[me] == [float(v + 1 - me) for v in range(64)], seed


def test_batch_writes_left_by_finalize_false_land_before_the_next_launch() -> None:
    """Before the fix a copy left pending by Finalize<false> read its source when it landed,
    after the next launch had rewritten it: the peer got the next launch's value."""

    def kernel(out, tilingGM, value):
        h = client(tilingGM)
        me = h.GetRankId()
        stage = h.GetWindowsOutAddr(me)
        hp.gm_tensor(stage, torch.float32, 64)[:] = value
        hp.gm_tensor(stage + 1024, torch.uint8, 64)[:] = a3_items(
            [(int(stage), int(h.GetWindowsInAddr(1 - me) + 256 * int(value)), 256)]
        )
        h.BatchWrite[True](stage + 1024, 1, 0)
        h.Finalize[False]()

    def main() -> list[float]:
        for value in (1.0, 2.0):
            hp.launch(kernel, torch.zeros(1), tiling(queue_num=1), value)
        hp.barrier()
        group = hp.world_group()
        ctx = hp.kernel.context.current_rank_context()
        win = hp.GmAddr(ctx.server.window(group.name, hp.get_rank(), "In"))
        return hp.gm_tensor(win + 256, torch.float32, 128).tolist()

    got = hp.run(main, world_size=2, platform="A3", schedule="late")
    assert got[0] == [1.0] * 64 + [2.0] * 64


def two_contexts_kernel(out, tilingGM):
    """Context 0 sends 1 and, behind a QueueBarrier, 2; context 1 then sends the flag 3."""
    t = hp.GET_TILING_DATA_WITH_STRUCT(BwTiling, tilingGM)
    h0, h1 = Hccl(), Hccl()
    for index, h in enumerate((h0, h1)):
        h.InitV2(hp.GetHcclContext(index), t)
        assert h.SetCcTilingV2(hp.offsetof(BwTiling, "bw")) == 0
    me = h0.GetRankId()
    peer, local = h0.GetWindowsInAddr(1 - me), h0.GetWindowsOutAddr(me)
    hp.gm_tensor(local, torch.int32, 3)[:] = torch.tensor([1, 2, 3])
    items = a3_items([(int(local + 4 * k), int(peer + 64 * k), 4) for k in range(2)])
    items = torch.cat([items, a3_items([(int(local + 8), int(peer + FLAG), 4)])])
    hp.gm_tensor(local + 4096, torch.uint8, items.numel())[:] = items
    h0.BatchWrite[True](local + 4096, 1, 0)
    h0.QueueBarrier(0)
    h0.BatchWrite[True](local + 4096 + 64, 1, 0)
    h1.BatchWrite[True](local + 4096 + 128, 1, 0)
    wait_flag(h0.GetWindowsInAddr(me) + FLAG, 3)
    hp.gm_tensor(out, torch.float32, 1)[0] = 1.0
    h0.Finalize[False]()
    h1.Finalize[False]()


def test_the_batch_write_queues_of_two_contexts_are_not_ordered_together() -> None:
    """Each context's Hccl object has its own message area (InitV2 reads its workSpace): the
    flag that context 1 sends waits neither for context 0's queue nor for its barrier. Before
    the fix both contexts' writes shared one queue and one barrier count on the emulator: the
    flag, of epoch 0, sat behind context 0's epoch-1 write, which waited for it, and the late
    schedule declared a deadlock that the gloo backend (and hardware) does not have."""

    def main() -> list[float]:
        out = torch.zeros(1)
        world = hp.world_group()
        hp.launch(two_contexts_kernel, out, tiling(queue_num=1), groups=[world, world])
        return out.tolist()

    for option in ({"schedule": "late"}, {"seed": 3}):
        assert hp.run(main, world_size=2, platform="A3", **option) == [[1.0], [1.0]], option


def test_a_core_goes_on_past_a_batch_write_behind_a_barrier() -> None:
    """On hardware only the server holds a BatchWrite behind a QueueBarrier; the core goes on.
    Before, hccl_py held the core there, and this kernel (core 0's barrier and write, then a
    SyncAll that core 1 passes before its own barrier) was a false deadlock report."""

    def kernel(out, tilingGM):
        h = client(tilingGM)
        me, core = h.GetRankId(), hp.GetBlockIdx()
        stage = h.GetWindowsOutAddr(me)
        if core == 0:
            hp.gm_tensor(stage, torch.float32, 8)[:] = torch.arange(8) + 10 * me
            hp.gm_tensor(stage + 1024, torch.uint8, 64)[:] = a3_items(
                [(int(stage), int(h.GetWindowsInAddr(1 - me)), 32)]
            )
            h.QueueBarrier(0)
            h.BatchWrite[True](stage + 1024, 1, 0)
            hp.SyncAll()
        else:
            hp.SyncAll()
            h.QueueBarrier(0)
        h.Finalize[False]()

    def main() -> list[float]:
        hp.launch(kernel, torch.zeros(1), tiling(queue_num=1), block_dim=2, kernel_type="aiv")
        hp.barrier()
        ctx = hp.kernel.context.current_rank_context()
        win = hp.GmAddr(ctx.server.window(hp.world_group().name, hp.get_rank(), "In"))
        return hp.gm_tensor(win, torch.float32, 8).tolist()

    for seed in (None, 0, 1, 2, 3):
        got = hp.run(main, world_size=2, platform="A3", seed=seed)
        assert got == [[float(v + 10) for v in range(8)], [float(v) for v in range(8)]], seed


def test_a_batch_write_still_held_when_the_kernel_returns_is_reported() -> None:
    """Queue 0 never sends the barrier that the write on queue 1 waits behind: the real server
    holds that write forever; the kernel's exit says so instead of dropping it silently."""

    def kernel(out, tilingGM):
        h = client(tilingGM)
        me = h.GetRankId()
        stage = h.GetWindowsOutAddr(me)
        hp.gm_tensor(stage + 1024, torch.uint8, 64)[:] = a3_items(
            [(int(stage), int(h.GetWindowsInAddr(1 - me)), 32)]
        )
        h.QueueBarrier(1)
        h.BatchWrite[True](stage + 1024, 1, 1)
        h.Finalize[False]()

    def main() -> None:
        hp.launch(kernel, torch.zeros(1), tiling(queue_num=2))

    with pytest.raises(hp.WorldError) as info:
        hp.run(main, world_size=2, platform="A3")
    assert isinstance(info.value.failures[0], hp.HcclUnfinishedError)
    assert (
        "a BatchWrite on queue 1 of core 0 waits behind QueueBarrier #0 until all 2 queues of "
        "the rank sent it (the server holds it)" in str(info.value)
    )


def at(marker: str) -> str:
    """``file:line (kernel)`` of the line of this file that carries ``# <marker>``."""
    return marked_at(marker, path=Path(__file__))


def held_then_rewritten(what: str, when: str):
    """Core 0 sends a BatchWrite that waits behind its QueueBarrier until core 1's barrier, and
    rewrites ``what`` ("items" or "source") with new bytes ``when``: "held" (before core 1's
    barrier releases it) or "released" (after the release, before the copies land)."""

    def kernel(out, tilingGM):
        h = client(tilingGM)
        me, core = h.GetRankId(), hp.GetBlockIdx()
        stage = h.GetWindowsOutAddr(me)
        src, info = stage, stage + 1024
        if core == 0:
            hp.gm_tensor(src, torch.float32, 8)[:] = torch.arange(8) + 10 * me
            hp.gm_tensor(info, torch.uint8, 64)[:] = a3_items(
                [(int(src), int(h.GetWindowsInAddr(1 - me)), 32)]
            )
            h.QueueBarrier(0)
            h.BatchWrite[True](info, 1, 0)  # held-batch-write
            if when == "released":
                hp.SyncAll()
            if what == "items":
                hp.gm_tensor(info, torch.uint8, 8)[:] = 0x5A  # rewrite-items
            else:
                hp.gm_tensor(src, torch.float32, 8)[:] = -1.0  # rewrite-source
            if when == "held":
                hp.SyncAll()
        else:
            hp.SyncAll()
            h.QueueBarrier(0)  # held-release
        h.Finalize[False]()

    def main() -> None:
        hp.launch(kernel, torch.zeros(1), tiling(queue_num=1), block_dim=2, kernel_type="aiv")

    return main


def test_a_rewrite_after_the_release_names_the_batch_write() -> None:
    """A rewrite of a released BatchWrite's items or source that nothing orders after its
    copies: the race report names the BatchWrite's call, not the QueueBarrier that released it."""
    for what in ("items", "source"):
        with pytest.raises(hp.WorldError) as info:
            hp.run(
                held_then_rewritten(what, "released"), world_size=2, platform="A3", schedule="late"
            )
        err = info.value.failures[0]
        assert isinstance(err, hp.HcclRaceError), (what, err)
        text = str(err)
        assert "BatchWrite read race" in text, text
        assert f"called at {at('held-batch-write')}" in text, text
        assert f"at {at('rewrite-' + what)} before the copies" in text, text
        assert at("held-release") not in text, text


def held_rewrite_kernel(what: str):
    """Core 0 sends 8 floats and a flag to the peer in a BatchWrite held behind its
    QueueBarrier, then rewrites ``what`` before a SyncAll that orders it before core 1's
    releasing barrier; core 0 then polls the peer's flag and returns what landed."""

    def kernel(out, tilingGM):
        h = client(tilingGM)
        me, core = h.GetRankId(), hp.GetBlockIdx()
        stage, peer = h.GetWindowsOutAddr(me), h.GetWindowsInAddr(1 - me)
        src, other, flag, info = stage, stage + 256, stage + 512, stage + 1024

        def items(source: int) -> torch.Tensor:
            return a3_items([(source, int(peer), 32), (int(flag), int(peer + FLAG), 32)])

        if core == 0:
            hp.gm_tensor(src, torch.float32, 8)[:] = torch.arange(8) + 10 * me
            hp.gm_tensor(other, torch.float32, 8)[:] = 100 + torch.arange(8)
            hp.gm_tensor(flag, torch.float32, 8)[:] = torch.tensor([ONE] + [0.0] * 7)
            hp.gm_tensor(info, torch.uint8, 128)[:] = items(int(src))
            h.QueueBarrier(0)
            h.BatchWrite[True](info, 2, 0)
            if what == "items":
                hp.gm_tensor(info, torch.uint8, 128)[:] = items(int(other))
            elif what == "out-of-bounds":
                bad = [(int(src), int(peer), 1 << 30), (int(flag), int(peer + FLAG), 32)]
                hp.gm_tensor(info, torch.uint8, 128)[:] = a3_items(bad)
            else:
                hp.gm_tensor(src, torch.float32, 8)[:] = -1.0
            hp.SyncAll()
            status_poll(h.GetWindowsInAddr(me) + FLAG)
            hp.gm_tensor(out, torch.float32, 8)[:] = hp.gm_tensor(
                h.GetWindowsInAddr(me), torch.float32, 8
            )
        else:
            hp.SyncAll()
            h.QueueBarrier(0)
        h.Finalize[False]()

    def main() -> list[float]:
        out = torch.zeros(8)
        hp.launch(kernel, out, tiling(queue_num=1), block_dim=2, kernel_type="aiv")
        return out.tolist()

    return main


@pytest.mark.parametrize("what", ["items", "source"])
@pytest.mark.parametrize("option", [{}, {"schedule": "late"}, {"seed": 1}, {"poison": True}])
def test_a_rewrite_ordered_before_the_release_is_what_lands(what: str, option: dict) -> None:
    """The server reads a held BatchWrite's item list and sources when the last queue's
    barrier releases it, so a rewrite that the kernel orders before that barrier (a SyncAll)
    is what lands, on hardware and here, with no report. Before the fix the emulator read the
    items at the call (the old source landed); the first version of the read race check
    marked them from the call (a false race report)."""
    got = hp.run(held_rewrite_kernel(what), world_size=2, platform="A3", **option)
    sent = [100.0 + k for k in range(8)] if what == "items" else [-1.0] * 8
    assert got == [sent, sent]


def test_an_item_list_made_invalid_before_the_release_is_refused_at_the_release() -> None:
    """The server reads a held BatchWrite's items at the release: an item the kernel made
    invalid in between is refused there, naming the BatchWrite's handle, not copied."""
    with pytest.raises(hp.WorldError) as info:
        hp.run(held_rewrite_kernel("out-of-bounds"), world_size=2, platform="A3", timeout=30)
    err = info.value.failures[0]
    assert isinstance(err, hp.HcclBoundsError), err
    assert err.handle == 0 and err.op == "BatchWrite", err
    assert "QueueBarrier released the held BatchWrite (handle 0), whose item list" in str(err)


def test_a_queue_past_the_message_area_is_refused() -> None:
    """A core's message queue is ``queueID + GetBlockIdx() * queueNum`` (hccl_aicpu_impl.h) in an
    area of 48 queues (hccl_msg.h MAX_QUE_NUM): queue 1 of block 24 with queueNum 2 is 49, which
    the client would write over the memory behind the area."""

    def kernel(out, tilingGM):
        h = client(tilingGM)
        core = hp.GetBlockIdx()
        stage = h.GetWindowsOutAddr(h.GetRankId()) + 4096 * core
        hp.gm_tensor(stage + 1024, torch.uint8, 64)[:] = a3_items(
            [(int(stage), int(h.GetWindowsInAddr(1 - h.GetRankId()) + 256 * core), 32)]
        )
        if core >= 23:
            hp.gm_tensor(out, torch.float32, 2)[core - 23] = h.BatchWrite[True](stage + 1024, 1, 1)
        h.Finalize[False]()

    def main() -> list[float]:
        out = torch.zeros(2)
        hp.launch(kernel, out, tiling(queue_num=2), block_dim=25, kernel_type="aiv")
        return out.tolist()

    got = hp.run(main, world_size=2, platform="A3", strict=False)
    assert got == [[0.0, -1.0]] * 2  # block 23's queue 47 fits, block 24's 49 does not
    with pytest.raises(hp.WorldError, match="queueID 1 of block 24 is message queue 49"):
        hp.run(main, world_size=2, platform="A3")


@pytest.mark.parametrize("strict", [True, False])
def test_a_collective_with_queues_is_refused_in_every_mode(strict: bool) -> None:
    """SetQueueNum.md: queues are BatchWrite's. With queueNum > 0 the client sends a collective
    on queue dataType from every core, writes no commit count and its Wait returns at once
    (hccl_aicpu_impl.h): the kernel would read its receive buffer before anything ran."""

    def kernel(x, y, tilingGM):
        h = client(tilingGM)
        h.Wait(h.AllReduce[True](x, y, 8, hp.HCCL_DATA_TYPE_FP32, hp.HCCL_REDUCE_SUM))
        h.Finalize[False]()

    def main() -> None:
        hp.launch(kernel, torch.ones(8), torch.zeros(8), tiling(queue_num=1))

    with pytest.raises(hp.WorldError) as info:
        hp.run(main, world_size=2, platform="A3", strict=strict)
    for error in info.value.root_causes.values():
        assert isinstance(error, hp.HcclUsageError), error
        assert "AllReduce with queueNum 1 in the init tiling" in str(error), error


def test_a_wait_with_queues_orders_no_batch_write_and_the_report_says_so() -> None:
    """With queueNum > 0 the client's Wait returns 0 at once (hccl_aicpu_impl.h): it orders no
    BatchWrite, so a read of the destination after it races. Until stop 65 the report told the
    kernel to call the Wait it had called."""

    def kernel(out, tilingGM):
        h = client(tilingGM)
        me = h.GetRankId()
        src = h.GetWindowsOutAddr(me)
        hp.gm_tensor(src, torch.float32, 4)[:] = 1.0
        hp.gm_tensor(src + 1024, torch.uint8, 64)[:] = a3_items([(int(src), int(out), 16)])
        h.Wait(h.BatchWrite[True](src + 1024, 1, 0))
        assert float(hp.gm_tensor(out, torch.float32, 4).sum()) >= 0
        h.Finalize[False]()

    def main() -> None:
        hp.launch(kernel, torch.zeros(4), tiling(queue_num=1))

    with pytest.raises(hp.WorldError) as info:
        hp.run(main, world_size=2, platform="A3")
    err = info.value.failures[0]
    assert isinstance(err, hp.HcclRaceError), err
    assert "before the Wait of the BatchWrite (handle 0)" in str(err), err
    assert "with several message queues, queueNum > 0, a Wait returns at once" in str(err), err
