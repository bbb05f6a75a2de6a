"""The worked examples of framework-ops.md, with their exact values, on the emulator and on gloo.

Also: asynchronous handles complete only on ``wait()`` (a late, poisoning
emulator shows NaN before it), the samples reproduce the examples, and the
ops work on every platform profile although AlltoAllV is no kernel API call on A2.
"""

from __future__ import annotations

import importlib
import re
import runpy
import threading
from pathlib import Path

import pytest
import torch
import torch.distributed
from hccl_py.backends.emu import wait_until

import hccl_py as hp


@pytest.fixture(autouse=True)
def _thread_runners(monkeypatch: pytest.MonkeyPatch) -> None:
    """Backward passes here wait for other ranks: the emulator's ranks run as threads."""
    monkeypatch.setenv("HCCL_PY_EMU_RUNNERS", "threads")


def _gloo_missing() -> str | None:
    """Why the gloo backend cannot be used, or None when it imports."""
    try:
        importlib.import_module("hccl_py.backends.dist")
    except ImportError as exc:
        return f"the gloo backend (hccl_py.backends.dist) does not import: {exc}"
    return None


#: Backends every example runs on; gloo is skipped only when its module does not import.
BACKENDS = [
    "emu",
    pytest.param(
        "gloo", marks=pytest.mark.skipif(_gloo_missing() is not None, reason=str(_gloo_missing()))
    ),
]
TIMEOUT = 20.0
#: A sample's verdict line: ``rank R: <case> PASS|FAIL|SKIP ...``.
VERDICT = re.compile(r"^rank (\d+): \S+ +(PASS|FAIL|SKIP)\b")
SAMPLES = Path(__file__).resolve().parent.parent / "samples"


def run(fn, world_size: int = 2, backend: str = "emu", **kwargs):
    """``hp.run`` with the tests' timeout."""
    return hp.run(fn, world_size=world_size, backend=backend, timeout=TIMEOUT, **kwargs)


# ------------------------------------------------------------------ rank functions


def mindspore_all_gather() -> tuple:
    out = torch.zeros([4, 8], dtype=torch.float32)
    ret = hp.all_gather_into_tensor(out, torch.ones([2, 8], dtype=torch.float32))
    return ret, out


def paddle_alltoall_equal() -> torch.Tensor:
    data = torch.arange(2, dtype=torch.int64) + hp.get_rank() * 2
    out = torch.empty([2], dtype=torch.int64)
    task = hp.alltoall_single(data, out)
    assert task.is_completed()
    return out


def paddle_alltoall_uneven() -> tuple:
    rank = hp.get_rank()
    data = torch.ones([3, 2], dtype=torch.float32) * rank
    out = torch.empty([(rank + 1) * 2, 2], dtype=torch.float32)
    task = hp.alltoall_single(data, out, [1, 2], [rank + 1, rank + 1], sync_op=False)
    pending = task.is_completed()
    task.wait()
    return pending, task.is_completed(), out


def paddle_global_gather() -> tuple:
    x = torch.tensor([[1, 2], [3, 4], [5, 6], [7, 8], [9, 10]], dtype=torch.float32)
    x.requires_grad_(True)
    counts = [2, 1, 1, 1] if hp.get_rank() == 0 else [1, 1, 2, 1]
    local_count = torch.tensor(counts, dtype=torch.int64)
    global_count = torch.tensor(counts, dtype=torch.int64)
    a = hp.global_gather(x, local_count, global_count)
    c = a * a
    c.sum().backward()
    return a.detach(), x.grad


# ------------------------------------------------------------------ the examples


@pytest.mark.parametrize("backend", BACKENDS)
def test_mindspore_all_gather_into_tensor(backend: str) -> None:
    for ret, out in run(mindspore_all_gather, backend=backend):
        assert ret is None
        assert out.dtype == torch.float32
        assert torch.equal(out, torch.ones([4, 8]))


