"""Python calls per op on the emulator: a measure of the client's and server's cost that load cannot move.

    python benchmarks/python_calls.py                 # 4 ranks, 1 KiB AllGather
    python benchmarks/python_calls.py --modules 15    # and where a further round's calls are
    python benchmarks/python_calls.py --json calls.json

Times on a shared 2-core machine move by 2x between identical runs; the number
of Python function calls (cProfile's count, C functions included) that a
rank makes per op does not. The ranks run as greenlets of one thread
(``HCCL_PY_EMU_RUNNERS=greenlets``), so one profile sees every rank and the
server's rounds; it counts, per rank, the calls of: a kernel launch
of the benchmark's AllGather kernel (``python -m hccl_py bench``: InitV2,
SetCcTilingV2, ``AllGather[True]``, Wait, SyncAll, Finalize) with one round;
each further round of an 8-round task; and one ``hp.all_gather_into_tensor``.
With ``--modules N`` it lists the N modules with the most calls per further
round. Not a test: a change that removes work shows here before it shows in a
timing.
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import json
import os
import pstats
import sys
from collections.abc import Callable
from typing import Any

import torch
from hccl_py.backends.emu.runners import RUNNERS_ENV

import hccl_py as hp
from hccl_py.bench.calls import Step
from hccl_py.bench.ops import BENCH_OPS, plan
from hccl_py.bench.reference import REDUCE_OPS, TYPES

ITERS = 100
WARMUP = 5


def _counted(op: Callable[[], Any]) -> pstats.Stats | None:
    """On every rank: run ``op`` ITERS times after a warm-up; the world thread's profile of them."""
    for _ in range(WARMUP):
        op()
    profile = cProfile.Profile()
    if hp.get_rank() == 0:
        profile.enable()
    for _ in range(ITERS):
        op()
    if hp.get_rank() != 0:
        return None
    profile.disable()
    return pstats.Stats(profile)


def _kernel(ranks: int, size: int, repeat: int) -> pstats.Stats | None:
    step = Step(
        "kernel",
        plan(BENCH_OPS["allgather"], ranks, size, 4, repeat),
        TYPES["fp32"],
        REDUCE_OPS["sum"],
    )
    return _counted(step.run)


def _framework(size: int) -> pstats.Stats | None:
    n = hp.get_world_size()
    send = torch.ones(size // 4)
    recv = torch.empty(n * (size // 4))
    return _counted(lambda: hp.all_gather_into_tensor(recv, send))


def _per_op(stats: pstats.Stats, ranks: int) -> float:
    """Calls per op and rank (the profile saw every rank)."""
    return stats.total_calls / ITERS / ranks


def _by_module(stats: pstats.Stats) -> collections.Counter[str]:
    counts: collections.Counter[str] = collections.Counter()
    for (path, _, _), (_, calls, _, _, _) in stats.stats.items():
        counts["builtins" if path == "~" else path.replace("\\", "/").split("/")[-1]] += calls
    return counts


def main(argv: list[str] | None = None) -> int:
    """Count and print (and write JSON when asked)."""
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--size", type=int, default=1024, help="bytes per rank per round")
    p.add_argument("--modules", type=int, default=0, help="list the N busiest modules per round")
    p.add_argument("--json", help="write the numbers to this file")
    args = p.parse_args(argv)
    os.environ[RUNNERS_ENV] = "greenlets"
    run = {"world_size": args.ranks}
    one = hp.run(_kernel, args=(args.ranks, args.size, 1), **run)[0]
    eight = hp.run(_kernel, args=(args.ranks, args.size, 8), **run)[0]
    framework = hp.run(_framework, args=(args.size,), **run)[0]
    scale = args.ranks
    launch = _per_op(one, scale)
    per_round = (_per_op(eight, scale) - launch) / 7
    result = {
        "ranks": args.ranks,
        "bytes": args.size,
        "launch": round(launch),
        "further_round": round(per_round),
        "all_gather_into_tensor": round(_per_op(framework, scale)),
    }
    print(
        f"{args.ranks} ranks, {args.size} B, Python calls per rank: kernel launch {result['launch']}, "
        f"each further round {result['further_round']}, "
        f"all_gather_into_tensor {result['all_gather_into_tensor']}"
    )
    if args.modules:
        rounds = _by_module(eight)
        rounds.subtract(_by_module(one))
        for module, calls in rounds.most_common(args.modules):
            print(f"  {calls / ITERS / scale / 7:7.1f}  {module}")
    if args.json:
        with open(args.json, "x") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
