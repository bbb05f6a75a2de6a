"""Framework collectives carried by their argument exchange (hccl_py/framework/_carry.py): the
results of the op's own task, byte for byte, with one process-group call instead of two."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import test_framework_random as framework_random
import torch
from expect import mismatch_on_every_rank
from hccl_py.backends.emu.world import EmuWorld
from pg_counter import count_calls

import hccl_py as hp
from hccl_py.framework import _carry
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
    ("alltoall", 64 * KIB, (), None),  # another op's exchange makes the rows narrow again
    ("all_gather", 64 * KIB, (), 2),
    ("alltoall", 64 * KIB, (), None),
    ("all_reduce", 64 * KIB, (), 3),  # the exchange, then the exact split's two calls
    ("all_reduce", 64 * KIB, (), 1),  # an exact all-reduce of up to 64 KiB widens the rows
    ("all_reduce", 128 * KIB, (), 3),  # more does not ride, and narrows them
    ("all_reduce", 32 * KIB, (), 2),  # the exchange, then the gather of every input
    ("all_reduce", 32 * KIB, (), 1),
    ("all_gather", 64 * KIB, (0,), 2),  # rank 1's data rode along, rank 0's did not: no carry
    ("all_gather", 1024 * KIB, (), 2),  # the most an exchange carries: from the second call on
    ("all_gather", 1024 * KIB, (), 1),
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
        elif name == "alltoall":
            y = torch.full_like(x, float("nan"))
            hp.alltoall_single(x, y)
        else:
            y = torch.full((n * x.numel(),), float("nan"))
            work = hp.all_gather_into_tensor(y, x, async_op=rank in asynchronous)
            if work is not None:
                work.wait()
        out.append((len(calls), y))
    return out


def test_an_all_gather_rides_in_its_argument_exchange() -> None:
    """On gloo: one process-group call per all_gather_into_tensor (and exact all_reduce of up
    to 64 KiB) where the input fits in the exchange's rows, from the second call on for inputs
    wider than the first rows; numpy's results either way."""
    results = hp.run(calls_in_a_row, world_size=2, backend="gloo", timeout=TIMEOUT)
    for rank, rank_results in enumerate(results):
        for step, ((name, nbytes, _, want_calls), (calls, y)) in enumerate(
            zip(SEQUENCE, rank_results, strict=True)
        ):
            if want_calls is not None:
                assert calls == want_calls, (step, calls)
            sent = [_input(r, nbytes, step).numpy() for r in range(2)]
            if name == "all_reduce":
                want = sent[0] + sent[1]
            elif name == "alltoall":
                half = len(sent[0]) // 2
                want = np.concatenate([s[half * rank : half * (rank + 1)] for s in sent])
            else:
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
    for text in mismatch_on_every_rank(wide_rows_then_different_shapes, 2, "gloo", TIMEOUT):
        assert "input_tensor's shape must be the same on every rank" in text, text
        assert "rank 0 [16384], rank 1 [32768]" in text, text


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


REDUCE_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.int8, torch.int32,
                 torch.float64, torch.int64, torch.uint8, torch.bool)  # fmt: skip
REDUCE_OPS = (torch.distributed.ReduceOp.SUM, torch.distributed.ReduceOp.MAX,
              torch.distributed.ReduceOp.MIN)  # fmt: skip
NP_REDUCE = {"SUM": np.sum, "MAX": np.max, "MIN": np.min}


def _values(rank: int, shape: tuple[int, ...], dtype: torch.dtype, salt: int) -> torch.Tensor:
    """Small integer values (sums stay exact in every dtype), different on every rank."""
    n = int(np.prod(shape))
    raw = (np.arange(n) * (7 + salt) + 3 * rank + salt) % 5 - (0 if dtype == torch.bool else 2)
    return torch.from_numpy(raw.reshape(shape)).to(dtype)


