"""Checks that a mutation pass over the guards found untested (each test fails on the mutant).

Output files (hccl_py.core.newfile), the command line's own checks
(hccl_py.launcher.cli_checks) and the other guards below each had a bound or a
branch that a changed comparison or a removed line left every test passing.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import hccl_py as hp
from hccl_py.core import newfile
from hccl_py.launcher.cli_checks import UsageError, emulator_only, ranks_per_host


def test_a_file_written_again_shorter_keeps_no_bytes_of_the_first(tmp_path: Path) -> None:
    """The file this process created is replaced, not overwritten in place: its old tail goes."""
    path = tmp_path / "t.json"
    newfile.write_new(path, b"0123456789")
    newfile.write_new(path, b"ab")
    assert path.read_bytes() == b"ab"


def test_a_file_replaced_after_the_check_is_not_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between is_mine's look and the open another file can take the path: the open's own
    identity check refuses it, as the exclusive creation refuses any file there."""
    path = tmp_path / "t.json"
    newfile.write_new(path, b"ours")
    path.unlink()
    path.write_bytes(b"theirs")
    monkeypatch.setattr(newfile, "is_mine", lambda _path: True)  # the look before the swap
    with pytest.raises(FileExistsError, match="exists; hccl_py creates its output files new"):
        newfile.write_new(path, b"ours again", "--trace")
    assert path.read_bytes() == b"theirs"


def test_hccl_py_world_size_is_shared_over_the_hosts() -> None:
    """``run --nnodes 2`` without -n runs HCCL_PY_WORLD_SIZE / 2 ranks on each host."""
    assert ranks_per_host("-n/--nproc", None, 8, 2) == 4
    assert ranks_per_host("-n/--nproc", None, 3, 1) == 3
    assert ranks_per_host("-n/--nproc", 2, 8, 2) == 2
    assert ranks_per_host("-n/--nproc", None, None, 2) == 4


def test_two_emulator_settings_on_another_backend_are_named_together(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("HCCL_PY_SEED", raising=False)
    monkeypatch.delenv("HCCL_PY_EXPLORE", raising=False)
    with pytest.raises(UsageError) as exc:
        emulator_only("gloo", ("--seed", 1, "HCCL_PY_SEED"), ("--explore", 2, "HCCL_PY_EXPLORE"))
    assert str(exc.value) == (
        "--seed and --explore pick schedules of the emulator; the gloo backend runs its ranks "
        "concurrently: run on the emulator (no --backend)"
    )
    assert os.environ.get("HCCL_PY_SEED") is None


def _alltoallv_write_refusal(call: Any) -> tuple[int, str]:
    """Rank 0's last AlltoAllvWrite handle and h.last_error for ``call(h, xGM)`` on 950."""
    from tests.test_alltoallv_write import CCU, WriteTiling, tiling

    def kernel(xGM: Any, tilingGM: Any) -> tuple[int, str]:
        h = hp.Hccl[CCU]()
        h.InitV2(hp.GetHcclContext(0), hp.GET_TILING_DATA_WITH_STRUCT(WriteTiling, tilingGM))
        h.SetCcTilingV2(hp.offsetof(WriteTiling, "write"))
        return call(h, xGM), h.last_error

    def main() -> tuple[int, str]:
        out: list = []
        hp.launch(
            lambda x, t: out.append(kernel(x, t)), torch.zeros(8, dtype=torch.uint8), tiling()
        )
        return out[0]

    return hp.run(main, world_size=2, platform="950", strict=False)[0]


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (([0] * 4, [1] * 4, 0, -1), "localDataSize must be a non-negative int"),
        (([0] * 4, [1] * 4, -1, 4), "remoteWinOffset must be a non-negative int"),
    ],
)
def test_alltoallv_write_refuses_each_argument_just_past_its_bound(
    args: tuple, reason: str
) -> None:
    handle, last_error = _alltoallv_write_refusal(lambda h, x: h.AlltoAllvWrite[True](x, *args))
    assert handle == -1
    assert reason in last_error


