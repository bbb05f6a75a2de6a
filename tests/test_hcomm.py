"""Hcomm (``hp.Hcomm``, the host channels): landing, Drain, order, poison, bad arguments, gloo.

Every kernel runs on two or three ranks; each rank sends to the next one over the
channel that ``HcclChannelAcquire`` returned, into the peer's HCCL buffer that
``HcclChannelGetHcclBuffer`` returned, and the results are compared with numpy.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from expect import expects_warning

import hccl_py as hp
from hccl_py.kernel.context import current_rank_context

N = 256  # data bytes: more than a flag (64 bytes), so the race check treats them as data
DATA = 512  # offset of the data in the peer's buffer
SCHEDULES = [{"schedule": "eager"}, {"schedule": "late"}, {"seed": 1}, {"seed": 2}, {"seed": 7}]


def channels() -> tuple[dict[int, int], dict[int, hp.GmAddr]]:
    """The host side: a channel to every peer and every rank's HCCL buffer, by rank."""
    me, n = hp.get_rank(), hp.get_world_size()
    descs = [hp.HcclChannelDesc(r) for r in range(n) if r != me]
    handles = hp.HcclChannelAcquire(None, hp.COMM_ENGINE_AIV, descs, len(descs))
    handle = {d.remoteRank: h for d, h in zip(descs, handles, strict=True)}
    buffers = {r: hp.HcclChannelGetHcclBuffer(None, h)[0] for r, h in handle.items()}
    buffers[me] = hp.HcclGetHcclBuffer()[0]
    return handle, buffers


def new_hcomm() -> hp.Hcomm:
    hcomm = hp.Hcomm[hp.COMM_PROTOCOL_UBC_CTP]()
    assert hcomm.Init(torch.zeros(512, dtype=torch.uint8), 512) == hp.HCOMM_SUCCESS
    return hcomm


def source(rank: int) -> np.ndarray:
    return ((np.arange(N) * 7 + rank * 31) % 251).astype(np.uint8)


def flag(addr: hp.GmAddr) -> torch.Tensor:
    return hp.gm_tensor(addr, torch.int32, 1)


def ring_kernel(handle, buffers, src, one, out, mode: str) -> None:  # noqa: ANN001
    """Send ``src`` to the next rank, then announce it; read what the previous rank sent.

    ``mode``: "drain" (WriteNbi, Drain, flag by the core), "no-drain" (the Drain
    dropped), "channel-flag" (WriteNbi of the flag on the same channel, no Drain),
    "notify" (WriteWithNotifyNbi), "uncommitted" (WriteNbi[False], Commit, Drain), "piped"
    (the same with the template forms Commit[PIPE_S] and Drain[PIPE_MTE3]).
    """
    me, n = hp.get_rank(), hp.get_world_size()
    peer = (me + 1) % n
    hcomm, ch = new_hcomm(), handle[peer]
    dst, notify = buffers[peer] + DATA, buffers[peer]
    if mode == "notify":
        assert hcomm.WriteWithNotifyNbi(ch, dst, src, N, notify, 1) == hp.HCOMM_SUCCESS
    elif mode == "uncommitted":
        assert hcomm.WriteNbi[False](ch, dst, src, N) == hp.HCOMM_SUCCESS
        assert hcomm.Commit(ch) == hp.HCOMM_SUCCESS
        assert hcomm.Drain(ch) == hp.HCOMM_SUCCESS
        flag(notify)[0] = 1
    elif mode == "piped":  # Commit<PIPE_S>, Drain<PIPE_MTE3> (until stop 65 a raw TypeError)
        assert hcomm.WriteNbi[False](ch, dst, src, N) == hp.HCOMM_SUCCESS
        assert hcomm.Commit[hp.Pipe.PIPE_S](ch) == hp.HCOMM_SUCCESS
        assert hcomm.Drain[hp.Pipe.PIPE_MTE3](ch) == hp.HCOMM_SUCCESS
        flag(notify)[0] = 1
    else:
        assert hcomm.WriteNbi(ch, dst, src, N) == hp.HCOMM_SUCCESS
        if mode == "drain":
            assert hcomm.Drain(ch) == hp.HCOMM_SUCCESS
        if mode == "channel-flag":
            assert hcomm.WriteNbi(ch, notify, one, 4) == hp.HCOMM_SUCCESS
        else:
            flag(notify)[0] = 1
    own = buffers[me]
    while int(flag(own)[0]) != 1:
        pass
    hp.gm_tensor(out, torch.uint8, N)[:] = hp.gm_tensor(own + DATA, torch.uint8, N)
    flag(own)[0] = 0


def ring(mode: str) -> list[int]:
    handle, buffers = channels()
    src = torch.from_numpy(source(hp.get_rank()))
    out = torch.zeros(N, dtype=torch.uint8)
    one = torch.ones(2, dtype=torch.int32)
    hp.launch(ring_kernel, handle, buffers, src, one, out, mode, block_dim=1, kernel_type="aiv")
    return out.tolist()


def expected(n: int) -> list[list[int]]:
    return [source((r - 1) % n).tolist() for r in range(n)]


@pytest.mark.parametrize("mode", ["drain", "channel-flag", "notify", "uncommitted", "piped"])
@pytest.mark.parametrize("kw", SCHEDULES, ids=str)
def test_ordered_writes_arrive_on_every_schedule(mode: str, kw: dict[str, Any]) -> None:
    """Drain, one channel's later write (URMA_DEFAULT_CFG orders them) or the notify of
    WriteWithNotifyNbi orders the data before the flag: no race, the data arrived."""
    got = hp.run(ring, world_size=3, platform="A3", poison=True, args=(mode,), **kw)
    assert got == expected(3)


