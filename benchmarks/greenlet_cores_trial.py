"""A trial, not a design: a gloo launch's cores as greenlets of the rank's thread (issue 28, goal 2).

    python benchmarks/greenlet_cores_trial.py 8          # block_dim 8, cores as greenlets
    python benchmarks/greenlet_cores_trial.py 8 --threads  # the same loop, cores as pool threads

Measures what block_dim costs when a launch's cores are not OS threads: inside each
rank process, ``hccl_py.kernel.cores._run_cores`` is replaced by a loop that runs every
core as a greenlet of the rank's thread, and ``Blocker.wait_for`` called from a core
switches back to that loop instead of sleeping; the loop sleeps (``wait_for`` of the rank's
thread) only when every core waits. Deadlock reports, timeouts and errors raised by a core
are not handled as the real path handles them, and a core that polls memory another core of
the rank writes would never let it run: this only measures the cost. CPU ms per launch and
rank (all threads, mean over 4 ranks) of the bench's 1 KiB AllGather kernel.
"""

from __future__ import annotations

import argparse
import functools
import json
import time
from typing import Any

import greenlet

import hccl_py as hp
import hccl_py.kernel.cores as cores
from hccl_py.bench.calls import Step
from hccl_py.bench.ops import BENCH_OPS, plan
from hccl_py.bench.reference import REDUCE_OPS, TYPES
from hccl_py.kernel.context import set_rank_context
from hccl_py.server.blocking import Blocker

WARMUP = 5
_STATE: dict[str, Any] = {}
_wait_for = Blocker.wait_for


def _core_wait_for(self: Blocker, pred: Any, what: Any, timeout: float | None = None) -> None:
    """In a core greenlet: hand the thread back to the launch's loop until ``pred()`` holds."""
    hub = _STATE.get("hub")
    me = greenlet.getcurrent()
    if hub is None or me is hub:
        _wait_for(self, pred, what, timeout)
        return
    while True:
        with self.lock:
            self.raise_if_failed()
            if pred():
                return
        _STATE["waiting"][me] = pred
        hub.switch()


def _any_due(asleep: list[tuple[Any, Any]]) -> bool:
    return any(pred() for _, pred in asleep)


def _run_cores(kernel: Any, args: list[Any], launch_cores: list[Any], rank_ctx: Any) -> None:
    blocker = rank_ctx.blocker
    errors: list[BaseException] = []

    def body(core: Any) -> None:
        set_rank_context(rank_ctx)
        try:
            cores._run_core(kernel, args, core)
        except BaseException as exc:  # noqa: BLE001 - re-raised by the loop
            errors.append(exc)
            blocker.fail(exc)
        finally:
            with blocker.cond:
                core.launch.core_returned(core)
                blocker.cond.notify_all()

    waiting: dict[Any, Any] = {}
    _STATE.update(hub=greenlet.getcurrent(), waiting=waiting)
    runnable = [greenlet.greenlet(functools.partial(body, c)) for c in launch_cores]
    every = list(runnable)
    try:
        while True:
            while runnable:
                runnable.pop(0).switch()
            if all(g.dead for g in every):
                break
            asleep = list(waiting.items())
            _wait_for(blocker, functools.partial(_any_due, asleep), lambda: "cores wait (trial)")
            with blocker.lock:
                for g, pred in asleep:
                    if pred():
                        del waiting[g]
                        runnable.append(g)
    finally:
        _STATE.clear()
    if errors:
        raise errors[0]


def per_launch(block_dim: int, iters: int, threads: bool) -> float:
    """On every rank: CPU seconds per launch (all threads) over ``iters`` launches."""
    if not threads:
        cores._run_cores = _run_cores
        Blocker.wait_for = _core_wait_for  # type: ignore[method-assign]
    step = Step(
        "kernel",
        plan(BENCH_OPS["allgather"], hp.get_world_size(), 1024, 4),
        TYPES["fp32"],
        REDUCE_OPS["sum"],
        block_dim,
    )
    for _ in range(WARMUP):
        step.run()
    hp.barrier()
    cpu = time.process_time()
    for _ in range(iters):
        step.run()
    return (time.process_time() - cpu) / iters


def main() -> None:
    """Measure on 4 gloo ranks; print one JSON line."""
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("block_dim", type=int)
    p.add_argument("--iters", type=int, default=200)
    p.add_argument("--threads", action="store_true", help="keep the pool threads (reference)")
    args = p.parse_args()
    res = hp.run(per_launch, 4, backend="gloo", args=(args.block_dim, args.iters, args.threads))
    cores_as = "threads" if args.threads else "greenlets"
    ms = round(sum(res) / len(res) * 1e3, 3)
    print(json.dumps({"block_dim": args.block_dim, "cores": cores_as, "cpu_ms_per_rank": ms}))


if __name__ == "__main__":
    main()
