"""One benchmark sweep: the sizes, what every rank times at each size, and the merged rows.

:func:`rank_sweep` runs on every rank (a thread of the emulator or a process
of gloo/HCCL): per size it builds the buffers, runs the warm-up iterations,
meets the other ranks at a barrier, times ``iters`` iterations (the row's
time is their median), then runs one
more iteration on a poisoned output and counts the elements that differ from
the numpy reference. :func:`merge` turns the per-rank lists into one row per
size: the slowest rank's time (an op ends when its last rank ends) and the sum
of the wrong elements.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import torch

import hccl_py as hp

from .calls import Step
from .ops import BENCH_OPS, algbw, busbw, plan
from .reference import REDUCE_OPS, TYPE_ALIASES, TYPES, clear_caches, count_wrong, expected


@dataclass(frozen=True)
class Options:
    """What one sweep measures (the command line's flags, checked)."""

    op: str = "allgather"
    api: str = "kernel"
    dtype: str = "fp32"
    redop: str = "sum"
    min_bytes: int = 1024
    max_bytes: int = 1 << 20
    step_factor: int = 2
    step_bytes: int = 0
    iters: int = 20
    warmup: int = 5
    check: bool = True
    repeat: int = 1
    block_dim: int = 1
    progress: bool = False

    def __post_init__(self) -> None:
        if self.op not in BENCH_OPS:
            raise ValueError(f"unknown op {self.op!r}; choose one of {sorted(BENCH_OPS)}")
        if self.api not in ("kernel", "framework"):
            raise ValueError(f"api must be 'kernel' or 'framework', not {self.api!r}")
        dtype = TYPE_ALIASES.get(self.dtype, self.dtype)
        if dtype not in TYPES:
            raise ValueError(f"unknown data type {self.dtype!r}; choose one of {sorted(TYPES)}")
        object.__setattr__(self, "dtype", dtype)
        if self.redop not in REDUCE_OPS:
            raise ValueError(
                f"unknown reduce op {self.redop!r}; choose one of {sorted(REDUCE_OPS)}"
            )
        if not 0 < self.min_bytes <= self.max_bytes:
            raise ValueError(
                f"need 0 < minimum bytes <= maximum bytes, got {self.min_bytes} and {self.max_bytes}"
            )
        if self.step_bytes < 0 or (self.step_bytes == 0 and self.step_factor < 2):
            raise ValueError("need a step factor >= 2 or a step of bytes > 0")
        for what, value, least in (
            ("iterations (-n/--iters)", self.iters, 1),
            ("warm-up iterations (-w/--warmup-iters)", self.warmup, 0),
            ("repeat", self.repeat, 1),
            ("block dim (--block-dim)", self.block_dim, 1),
        ):
            if value < least:
                raise ValueError(f"{what} must be >= {least}, not {value}")
        if self.api == "framework" and self.repeat != 1:
            raise ValueError("--repeat applies to --api kernel only (a framework call is one op)")

    def sizes(self) -> list[int]:
        """Bytes per rank per round, from ``min_bytes`` to ``max_bytes`` (hccl_test's -b/-e/-f/-i)."""
        out, size = [], self.min_bytes
        while size <= self.max_bytes:
            out.append(size)
            size = size + self.step_bytes if self.step_bytes else size * self.step_factor
        return out


@dataclass
class Row:
    """One size of one sweep, as printed and written to JSON."""

    size: int
    count: int
    type: str
    redop: str
    time_us: float
    algbw: float
    busbw: float
    wrong: int
    #: Per-rank times in microseconds (the row's time is their maximum).
    rank_us: list[float] = field(default_factory=list)

    def as_dict(self) -> dict:
        """The row for JSON."""
        return asdict(self)


def median_time(
    fn: Callable[[], object], iters: int, sync: Callable[[], object] = lambda: None
) -> float:
    """The median of ``iters`` timed calls of ``fn``, in seconds (robust to a noisy machine).

    ``sync`` waits for the device's queued work: a call on an NPU returns once its
    collectives are queued, so each timed call ends when the device has run them.
    """
    times = []
    for _ in range(iters):
        sync()
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _measure(step: Step, opts: Options, barrier: Callable[[], object]) -> float:
    for _ in range(opts.warmup):
        step.run()
    barrier()
    return median_time(step.run, opts.iters, torch.get_device_module(hp.device()).synchronize)


def rank_sweep(opts: Options) -> list[tuple[int, int, float, int]]:
    """On every rank: (bytes, elements, seconds per op, wrong elements) for each size."""
    bench_op, kind = BENCH_OPS[opts.op], TYPES[opts.dtype]
    reduce_op = REDUCE_OPS[opts.redop]
    rank, n = hp.get_rank(), hp.get_world_size()
    sizes = opts.sizes()
    bar = _progress(len(sizes), opts) if rank == 0 else None
    out = []
    for size in sizes:
        p = plan(bench_op, n, size, kind.size, opts.repeat)
        step = Step(opts.api, p, kind, reduce_op, opts.block_dim)
        seconds = _measure(step, opts, hp.barrier)
        wrong = 0
        if opts.check:
            step.before(poison=True)
            step.run()
            wrong = count_wrong(step.recv, expected(p, rank, kind, reduce_op))
        out.append((p.size_elems * kind.size, p.size_elems, seconds, wrong))
        del step
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    clear_caches()
    return out


def merge(
    opts: Options, ranks: int, per_rank: list[list[tuple[int, int, float, int]]]
) -> list[Row]:
    """One row per size from every rank's measurements."""
    bench_op = BENCH_OPS[opts.op]
    rows = []
    for cells in zip(*per_rank, strict=True):
        size, count = cells[0][0], cells[0][1]
        seconds = max(c[2] for c in cells)
        moved = size * opts.repeat
        rows.append(
            Row(
                size=size,
                count=count,
                type=opts.dtype,
                redop=opts.redop if bench_op.spec.reduces else "none",
                time_us=seconds * 1e6,
                algbw=algbw(bench_op, ranks, moved, seconds),
                busbw=busbw(bench_op, ranks, moved, seconds),
                wrong=sum(c[3] for c in cells),
                rank_us=[c[2] * 1e6 for c in cells],
            )
        )
    return rows


class _NoBar:
    """Stands in for a progress bar when tqdm is missing."""

    def update(self, n: int) -> None:
        """Nothing to draw."""

    def close(self) -> None:
        """Nothing to close."""


def _progress(total: int, opts: Options) -> object | None:
    if not opts.progress:
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return _NoBar()
    return tqdm(total=total, desc=f"{opts.op} ({opts.api})", unit="size", leave=False)
