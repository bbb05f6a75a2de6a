"""An all-to-all called again (a framework op, or a kernel task's first round) rides in its
argument or descriptor exchange, predicted as one all-to-all (hccl_py/backends/dist/predicted.py):
one process-group call where the op made two, the results numpy's (or the emulator's) and, for
reductions, the task's byte for byte."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest
import test_first_round as first_round
import test_framework_random as framework_random
import torch
from expect import mismatch_on_every_rank
from pg_counter import count_calls

import hccl_py as hp
from hccl_py.backends.dist import predicted, rounds
from hccl_py.backends.dist.settings import CARRY_ENV

TIMEOUT = 30.0
KIB = 1024
A2A, AG = "all_to_all_single", "all_gather_single"


def _input(rank: int, nbytes: int, step: int) -> torch.Tensor:
    """A float32 input of ``nbytes`` bytes that no other rank or step shares."""
    return torch.arange(nbytes // 4, dtype=torch.float32) + 1e6 * rank + 1e3 * step


#: (call, bytes per rank, whether ranks send uneven pieces, calls expected on every rank); the
#: sizes split evenly into rows of 8 floats for 2 and 3 ranks
SEQUENCE = [
    ("alltoall", 48 * KIB, False, [AG, A2A]),  # the exchange, then the op's task
    ("alltoall", 48 * KIB, False, [A2A]),  # the same call again: one all-to-all
    ("alltoall", 48 * KIB, False, [A2A]),
    ("alltoall", 192 * KIB, False, [A2A, AG, A2A]),  # larger than predicted: one wasted call
    ("alltoall", 192 * KIB, False, [A2A]),
    ("alltoall", 96 * KIB, True, [A2A]),  # uneven pieces, none larger than predicted
    ("reduce_scatter", 48 * KIB, False, [A2A]),  # another op whose pieces fit
    ("reduce_scatter", 48 * KIB, False, [A2A]),
    ("all_gather", 48 * KIB, False, [A2A, AG]),  # its record rides; its data needs its task
    ("alltoall", 48 * KIB, False, [AG, A2A]),  # an all-gather's exchange predicts nothing
    ("alltoall", 3 * KIB, False, [A2A]),
    ("alltoall", 3 * KIB, False, [A2A]),
]


def _splits(n: int, rows: int, uneven: bool, rank: int) -> list[int] | None:
    """Rank ``rank``'s split sizes of ``rows`` rows (None: equal pieces)."""
    if not uneven:
        return None
    sizes = [(rows // n) + (1 if (j + rank) % 2 == 0 else -1) * (rows // (4 * n)) for j in range(n)]
    sizes[-1] = rows - sum(sizes[:-1])
    return sizes


def calls_in_a_row() -> list[tuple[list[str], torch.Tensor]]:
    """Each call of :data:`SEQUENCE`: the process-group calls it made here, and its output."""
    rank, n = hp.get_rank(), hp.get_world_size()
    calls, out = count_calls(), []
    for step, (name, nbytes, uneven, _) in enumerate(SEQUENCE):
        x = _input(rank, nbytes, step)
        calls.clear()
        if name == "alltoall":
            x = x.view(-1, 8)
            ins = _splits(n, x.shape[0], uneven, rank)
            outs = (
                None if ins is None else [_splits(n, x.shape[0], True, j)[rank] for j in range(n)]
            )
            y = torch.full((x.shape[0] if outs is None else sum(outs), 8), float("nan"))
            hp.alltoall_single(x, y, ins, outs)
        elif name == "reduce_scatter":
            y = torch.full((x.numel() // n,), float("nan"))
            hp.reduce_scatter_tensor(y, x)
        else:
            y = torch.full((n * x.numel(),), float("nan"))
            hp.all_gather_into_tensor(y, x)
        out.append((list(calls), y))
    return out


def _want(name: str, nbytes: int, uneven: bool, step: int, n: int, rank: int) -> np.ndarray:
    """numpy's output of call ``step`` on ``rank``."""
    sent = [_input(r, nbytes, step).numpy() for r in range(n)]
    if name == "all_gather":
        return np.concatenate(sent)
    if name == "reduce_scatter":
        m = len(sent[0]) // n
        return sum(s[m * rank : m * (rank + 1)].astype(np.float64) for s in sent).astype(np.float32)
    pieces = []
    for r, s in enumerate(sent):
        rows = s.reshape(-1, 8)
        sizes = _splits(n, rows.shape[0], uneven, r) or [rows.shape[0] // n] * n
        start = sum(sizes[:rank])
        pieces.append(rows[start : start + sizes[rank]])
    return np.concatenate(pieces)


@pytest.mark.parametrize("n", [2, 3])
def test_an_all_to_all_called_again_is_one_process_group_call(n: int) -> None:
    """On gloo: after an agreed alltoall_single or exact reduce_scatter_tensor, the same call
    again (or any whose pieces fit) is one all-to-all carrying every rank's record and its
    piece for each peer; a larger one costs one wasted call; numpy's results every time."""
    results = hp.run(calls_in_a_row, world_size=n, backend="gloo", timeout=TIMEOUT)
    for rank, rank_results in enumerate(results):
        for step, ((name, nbytes, uneven, want_calls), (calls, y)) in enumerate(
            zip(SEQUENCE, rank_results, strict=True)
        ):
            assert calls == want_calls, (rank, step, calls)
            want = _want(name, nbytes, uneven, step, n, rank)
            np.testing.assert_array_equal(y.numpy().reshape(-1), want.reshape(-1), f"step {step}")


def sums(rounds_: int) -> list[torch.Tensor]:
    """Exact reduce-scatters of floats whose sums depend on the order, called ``rounds_`` times."""
    rank, n, out = hp.get_rank(), hp.get_world_size(), []
    for dtype in (torch.float32, torch.bfloat16):
        g = torch.Generator().manual_seed(rank)
        x = torch.randn(n * 8 * KIB, generator=g) * 10 ** torch.randn(n * 8 * KIB, generator=g)
        for _ in range(rounds_):
            y = torch.zeros(8 * KIB, dtype=dtype)
            hp.reduce_scatter_tensor(y, x.to(dtype))
            out.append(y)
    return out


def test_a_predicted_reduce_scatter_is_its_task_byte_for_byte(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The reduction of pieces that came in the predicted all-to-all is the task's, bit for bit,
    and the emulator's."""
    carried = hp.run(sums, world_size=3, backend="gloo", timeout=TIMEOUT, args=(3,))
    emulated = hp.run(sums, world_size=3, timeout=TIMEOUT, args=(3,))
    monkeypatch.setenv(CARRY_ENV, "0")
    tasks = hp.run(sums, world_size=3, backend="gloo", timeout=TIMEOUT, args=(3,))
    for a, b, c in zip(carried, tasks, emulated, strict=True):
        for x, y, z in zip(a, b, c, strict=True):
            assert x.view(torch.uint8).tolist() == y.view(torch.uint8).tolist()
            assert x.view(torch.uint8).tolist() == z.view(torch.uint8).tolist()


def native_reduce_scatters() -> list[int]:
    """The process-group calls of three 64 KiB reduce-scatters."""
    n, calls, out = hp.get_world_size(), count_calls(), []
    for _ in range(3):
        calls.clear()
        hp.reduce_scatter_tensor(torch.zeros(16 * KIB // n), torch.ones(16 * KIB))
        out.append(len(calls))
    return out


def test_native_reductions_predict_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the process group reducing (HCCL's way), a reduce-scatter's data cannot ride: the
    exchange, then the op's call, every time."""
    monkeypatch.setenv("HCCL_PY_REDUCE", "native")
    assert (
        hp.run(native_reduce_scatters, world_size=2, backend="gloo", timeout=TIMEOUT)
        == [[2, 2, 2]] * 2
    )


def then_differently(what: str) -> None:
    """Two 64 KiB alltoall_single calls (the next exchange is predicted), then rank 1 calls
    ``what`` where rank 0 calls the same all-to-all again."""
    rank = hp.get_rank()
    for step in range(3):
        x = _input(rank, 64 * KIB, step)
        if step == 2 and rank == 1 and what == "all_reduce":
            hp.all_reduce(x)
        elif step == 2 and rank == 1:
            hp.alltoall_single(x.view(-1, 4), torch.empty(x.numel() // 4, 4))
        else:
            hp.alltoall_single(x, torch.empty_like(x))


@pytest.mark.parametrize(
    ("what", "text"),
    [
        ("all_reduce", "called different collectives at the same point"),
        ("shape", "in_tensor's shape after dim 0 must be the same on every rank"),
    ],
)
def test_ranks_that_disagree_after_a_prediction_both_report_it(what: str, text: str) -> None:
    """The predicted all-to-all has the same blocks on every rank whatever each rank calls:
    a disagreement is a mismatch report on both ranks, not a gloo abort or a hang."""
    for message in mismatch_on_every_rank(partial(then_differently, what), 2, "gloo", TIMEOUT):
        assert text in message, message


def one_rank_asynchronous() -> list[tuple[int, torch.Tensor]]:
    """After two all-to-alls, one where rank 1 waits asynchronously, then two more."""
    rank, calls, out = hp.get_rank(), count_calls(), []
    for step in range(5):
        x = _input(rank, 64 * KIB, step)
        y = torch.full_like(x, float("nan"))
        calls.clear()
        work = hp.alltoall_single(x, y, sync_op=not (step == 2 and rank == 1))
        work.wait()
        out.append((len(calls), y))
    return out


def test_a_rank_that_sends_no_pieces_makes_every_rank_run_the_task() -> None:
    """An asynchronous call keeps its task: its rank sends its record alone in the predicted
    all-to-all, and every rank sees it and runs the task, which predicts nothing (not every
    rank listed its pieces); numpy's results."""
    results = hp.run(one_rank_asynchronous, world_size=2, backend="gloo", timeout=TIMEOUT)
    for rank in range(2):
        assert [calls for calls, _ in results[rank]] == [2, 1, 2, 2, 1], rank
        for step, (_, y) in enumerate(results[rank]):
            sent = [_input(r, 64 * KIB, step).numpy() for r in range(2)]
            half = len(sent[0]) // 2
            want = np.concatenate([s[half * rank : half * (rank + 1)] for s in sent])
            np.testing.assert_array_equal(y.numpy(), want)


def all_to_alls_then_kernels() -> list[tuple[list[str], torch.Tensor]]:
    """Two 48 KiB all-to-alls, then kernel launches of :data:`KERNELS` (counted)."""
    rank = hp.get_rank()
    for step in range(2):
        x = _input(rank, 48 * KIB, step)
        hp.alltoall_single(x, torch.empty_like(x))
    return first_round.launches_in_a_row(KERNELS)


KERNELS = [("allgather", 1024), ("alltoall", 65536)]


def test_a_kernel_task_checked_in_a_predicted_exchange() -> None:
    """A kernel task's check after a predicted all-to-all travels in it (its descriptor and a
    small round 0 fit the block): one call, the emulator's bytes."""
    gloo = hp.run(all_to_alls_then_kernels, world_size=3, backend="gloo", timeout=TIMEOUT)
    emu = hp.run(first_round.launches_in_a_row, world_size=3, timeout=TIMEOUT, args=(KERNELS,))
    for rank in range(3):
        assert [calls for calls, _ in gloo[rank]] == [[A2A], [AG, A2A]], rank
        for (_, ours), (_, theirs) in zip(gloo[rank], emu[rank], strict=True):
            assert torch.equal(ours, theirs), rank


class _Forged:
    """A process group stand-in whose all-to-all delivers ``blocks`` (one per rank)."""

    def __init__(self, blocks: np.ndarray) -> None:
        self.blocks = blocks

    def all_to_all_single(self, out: torch.Tensor, send: torch.Tensor, **_: object) -> None:
        out.copy_(torch.from_numpy(self.blocks.reshape(-1)))


@pytest.mark.parametrize(("length", "kind"), [(5000, 0), (-7, 0), (3, 9)])
def test_a_forged_block_is_refused_naming_its_rank(
    length: int, kind: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A block whose length or kind hccl_py never sends is a ValueError naming the domain rank,
    not a read past the block or a silent misreading."""
    block = 4096
    blocks = np.zeros((2, predicted.HEADER_BYTES + block), dtype=np.uint8)
    heads = blocks[:, : predicted.HEADER_BYTES].view("<i8")
    heads[0] = [2, predicted.PLAIN]
    blocks[0, predicted.HEADER_BYTES : predicted.HEADER_BYTES + 2] = [123, 125]
    heads[1] = [length, kind]
    monkeypatch.setattr(predicted, "dist", _Forged(blocks))
    dom = rounds.Domain(None, np.arange(2), rounds.Reduction(True, {}, False))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="domain rank 1 sent a block of"):
        predicted.scatter_bytes(dom, b"{}", None, block, torch.device("cpu"), lambda work: None)


def test_a_rank_whose_content_does_not_fit_makes_every_rank_fall_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A block announcing :data:`~hccl_py.backends.dist.predicted.UNFIT`: the exchange carried
    nothing (None), so the caller exchanges again as usual; a fitting one gives every payload."""
    block = 4096
    blocks = np.zeros((2, predicted.HEADER_BYTES + block), dtype=np.uint8)
    heads = blocks[:, : predicted.HEADER_BYTES].view("<i8")
    heads[:] = [[2, predicted.PLAIN], [predicted.UNFIT, predicted.PIECES]]
    monkeypatch.setattr(predicted, "dist", _Forged(blocks))
    dom = rounds.Domain(None, np.arange(2), rounds.Reduction(True, {}, False))  # type: ignore[arg-type]
    cpu = torch.device("cpu")
    assert predicted.scatter_bytes(dom, b"{}", None, block, cpu, lambda work: None) is None
    heads[1] = [3, predicted.PIECES]
    blocks[:, predicted.HEADER_BYTES : predicted.HEADER_BYTES + 3] = list(b"{}\0")
    got = predicted.scatter_bytes(dom, b"{}", None, block, cpu, lambda work: None)
    assert got == ([b"{}", b"{}"], False)  # not every rank's piece came: records alone


#: MoE steps: (seed of the routing, most rows a card sends one expert); rows are 1 KiB
MOE_STEPS = [(1, 8), (2, 8), (3, 8), (4, 8), (5, 24), (6, 8), (7, 12), (8, 12), (9, 4), (10, 8)]


def _routing(seed: int, most: int, n: int) -> np.ndarray:
    """``C[i, j, e]``: rows card i sends to expert e of card j (two experts per card), at most
    ``most``; card 0 sends card 1's experts ``most`` each (the largest piece)."""
    counts = np.random.default_rng(seed).integers(most // 4, most + 1, size=(n, n, 2))
    counts[0, 1] = most
    return counts


def moe_steps() -> list[tuple[int, torch.Tensor, torch.Tensor]]:
    """global_scatter then global_gather per step of :data:`MOE_STEPS`: the process-group
    calls of the pair, the scattered rows and the gathered ones."""
    rank, n, calls, out = hp.get_rank(), hp.get_world_size(), count_calls(), []
    for seed, most in MOE_STEPS:
        counts = _routing(seed, most, n)
        x = _input(rank, int(counts[rank].sum()) * KIB, seed).view(-1, 256)
        local = torch.from_numpy(counts[rank].reshape(-1).copy())
        glob = torch.from_numpy(counts[:, rank, :].reshape(-1).copy())
        calls.clear()
        y = hp.global_scatter(x, local, glob)
        back = hp.global_gather(y, local, glob)
        out.append((len(calls), y, back))
    return out


def test_moe_steps_whose_routing_varies_ride_in_predicted_exchanges() -> None:
    """global_scatter and global_gather predict as alltoall_single does, and a block that
    carried a step stays as large while the next steps need at least a quarter of it:
    varying routings ride without wasted calls, and so do steps smaller than a larger one
    before them; a step larger than every block since one four times smaller costs one
    wasted call. numpy's rows."""
    n = 3
    results = hp.run(moe_steps, world_size=n, backend="gloo", timeout=TIMEOUT)
    for rank in range(n):
        # the first pair: an exchange and a task, then the gather rides; a step larger than
        # every block since the last one more than four times as large: one wasted call
        want = [3, 2, 2, 2, 4, 2, 2, 2, 2, 4]
        assert [calls for calls, _, _ in results[rank]] == want, rank
    for step, (seed, most) in enumerate(MOE_STEPS):
        counts = _routing(seed, most, n)
        xs = [_input(r, int(counts[r].sum()) * KIB, seed).view(-1, 256) for r in range(n)]
        want = framework_random.scatter_reference(xs, counts)
        for rank in range(n):
            _, y, back = results[rank][step]
            assert torch.equal(y, want[rank]), (step, rank)
            assert torch.equal(back, xs[rank]), (step, rank)


#: Kernel launches in a row (op, bytes per rank), on 3 ranks
LAUNCHES = (
    [("alltoall", 65536)] * 3
    + [("alltoallv", 65536)] * 2
    + [("reducescatter", 65536)] * 3
    + [("allgather", 1024), ("alltoall", 65536)]
)
RSS = "reduce_scatter_single"


@pytest.mark.parametrize("reduce", ["exact", "native"])
def test_a_kernel_all_to_all_launched_again_rides_in_its_predicted_check(
    reduce: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The task check of an AlltoAll, AlltoAllV or exact ReduceScatter predicts the next one as
    an all-to-all carrying every rank's descriptor and round-0 piece for each peer: the same
    launch again is one process-group call instead of two. AlltoAllV's largest piece (32 KiB)
    is larger than AlltoAll's (21 KiB): one wasted call; the exact ReduceScatter's fit. A
    native ReduceScatter's check rides, its round is the process group's. The emulator's bytes
    (on A3, which has AlltoAllV)."""
    monkeypatch.setenv("HCCL_PY_REDUCE", reduce)
    gloo = hp.run(first_round.launches_in_a_row, world_size=3, backend="gloo", timeout=TIMEOUT,
                  args=(LAUNCHES,), platform="A3")  # fmt: skip
    emu = hp.run(first_round.launches_in_a_row, world_size=3, timeout=TIMEOUT, args=(LAUNCHES,),
                 platform="A3")  # fmt: skip
    first, again, wasted = [AG, A2A], [A2A], [A2A, AG, A2A]
    exact = reduce == "exact"
    scatters = [again] * 3 if exact else [[A2A, RSS], [AG, RSS], [AG, RSS]]
    want = [first, again, again, wasted, again, *scatters, [A2A if exact else AG], first]
    for rank in range(3):
        assert [calls for calls, _ in gloo[rank]] == want, rank
        for i, ((_, ours), (_, theirs)) in enumerate(zip(gloo[rank], emu[rank], strict=True)):
            assert torch.equal(ours, theirs), (rank, i, LAUNCHES[i])


#: Exact AllReduce launches in a row (bytes per rank): split ones (more than 64 KiB), and
#: 64 KiB ones, whose rows widen instead
ALL_REDUCES = (
    [("allreduce", 262144)] * 3 + [("allreduce", 65536)] * 2 + [("allreduce", 1 << 20)] * 2
)


@pytest.mark.parametrize("reduce", ["exact", "native"])
def test_a_split_allreduce_launched_again_rides_its_reduce_scatter_in_its_check(
    reduce: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An exact AllReduce above 64 KiB reduce-scatters, then all-gathers: launched again, its
    task check carries each rank's chunk for each peer (the all-to-all it predicted), so the
    launch is two calls instead of three. 64 KiB widens the rows instead (one call from the
    second launch); native reductions keep the process group's all_reduce. The emulator's bytes."""
    monkeypatch.setenv("HCCL_PY_REDUCE", reduce)
    gloo = hp.run(first_round.launches_in_a_row, world_size=3, backend="gloo", timeout=TIMEOUT,
                  args=(ALL_REDUCES,))  # fmt: skip
    emu = hp.run(first_round.launches_in_a_row, world_size=3, timeout=TIMEOUT, args=(ALL_REDUCES,))
    split, rides = [AG, A2A, AG], [A2A, AG]
    if reduce == "exact":
        want = [split, rides, rides, [A2A, A2A, AG], [AG], split, rides]
    else:
        want = [[AG, "all_reduce"]] * len(ALL_REDUCES)
    for rank in range(3):
        assert [calls for calls, _ in gloo[rank]] == want, rank
        for i, ((_, ours), (_, theirs)) in enumerate(zip(gloo[rank], emu[rank], strict=True)):
            assert torch.equal(ours, theirs), (rank, i, ALL_REDUCES[i])


#: all_reduce calls in a row (KiB per rank, extra elements): above 64 KiB they split
FRAMEWORK_ALL_REDUCES = [(256, 0)] * 3 + [(64, 0), (64, 1), (1024, 0), (1024, 0), (300, 2)]


def framework_all_reduces() -> list[tuple[list[str], torch.Tensor]]:
    """Each call's process-group calls and result; sums whose rounding depends on the order."""
    rank, calls, out = hp.get_rank(), count_calls(), []
    for step, (kib, extra) in enumerate(FRAMEWORK_ALL_REDUCES):
        g = torch.Generator().manual_seed(100 * step + rank)
        x = torch.randn(kib * 256 + extra, generator=g) * 10 ** torch.randn(1, generator=g)
        calls.clear()
        hp.all_reduce(x)
        out.append((list(calls), x))
    return out


def test_a_split_all_reduce_called_again_is_two_calls() -> None:
    """An exact all_reduce above 64 KiB called again: its reduce-scatter rides in the predicted
    exchange (each rank's chunk for the rank that reduces it) and the reduced chunks in a
    second one, two calls instead of three; bit for bit the emulator's, numpy's sums."""
    n = 3
    gloo = hp.run(framework_all_reduces, world_size=n, backend="gloo", timeout=TIMEOUT)
    emu = hp.run(framework_all_reduces, world_size=n, timeout=TIMEOUT)
    task, two = [AG, A2A, AG], [A2A, A2A]
    # 64 KiB widens the rows; one element more splits, after the check in the predicted
    # all-to-all; 1 MiB's chunks do not fit the blocks 64 KiB's predicted: one wasted call
    want = [task, two, two, [A2A, A2A, AG], task, [A2A, *task], two, two]
    for rank in range(n):
        assert [calls for calls, _ in gloo[rank]] == want, rank
        for step, ((_, ours), (_, theirs)) in enumerate(zip(gloo[rank], emu[rank], strict=True)):
            assert ours.view(torch.int32).tolist() == theirs.view(torch.int32).tolist(), step
    for step, (kib, extra) in enumerate(FRAMEWORK_ALL_REDUCES):
        xs = []
        for r in range(n):
            g = torch.Generator().manual_seed(100 * step + r)
            x = torch.randn(kib * 256 + extra, generator=g) * 10 ** torch.randn(1, generator=g)
            xs.append(x.numpy().astype(np.float64))
        np.testing.assert_allclose(gloo[0][step][1].numpy(), sum(xs), rtol=1e-5, atol=1e-3)


def one_rank_offers_no_pieces() -> list[float]:
    """Three 1 KiB alltoall_single calls in which rank 0 sends all its rows to rank 1; at the
    third, rank 1 offers no pieces while its input still rides (as a rank does whose pieces
    are more than an exchange carries): rank 1 sends its payload alone (its whole input behind
    its record), rank 0 its pieces, one of them empty."""
    import hccl_py.framework._carry as carry

    rank, rows = hp.get_rank(), 64
    for step in range(3):
        if step == 2 and rank == 1:
            carry.MAX_EXCHANGE_BYTES = 0
        x = torch.arange(rows * 4, dtype=torch.float32).view(rows, 4) + 1000 * rank + 100 * step
        ins = [0, rows] if rank == 0 else [rows // 2, rows // 2]
        outs = [0, rows // 2] if rank == 0 else [rows, rows // 2]
        y = torch.full((sum(outs), 4), float("nan"))
        hp.alltoall_single(x, y, ins, outs)
    return y.view(-1).tolist()


def test_ranks_that_differ_in_offering_pieces_all_run_the_task() -> None:
    """The pieces that came in an all-to-all where not every rank sent pieces differ from
    receiver to receiver (rank 1 got all of rank 0's input, rank 0 none): they are dropped, so
    that no rank takes a piece for its sender's whole input and computes its output while its
    peer runs the op's task (rank 0 failed, its peer gone). numpy's results."""
    got = hp.run(one_rank_offers_no_pieces, world_size=2, backend="gloo", timeout=TIMEOUT)
    x0 = np.arange(256, dtype=np.float32) + 200
    x1 = np.arange(256, dtype=np.float32) + 1200
    assert got[0] == x1[:128].tolist()
    assert got[1] == x0.tolist() + x1[128:].tolist()


#: Dtypes of :func:`layouts_on_a_permuted_group`, three calls each, largest first (each fits)
LAYOUT_DTYPES = [torch.float64, torch.bfloat16, torch.int8, torch.bool]


def _layout_input(rank: int, step: int, dtype: torch.dtype) -> torch.Tensor:
    """Rank ``rank``'s 640 x 9 input of call ``step``."""
    values = torch.randint(
        -100, 100, (640, 9), generator=torch.Generator().manual_seed(step + 97 * rank)
    )
    return values.bool() if dtype == torch.bool else values.to(dtype)


def _layout_splits(n: int, rank: int, step: int) -> list[int]:
    """Uneven splits of 640 rows; every third call, all of them to one peer (empty pieces)."""
    if step % 3 == 0:
        return [640 if j == (rank + 1) % n else 0 for j in range(n)]
    cuts = sorted(np.random.default_rng(10 * step + rank).integers(0, 641, size=n - 1).tolist())
    return np.diff([0, *cuts, 640]).tolist()


def layouts_on_a_permuted_group() -> list[tuple[list[str], torch.Tensor]]:
    """alltoall_single on ``hp.new_group([2, 0, 1])`` whose process group sorts its ranks (its
    order is not the domain's), each call followed by one on the world group: uneven splits,
    empty pieces, inputs that are not contiguous, require grad, or are the output."""
    import hccl_py.backends.dist.server as backend_dist

    backend_dist._NEW_GROUP_SORTS = False  # as torch versions without sort_ranks do
    group = hp.new_group([2, 0, 1])
    me, calls, out = group.rank_of(hp.get_rank()), count_calls(), []
    for step, dtype in enumerate(d for d in LAYOUT_DTYPES for _ in range(3)):
        x = _layout_input(me, step, dtype)
        ins = _layout_splits(3, me, step)
        outs = [_layout_splits(3, j, step)[me] for j in range(3)]
        if step % 3 == 1:
            x = x.t().contiguous().t()
        elif step % 3 == 2 and dtype.is_floating_point:
            x.requires_grad_(True)
        y = x if ins == outs else torch.zeros((sum(outs), 9), dtype=dtype)
        calls.clear()
        hp.alltoall_single(x, y, ins, outs, group=group)
        out.append((list(calls), y.detach().clone()))
        world = _input(hp.get_rank(), 24 * KIB, step)
        hp.alltoall_single(world, world)
        out.append(([], world))
    return out


def test_layouts_on_a_permuted_group_ride_as_numpy_moves_them() -> None:
    """Each call after the first rides in its predicted all-to-all (one process-group call on
    the sub-group), in every dtype and layout, with the world group's calls between them:
    numpy's rows, in the group's rank order."""
    results = hp.run(layouts_on_a_permuted_group, world_size=3, backend="gloo", timeout=TIMEOUT)
    members = [2, 0, 1]
    for rank in range(3):
        me = members.index(rank)
        for step, dtype in enumerate(d for d in LAYOUT_DTYPES for _ in range(3)):
            calls, y = results[rank][2 * step]
            want_calls = ([A2A], [A2A, AG, A2A]) if step else ([AG, A2A],)
            assert calls in want_calls, (rank, step, calls)
            pieces = []
            for j in range(3):
                sizes = _layout_splits(3, j, step)
                start = sum(sizes[:me])
                pieces.append(_layout_input(j, step, dtype)[start : start + sizes[me]])
            assert torch.equal(y, torch.cat(pieces)), (rank, step, dtype)
            sent = [_input(r, 24 * KIB, step).numpy() for r in range(3)]
            third = len(sent[0]) // 3
            want = np.concatenate([s[third * rank : third * (rank + 1)] for s in sent])
            np.testing.assert_array_equal(results[rank][2 * step + 1][1].numpy(), want)
        rode = [calls == [A2A] for calls, _ in results[rank][2::2]]
        assert sum(rode) >= 8, rode  # a larger piece than predicted costs one wasted call


def kernel_meets_framework(kernel_rank: int) -> None:
    """Two kernel AlltoAll launches (the next check is predicted), then rank ``kernel_rank``
    launches it again where the other rank calls alltoall_single."""
    first_round.launches_in_a_row([("alltoall", 65536)] * 2)
    if hp.get_rank() == kernel_rank:
        first_round.launches_in_a_row([("alltoall", 65536)])
    else:
        x = torch.ones(16 * KIB)
        hp.alltoall_single(x, torch.empty_like(x))


@pytest.mark.parametrize("kernel_rank", [0, 1])
def test_a_kernel_task_met_by_a_framework_call_in_a_predicted_exchange_is_reported(
    kernel_rank: int,
) -> None:
    """A kernel task's pieces meet a framework call's in the predicted all-to-all: both ranks
    report the mismatch, whichever rank launched the kernel (the kernel's rank may be stopped
    by its peer's report first: its core's Wait and its task check run in other threads)."""
    fn = partial(kernel_meets_framework, kernel_rank)
    for message in mismatch_on_every_rank(fn, 2, "gloo", TIMEOUT, relayed=True):
        assert "alltoall_single" in message and "AlltoAll" in message, message
