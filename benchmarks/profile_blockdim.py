"""What block_dim multiplies on a gloo rank: CPU, threads, wake-ups, context switches, a profile.

    python benchmarks/profile_blockdim.py 8                 # block_dim 8, 200 launches, 4 ranks
    python benchmarks/profile_blockdim.py 1 --profile 25    # and cProfile's top 25 (thread CPU)

Every rank runs ``--iters`` launches of the benchmark's AllGather kernel
(``python -m hccl_py bench --op allgather``, 1 KiB). Printed per launch, the
mean over the ranks: the process's CPU time (all threads, ``getrusage``), thread starts, waits on the
rank's condition that returned (wake-ups), and voluntary and involuntary
context switches. With ``--profile N`` every thread of rank 0 that runs
hccl_py code is profiled with cProfile on a per-thread CPU clock, and the top
N entries by own CPU time are printed.
Not a test: machines are noisy, compare only what one invocation measured.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import resource
import threading
import time
from collections import Counter
from typing import Any

import hccl_py as hp
from hccl_py.bench.calls import Step
from hccl_py.bench.ops import BENCH_OPS, plan
from hccl_py.bench.reference import REDUCE_OPS, TYPES

WARMUP = 5


def _selective_condition() -> Any:
    """The condition class with selective wake-ups, in trees that have one (else None)."""
    try:
        from hccl_py.server.threads import WakeCondition
    except ImportError:
        return None
    return WakeCondition


class Counted:
    """Counts thread starts and returns from condition waits in this process; profiles threads."""

    def __init__(self, profile: bool) -> None:
        self.counts: Counter[str] = Counter()
        self.profiles: list[cProfile.Profile] = []
        self.profile = profile
        self._start = threading.Thread.start
        self._wait = threading.Condition.wait
        self._run = threading.Thread.run

    def install(self) -> None:
        """Patch ``Thread.start``, ``Thread.run`` and the condition waits of this process."""
        counted = self

        def start(thread: threading.Thread) -> None:
            counted.counts["thread starts"] += 1
            counted._start(thread)

        def wait(cond: threading.Condition, timeout: float | None = None) -> bool:
            woken = counted._wait(cond, timeout)
            counted.counts["condition wake-ups"] += 1
            return woken

        def run(thread: threading.Thread) -> None:
            if not counted.profile:
                return counted._run(thread)
            prof = cProfile.Profile(time.thread_time)
            counted.profiles.append(prof)
            prof.enable()
            try:
                return counted._run(thread)
            finally:
                prof.disable()

        threading.Thread.start = start  # type: ignore[method-assign]
        threading.Condition.wait = wait  # type: ignore[method-assign]
        threading.Thread.run = run  # type: ignore[method-assign]
        selective = _selective_condition()
        if selective is not None:  # the tree has selective wake-ups: count those waits too
            wait_until = selective.wait_until

            def counted_until(cond: Any, test: Any, timeout: float | None = None) -> bool:
                woken = wait_until(cond, test, timeout)
                counted.counts["condition wake-ups"] += 1
                return woken

            selective.wait_until = counted_until

    @staticmethod
    def threads() -> dict[str, float]:
        """CPU seconds of each thread of this process, from ``/proc/self/task/<tid>/stat``.

        Keyed by what the thread does: ``main`` (the rank's thread), ``cores`` (threads
        that ran kernel cores), ``domain`` (domain threads), ``other`` (gloo's own ...).
        """
        names = {t.native_id: t.name for t in threading.enumerate()}
        tick = os.sysconf("SC_CLK_TCK")
        found: Counter[str] = Counter()
        for tid in os.listdir("/proc/self/task"):
            try:
                with open(f"/proc/self/task/{tid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:  # the thread ended meanwhile
                continue
            name = names.get(int(tid), "")
            kind = (
                "main" if name == "MainThread" else
                "cores" if name.startswith(("rank", "hccl_py-core")) else
                "domain" if name.startswith("hccl_py-") else "other"
            )  # fmt: skip
            found[f"thread cpu s: {kind}"] += (int(fields[11]) + int(fields[12])) / tick
        return dict(found)

    def snapshot(self) -> dict[str, float]:
        """The counters now, with CPU seconds and context switches of the whole process."""
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return (
            dict(self.counts)
            | self.threads()
            | {
                "cpu s": usage.ru_utime + usage.ru_stime,
                "voluntary switches": usage.ru_nvcsw,
                "involuntary switches": usage.ru_nivcsw,
            }
        )


def per_launch(block_dim: int, iters: int, profile: int) -> dict[str, Any]:
    """On every rank: the counters of :class:`Counted` per launch over ``iters`` launches."""
    step = Step(
        "kernel",
        plan(BENCH_OPS["allgather"], hp.get_world_size(), 1024, 4),
        TYPES["fp32"],
        REDUCE_OPS["sum"],
        block_dim,
    )
    for _ in range(WARMUP):
        step.run()
    counted = Counted(profile > 0 and hp.get_rank() == 0)
    counted.install()
    hp.barrier()
    main = cProfile.Profile(time.thread_time) if counted.profile else None
    before, wall = counted.snapshot(), time.perf_counter()
    if main is not None:
        main.enable()
    for _ in range(iters):
        step.run()
    if main is not None:
        main.disable()
    after = counted.snapshot()
    row = {k: round((after[k] - before.get(k, 0)) / iters, 5) for k in after}
    row["wall s"] = round((time.perf_counter() - wall) / iters, 5)
    if main is not None:
        out = io.StringIO()
        stats = pstats.Stats(main, stream=out)
        for prof in counted.profiles:
            stats.add(prof)
        stats.sort_stats("tottime").print_stats(profile)
        row["profile"] = out.getvalue()
    return row


def main(argv: list[str] | None = None) -> int:
    """Measure on 4 gloo ranks; print the mean over ranks (and rank 0's profile)."""
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("block_dim", type=int)
    p.add_argument("--iters", type=int, default=200)
    p.add_argument("--profile", type=int, default=0, metavar="N")
    args = p.parse_args(argv)
    res = hp.run(per_launch, 4, backend="gloo", args=(args.block_dim, args.iters, args.profile))
    text = res[0].pop("profile", "")
    keys = sorted({k for row in res for k in row})
    mean = {k: round(sum(row.get(k, 0) for row in res) / len(res), 5) for k in keys}
    cpu_by_rank = [row["cpu s"] for row in res]
    print(json.dumps({"block_dim": args.block_dim} | mean | {"cpu s by rank": cpu_by_rank}))
    if text:
        print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