def test_a_size_of_2_to_the_63_is_a_bounds_error_not_an_overflow() -> None:
    from tests.test_alltoallv_write import _write_bounds_error

    err = _write_bounds_error([0, 0, 4, 4], np.array([4, 1 << 63, 4, 4], dtype=np.uint64))
    assert "sendSizes holds 9223372036854775808, a byte count past the end" in err.reason


def test_alltoallv_write_refuses_the_64th_handle() -> None:
    got: list = []

    def call(h: Any, x: Any) -> int:
        handles = [h.AlltoAllvWrite[False](x, [0] * 4, [0] * 4, 0, 0) for _ in range(64)]
        got.append((handles, h.last_error))
        return 0

    with pytest.raises(hp.WorldError, match=r"Finalize\(\) was never called"):
        _alltoallv_write_refusal(call)
    handles, last_error = got[0]
    assert handles == [*range(63), -1]
    assert "the domain already used its 63 handles" in last_error


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda h, info: h.BatchWrite[True](info, 1, -1), "queueID must not be negative, got -1"),
    ],
)
def test_batch_write_refuses_each_argument_just_past_its_bound(call: Any, message: str) -> None:
    from test_windows import test_batch_write_and_queue_rules as rules

    rules("A3", call, message)


def test_message_queue_48_is_already_past_the_area() -> None:
    """hccl_msg.h MAX_QUE_NUM is 48 queues, 0..47: queue 0 of block 24 with queueNum 2 is 48."""
    from test_windows import a3_items, client, tiling

    def kernel(out: Any, tilingGM: Any) -> None:
        h = client(tilingGM)
        core = hp.GetBlockIdx()
        stage = h.GetWindowsOutAddr(h.GetRankId()) + 4096 * core
        hp.gm_tensor(stage + 1024, torch.uint8, 64)[:] = a3_items(
            [(int(stage), int(h.GetWindowsInAddr(1 - h.GetRankId()) + 256 * core), 32)]
        )
        if core == 24:
            hp.gm_tensor(out, torch.float32, 1)[0] = h.BatchWrite[True](stage + 1024, 1, 0)
        h.Finalize[False]()

    def main() -> list[float]:
        out = torch.zeros(1)
        hp.launch(kernel, out, tiling(queue_num=2), block_dim=25, kernel_type="aiv")
        return out.tolist()

    assert hp.run(main, world_size=2, platform="A3", strict=False) == [[-1.0]] * 2
    with pytest.raises(hp.WorldError, match="queueID 0 of block 24 is message queue 48"):
        hp.run(main, world_size=2, platform="A3")


def test_windows_have_addresses_for_4096_domains() -> None:
    from hccl_py.server.windows import MAX_WINDOW_DOMAINS, DomainTags

    tags = DomainTags()
    assert [tags.for_windows(f"d{i}") for i in range(1, MAX_WINDOW_DOMAINS)][-1] == 4095
    with pytest.raises(hp.HcclNoWindowsError) as exc:
        tags.for_windows("one more")
    assert (
        "domain one more is domain number 4096 of this run: windows have addresses for the "
        "first 4096 domains only" in str(exc.value)
    )


def test_the_64th_batch_write_is_refused_for_its_handle() -> None:
    """HCCL_MAX_HANDLE_ID: 63 handles; the 64th BatchWrite names that limit, not the slots."""
    from test_windows import a3_items, client, tiling

    got: list = []

    def kernel(out: Any, tilingGM: Any) -> None:
        h = client(tilingGM)
        me = h.GetRankId()
        stage = h.GetWindowsOutAddr(me)
        peer = h.GetWindowsInAddr(1 - me)
        handles = []
        for k in range(64):
            info = stage + 8192 + 64 * k
            hp.gm_tensor(info, torch.uint8, 64)[:] = a3_items(
                [(int(stage), int(peer + 64 * k), 32)]
            )
            handles.append(h.BatchWrite[True](info, 1, 0))
        got.append((handles, h.last_error))
        h.Finalize()

    def main() -> None:
        hp.launch(kernel, torch.zeros(1), tiling())

    hp.run(main, world_size=2, platform="A3", strict=False)
    handles, last_error = got[0]
    assert handles == [*range(63), -1]
    assert "BatchWrite: the domain already used its 63 handles" in last_error