@pytest.mark.parametrize("kw", SCHEDULES, ids=str)
def test_a_dropped_drain_is_a_race_naming_the_write(kw: dict[str, Any]) -> None:
    with pytest.raises(hp.WorldError) as info:
        hp.run(ring, world_size=2, platform="A3", poison=True, args=("no-drain",), **kw)
    text = str(info.value)
    assert "HcclRaceError" in text and "test_hcomm.py" in text
    assert "ring_kernel" in text  # the write's line and the read's line


def early_row_kernel(handle, buffers, src, one, out) -> None:  # noqa: ANN001
    """Core 0 writes a row, all cores meet (the row may land there, run by a waiting core),
    core 0 writes a 32-byte status on the same channel and drains; the receiver polls its
    statuses in one read wider than a flag, as MoeEpCombine's WaitDispatch does."""
    me, n, core = hp.get_rank(), hp.get_world_size(), hp.GetBlockIdx()
    peer = (me + 1) % n
    hcomm, ch = new_hcomm(), handle[peer]
    if core == 0:
        assert hcomm.WriteNbi(ch, buffers[peer] + DATA, src, N) == hp.HCOMM_SUCCESS
    hp.SyncAll()
    if core != 0:
        return
    assert hcomm.WriteNbi(ch, buffers[peer], one, 32) == hp.HCOMM_SUCCESS
    assert hcomm.Drain(ch) == hp.HCOMM_SUCCESS
    own = buffers[me]
    while float(hp.gm_tensor(own, torch.float32, 24).sum()) != 8.0:
        pass
    hp.gm_tensor(out, torch.uint8, N)[:] = hp.gm_tensor(own + DATA, torch.uint8, N)


def early_row() -> list[int]:
    handle, buffers = channels()
    src = torch.from_numpy(source(hp.get_rank()))
    out = torch.zeros(N, dtype=torch.uint8)
    one = torch.ones(8, dtype=torch.float32)
    hp.launch(early_row_kernel, handle, buffers, src, one, out, block_dim=2, kernel_type="aiv")
    return out.tolist()


@pytest.mark.parametrize("kw", [*SCHEDULES, {"seed": 4}, {"seed": 5}], ids=str)
def test_a_landing_is_not_the_calling_cores_write(kw: dict[str, Any]) -> None:
    """A write lands in whichever thread runs it (the poster when eager, a Drain, a waiting
    core); the race check keeps it as the channel's write, so the status that follows on the
    channel orders the row for the receiver. (It used to record the copy as a direct write of
    the core that ran it, with that core's clock: a false HcclRaceError on the row.)"""
    got = hp.run(early_row, world_size=2, platform="A3", poison=True, **kw)
    assert got == expected(2)


def test_late_writes_land_only_at_drain() -> None:
    """Under the late schedule a posted write has not landed before its Drain."""

    def kernel(handle, buffers, src, seen) -> None:  # noqa: ANN001
        me = hp.get_rank()
        if me == 0:
            hcomm = new_hcomm()
            dst = buffers[1] + DATA
            assert hcomm.WriteNbi(handle[1], dst, src, N) == hp.HCOMM_SUCCESS
            seen[0] = int(hp.gm_tensor(src, torch.uint8, 1)[0])
            hp.gm_tensor(src, torch.uint8, N).fill_(9)  # the source is read when it lands
            assert hcomm.Drain(handle[1]) == hp.HCOMM_SUCCESS

    def main() -> list[int]:
        handle, buffers = channels()
        src = torch.from_numpy(source(hp.get_rank()))
        seen = [0]
        hp.launch(kernel, handle, buffers, src, seen, block_dim=1, kernel_type="aiv")
        hp.barrier()
        return hp.gm_tensor(buffers[hp.get_rank()] + DATA, torch.uint8, 4).tolist()

    late = hp.run(main, world_size=2, platform="A3", schedule="late")
    eager = hp.run(main, world_size=2, platform="A3", schedule="eager")
    assert late[1] == [9] * 4  # landed at Drain: after the source changed
    assert eager[1] == source(0)[:4].tolist()  # landed at the call


def read_kernel(handle, buffers, out, drain: bool) -> None:  # noqa: ANN001
    me = hp.get_rank()
    if me == 0:
        hcomm = new_hcomm()
        assert hcomm.ReadNbi(handle[1], out, buffers[1] + DATA, N) == hp.HCOMM_SUCCESS
        if drain:
            assert hcomm.Drain(handle[1]) == hp.HCOMM_SUCCESS


def read(drain: bool) -> list[int]:
    handle, buffers = channels()
    me = hp.get_rank()
    hp.gm_tensor(buffers[me] + DATA, torch.uint8, N)[:] = torch.from_numpy(source(me))
    hp.barrier()
    out = torch.zeros(N, dtype=torch.uint8)
    hp.launch(read_kernel, handle, buffers, out, drain, block_dim=1, kernel_type="aiv")
    return out.tolist()


@pytest.mark.parametrize("schedule", ["eager", "late"])
def test_read_nbi_poisons_its_destination_until_drain(schedule: str) -> None:
    got = hp.run(read, world_size=2, platform="A3", poison=True, schedule=schedule, args=(False,))
    want = source(1).tolist() if schedule == "eager" else [0xFF] * N
    assert got[0] == want
    got = hp.run(read, world_size=2, platform="A3", poison=True, schedule=schedule, args=(True,))
    assert got[0] == source(1).tolist()


def uncommitted_drain() -> None:
    def kernel(handle, buffers, src) -> None:  # noqa: ANN001
        hcomm = new_hcomm()
        peer = 1 - hp.get_rank()
        hcomm.WriteNbi[False](handle[peer], buffers[peer] + DATA, src, N)
        hcomm.Drain(handle[peer])

    handle, buffers = channels()
    src = torch.from_numpy(source(0))
    hp.launch(kernel, handle, buffers, src, block_dim=1, kernel_type="aiv")


