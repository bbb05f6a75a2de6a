"""MoE dispatch and combine through communication windows, as ops-transformer's MC2 kernels do.

Run: ``python samples/moe_distribute_window.py`` (4 emulated ranks),
``python -m hccl_py run -n 8 samples/moe_distribute_window.py``, or
``python -m hccl_py run -n 4 --backend gloo samples/moe_distribute_window.py``.

Every rank holds ``BS`` tokens of ``H`` values and routes each to its top-``K``
experts (``LOCAL_EXPERTS`` per rank). Like moe_distribute_dispatch and
moe_distribute_combine, the kernels move tokens without a collective:

- dispatch: each rank copies the rows for rank ``d`` into ``d``'s In window
  (slot = sender), then writes ``{count, epoch}`` into ``d``'s status area; the
  receiver polls every sender's status until it holds this round's epoch and
  copies the rows out (``expandX``, with the expert id in the last column);
- combine: each rank returns the rows its experts processed to the senders'
  windows the same way; every sender adds them up per token, weighted by the gates.

Two paths, as the originals: the single-server path copies directly into
peers' windows (``hp.gm_tensor``), the layered A2 path reaches ranks of other
servers through ``BatchWrite`` (A2 items, data then status, in one batch) and
copies directly within its server. The sample runs the A2 path with two ranks
per server (``ranks_per_server=2``), so that it uses both. Each round uses a
new epoch for its flags. Every result is compared with a numpy routing of
every rank's tokens.
"""

import ctypes

import numpy as np
import torch
from _common import WORLD_GROUP, compare, on_device, run_sample, verdict

import hccl_py as hp
from hccl_py import (
    HCCL_CMD_BATCH_WRITE,
    Hccl,
    HcclDataType,
    Mc2CcTiling,
    Mc2CcTilingConfig,
    Mc2InitTiling,
    TilingData,
    offsetof,
)

BS, H, K, LOCAL_EXPERTS = 4, 8, 2, 2
W = H + 1  # a row: H values and the expert id
ROW_BYTES = W * 4
CAP = BS * K  # rows one rank can send to another
FP32 = HcclDataType.HCCL_DATA_TYPE_FP32
INT32 = HcclDataType.HCCL_DATA_TYPE_INT32
# In window: rows and {count, epoch} per sender, for dispatch and for combine
DISPATCH_DATA, DISPATCH_STATUS = 0, 1 << 20
COMBINE_DATA, COMBINE_STATUS = 2 << 20, 3 << 20
# Out window (A2 path): rows and status staged for BatchWrite, then the items
STAGE_STATUS, STAGE_ITEMS = 1 << 20, 2 << 20
ITEM = np.dtype(
    [("local", "<u8"), ("remote", "<u8"), ("count", "<u8"), ("type", "<u4"), ("rank", "<u4")]
)
RANKS_PER_SERVER = 2
#: hp.run options of this sample: two ranks per server, so that the A2 path uses BatchWrite too.
RUN_KWARGS = {"ranks_per_server": RANKS_PER_SERVER}
SEED = 13


class MoeTilingData(TilingData):
    _fields_ = [
        ("mc2InitTiling", Mc2InitTiling),
        ("batchWriteCcTiling", Mc2CcTiling),
        ("epoch", ctypes.c_int32),
        ("useBatchWrite", ctypes.c_int32),
        ("ranksPerServer", ctypes.c_int32),
    ]


def send_rows(hccl, tiling, rows_for, data_off, status_off):
    """Put ``rows_for[d]`` (a float32 (n, W) tensor) and {n, epoch} into every rank d's In window."""
    me, dim = hccl.GetRankId(), hccl.GetRankDim()
    items = []
    for d in range(dim):
        rows = rows_for[d]
        status = torch.tensor([rows.shape[0], tiling.epoch], dtype=torch.int32)
        dst = hccl.GetWindowsInAddr(d)
        same_server = d // tiling.ranksPerServer == me // tiling.ranksPerServer
        if not tiling.useBatchWrite or same_server:
            hp.gm_tensor(dst + data_off + me * CAP * ROW_BYTES, FP32, rows.numel())[:] = (
                rows.reshape(-1)
            )
            hp.gm_tensor(dst + status_off + me * 8, INT32, 2)[:] = status
            continue
        stage = hccl.GetWindowsOutAddr(me)
        hp.gm_tensor(stage + d * CAP * ROW_BYTES, FP32, rows.numel())[:] = rows.reshape(-1)
        hp.gm_tensor(stage + STAGE_STATUS + d * 8, INT32, 2)[:] = status
        if rows.numel():
            items.append(
                (
                    int(stage + d * CAP * ROW_BYTES),
                    int(dst + data_off + me * CAP * ROW_BYTES),
                    rows.numel(),
                    FP32,
                    d,
                )
            )
        items.append(
            (int(stage + STAGE_STATUS + d * 8), int(dst + status_off + me * 8), 2, INT32, d)
        )
    if items:
        info = hccl.GetWindowsOutAddr(me) + STAGE_ITEMS
        hp.gm_tensor(info, torch.uint8, len(items) * ITEM.itemsize)[:] = torch.from_numpy(
            np.array(items, dtype=ITEM).view(np.uint8)
        )
        hccl.BatchWrite[True](info, len(items))


