"""Flags packed into the copy of their data (the 950 MTE combine's 512-byte blocks) under poison=True.

ops-transformer's MoeDistributeCombineV2A5Mte sends each row as 512-byte blocks of 480 bytes of
data and 32 bytes of 1.0f, in one copy, and polls a token's flags of every block of every slot
with one strided read (docs/windows.md "Races", docs/notes/mc2-kernels.md section 35). A look
that sees a copy landed orders that copy; a copy the reader did not see landed stays unordered.
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
import torch
from hccl_py.backends.emu import wait_until
from test_window_races import at, early_text, race_of
from test_windows import client, run_kernel

import hccl_py as hp

pytestmark = [pytest.mark.runner_kinds, pytest.mark.spread]

HERE = Path(__file__)
BLOCK, DATA = 128, 120  # floats of a 512-byte block and of its 480 data bytes


def send(win: hp.GmAddr, slot: int, value: float) -> None:
    """One copy: ``value`` in the data bytes of ``slot``'s block, 1.0f in its flag bytes."""
    packed = torch.ones(BLOCK)
    packed[:DATA] = value
    hp.gm_tensor(win + 4 * BLOCK * slot, torch.float32, BLOCK)[:] = packed  # packed-write


def blocks(win: hp.GmAddr, slots: int) -> torch.Tensor:
    return hp.gm_tensor(win, torch.float32, slots * BLOCK).view(slots, BLOCK)


def test_one_strided_poll_of_the_packed_flags_orders_every_copy_it_saw_landed() -> None:
    """Three slots (96 flag bytes: more than a flag poll), sent last to first (the kernel's
    permuted order): the second look at slot 0's flag acquires the earlier copies too, and must
    still count as the look that saw them land."""
    slots = 3
    written = threading.Event()

    def kernel(out, tilingGM):
        h = client(tilingGM)
        win = h.GetWindowsInAddr(0)
        if h.GetRankId() == 1:
            for slot in reversed(range(slots)):
                send(win, slot, slot + 1.0)
            written.set()
        else:
            wait_until(written.is_set)
            while not bool((blocks(win, slots)[:, DATA:].clone() == 1.0).all()):
                pass
            got = blocks(win, slots)[:, :DATA].reshape(-1)
            hp.gm_tensor(out, torch.float32, slots * DATA)[:] = got
        h.Finalize()

    got = run_kernel(kernel, n=2, out_len=slots * DATA, poison=True)
    np.testing.assert_array_equal(got[0], np.repeat([1.0, 2.0, 3.0], DATA))


def test_a_second_look_clears_a_copy_that_an_earlier_piece_already_ordered() -> None:
    """Two copies, the later one at the lower address: both read once (0xFF), then again."""
    m = 32
    written = threading.Event()

    def kernel(out, tilingGM):
        h = client(tilingGM)
        win = h.GetWindowsInAddr(0)
        if h.GetRankId() == 1:
            hp.gm_tensor(win + 4 * m, torch.float32, m)[:] = 2.0
            hp.gm_tensor(win, torch.float32, m)[:] = 1.0
            written.set()
        else:
            wait_until(written.is_set)
            while bool(hp.gm_tensor(win, torch.float32, 2 * m).clone().isnan().any()):
                pass
            hp.gm_tensor(out, torch.float32, 2 * m)[:] = hp.gm_tensor(win, torch.float32, 2 * m)
        h.Finalize()

    got = run_kernel(kernel, n=2, out_len=2 * m, poison=True)
    np.testing.assert_array_equal(got[0], [1.0] * m + [2.0] * m)


def test_the_data_of_a_copy_whose_flag_was_not_polled_is_still_reported() -> None:
    """Slot 0's flag is polled; slot 1, a later copy of the same sender, is read unpolled."""
    written = threading.Event()

    def kernel(out, tilingGM):
        h = client(tilingGM)
        win = h.GetWindowsInAddr(0)
        if h.GetRankId() == 1:
            send(win, 0, 1.0)
            send(win, 1, 2.0)
            written.set()
        else:
            wait_until(written.is_set)
            while not bool((blocks(win, 1)[:, DATA:].clone() == 1.0).all()):
                pass
            got = blocks(win, 2)[:, :DATA].clone()  # neighbour-read
            hp.gm_tensor(out, torch.float32, 2 * DATA)[:] = got.reshape(-1)
        h.Finalize()

    with pytest.raises(hp.WorldError) as info:
        run_kernel(kernel, n=2, out_len=2 * DATA, poison=True)
    read, wrote = at("neighbour-read", path=HERE), at("packed-write", "send", HERE)
    lo = 4 * BLOCK
    assert race_of(info, 0).reason == early_text(0, 1, lo, lo + 4 * DATA, read, wrote)
