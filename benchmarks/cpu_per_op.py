"""CPU seconds per op of each gloo rank process (all its threads), and wall time per op.

    python benchmarks/cpu_per_op.py allgather kernel 1024 200 1     # op, api, bytes, ops, block_dim
    python benchmarks/cpu_per_op.py alltoall kernel 1048576 200 1 2 # ... and ranks (default 4)

CPU time is what a loaded machine distorts least: compare two hccl_py trees
with it (``PYTHONPATH=TREE``), alternately, in one session. Prints one JSON
line: the mean CPU ms per op over the ranks and the slowest rank's wall ms (on A3, which has
every op).
"""

from __future__ import annotations

import argparse
import json
import time

import hccl_py as hp
from hccl_py.bench.calls import Step
from hccl_py.bench.ops import BENCH_OPS, plan
from hccl_py.bench.reference import REDUCE_OPS, TYPES

RANKS = 4
WARMUP = 5


def per_op(op: str, api: str, size: int, n: int, block_dim: int) -> tuple[float, float]:
    """On every rank: (CPU seconds, wall seconds) per op over ``n`` ops."""
    kind = TYPES["fp32"]
    step = Step(api, plan(BENCH_OPS[op], hp.get_world_size(), size, kind.size), kind,
                REDUCE_OPS["sum"], block_dim)  # fmt: skip
    for _ in range(WARMUP):
        step.run()
    hp.barrier()
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(n):
        step.run()
    return (time.process_time() - cpu) / n, (time.perf_counter() - wall) / n


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("op", choices=sorted(BENCH_OPS))
    p.add_argument("api", choices=["kernel", "framework"])
    p.add_argument("size", type=int, help="bytes per rank")
    p.add_argument("n", type=int, help="ops to time")
    p.add_argument("block_dim", type=int)
    p.add_argument("ranks", type=int, nargs="?", default=RANKS)
    a = p.parse_args()
    op, api, size, n, block_dim, ranks = a.op, a.api, a.size, a.n, a.block_dim, a.ranks
    res = hp.run(per_op, ranks, backend="gloo", platform="A3", args=(op, api, size, n, block_dim))
    cpu = sum(r[0] for r in res) / len(res)
    wall = max(r[1] for r in res)
    row = dict(op=op, api=api, size=size, block_dim=block_dim, ranks=ranks)
    print(
        json.dumps(row | {"cpu_ms_per_rank": round(cpu * 1e3, 3), "wall_ms": round(wall * 1e3, 3)})
    )


if __name__ == "__main__":
    main()
