"""What the fused matmul + collective samples share: inputs, tilings, matmul and torch_npu checks.

Inputs are small integers (:func:`_common.random_ints`), so every matmul and every sum
over ranks is exact in FP16 and FP32 whatever the order of the additions.
"""

from __future__ import annotations

import ctypes
import importlib.util
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from _common import random_ints, skip

import hccl_py as hp
from hccl_py import HCCL_CMD_ALLTOALLV, HcclDataType, Mc2CcTilingConfig

FP16 = HcclDataType.HCCL_DATA_TYPE_FP16
SIZEOF_HALF = 2
#: ``hp.launch`` arguments of the fused samples' kernels: two cube (AIC) cores only.
AIC_KERNEL = dict(block_dim=2, kernel_type="aic")


def uint32_fields(*names: str) -> list[tuple[str, type]]:
    """``uint32_t`` members of a TilingData struct, in order."""
    return typed_fields(ctypes.c_uint32, *names)


def typed_fields(c_type: type, *names: str) -> list[tuple[str, type]]:
    """Members of one C type of a TilingData struct, in order."""
    return [(name, c_type) for name in names]


#: The TilingData members of a fused matmul + collective: shapes and the row tiling.
MATMUL_FIELDS = uint32_fields("rankM", "rankK", "rankN", "tileM", "tileNum", "tailM", "tailNum")


def matmul_tiling(m: int, k: int, n: int, tile_m: int) -> dict[str, int]:
    """Values of :data:`MATMUL_FIELDS`: ``m`` rows cut into tiles of ``tile_m`` and a tail."""
    tile_num, tail_m = divmod(m, tile_m)
    return dict(
        rankM=m,
        rankK=k,
        rankN=n,
        tileM=tile_m,
        tileNum=tile_num,
        tailM=tail_m,
        tailNum=int(tail_m > 0),
    )


