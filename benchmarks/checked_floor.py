"""What an all-gather whose arguments are checked costs at least on gloo, beside hccl_py's.

    python benchmarks/checked_floor.py                       # 2 ranks, 64 KiB and 1 MiB
    python benchmarks/checked_floor.py --ranks 4 --sizes 65536 --iters 200 --json out.json

Issue 28 asks hccl_py's framework collectives on gloo to cost at most 1.10x
torch.distributed's same call from 64 KiB on. hccl_py checks that every rank
called the same op with matching arguments before any rank's data is used (a
mismatch is a clear error on every rank, never a hang or a wrong result). This
script times, in the same processes and alternately, the least any such check
can cost:

- ``raw``: torch.distributed's all-gather of one tensor (no check);
- ``one call``: every rank's 16-byte fingerprint of its arguments and its data
  in one all-gather of rows (a copy in, a compare of the fingerprints, a copy
  out): about 20 Python calls, the cheapest way to carry a check with the data;
- ``two calls``: the fingerprints in their own all-gather, then the raw call;
- ``hccl_py``: ``hp.all_gather_into_tensor``.

Each variant's output is compared with the expected one. Prints the median time
per op of the slowest rank and each variant's ratio to ``raw``; ``--json``
writes them. Not a test: this machine's noise is of the order of the margins.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import statistics
import time
from collections.abc import Callable

import torch
import torch.distributed as dist
from peers import ALL_GATHER

import hccl_py as hp

#: Bytes of the fingerprint each rank sends before its data.
FINGERPRINT_BYTES = 16
WARMUP = 5


def _wait(work: dist.Work, done: queue.SimpleQueue) -> None:
    """Block until ``work`` ended, woken from C as hccl_py's gloo waits are."""
    work.get_future().add_done_callback(done.put)
    done.get()
    work.wait()


def _variants(size: int) -> tuple[dict[str, Callable[[], None]], torch.Tensor, torch.Tensor]:
    """This rank's four variants (the same input and output), the output and what it must hold."""
    n, rank = hp.get_world_size(), hp.get_rank()
    elems = size // 4
    x = torch.arange(elems, dtype=torch.float32) + rank
    out = torch.empty(n * elems)
    want = torch.cat([torch.arange(elems, dtype=torch.float32) + r for r in range(n)])
    pg, done = dist.group.WORLD, queue.SimpleQueue()
    mark = torch.frombuffer(bytearray(b"all_gather fp32 ")[:FINGERPRINT_BYTES], dtype=torch.uint8)
    expect = mark.expand(n, FINGERPRINT_BYTES)
    row = FINGERPRINT_BYTES + size
    send, rows = torch.empty(row, dtype=torch.uint8), torch.empty(n * row, dtype=torch.uint8)
    send[:FINGERPRINT_BYTES] = mark
    heads, bodies = (
        rows.view(n, row)[:, :FINGERPRINT_BYTES],
        rows.view(n, row)[:, FINGERPRINT_BYTES:],
    )
    got_prints = torch.empty(n * FINGERPRINT_BYTES, dtype=torch.uint8)

    def one_call() -> None:
        send[FINGERPRINT_BYTES:] = x.view(torch.uint8)
        _wait(pg._allgather_base(rows, send), done)
        if not torch.equal(heads, expect):
            raise RuntimeError("the ranks' arguments differ")
        out.view(n, elems).copy_(bodies.view(torch.float32))

    def two_calls() -> None:
        _wait(pg._allgather_base(got_prints, mark), done)
        if not torch.equal(got_prints.view(n, FINGERPRINT_BYTES), expect):
            raise RuntimeError("the ranks' arguments differ")
        _wait(pg._allgather_base(out, x), done)

    variants = {
        "raw": lambda: ALL_GATHER(out, x),
        "one call": one_call,
        "two calls": two_calls,
        "hccl_py": lambda: hp.all_gather_into_tensor(out, x),
    }
    return variants, out, want


def _timed(size: int, iters: int) -> dict[str, float]:
    """On every rank: the median seconds per op of each variant, run in turn after a barrier."""
    variants, out, want = _variants(size)
    times: dict[str, list[float]] = {name: [] for name in variants}
    for i in range(WARMUP + iters):
        for name, call in variants.items():
            out.zero_()
            dist.barrier()
            start = time.perf_counter()
            call()
            took = time.perf_counter() - start
            if not torch.equal(out, want):
                raise RuntimeError(f"{name} gathered wrong values")
            if i >= WARMUP:
                times[name].append(took)
    return {name: statistics.median(t) for name, t in times.items()}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--sizes", type=int, nargs="+", default=[65536, 1048576], help="bytes per rank")
    p.add_argument("--iters", type=int, default=100)
    p.add_argument("--json", help="write the table here")
    a = p.parse_args(argv)
    bad = [s for s in a.sizes if s <= 0 or s % 4]
    if bad:
        p.error(f"sizes are positive multiples of 4 bytes (fp32), not {bad[0]}")
    if a.json and os.path.lexists(a.json):
        p.error(f"--json {a.json}: the file exists (results go to a new file)")
    rows = []
    print(
        f"{'bytes':>9} " + " ".join(f"{v:>16}" for v in ("raw", "one call", "two calls", "hccl_py"))
    )
    for size in a.sizes:
        per_rank = hp.run(_timed, a.ranks, backend="gloo", args=(size, a.iters))
        us = {name: max(r[name] for r in per_rank) * 1e6 for name in per_rank[0]}
        rows.append({"bytes": size, "ranks": a.ranks, "us": us})
        print(f"{size:>9} " + " ".join(f"{t:9.0f} ({t / us['raw']:.2f}x)" for t in us.values()))
    result = {"iters": a.iters, "rows": rows}
    if a.json:
        with open(a.json, "x") as f:
            json.dump(result, f, indent=1)
    return result


if __name__ == "__main__":
    main()
