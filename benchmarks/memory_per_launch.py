"""Memory of gloo ranks (issue 28, goal 5): growth over many launches, and the peak of one op.

    python benchmarks/memory_per_launch.py launches --op allgather --launches 3000
    python benchmarks/memory_per_launch.py peak --size 16777216
    python benchmarks/memory_per_launch.py before-after --before OLD_TREE

``launches``: 4 ranks run ``--launches`` launches of a 1 KiB op (kernel API);
after launch 100, 1000 and the last, each rank records its resident memory
(as it is, then after ``malloc_trim``), the bytes malloc holds
(:func:`hccl_py.bench.memory.heap_bytes`: a leak shows there first) and the
CPU time per launch since the previous mark; rank 0 adds the size of the
FileStore's file (it only grows: every set, add and delete is appended).

``peak``: for each op at ``--size`` bytes per rank (as ``python -m hccl_py
bench`` counts them), a fresh world of 4 ranks writes its buffers, runs one
1 KiB op (connections), then measures how far one op raises each rank's
resident high-water mark (:func:`hccl_py.bench.memory.peak_rise`): the first
large op (cold) and a second one (warm: glibc may serve it from memory the
first freed). hccl_py's op (exact and native reductions) and
torch.distributed's own call on the same buffers, each in its own world.

``before-after``: both, for the tree ``--before`` and for this checkout, one
after the other; JSON in ``benchmarks/results/issue28-memory-{before,after}-*.json``.
Not a test: compare within one invocation.
"""

from __future__ import annotations

import argparse
import ctypes
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import peers

import hccl_py as hp
from hccl_py.bench.calls import Step
from hccl_py.bench.ops import BENCH_OPS, plan
from hccl_py.bench.reference import REDUCE_OPS, TYPES

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
MIB = 1 << 20
WORLD = 4
#: (op, HCCL_PY_REDUCE) of the peak measurement; "" where the op does not reduce.
PEAK_CASES = [
    ("allgather", ""),
    ("allreduce", "exact"),
    ("allreduce", "native"),
    ("reducescatter", "exact"),
    ("reducescatter", "native"),
    ("alltoall", ""),
    ("alltoallv", ""),
]


def _probes() -> Any:
    """hccl_py.bench.memory, or this checkout's copy of it for a tree from before it existed."""
    try:
        from hccl_py.bench import memory
    except ImportError:
        path = HERE.parent / "hccl_py" / "bench" / "memory.py"
        spec = importlib.util.spec_from_file_location("memory_probes", path)
        memory = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(memory)
    return memory


memory = _probes()


def rss_mib() -> float:
    """This process's resident memory."""
    return memory.status_bytes("VmRSS") / MIB


def step(op: str, size: int) -> Step:
    """One rank's buffers and kernel launch of ``op`` at ``size`` bytes (fp32, SUM)."""
    kind = TYPES["fp32"]
    p = plan(BENCH_OPS[op], hp.get_world_size(), size, kind.size)
    return Step("kernel", p, kind, REDUCE_OPS["sum"], 1)


def _store_file_bytes() -> int | None:
    """Size of the FileStore's file of this world (None: the ranks share a TCPStore)."""
    from hccl_py.kernel.context import current_rank_context

    path = current_rank_context().server.session.spec.store_path
    return os.path.getsize(path) if path else None


def launches_body(op: str, launches: int) -> dict:
    """One rank: ``launches`` launches of a 1 KiB ``op``; memory and CPU at the marks."""
    small = step(op, 1 << 10)
    marks = sorted({m for m in (100, 1000, launches) if m <= launches})
    rows, last, start = [], 0, time.process_time()
    for i in range(1, launches + 1):
        small.run()
        if i not in marks:
            continue
        cpu_us = (time.process_time() - start) / (i - last) * 1e6
        rss = rss_mib()
        heap = memory.heap_bytes()
        ctypes.CDLL(None).malloc_trim(0)
        rows.append(
            {
                "launches": i,
                "rss_mib": round(rss, 2),
                "trimmed_rss_mib": round(rss_mib(), 2),
                "heap_kib": round(heap / 1024, 1),
                "cpu_us_per_launch": round(cpu_us, 1),
            }
        )
        last, start = i, time.process_time()
    out: dict[str, Any] = {"marks": rows}
    if hp.get_rank() == 0:
        out["store_file_bytes"] = _store_file_bytes()
    return out


