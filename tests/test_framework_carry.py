"""all_gather_into_tensor carried by its argument exchange (hccl_py/framework/_carry.py): the
results of the op's own task, one process-group call instead of two."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from hccl_py.backends.emu.world import EmuWorld
from pg_counter import count_calls

import hccl_py as hp
from hccl_py.kernel.context import current_rank_context
from hccl_py.server.protocol import MAX_EXCHANGE_BYTES

TIMEOUT = 30.0
KIB = 1024


def _input(rank: int, nbytes: int, step: int) -> torch.Tensor:
    """A float32 input of ``nbytes`` bytes that no other rank or step shares."""
    return torch.arange(nbytes // 4, dtype=torch.float32) + 1e6 * rank + 1e3 * step


def _want(n: int, nbytes: int, step: int) -> np.ndarray:
    """numpy's concatenation of every rank's :func:`_input`."""
    return np.concatenate([_input(r, nbytes, step).numpy() for r in range(n)])


#: (call, bytes per rank, which ranks call it asynchronously, calls expected on every rank)
SEQUENCE = [
    ("all_gather", 1 * KIB, (), 1),  # fits in the 4 KiB rows
    ("all_gather", 64 * KIB, (), 2),  # does not: the exchange, then the op's call
    ("all_gather", 64 * KIB, (), 1),  # the rows are now as wide as the op asked
    ("all_gather", 64 * KIB, (0, 1), 2),  # asynchronous calls keep their task ...
    ("all_gather", 64 * KIB, (), 2),  # ... and ask for no room
    ("all_gather", 64 * KIB, (), 1),
    ("all_reduce", 64 * KIB, (), None),  # another op's exchange makes the rows narrow again
    ("all_gather", 64 * KIB, (), 2),
    ("all_gather", 64 * KIB, (0,), 2),  # rank 1's data rode along, rank 0's did not: no carry
    ("all_gather", 2048 * KIB, (), 2),  # more than an exchange carries
    ("all_gather", 2048 * KIB, (), 2),
]


def calls_in_a_row() -> list[tuple[int, torch.Tensor]]:
    """Each call of :data:`SEQUENCE`: the process-group calls it made here, and its output."""
    rank, n = hp.get_rank(), hp.get_world_size()
    calls = count_calls()
    out = []
    for step, (name, nbytes, asynchronous, _) in enumerate(SEQUENCE):
        x = _input(rank, nbytes, step)
        calls.clear()
        if name == "all_reduce":
            hp.all_reduce(x)
            y = x
        else:
            y = torch.full((n * x.numel(),), float("nan"))
            work = hp.all_gather_into_tensor(y, x, async_op=rank in asynchronous)
            if work is not None:
                work.wait()
        out.append((len(calls), y))
    return out


def test_an_all_gather_rides_in_its_argument_exchange() -> None:
    """On gloo: one process-group call per all_gather_into_tensor where the input fits in the
    exchange's rows, from the second call on for inputs wider than the first rows; numpy's
    results either way."""
    results = hp.run(calls_in_a_row, world_size=2, backend="gloo", timeout=TIMEOUT)
    for rank_results in results:
        for step, ((name, nbytes, _, want_calls), (calls, y)) in enumerate(
            zip(SEQUENCE, rank_results, strict=True)
        ):
            if name == "all_reduce":
                want = sum(_input(r, nbytes, step).numpy() for r in range(2))
            else:
                assert calls == want_calls, (step, calls)
                want = _want(2, nbytes, step)
            np.testing.assert_array_equal(y.numpy(), want, err_msg=f"step {step}")


def wide_rows_then_different_shapes() -> None:
    """Two 64 KiB calls (the rows are now wide), then the ranks disagree on the input's shape:
    rank 0's input would ride along, rank 1's (twice as large) would not."""
    rank = hp.get_rank()
    for step in range(2):
        hp.all_gather_into_tensor(torch.empty(2 * 16 * KIB), _input(rank, 64 * KIB, step))
    x = _input(rank, (64 if rank == 0 else 128) * KIB, 2)
    hp.all_gather_into_tensor(torch.empty(2 * x.numel()), x)


def test_ranks_that_disagree_in_wide_rows_both_report_it() -> None:
    """Rows are as wide on every rank whatever each rank sends: the disagreement is a mismatch
    report on both ranks, not a gloo abort."""
    with pytest.raises(hp.WorldError) as info:
        hp.run(wide_rows_then_different_shapes, world_size=2, backend="gloo", timeout=TIMEOUT)
    causes = info.value.root_causes
    assert sorted(causes) == [0, 1], info.value
    for error in causes.values():
        assert isinstance(error, hp.HcclMismatchError), error
        assert "input_tensor's shape must be the same on every rank" in str(error), error
        assert "rank 0 [16384], rank 1 [32768]" in str(error), error


def _views(rank: int, n: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(output, input) pairs of many dtypes and layouts: a non-contiguous input, a
    non-contiguous output, the in-place form (the input a view of the output), no elements."""
    pairs = []
    for dtype in (torch.float32, torch.bfloat16, torch.int8, torch.bool, torch.float8_e4m3fn):
        x = (torch.arange(6 * 5, dtype=torch.float32).view(6, 5) + rank) % 7
        pairs.append((torch.zeros(6 * n, 5, dtype=dtype), x.to(dtype)))
    strided = torch.arange(40.0).view(8, 5)[::2] * (rank + 1)
    pairs.append((torch.zeros(n * 4, 5), strided))
    pairs.append((torch.zeros(5, n * 4).t(), torch.full((4, 5), rank + 0.5)))
    whole = torch.zeros(n * 3, 2)
    mine = whole[3 * rank : 3 * rank + 3]
    mine.copy_(torch.arange(6.0).view(3, 2) - rank)
    pairs.append((whole, mine))
    pairs.append((torch.zeros(0, 3), torch.zeros(0, 3)))
    return pairs


