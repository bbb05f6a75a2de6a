"""Randomised framework collectives against references written from framework-ops.md.

World sizes 1 to 8, n_expert 1 to 4, random counts and split sizes with many
zeros, every supported dtype, row sizes (d_model) 1 to 16, sub-groups in
permuted rank order. Every rank rebuilds its inputs from the case's seed, so
the test process can compute the expected result of every rank independently
(block copies written from the spec's wording, compared bit for bit).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_framework_examples import BACKENDS, TIMEOUT

import hccl_py as hp


@pytest.fixture(autouse=True)
def _thread_runners(monkeypatch: pytest.MonkeyPatch) -> None:
    """Backward passes here wait for other ranks: the emulator's ranks run as threads."""
    monkeypatch.setenv("HCCL_PY_EMU_RUNNERS", "threads")


DTYPES = [
    torch.float16,
    torch.float32,
    torch.float64,
    torch.int32,
    torch.int64,
    torch.int8,
    torch.uint8,
    torch.bool,
    torch.bfloat16,
]
REDUCE_OPS = ["sum", "max", "min"]


def values(seed: int, rank: int, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """Deterministic data of one rank: small integers and halves (exact in every float type)."""
    gen = torch.Generator().manual_seed(seed * 1009 + rank)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=gen).bool()
    if dtype.is_floating_point:
        return (torch.randint(-16, 17, shape, generator=gen) / 2).to(dtype)
    info = torch.iinfo(dtype)
    low, high = max(info.min, -1000), min(info.max, 1000)
    return torch.randint(low, high + 1, shape, generator=gen, dtype=torch.int64).to(dtype)


def run(fn, n: int, *args, backend: str = "emu"):
    return hp.run(fn, world_size=n, backend=backend, timeout=TIMEOUT, args=args)


def equal(got: torch.Tensor, want: torch.Tensor) -> bool:
    return got.dtype == want.dtype and got.shape == want.shape and torch.equal(got, want)


# ------------------------------------------------------------------ global_scatter / gather


