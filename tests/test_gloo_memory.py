"""Peak memory of the gloo backend's rounds (issue 28, goal 5): no large temporaries of its own.

Each rank measures how far one op raises its resident high-water mark
(:func:`hccl_py.bench.memory.peak_rise`, every large temporary in fresh
pages), for hccl_py's op and for the torch.distributed calls that it makes on
gloo. The bound of each op is what raw gloo takes for its calls, plus what the
op needs by design (exact AllReduce: the reduced 1/n chunk; exact
ReduceScatter: the exchanged rows), plus 1 MiB. The exact
reductions are checked bit for bit against the emulator on the paths that
write straight into the receive buffer.
"""

from __future__ import annotations

from collections.abc import Callable

import cases
import pytest
import torch
import torch.distributed as dist

import hccl_py as hp
from hccl_py.bench import memory
from hccl_py.core.constants import hccl_dtype_of
from hccl_py.server.reduce import reduce_ranks

#: Each test is a unit of its own under xdist (conftest.py): none shares a module's jobs.
pytestmark = pytest.mark.spread

MIB = 1 << 20
#: Bytes of the receive block of one rank (AllReduce, ReduceScatter, AllGather's send block).
BLOCK = 8 * MIB
SLACK = MIB
FP32 = hp.HcclDataType.HCCL_DATA_TYPE_FP32
SUM = hp.HcclReduceOp.HCCL_REDUCE_SUM
#: torch.distributed's calls under their current names (the older ones are deprecated).
ALL_GATHER = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
REDUCE_SCATTER = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


def _kernel(xGM: hp.GmAddr, yGM: hp.GmAddr, tilingGM: hp.GmAddr, name: str, count: int) -> None:
    hccl = cases.init_hccl(hp.Hccl(), tilingGM, ops=[name])
    args = (count, FP32) if name in ("AllGather", "AlltoAll") else (count, FP32, SUM)
    hccl.Wait(getattr(hccl, name)[True](xGM, yGM, *args))
    hccl.Finalize()


def peaks(mode: str) -> dict[str, tuple[int, int]]:
    """Per rank: op -> (the rise of hccl_py's op, its bound), for ``HCCL_PY_REDUCE=mode``."""
    memory.fresh_temporaries()
    n, count, tiling = hp.get_world_size(), BLOCK // 4, cases.make_tiling()

    def ours(name: str, send: int, recv: int, prepare_count: int) -> int:
        x, y = torch.ones(send // 4), torch.zeros(recv // 4)
        return memory.peak_rise(lambda: hp.launch(_kernel, x, y, tiling, name, prepare_count))

    def raw(call: Callable[..., object], send: int, recv: int) -> int:
        x, y = torch.ones(send // 4), torch.zeros(recv // 4)
        return memory.peak_rise(lambda: call(y, x))

    ours("AllReduce", 4096, 4096, 1024)  # warm-up: connections, first launch
    gather = raw(ALL_GATHER, BLOCK // n, BLOCK)
    if mode == "native":
        return {
            "AllReduce": (
                ours("AllReduce", BLOCK, BLOCK, count),
                raw(lambda y, _: dist.all_reduce(y), 0, BLOCK),
            ),
            "ReduceScatter": (
                ours("ReduceScatter", n * BLOCK, BLOCK, count),
                raw(REDUCE_SCATTER, n * BLOCK, BLOCK),
            ),
        }
    return {
        "AllReduce": (ours("AllReduce", BLOCK, BLOCK, count), gather + BLOCK // n),
        "ReduceScatter": (
            ours("ReduceScatter", n * BLOCK, BLOCK, count),
            raw(dist.all_to_all_single, n * BLOCK, n * BLOCK) + n * BLOCK,
        ),
        "AllGather": (ours("AllGather", BLOCK // n, BLOCK, count // n), gather),
        "AlltoAll": (
            ours("AlltoAll", BLOCK, BLOCK, count // n),
            raw(dist.all_to_all_single, BLOCK, BLOCK),
        ),
    }


@pytest.mark.skipif(not memory.can_reset_peak(), reason="resets VmHWM (Linux /proc)")
@pytest.mark.parametrize("mode", ["exact", "native"])
def test_rounds_add_no_temporaries_beyond_gloo(mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HCCL_PY_REDUCE", mode)
    got = hp.run(peaks, world_size=2, backend="gloo", args=(mode,), timeout=60.0)
    over = {
        (rank, op): (round(rise / MIB, 1), round(bound / MIB, 1))
        for rank, ops in enumerate(got)
        for op, (rise, bound) in ops.items()
        if rise > bound + SLACK
    }
    assert not over, f"(rank, op): (peak rise, bound) in MiB beyond the bound + 1 MiB: {over}"


#: Element counts per dtype: multiples of 3 ranks (equal chunks) of at least 64 KiB.
EVEN_COUNTS = {torch.float32: 3 * 6_000, torch.float16: 3 * 12_000, torch.bfloat16: 3 * 12_000}


def _all_reduce_of(
    xGM: hp.GmAddr, yGM: hp.GmAddr, tilingGM: hp.GmAddr, count: int, dtype: int
) -> None:
    hccl = cases.init_hccl(hp.Hccl(), tilingGM, ops=["AllReduce"])
    hccl.Wait(hccl.AllReduce[True](xGM, yGM, count, dtype, SUM))
    hccl.Finalize()


def even_exact_all_reduces() -> list[torch.Tensor]:
    """Per rank: exact SUM AllReduces of equal chunks: out of place (the all-to-all lands in the
    receive buffer), in place (the all-gather does), and on a reversed group (neither)."""
    reverse = hp.new_group([2, 1, 0])
    gen = torch.Generator().manual_seed(hp.get_rank())
    tiling = cases.make_tiling()
    out = []
    for dtype, count in EVEN_COUNTS.items():
        x = (torch.randn(count, generator=gen) * 1000).to(dtype)
        y = torch.zeros_like(x)
        hp.launch(_all_reduce_of, x, y, tiling, count, hccl_dtype_of(dtype))
        in_place, reversed_group = x.clone(), x.clone()
        hp.all_reduce(in_place)
        hp.all_reduce(reversed_group, group=reverse)
        out += [y, in_place, reversed_group, x]
    return out


def test_exact_all_reduce_in_the_receive_buffer_is_bit_identical_to_the_emulator() -> None:
    gloo = hp.run(even_exact_all_reduces, world_size=3, backend="gloo", timeout=60.0)
    emu = hp.run(even_exact_all_reduces, world_size=3, backend="emu")
    for rank, (ours, theirs) in enumerate(zip(gloo, emu, strict=True)):
        for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
            assert torch.equal(a.view(torch.uint8), b.view(torch.uint8)), f"rank {rank}, case {i}"
    assert not torch.equal(gloo[0][0], gloo[0][3]), "the reduction ran"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int32, torch.int8])
@pytest.mark.parametrize(
    "op", [SUM, hp.HcclReduceOp.HCCL_REDUCE_MAX, hp.HcclReduceOp.HCCL_REDUCE_MIN]
)
def test_reduce_ranks_into_out_equals_reduce_ranks(dtype: torch.dtype, op: int) -> None:
    gen = torch.Generator().manual_seed(5)
    stacked = (torch.randn(4, 257, generator=gen) * 100).to(dtype)
    out = torch.empty(257, dtype=dtype)
    got = reduce_ranks(stacked, op, out=out)
    assert got is out
    assert torch.equal(out.view(torch.uint8), reduce_ranks(stacked, op).view(torch.uint8))