def gather_views() -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Every pair of :func:`_views` gathered; with each rank's input kept for the reference."""
    rank, n = hp.get_rank(), hp.get_world_size()
    out = []
    for y, x in _views(rank, n):
        sent = x.clone()
        hp.all_gather_into_tensor(y, x)
        out.append((y, sent))
    return out


@pytest.mark.parametrize("room", ["carried", "task"])
def test_carried_outputs_are_numpys_in_every_dtype_and_layout(
    room: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On the emulator, carried (its exchange has room) and by the op's task (no room): every
    rank's output is numpy's concatenation of the inputs, byte for byte."""
    if room == "task":
        monkeypatch.setattr(EmuWorld, "room", lambda self, group: 0)
    results = hp.run(gather_views, world_size=3, timeout=TIMEOUT)
    for index in range(len(results[0])):
        sent = [results[r][index][1] for r in range(3)]
        want = np.concatenate([s.contiguous().view(torch.uint8).numpy() for s in sent])
        for rank in range(3):
            y = results[rank][index][0]
            got = y.contiguous().view(torch.uint8).numpy().reshape(want.shape)
            np.testing.assert_array_equal(got, want, err_msg=f"pair {index}, rank {rank}")


def twice(nbytes: int) -> list[torch.Tensor]:
    rank, n = hp.get_rank(), hp.get_world_size()
    outs = []
    for step in range(2):
        y = torch.empty(n * nbytes // 4)
        hp.all_gather_into_tensor(y, _input(rank, nbytes, step))
        outs.append(y)
    return outs


def _events(path: Path, name: str) -> list[dict]:
    return [e for e in json.loads(path.read_text())["traceEvents"] if e.get("name") == name]


def test_the_trace_shows_a_carried_call(tmp_path: Path) -> None:
    """A carried op has no task: the trace shows it as one call per rank, with its bytes."""
    path = tmp_path / "trace.json"
    results = hp.run(twice, world_size=2, args=(4 * KIB,), trace=path, timeout=TIMEOUT)
    for outs in results:
        for step, y in enumerate(outs):
            np.testing.assert_array_equal(y.numpy(), _want(2, 4 * KIB, step))
    carried = _events(path, "all_gather_into_tensor")
    assert sorted(e["pid"] for e in carried) == [0, 0, 1, 1]
    assert {e["args"]["bytes"] for e in carried} == {8 * KIB}
    assert _events(path, "AllGather[True]") == []


def test_ranks_whose_rooms_differ_run_the_task(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rank 1's exchange has no room, rank 0's does: whether the data rode along is read from
    what every rank sent, so both ranks run the op's task, with numpy's result."""

    def room(self: EmuWorld, group: object) -> int:
        return 0 if current_rank_context().rank == 1 else MAX_EXCHANGE_BYTES

    monkeypatch.setattr(EmuWorld, "room", room)
    path = tmp_path / "trace.json"
    results = hp.run(twice, world_size=2, args=(4 * KIB,), trace=path, timeout=TIMEOUT)
    for outs in results:
        for step, y in enumerate(outs):
            np.testing.assert_array_equal(y.numpy(), _want(2, 4 * KIB, step))
    assert _events(path, "all_gather_into_tensor") == []
    assert len(_events(path, "AllGather[True]")) == 2 * 2


def empty_async_ops() -> list[torch.Tensor]:
    """Every framework op of no elements, asynchronous (so each runs its task)."""
    gathered, reduced, scattered, exchanged = (torch.zeros(0, 3), torch.zeros(0), torch.zeros(0),
                                               torch.zeros(0))  # fmt: skip
    works = [
        hp.all_gather_into_tensor(gathered, torch.zeros(0, 3), async_op=True),
        hp.all_reduce(reduced, async_op=True),
        hp.reduce_scatter_tensor(scattered, torch.zeros(0), async_op=True),
        hp.alltoall_single(exchanged, torch.zeros(0), sync_op=False),
    ]
    return [work.wait() for work in works]


def test_ops_of_no_elements_complete_on_the_emulator() -> None:
    """A task of count 0 has blocks of no bytes: the emulator's round copies nothing (it used to
    fail viewing those empty blocks as wider integers)."""
    assert hp.run(empty_async_ops, world_size=2, timeout=TIMEOUT) == [[True] * 4] * 2