def moe_case(seed: int) -> tuple[int, int, int, torch.dtype, np.ndarray]:
    """``(world, n_expert, d_model, dtype, C)``; ``C[i, j, e]``: rows rank i sends to expert e of rank j."""
    rng = np.random.default_rng(seed)
    n, n_expert = 1 + seed % 8, 1 + (seed // 2) % 4
    counts = rng.integers(0, 4, size=(n, n, n_expert)) * (rng.random((n, n, n_expert)) > 0.3)
    if seed % 5 == 0:
        counts[0] = 0  # rank 0 sends nothing at all
    return n, n_expert, int(rng.integers(1, 17)), DTYPES[seed % len(DTYPES)], counts


def moe_rank(seed: int) -> tuple:
    """global_scatter, global_gather of the result, and (float types) the gradient of the scatter."""
    n, n_expert, d, dtype, counts = moe_case(seed)
    r = hp.get_rank()
    x = values(seed, r, (int(counts[r].sum()), d), dtype)
    x_before = x.clone()
    local = torch.from_numpy(counts[r].reshape(-1).copy())
    glob = torch.from_numpy(counts[:, r, :].reshape(-1).copy())
    if dtype.is_floating_point:
        x.requires_grad_(True)
    y = hp.global_scatter(x, local, glob)
    back = hp.global_gather(y, local, glob)
    grad = None
    if dtype.is_floating_point:
        (y * values(seed + 1, r, tuple(y.shape), dtype)).sum().backward()
        grad = x.grad
    return y.detach(), back.detach(), grad, equal(x.detach(), x_before)


def scatter_reference(xs: list[torch.Tensor], counts: np.ndarray) -> list[torch.Tensor]:
    """Card j's output: for each local expert e, for each card c, the rows card c sent to (j, e)."""
    n, _, n_expert = counts.shape
    outs = []
    for j in range(n):
        blocks = []
        for e in range(n_expert):
            for c in range(n):
                start = int(counts[c].reshape(-1)[: j * n_expert + e].sum())
                blocks.append(xs[c][start : start + counts[c, j, e]])
        outs.append(torch.cat(blocks))
    return outs


def gather_reference(ys: list[torch.Tensor], counts: np.ndarray) -> list[torch.Tensor]:
    """Card i's output: for each card j and expert e, the rows expert e of card j holds for card i."""
    n, _, n_expert = counts.shape
    outs = []
    for i in range(n):
        blocks = []
        for j in range(n):
            received = counts[:, j, :]  # received[c, e]: rows card j got from card c for expert e
            for e in range(n_expert):
                start = int(received[:, :e].sum() + received[:i, e].sum())
                blocks.append(ys[j][start : start + counts[i, j, e]])
        outs.append(torch.cat(blocks))
    return outs


@pytest.mark.parametrize("seed", range(27))
def test_global_scatter_and_gather_random(seed: int) -> None:
    n, _, d, dtype, counts = moe_case(seed)
    xs = [values(seed, r, (int(counts[r].sum()), d), dtype) for r in range(n)]
    want = scatter_reference(xs, counts)
    results = run(moe_rank, n, seed)
    for r, (y, back, _, untouched) in enumerate(results):
        assert equal(y, want[r]), f"rank {r}"
        assert equal(back, xs[r]), f"rank {r}: global_gather(global_scatter(x)) != x"
        assert untouched
    if dtype.is_floating_point:
        gs = [values(seed + 1, r, tuple(want[r].shape), dtype) for r in range(n)]
        for r, grad in enumerate(gather_reference(gs, counts)):
            assert equal(results[r][2], grad), f"rank {r}: x.grad"


# ------------------------------------------------------------------ alltoall_single


def a2a_case(seed: int) -> tuple[int, tuple[int, ...], torch.dtype, np.ndarray, bool]:
    """``(world, row shape, dtype, S, equal)``; ``S[i, j]``: rows rank i sends to rank j."""
    rng = np.random.default_rng(100 + seed)
    n = 1 + seed % 8
    row = tuple(int(v) for v in rng.integers(1, 5, size=seed % 3))
    even = seed % 4 == 3
    sends = np.full((n, n), 2) if even else rng.integers(0, 4, (n, n)) * (rng.random((n, n)) > 0.3)
    return n, row, DTYPES[seed % len(DTYPES)], sends, even


def a2a_rank(seed: int) -> tuple:
    n, row, dtype, sends, even = a2a_case(seed)
    r = hp.get_rank()
    data = values(seed, r, (int(sends[r].sum()), *row), dtype)
    before = data.clone()
    out = torch.full((int(sends[:, r].sum()), *row), 7, dtype=dtype)
    splits = (None, None) if even else (sends[r].tolist(), sends[:, r].tolist())
    task = hp.alltoall_single(data, out, *splits)
    return out, task.is_completed(), equal(data, before)


@pytest.mark.parametrize("seed", range(18))
def test_alltoall_single_random(seed: int) -> None:
    n, row, dtype, sends, _ = a2a_case(seed)
    ins = [values(seed, r, (int(sends[r].sum()), *row), dtype) for r in range(n)]
    offsets = np.cumsum(sends, axis=1) - sends
    for j, (out, done, untouched) in enumerate(run(a2a_rank, n, seed)):
        want = torch.cat([ins[i][offsets[i, j] : offsets[i, j] + sends[i, j]] for i in range(n)])
        assert equal(out, want), f"rank {j}"
        assert done and untouched


# ----------------------------------------------------- all_gather / all_reduce / reduce_scatter


def dense_case(seed: int) -> tuple[int, tuple[int, ...], torch.dtype, str]:
    rng = np.random.default_rng(200 + seed)
    n = 1 + seed % 8
    shape = tuple(int(v) for v in rng.integers(1, 5, size=1 + seed % 3))
    return n, shape, DTYPES[seed % len(DTYPES)], REDUCE_OPS[seed % 3]


def dense_rank(seed: int, transpose_output: bool) -> tuple:
    """all_gather_into_tensor, all_reduce and reduce_scatter_tensor of one case.

    With ``transpose_output`` the output tensors are non-contiguous views.
    """
    n, shape, dtype, op = dense_case(seed)
    r = hp.get_rank()
    x = values(seed, r, shape, dtype)
    x_before = x.clone()

    def output(*dims: int) -> torch.Tensor:
        if not transpose_output:
            return torch.zeros(dims, dtype=dtype)
        return torch.zeros(dims[::-1], dtype=dtype).permute(*reversed(range(len(dims))))

    gathered = output(n * shape[0], *shape[1:])
    hp.all_gather_into_tensor(gathered, x)
    reduced = output(*shape)
    reduced.copy_(x)
    hp.all_reduce(reduced, op=op)
    big = values(seed + 7, r, (n * shape[0], *shape[1:]), dtype)
    scattered = output(*shape)
    hp.reduce_scatter_tensor(scattered, big, op=op)
    return gathered, reduced, scattered, equal(x, x_before)


def reduce_reference(stacked: torch.Tensor, op: str) -> torch.Tensor:
    """Rank-wise reduction with numpy: exact integer arithmetic wrapping to the element type."""
    dtype = stacked.dtype
    if dtype == torch.bool:
        a = stacked.numpy()
        return torch.from_numpy(a.all(0) if op == "min" else a.any(0))
    wide = stacked.to(torch.float64 if dtype.is_floating_point else torch.int64).numpy()
    result = {"sum": wide.sum(0), "max": wide.max(0), "min": wide.min(0)}[op]
    return torch.from_numpy(np.ascontiguousarray(result)).to(dtype)


@pytest.mark.parametrize("transpose_output", [False, True])
@pytest.mark.parametrize("seed", range(9))
def test_dense_collectives_random(seed: int, transpose_output: bool) -> None:
    seed += 9 * transpose_output
    n, shape, dtype, op = dense_case(seed)
    xs = torch.stack([values(seed, r, shape, dtype) for r in range(n)])
    bigs = torch.stack([values(seed + 7, r, (n * shape[0], *shape[1:]), dtype) for r in range(n)])
    blocks = reduce_reference(bigs, op).view(n, *shape)
    for r, (gathered, reduced, scattered, untouched) in enumerate(
        run(dense_rank, n, seed, transpose_output)
    ):
        assert equal(gathered, xs.reshape(n * shape[0], *shape[1:])), f"rank {r}"
        assert equal(reduced, reduce_reference(xs, op)), f"rank {r}: all_reduce {op}"
        assert equal(scattered, blocks[r]), f"rank {r}: reduce_scatter_tensor {op}"
        assert untouched


# ------------------------------------------------------------------ sub-groups


GROUP = [3, 0, 2]  # a permuted sub-group of a 4-rank world: rank 3 is its rank 0


def group_counts() -> np.ndarray:
    """``C[i, j, e]`` of global_scatter in GROUP (group ranks, 2 experts per card)."""
    return np.array([[1, 0, 2, 1, k, 1] for k in range(len(GROUP))]).reshape(3, 3, 2)


def group_rows(r: int) -> torch.Tensor:
    return (
        torch.arange(int(group_counts()[GROUP.index(r)].sum()), dtype=torch.float32)[:, None]
        + 100 * r
    )


def group_rank() -> tuple | None:
    """Members of GROUP run every op in it; rank 1 is not a member and takes no part."""
    group = hp.new_group(GROUP)
    r = hp.get_rank()
    if r not in GROUP:
        return None
    me = GROUP.index(r)
    gathered = torch.zeros(6, dtype=torch.int32)
    hp.all_gather_into_tensor(gathered, torch.tensor([r, 10 * r], dtype=torch.int32), group=group)
    out = torch.zeros(3, dtype=torch.int64)
    hp.alltoall_single(torch.arange(3) + 10 * r, out, group=group)
    counts = group_counts()
    x = group_rows(r).requires_grad_(True)
    local = torch.from_numpy(counts[me].reshape(-1).copy())
    glob = torch.from_numpy(counts[:, me].reshape(-1).copy())
    y = hp.global_scatter(x, local, glob, group=group)
    (y * 2).sum().backward()
    total = torch.tensor([float(r)])
    hp.all_reduce(total, group=group)
    hp.barrier(group=group)
    return gathered, out, y.detach(), x.grad, total


@pytest.mark.parametrize("backend", BACKENDS)
def test_sub_group_in_permuted_order(backend: str) -> None:
    results = run(group_rank, 4, backend=backend)
    assert results[1] is None
    want = scatter_reference([group_rows(g) for g in GROUP], group_counts())
    for me, r in enumerate(GROUP):
        gathered, out, y, grad, total = results[r]
        assert gathered.tolist() == [3, 30, 0, 0, 2, 20]
        assert out.tolist() == [me + 10 * g for g in GROUP]
        assert equal(y, want[me])
        assert equal(grad, torch.full_like(grad, 2.0))
        assert total.tolist() == [5.0]
