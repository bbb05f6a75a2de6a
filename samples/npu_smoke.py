"""Smoke test for Atlas hardware: every op of the kernel API against a numpy reference.

On NPUs (torch_npu and CANN installed), one process per NPU::

    msrun --worker_num=8 --local_worker_num=8 --master_port=8118 --log_dir=smoke_logs \\
          --join=True samples/npu_smoke.py
    torchrun --nproc-per-node 8 samples/npu_smoke.py

Set ``HCCL_PY_PLATFORM=A3`` on Atlas A3 to include AlltoAllV (Atlas A2
rejects it; it shows as SKIP). On CPUs the
same script runs on the emulator (``python samples/npu_smoke.py``) or on
gloo (``python -m hccl_py run -n 4 --backend gloo samples/npu_smoke.py``).

Every case runs on every rank: AllReduce for each reducible type and reduce
op, AllGather/ReduceScatter/AlltoAll tiled with ``repeat`` and
``strideCount``, AlltoAllV with uneven counts, two domains ordered by
InterHcclGroupSync, and an AllReduce on a sub-group. Inputs are small
integers, so every reduction order gives the exact reference result. The
process of rank 0 prints a table (one row per case, one column per rank)
and every process exits with status 1 if any case failed.
"""

import os

import numpy as np
import torch
from _common import on_device

import hccl_py as hp
from hccl_py import AIV, Hccl, Mc2CcTiling, Mc2CcTilingConfig, Mc2InitTiling, TilingData, offsetof
from hccl_py import HcclDataType as T
from hccl_py import HcclReduceOp as R

COUNT = 96  # elements per round
REPEAT = 2  # rounds per Prepare (tiles); strideCount = REPEAT * COUNT
#: AllReduce, AllGather, ..., AlltoAllV: the ops the op table says the executors run.
OPS = {op: spec.cmd for op, spec in hp.ops.BY_NAME.items() if spec.executable}
NP_TYPE = {
    T.HCCL_DATA_TYPE_FP32: np.float32,
    T.HCCL_DATA_TYPE_FP16: np.float16,
    T.HCCL_DATA_TYPE_INT32: np.int32,
    T.HCCL_DATA_TYPE_INT16: np.int16,
    T.HCCL_DATA_TYPE_INT8: np.int8,
}
REDUCE = {R.HCCL_REDUCE_SUM: np.sum, R.HCCL_REDUCE_MAX: np.max, R.HCCL_REDUCE_MIN: np.min}


#: The ops each context's domain has cc tilings for (context 1: the two-domain case's AllGather).
CONTEXT_OPS = {0: tuple(OPS), 1: ("AllGather",)}


def cc_field(op: str, index: int) -> str:
    """The cc tiling of ``op`` for context ``index`` (one set per communication domain)."""
    return f"{op}Tiling" if index == 0 else f"{op}Tiling{index}"


class SmokeTilingData(TilingData):
    _fields_ = [("mc2InitTiling", Mc2InitTiling)] + [
        (cc_field(op, index), Mc2CcTiling) for index, ops in CONTEXT_OPS.items() for op in ops
    ]


def make_tiling(*groups: str) -> SmokeTilingData:
    """Host side: the init tiling, and the cc tilings of context i for domain ``groups[i]``."""
    tiling = SmokeTilingData()
    config = Mc2CcTilingConfig(groups[0], OPS["AllReduce"], "AllReduce=level0:doublering")
    status = config.GetTiling(tiling.mc2InitTiling)
    for index, group in enumerate(groups):
        status = status or config.SetGroupName(group)
        for op in CONTEXT_OPS[index]:
            status = status or config.SetOpType(OPS[op])
            status = status or config.SetAlgConfig(hp.ops.BY_NAME[op].alg_config)
            status = status or config.GetTiling(getattr(tiling, cc_field(op, index)))
    if status:
        raise RuntimeError(f"host tiling failed: {config.last_error}")
    return tiling


def init(hccl: Hccl, tilingGM, index: int = 0) -> Hccl:
    """Inside a kernel: InitV2 on context ``index`` and SetCcTilingV2 for every op of it."""
    tiling = hp.GET_TILING_DATA_WITH_STRUCT(SmokeTilingData, tilingGM)
    hccl.InitV2(hp.GetHcclContext(index), tiling)
    for op in CONTEXT_OPS[index]:
        hccl.SetCcTilingV2(offsetof(SmokeTilingData, cc_field(op, index)))
    return hccl


def one_task_kernel(sendGM, recvGM, tilingGM, op, args):
    """Prepare ``op(sendGM, recvGM, *args)`` with commit, wait every round, finalize."""
    hccl = Hccl()
    if hp.g_coreType == AIV:
        init(hccl, tilingGM)
        if op == "AlltoAllV":
            sc, sd, rc, rd, dtype, repeat = args
            handle = hccl.AlltoAllV[True](sendGM, sc, sd, dtype, recvGM, rc, rd, dtype, repeat)
            rounds = repeat
        else:
            handle = getattr(hccl, op)[True](sendGM, recvGM, *args)
            rounds = args[-1]
        for _ in range(rounds):
            hccl.Wait(handle)
        hp.SyncAll()
        hccl.Finalize()