def test_an_hcomm_write_into_the_peers_buffer_of_another_communicator_is_refused() -> None:
    """The channel's peer, its In window, but of another communicator: not its HCCL buffer."""
    from test_hcomm import N, channels

    def main() -> list[Any]:
        me = hp.get_rank()
        handle, _ = channels()
        grp = hp.new_group([0, 1])
        other = hp.HcclChannelAcquire(grp, hp.COMM_ENGINE_AIV, [hp.HcclChannelDesc(1 - me)], 1)
        foreign = hp.HcclChannelGetHcclBuffer(grp, other[0])[0]
        result: list[Any] = []

        def kernel(src: Any) -> None:
            if me == 0:
                hcomm = hp.Hcomm()
                hcomm.Init(torch.zeros(512, dtype=torch.uint8), 512)
                result.append(hcomm.WriteNbi(handle[1], foreign + 512, src, N))

        hp.launch(kernel, torch.zeros(N, dtype=torch.uint8), block_dim=1, kernel_type="aiv")
        return result

    with pytest.raises(hp.WorldError) as info:
        hp.run(main, world_size=2, platform="A3")
    assert (
        "is not in the HCCL buffer of the channel's peer, rank 1 (its In window of communicator "
        "hccl_world_group" in str(info.value)
    )
    assert "WindowsIn of rank 1 in group_0_1" in str(info.value)


def test_an_hcomm_write_one_byte_past_the_peers_buffer_is_refused() -> None:
    from test_hcomm import N, channels

    from hccl_py.core.platform import get_platform
    from hccl_py.server.windows import window_bytes

    size = window_bytes(1, get_platform("A3").window_factor)

    def main() -> None:
        handle, buffers = channels()

        def kernel(src: Any) -> None:
            if hp.get_rank() == 0:
                hcomm = hp.Hcomm()
                hcomm.Init(torch.zeros(512, dtype=torch.uint8), 512)
                hcomm.WriteNbi(handle[1], buffers[1] + (size - N + 1), src, N)

        hp.launch(kernel, torch.zeros(N, dtype=torch.uint8), block_dim=1, kernel_type="aiv")

    with pytest.raises(hp.WorldError) as info:
        hp.run(main, world_size=2, platform="A3", buffsize_mb=1)
    assert f"dst: bytes [{size - N + 1}, {size + 1}) fall outside rank 1's HCCL buffer" in str(
        info.value
    )


def test_a_window_of_one_mb_past_the_largest_is_refused() -> None:
    from hccl_py.server.windows import MAX_BUFFSIZE_MB, checked_buffsize

    assert checked_buffsize(MAX_BUFFSIZE_MB) == MAX_BUFFSIZE_MB
    with pytest.raises(ValueError, match=r"in 1\.\.16384, not True$"):
        checked_buffsize(True)  # a bool is no number of MB, though True == 1
    with pytest.raises(ValueError) as exc:
        checked_buffsize(MAX_BUFFSIZE_MB + 1)
    assert str(exc.value) == (
        f"buffsize_mb must be a whole number of MB in 1..{MAX_BUFFSIZE_MB}, not "
        f"{MAX_BUFFSIZE_MB + 1}"
    )


