"""ReadNbi into plain GM: an access of its destination before the channel's Drain is a race.

Rank 0 reads rank 1's data (in rank 1's HCCL buffer) into ``out``, a kernel argument
that is no window; rank 1 only provides the data. Every access that no Drain orders
raises ``HcclRaceError`` on every schedule, in the kernel (any core, a later launch)
and in the host code after the kernel (emu/posted.py, emu/host_watch.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from expect import expects_warning
from test_hcomm import DATA, N, channels, new_hcomm, source
from test_window_races import at

import hccl_py as hp

#: Every test here runs on thread and on greenlet runners (tests/conftest.py).
pytestmark = pytest.mark.runner_kinds

HERE = Path(__file__)
SCHEDULES = [{}, {"schedule": "late"}, {"seed": 1}, {"seed": 2}]
ROW = 64  # bytes of one ReadNbi


def read_kernel(handle, buffers, out, spare, mode: str) -> None:  # noqa: ANN001
    """Rank 0 reads the N data bytes of rank 1 into ``out`` in rows of ROW bytes.

    ``mode`` says what it does before (or instead of) the Drain: "drain" (nothing),
    "read" (reads a row), "write" (writes a row), "other-bytes" (writes ``spare`` and
    bytes of ``out`` beyond the reads), "uncommitted" (ReadNbi[False] + Commit, then
    reads), "no-drain" (nothing, and no Drain: the host reads next), "empty" (a
    0-byte read, then reads ``out``).
    """
    if hp.get_rank() != 0:
        return
    hcomm, ch = new_hcomm(), handle[1]
    if mode == "empty":
        assert hcomm.ReadNbi(ch, out, buffers[1] + DATA, 0) == hp.HCOMM_SUCCESS
        hp.gm_tensor(out, torch.uint8, N).sum()
        return
    for row in range(0, N, ROW):
        if mode == "uncommitted":
            assert hcomm.ReadNbi[False](ch, out + row, buffers[1] + DATA + row, ROW) == 0  # post
        else:
            assert hcomm.ReadNbi(ch, out + row, buffers[1] + DATA + row, ROW) == 0  # read-nbi
    if mode == "uncommitted":
        assert hcomm.Commit(ch) == hp.HCOMM_SUCCESS
    got = hp.gm_tensor(out, torch.uint8, N + 32)
    if mode in ("read", "uncommitted"):
        got[ROW : 2 * ROW].clone()  # early-read
    elif mode == "write":
        got[2 * ROW + 8] = 0  # early-write
    elif mode == "other-bytes":
        got[N:] = 9  # beyond the reads
        hp.gm_tensor(spare, torch.uint8, 8)[:] = 1
    if mode != "no-drain":
        assert hcomm.Drain(ch) == hp.HCOMM_SUCCESS
        got[:N].clone()  # after the drain: ordered


def read_into_gm(mode: str) -> list[int]:
    handle, buffers = channels()
    me = hp.get_rank()
    hp.gm_tensor(buffers[me] + DATA, torch.uint8, N)[:] = torch.from_numpy(source(me))
    hp.barrier()
    out = torch.zeros(N + 32, dtype=torch.uint8)
    spare = torch.zeros(8, dtype=torch.uint8)
    hp.launch(read_kernel, handle, buffers, out, spare, mode)
    return out[:N].tolist()


def race(info: pytest.ExceptionInfo) -> str:
    err = info.value.failures[0]
    assert isinstance(err, hp.HcclRaceError), err
    assert err.rank == 0 and err.op == "ReadNbi"
    return str(err)


@pytest.mark.parametrize("kw", SCHEDULES, ids=str)
def test_a_read_of_the_destination_before_drain_is_a_race_on_every_schedule(
    kw: dict[str, Any],
) -> None:
    with pytest.raises(hp.WorldError) as info:
        hp.run(read_into_gm, world_size=2, platform="A3", args=("read",), **kw)
    text = race(info)
    assert "rank 0 reads bytes [64, 128) of out" in text
    assert f"at {at('early-read', 'read_kernel', HERE)} before the Drain of channel 0x" in text
    assert f"the ReadNbi at {at('read-nbi', 'read_kernel', HERE)} writes these bytes" in text
    assert "the read may see the old bytes or the new ones" in text


@pytest.mark.parametrize("kw", SCHEDULES, ids=str)
def test_a_write_of_the_destination_before_drain_is_a_race(kw: dict[str, Any]) -> None:
    with pytest.raises(hp.WorldError) as info:
        hp.run(read_into_gm, world_size=2, platform="A3", args=("write",), **kw)
    text = race(info)
    assert "rank 0 writes bytes [136, 137) of out" in text
    assert f"at {at('early-write', 'read_kernel', HERE)}" in text
    assert "the landing may overwrite that write, or not" in text


def test_a_posted_read_is_named_by_its_own_line_not_the_commit() -> None:
    with pytest.raises(hp.WorldError) as info:
        hp.run(read_into_gm, world_size=2, platform="A3", args=("uncommitted",))
    assert f"the ReadNbi at {at('post', 'read_kernel', HERE)} writes" in race(info)


def unrung_read(access: str) -> list[int]:
    """Rank 0 posts ReadNbi[False] that no doorbell rings (in "second", a row that a Commit rang,
    then a row that none rang, from one line); ``access``: who touches the destination before the
    next launch's Commit and Drain: "kernel-read" (the posting core), "host-read", "host-write",
    "second" (the host reads the second row), "nothing"."""
    handle, buffers = channels()
    me = hp.get_rank()
    hp.gm_tensor(buffers[me] + DATA, torch.uint8, N)[:] = torch.from_numpy(source(me))
    hp.barrier()
    out = torch.zeros(N, dtype=torch.uint8)

    def post(out) -> None:  # noqa: ANN001
        if me != 0:
            return
        hcomm, ch = new_hcomm(), handle[1]
        size = ROW if access == "second" else N
        for row in range(0, 2 * size if access == "second" else N, size):
            assert hcomm.ReadNbi[False](ch, out + row, buffers[1] + DATA + row, size) == 0  # unrung
            if access == "second" and row == 0:
                assert hcomm.Commit(ch) == hp.HCOMM_SUCCESS
        if access == "kernel-read":
            hp.gm_tensor(out, torch.uint8, N).clone()  # unrung-kernel-read

    def ring() -> None:
        if me == 0:
            hcomm = new_hcomm()
            assert hcomm.Commit(handle[1]) == 0 and hcomm.Drain(handle[1]) == 0

    hp.launch(post, out)
    if access == "host-read":
        out.double()  # unrung-host-read
    elif access == "host-write":
        out[3] = 1  # unrung-host-write
    elif access == "second":
        out[ROW : 2 * ROW].double()  # unrung-second-read
    hp.launch(ring)
    return out.tolist()


@expects_warning("hcomm-uncommitted")
@pytest.mark.parametrize("kw", [{}, {"schedule": "late"}, {"seed": 1}], ids=str)
def test_an_access_of_an_unrung_reads_destination_says_it_has_not_landed(
    kw: dict[str, Any],
) -> None:
    """Until 2026-12-01 the report of an access of a ReadNbi[False]'s destination that no Commit
    rang said "the read may see the old bytes or the new ones": nothing lands such a request until
    a doorbell rings the channel. Still a race (a later Commit lands it over what was read or
    written), with a true text."""
    unrung = (
        "writes these bytes when it lands, but it was posted with commit=False and no Commit of the "
        "channel rang its doorbell{}, so it has not landed: {}. Call Commit(channel), then "
        "Drain(channel), before accessing them, or post it with commit=True"
    )
    old = "the read sees the old bytes{}, and a later Commit lands it over them"
    cases = [
        ("host-read", "reads bytes [0, 256)", "unrung_read", unrung.format("", old.format(""))),
        (
            "host-write",
            "writes bytes [3, 4)",
            "unrung_read",
            unrung.format("", "a later Commit of the channel lands it over this write"),
        ),
        (
            "kernel-read",
            "reads bytes [0, 256)",
            "post",
            unrung.format(
                " yet", old.format(" unless another core's Commit of the channel comes first")
            ),
        ),
        ("second", "reads bytes [64, 128)", "unrung_read", unrung.format("", old.format(""))),
    ]
    for access, verb, function, says in cases:
        with pytest.raises(hp.WorldError) as info:
            hp.run(unrung_read, world_size=2, platform="A3", args=(access,), **kw)
        text = race(info)
        marker = "unrung-second-read" if access == "second" else f"unrung-{access}"
        assert f"rank 0 {verb} of out at {at(marker, function, HERE)} before the Commit" in text
        assert f"the ReadNbi at {at('unrung', 'post', HERE)} {says}" in text, text
        assert "new ones" not in text
    got = hp.run(unrung_read, world_size=2, platform="A3", args=("nothing",), **kw)
    assert got[0] == source(1).tolist()


@pytest.mark.parametrize("mode", ["drain", "other-bytes", "empty"])
@pytest.mark.parametrize("kw", SCHEDULES, ids=str)
def test_ordered_or_other_bytes_are_no_race(mode: str, kw: dict[str, Any]) -> None:
    """After the Drain, bytes no read writes (of the same tensor too), a 0-byte read."""
    got = hp.run(read_into_gm, world_size=2, platform="A3", args=(mode,), **kw)
    if mode != "empty":
        assert got[0] == source(1).tolist()


def fetch_then_drain(host: str) -> list[int]:
    """EngramFetch's pattern: one launch reads, the next drains. ``host``: what the host
    (or a kernel between the two) does with ``out`` before the drain launch."""
    handle, buffers = channels()
    me = hp.get_rank()
    hp.gm_tensor(buffers[me] + DATA, torch.uint8, N)[:] = torch.from_numpy(source(me))
    hp.barrier()
    out = torch.zeros(N + 32, dtype=torch.uint8)
    modes: list[int] = []

    def fetch(out) -> None:  # noqa: ANN001
        if me == 0:
            hcomm = new_hcomm()
            assert hcomm.ReadNbi(handle[1], out, buffers[1] + DATA, N) == 0  # fetch-read

    def touch(out) -> None:  # noqa: ANN001
        hp.gm_tensor(out, torch.uint8, N)[3] = 1  # kernel-touch

    def drain() -> None:
        if me == 0:
            assert new_hcomm().Drain(handle[1]) == hp.HCOMM_SUCCESS

    hp.launch(fetch, out)
    modes.append(torch._C._len_torch_dispatch_stack())
    if host == "read":
        out.double()  # host-read
    elif host == "write":
        out[N - 1] = 0  # host-write
    elif host == "kernel":
        hp.launch(touch, out)
    elif host == "other-bytes":
        out[N:] += 1
    hp.launch(drain)
    modes.append(torch._C._len_torch_dispatch_stack())
    return [*modes, *out[:N].tolist()]


@pytest.mark.parametrize("kw", SCHEDULES, ids=str)
def test_reads_in_flight_after_the_kernel_are_checked_until_the_drain_launch(
    kw: dict[str, Any],
) -> None:
    """The host may not touch them, nor a later kernel; the next launch's Drain orders them."""
    for host, line, function, verb in [
        ("read", "host-read", "fetch_then_drain", "reads bytes [0, 256)"),
        ("write", "host-write", "fetch_then_drain", "writes bytes [255, 256)"),
        ("kernel", "kernel-touch", "touch", "writes bytes [3, 4)"),
    ]:
        with pytest.raises(hp.WorldError) as info:
            hp.run(fetch_then_drain, world_size=2, platform="A3", args=(host,), **kw)
        text = race(info)
        assert f"rank 0 {verb} of out at {at(line, function, HERE)}" in text
        assert f"the ReadNbi at {at('fetch-read', 'fetch', HERE)}" in text
    for host in ("nothing", "other-bytes"):
        got = hp.run(fetch_then_drain, world_size=2, platform="A3", args=(host,), **kw)
        assert got[0][2:] == source(1).tolist()