def test_a_drain_of_uncommitted_writes_is_a_deadlock() -> None:
    with pytest.raises(hp.WorldError) as info:
        hp.run(uncommitted_drain, world_size=2, platform="A3")
    text = str(info.value)
    assert "HcclDeadlockError" in text
    assert "commit=False" in text and "Drain(channel 0x" in text


def one_way(sender: int, mode: str) -> list[int]:
    """Rank ``sender`` writes to the other rank and raises its flag; the other reads.

    ``mode``: "no-drain" (a core flag after WriteNbi), "two-channels" (the flag by
    WriteNbi on a second channel to the same peer), "launches" (WriteNbi in one
    launch, Drain and flag in the next), "other-core" (core 0 posts, core 1 drains
    after SyncAll and raises the flag), "other-core-commits" (core 0 posts with
    commit=False and drains; core 1 commits).
    """
    handle, buffers = channels()
    me, recv = hp.get_rank(), 1 - sender
    src = torch.from_numpy(source(me))
    one = torch.ones(2, dtype=torch.int32)
    out = torch.zeros(N, dtype=torch.uint8)
    if mode == "two-channels" and me == sender:
        desc = [hp.HcclChannelDesc(recv)]
        second = hp.HcclChannelAcquire(None, hp.COMM_ENGINE_AIV, desc, 1)[0]

    def send(src, one) -> None:  # noqa: ANN001
        core, hcomm, ch = hp.GetBlockIdx(), new_hcomm(), handle[recv]
        dst, note = buffers[recv] + DATA, buffers[me] + 64
        if mode == "other-core-commits":
            if core == 0:
                assert hcomm.WriteNbi[False](ch, dst, src, N) == hp.HCOMM_SUCCESS
                flag(note)[0] = 1
                assert hcomm.Drain(ch) == hp.HCOMM_SUCCESS
                flag(buffers[recv])[0] = 1
            else:
                while int(flag(note)[0]) != 1:
                    pass
                assert hcomm.Commit(ch) == hp.HCOMM_SUCCESS
            return
        if core == 0 and mode != "launched":
            assert hcomm.WriteNbi(ch, dst, src, N) == hp.HCOMM_SUCCESS
        if mode == "other-core":
            hp.SyncAll()
            if core == 0:
                return
        if mode == "launches":
            return
        if mode == "two-channels":
            assert hcomm.WriteNbi(second, buffers[recv], one, 4) == hp.HCOMM_SUCCESS
            return
        if mode in ("other-core", "launched"):
            assert hcomm.Drain(ch) == hp.HCOMM_SUCCESS
        flag(buffers[recv])[0] = 1

    def receive(out) -> None:  # noqa: ANN001
        while int(flag(buffers[me])[0]) != 1:
            pass
        hp.gm_tensor(out, torch.uint8, N)[:] = hp.gm_tensor(buffers[me] + DATA, torch.uint8, N)

    cores = 2 if mode.startswith("other-core") else 1
    if me == sender:
        hp.launch(send, src, one, block_dim=cores, kernel_type="aiv")
        if mode == "launches":
            mode = "launched"
            hp.launch(send, src, one, block_dim=1, kernel_type="aiv")
    else:
        hp.launch(receive, out, block_dim=1, kernel_type="aiv")
    return out.tolist()


@pytest.mark.parametrize("sender", [0, 1])
@pytest.mark.parametrize("kw", SCHEDULES[:2], ids=str)
@pytest.mark.parametrize("mode", ["no-drain", "two-channels"])
def test_a_flag_not_ordered_after_the_data_is_a_race_whichever_rank_sends(
    mode: str, kw: dict[str, Any], sender: int
) -> None:
    """A core's flag after WriteNbi without Drain, or a flag on another channel (channels are
    not ordered with each other). The eager copy must not count as the core's own write."""
    with pytest.raises(hp.WorldError) as info:
        hp.run(one_way, world_size=2, platform="A3", poison=True, args=(sender, mode), **kw)
    text = str(info.value)
    assert f"rank {1 - sender}: HcclRaceError" in text
    assert "through an Hcomm channel" in text
    assert "Drain the channel" in text


@pytest.mark.parametrize("mode", ["launches", "other-core", "other-core-commits"])
@pytest.mark.parametrize("kw", SCHEDULES, ids=str)
def test_drain_in_a_later_launch_or_by_another_core_orders_the_data(
    mode: str, kw: dict[str, Any]
) -> None:
    """Drain waits for the channel's requests, whichever core or launch posted them; a Commit
    by another core submits what this one posted with commit=False."""
    got = hp.run(one_way, world_size=2, platform="A3", poison=True, args=(0, mode), **kw)
    assert got[1] == source(0).tolist()


def read_into_window(drain: bool) -> list[int]:
    """Rank 0 reads rank 1's data into its own HCCL buffer, then reads that."""
    handle, buffers = channels()
    me = hp.get_rank()
    hp.gm_tensor(buffers[me] + DATA, torch.uint8, N)[:] = torch.from_numpy(source(me))
    hp.barrier()
    out = torch.zeros(N, dtype=torch.uint8)

    def kernel(out) -> None:  # noqa: ANN001
        if me == 0:
            hcomm, local = new_hcomm(), buffers[0] + 4096
            assert hcomm.ReadNbi(handle[1], local, buffers[1] + DATA, N) == hp.HCOMM_SUCCESS
            if drain:
                assert hcomm.Drain(handle[1]) == hp.HCOMM_SUCCESS
            hp.gm_tensor(out, torch.uint8, N)[:] = hp.gm_tensor(local, torch.uint8, N)

    hp.launch(kernel, out, block_dim=1, kernel_type="aiv")
    return out.tolist()