def test_an_a2_item_for_remote_rank_rank_dim_is_refused() -> None:
    """remoteRankId must be below rankDim: rankDim itself is no rank (before a check, an
    IndexError of the rank list)."""
    from test_windows import FP32, a2_items, client, run_kernel

    def kernel(out: Any, tilingGM: Any) -> None:
        h = client(tilingGM)
        me, dim = h.GetRankId(), h.GetRankDim()
        local = h.GetWindowsOutAddr(me)
        info = local + 4096
        row = (int(local), int(h.GetWindowsInAddr(1 - me)), 2, int(FP32), dim)
        hp.gm_tensor(info, torch.uint8, 32)[:] = a2_items([row])
        h.BatchWrite[True](info, 1)
        h.Finalize()

    with pytest.raises(hp.WorldError) as info:
        run_kernel(kernel, n=2, platform="A2", ranks_per_server=1)
    assert "item 0: remoteRankId 2 is not a rank of the domain (rankDim 2)" in str(info.value)


def test_a_second_ccu_finalize_is_not_the_ai_cpu_clients_finalize_again() -> None:
    """The AI CPU client's second Finalize waits for a server that stopped reading
    (hccl_aicpu_impl.h); the CCU client's resets nothing: it is a call after Finalize."""
    from test_alltoallv_write import CCU, WriteTiling, tiling

    def kernel(tilingGM: Any) -> None:
        h = hp.Hccl[CCU]()
        h.InitV2(hp.GetHcclContext(0), hp.GET_TILING_DATA_WITH_STRUCT(WriteTiling, tilingGM))
        h.SetCcTilingV2(hp.offsetof(WriteTiling, "write"))
        h.Finalize()
        h.Finalize()

    with pytest.raises(hp.WorldError) as info:
        hp.run(lambda: hp.launch(kernel, tiling()), world_size=2, platform="950")
    text = str(info.value)
    assert "Finalize: the Hccl object was finalized and cannot communicate again" in text
    assert "Finalize again on the sending core" not in text


def _peer_plain_gm_item(own_int_taken: bool) -> Any:
    """Rank 1 publishes int(out), its kernel argument's address, and raises a flag in rank 0's
    window; rank 0 sends x to that address in an A3 BatchWrite item."""
    from test_windows import a3_items, client, tiling, wait_flag

    published: dict = {}

    def kernel(x: Any, out: Any, tilingGM: Any) -> None:
        h = client(tilingGM)
        me, flag = h.GetRankId(), h.GetWindowsInAddr(0)
        if me == 1:
            published["out"] = int(out)
            hp.gm_tensor(flag, torch.int32, 1)[0] = 1
        else:
            wait_flag(flag, 1)
            if own_int_taken:
                assert int(out) == published["out"]  # each rank numbers its own buffers
            stage = h.GetWindowsOutAddr(me)
            hp.gm_tensor(stage + 1024, torch.uint8, 64)[:] = a3_items(
                [(int(x), published["out"], 16)]
            )
            assert h.BatchWrite[True](stage + 1024, 1, 0) == 0
        h.Finalize()

    def main() -> list[int]:
        x, out = torch.arange(16, dtype=torch.uint8) + 100, torch.zeros(16, dtype=torch.uint8)
        hp.launch(kernel, x, out, tiling())
        return out.tolist()

    return hp.run(main, world_size=2, platform="A3")


def test_an_a3_item_with_a_peers_plain_gm_address_names_this_ranks_gm() -> None:
    """An item's address is read in the calling rank's address space: a peer's int(outputGM)
    names this rank's buffer of that number (here its own out), or no buffer at all. Until
    2026-12-01 _check_destination also refused a plain-GM destination of another rank, which
    no integer address can name (a mutation pass found that removing it changed nothing), and
    docs/windows.md said that such an item fails the call."""
    assert _peer_plain_gm_item(own_int_taken=True) == [list(range(100, 116)), [0] * 16]
    with pytest.raises(hp.WorldError) as info:
        _peer_plain_gm_item(own_int_taken=False)
    assert "points into no GM allocation or window this rank knows" in str(info.value)
    assert isinstance(info.value.failures[0], hp.HcclBoundsError)
