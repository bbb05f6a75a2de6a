"""Where an emulated op's time goes: wall and CPU time per op, baton hand-offs, a profile.

    python benchmarks/profile_emu.py                          # 4 ranks, 1 KiB AllGather, 1 round
    python benchmarks/profile_emu.py --ranks 8 --repeat 8     # per round of an 8-round task
    python benchmarks/profile_emu.py --profile 25             # and cProfile's top 25 entries

Every rank runs ``--iters`` launches of the benchmark's AllGather kernel
(``python -m hccl_py bench --op allgather``). Rank 0 reports the wall time and
the process's CPU time (all threads) per op, and the scheduler's switches per
op: wall time beyond the CPU time is time that no thread of the process ran,
such as waiting for the operating system to wake the next rank's thread. With
``--profile N`` every runner's thread (or, with greenlet runners, the world's
thread that runs them all) is profiled with cProfile on its own CPU time
(``time.thread_time``) and the top N entries by own time are printed.
Not a test: machines are noisy, compare only what one invocation measured.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time
from collections.abc import Callable

from hccl_py.backends.emu import scheduler

import hccl_py as hp
from hccl_py.bench.calls import Step
from hccl_py.bench.ops import BENCH_OPS, plan
from hccl_py.bench.reference import REDUCE_OPS, TYPES
from hccl_py.kernel.context import current_rank_context


def per_op(n_ranks: int, size: int, repeat: int, iters: int) -> tuple[float, float, float]:
    """On every rank: (wall seconds, CPU seconds, switches) per op over ``iters`` launches."""
    step = Step(
        "kernel",
        plan(BENCH_OPS["allgather"], n_ranks, size, 4, repeat),
        TYPES["fp32"],
        REDUCE_OPS["sum"],
    )
    for _ in range(5):
        step.run()
    blocker = current_rank_context().blocker
    switches, wall, cpu = blocker.switches, time.perf_counter(), time.process_time()
    for _ in range(iters):
        step.run()
    return (
        (time.perf_counter() - wall) / iters,
        (time.process_time() - cpu) / iters,
        (blocker.switches - switches) / iters,
    )


def _profile_runners(profiles: list[cProfile.Profile]) -> None:
    """Profile every runner's thread (and the greenlet runners' world thread) on its own CPU time."""

    def wrap(method: Callable[..., None]) -> Callable[..., None]:
        def profiled(*a: object) -> None:
            profile = cProfile.Profile(time.thread_time)
            profiles.append(profile)
            profile.enable()
            try:
                method(*a)
            finally:
                profile.disable()

        return profiled

    scheduler.Scheduler._run_world = wrap(scheduler.Scheduler._run_world)
    scheduler.Scheduler._thread_body = wrap(scheduler.Scheduler._thread_body)


def main(argv: list[str] | None = None) -> int:
    """Measure and print; profile the world's thread when asked."""
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--size", type=int, default=1024, help="bytes per rank per round")
    p.add_argument("--repeat", type=int, default=1, help="rounds per task")
    p.add_argument("--iters", type=int, default=300)
    p.add_argument("--profile", type=int, default=0, help="print cProfile's top N entries")
    args = p.parse_args(argv)
    profiles: list[cProfile.Profile] = []
    if args.profile:
        _profile_runners(profiles)
    wall, cpu, switches = hp.run(
        per_op, world_size=args.ranks, args=(args.ranks, args.size, args.repeat, args.iters)
    )[0]
    print(
        f"{args.ranks} ranks, {args.size} B, {args.repeat} round(s): per op {wall * 1e6:.0f} us "
        f"wall, {cpu * 1e6:.0f} us CPU, {switches:.1f} switches; per round "
        f"{wall * 1e6 / args.repeat:.0f} us wall"
    )
    if args.profile:
        pstats.Stats(*profiles).sort_stats("tottime").print_stats(args.profile)
    return 0


if __name__ == "__main__":
    sys.exit(main())