def receive_rows(hccl, tiling, data_off, status_off):
    """Poll every sender's status for this round's epoch; the rows each one sent."""
    me, dim = hccl.GetRankId(), hccl.GetRankDim()
    win = hccl.GetWindowsInAddr(me)
    received = []
    for s in range(dim):
        while int(hp.gm_tensor(win + status_off + s * 8 + 4, INT32, 1)[0]) != tiling.epoch:
            pass
        n = int(hp.gm_tensor(win + status_off + s * 8, INT32, 1)[0])
        rows = hp.gm_tensor(win + data_off + s * CAP * ROW_BYTES, FP32, n * W)
        received.append(rows.clone().reshape(n, W))
    return received


def routing_of(rank: int, n_experts: int) -> tuple[np.ndarray, np.ndarray]:
    """Rank ``rank``'s top-K expert ids (BS, K) and gates (BS, K): distinct experts per token."""
    rng = np.random.default_rng(SEED + rank)
    ids = np.stack([rng.choice(n_experts, K, replace=False) for _ in range(BS)])
    gates = rng.integers(1, 4, size=(BS, K)).astype(np.float32) / 4
    return ids, gates


def moe_dispatch(xGM, expertIdsGM, expandXGM, countsGM, tilingGM):
    """Send every (token, k) row to the rank of its expert; gather the rows sent to this rank."""
    tiling = hp.GET_TILING_DATA_WITH_STRUCT(MoeTilingData, tilingGM)
    hccl = Hccl()
    hccl.InitV2(hp.GetHcclContext(0), tiling)
    hccl.SetCcTilingV2(offsetof(MoeTilingData, "batchWriteCcTiling"))
    dim = hccl.GetRankDim()
    x = hp.gm_tensor(xGM, FP32, BS * H).reshape(BS, H)
    ids = hp.gm_tensor(expertIdsGM, INT32, BS * K).reshape(BS, K)
    rows = torch.cat([x.repeat_interleave(K, 0), ids.reshape(-1, 1).float()], 1)
    dest = ids.reshape(-1) // LOCAL_EXPERTS
    send_rows(hccl, tiling, [rows[dest == d] for d in range(dim)], DISPATCH_DATA, DISPATCH_STATUS)
    received = receive_rows(hccl, tiling, DISPATCH_DATA, DISPATCH_STATUS)
    counts = torch.tensor([r.shape[0] for r in received], dtype=torch.int32)
    hp.gm_tensor(countsGM, INT32, dim)[:] = counts
    got = torch.cat(received)
    hp.gm_tensor(expandXGM, FP32, got.numel())[:] = got.reshape(-1)
    hccl.Finalize()