@pytest.mark.parametrize("backend", BACKENDS)
def test_paddle_alltoall_single_equal_splits(backend: str) -> None:
    outs = run(paddle_alltoall_equal, backend=backend)
    assert outs[0].tolist() == [0, 2]
    assert outs[1].tolist() == [1, 3]


@pytest.mark.parametrize("backend", BACKENDS)
def test_paddle_alltoall_single_uneven_async(backend: str) -> None:
    (p0, done0, out0), (p1, done1, out1) = run(paddle_alltoall_uneven, backend=backend)
    assert (p0, p1, done0, done1) == (False, False, True, True)
    assert out0.tolist() == [[0, 0], [1, 1]]
    assert out1.tolist() == [[0, 0], [0, 0], [1, 1], [1, 1]]


@pytest.mark.parametrize("backend", BACKENDS)
def test_paddle_global_gather_and_gradient(backend: str) -> None:
    (a0, g0), (a1, g1) = run(paddle_global_gather, backend=backend)
    assert a0.tolist() == [[1, 2], [3, 4], [7, 8], [1, 2], [7, 8]]
    assert a1.tolist() == [[5, 6], [9, 10], [3, 4], [5, 6], [9, 10]]
    two_x = [[2, 4], [6, 8], [10, 12], [14, 16], [18, 20]]
    assert g0.tolist() == two_x
    assert g1.tolist() == two_x


# ------------------------------------------------------- async handles and poisoning


def _start_all_gather(rank: int) -> tuple:
    out = torch.zeros(4, 3)
    work = hp.all_gather_into_tensor(out, torch.full((2, 3), float(rank + 1)), async_op=True)
    return work, out, torch.tensor([1.0, 1, 2, 2]).repeat_interleave(3).view(4, 3)


def _start_all_reduce(rank: int) -> tuple:
    t = torch.full((5,), float(rank + 1))
    return hp.all_reduce(t, async_op=True), t, torch.full((5,), 3.0)


def _start_reduce_scatter(rank: int) -> tuple:
    out = torch.zeros(2)
    work = hp.reduce_scatter_tensor(out, torch.arange(4.0) * (rank + 1), async_op=True)
    return work, out, torch.tensor([0.0, 3.0]) if rank == 0 else torch.tensor([6.0, 9.0])


def _start_uneven_alltoall(rank: int) -> tuple:
    """Every rank sends 1 row to rank 0 and 3 rows to rank 1."""
    data = torch.arange(8, dtype=torch.float32).view(4, 2) + 10 * rank
    out = torch.zeros(2 if rank == 0 else 6, 2)
    work = hp.alltoall_single(data, out, [1, 3], [1 + 2 * rank] * 2, sync_op=False)
    expected = (
        [[0, 1], [10, 11]] if rank == 0 else [[2, 3], [4, 5], [6, 7], [12, 13], [14, 15], [16, 17]]
    )
    return work, out, torch.tensor(expected, dtype=torch.float32)


STARTS = {
    "all_gather_into_tensor": _start_all_gather,
    "alltoall_single": _start_uneven_alltoall,
    "all_reduce": _start_all_reduce,
    "reduce_scatter_tensor": _start_reduce_scatter,
}


def read_before_wait(name: str, rank0_read: threading.Event) -> tuple:
    """Start an async op, read its output before wait() (rank 0), then wait and read again.

    Rank 1 holds back its wait until rank 0 has read, so under the late
    schedule nothing runs the round before that read.
    """
    rank = hp.get_rank()
    work, out, expected = STARTS[name](rank)
    before = out.clone()
    done_before = work.is_completed()
    if rank == 0:
        rank0_read.set()
    else:
        wait_until(rank0_read.is_set, "rank 0 has read")
    work.wait()
    return before, done_before, out, expected


@pytest.mark.parametrize("name", sorted(STARTS))
def test_output_read_before_wait_is_poisoned(name: str) -> None:
    event = threading.Event()
    results = run(read_before_wait, schedule="late", poison=True, args=(name, event))
    before, done_before, out, expected = results[0]
    assert not done_before
    assert torch.isnan(before).all(), before
    for _, _, out, expected in results:
        assert torch.equal(out, expected)


