"""The window race check around aten: ``tolist()``, ``numpy()`` and ``np.asarray``.

These copy data out of a tensor (or share it) without an aten operator, so the
dispatch mode alone does not see them. A flag polled through them must order
the reads after it like any other poll (no false report), an early read
through them must be reported, a flag set through ``t.numpy()[0] = 1`` must
order the data before it, and while a rank holds a numpy view (through which
it may poll unseen) its findings are only warnings.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from hccl_py.backends.emu import wait_until
from test_window_races import M, at, early_text, race_of
from test_windows import FLAG, client, run_kernel

import hccl_py as hp
from hccl_py.core.current import RunnerLocal

#: Every test here runs on thread and on greenlet runners (tests/conftest.py).
pytestmark = pytest.mark.runner_kinds

#: Ways to read a window tensor outside aten, each giving a numpy array (a copy).
HOST_READS: dict[str, Callable[[torch.Tensor], np.ndarray]] = {
    "tolist": lambda t: np.array(t.tolist(), dtype=np.float64),  # read-tolist
    "numpy": lambda t: t.numpy().copy(),  # read-numpy
    "asarray": lambda t: np.asarray(t).copy(),  # read-asarray
}


def here(marker: str, function: str = "kernel") -> str:
    """``file:line (function)`` of the line of this file that carries ``# <marker>``."""
    return at(marker, function, Path(__file__))


def send_then_flag_kernel(
    poll: Callable[[hp.GmAddr], int], start: Callable[[hp.GmAddr], None] = lambda flag: None
):
    """Each rank sends M floats and a flag to the next; it polls its own flag with ``poll``.

    ``start(flag)`` runs first, with the address of the rank's own flag.
    """

    def kernel(out, tilingGM):
        h = client(tilingGM)
        me, dim = h.GetRankId(), h.GetRankDim()
        peer = (me + 1) % dim
        start(h.GetWindowsInAddr(me) + FLAG)
        hp.gm_tensor(h.GetWindowsInAddr(peer), torch.float32, M)[:] = 1.0 + me  # send
        hp.gm_tensor(h.GetWindowsInAddr(peer) + FLAG, torch.int32, 1)[0] = 1
        while poll(h.GetWindowsInAddr(me) + FLAG) != 1:
            pass
        got = hp.gm_tensor(h.GetWindowsInAddr(me), torch.float32, M)
        hp.gm_tensor(out, torch.float32, M)[:] = got  # receive
        h.Finalize()

    return kernel


def expected(n: int) -> np.ndarray:
    """What :func:`send_then_flag_kernel` leaves in every rank's ``out``."""
    return np.array([[1.0 + (me - 1) % n] * M for me in range(n)])


@pytest.mark.parametrize("how", sorted(HOST_READS))
def test_a_flag_polled_outside_aten_orders_the_data(how: str) -> None:
    read = HOST_READS[how]
    kernel = send_then_flag_kernel(lambda addr: int(read(hp.gm_tensor(addr, torch.int32, 1))[0]))
    for schedule in ("eager", "late"):
        got = run_kernel(kernel, n=4, out_len=M, poison=True, schedule=schedule)
        np.testing.assert_array_equal(np.array(got), expected(4))


@pytest.mark.parametrize("how", sorted(HOST_READS))
def test_an_early_read_outside_aten_sees_0xff_and_is_reported(how: str) -> None:
    written, seen = threading.Event(), {}

    def kernel(out, tilingGM):
        h = client(tilingGM)
        data = hp.gm_tensor(h.GetWindowsInAddr(0), torch.float32, M)
        if h.GetRankId() == 1:
            data[:] = 5.0  # host-write
            written.set()
        else:
            wait_until(written.is_set)
            seen["got"] = HOST_READS[how](data)
        h.Finalize()

    with pytest.raises(hp.WorldError) as info:
        run_kernel(kernel, n=2, out_len=1, poison=True)
    want = early_text(0, 1, 0, 4 * M, here(f"read-{how}", "<lambda>"), here("host-write"))
    assert race_of(info, 0).reason == want
    assert np.isnan(seen["got"]).all()


def test_a_flag_set_through_a_numpy_view_orders_the_data_before_it() -> None:
    def kernel(out, tilingGM):
        h = client(tilingGM)
        me, dim = h.GetRankId(), h.GetRankDim()
        peer = (me + 1) % dim
        hp.gm_tensor(h.GetWindowsInAddr(peer), torch.float32, M)[:] = 1.0 + me
        hp.gm_tensor(h.GetWindowsInAddr(peer) + FLAG, torch.int32, 1).numpy()[0] = 1
        while int(hp.gm_tensor(h.GetWindowsInAddr(me) + FLAG, torch.int32, 1)[0]) != 1:
            pass
        got = hp.gm_tensor(h.GetWindowsInAddr(me), torch.float32, M)
        hp.gm_tensor(out, torch.float32, M)[:] = got
        h.Finalize()

    for schedule in ("eager", "late"):
        got = run_kernel(kernel, n=4, out_len=M, poison=True, schedule=schedule)
        np.testing.assert_array_equal(np.array(got), expected(4))


def test_data_written_through_a_numpy_view_is_checked_when_the_view_dies() -> None:
    written = threading.Event()

    def kernel(out, tilingGM):
        h = client(tilingGM)
        if h.GetRankId() == 1:
            rows = hp.gm_tensor(h.GetWindowsInAddr(0), torch.float32, 2 * M).view(M, 2)
            column = rows[:, 1].numpy()  # numpy-write
            column[:] = 7.0
            del column
            written.set()
        else:
            wait_until(written.is_set)
            got = hp.gm_tensor(h.GetWindowsInAddr(0), torch.float32, 2 * M)
            hp.gm_tensor(out, torch.float32, 2 * M)[:] = got  # numpy-read
        h.Finalize()

    with pytest.raises(hp.WorldError) as info:
        run_kernel(kernel, n=2, out_len=2 * M, poison=True)
    wrote = here("numpy-write") + " (through a numpy view)"
    # every other float of the column was written: the report spans the first to the last
    assert race_of(info, 0).reason == early_text(0, 1, 4, 8 * M, here("numpy-read"), wrote)


def test_a_rank_holding_a_numpy_view_gets_warnings_not_errors() -> None:
    held = RunnerLocal()  # each rank's own (its kernel is a runner of its own)
    holding = []  # no flag is written before both views exist

    def start(flag: hp.GmAddr) -> None:
        held.flag = hp.gm_tensor(flag, torch.int32, 1).numpy()  # held-view
        holding.append(flag)
        wait_until(lambda: len(holding) == 2, "both ranks hold their view")

    def poll(flag: hp.GmAddr) -> int:
        hp.gm_tensor(flag, torch.int32, 1)  # a view again: an hccl_py call the scheduler sees
        return int(held.flag[0])

    kernel = send_then_flag_kernel(poll, start)
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        result = run_kernel(kernel, n=2, out_len=M, poison=True)
    np.testing.assert_array_equal(np.array(result), expected(2))  # and no 0xFF
    for me in range(2):
        (warning,) = result.warnings[me]
        assert warning.kind == "window-race"
        assert warning.reason == (
            f"window race check: cannot tell whether rank {me}'s read of bytes [0, {4 * M}) of "
            f"WindowsIn of rank {me} at {here('receive')} is ordered with rank {1 - me}'s write "
            f"at {here('send')}: rank {me} holds a numpy view of window bytes taken at "
            f"{here('held-view', 'start')}, and what it reads through that view (a flag it "
            "polls) is not seen; read flags through torch (t[0], t.item(), t.tolist()) to have "
            "them checked"
        )