def matmul(c: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
    """``c = a @ b`` with FP32 accumulation, as the cube unit computes FP16 matmuls."""
    c.copy_((a.float() @ b.float()).to(c.dtype))


def torch_npu_check(op: str, check: Callable[[Callable[..., Any], str], list[str]]) -> list[str]:
    """On NPUs: ``check(torch_npu.<op>, hcom)``; elsewhere one SKIP line saying why."""
    hcom = npu_hcom()
    if hcom is None:
        return [skip("torch_npu", f"{op} needs torch_npu on NPU hardware")]
    import torch_npu

    return check(getattr(torch_npu, op), hcom)


def npu_hcom() -> str | None:
    """The HCCL communicator name of the world group when running on NPUs, else None.

    That name is what ``torch_npu``'s fused MC2 operators take as ``hcom``;
    ``torch_npu`` is imported only when present.
    """
    if hp.device().type != "npu" or importlib.util.find_spec("torch_npu") is None:
        return None
    import torch.distributed as dist
    import torch_npu  # noqa: F401 - registers the NPU backend

    group = dist.distributed_c10d._get_default_group()
    # torch_npu takes the argument to a device (rankid % device_count): this rank's own
    # device index is right in every layout (fewer ranks than NPUs, ASCEND_RT_VISIBLE_DEVICES)
    return group._get_backend(hp.device()).get_hccl_comm_name(hp.device().index)


def split_to_core(total: int, cores: int, core: int) -> tuple[int, int]:
    """The MoE kernels' ``SplitToCore``: [start, end) of ``core``'s share, the first cores one more."""
    per, rest = divmod(total, cores)
    start = per * core + min(core, rest)
    return start, start + per + (core < rest)


def moe_inputs(
    rank: int, launch: int, bs: int, k: int, h: int, local_experts: int
) -> tuple[np.ndarray, np.ndarray]:
    """The MoE samples' tokens (exact FP16 integers naming rank, token, column) and routing.

    ``bs`` tokens of ``h`` columns per rank, each sent to ``k`` distinct experts of the
    ``local_experts * world size`` experts, drawn from a seed of (launch, rank).
    """
    x = (100 * rank + 10 * np.arange(bs)[:, None] + np.arange(h) + launch).astype(np.float16)
    rng = np.random.default_rng(1000 * launch + rank)
    n_experts = local_experts * hp.get_world_size()
    ids = np.stack([rng.permutation(n_experts)[:k] for _ in range(bs)]).astype(np.int32)
    return x, ids


def moe_received(
    inputs: Callable[[int, int], tuple[np.ndarray, np.ndarray]],
    rank: int,
    launch: int,
    local_experts: int,
) -> list[tuple[np.ndarray, np.ndarray]]:
    """What ``rank`` receives in a MoE dispatch, in its order [local expert][source rank]:
    per (expert, source) the source's tokens and the indices (``token * K + slot``) of the
    source's pairs routed to that expert of ``rank``."""
    per = [inputs(s, launch) for s in range(hp.get_world_size())]
    return [
        (x, np.flatnonzero(ids.reshape(-1) == rank * local_experts + e))
        for e in range(local_experts)
        for x, ids in per
    ]


def occurrence(ids: np.ndarray) -> np.ndarray:
    """Per pair, how many earlier pairs of ``ids`` (flattened) go to the same expert (the
    dispatch's expandIdx / assistInfo)."""
    flat = ids.reshape(-1)
    order = np.argsort(flat, kind="stable")
    first = np.searchsorted(flat[order], flat[order], side="left")
    out = np.empty(flat.size, dtype=np.int64)
    out[order] = np.arange(flat.size) - first
    return out


def expert_recv_counts(
    send_counts: Callable[[int, int], list[int]], rank: int, n: int, experts: int
) -> list[int]:
    """``recv_counts[i * experts + e]``: the tokens that rank i sends to ``rank``'s expert e."""
    return [send_counts(i, n)[rank * experts + e] for i in range(n) for e in range(experts)]


def gmm_inputs(
    rank: int, tokens: int, experts: int, h1: int, n1: int, bs: int, h2: int, n2: int
) -> tuple[np.ndarray, ...]:
    """The AlltoAllvGroupedMatMul samples' inputs: gmm x (tokens, h1) sorted by global expert,
    gmm weight (experts, h1, n1), the shared expert's mm x (bs, h2) and mm weight (h2, n2)."""
    return (
        random_ints(rank, (tokens, h1)),
        random_ints(1000 + rank, (experts, h1, n1)),
        random_ints(2000 + rank, (bs, h2)),
        random_ints(3000 + rank, (h2, n2)),
    )


def gmm_reference(
    rank: int,
    n: int,
    send_counts: Callable[[int, int], list[int]],
    inputs: Callable[[int, int], tuple[np.ndarray, ...]],
    experts: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """numpy for AlltoAllvGroupedMatMul: each local expert's rows from every rank in rank order
    (permuteOut), their matmul by its weight (gmmY), and the shared expert's matmul (mmY)."""
    _, w, mm_x, mm_w = inputs(rank, n)
    xs = [inputs(src, n)[0] for src in range(n)]
    rows, y = [], []
    for e in range(experts):
        g = rank * experts + e
        parts = []
        for src in range(n):
            counts = send_counts(src, n)
            start = sum(counts[:g])
            parts.append(xs[src][start : start + counts[g]])
        block = np.concatenate(parts)
        rows.append(block)
        y.append((block.astype(np.float32) @ w[e].astype(np.float32)).astype(np.float16))
    mm_y = (mm_x.astype(np.float32) @ mm_w.astype(np.float32)).astype(np.float16)
    return np.concatenate(rows), np.concatenate(y), mm_y


# ---------------------------------------------------------------- the two-domain BMM kernels
# (AlltoAllAllGatherBatchMatMul and BatchMatMulReduceScatterAlltoAll: EP and TP domains)


class BMM_TileInfo(ctypes.Structure):
    """optiling::BMM_TileInfo: ``tileCnt`` tiles of ``tileLen`` and ``tailCnt`` of ``tailLen``."""

    _fields_ = typed_fields(ctypes.c_uint64, "tileCnt", "tileLen", "tailCnt", "tailLen")


def tile_info(tileCnt: int, tileLen: int, tailCnt: int = 0, tailLen: int = 0) -> BMM_TileInfo:
    """A BMM_TileInfo (UpdateTileInfo / InitTileInfo of the host tilings)."""
    return BMM_TileInfo(tileCnt, tileLen, tailCnt, tailLen)


def ep_tp_groups(n: int, tp: int) -> tuple[list[list[int]], list[list[int]]]:
    """EP groups ``{i, i + tp, ...}`` and TP groups ``{tp * j, ..., tp * j + tp - 1}``, as the
    sources' examples build them."""
    ep = n // tp
    return [[i + j * tp for j in range(ep)] for i in range(tp)], [
        [j * tp + i for i in range(tp)] for j in range(ep)
    ]


def ep_tp_domains(tp: int) -> tuple[hp.Group, hp.Group]:
    """This rank's EP and TP groups (:func:`ep_tp_groups`); every rank creates every group."""
    rank = hp.get_rank()
    ep_lists, tp_lists = ep_tp_groups(hp.get_world_size(), tp)
    ep_groups = [hp.new_group(ranks) for ranks in ep_lists]
    tp_groups = [hp.new_group(ranks) for ranks in tp_lists]
    return (
        next(g for g in ep_groups if rank in g.ranks),
        next(g for g in tp_groups if rank in g.ranks),
    )


def member_addresses(tilingGM: hp.GmAddr, struct: type, *members: str) -> list[hp.GmAddr]:
    """``&(tiling->member)`` for each member: the GM addresses of parts of the tiling."""
    return [tilingGM + hp.offsetof(struct, member) for member in members]


def set_ep_tp_hccl_tiling(
    initTiling, alltoAllCcTiling, tpCcTiling, epGroup: str, tpGroup: str, tpOpType, tpAlgConfig: str
) -> None:
    """SetHcclTiling of both hosts: one Mc2CcTilingConfig fills the init tiling and the EP
    domain's AlltoAllV cc tiling, then, renamed to the TP group, the TP op's cc tiling.

    The sources' first opType is their ``OP_TYPE_ALL_TO_ALL`` = 8, which is
    ``HCCL_CMD_ALLTOALLV`` (``HCCL_CMD_ALLTOALL`` is 10); the strings are their configs.
    """
    hcclCcTilingConfig = Mc2CcTilingConfig(
        epGroup, HCCL_CMD_ALLTOALLV, "AlltoAll=level0:fullmesh;level1:pairwise", 0, FP16, FP16
    )
    hcclCcTilingConfig.GetTiling(initTiling)
    hcclCcTilingConfig.GetTiling(alltoAllCcTiling)
    hcclCcTilingConfig.SetGroupName(tpGroup)
    hcclCcTilingConfig.SetOpType(tpOpType)
    hcclCcTilingConfig.SetAlgConfig(tpAlgConfig)
    hcclCcTilingConfig.GetTiling(tpCcTiling)


def core_rows(totalM: int, vecCoreNum: int, blockIdx: int) -> np.ndarray:
    """The rows ``[tileLen * blockIdx, min(tileLen * (blockIdx + 1), totalM))`` of one AIV core."""
    tileLen = -(-totalM // vecCoreNum)
    return np.arange(tileLen * blockIdx, min(tileLen * (blockIdx + 1), totalM))


def copy_rows(dst: hp.GmAddr, dstOffsets, src: hp.GmAddr, srcOffsets, width: int) -> None:
    """``DataCopyPad`` of ``width`` elements for each row: element offsets in, element offsets out.

    The indices and their extents are numpy work: in an emulated kernel every torch operation on
    GM passes the emulator's race checks, so only the gather and the scatter are torch's."""
    if len(srcOffsets) == 0:
        return
    cols = np.arange(width)
    srcIdx = (np.asarray(srcOffsets)[:, None] + cols).reshape(-1)
    dstIdx = (np.asarray(dstOffsets)[:, None] + cols).reshape(-1)
    srcT = hp.gm_tensor(src, FP16, int(srcIdx.max()) + 1)
    dstT = hp.gm_tensor(dst, FP16, int(dstIdx.max()) + 1)
    dstT[torch.from_numpy(dstIdx).to(dstT.device)] = srcT[torch.from_numpy(srcIdx).to(srcT.device)]


def data_copy(dst: hp.GmAddr, src: hp.GmAddr, count: int) -> None:
    """``DataCopyPad`` of ``count`` contiguous FP16 elements, GM to GM."""
    hp.gm_tensor(dst, FP16, count).copy_(hp.gm_tensor(src, FP16, count))


def batch_matmul(aGM, bGM, cGM, batch: int, rows: int, k: int, n: int) -> None:
    """Mc2BatchMatMulCommonKernel (stand-in): ``c[e] = a[e] @ b[e]`` for ``batch`` FP16
    matrices (rows x k by k x n), the batches split over the AIC cores; AIV cores return."""
    if hp.g_coreType != hp.AIC:
        return
    a = hp.gm_tensor(aGM, FP16, batch * rows * k).view(batch, rows, k)
    b = hp.gm_tensor(bGM, FP16, batch * k * n).view(batch, k, n)
    c = hp.gm_tensor(cGM, FP16, batch * rows * n).view(batch, rows, n)
    first, last = split_to_core(batch, hp.GetBlockNum(), hp.GetBlockIdx())
    matmul(c[first:last], a[first:last], b[first:last])
