"""Where a gloo launch's CPU goes, thread by thread, and what an idle core costs (issue 28, goal 2).

    python benchmarks/idle_cores.py 8            # the bench's AllGather kernel, block_dim 8
    python benchmarks/idle_cores.py 8 --empty    # a kernel that only calls SyncAll()

Per launch, the mean over 4 gloo ranks, in ms of CPU (``/proc/self/task/<tid>/schedstat``
and ``time.thread_time`` around each core's kernel): ``core0`` and ``idle`` (the other
cores, all together) inside the kernel; ``pool`` (the pool threads, kernel included),
``main`` (the rank's thread), ``domain`` (``hccl_py-<domain>``), ``gloo`` (threads that
Python did not start), ``process`` (all). With block_dim 1 the core runs in the rank's
thread, so ``main`` includes ``core0``. Not a test: machines are noisy, compare only what
one invocation measured, trees alternated.
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time

import torch

import hccl_py as hp
import hccl_py.kernel.cores as cores
from hccl_py.bench.calls import Step
from hccl_py.bench.ops import BENCH_OPS, plan
from hccl_py.bench.reference import REDUCE_OPS, TYPES
from hccl_py.server.threads import CORE_THREADS

WARMUP = 5


def _sync_only(x: object) -> None:
    hp.SyncAll()


def _threads() -> dict[str, float]:
    """CPU seconds so far of this process's threads, by kind."""
    pool = {w.thread.native_id for w in CORE_THREADS._workers}
    names = {t.native_id: t.name for t in threading.enumerate()}
    found = dict.fromkeys(("pool", "main", "domain", "gloo"), 0.0)
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                ns = int(f.read().split()[0])
        except OSError:  # the thread ended meanwhile
            continue
        name = names.get(int(tid), "")
        kind = (
            "pool" if int(tid) in pool else
            "main" if name == "MainThread" else
            "domain" if name.startswith("hccl_py-") else "gloo"
        )  # fmt: skip
        found[kind] += ns / 1e9
    return found


def per_launch(block_dim: int, iters: int, empty: bool) -> dict[str, float]:
    """On every rank: CPU ms per launch by thread kind, and inside the kernel by core."""
    if empty:
        x = torch.zeros(4)

        def run() -> None:
            hp.launch(_sync_only, x, block_dim=block_dim)
    else:
        run = Step(
            "kernel",
            plan(BENCH_OPS["allgather"], hp.get_world_size(), 1024, 4),
            TYPES["fp32"],
            REDUCE_OPS["sum"],
            block_dim,
        ).run
    inside = {"core0": 0.0, "idle": 0.0}
    lock = threading.Lock()
    run_core = cores._run_core

    def timed(kernel, args, core):  # type: ignore[no-untyped-def]
        start = time.thread_time()
        try:
            return run_core(kernel, args, core)
        finally:
            with lock:
                inside["core0" if core.block_idx == 0 else "idle"] += time.thread_time() - start

    for _ in range(WARMUP):
        run()
    cores._run_core = timed
    try:
        hp.barrier()
        inside.update(core0=0.0, idle=0.0)
        before, cpu = _threads(), time.process_time()
        for _ in range(iters):
            run()
        after, cpu = _threads(), time.process_time() - cpu
    finally:
        cores._run_core = run_core
    row = {k: v / iters * 1e3 for k, v in inside.items()}
    row |= {k: (after[k] - before[k]) / iters * 1e3 for k in after}
    return row | {"process": cpu / iters * 1e3}


def main() -> None:
    """Measure on 4 gloo ranks and print one JSON line (ms per launch, mean over ranks)."""
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("block_dim", type=int)
    p.add_argument("--iters", type=int, default=300)
    p.add_argument("--empty", action="store_true", help="a kernel that only calls SyncAll()")
    args = p.parse_args()
    res = hp.run(per_launch, 4, backend="gloo", args=(args.block_dim, args.iters, args.empty))
    mean = {k: round(sum(r[k] for r in res) / len(res), 3) for k in res[0]}
    print(json.dumps({"block_dim": args.block_dim, "empty": args.empty} | mean))


if __name__ == "__main__":
    main()
