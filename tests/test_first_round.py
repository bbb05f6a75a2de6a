"""A task's small first round carried by the task check's exchange on gloo
(hccl_py/backends/dist/first_round.py): the same results, one process-group call fewer."""

from __future__ import annotations

import dataclasses
import time

import cases
import numpy as np
import pytest
import torch
from expect import mismatch_on_every_rank
from pg_counter import count_calls

import hccl_py as hp
from hccl_py.backends.dist.gathered import ROW_BYTES
from hccl_py.backends.dist.settings import CARRY_ENV
from hccl_py.bench.calls import Step
from hccl_py.bench.ops import BENCH_OPS, plan
from hccl_py.bench.reference import REDUCE_OPS, TYPES

pytestmark = pytest.mark.spread

TIMEOUT = 30.0
OPS = ("allgather", "allreduce", "reducescatter", "alltoall", "alltoallv")


@pytest.mark.parametrize("carry", ["1", "0"])
def test_random_ops_match_the_reference_carried_or_not(
    carry: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every op, its strides, offsets, repeats, skipLocalRankCopy and commit modes, on 1 to 4
    ranks: round 0 computed from the exchange's rows (carry) and by the process group's own
    call (not) both give numpy's result."""
    monkeypatch.setenv(CARRY_ENV, carry)
    rng = np.random.default_rng(23)
    draw = lambda lo, hi: int(rng.integers(lo, hi + 1))  # noqa: E731
    batch = [cases.draw_case(draw, op, world) for op in cases.OPS for world in (1, 2, 3, 4)]
    cases.run_and_check(batch, "gloo", world_size=4)


def counted_calls(sizes: list[int]) -> dict[str, list[list[str]]]:
    """Per op and size, the process-group calls of one kernel launch on this rank (the launches
    in a row of :func:`launches_in_a_row`, op by op, each after a 1 KiB AllGather, whose check
    predicts nothing: each op's check starts from the narrow rows)."""
    ops = [(op, size) for op in OPS for size in sizes]
    launches = [launch for pair in ops for launch in (("allgather", 1024), pair)]
    out: dict[str, list[list[str]]] = {}
    for (op, _), (calls, _) in zip(ops, launches_in_a_row(launches)[1::2], strict=True):
        out.setdefault(op, []).append(calls)
    return out


@pytest.mark.parametrize("carry", ["1", "0"])
def test_a_small_first_round_costs_no_call_of_its_own(
    carry: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """1 KiB per rank: the exchange carries round 0, so the launch makes one process-group call
    (the exchange's all-gather) instead of two; 64 KiB does not fit and keeps the op's call."""
    monkeypatch.setenv(CARRY_ENV, carry)
    per_rank = hp.run(
        counted_calls,
        world_size=3,
        backend="gloo",
        timeout=TIMEOUT,
        platform="A3",
        args=([1024, 65536],),
    )
    own = {
        "allgather": "all_gather_single",
        "allreduce": "all_to_all_single",  # exact, 64 KiB: reduce-scatter then all-gather
        "reducescatter": "all_to_all_single",
        "alltoall": "all_to_all_single",
        "alltoallv": "all_to_all_single",
    }
    for rank, calls in enumerate(per_rank):
        for op, (small, large) in calls.items():
            assert large[0] == "all_gather_single" and own[op] in large[1:], (rank, op, large)
            expected = ["all_gather_single"] if carry == "1" else ["all_gather_single", own[op]]
            if op == "allreduce" and carry == "0":
                expected = ["all_gather_single", "all_gather_single"]  # exact, small: gathered
            assert small == expected, (rank, op, small)


def mismatched_sizes() -> list[float]:
    """Rank 0's AllGather fits in the exchange's row, rank 1's (2000 floats) does not."""
    from test_gloo_backend import _gather_kernel, _tiling

    count = 8 if hp.get_rank() == 0 else 2000
    x = torch.ones(count)
    y = torch.zeros(count * hp.get_world_size())
    hp.launch(_gather_kernel, x, y, _tiling(), [count])
    return y.tolist()


def test_a_rank_whose_round_fits_against_one_whose_does_not_is_a_mismatch() -> None:
    """The rows are equally wide whatever each rank sends: no gloo abort, both ranks name the
    two counts."""
    with pytest.raises(hp.WorldError) as info:
        hp.run(mismatched_sizes, world_size=2, backend="gloo", timeout=TIMEOUT)
    causes = info.value.root_causes
    assert sorted(causes) == [0, 1], causes
    for error in causes.values():
        assert isinstance(error, hp.HcclMismatchError), error
        assert "count=8" in str(error) and "count=2000" in str(error), error


def small_exact_reductions() -> list[torch.Tensor]:
    """FP16 and BF16 AllReduce and ReduceScatter of random values through the kernel API."""
    gen = torch.Generator().manual_seed(100 + hp.get_rank())
    out = []
    for name in ("fp16", "bfp16"):
        kind = TYPES[name]
        for op in ("allreduce", "reducescatter"):
            bench = plan(BENCH_OPS[op], hp.get_world_size(), 192, kind.size)
            step = Step("kernel", bench, kind, REDUCE_OPS["sum"])
            step.send.copy_(torch.rand(step.send.shape, generator=gen) * 1000 - 500)
            step.run()
            out.append(step.recv.clone())
    return out


def test_carried_reductions_are_bit_identical_to_the_emulator() -> None:
    """Small exact rounds reduced from the exchange's rows: the emulator's bytes."""
    gloo = hp.run(small_exact_reductions, world_size=3, backend="gloo", timeout=TIMEOUT)
    emu = hp.run(small_exact_reductions, world_size=3, backend="emu", timeout=TIMEOUT)
    for rank, (ours, theirs) in enumerate(zip(gloo, emu, strict=True)):
        for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
            assert torch.equal(a.view(torch.uint8), b.view(torch.uint8)), (rank, i)
    assert gloo[0][0].abs().sum() > 0, "the reduction ran"


def _prefix(counts: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(int(x) for x in np.concatenate([[0], np.cumsum(counts)[:-1]]))


def test_alltoallv_whose_rounds_fit_on_some_ranks_only() -> None:
    """Rank 0 sends 4.8 KiB, more than the exchange's row holds, its peers a few bytes: no rank
    computes round 0 from the rows (they decide alike), and the results are numpy's."""
    rng = np.random.default_rng(5)
    draw = lambda lo, hi: int(rng.integers(lo, hi + 1))  # noqa: E731
    like = cases.draw_case(draw, "AlltoAllV", 3)
    counts = ((1200, 5, 3), (2, 2, 2), (1, 0, 4))
    recv = tuple(tuple(counts[i][j] for i in range(3)) for j in range(3))
    case = dataclasses.replace(
        like,
        dtype=cases.ref.FP32,
        repeat=1,
        send_counts=counts,
        recv_counts=recv,
        sdispls=tuple(map(_prefix, counts)),
        rdispls=tuple(map(_prefix, recv)),
    )
    assert sum(counts[0]) * 4 > ROW_BYTES > sum(counts[1]) * 4
    cases.run_and_check([case, like], "gloo", platform="A3", world_size=3)


def returns_right_after_a_carried_task() -> list[float]:
    """A 1 KiB AllGather whose round rides in the exchange, the rank's last collective. Rank 0
    looks for absent peers only once rank 1 has returned from its function (forced here: on
    a loaded machine it happens by chance, between the exchange's end and its notice)."""
    from hccl_py.backends.dist import domain_queue
    from hccl_py.backends.dist.descriptors import returned_key

    if hp.get_rank() == 0:

        def wait(self, work) -> None:  # type: ignore[no-untyped-def]
            work.wait()
            for _ in range(2000):
                if self.store.check([returned_key(1)]):
                    break
                time.sleep(0.01)
            self.check()

        domain_queue.Absentees.wait = wait
    kind = TYPES["fp32"]
    step = Step("kernel", plan(BENCH_OPS["allgather"], 2, 1024, kind.size), kind, REDUCE_OPS["sum"])
    step.run()
    return step.recv[:4].tolist()


def test_a_peer_that_returned_after_the_carried_exchange_is_not_absent() -> None:
    """Rank 1 took part in the exchange, got its round and returned: rank 0, still in the
    exchange's wait, must not report it as having returned without preparing the task."""
    got = hp.run(returns_right_after_a_carried_task, world_size=2, backend="gloo", timeout=TIMEOUT)
    assert len(got) == 2 and got[0] == got[1], got


@pytest.mark.parametrize(
    "value, domain, joined",
    [(b'{"g":3,"h":0}', "g", 3), (b'{"g":3}', "h", -1), (None, "g", None)],
    ids=["joined", "other-domain", "not-returned"],
)
def test_what_a_returned_peer_joined_is_read_back(
    value: bytes | None, domain: str, joined: int | None
) -> None:
    from torch.distributed import HashStore

    from hccl_py.backends.dist.descriptors import read_joined, returned_key, returned_value

    store = HashStore()
    if value is not None:
        store.set(returned_key(5), value)
    assert read_joined(store, 5, domain) == joined
    assert returned_value({"g": 3, "h": 0}) == b'{"g":3,"h":0}'


@pytest.mark.parametrize("forged", [b"1", b'{"g":"3"}', b'{"g":-2}', b"\xff"])
def test_a_forged_returned_record_is_refused(forged: bytes) -> None:
    from torch.distributed import HashStore

    from hccl_py.backends.dist.descriptors import read_joined, returned_key
    from hccl_py.launcher.sealed import ForgedValueError

    store = HashStore()
    store.set(returned_key(2), forged)
    with pytest.raises(ForgedValueError, match="task positions"):
        read_joined(store, 2, "g")


def test_rows_of_the_wrong_size_name_rank_handle_op_and_round() -> None:
    """Rows that disagree with the receive blocks (the descriptors agreed, so only a fault of
    ours could cause it) are an error naming where, never a silent partial copy."""
    import types

    from hccl_py.backends.dist import first_round

    task = types.SimpleNamespace(
        rank=1, handle=3, domain_name="g", domain=types.SimpleNamespace(ranks=[4, 5]),
        spec=types.SimpleNamespace(name="AllGather"), describe=lambda: "AllGather(FP32, count=2)",
    )  # fmt: skip
    with pytest.raises(hp.HcclError) as info:
        first_round._same_size(task, 3, 8)
    err = info.value
    assert (err.rank, err.domain, err.handle, err.op, err.round) == (5, "g", 3, "AllGather", 0)
    assert "received 3 bytes in the descriptor exchange where its receive blocks hold 8" in str(err)


#: Launches in a row: 64 KiB AllGathers, an AlltoAll between them, and 1 MiB AllGathers, whose
#: round 0 is as wide as a row gets beside its descriptor
#: (:data:`~hccl_py.backends.dist.gathered.MAX_PAYLOAD_BYTES`), and 2 MiB ones, wider.
IN_A_ROW = [("allgather", 65536)] * 3 + [("alltoall", 1024)] + [("allgather", 65536)] * 2
IN_A_ROW += [("allgather", 1 << 20)] * 2 + [("allgather", 2 << 20)] * 2


def launches_in_a_row(ops: list[tuple[str, int]]) -> list[tuple[list[str], torch.Tensor]]:
    """Each launch's process-group calls and received bytes, the send buffers drawn per launch."""
    calls = count_calls()
    gen = torch.Generator().manual_seed(7 + hp.get_rank())
    kind, out = TYPES["fp32"], []
    for op, size in ops:
        step = Step("kernel", plan(BENCH_OPS[op], hp.get_world_size(), size, kind.size), kind,
                    REDUCE_OPS["sum"])  # fmt: skip
        step.send.copy_(torch.randint(-1000, 1000, step.send.shape, generator=gen))
        calls.clear()
        step.run()
        out.append((list(calls), step.recv.clone()))
    return out


@pytest.mark.parametrize("carry", ["1", "0"])
def test_an_allgather_launched_again_rides_in_a_row_as_wide_as_its_round(
    carry: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a 64 KiB AllGather, the domain's next exchange is as wide as its round 0: the same
    launch again makes one process-group call instead of two. Another op makes the row narrow
    again; 1 MiB rides from its second launch, 2 MiB never. Every launch's bytes are the
    emulator's."""
    monkeypatch.setenv(CARRY_ENV, carry)
    gloo = hp.run(launches_in_a_row, world_size=3, backend="gloo", timeout=TIMEOUT,
                  args=(IN_A_ROW,))  # fmt: skip
    emu = hp.run(launches_in_a_row, world_size=3, backend="emu", timeout=TIMEOUT,
                 args=(IN_A_ROW,))  # fmt: skip
    two, one = ["all_gather_single"] * 2, ["all_gather_single"]
    # after the AlltoAll, the check travels in the all-to-all it predicted (test_framework_predicted)
    predicted = ["all_to_all_single", "all_gather_single"]
    carried = [two, one, one, one, predicted, one, two, one, two, two] if carry == "1" else [
        two] * 3 + [["all_gather_single", "all_to_all_single"]] + [two] * 6  # fmt: skip
    for rank in range(3):
        assert [calls for calls, _ in gloo[rank]] == carried, rank
        for i, ((_, ours), (_, theirs)) in enumerate(zip(gloo[rank], emu[rank], strict=True)):
            assert torch.equal(ours, theirs), (rank, i, IN_A_ROW[i])


ALL_REDUCES = [("allreduce", 65536)] * 3 + [("allreduce", 131072)] + [("allreduce", 16384)] * 2


@pytest.mark.parametrize("reduce", ["exact", "native"])
def test_an_exact_allreduce_launched_again_rides_in_a_row_as_wide_as_its_round(
    reduce: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An exact AllReduce of up to 64 KiB widens the rows as an AllGather does (it gathers every
    rank's input anyway): the same launch again is one call instead of three (the check, then
    the split's all-to-all and all-gather) or two; 128 KiB does not ride. Native reductions
    keep the process group's all_reduce. Every launch's bytes are the emulator's."""
    monkeypatch.setenv("HCCL_PY_REDUCE", reduce)
    gloo = hp.run(launches_in_a_row, world_size=3, backend="gloo", timeout=TIMEOUT,
                  args=(ALL_REDUCES,))  # fmt: skip
    emu = hp.run(launches_in_a_row, world_size=3, timeout=TIMEOUT, args=(ALL_REDUCES,))
    ag, split = "all_gather_single", ["all_gather_single", "all_to_all_single", "all_gather_single"]
    if reduce == "exact":
        # after the split 128 KiB one, the check travels in the all-to-all it predicted
        want = [split, [ag], [ag], split, ["all_to_all_single", ag], [ag]]
    else:
        want = [[ag, "all_reduce"]] * 6
    for rank in range(3):
        assert [calls for calls, _ in gloo[rank]] == want, rank
        for i, ((_, ours), (_, theirs)) in enumerate(zip(gloo[rank], emu[rank], strict=True)):
            assert torch.equal(ours, theirs), (rank, i, ALL_REDUCES[i])


def framework_after_a_wide_row() -> str:
    """Both ranks launch a 64 KiB AllGather (the next row is wide); then rank 0 launches it
    again and rank 1 calls ``all_gather_into_tensor``: the rows must still be equally wide."""
    launches_in_a_row([("allgather", 65536)])
    if hp.get_rank() == 0:
        launches_in_a_row([("allgather", 65536)])
    else:
        hp.all_gather_into_tensor(torch.zeros(8), torch.ones(4))
    return "no report"


def test_a_framework_collective_meets_a_wide_row_with_a_report() -> None:
    """A wide row is wide on every rank, whichever collective the next exchange belongs to:
    a kernel task met by a framework collective is reported, not a gloo abort."""
    for text in mismatch_on_every_rank(
        framework_after_a_wide_row, 2, "gloo", TIMEOUT, relayed=True
    ):
        assert "all_gather_into_tensor" in text and "kernel task #1" in text, text
