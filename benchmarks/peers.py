"""The peers that benchmarks/compare.py measures hccl_py against, one function each.

Every peer returns ``{size: seconds per op}`` for one op and one rank count,
for the same sizes (bytes each rank sends per op) that hccl_py's benchmark
uses, with the buffers of :func:`hccl_py.bench.ops.plan`:

- ``hccl_py`` (emulator or gloo backend, kernel or framework API): the sweep
  behind ``python -m hccl_py bench``;
- ``threaded_pg``: PyTorch's in-process threaded process group
  (``torch.testing._internal.distributed.multi_threaded_pg``), one thread per rank;
- ``raw_gloo``: torch.distributed's gloo backend, one process per rank;
- ``copy_limit``: the bytes the op must move, as one torch operation over
  distinct source and destination buffers (all cores): the least work of the
  op in one address space.
"""

from __future__ import annotations

import functools
import multiprocessing as mp
import os
import resource
import socket
import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch
import torch.distributed as dist

import hccl_py as hp
from hccl_py.bench.ops import BENCH_OPS, plan
from hccl_py.bench.sweep import Options, median_time, rank_sweep
from hccl_py.launcher import torch_env

#: torch.distributed's all-gather and reduce-scatter of one tensor: ``*_single`` where torch
#: has them (``all_gather_into_tensor`` and ``reduce_scatter_tensor`` are then deprecated
#: aliases that warn on every call).
ALL_GATHER = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
REDUCE_SCATTER = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor

#: torch.distributed calls of each op (None: the peer has no such call).
_TORCH_CALLS: dict[str, Callable] = {
    "allgather": lambda send, recv, _: ALL_GATHER(recv, send),
    "allreduce": lambda send, recv, _: dist.all_reduce(recv),
    "reducescatter": lambda send, recv, _: REDUCE_SCATTER(recv, send),
    "alltoall": lambda send, recv, _: dist.all_to_all_single(recv, send),
    "alltoallv": lambda send, recv, split: dist.all_to_all_single(recv, send, *split),
}


def hccl_py_times(
    op: str, ranks: int, sizes: list[int], opts: Options, backend: str, api: str, **run: Any
) -> dict[int, float]:
    """Seconds per op of hccl_py's benchmark sweep (the slowest rank); ``run``: hp.run options."""
    sweep = replace(
        opts, op=op, api=api, min_bytes=sizes[0], max_bytes=sizes[-1], check=False, progress=False
    )
    per_rank = hp.run(
        rank_sweep, world_size=ranks, backend=backend, platform="A3", args=(sweep,), **run
    )
    return {size: max(cells[i][2] for cells in per_rank) for i, size in enumerate(sweep.sizes())}


def _buffers(op: str, ranks: int, rank: int, size: int) -> tuple:
    """fp32 send and receive buffers of one rank and the AlltoAllV split sizes."""
    p = plan(BENCH_OPS[op], ranks, size, 4)
    send = torch.full((p.send,), float(rank + 1))
    recv = torch.empty(p.recv)
    split = None
    if p.counts is not None:
        split = (p.counts[:, rank].tolist(), p.counts[rank].tolist())
    if op == "allreduce":
        recv = send.clone()
    return send, recv, split


def _time_torch(op: str, ranks: int, rank: int, sizes: list[int], opts: Options) -> dict:
    call = _TORCH_CALLS[op]
    out = {}
    for size in sizes:
        send, recv, split = _buffers(op, ranks, rank, size)
        for _ in range(opts.warmup):
            call(send, recv, split)
        dist.barrier()
        out[size] = median_time(functools.partial(call, send, recv, split), opts.iters)
    return out


