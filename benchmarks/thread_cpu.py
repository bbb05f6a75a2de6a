"""CPU time per op of each thread of each gloo rank process, from ``/proc/self/task`` (Linux).

    python benchmarks/thread_cpu.py allgather kernel 1024 400     # op, api, bytes, ops
    python benchmarks/thread_cpu.py allgather kernel 1024 300 40  # and rank 0's profile
    RANKS=2 python benchmarks/thread_cpu.py allgather kernel 1024 400  # on 2 ranks (default 4)

Where ``cpu_per_op.py`` sums a rank's threads, this splits them: the main
thread (the kernel's and the client's Python, the rounds it runs itself),
the domain threads (``hccl_py-<domain>``), hccl_py's watchdog, and the
threads that Python did not start (gloo's and the store's own, named by
their thread id). Prints one line per rank, ms per op; the resolution is one
clock tick (usually 10 ms) over all ops, so use a few hundred ops. A fifth
argument N profiles rank 0's main thread with cProfile on its own CPU time
(``time.thread_time``) and prints the top N entries by own time (the
profiler's overhead then inflates that rank's numbers).
Not a test: machines are noisy, compare only what one invocation measured.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import threading
import time

import hccl_py as hp
from hccl_py.bench.calls import Step
from hccl_py.bench.ops import BENCH_OPS, plan
from hccl_py.bench.reference import REDUCE_OPS, TYPES

#: gloo ranks to start (the ``RANKS`` environment variable; 4 by default).
RANKS = int(os.environ.get("RANKS", "4"))
WARMUP = 5


def cpu_by_thread() -> dict[str, float]:
    """CPU seconds (user + system) of each thread of this process, by thread name or id."""
    tick = os.sysconf("SC_CLK_TCK")
    names = {t.native_id: t.name for t in threading.enumerate()}
    found = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                stat = f.read()
        except OSError:  # the thread ended meanwhile
            continue
        fields = stat.rsplit(")", 1)[1].split()
        found[names.get(int(tid), f"tid{tid}")] = (int(fields[11]) + int(fields[12])) / tick
    return found


def per_thread(op: str, api: str, size: int, n: int, top: int) -> tuple[dict[str, float], str]:
    """On every rank: CPU ms per op of each thread during ``n`` ops; rank 0's profile if ``top``."""
    kind = TYPES["fp32"]
    step = Step(api, plan(BENCH_OPS[op], hp.get_world_size(), size, kind.size), kind,
                REDUCE_OPS["sum"], 1)  # fmt: skip
    for _ in range(WARMUP):
        step.run()
    hp.barrier()
    profile = cProfile.Profile(time.thread_time) if top and hp.get_rank() == 0 else None
    before = cpu_by_thread()
    if profile is not None:
        profile.enable()
    for _ in range(n):
        step.run()
    if profile is not None:
        profile.disable()
    after = cpu_by_thread()
    spent = {name: (t - before.get(name, 0.0)) / n * 1e3 for name, t in after.items()}
    text = io.StringIO()
    if profile is not None:
        pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(top)
    return {name: round(ms, 3) for name, ms in spent.items() if ms > 0}, text.getvalue()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("op", choices=sorted(BENCH_OPS))
    p.add_argument("api", choices=["kernel", "framework"])
    p.add_argument("size", type=int, help="bytes per rank")
    p.add_argument("n", type=int, help="ops to time")
    p.add_argument("top", type=int, nargs="?", default=0, help="rank 0's profile entries")
    a = p.parse_args()
    op, api, size, n, top = a.op, a.api, a.size, a.n, a.top
    ranks = hp.run(per_thread, RANKS, backend="gloo", args=(op, api, size, n, top))
    for rank, (threads, _) in enumerate(ranks):
        print(f"rank {rank}: {threads}")
    print(ranks[0][1], end="")


if __name__ == "__main__":
    main()