@pytest.mark.parametrize("kw", SCHEDULES[:3], ids=str)
def test_a_read_nbi_destination_read_before_drain_is_a_race(kw: dict[str, Any]) -> None:
    """The rank's own channel lands it later: not program-ordered like its own writes."""
    with pytest.raises(hp.WorldError) as info:
        hp.run(read_into_window, world_size=2, platform="A3", poison=True, args=(False,), **kw)
    assert "rank 0: HcclRaceError" in str(info.value)
    assert "which rank 0 wrote through an Hcomm channel" in str(info.value)
    got = hp.run(read_into_window, world_size=2, platform="A3", poison=True, args=(True,), **kw)
    assert got[0] == source(1).tolist()


def poll_nonzero(mode: str) -> list[int]:
    """Each rank sends to the next and announces it on the channel; the receiver polls the
    announcement until it is not 0 (a correct kernel: the notify lands after the data)."""
    handle, buffers = channels()
    me, n = hp.get_rank(), hp.get_world_size()
    src = torch.from_numpy(source(me))
    five = torch.full((2,), 5, dtype=torch.int32)
    out = torch.zeros(N, dtype=torch.uint8)

    def kernel(src, five, out) -> None:  # noqa: ANN001
        peer = (me + 1) % n
        hcomm, ch, dst = new_hcomm(), handle[peer], buffers[peer] + DATA
        if mode == "notify":
            assert hcomm.WriteWithNotifyNbi(ch, dst, src, N, buffers[peer], 5) == 0
        else:
            assert hcomm.WriteNbi(ch, dst, src, N) == 0
            assert hcomm.WriteNbi(ch, buffers[peer], five, 4) == 0
        while int(flag(buffers[me])[0]) == 0:
            pass
        hp.gm_tensor(out, torch.uint8, N)[:] = hp.gm_tensor(buffers[me] + DATA, torch.uint8, N)

    hp.launch(kernel, src, five, out, block_dim=1, kernel_type="aiv")
    return out.tolist()


@pytest.mark.parametrize("mode", ["notify", "channel-flag"])
@pytest.mark.parametrize("kw", SCHEDULES, ids=str)
def test_a_notify_in_flight_keeps_its_old_value_not_the_poison(
    mode: str, kw: dict[str, Any]
) -> None:
    """Until it lands a uint64 notify (or a small flag) holds what it held: 0, never
    0xFF..FF, which a poll for "not 0" would take for the announcement."""
    got = hp.run(poll_nonzero, world_size=3, platform="A3", poison=True, args=(mode,), **kw)
    assert got == expected(3)


# ---------------------------------------------------------------- bad arguments
def bad_call(case: str) -> list[Any]:
    """One misuse on rank 0 (``strict=False``: the call's return and last words)."""
    handle, buffers = channels()
    result: list[Any] = []

    def kernel(src) -> None:  # noqa: ANN001
        if hp.get_rank() != 0:
            return
        hcomm = hp.Hcomm()
        if case == "init":
            result.append(hcomm.Init(torch.zeros(64, dtype=torch.uint8), 64))
            return
        hcomm.Init(torch.zeros(512, dtype=torch.uint8), 512)
        ch, dst = handle[1], buffers[1] + DATA
        calls = {
            "unknown-channel": lambda: hcomm.WriteNbi(12345, dst, src, N),
            "other-rank-channel": lambda: hcomm.Drain(other[0]),
            "null-dst": lambda: hcomm.WriteNbi(ch, hp.NULL, src, N),
            "not-peer": lambda: hcomm.WriteNbi(ch, buffers[0] + DATA, src, N),
            "peer-out-window": lambda: hcomm.WriteNbi(
                ch, hp.GetHcclContext(0).windowsOut[1] + DATA, src, N
            ),
            "past-buffer": lambda: hcomm.WriteNbi(ch, dst, src, 1 << 40),
            "local-src-bounds": lambda: hcomm.WriteNbi(ch, dst, src, N + 1),
            "signature": lambda: hcomm.WriteNbi(ch, dst),
            "commit-extra-argument": lambda: hcomm.Commit(ch, 5),  # the pipe is a template arg
            "init-elements": lambda: hp.Hcomm().Init(torch.zeros(128, dtype=torch.int32), 512),
            "init-str": lambda: hp.Hcomm().Init(torch.zeros(512, dtype=torch.uint8), "512"),
            "len-minus-one": lambda: hcomm.WriteNbi(ch, dst, src, -1),
            "notify-2-64": lambda: hcomm.WriteWithNotifyNbi(ch, dst, src, N, buffers[1], 1 << 64),
            "remote-src": lambda: hcomm.WriteNbi(ch, dst, buffers[1] + DATA, N),
            "init-511": lambda: hp.Hcomm().Init(torch.zeros(512, dtype=torch.uint8), 511),
            "init-one-past": lambda: hp.Hcomm().Init(torch.zeros(512, dtype=torch.uint8), 513),
            "protocol-roce": lambda: hp.Hcomm[hp.CommProtocol.COMM_PROTOCOL_ROCE]().Init(
                torch.zeros(512, dtype=torch.uint8), 512
            ),
        }
        result.append(calls[case]())

    other = [0]
    if hp.get_rank() == 0:
        other[0] = (0x4843 << 48) | (2 << 32)  # a handle of rank 1
    src = torch.from_numpy(source(0))
    hp.launch(kernel, src, block_dim=1, kernel_type="aiv")
    return result