def in_place_all_gather() -> torch.Tensor:
    """The input is this rank's block of the output, as torch's in-place form allows."""
    r = hp.get_rank()
    out = torch.zeros(4, 3)
    mine = out[2 * r : 2 * r + 2]
    mine.fill_(r + 1.0)
    hp.all_gather_into_tensor(out, mine)
    return out


def test_in_place_all_gather_survives_poisoning() -> None:
    want = torch.tensor([1.0, 1, 2, 2]).repeat_interleave(3).view(4, 3)
    for out in run(in_place_all_gather, schedule="late", poison=True):
        assert torch.equal(out, want)


def outstanding_handles() -> tuple:
    """Four asynchronous ops in flight at once, waited for in reverse order."""
    r = hp.get_rank()
    gathered = torch.zeros(4)
    w1 = hp.all_gather_into_tensor(gathered, torch.full((2,), float(r)), async_op=True)
    reduced = torch.full((3,), r + 1.0)
    w2 = hp.all_reduce(reduced, op=torch.distributed.ReduceOp.MAX, async_op=True)
    scattered = torch.zeros(1, dtype=torch.int64)  # int64: AllGather and a local reduction
    w3 = hp.reduce_scatter_tensor(scattered, torch.tensor([r, 10 * r]), async_op=True)
    w4 = hp.barrier(async_op=True)
    for work in (w4, w3, w2, w1, w1):
        assert work.wait() is True
    return gathered, reduced, scattered, [w.is_completed() for w in (w1, w2, w3, w4)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_outstanding_handles_complete_in_any_order(backend: str) -> None:
    results = run(outstanding_handles, backend=backend)
    for r, (gathered, reduced, scattered, done) in enumerate(results):
        assert gathered.tolist() == [0, 0, 1, 1]
        assert reduced.tolist() == [2, 2, 2]
        assert scattered.tolist() == [[1], [10]][r]
        assert done == [True] * 4


# ------------------------------------------------------------- platforms and samples


@pytest.mark.parametrize("platform", ["A2", "A3", "950"])
def test_examples_work_on_every_platform(platform: str) -> None:
    outs = run(paddle_alltoall_uneven, platform=platform)
    assert outs[1][2].tolist() == [[0, 0], [0, 0], [1, 1], [1, 1]]
    (a0, g0), _ = run(paddle_global_gather, platform=platform)
    assert a0.tolist() == [[1, 2], [3, 4], [7, 8], [1, 2], [7, 8]]


@pytest.mark.parametrize(
    ("script", "ranks"),
    [
        ("mindspore_all_gather_into_tensor.py", 2),
        ("paddle_alltoall_single.py", 2),
        ("paddle_global_gather.py", 2),
        ("moe_dispatch_combine.py", 4),
    ],
)
def test_sample_passes(script: str, ranks: int, capsys: pytest.CaptureFixture, monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(SAMPLES))
    monkeypatch.setenv("HCCL_PY_BACKEND", "emu")
    monkeypatch.delenv("HCCL_PY_WORLD_SIZE", raising=False)
    with pytest.raises(SystemExit) as exit_info:
        runpy.run_path(str(SAMPLES / script), run_name="__main__")
    lines = capsys.readouterr().out.strip().splitlines()
    assert exit_info.value.code == 0, lines
    verdicts = [m for line in lines if (m := VERDICT.match(line))]
    assert {int(m[1]) for m in verdicts} == set(range(ranks)), lines
    assert all(m[2] == "PASS" for m in verdicts), lines


@pytest.mark.parametrize("backend", BACKENDS)
def test_moe_sample_matches_its_reference(backend: str, monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(SAMPLES))
    sample = importlib.import_module("moe_dispatch_combine")
    lines = [line for rank_lines in run(sample.main, 4, backend) for line in rank_lines]
    verdicts = [VERDICT.match(line) for line in lines]
    assert [(int(m[1]), m[2]) for m in verdicts] == [(r, "PASS") for r in range(4) for _ in "12"]