def two_domain_kernel(xGM, aGM, yGM, tilingGM, dtype):
    """AlltoAll x -> a on domain 0; after InterHcclGroupSync, AllGather a -> y on domain 1."""
    hccl0, hccl1 = Hccl(), Hccl()
    if hp.g_coreType == AIV:
        init(hccl0, tilingGM, 0)
        init(hccl1, tilingGM, 1)
        n = hccl0.GetRankDim()
        h0 = hccl0.AlltoAll[True](xGM, aGM, COUNT, dtype)
        hccl1.InterHcclGroupSync(0, h0)
        h1 = hccl1.AllGather[True](aGM, yGM, COUNT * n, dtype, 0)
        hccl0.Wait(h0)
        hccl1.Wait(h1)
        hp.SyncAll()
        hccl0.Finalize()
        hccl1.Finalize()


# ---------------------------------------------------------------- inputs and reference
def rank_input(rank: int, count: int, dtype: int, salt: int = 0) -> np.ndarray:
    """Small integers (exact in every type and under every summation order)."""
    values = (np.arange(count) * 7 + rank * 3 + salt) % 9 - 4
    if dtype == T.HCCL_DATA_TYPE_BFP16:
        return values.astype(np.float32)
    return values.astype(NP_TYPE[dtype])


def to_tensor(values: np.ndarray, dtype: int) -> torch.Tensor:
    if dtype == T.HCCL_DATA_TYPE_BFP16:
        return on_device(values).to(torch.bfloat16)
    return on_device(values)


def run_one(op: str, dtype: int, send: np.ndarray, recv_len: int, args: tuple) -> np.ndarray:
    """Launch one task on this rank; return the receive buffer as numpy (bf16 as float32)."""
    x = to_tensor(send, dtype)
    y = torch.zeros(recv_len, dtype=x.dtype, device=hp.device())
    hp.launch(one_task_kernel, x, y, make_tiling("hccl_world_group"), op, args, block_dim=2)
    return y.float().cpu().numpy() if dtype == T.HCCL_DATA_TYPE_BFP16 else y.cpu().numpy()


def check(name: str, got: np.ndarray, want: np.ndarray) -> tuple[str, str, str]:
    got, want = np.asarray(got).reshape(-1), np.asarray(want).reshape(-1)
    bad = np.flatnonzero(got != want)
    if got.shape != want.shape:
        return name, "FAIL", f"{got.size} elements, expected {want.size}"
    if len(bad):
        i = int(bad[0])
        return name, "FAIL", f"{len(bad)} wrong, first [{i}]: {got[i]} != {want[i]}"
    return name, "PASS", ""


# ---------------------------------------------------------------- the cases
def all_reduce_cases(rank: int, n: int) -> list[tuple[str, str, str]]:
    rows = []
    for dtype in (*NP_TYPE, T.HCCL_DATA_TYPE_BFP16):
        for reduce_op, combine in REDUCE.items():
            sends = [rank_input(r, COUNT * REPEAT, dtype) for r in range(n)]
            want = combine(np.stack(sends), axis=0)
            got = run_one(
                "AllReduce", dtype, sends[rank], COUNT * REPEAT, (COUNT, dtype, reduce_op, REPEAT)
            )
            name = f"AllReduce-{dtype.name[15:]}-{reduce_op.name[12:]}"
            rows.append(check(name, got, want))
    return rows


def data_movement_cases(rank: int, n: int) -> list[tuple[str, str, str]]:
    stride = COUNT * REPEAT
    fp16, int32, fp32 = T.HCCL_DATA_TYPE_FP16, T.HCCL_DATA_TYPE_INT32, T.HCCL_DATA_TYPE_FP32
    rows = []
    sends = [rank_input(r, stride, fp16) for r in range(n)]
    got = run_one("AllGather", fp16, sends[rank], n * stride, (COUNT, fp16, stride, REPEAT))
    rows.append(check("AllGather-tiled", got, np.concatenate(sends)))

    sends = [rank_input(r, n * stride, fp32) for r in range(n)]
    want = np.sum(np.stack(sends), axis=0).reshape(n, stride)[rank]
    args = (COUNT, fp32, R.HCCL_REDUCE_SUM, stride, REPEAT)
    rows.append(
        check(
            "ReduceScatter-tiled", run_one("ReduceScatter", fp32, sends[rank], stride, args), want
        )
    )

    sends = [rank_input(r, n * stride, int32).reshape(n, stride) for r in range(n)]
    got = run_one("AlltoAll", int32, sends[rank], n * stride, (COUNT, int32, stride, REPEAT))
    rows.append(check("AlltoAll-tiled", got, np.stack([sends[i][rank] for i in range(n)])))
    return rows