def test_the_host_is_watched_only_while_reads_are_in_flight() -> None:
    """The host's mode is on the stack between the fetch and the drain launches only; rank 1,
    which posts nothing, never has one."""
    got = hp.run(fetch_then_drain, world_size=2, platform="A3", args=("nothing",))
    assert [got[0][:2], got[1][:2]] == [[1, 0], [0, 0]]


def never_drained() -> list[int]:
    """A read that no Drain orders and nobody touches: no finding (only an access is one)."""
    handle, buffers = channels()
    out = torch.zeros(N, dtype=torch.uint8)

    def fetch(out) -> None:  # noqa: ANN001
        if hp.get_rank() == 0:
            assert new_hcomm().ReadNbi(handle[1], out, buffers[1] + DATA, N) == 0

    hp.launch(fetch, out)
    return [torch.ones(2).sum().item()]  # the host goes on with other tensors


def test_a_read_never_drained_and_never_touched_is_no_finding() -> None:
    assert hp.run(never_drained, world_size=2, platform="A3") == [[2.0], [2.0]]


def view_before_drain(commit: bool = True) -> list[int]:
    """Rank 0 takes a numpy view of the destination before the Drain and reads it after (with
    ``commit`` off, the read is posted with commit=False and rung by a Commit before the Drain)."""
    handle, buffers = channels()
    me = hp.get_rank()
    hp.gm_tensor(buffers[me] + DATA, torch.uint8, N)[:] = torch.from_numpy(source(me))
    hp.barrier()
    out = torch.zeros(N, dtype=torch.uint8)
    seen: list[int] = []

    def kernel(out) -> None:  # noqa: ANN001
        if me == 0:
            hcomm = new_hcomm()
            assert hcomm.ReadNbi[commit](handle[1], out, buffers[1] + DATA, N) == 0  # view-read
            view = hp.gm_tensor(out, torch.uint8, N).numpy()  # early-view
            if not commit:
                assert hcomm.Commit(handle[1]) == hp.HCOMM_SUCCESS
            assert hcomm.Drain(handle[1]) == hp.HCOMM_SUCCESS
            seen.extend(view.tolist())  # after the Drain: correct, not seen by the check

    hp.launch(kernel, out)
    return seen