def peak_body(op: str, size: int, impl: str) -> dict:
    """One rank: the rise of its resident high-water mark over one large ``op`` (cold, warm)."""
    if impl == "torch":
        call = peers._TORCH_CALLS[op]
        n, rank = hp.get_world_size(), hp.get_rank()
        small_bufs = peers._buffers(op, n, rank, 1 << 10)
        send, recv, split = peers._buffers(op, n, rank, size)

        def small() -> None:
            call(*small_bufs)

        def big() -> None:
            call(send, recv, split)

    else:
        small, s = step(op, 1 << 10).run, step(op, size)
        big, send, recv = s.run, s.send, s.recv
    recv.add_(0)  # every page of the receive buffer is resident before the op
    small()
    cold = memory.peak_rise(big)
    warm = memory.peak_rise(big)
    op_bytes = send.numel() * send.element_size() + recv.numel() * recv.element_size()
    return {"op_mib": op_bytes / MIB, "cold_mib": cold / MIB, "warm_mib": warm / MIB}


def measure_launches(op: str, launches: int) -> dict:
    """Every rank's marks (see the module docstring)."""
    per_rank = hp.run(launches_body, WORLD, backend="gloo", args=(op, launches))
    return {"op": op, "ranks": WORLD, "launches": launches, "per_rank": per_rank}


def measure_peaks(size: int) -> dict:
    """Per case and implementation, the largest rise over the ranks (MiB)."""
    rows = []
    for op, mode in PEAK_CASES:
        impls = ["ours"] if mode == "native" else ["torch", "ours"]
        for impl in impls:
            os.environ["HCCL_PY_REDUCE"] = mode or "exact"
            got = hp.run(peak_body, WORLD, backend="gloo", platform="A3", args=(op, size, impl))
            rows.append(
                {
                    "op": op,
                    "reduce": mode,
                    "impl": impl,
                    "op_mib": got[0]["op_mib"],
                    "cold_mib": round(max(r["cold_mib"] for r in got), 1),
                    "warm_mib": round(max(r["warm_mib"] for r in got), 1),
                }
            )
    return {"size": size, "ranks": WORLD, "cases": rows}


def before_after(before: Path, op: str, launches: int, size: int) -> None:
    """Both measurements for ``before`` and this checkout; JSON in benchmarks/results."""
    trees = {"before": before.resolve(), "after": HERE.parent}
    for what, extra in (
        ("launches", ["--op", op, "--launches", str(launches)]),
        ("peak", ["--size", str(size)]),
    ):
        for name, tree in trees.items():
            out = RESULTS / f"issue28-memory-{name}-{what}.json"
            env = dict(os.environ, PYTHONPATH=str(tree))
            subprocess.run(
                [sys.executable, __file__, what, *extra, "--json", str(out)],
                cwd=tree,
                env=env,
                check=True,
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("what", choices=["launches", "peak", "before-after"])
    parser.add_argument("--op", default="allgather", choices=sorted(BENCH_OPS))
    parser.add_argument("--launches", type=int, default=3000)
    parser.add_argument("--size", type=int, default=16 * MIB)
    parser.add_argument("--before", type=Path, help="the tree to compare with (before-after)")
    parser.add_argument("--json", type=Path, help="write the result here too")
    opts = parser.parse_args(argv)
    if opts.what == "before-after":
        if opts.before is None:
            parser.error("before-after needs --before OLD_TREE")
        before_after(opts.before, opts.op, opts.launches, opts.size)
        return 0
    if opts.what == "launches":
        result = measure_launches(opts.op, opts.launches)
    else:
        result = measure_peaks(opts.size)
    text = json.dumps(result, indent=1)
    print(text)
    if opts.json:
        opts.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