BAD = {
    "init": (hp.HcclUsageError, "at least HCOMM_URMA_TMP_BUF_SIZE"),
    "unknown-channel": (hp.HcclUsageError, "rank 0 Hcomm.WriteNbi: channel 0x3039 is no channel"),
    "other-rank-channel": (
        hp.HcclUsageError,
        "Hcomm.Drain: channel 0x4843000200000000 is a channel of rank 1",
    ),
    "null-dst": (hp.HcclUsageError, "dst is null"),
    "not-peer": (hp.HcclUsageError, "not in the HCCL buffer of the channel's peer, rank 1"),
    # the peer's, but its Out window: only its In window of the communicator is its HCCL buffer
    # (before, the write landed there)
    "peer-out-window": (
        hp.HcclUsageError,
        "is not in the HCCL buffer of the channel's peer, rank 1 (its In window of communicator "
        "hccl_world_group",
    ),
    "past-buffer": (hp.HcclUsageError, "fall outside rank 1's HCCL buffer"),
    "local-src-bounds": (hp.HcclBoundsError, "src: bytes [0, 257)"),
    "signature": (hp.HcclUsageError, "the AscendC signature is WriteNbi[commit]"),
    "commit-extra-argument": (hp.HcclUsageError, "the AscendC signature is Commit[pipe](channel"),
    # LocalTensor::GetSize() counts elements: 512 bytes of int32 are 128 < 512 (official -1)
    "init-elements": (hp.HcclUsageError, "more than buff.GetSize(), its 128 elements"),
    # a type mistake is named as one (before: "len '512' must be at least ...")
    "init-str": (hp.HcclUsageError, "Init: len must be an int (bytes of buff), not a str"),
    # each bound just past it (a mutation pass found both unchecked)
    "len-minus-one": (hp.HcclUsageError, "len must be a non-negative int, not -1"),
    "notify-2-64": (hp.HcclUsageError, "notifyVal must be a uint64, not 18446744073709551616"),
    "remote-src": (
        hp.HcclUsageError,
        "points into rank 1's memory; it must be this rank's (rank 0)",
    ),
    "init-511": (hp.HcclUsageError, "len 511 must be at least HCOMM_URMA_TMP_BUF_SIZE (512)"),
    "init-one-past": (hp.HcclUsageError, "len 513 is more than buff.GetSize(), its 512 elements"),
    "protocol-roce": (hp.HcclUsageError, "Hcomm<COMM_PROTOCOL_ROCE> is not emulated"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_arguments_are_named(case: str) -> None:
    error, words = BAD[case]
    with pytest.raises(hp.WorldError) as info:
        hp.run(bad_call, world_size=2, platform="A3", args=(case,))
    assert error.__name__ in str(info.value) and words in str(info.value)
    if error is hp.HcclUsageError:  # a lenient run returns the official -1
        assert hp.run(bad_call, world_size=2, platform="A3", strict=False, args=(case,))[0] == [
            hp.HCOMM_FAILED
        ]


HOST_BAD = {
    "engine": (lambda d: hp.HcclChannelAcquire(None, hp.COMM_ENGINE_CCU, d, 1), "COMM_ENGINE_CCU"),
    "engine-int": (lambda d: hp.HcclChannelAcquire(None, 99, d, 1), "engine 99"),
    "descs": (lambda d: hp.HcclChannelAcquire(None, hp.COMM_ENGINE_AIV, [1], 1), "list of hp."),
    "count": (lambda d: hp.HcclChannelAcquire(None, hp.COMM_ENGINE_AIV, d, 2), "channelNum 2"),
    "self": (
        lambda d: hp.HcclChannelAcquire(None, hp.COMM_ENGINE_AIV, [hp.HcclChannelDesc(0)], 1),
        "remoteRank 0 is not another rank",
    ),
    # a type mistake is named as one (before: "remoteRank 1.0 is not another rank")
    "self-float": (
        lambda d: hp.HcclChannelAcquire(None, hp.COMM_ENGINE_AIV, [hp.HcclChannelDesc(1.0)], 1),
        "a descriptor's remoteRank must be an int (a rank of communicator hccl_world_group), "
        "not a float",
    ),
    "buffer": (lambda d: hp.HcclChannelGetHcclBuffer(None, 7), "acquired no channel 7"),
    # before, the emulator returned a window of a domain rank 0 is not in (gloo: a window error)
    "buffer-not-member": (
        lambda d: hp.HcclGetHcclBuffer(hp.new_group([1])),
        "HcclGetHcclBuffer: rank 0 is not in communicator group_1",
    ),
    "buffer-unhashable": (
        lambda d: hp.HcclChannelGetHcclBuffer(None, [7]),
        "HcclChannelGetHcclBuffer: this rank acquired no channel [7]",
    ),
    "buffer-comm": (lambda d: hp.HcclChannelGetHcclBuffer("w", 7), "comm must be an hp.Group"),
    "buffer-other-comm": (
        lambda d: hp.HcclChannelGetHcclBuffer(
            None, hp.HcclChannelAcquire(hp.new_group([0, 1]), hp.COMM_ENGINE_AIV, d, 1)[0]
        ),
        "was acquired on communicator group_0_1, not hccl_world_group",
    ),
    "engine-unhashable": (
        lambda d: hp.HcclChannelAcquire(None, [4], d, 1),
        "rank 0 HcclChannelAcquire: engine [4]",
    ),
    "protocol": (
        lambda d: hp.HcclChannelAcquire(None, hp.COMM_ENGINE_AIV, [hp.HcclChannelDesc(1, 77)], 1),
        "the protocol 77 of the descriptor of remoteRank 1 is no CommProtocol",
    ),
    "template-protocol": (lambda d: hp.Hcomm[99](), "rank 0 Hcomm[99]: the template argument"),
    "template-bool": (lambda d: hp.Hcomm[True](), "rank 0 Hcomm[True]: the template argument"),
}


@pytest.mark.parametrize("case", sorted(HOST_BAD))
def test_host_side_misuse_is_named(case: str) -> None:
    call, words = HOST_BAD[case]

    def host() -> None:
        if hp.get_rank() == 0:
            call([hp.HcclChannelDesc(1)])
        elif case == "buffer-other-comm":
            hp.new_group([0, 1])
        elif case == "buffer-not-member":
            hp.new_group([1])

    with pytest.raises(hp.WorldError) as info:
        hp.run(host, world_size=2, platform="A3")
    text = str(info.value)
    assert "HcclUsageError" in text and words in text
    assert not any(raw in text for raw in ("TypeError", "ValueError", "KeyError", "Attribute"))


def test_numpy_integers_are_ranks_and_lengths() -> None:
    """A remoteRank or an Init length read from a numpy table is an int like any other."""

    def host() -> list[int]:
        peer = np.int64(1 - hp.get_rank())
        handles = hp.HcclChannelAcquire(None, hp.COMM_ENGINE_AIV, [hp.HcclChannelDesc(peer)], 1)
        got = [len(handles)]
        hp.launch(
            lambda: got.append(hp.Hcomm().Init(torch.zeros(512, dtype=torch.uint8), np.int32(512))),
            block_dim=1,
            kernel_type="aiv",
        )
        return got

    assert hp.run(host, world_size=2, platform="A3") == [[1, hp.HCOMM_SUCCESS]] * 2


# ---------------------------------------------------------------- gloo
@pytest.mark.parametrize("mode", ["drain", "notify"])
def test_gloo_runs_an_hcomm_kernel(mode: str) -> None:
    got = hp.run(ring, world_size=2, backend="gloo", platform="A3", timeout=60, args=(mode,))
    assert got == expected(2)


def numpy_integer_arguments() -> list[int]:
    """len and notifyVal from numpy (a routing table's entries), as BatchWrite takes them."""
    me = hp.get_rank()
    handles = hp.HcclChannelAcquire(None, hp.COMM_ENGINE_AIV, [hp.HcclChannelDesc(1 - me)], 1)
    peer = hp.HcclChannelGetHcclBuffer(None, handles[0])[0]
    mine = hp.HcclGetHcclBuffer()[0]
    got: list[int] = []

    def kernel(src) -> None:  # noqa: ANN001
        hcomm = hp.Hcomm[hp.COMM_PROTOCOL_UBC_CTP]()
        hcomm.Init(torch.zeros(512, dtype=torch.uint8), 512)
        got.append(hcomm.WriteNbi(handles[0], peer, src, np.int64(4)))
        got.append(hcomm.WriteWithNotifyNbi(handles[0], peer + 4, src, 4, peer + 8, np.uint64(3)))
        hcomm.Drain(handles[0])

    hp.launch(kernel, torch.full((1,), 7 + me, dtype=torch.int32))
    hp.barrier()
    return (
        got
        + hp.gm_tensor(mine, torch.int32, 2).tolist()
        + [int(hp.gm_tensor(mine + 8, torch.int64, 1)[0])]
    )


def test_numpy_integers_are_integer_arguments() -> None:
    """Before, np.int64(4) as len was refused: "len must be a non-negative int, not 4"."""
    assert hp.run(numpy_integer_arguments, world_size=2, platform="A3") == [
        [0, 0, 8, 8, 3],
        [0, 0, 7, 7, 3],
    ]


def _channel_in_a_uint64_table() -> list[int]:
    """The handle kept in a uint64 array, as a C++ kernel keeps it: host and kernel calls."""
    peer = 1 - hp.get_rank()
    ch = hp.HcclChannelAcquire(None, hp.COMM_ENGINE_AIV, [hp.HcclChannelDesc(peer)], 1)[0]
    table = np.array([ch], dtype=np.uint64)
    _, size = hp.HcclChannelGetHcclBuffer(None, table[0])
    got: list[int] = []

    def kernel(srcGM: Any) -> None:
        h = hp.Hcomm[hp.COMM_PROTOCOL_UBC_CTP]()
        h.Init(torch.zeros(512, dtype=torch.uint8), 512)
        got.append(h.Drain(torch.tensor(int(ch))))
        got.append(h.Drain(table[0]))

    hp.launch(kernel, torch.zeros(8, dtype=torch.uint8))
    return [size > 0, *got]


def test_a_channel_handle_may_be_a_numpy_or_tensor_integer() -> None:
    """Before 2026-11-30 an np.uint64 handle was "no channel that HcclChannelAcquire returned"."""
    assert hp.run(_channel_in_a_uint64_table, world_size=2, platform="A3") == [[True, 0, 0]] * 2


def _one_element_handle_misuse(case: str) -> list[int]:
    """A handle kept as a one-element tensor (a slice of a handle table) in a failing call."""
    me = hp.get_rank()
    ch = hp.HcclChannelAcquire(None, hp.COMM_ENGINE_AIV, [hp.HcclChannelDesc(1 - me)], 1)[0]
    handle = torch.tensor([ch])
    if case == "buffer-other-comm":
        pair = hp.new_group([0, 1])
        other = hp.HcclChannelAcquire(pair, hp.COMM_ENGINE_AIV, [hp.HcclChannelDesc(1 - me)], 1)
        hp.HcclChannelGetHcclBuffer(None, torch.tensor([other[0]]))
    own = hp.HcclGetHcclBuffer()[0]
    got: list[int] = []

    def kernel(src: Any) -> None:
        h = new_hcomm()
        if case == "bad-dst":  # the peer's buffer is wanted, not this rank's own
            got.append(h.WriteNbi(handle, own, src, 8))
        else:  # posted without the doorbell, never committed
            h.WriteNbi[False](handle, hp.HcclChannelGetHcclBuffer(None, ch)[0], src, 8)
            got.append(h.Drain(handle))

    hp.launch(kernel, torch.zeros(8, dtype=torch.uint8), block_dim=1, kernel_type="aiv")
    return got


@pytest.mark.parametrize(
    ("case", "words"),
    [
        ("bad-dst", "Hcomm.WriteNbi: channel 0x4843000"),
        ("uncommitted", "Drain(channel 0x4843000"),
        ("buffer-other-comm", "HcclChannelGetHcclBuffer: channel 0x4843000"),
    ],
)
def test_a_one_element_tensor_handle_is_named_in_a_report(case: str, words: str) -> None:
    """Before, the report formatted the handle itself: a one-element tensor raised
    "TypeError: unsupported format string passed to Tensor.__format__" instead."""
    with pytest.raises(hp.WorldError) as info:
        hp.run(_one_element_handle_misuse, world_size=2, platform="A3", args=(case,))
    text = str(info.value)
    assert words in text and "TypeError" not in text


def _drain_while_another_core_posts() -> list[int]:
    """Core 1 starts a Drain while core 0's request A waits for its doorbell; core 0 then rings
    it and posts B with commit=False, rung only after a SyncAll with core 1."""
    me = hp.get_rank()
    ch = hp.HcclChannelAcquire(None, hp.COMM_ENGINE_AIV, [hp.HcclChannelDesc(1 - me)], 1)[0]
    peer = hp.HcclChannelGetHcclBuffer(None, ch)[0]
    got: list[int] = []

    def kernel(src: Any, step: Any) -> None:
        h, core, said = new_hcomm(), hp.GetBlockIdx(), flag(step)
        if core == 0:
            assert h.WriteNbi[False](ch, peer + DATA, src, N) == hp.HCOMM_SUCCESS
            said[0] = 1
            while int(said[0]) != 2:  # core 1 is about to Drain
                pass
            assert h.Commit(ch) == hp.HCOMM_SUCCESS
            assert h.WriteNbi[False](ch, peer + 2 * DATA, src, N) == hp.HCOMM_SUCCESS
        else:
            while int(said[0]) != 1:
                pass
            said[0] = 2
            got.append(h.Drain(ch))
        hp.SyncAll()
        if core == 0:
            got.append(h.Commit(ch))
            got.append(h.Drain(ch))

    step = torch.zeros(1, dtype=torch.int32)
    hp.launch(kernel, torch.ones(N, dtype=torch.uint8), step, block_dim=2, kernel_type="aiv")
    return got


def test_a_drain_waits_for_the_requests_posted_before_it() -> None:
    """The official Drain polls for the wqeCnt it reads at its call. On the default schedule
    core 1 is in its Drain before core 0 commits A and posts B: the Drain waits for A alone.
    Before, it waited for every uncommitted request, B too, and the run was reported as a
    deadlock (core 0 in SyncAll, core 1 in a Drain waiting for B)."""
    assert hp.run(_drain_while_another_core_posts, world_size=2, platform="A3") == [[0, 0, 0]] * 2


def _uncommitted_notify() -> None:
    me = hp.get_rank()
    ch = hp.HcclChannelAcquire(None, hp.COMM_ENGINE_AIV, [hp.HcclChannelDesc(1 - me)], 1)[0]
    peer = hp.HcclChannelGetHcclBuffer(None, ch)[0]

    def kernel(src: Any) -> None:
        h = new_hcomm()
        h.WriteWithNotifyNbi[False](ch, peer + DATA, src, N, peer, 1)
        h.Drain(ch)

    hp.launch(kernel, torch.ones(N, dtype=torch.uint8), block_dim=1, kernel_type="aiv")


def test_an_undrainable_drain_counts_requests_not_copies() -> None:
    """One WriteWithNotifyNbi is one request (before: "waits for 2 requests", its copies)."""
    with pytest.raises(hp.WorldError) as info:
        hp.run(_uncommitted_notify, world_size=2, platform="A3")
    assert "waits for 1 request(s) posted with commit=False" in str(info.value)


def _commit_wakes_a_waiting_drain() -> int:
    """Core 1 Drains a request that core 0 posted with commit=False; once the Drain sleeps,
    core 0 rings the doorbell and counts the waits still asleep whose condition holds."""
    me = hp.get_rank()
    ch = hp.HcclChannelAcquire(None, hp.COMM_ENGINE_AIV, [hp.HcclChannelDesc(1 - me)], 1)[0]
    peer = hp.HcclChannelGetHcclBuffer(None, ch)[0]
    blocker = current_rank_context().blocker
    stale: list[int] = []
    drainer: list[int] = []

    def kernel(src: Any) -> None:
        h = new_hcomm()
        if hp.GetBlockIdx() == 0:
            assert h.WriteNbi[False](ch, peer + DATA, src, N) == hp.HCOMM_SUCCESS
        hp.SyncAll()
        if hp.GetBlockIdx() == 1:
            drainer.append(threading.get_ident())
            assert h.Drain(ch) == hp.HCOMM_SUCCESS
            return
        while True:  # until core 1 sleeps in its Drain (it is `blocked` once it released the lock)
            with blocker.lock:
                if drainer and drainer[0] in blocker.blocked:
                    break
        assert h.Commit(ch) == hp.HCOMM_SUCCESS
        with blocker.lock:
            stale.append(sum(1 for s in blocker.cond._sleepers if s.test and s.test()))

    hp.launch(kernel, torch.ones(N, dtype=torch.uint8), block_dim=2, kernel_type="aiv")
    return stale[0]


def test_a_commit_wakes_a_drain_waiting_on_another_core() -> None:
    """gloo: Commit changed what a sleeping Drain waits for without notifying it, so the
    Drain slept until its timeout (a kernel that polled meanwhile timed out: a false
    HcclTimeoutError)."""
    got = hp.run(
        _commit_wakes_a_waiting_drain, world_size=2, backend="gloo", platform="A3", timeout=20
    )
    assert got == [0, 0]


def _left_uncommitted(then: str) -> tuple[list[int], list[str]]:
    """Core 1 posts a WriteNbi[False] (a ReadNbi[False] on core 0 is rung by its later
    committed write); ``then``: "never" (no later doorbell), "next" (the next launch's Commit
    and Drain submit it), "twice" (a second launch leaves a second one). The bytes that
    arrived, and this rank's warning messages."""
    me = hp.get_rank()
    ch = hp.HcclChannelAcquire(None, hp.COMM_ENGINE_AIV, [hp.HcclChannelDesc(1 - me)], 1)[0]
    peer = hp.HcclChannelGetHcclBuffer(None, ch)[0]
    src, back = torch.full((N,), me + 5, dtype=torch.uint8), torch.zeros(N, dtype=torch.uint8)

    def post(src: Any, back: Any) -> None:
        h = new_hcomm()
        if hp.GetBlockIdx() == 0:  # rung by the committed write after it: no report
            assert h.ReadNbi[False](ch, back, peer + DATA + N, N) == hp.HCOMM_SUCCESS
            assert h.WriteNbi(ch, peer + DATA + N, src, N) == hp.HCOMM_SUCCESS
        hp.SyncAll()
        if hp.GetBlockIdx() == 1:
            assert h.WriteNbi[False](ch, peer + DATA, src, N) == hp.HCOMM_SUCCESS

    def commit() -> None:
        h = new_hcomm()
        assert h.Commit(ch) == hp.HCOMM_SUCCESS and h.Drain(ch) == hp.HCOMM_SUCCESS

    hp.launch(post, src, back, block_dim=2, kernel_type="aiv")
    if then == "next":
        hp.launch(commit, block_dim=1, kernel_type="aiv")
    if then == "twice":
        hp.launch(post, src, back, block_dim=2, kernel_type="aiv")
        hp.launch(commit, block_dim=1, kernel_type="aiv")
    hp.barrier()
    got = hp.gm_tensor(hp.HcclGetHcclBuffer()[0] + DATA, torch.uint8, N).tolist()
    return got, [str(w) for w in current_rank_context().warnings]


@expects_warning("hcomm-uncommitted")
@pytest.mark.parametrize("then", ["never", "next", "twice"])
def test_a_request_left_uncommitted_at_the_kernels_end_is_a_warning(
    then: str, backend: str
) -> None:
    """Until 2026-12-01 a WriteNbi[False] that no Commit rang by the kernel's end passed in
    silence. Its doorbell never rang: on hardware (and here) it waits in the channel's send
    queue (curHead lives in GM) until a later launch rings it, or forever. Each launch's end
    reports those its cores left, with the line and core of each; both backends alike."""
    results = hp.run(_left_uncommitted, world_size=2, platform="A3", backend=backend, args=(then,))
    for me, (got, said) in enumerate(results):
        assert got == [(6 - me) if then != "never" else 0] * N
        assert len(said) == (2 if then == "twice" else 1), said
        for text in said:
            assert text.startswith(f"[rank {me}] Hcomm: the kernel returned with 1 request(s)")
            assert f"with commit=False on channel {0x4843 << 48 | (me + 1) << 32:#x} (to rank " in (
                text
            )
            assert f"(to rank {1 - me}) and no Commit after them: WriteNbi at test_hcomm.py:" in (
                text
            )
            assert "in post on AIV core 1. Their doorbell never rang" in text
            assert "call Commit(channel) before the kernel returns [hcomm-uncommitted]" in text


def _left_by_a_failed_launch() -> list[str]:
    """Launch 1 posts a WriteNbi[False], then its kernel raises (its end's checks do not run);
    launch 2 leaves one too. This rank's warning messages."""
    me = hp.get_rank()
    ch = hp.HcclChannelAcquire(None, hp.COMM_ENGINE_AIV, [hp.HcclChannelDesc(1 - me)], 1)[0]
    peer = hp.HcclChannelGetHcclBuffer(None, ch)[0]

    def post(src: Any, fail: bool) -> None:
        h = new_hcomm()
        assert h.WriteNbi[False](ch, peer + DATA, src, N) == hp.HCOMM_SUCCESS  # left-unrung
        if fail:
            raise ValueError("the kernel fails")

    with pytest.raises(ValueError, match="the kernel fails"):
        hp.launch(post, torch.ones(N, dtype=torch.uint8), True, block_dim=1, kernel_type="aiv")
    hp.launch(post, torch.ones(N, dtype=torch.uint8), False, block_dim=1, kernel_type="aiv")
    return [str(w) for w in current_rank_context().warnings]


@expects_warning("hcomm-uncommitted")
def test_an_uncommitted_request_of_a_launch_that_raised_is_named_as_its(backend: str) -> None:
    """Until 2026-12-01 the next launch's warning counted it as its own ("the kernel returned
    with 2 request(s)"): it counts only its own and names the launch that left the other."""
    results = hp.run(_left_by_a_failed_launch, world_size=2, platform="A3", backend=backend)
    line = f"WriteNbi at test_hcomm.py:{_marked_line('left-unrung')} in post on AIV core 0"
    for me, said in enumerate(results):
        assert len(said) == 1, said
        assert said[0].startswith(
            f"[rank {me}] Hcomm: the kernel returned with 1 request(s) posted with commit=False "
            f"on channel {0x4843 << 48 | (me + 1) << 32:#x} (to rank {1 - me}) and no Commit "
            f"after them: {line}; and 1 left by the rank's launch 1 in this run, which raised "
            f"before its end could report them: {line}. Their doorbell never rang"
        ), said[0]


def _marked_line(marker: str) -> int:
    """The line of this file that ends with ``# <marker>``."""
    lines = Path(__file__).read_text().splitlines()
    return next(i for i, text in enumerate(lines, 1) if text.endswith(f"# {marker}"))