@expects_warning("buffer-race")
def test_a_numpy_view_before_drain_is_a_warning_under_poison() -> None:
    """As for a collective round: reads through the view are not seen, so no error."""
    result = hp.run(view_before_drain, world_size=2, platform="A3", poison=True)
    assert result[0] == source(1).tolist()
    (warning,) = result.warnings[0]
    assert warning.kind == "buffer-race" and warning.op == "ReadNbi"
    text = str(warning)
    assert f"numpy view taken at {at('early-view', 'kernel', HERE)}" in text
    assert "come after the ReadNbi on channel 0x" in text
    assert f"at {at('view-read', 'kernel', HERE)}" in text
    assert "take the view after the Drain of the channel" in text
    assert 1 not in result.warnings


@expects_warning("buffer-race")
def test_a_numpy_view_of_an_unrung_read_says_a_commit_orders_it_too() -> None:
    """Taken while no doorbell rang the read, the view's warning names the Commit as well: a
    Drain alone leaves an unrung read queued (until 2026-12-01 it named only the Drain)."""
    result = hp.run(view_before_drain, args=(False,), world_size=2, platform="A3", poison=True)
    assert result[0] == source(1).tolist()
    (warning,) = result.warnings[0]
    assert "take the view after the Commit and Drain of the channel" in str(warning)
