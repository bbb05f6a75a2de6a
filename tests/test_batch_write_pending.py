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
from test_windows import FLAG, a2_items, a3_items, client, run_kernel, wait_flag

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
