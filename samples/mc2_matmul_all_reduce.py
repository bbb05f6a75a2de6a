"""Port of ops-transformer's MatmulAllReduce (arch22, cube-only "910 general"), call for call.

Source: ops-transformer, ``mc2/matmul_all_reduce/op_kernel/arch22/matmul_all_reduce_910_general.h``
(``MatmulAllReduce910General``) and ``.../arch22/matmul_all_reduce_base.h``
(``MatmulAllReduceBase``: ``Init``, ``InnerProcess``, ``PostProcEachTurn``, ``HcclFinalize``);
host ``op_host/op_tiling/matmul_all_reduce_tiling_base.cpp`` (``DoSplitMTiling``);
described in docs/notes/mc2-kernels.md. This is the ``useBufferType == OUTPUT`` path (the
AllReduce runs in place in the output); the ``WINDOW_IN`` path needs the communication windows.

What it relies on (docs/fidelity.md): the tiling-less ``Init(GetHcclContext<0>())``, after
which Prepare needs no SetCcTiling; only the notify core (cube block 0) Prepares and Commits,
each Commit after a mode-0 CrossCore barrier (``Mc2SyncAll``, flag 3); the notify core Waits
each handle *once* although its repeat is the tile count, and ``Finalize`` waits for the rest.

MatmulAllReduceAddRmsNorm runs the same AllReduce from a mixed kernel without a Wait:
samples/mc2_matmul_all_reduce_add_rms_norm.py (imports this one).

Run: ``python samples/mc2_matmul_all_reduce.py`` (4 emulated ranks),
``python -m hccl_py run -n 2 --backend gloo samples/mc2_matmul_all_reduce.py``.
"""

from ctypes import c_uint32

import numpy as np
from _common import compare, on_device, random_ints, run_sample, zeros
from _mc2 import SIZEOF_HALF, matmul

import hccl_py as hp
from hccl_py import HCCL_DATA_TYPE_FP16, HCCL_REDUCE_SUM, PIPE_FIX, Hccl, TilingData

M, K, N = 26, 64, 16  # every rank's A is M x K; the output is the sum over ranks of A @ B
TILE_M = 8  # the host's M cut: three tiles of 8 rows, then a tail of 2 rows
AIC_NUM, USED_CORE_NUM = 3, 2  # three cube cores, the third one idle


class MatmulAllReduce910TilingData(TilingData):
    """The RCSTiling and Mc2MatmulV3TilingData fields the kernel reads; no Mc2InitTiling."""

    _fields_ = [
        (name, c_uint32)
        for name in ("rankM", "rankN", "rankK", "tileCnt", "tileM", "tailCnt", "tailM")
    ] + [("usedCoreNum", c_uint32), ("dataType", c_uint32)]


def mc2_sync_all():
    """``Mc2SyncAll<ON_CUBE>``: ``CrossCoreSetFlag<0, PIPE_FIX>(3); WaitFlagDevLocal(3)``."""
    hp.CrossCoreSetFlag[0, PIPE_FIX](3)
    hp.CrossCoreWaitFlag(3)


def matmul_all_reduce(aGM, bGM, cGM, workspaceGM, tilingGM):
    tiling = hp.GET_TILING_DATA_WITH_STRUCT(MatmulAllReduce910TilingData, tilingGM)
    notifyFlag = hp.GetBlockIdx() == 0  # ON_CUBE: cube block 0 talks to the server
    hccl = Hccl()
    hccl.Init(hp.GetHcclContext(0))  # no tiling: Prepare needs no SetCcTiling
    outputGM = cGM  # useBufferType OUTPUT: the AllReduce runs in place in the output
    tileCOffset = tiling.tileM * tiling.rankN
    tailCOffset = tiling.tailM * tiling.rankN
    tileCAddrOffset = tileCOffset * SIZEOF_HALF
    dataType = tiling.dataType
    handles = {}
    if notifyFlag:
        handles["tile"] = hccl.AllReduce(
            cGM, outputGM, tileCOffset, dataType, HCCL_REDUCE_SUM, tiling.tileCnt
        )
        if tiling.tailCnt:
            tailAddr = tiling.tileCnt * tileCAddrOffset
            handles["tail"] = hccl.AllReduce(
                cGM + tailAddr,
                outputGM + tailAddr,
                tailCOffset,
                dataType,
                HCCL_REDUCE_SUM,
                tiling.tailCnt,
            )

    a = hp.gm_tensor(aGM, HCCL_DATA_TYPE_FP16, tiling.rankM * tiling.rankK).view(tiling.rankM, -1)
    b = hp.gm_tensor(bGM, HCCL_DATA_TYPE_FP16, tiling.rankK * tiling.rankN).view(tiling.rankK, -1)
    c = hp.gm_tensor(cGM, HCCL_DATA_TYPE_FP16, tiling.rankM * tiling.rankN).view(tiling.rankM, -1)
    row = 0
    for group, rows, cnt in (
        ("tile", tiling.tileM, tiling.tileCnt),
        ("tail", tiling.tailM, tiling.tailCnt),
    ):
        for _ in range(cnt):  # InnerProcess: one turn per tile
            if hp.GetBlockIdx() < tiling.usedCoreNum:  # the cores that compute split the rows
                chunk = -(-rows // tiling.usedCoreNum)
                lo = row + hp.GetBlockIdx() * chunk
                hi = min(row + rows, lo + chunk)
                if lo < hi:
                    matmul(c[lo:hi], a[lo:hi], b)
            row += rows  # PostProcEachTurn: aGM += aOffset; cGM += cOffset
            mc2_sync_all()
            if notifyFlag:
                hccl.Commit(handles[group])

    # HcclFinalize: the notify core Waits each handle once; Finalize waits for the rest
    if notifyFlag:
        for handle in handles.values():
            hccl.Wait(handle)
    mc2_sync_all()
    if notifyFlag:
        hccl.Finalize()


def make_tiling() -> MatmulAllReduce910TilingData:
    """Host side (DoSplitMTiling): the M cut into tiles and a tail, and the used cube cores."""
    tile_cnt, tail_m = divmod(M, TILE_M)
    return MatmulAllReduce910TilingData(
        rankM=M,
        rankN=N,
        rankK=K,
        tileCnt=tile_cnt,
        tileM=TILE_M,
        tailCnt=1 if tail_m else 0,
        tailM=tail_m,
        usedCoreNum=USED_CORE_NUM,
        dataType=HCCL_DATA_TYPE_FP16,
    )


def all_reduce_sum(n: int) -> np.ndarray:
    """numpy: the sum over ``n`` ranks of ``A_r @ B`` (exact: small integers), in FP16."""
    b_host = random_ints(1000, (K, N))  # the same weight on every rank
    return np.sum(
        [random_ints(r, (M, K)).astype(np.float32) @ b_host for r in range(n)], axis=0
    ).astype(np.float16)


def main() -> list[str]:
    rank, n = hp.get_rank(), hp.get_world_size()
    b_host = random_ints(1000, (K, N))
    expected = all_reduce_sum(n)
    a, b, c = on_device(random_ints(rank, (M, K))), on_device(b_host), zeros(M, N)
    hp.launch(matmul_all_reduce, a, b, c, None, make_tiling(), block_dim=AIC_NUM, kernel_type="aic")
    tiling = make_tiling()
    detail = f"{tiling.tileCnt} tiles of {TILE_M} rows and a tail of {tiling.tailM}, summed over {n} ranks"
    return [compare("output", c, expected, detail)]


if __name__ == "__main__":
    run_sample(main)