def alltoallv_case(rank: int, n: int) -> tuple[str, str, str]:
    if not hp.PLATFORMS[PLATFORM].supports(OPS["AlltoAllV"]):
        return "AlltoAllV-uneven", "SKIP", f"{PLATFORM} has no AlltoAllV"
    fp16 = T.HCCL_DATA_TYPE_FP16
    counts = np.random.default_rng(7).integers(0, 40, size=(n, n))  # counts[i][j]: i sends to j
    sends = [rank_input(r, int(counts[r].sum()), fp16) for r in range(n)]
    sdispls = np.concatenate([[0], np.cumsum(counts[rank])[:-1]])
    rdispls = np.concatenate([[0], np.cumsum(counts[:, rank])[:-1]])
    want = np.concatenate(
        [sends[i][int(counts[i, :rank].sum()) : int(counts[i, : rank + 1].sum())] for i in range(n)]
    )
    args = (
        counts[rank].tolist(),
        sdispls.tolist(),
        counts[:, rank].tolist(),
        rdispls.tolist(),
        fp16,
        1,
    )
    got = run_one("AlltoAllV", fp16, sends[rank], max(1, len(want)), args)
    return check("AlltoAllV-uneven", got[: len(want)], want)


def two_domain_case(rank: int, n: int) -> tuple[str, str, str]:
    name = "InterHcclGroupSync"
    int32 = T.HCCL_DATA_TYPE_INT32
    g = hp.new_group(range(n))
    sends = [rank_input(r, n * COUNT, int32).reshape(n, COUNT) for r in range(n)]
    received = [np.concatenate([sends[i][j] for i in range(n)]) for j in range(n)]
    x = on_device(sends[rank])
    a = torch.zeros(n * COUNT, dtype=torch.int32, device=hp.device())
    y = torch.zeros(n * n * COUNT, dtype=torch.int32, device=hp.device())
    groups = {0: hp.world_group(), 1: g}
    tiling = make_tiling(groups[0].name, g.name)
    hp.launch(two_domain_kernel, x, a, y, tiling, int32, block_dim=2, groups=groups)
    return check(name, y.cpu().numpy(), np.concatenate(received))


def sub_group_case(rank: int, n: int) -> tuple[str, str, str]:
    evens = list(range(0, n, 2))
    name = f"AllReduce-ranks{evens}".replace(" ", "")
    g = hp.new_group(evens)  # every rank creates every group
    if rank not in evens:
        return name, "SKIP", "not in the group"
    fp32 = T.HCCL_DATA_TYPE_FP32
    x = to_tensor(rank_input(rank, COUNT, fp32), fp32)
    y = torch.zeros(COUNT, device=hp.device())
    want = np.sum([rank_input(r, COUNT, fp32) for r in evens], axis=0)
    args = ("AllReduce", (COUNT, fp32, R.HCCL_REDUCE_SUM, 1))
    hp.launch(one_task_kernel, x, y, make_tiling(g.name), *args, block_dim=2, groups={0: g})
    return check(name, y.cpu().numpy(), want)


def main() -> list[tuple[str, str, str]]:
    rank, n = hp.get_rank(), hp.get_world_size()
    return [
        *all_reduce_cases(rank, n),
        *data_movement_cases(rank, n),
        alltoallv_case(rank, n),
        two_domain_case(rank, n),
        sub_group_case(rank, n),
    ]


class _Main:
    """``main`` that notes which ranks ran in this process (picklable for gloo workers)."""

    ran_here: set[int] = set()

    def __call__(self) -> list[tuple[str, str, str]]:
        _Main.ran_here.add(hp.get_rank())
        return main()


def table(per_rank: list[list[tuple[str, str, str]]]) -> str:
    """One row per case, one column per rank; then why cases failed (per rank) or were skipped."""
    names = [name for name, _, _ in per_rank[0]]
    width = max(len(name) for name in names)
    lines = [f"{'case':<{width}}  " + " ".join(f"r{r:<4}" for r in range(len(per_rank)))]
    for i, name in enumerate(names):
        lines.append(f"{name:<{width}}  " + " ".join(f"{rows[i][1]:<5}" for rows in per_rank))
    skipped = {name: why for rows in per_rank for name, word, why in rows if word == "SKIP"}
    lines += [f"{name}: SKIP ({why})" for name, why in skipped.items()]
    for rank, rows in enumerate(per_rank):
        lines += [f"rank {rank}: {name} FAIL {why}" for name, word, why in rows if word == "FAIL"]
    return "\n".join(lines)


PLATFORM = os.environ.get("HCCL_PY_PLATFORM", "A2").upper()

if __name__ == "__main__":
    results = hp.run(_Main(), platform=PLATFORM)
    failed = any(word == "FAIL" for rows in results for _, word, _ in rows)
    if not _Main.ran_here or 0 in _Main.ran_here:
        print(table(results))
        print(f"{'FAILED' if failed else 'all cases passed'} on {len(results)} ranks ({PLATFORM})")
    raise SystemExit(1 if failed else 0)
