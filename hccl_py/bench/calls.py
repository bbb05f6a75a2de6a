"""What one benchmark iteration runs on one rank: a kernel launch or a framework collective.

``--api kernel``: one launch of :func:`bench_kernel`, written as an AscendC
kernel (InitV2, SetCcTilingV2, ``Op[True]`` with ``repeat`` rounds, one Wait
per round, SyncAll, Finalize). ``--api framework``: one call of the
framework collective of the same name (``all_gather_into_tensor`` ...).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

import hccl_py as hp
from hccl_py import (
    AIV,
    GET_TILING_DATA_WITH_STRUCT,
    GetHcclContext,
    Hccl,
    Mc2CcTiling,
    Mc2CcTilingConfig,
    Mc2InitTiling,
    SyncAll,
    TilingData,
    offsetof,
)

from ..core.constants import HcclReduceOp
from .ops import BenchOp, Plan
from .reference import BenchType, send_tensor

WORLD_GROUP = "hccl_world_group"


class BenchTiling(TilingData):
    """The host tiling of the benchmark kernel: the init tiling and one cc tiling."""

    _fields_ = [("mc2InitTiling", Mc2InitTiling), ("ccTiling", Mc2CcTiling)]


def make_tiling(op: BenchOp, reduce_op: HcclReduceOp) -> BenchTiling:
    """Host side: fill the tiling of ``op`` on the world group with its default algConfig."""
    tiling = BenchTiling()
    cfg = Mc2CcTilingConfig(WORLD_GROUP, op.spec.cmd, op.spec.alg_config, int(reduce_op))
    if cfg.GetTiling(tiling.mc2InitTiling) or cfg.GetTiling(tiling.ccTiling):
        raise RuntimeError(f"host tiling of {op.name} failed: {cfg.last_error}")
    return tiling


def bench_kernel(sendGM, recvGM, tilingGM, name: str, args: tuple, rounds: int) -> None:
    """The benchmark's kernel: one task of ``rounds`` rounds, committed at Prepare."""
    hccl = Hccl()
    if hp.g_coreType == AIV:
        tiling = GET_TILING_DATA_WITH_STRUCT(BenchTiling, tilingGM)
        hccl.InitV2(GetHcclContext(0), tiling)
        hccl.SetCcTilingV2(offsetof(BenchTiling, "ccTiling"))
        if name == "AlltoAllV":
            sendCounts, sdispls, recvCounts, rdispls, dataType = args
            handleId = hccl.AlltoAllV[True](
                sendGM, sendCounts, sdispls, dataType, recvGM, recvCounts, rdispls, dataType, rounds
            )
        else:
            handleId = getattr(hccl, name)[True](sendGM, recvGM, *args)
        for _ in range(rounds):
            hccl.Wait(handleId)
        SyncAll()
        hccl.Finalize()


def kernel_args(plan: Plan, rank: int, kind: BenchType, reduce_op: HcclReduceOp) -> tuple:
    """The Prepare arguments after the two buffers (AlltoAllV: counts and displacements)."""
    name, dtype, count, r = plan.op.name, kind.hccl_type, plan.block, plan.repeat
    if name == "AllReduce":
        return (count, dtype, reduce_op, r)
    if name == "ReduceScatter":
        return (count, dtype, reduce_op, plan.stride, r)
    if name in ("AllGather", "AlltoAll"):
        return (count, dtype, plan.stride, r)
    return (
        plan.counts[rank].tolist(),
        plan.sdispls(rank).tolist(),
        plan.counts[:, rank].tolist(),
        plan.rdispls(rank).tolist(),
        dtype,
    )


class Step:
    """One rank's buffers at one size, and the call that one timed iteration makes."""

    def __init__(
        self,
        api: str,
        plan: Plan,
        kind: BenchType,
        reduce_op: HcclReduceOp,
        block_dim: int = 1,
    ) -> None:
        rank, device = hp.get_rank(), hp.device()
        self.plan = plan
        self.send = send_tensor(plan, rank, kind, device)
        in_place = api == "framework" and plan.op.name == "AllReduce"
        self.recv = (
            self.send.clone()
            if in_place
            else torch.empty(plan.recv, dtype=kind.torch_type, device=device)
        )
        self.restore: torch.Tensor | None = self.send if in_place else None
        self.run: Callable[[], Any] = (
            self._kernel_call(plan, rank, kind, reduce_op, block_dim)
            if api == "kernel"
            else self._framework_call(plan, rank, reduce_op)
        )

    def _kernel_call(
        self, plan: Plan, rank: int, kind: BenchType, reduce_op: HcclReduceOp, block_dim: int
    ) -> Callable[[], None]:
        tiling = make_tiling(plan.op, reduce_op)
        args = kernel_args(plan, rank, kind, reduce_op)
        send, recv, name, rounds = self.send, self.recv, plan.op.name, plan.repeat

        def call() -> None:
            hp.launch(bench_kernel, send, recv, tiling, name, args, rounds, block_dim=block_dim)

        return call

    def _framework_call(self, plan: Plan, rank: int, reduce_op: HcclReduceOp) -> Callable[[], Any]:
        send, recv, name = self.send, self.recv, plan.op.name
        if name == "AllReduce":
            return lambda: hp.all_reduce(recv, reduce_op)
        if name == "AllGather":
            return lambda: hp.all_gather_into_tensor(recv, send)
        if name == "ReduceScatter":
            return lambda: hp.reduce_scatter_tensor(recv, send, reduce_op)
        if name == "AlltoAll":
            return lambda: hp.alltoall_single(send, recv)
        ins, outs = plan.counts[rank].tolist(), plan.counts[:, rank].tolist()
        return lambda: hp.alltoall_single(send, recv, ins, outs)

    def before(self, poison: bool) -> None:
        """Untimed, before an iteration: restore an in-place input; poison the output to check it."""
        if self.restore is not None:
            self.recv.copy_(self.restore)
        elif poison:
            self.recv.fill_(poison_value(self.recv.dtype))


def poison_value(dtype: torch.dtype) -> float:
    """What the output holds before the checked iteration: a value no reference element has
    (NaN; the most negative integer, below every input; for unsigned types, whose minimum 0
    is a common input and every MIN result at 5 ranks, the largest)."""
    if dtype.is_floating_point:
        return float("nan")
    info = torch.iinfo(dtype)
    return info.min if info.min < 0 else info.max