def moe_combine(expertOutGM, countsGM, expertIdsGM, gatesGM, outGM, tilingGM):
    """Return the processed rows to their senders; sum them per token, weighted by the gates."""
    tiling = hp.GET_TILING_DATA_WITH_STRUCT(MoeTilingData, tilingGM)
    hccl = Hccl()
    hccl.InitV2(hp.GetHcclContext(0), tiling)
    hccl.SetCcTilingV2(offsetof(MoeTilingData, "batchWriteCcTiling"))
    dim = hccl.GetRankDim()
    counts = hp.gm_tensor(countsGM, INT32, dim).tolist()
    rows = hp.gm_tensor(expertOutGM, FP32, sum(counts) * W).reshape(-1, W)
    send_rows(hccl, tiling, list(torch.split(rows, counts)), COMBINE_DATA, COMBINE_STATUS)
    back = torch.cat(receive_rows(hccl, tiling, COMBINE_DATA, COMBINE_STATUS))
    ids = hp.gm_tensor(expertIdsGM, INT32, BS * K).reshape(-1)
    order = torch.argsort(ids // LOCAL_EXPERTS, stable=True)  # the order dispatch sent them in
    gates = hp.gm_tensor(gatesGM, FP32, BS * K)[order]
    out = torch.zeros(BS, H).index_add_(0, order // K, back[:, :H] * gates[:, None])
    hp.gm_tensor(outGM, FP32, BS * H)[:] = out.reshape(-1)
    hccl.Finalize()


def make_tiling(epoch: int, use_batch_write: bool) -> MoeTilingData:
    """Host side: the BatchWrite cc tiling and the kernel's own fields."""
    tiling = MoeTilingData()
    config = Mc2CcTilingConfig(WORLD_GROUP, HCCL_CMD_BATCH_WRITE, "BatchWrite=level0:fullmesh")
    config.GetTiling(tiling.mc2InitTiling)
    config.GetTiling(tiling.batchWriteCcTiling)
    tiling.epoch = epoch
    tiling.useBatchWrite = int(use_batch_write)
    tiling.ranksPerServer = RANKS_PER_SERVER
    return tiling


def reference(rank: int, n: int, round_idx: int) -> tuple[np.ndarray, np.ndarray]:
    """numpy: the rows rank ``rank`` receives in dispatch and its combined output."""
    xs = [token_values(r, round_idx) for r in range(n)]
    routes = [routing_of(r, n * LOCAL_EXPERTS) for r in range(n)]
    received = []
    for r in range(n):
        ids = routes[r][0].reshape(-1)
        mine = np.flatnonzero(ids // LOCAL_EXPERTS == rank)
        received.append(np.column_stack([xs[r][mine // K], ids[mine]]))
    ids, gates = routes[rank]
    scale = (ids + 1).astype(np.float32)  # expert e multiplies by e + 1
    out = (xs[rank][:, None, :] * (scale * gates)[:, :, None]).sum(1)
    return np.concatenate(received).astype(np.float32), out.astype(np.float32)


def token_values(rank: int, round_idx: int) -> np.ndarray:
    """Rank ``rank``'s tokens in round ``round_idx``: small exact float32 values."""
    base = np.arange(BS * H, dtype=np.float32).reshape(BS, H) % 7
    return base + 10 * rank + 100 * round_idx


def moe_round(round_idx: int, epoch: int, use_batch_write: bool) -> tuple[torch.Tensor, ...]:
    """One dispatch, the experts and one combine; the received rows and the output."""
    rank, n = hp.get_rank(), hp.get_world_size()
    ids, gates = routing_of(rank, n * LOCAL_EXPERTS)
    x, ids_t = on_device(token_values(rank, round_idx)), on_device(ids.astype(np.int32))
    expand_x = torch.zeros(n * CAP, W)
    counts = torch.zeros(n, dtype=torch.int32)
    tiling = make_tiling(epoch, use_batch_write)
    hp.launch(moe_dispatch, x, ids_t, expand_x, counts, tiling)
    got = expand_x[: int(counts.sum())]
    expert_out = torch.cat([got[:, :H] * (got[:, H:] + 1), got[:, H:]], 1).contiguous()
    out = torch.zeros(BS, H)
    hp.launch(moe_combine, expert_out, counts, ids_t, on_device(gates), out, tiling)
    return got, out


def main() -> list[str]:
    rank, n = hp.get_rank(), hp.get_world_size()
    verdicts = []
    for path, use_bw in (("direct", False), ("a2", True)):
        ok_rows = ok_out = True
        for round_idx in range(2):
            epoch = 2 * round_idx + 1 + int(use_bw)  # a new flag value every round
            got, out = moe_round(round_idx, epoch, use_bw)
            want_rows, want_out = reference(rank, n, round_idx)
            ok_rows &= got.shape == want_rows.shape and bool((got.numpy() == want_rows).all())
            ok_out &= bool((out.numpy() == want_out).all())
        verdicts.append(verdict(f"dispatch-{path}", ok_rows, f"{got.shape[0]} rows received"))
        verdicts.append(compare(f"combine-{path}", out, want_out))
    return verdicts


if __name__ == "__main__":
    run_sample(main, **RUN_KWARGS)