def every_small_op() -> list[tuple[str, torch.Tensor]]:
    """Every framework op at a few hundred bytes: reductions in every dtype and op, an even
    and an uneven alltoall_single, a barrier between them."""
    rank, n = hp.get_rank(), hp.get_world_size()
    out: list[tuple[str, torch.Tensor]] = []
    for salt, dtype in enumerate(REDUCE_DTYPES):
        for op in REDUCE_OPS:
            t = _values(rank, (3, 5), dtype, salt)
            hp.all_reduce(t, op=op)
            out.append((f"all_reduce {dtype} {op}", t))
            y = torch.zeros(2, 3, dtype=dtype)
            hp.reduce_scatter_tensor(y, _values(rank, (2 * n, 3), dtype, salt), op=op)
            out.append((f"reduce_scatter_tensor {dtype} {op}", y))
    hp.barrier()
    scalar = torch.tensor(float(rank + 1))
    hp.all_reduce(scalar)
    out.append(("all_reduce of a 0-dim tensor", scalar))
    column = (torch.arange(4.0) + rank).as_strided((4, 1), (1, 2))  # contiguous, last stride 2
    hp.all_reduce(column)
    out.append(("all_reduce of a column", column))
    leaf = torch.full((3,), float(rank), requires_grad=True)  # written as the task writes it
    hp.all_reduce(leaf)
    out.append(("all_reduce of a leaf that requires grad", leaf.detach()))
    x = _values(rank, (2 * n, 3), torch.float32, 9)
    even = torch.zeros(2 * n, 3)
    hp.alltoall_single(x, even)
    out.append(("alltoall_single even", even))
    ins = [(rank + j) % 3 for j in range(n)]
    outs = [(i + rank) % 3 for i in range(n)]
    uneven = torch.zeros(sum(outs), 3)
    hp.alltoall_single(_values(rank, (sum(ins), 3), torch.float32, 10), uneven, ins, outs)
    out.append(("alltoall_single uneven", uneven))
    return out


def _np(t: torch.Tensor) -> np.ndarray:
    """numpy's copy of ``t`` (bfloat16, which numpy lacks, as float32: exactly)."""
    return t.float().numpy() if t.dtype == torch.bfloat16 else t.numpy()


def _reference(n: int) -> list[np.ndarray]:
    """numpy's results of :func:`every_small_op` on every rank."""
    per_rank: list[list[np.ndarray]] = [[] for _ in range(n)]
    for salt, dtype in enumerate(REDUCE_DTYPES):
        for op in REDUCE_OPS:
            reduce = NP_REDUCE[str(op).rsplit(".", 1)[-1]]
            whole = np.stack([_np(_values(r, (3, 5), dtype, salt)) for r in range(n)])
            blocks = np.stack([_np(_values(r, (2 * n, 3), dtype, salt)) for r in range(n)])
            for r in range(n):
                per_rank[r].append(reduce(whole, axis=0).astype(whole.dtype))
                per_rank[r].append(reduce(blocks[:, 2 * r : 2 * r + 2], axis=0).astype(whole.dtype))
    for r in range(n):
        per_rank[r].append(np.array(sum(range(1, n + 1)), dtype=np.float32))
        per_rank[r].append(n * np.arange(4.0, dtype=np.float32).reshape(4, 1) + sum(range(n)))
        per_rank[r].append(np.full(3, sum(range(n)), dtype=np.float32))
    sent = [_values(r, (2 * n, 3), torch.float32, 9).numpy() for r in range(n)]
    for r in range(n):
        per_rank[r].append(np.concatenate([sent[i][2 * r : 2 * r + 2] for i in range(n)]))
    ins = [[(i + j) % 3 for j in range(n)] for i in range(n)]
    uneven = [_values(i, (sum(ins[i]), 3), torch.float32, 10).numpy() for i in range(n)]
    for r in range(n):
        pieces = [uneven[i][sum(ins[i][:r]) : sum(ins[i][: r + 1])] for i in range(n)]
        per_rank[r].append(np.concatenate(pieces))
    return per_rank


