"""The race checks' torch modes are on a core's mode stacks only while they can see something.

The collective buffer check (always) and the window race check (``poison=True``)
watch a kernel's torch operations through a dispatch mode and, under poison, a
function mode (issue 25, item 7: they cost every torch operation a Python
call). They can only report an access while the rank has a committed round that
no Wait ordered yet, or once a window is mapped: otherwise they are off the
stacks. What they report is unchanged (tests/test_buffer_races.py,
tests/test_window_races.py); these tests pin when they are on, and the cases
where another runner changes what a core can see.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
import torch
from hccl_py.backends.emu import wait_until
from hccl_py.backends.emu.flags import FlagPolls
from hccl_py.backends.emu.host_reads import HostReads
from hccl_py.backends.emu.modes import KernelMode
from hccl_py.backends.emu.watch import WindowWatch
from test_buffer_races import Kernel, N, all_gather, race, run
from test_sanitizer import comm
from test_window_races import M, at, early_text, race_of
from test_windows import client, run_kernel

import hccl_py as hp

#: Every test here runs on thread and on greenlet runners (tests/conftest.py).
pytestmark = pytest.mark.runner_kinds

HERE = Path(__file__)
Modes = tuple[list[type], list[type]]


def modes() -> Modes:
    """The classes of the calling runner's torch dispatch and function modes, bottom first."""
    dispatch = torch._C._len_torch_dispatch_stack()
    function = torch._C._len_torch_function_stack()
    return (
        [type(torch._C._get_dispatch_stack_at(i)) for i in range(dispatch)],
        [type(torch._C._get_function_stack_at(i)) for i in range(function)],
    )


def stages(**options: Any) -> list[dict[str, Modes]]:
    """Each rank's modes at the start of an AllGather kernel, with its round pending, after Wait."""
    seen: list[dict[str, Modes]] = [{}, {}]

    def kernel(xGM: Any, yGM: Any, tilingGM: Any) -> None:
        mine = seen[hp.get_rank()]
        mine["start"] = modes()
        h = comm(tilingGM)
        handle = all_gather(h, xGM, yGM)
        mine["pending"] = modes()
        h.Wait(handle)
        mine["waited"] = modes()
        h.Finalize()

    run(kernel, **options)
    return seen


def test_a_kernel_without_windows_is_watched_only_while_its_round_is_pending() -> None:
    off: Modes = ([], [])
    for options, on in (
        ({"poison": True}, ([WindowWatch], [HostReads])),
        ({"explore": 2}, ([WindowWatch], [HostReads])),  # explore turns poison on
        ({}, ([WindowWatch], [])),  # the buffer check only
    ):
        for rank, seen in enumerate(stages(**options)):
            assert seen == {"start": off, "pending": on, "waited": off}, (options, rank)


def test_a_pending_round_is_still_checked_inside_a_mode_of_the_kernel() -> None:
    """The watch goes in below the kernel's own mode, which still leaves the stack itself."""

    class Seen(KernelMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
            return func(*args, **(kwargs or {}))

    def kernel_of(racy: bool, stacks: list[Modes]) -> Kernel:
        def kernel(xGM: Any, yGM: Any, tilingGM: Any) -> None:
            h = comm(tilingGM)
            with Seen():
                handle = all_gather(h, xGM, yGM)
                stacks.append(modes())
                if racy:
                    hp.gm_tensor(yGM, torch.float32, 2 * N)[N:].tolist()  # read-in-mode
            stacks.append(modes())
            h.Wait(handle)
            h.Finalize()

        return kernel

    stacks: list[Modes] = []
    run(kernel_of(False, stacks), poison=True)
    assert stacks == [([WindowWatch, Seen], [HostReads]), ([WindowWatch], [HostReads])] * 2
    err = race(kernel_of(True, []), poison=True)
    assert f"reads bytes [32, 64) of yGM at {at('read-in-mode', 'kernel', HERE)}" in str(err)


def test_a_core_that_never_calls_hccl_py_sees_the_round_its_sibling_committed() -> None:
    """Core 1 reads through a view it took before core 0 committed, with no hccl_py call since.

    Its watch catches up when it gets the baton back (here after a wait of the test).
    """
    started = [threading.Event(), threading.Event()]
    committed = [threading.Event(), threading.Event()]

    def kernel(xGM: Any, yGM: Any, tilingGM: Any) -> None:
        rank = hp.get_rank()
        if hp.GetBlockIdx() == 1:
            received = hp.gm_tensor(yGM, torch.float32, 2 * N)  # a view taken early
            # nothing pending yet, but a kernel of two cores watches its GM arguments for flag
            # polls: one dispatch mode, the core's watch carrying the polls
            assert modes() == ([WindowWatch], [])
            assert isinstance(torch._C._get_dispatch_stack_at(0).polls, FlagPolls)
            started[rank].set()
            wait_until(committed[rank].is_set)
            received.sum()  # sibling-read
            return
        wait_until(started[rank].is_set)
        h = comm(tilingGM)
        all_gather(h, xGM, yGM)
        committed[rank].set()
        wait_until(lambda: False, "core 1 read")  # the read ends the world first

    with pytest.raises(hp.WorldError) as info:
        run(kernel, block_dim=2)
    err = info.value.failures[0]
    assert isinstance(err, hp.HcclRaceError), err
    assert f"reads bytes [0, 64) of yGM at {at('sibling-read', 'kernel', HERE)}" in str(err)


def test_a_kernel_that_asks_for_a_window_is_watched_from_then_on() -> None:
    written = threading.Event()
    stacks: list[Modes] = [([], []), ([], [])]

    def kernel(out: Any, tilingGM: Any) -> None:
        h = client(tilingGM)
        me = h.GetRankId()
        win = h.GetWindowsInAddr(0)  # mapped at its first touch (a gm_tensor)
        if me == 1:
            hp.gm_tensor(win, torch.float32, M)[:] = 1.0  # window-write
            stacks[me] = modes()
            written.set()
        else:
            wait_until(written.is_set)  # rank 1 mapped it meanwhile
            stacks[me] = modes()
            got = hp.gm_tensor(win, torch.float32, M).clone()  # window-read
            hp.gm_tensor(out, torch.float32, M)[:] = got
        h.Finalize()

    with pytest.raises(hp.WorldError) as info:
        run_kernel(kernel, n=2, out_len=M, poison=True)
    err = race_of(info, 0)
    where = {k: at(k, "kernel", HERE) for k in ("window-read", "window-write")}
    assert err.reason == early_text(0, 1, 0, 4 * M, where["window-read"], where["window-write"])
    # the flag polls ride on the core's watch: one trip through Python per operation, the polls
    # looked at after the race check's (a poll that blocks holds none of its locks)
    assert stacks == [([WindowWatch], [HostReads])] * 2


@pytest.mark.parametrize("mode", [WindowWatch, FlagPolls])
def test_kernel_modes_handle_operations_without_dynamo(mode: type) -> None:
    """torch would wrap the handler in dynamo's disable (importing torch._dynamo, about 2
    CPU-seconds, at a run's first operation, and toggling its frame hook on every one)."""
    handler = mode.__dict__["__torch_dispatch__"]
    assert not hasattr(handler, "__wrapped__"), handler
    assert handler.__qualname__ == f"{mode.__name__}.__torch_dispatch__"