def threaded_pg_times(op: str, ranks: int, sizes: list[int], opts: Options) -> dict[int, float]:
    """Seconds per op of PyTorch's threaded process group (one thread per rank)."""
    from torch.testing._internal.distributed import multi_threaded_pg as threaded

    world = threaded._install_threaded_pg()
    store = dist.HashStore()
    results: dict[int, dict] = {}
    errors: list[BaseException] = []
    torch._C._distributed_c10d._set_thread_isolation_mode(True)

    def worker(rank: int) -> None:
        dist.init_process_group("threaded", rank=rank, world_size=ranks, store=store)
        try:
            results[rank] = _time_torch(op, ranks, rank, sizes, opts)
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            errors.append(exc)
            threaded.ProcessLocalGroup.exception_handle(exc)
        finally:
            if world == dist.distributed_c10d._world:
                dist.destroy_process_group()

    try:
        threads = [threading.Thread(target=worker, args=(r,)) for r in range(ranks)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        torch._C._distributed_c10d._set_thread_isolation_mode(False)
        threaded._uninstall_threaded_pg()
        threaded.ProcessLocalGroup.reset()
    if errors:
        raise errors[0]
    return {s: max(results[r][s] for r in results) for s in sizes}


def _gloo_rank(rank: int, ranks: int, port: int, op: str, sizes: list, opts: Options, q) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch_env.rank_threads(ranks)  # as torchrun and hccl_py's own ranks: no spinning OpenMP
    dist.init_process_group("gloo", rank=rank, world_size=ranks)
    try:
        q.put((rank, _time_torch(op, ranks, rank, sizes, opts)))
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def raw_gloo_times(op: str, ranks: int, sizes: list[int], opts: Options) -> dict[int, float]:
    """Seconds per op of torch.distributed gloo, one process per rank."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    port = _free_port()
    procs = [
        ctx.Process(target=_gloo_rank, args=(r, ranks, port, op, sizes, opts, q))
        for r in range(ranks)
    ]
    for p in procs:
        p.start()
    results = dict(q.get(timeout=1800) for _ in procs)
    for p in procs:
        p.join()
    return {s: max(results[r][s] for r in results) for s in sizes}


def _limit_op(op: str, ranks: int, size: int) -> Callable[[], object]:
    """One torch call doing the least work of ``op``: every byte it must move, once."""
    p = plan(BENCH_OPS[op], ranks, size, 4)
    n = ranks
    if op == "allgather":
        src, dst = torch.ones(n, p.send), torch.empty(n, n, p.send)
        return lambda: dst.copy_(src.unsqueeze(0).expand(n, n, p.send))
    if op == "allreduce":
        src, acc, dst = torch.ones(n, p.send), torch.empty(p.send), torch.empty(n, p.send)

        def all_reduce() -> None:
            torch.sum(src, dim=0, out=acc)
            dst.copy_(acc.expand(n, p.send))

        return all_reduce
    if op == "reducescatter":
        src, dst = torch.ones(n, n, p.block), torch.empty(n, p.block)
        return lambda: torch.sum(src, dim=0, out=dst)
    src, dst = torch.ones(n, n, p.block), torch.empty(n, n, p.block)
    return lambda: dst.copy_(src.transpose(0, 1))


def _scale_child(op: str, ranks: int, size: int, opts: Options, q: Any) -> None:
    seconds = hccl_py_times(op, ranks, [size], opts, "emu", "kernel")[size]
    q.put((seconds, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024))


def scale_point(op: str, ranks: int, size: int, opts: Options) -> tuple[float, float]:
    """(seconds per op, peak resident MiB of a fresh process) of the emulator at one size."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    child = ctx.Process(target=_scale_child, args=(op, ranks, size, opts, q))
    child.start()
    result = q.get(timeout=1800)
    child.join()
    return result


def copy_limit_times(op: str, ranks: int, sizes: list[int], opts: Options) -> dict[int, float]:
    """Seconds of the least work of ``op`` (one torch call, all cores, distinct buffers)."""
    out = {}
    for size in sizes:
        fn = _limit_op(op, ranks, size)
        for _ in range(max(1, opts.warmup)):
            fn()
        out[size] = median_time(fn, opts.iters)
    return out