@pytest.mark.parametrize("room", ["carried", "task"])
def test_every_small_op_is_numpys_carried_or_not(
    room: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On 3 emulated ranks, every op carried (its exchange has room) and by its task (no
    room) gives numpy's result; bf16 and fp16 compare as float32."""
    if room == "task":
        monkeypatch.setattr(EmuWorld, "room", lambda self, group: 0)
    results = hp.run(every_small_op, world_size=3, timeout=TIMEOUT)
    for rank, (got, want) in enumerate(zip(results, _reference(3), strict=True)):
        for (name, tensor), expected in zip(got, want, strict=True):
            values = _np(tensor)
            np.testing.assert_array_equal(
                values, expected.astype(values.dtype), err_msg=f"rank {rank}, {name}"
            )


def test_carried_ops_are_their_tasks_byte_for_byte(monkeypatch: pytest.MonkeyPatch) -> None:
    """Floating-point sums whose rounding depends on the order: the carried reduction is the
    task's, bit for bit (the same function, in the same rank order)."""

    def sums() -> list[torch.Tensor]:
        rank, out = hp.get_rank(), []
        for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.float64):
            g = torch.Generator().manual_seed(rank)
            t = (torch.randn(64, generator=g) * 10 ** torch.randn(64, generator=g)).to(dtype)
            hp.all_reduce(t)
            y = torch.zeros(16, dtype=dtype)
            hp.reduce_scatter_tensor(y, t.repeat(hp.get_world_size() * 16 // 64 + 1)[:48])
            out += [t, y]
        return out

    carried = hp.run(sums, world_size=3, timeout=TIMEOUT)
    monkeypatch.setattr(EmuWorld, "room", lambda self, group: 0)
    tasks = hp.run(sums, world_size=3, timeout=TIMEOUT)
    for a, b in zip(carried, tasks, strict=True):
        for x, y in zip(a, b, strict=True):
            assert x.view(torch.uint8).tolist() == y.view(torch.uint8).tolist()


def one_kib_ops() -> dict[str, int]:
    """The process-group calls of each framework op at 1 KiB on this rank."""
    n, counts = hp.get_world_size(), {}
    calls = count_calls()
    x = torch.ones(256)
    ops = {
        "all_reduce": lambda: hp.all_reduce(x.clone()),
        "reduce_scatter_tensor": lambda: hp.reduce_scatter_tensor(torch.zeros(256 // n), x),
        "alltoall_single": lambda: hp.alltoall_single(x, torch.zeros(256)),
        "barrier": hp.barrier,
        "all_gather_into_tensor": lambda: hp.all_gather_into_tensor(torch.zeros(256 * n), x),
    }
    for name, call in ops.items():
        calls.clear()
        call()
        counts[name] = len(calls)
    return counts


@pytest.mark.parametrize("reduce", ["exact", "native"])
def test_small_ops_make_one_process_group_call(
    reduce: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On gloo, a 1 KiB framework op is its argument exchange alone, except a reduction where
    the process group reduces (native: the task reduces, as HCCL does)."""
    monkeypatch.setenv("HCCL_PY_REDUCE", reduce)
    results = hp.run(one_kib_ops, world_size=2, backend="gloo", timeout=TIMEOUT)
    reductions = 1 if reduce == "exact" else 2
    want = {"all_reduce": reductions, "reduce_scatter_tensor": reductions, "alltoall_single": 1,
            "barrier": 1, "all_gather_into_tensor": 1}  # fmt: skip
    assert results == [want, want]


@pytest.mark.parametrize("seed", [3, 6, 13, 22])
def test_random_moe_exchanges_by_their_task(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The random global_scatter / global_gather cases (tests/test_framework_random.py), which
    mostly ride in their exchange, with no room: by their AlltoAllV tasks, the same results."""
    monkeypatch.setattr(EmuWorld, "room", lambda self, group: 0)
    framework_random.test_global_scatter_and_gather_random(seed)


def backward_through_an_overwritten_output(op: str) -> str:
    """Autograd saved an op's output (``out * out``), then the op overwrote it: backward
    must raise autograd's in-place error, as after the op's task, or it computes the gradient
    from the overwritten values. What backward did."""
    rank, n = hp.get_rank(), hp.get_world_size()
    out = torch.zeros(4 * n, requires_grad=True) * 1  # a non-leaf that autograd tracks
    loss = (out * out).sum()
    x = torch.full((4 * n,) if op == "alltoall_single" else (4,), float(rank + 1))
    if op == "alltoall_single":
        hp.alltoall_single(x, out)
    else:
        hp.all_gather_into_tensor(out, x)
    try:
        loss.backward()
    except RuntimeError as error:
        return str(error)
    return "no error"


@pytest.mark.parametrize("op", ["all_gather_into_tensor", "alltoall_single"])
@pytest.mark.parametrize("room", ["carried", "task"])
def test_a_carried_output_is_a_write_that_autograd_sees(
    op: str, room: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Carried or by the task, the output's version counter moves on, so a backward through
    values saved before the op is autograd's error, not a silently wrong gradient."""
    if room == "task":
        monkeypatch.setattr(EmuWorld, "room", lambda self, group: 0)
    results = hp.run(backward_through_an_overwritten_output, world_size=2, args=(op,),
                     timeout=TIMEOUT)  # fmt: skip
    for text in results:
        assert "modified by an inplace operation" in text, text


#: One tensor for every emulated rank (a module-level buffer; each process has its own).
SHARED = torch.zeros(8)


def into_one_shared_output(op: str) -> None:
    """Every rank's ``op`` writes :data:`SHARED` (reduce_scatter_tensor: a different block
    result per rank, so the last writer would win)."""
    rank, n = hp.get_rank(), hp.get_world_size()
    x = torch.arange(8.0 * n) + 100 * rank
    if op == "reduce_scatter_tensor":
        hp.reduce_scatter_tensor(SHARED, x)
    elif op == "alltoall_single":
        hp.alltoall_single(x[:8], SHARED)
    else:
        hp.all_reduce(SHARED)


@pytest.mark.parametrize("op", ["reduce_scatter_tensor", "alltoall_single", "all_reduce"])
def test_an_output_shared_between_emulated_ranks_is_reported_carried_or_not(op: str) -> None:
    """The exchange has room, but one rank's output is another rank's memory: the op keeps its
    task, whose check reports the sharing on every rank (carried, each rank would write it
    in turn and the last writer's result would silently stand)."""
    with pytest.raises(hp.WorldError) as info:
        hp.run(into_one_shared_output, world_size=2, args=(op,), timeout=TIMEOUT)
    causes = info.value.root_causes
    assert sorted(causes) == [0, 1], info.value
    for error in causes.values():
        assert isinstance(error, hp.HcclSharedMemoryError), error
        assert "shares memory with rank" in str(error), error


def private_calls_then_one_shared_output(op: str) -> None:
    """Three calls of ``op`` into outputs of the rank's own, then one into :data:`SHARED`."""
    for _ in range(3):
        hp.all_reduce(torch.ones(8))
    into_one_shared_output(op)


def test_a_shared_output_after_private_ones_is_still_reported() -> None:
    """The sharing verdict kept from the calls before does not hide the clash of a later one."""
    with pytest.raises(hp.WorldError) as info:
        hp.run(private_calls_then_one_shared_output, world_size=2, args=("all_reduce",),
               timeout=TIMEOUT)  # fmt: skip
    assert all(isinstance(e, hp.HcclSharedMemoryError) for e in info.value.root_causes.values())
    assert sorted(info.value.root_causes) == [0, 1]


def test_the_sharing_verdict_is_kept_only_for_the_same_spans(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``_shared`` judges each new set of spans and repeats its verdict for the same set."""
    monkeypatch.setattr(_carry, "_last_shared", ([], False))
    judged = []
    real = _carry.first_clash
    monkeypatch.setattr(_carry, "first_clash", lambda buffers: judged.append(1) or real(buffers))
    # [storage address, first byte, end byte]: storages 1000 bytes apart
    apart = [[[1000, 0, 8], [2000, 0, 8]], [[3000, 0, 8], [2000, 0, 8]]]  # one input, read only
    # rank 1 writes rank 0's output
    clash = [[[1000, 0, 8], [2000, 0, 8]], [[1000, 4, 12], [4000, 0, 8]]]
    verdicts = [_carry._shared(spans) for spans in (apart, apart, clash, clash, apart)]
    assert verdicts == [False, False, True, True, False]
    assert len(judged) == 3


def gather_a_shared_input() -> torch.Tensor:
    """Every rank sends the one tensor :data:`SHARED` (read-only sharing, as the same weights
    are) into an output of its own."""
    y = torch.zeros(8 * hp.get_world_size())
    hp.all_gather_into_tensor(y, SHARED)
    return y


def test_an_input_shared_between_emulated_ranks_still_rides(tmp_path: Path) -> None:
    """Read-only sharing is the same in every backend: the call still rides in its exchange."""
    SHARED.copy_(torch.arange(8.0))
    path = tmp_path / "trace.json"
    results = hp.run(gather_a_shared_input, world_size=2, trace=path, timeout=TIMEOUT)
    for y in results:
        np.testing.assert_array_equal(y.numpy(), np.tile(np.arange(8.0, dtype=np.float32), 2))
    assert len(_events(path, "all_gather_into_tensor")) == 2
    assert _events(path, "AllGather[True]") == []


def returns_right_after_its_exchange(op: str) -> bool:
    """``op``, carried in its argument exchange (barrier: the exchange alone), is each rank's
    last collective. Rank 0 looks for absent peers only once rank 1 has returned from its
    function (forced here: on a loaded machine it happens by chance, between the exchange's
    end and its notice)."""
    import time

    from hccl_py.backends.dist import session
    from hccl_py.backends.dist.descriptors import returned_key

    rank, n = hp.get_rank(), hp.get_world_size()
    hp.barrier()  # both ranks are here: the patch below sees only the last exchange
    if rank == 0:
        store = current_rank_context().server.store

        def watch_work(work, every, look, failed, waiting=None, device_async=False) -> None:  # type: ignore[no-untyped-def]
            work.wait()
            for _ in range(2000):
                if store.check([returned_key(1)]):
                    break
                time.sleep(0.01)
            look()

        session.watch_work = watch_work
    if op == "barrier":
        hp.barrier()
        return True
    y = torch.zeros(4 * n)
    hp.all_gather_into_tensor(y, torch.full((4,), float(rank)))
    return y.tolist() == [float(r) for r in range(n) for _ in range(4)]


@pytest.mark.parametrize("op", ["barrier", "all_gather_into_tensor"])
def test_a_peer_that_returned_after_the_last_exchange_is_not_absent(op: str) -> None:
    """Rank 1 took part in the exchange, got its result and returned: rank 0, still in the
    exchange's wait, must not report it as having returned without calling the op."""
    got = hp.run(returns_right_after_its_exchange, world_size=2, backend="gloo", args=(op,),
                 timeout=TIMEOUT)  # fmt: skip
    assert got == [True, True], got


def rank0_calls_once_more() -> None:
    """Both ranks all_reduce once; rank 0 then calls barrier, which rank 1 never calls."""
    hp.all_reduce(torch.ones(4))
    if hp.get_rank() == 0:
        hp.barrier()


def test_a_peer_that_returned_before_the_exchange_is_still_named() -> None:
    """Rank 1 joined the group's first exchange but returned before the second: rank 0 names
    it at once, not after its timeout."""
    with pytest.raises(hp.WorldError) as info:
        hp.run(rank0_calls_once_more, world_size=2, backend="gloo", timeout=TIMEOUT)
    error = info.value.failures[0]
    assert isinstance(error, hp.HcclDeadlockError), error
    assert "rank 1 returned from its function without calling barrier" in str(error), error


@pytest.mark.parametrize(
    "value, number, left",
    [(b'{"g":2}', 1, False), (b'{"g":2}', 2, True), (b'{"h":5}', 0, True), (None, 0, True)],
    ids=["joined", "next", "other-domain", "no-record"],
)
def test_whether_a_returned_peer_joined_an_exchange_is_read_back(
    value: bytes | None, number: int, left: bool
) -> None:
    from torch.distributed import HashStore

    from hccl_py.backends.dist.descriptors import exchanged_key, left_before, returned_key

    store = HashStore()
    assert not left_before(store, 3, "g", number)  # not returned yet: not absent
    if value is not None:
        store.set(exchanged_key(3), value)
    store.set(returned_key(3), b"{}")
    assert left_before(store, 3, "g", number) == left


@pytest.mark.parametrize("forged", [b"1", b'{"g":"3"}', b'{"g":-2}', b"\xff"])
def test_a_forged_exchange_count_is_refused(forged: bytes) -> None:
    from torch.distributed import HashStore

    from hccl_py.backends.dist.descriptors import exchanged_key, left_before, returned_key
    from hccl_py.launcher.sealed import ForgedValueError

    store = HashStore()
    store.set(returned_key(2), b"{}")
    store.set(exchanged_key(2), forged)
    with pytest.raises(ForgedValueError, match="exchange counts"):
        left_before(store, 2, "g", 0)


def large_sync_ops(nbytes: int) -> list[torch.Tensor]:
    """alltoall_single and reduce_scatter_tensor of ``nbytes`` per rank, each once."""
    rank, n = hp.get_rank(), hp.get_world_size()
    x = _input(rank, nbytes, 0)
    y = torch.full_like(x, float("nan"))
    hp.alltoall_single(x, y)
    z = torch.full((x.numel() // n,), float("nan"))
    hp.reduce_scatter_tensor(z, x)
    return [y, z]


@pytest.mark.parametrize(
    ("nbytes", "tasks"), [(64 * KIB, []), (256 * KIB, ["ReduceScatter[True]"])]
)
def test_emulated_ranks_hand_over_larger_rows(
    nbytes: int, tasks: list[str], tmp_path: Path
) -> None:
    """On the emulator rows are handed over, not sent: an all-to-all rides up to the room,
    a reduce-scatter up to 64 KiB (every rank reducing every input costs more above); the
    trace shows which ran a task. numpy's results either way."""
    path = tmp_path / "trace.json"
    n = 2
    results = hp.run(large_sync_ops, world_size=n, args=(nbytes,), trace=path, timeout=TIMEOUT)
    sent = [_input(r, nbytes, 0).numpy() for r in range(n)]
    half = len(sent[0]) // n
    for rank, (y, z) in enumerate(results):
        want = np.concatenate([s[half * rank : half * (rank + 1)] for s in sent])
        np.testing.assert_array_equal(y.numpy(), want)
        np.testing.assert_array_equal(
            z.numpy(),
            sent[0][half * rank : half * (rank + 1)] + sent[1][half * rank : half * (rank + 1)],
        )
    ran = sorted({e["name"] for e in json.loads(path.read_text())["traceEvents"]
                  if e.get("name", "").endswith("[True]")})  # fmt: skip
    assert ran == tasks, ran


@pytest.mark.parametrize("at", [0, 5, 1023, 1024, 1025, 64 * KIB - 1, 64 * KIB, 70000, None])
def test_record_length_finds_the_first_nul_in_views_and_bytes(at: int | None) -> None:
    """A record's end is the first NUL byte (the whole payload without one), whether the
    payload is bytes or a view of a received row, wherever the scan windows end."""
    from hccl_py.server.protocol import record_length

    raw = np.full(80000, ord("x"), dtype=np.uint8)
    if at is not None:
        raw[at] = 0
        raw[at + 7 :: 1000] = 0  # later NULs (ridden data) do not count
    payload = raw.tobytes()
    want = payload.find(b"\0") if at is not None else len(payload)
    assert want == (len(payload) if at is None else at)
    assert record_length(payload) == want
    assert record_length(memoryview(payload)) == want
    assert record_length(memoryview(raw)) == want


def gather_three_times() -> list[float]:
    """Three all-gathers of the rank's number, carried in their exchanges."""
    rank, n = hp.get_rank(), hp.get_world_size()
    got = []
    for step in range(3):
        y = torch.zeros(2 * n)
        hp.all_gather_into_tensor(y, torch.full((2,), float(10 * step + rank)))
        got += y.tolist()
    return got


def test_emulated_ranks_read_a_meeting_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every member of an emulated meeting gets the same payloads, so the first member's reading
    of them (records, rows, verdicts) serves the others: one reading per call, not per rank."""
    made = []
    real = _carry._Reading

    def counted(*args: object) -> object:
        made.append(1)
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(_carry, "_Reading", counted)
    results = hp.run(gather_three_times, world_size=4, timeout=TIMEOUT)
    want = [float(10 * s + r) for s in range(3) for r in range(4) for _ in range(2)]
    assert results == [want] * 4
    assert len(made) == 3


@pytest.mark.parametrize(
    "view",
    [lambda t: t, lambda t: t[3:9], lambda t: t.view(4, 6)[1:, ::2], lambda t: t.view(4, 6).t()],
)
def test_a_span_is_the_bytes_from_the_first_element_to_the_last(view: object) -> None:
    """``_span``: the address of a tensor's first byte and how many bytes its elements reach."""
    t = view(torch.arange(24.0))  # type: ignore[operator]
    # each element's value is its index in the storage
    low, high = int(t.min()) - t.storage_offset(), int(t.max()) - t.storage_offset()
    assert low == 0
    assert _carry._span(t) == [t.data_ptr(), 0, (high + 1) * 4]
    assert _carry._span(t[:0]) == [] and _carry._span(None) == []
