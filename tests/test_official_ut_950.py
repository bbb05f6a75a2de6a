"""The official client's Ascend 950 and Hcomm unit tests, case by case, against hccl_py.

asc-devkit (mirror-cann 82b89a15) tests the 950 CCU client in
``tests/api/adv_api/hccl/test_hccl_950.cpp``, the 950 AI CPU client in
``tests/api/adv_api/hccl/test_hccl_aicpu_950.cpp`` and the Hcomm API in
``tests/api/adv_api/hcomm/test_hcomm.cpp`` and ``test_hcomm_urma_950.cpp``. Each test
here is named after the official case it follows and asserts what hccl_py shows for it
on platform "950": the return value, what Wait reports, the data moved, the warning or
the error. Those UTs run one rank with made-up addresses and no server (``UT_TEST``
compiles the polls out); here every rank runs the same kernel on real buffers, so
addresses are tensors and results are checked. Where hccl_py differs on purpose the test
says so and docs/fidelity.md lists it; docs/notes/official-client.md ("The 950 and Hcomm
unit tests") goes through every case.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from cases import RUN_TIMEOUT
from expect import expects_warning

import hccl_py as hp
from hccl_py import Hccl, HcclCMDType, HcclDataType, HcclReduceOp, Mc2CcTiling, Mc2InitTiling
from hccl_py.core.constants import HCOMM_URMA_TMP_BUF_SIZE

INT8 = HcclDataType.HCCL_DATA_TYPE_INT8
SUM = HcclReduceOp.HCCL_REDUCE_SUM
CCU = hp.HCCL_SERVER_TYPE_CCU
AICPU = hp.HCCL_SERVER_TYPE_AICPU
N = 16  # int8 elements per rank's send buffer

Body = Callable[[Hccl, Any, Any, list], None]


class Tiling950(hp.TilingData):
    """Mc2TilingAicpuTest's shape: the init tiling, then one cc tiling."""

    _fields_ = [("init", Mc2InitTiling), ("cc", Mc2CcTiling)]


def _tiling(cmd: HcclCMDType) -> Tiling950:
    t = Tiling950()
    cfg = hp.Mc2CcTilingConfig("hccl_world_group", cmd, "")
    assert cfg.GetTiling(t.init) == 0 and cfg.GetTiling(t.cc) == 0
    return t


def _kernel(x: Any, y: Any, tiling: Any, v2: bool, rec: list, server: int, body: Body) -> None:
    hccl = Hccl(server)
    if not v2:  # HcclSuiteAIC: Init(context), no tiling, no SetCcTiling
        hccl.Init(hp.GetHcclContext(0))
    else:  # HcclSuiteAICPU: InitV2(context, tiling), SetCcTilingV2(sizeof(init tiling))
        t = hp.GET_TILING_DATA_WITH_STRUCT(Tiling950, tiling)
        hccl.InitV2(hp.GetHcclContext(0), t)
        rec.append(("dim", hccl.GetRankDim(), hccl.SetCcTilingV2(hp.offsetof(Tiling950, "cc"))))
    body(hccl, x, y, rec)
    hccl.Finalize()


def run_950(
    body: Body,
    world: int = 2,
    server: int = CCU,
    cmd: HcclCMDType | None = None,
    strict: bool = True,
    recv: int = 16,
) -> Any:
    """Every rank runs ``body`` on one core; returns ([(record, y)] per rank) with .warnings.

    ``x`` holds rank + 1 in each of N int8 elements, ``y`` ``recv * N`` zeros.
    ``cmd``: InitV2 with a cc tiling of ``cmd`` (the AI CPU suite), else a tiling-less Init.
    """

    def main() -> tuple[list, list]:
        x = torch.full((N,), hp.get_rank() + 1, dtype=torch.int8)
        y = torch.zeros(recv * N, dtype=torch.int8)
        rec: list = []
        tiling = _tiling(HcclCMDType.HCCL_CMD_ALLGATHER if cmd is None else cmd)
        hp.launch(_kernel, x, y, tiling, cmd is not None, rec, server, body)
        return rec, y.tolist()

    return hp.run(main, world_size=world, platform="950", strict=strict, timeout=RUN_TIMEOUT)


def _ranks(world: int, count: int) -> list[int]:
    """What an AllGather of ``count`` elements puts in y: each rank's value, rank by rank."""
    return np.repeat(np.arange(1, world + 1), count).tolist()


# ------------------------------------------------------------------ test_hccl_950.cpp (CCU)
def test_AllGather_Repeat1() -> None:
    """test_hccl_950.cpp, AllGather_Repeat1: Prepare, Commit, handle 0, Wait 0."""

    def body(h: Hccl, x: Any, y: Any, rec: list) -> None:
        hd = h.AllGather(x, y, 8, INT8, 0, 1)
        h.Commit(hd)
        rec += [hd, h.Wait(hd)]

    for rec, y in run_950(body):
        assert rec == [0, 0]
        assert y[:16] == _ranks(2, 8)


def test_AllGather_repeat_prepare_commit_2() -> None:
    """test_hccl_950.cpp, AllGather_repeat_prepare_commit_2: two Prepares get handles 0, 1."""

    def body(h: Hccl, x: Any, y: Any, rec: list) -> None:
        for i in range(2):
            hd = h.AllGather(x, y + 32 * i, 8, INT8, 0, 1)
            h.Commit(hd)
            rec += [hd, h.Wait(hd)]

    for rec, y in run_950(body):
        assert rec == [0, 0, 1, 0]
        assert y[:16] == y[32:48] == _ranks(2, 8)


def test_AllGather_repeat_prepare_commit_2_1_1() -> None:
    """test_hccl_950.cpp, AllGather_repeat_prepare_commit_2_1_1: repeat 2, a Commit and a Wait
    per round. (The UT's strideCount 0 with one receive buffer overlaps the rounds, an
    HcclOverlapError here; strideCount = repeat * count keeps them apart.)"""

    def body(h: Hccl, x: Any, y: Any, rec: list) -> None:
        hd = h.AllGather(x, y, 4, INT8, 8, 2)
        rec.append(hd)
        for _ in range(2):
            h.Commit(hd)
            rec.append(h.Wait(hd))

    for rec, y in run_950(body):
        assert rec == [0, 0, 0]
        assert y[:16] == [1] * 8 + [2] * 8  # round r of rank k at 8 * k + 4 * r


def test_AllGather_repeat_prepare_commit_2_1_1_overlap() -> None:
    """test_hccl_950.cpp, AllGather_repeat_prepare_commit_2_1_1 as written (strideCount 0,
    repeat 2): both rounds write the same bytes, which hccl_py reports (docs/fidelity.md,
    "overlapping receive ranges"); the official client never looks at the buffers."""

    def body(h: Hccl, x: Any, y: Any, rec: list) -> None:
        hd = h.AllGather(x, y, 4, INT8, 0, 2)
        for _ in range(2):
            h.Commit(hd)
            h.Wait(hd)

    with pytest.raises(hp.WorldError, match="HcclOverlapError"):
        run_950(body)


def test_AllGather_repeat_prepare_commit_16_1_1() -> None:
    """test_hccl_950.cpp, AllGather_repeat_prepare_commit_16_1_1: 16 handles, ids 0..15, each
    Wait 0."""

    def body(h: Hccl, x: Any, y: Any, rec: list) -> None:
        for i in range(16):
            hd = h.AllGather(x, y + 2 * i, 1, INT8, 1, 1)
            h.Commit(hd)
            rec += [hd, h.Wait(hd)]

    for rec, y in run_950(body, recv=4):
        assert rec[0::2] == list(range(16)) and rec[1::2] == [0] * 16
        assert y[:32] == [1, 2] * 16


def test_AllGather_CommitBeforePrepare() -> None:
    """test_hccl_950.cpp, AllGather_CommitBeforePrepare: the UT checks that the AI CPU
    message area's commitTurnCnt[0] stays 0, which the CCU client never writes. The CCU
    client's Commit has no "was it prepared" check (hccl_ccu_v0.h, Commit): it sends
    handle 0's stale parameters as a round. hccl_py sends nothing and says why (strict:
    HcclUsageError; lenient: ignored); a Prepare after it still gets handle 0 and runs."""

    def body(h: Hccl, x: Any, y: Any, rec: list) -> None:
        rec += [h.Commit(0), h.last_error]
        hd = h.AllGather[True](x, y, 8, INT8, 0, 1)
        rec += [hd, h.Wait(hd)]

    for rec, y in run_950(body, strict=False):
        assert rec[0] is None and "handle 0 was never returned by Prepare" in rec[1]
        assert rec[2:] == [0, 0] and y[:16] == _ranks(2, 8)
    with pytest.raises(hp.WorldError, match="HcclUsageError.*never returned by Prepare"):
        run_950(body)


def test_AllGather_WaitBeforePrepare() -> None:
    """test_hccl_950.cpp, AllGather_WaitBeforePrepare: Wait(0) before any Prepare is
    HCCL_FAILED (hccl_ccu_v0.h, Wait: commit count 0; in a release build the always-on
    ``handleNeedCommitCnt_ <= 0`` check). Lenient: -1 and the kernel goes on."""

    def body(h: Hccl, x: Any, y: Any, rec: list) -> None:
        rec += [h.Wait(0), h.last_error]

    for rec, _ in run_950(body, strict=False):
        assert rec[0] == hp.HCCL_FAILED and "never returned by Prepare" in rec[1]


@expects_warning("wait-not-committed")
def test_AllGather_WaitBeforeCommit() -> None:
    """test_hccl_950.cpp, AllGather_WaitBeforeCommit: AllReduce repeat 3, commit=false, Wait
    is HCCL_FAILED at once; a warning, never an error, in a strict run too. The rounds
    committed afterwards run and their Waits return 0."""

    def body(h: Hccl, x: Any, y: Any, rec: list) -> None:
        hd = h.AllReduce(x, y, 4, INT8, SUM, 3)
        rec += [hd, h.Wait(hd)]
        for _ in range(3):
            h.Commit(hd)
        rec += [h.Wait(hd) for _ in range(3)]

    out = run_950(body)
    for rec, y in out:
        assert rec == [0, hp.HCCL_FAILED, 0, 0, 0]
        assert y[:12] == [3] * 12  # three rounds of 1 + 2
    assert {str(w).rsplit("[", 1)[1] for ws in out.warnings.values() for w in ws} == {
        "wait-not-committed]"
    }


def test_AllToAllv_prepare() -> None:
    """test_hccl_950.cpp, AllToAllv_prepare: AlltoAllV<true> repeat 1, handle 0, Wait 0."""

    def body(h: Hccl, x: Any, y: Any, rec: list) -> None:
        me = h.GetRankId()
        counts, displs = [1 + me, 1 + me], [0, 4]
        rcounts, rdispls = [1, 2], [0, 4]
        hd = h.AlltoAllV[True](x, counts, displs, INT8, y, rcounts, rdispls, INT8, 1)
        rec += [hd, h.Wait(hd)]

    for rank, (rec, y) in enumerate(run_950(body)):
        assert rec == [0, 0]
        assert y[:6] == [1, 0, 0, 0, 2, 2], f"rank {rank}"


def test_AllToAll_prepareWithCommitTrue() -> None:
    """test_hccl_950.cpp, AllToAll_prepareWithCommitTrue: AlltoAll<true>(send, recv, 10,
    INT8) with the default strideCount and repeat: handle 0, Wait 0."""

    def body(h: Hccl, x: Any, y: Any, rec: list) -> None:
        hd = h.AlltoAll[True](x, y, 8, INT8)
        rec += [hd, h.Wait(hd)]

    for rec, y in run_950(body):
        assert rec == [0, 0] and y[:16] == _ranks(2, 8)


def test_AllToAllVWrite_prepareWithCommitTrue() -> None:
    """test_hccl_950.cpp, AllToAllVWrite_prepareWithCommitTrue: the CCU client has
    AlltoAllvWrite (the 950 AI CPU client returns -1): handle 0, Wait 0, each slice in the
    peer's windowsOut[0] at remoteWinOffset."""

    def body(h: Hccl, x: Any, y: Any, rec: list) -> None:
        me, dim = h.GetRankId(), h.GetRankDim()
        # sendOffsets/sendSizes: two halves of rankDim entries each (2 + 2 bytes per peer)
        hd = h.AlltoAllvWrite[True](x, [0] * dim + [2] * dim, [2] * (2 * dim), 4 * me, 10)
        rec += [hd, h.Wait(hd)]
        window = hp.GetHcclContext(0).windowsOut[0]
        hp.gm_tensor(y, torch.int8, 4 * dim)[:] = hp.gm_tensor(window, torch.int8, 4 * dim)
        hp.SyncAll()

    for rec, y in run_950(body):
        assert rec == [0, 0] and y[:8] == _ranks(2, 4)


def test_AllReduce_prepareWithCommitTrue() -> None:
    """test_hccl_950.cpp, AllReduce_prepareWithCommitTrue: AllReduce<true> repeat 8 sends
    all eight rounds; eight Waits return 0."""

    def body(h: Hccl, x: Any, y: Any, rec: list) -> None:
        hd = h.AllReduce[True](x, y, 2, INT8, SUM, 8)
        rec += [hd] + [h.Wait(hd) for _ in range(8)]

    for rec, y in run_950(body):
        assert rec == [0] + [0] * 8 and y[:16] == [3] * 16


def test_AllReduce_prepareWithCommitFalse() -> None:
    """test_hccl_950.cpp, AllReduce_prepareWithCommitFalse (a ReduceScatter, repeat 8): eight
    Commits, then eight Waits return 0."""

    def body(h: Hccl, x: Any, y: Any, rec: list) -> None:
        hd = h.ReduceScatter(x, y, 1, INT8, SUM, 0, 8)
        for _ in range(8):
            h.Commit(hd)
        rec += [hd] + [h.Wait(hd) for _ in range(8)]

    for rec, y in run_950(body):
        assert rec == [0] + [0] * 8 and y[:8] == [3] * 8


@pytest.mark.parametrize(
    ("name", "cmd", "count"),
    [
        ("AllGather_CcuAllGatherMeshMem2Mem1D", "AllGather", 8),
        ("AllReduce_CcuAllReduceMeshMem2Mem1D", "AllReduce", 8),
        ("AllReduce_CcuAllReduceMeshMem2Mem1D_Cout_not_dived", "AllReduce", 9),
        ("ReduceScatter_CcuReduceScatterMeshMem2Mem1D", "ReduceScatter", 2),
    ],
)
def test_ccu_mem2mem_algorithms(name: str, cmd: str, count: int) -> None:
    """test_hccl_950.cpp, AllGather_CcuAllGatherMeshMem2Mem1D, AllReduce_CcuAllReduceMeshMem2Mem1D,
    AllReduce_CcuAllReduceMeshMem2Mem1D_Cout_not_dived and
    ReduceScatter_CcuReduceScatterMeshMem2Mem1D: the context's opType[0]/algorithmType[0]
    pick the CCU's mem2mem algorithm, which only changes how the CCU moves the data; a count
    that 8 ranks do not divide (9) is valid. Eight ranks, handle 0, Wait 0, the data right."""
    world = 8

    def body(h: Hccl, x: Any, y: Any, rec: list) -> None:
        if cmd == "AllGather":
            hd = h.AllGather(x, y, count, INT8, 0, 1)
        elif cmd == "AllReduce":
            hd = h.AllReduce(x, y, count, INT8, SUM, 1)
        else:
            hd = h.ReduceScatter(x, y, count, INT8, SUM, 0, 1)
        h.Commit(hd)
        rec += [hd, h.Wait(hd)]

    total = world * (world + 1) // 2
    want = _ranks(world, count) if cmd == "AllGather" else [total] * count
    for rec, y in run_950(body, world=world):
        assert rec == [0, 0], name
        assert y[: len(want)] == want, name


def test_AllReduce_CcuAllReduceMeshMem2Mem1D_Cout_zero() -> None:
    """test_hccl_950.cpp, AllReduce_CcuAllReduceMeshMem2Mem1D_Cout_zero: count 0 *and*
    repeat 0, so -1 (hccl_ccu_v0.h, CommonPrepareImpl: ``repeat == 0``, silent); Commit(-1)
    is ignored (logged: handle out of range), Wait(-1) is HCCL_FAILED. Lenient run: the same
    values, no exception; the next Prepare still gets handle 0."""

    def body(h: Hccl, x: Any, y: Any, rec: list) -> None:
        hd = h.AllReduce(x, y, 0, INT8, SUM, 0)
        rec.append(hd)
        h.Commit(hd)
        rec.append(h.Wait(hd))
        good = h.AllReduce[True](x, y, 4, INT8, SUM, 1)
        rec += [good, h.Wait(good)]

    for rec, y in run_950(body, strict=False):
        assert rec == [-1, hp.HCCL_FAILED, 0, 0] and y[:4] == [3] * 4
    with pytest.raises(hp.WorldError, match="HcclUsageError.*repeat must be 1..255"):
        run_950(body)


def _typed_run(
    server: int, tiling_types: tuple, call: str, warns: bool = True
) -> tuple[list, list]:
    """Every rank's y after one ``call`` ("AllReduce": FP32 SUM of 4 elements; "AllGather":
    4 FP16 elements) on ``server``, its cc tiling built with ``tiling_types`` (reduceType,
    dstDataType, srcDataType); x of rank k holds 10 * k + i at element i. Returns (y per
    rank, the warnings, which the CCU client gives if ``warns``)."""
    cmd = getattr(
        HcclCMDType, "HCCL_CMD_ALLREDUCE" if call == "AllReduce" else "HCCL_CMD_ALLGATHER"
    )
    dtype = torch.float32 if call == "AllReduce" else torch.float16

    def main() -> list[float]:
        x = (torch.arange(8) + 10 * hp.get_rank()).to(dtype)
        y = torch.zeros(8, dtype=dtype)
        t = Tiling950()
        cfg = hp.Mc2CcTilingConfig("hccl_world_group", cmd, "", *tiling_types)
        assert cfg.GetTiling(t.init) == 0 and cfg.GetTiling(t.cc) == 0

        def kernel(xg: Any, yg: Any, tg: Any) -> None:
            if hp.g_coreType == hp.AIV:
                h = Hccl(server)
                h.InitV2(hp.GetHcclContext(0), hp.GET_TILING_DATA_WITH_STRUCT(Tiling950, tg))
                h.SetCcTilingV2(hp.offsetof(Tiling950, "cc"))
                if call == "AllReduce":
                    hd = h.AllReduce[True](xg, yg, 4, hp.HCCL_DATA_TYPE_FP32, SUM)
                else:
                    hd = h.AllGather[True](xg, yg, 4, hp.HCCL_DATA_TYPE_FP16, 0)
                h.Wait(hd)
                hp.SyncAll()
                h.Finalize()

        hp.launch(kernel, x, y, t)
        return y.tolist()

    with pytest.warns(Warning) if server == CCU and warns else contextlib.nullcontext() as seen:
        ys = hp.run(main, world_size=2, platform="950", timeout=RUN_TIMEOUT)
    return ys, [str(w.message) for w in seen or []]


MAX, FP32, FP16 = HcclReduceOp.HCCL_REDUCE_MAX, hp.HCCL_DATA_TYPE_FP32, hp.HCCL_DATA_TYPE_FP16
PROD, INT32, INT64 = HcclReduceOp.HCCL_REDUCE_PROD, hp.HCCL_DATA_TYPE_INT32, hp.HCCL_DATA_TYPE_INT64


@expects_warning("ccu-tiling-types")
def test_the_ccu_client_reduces_by_the_tilings_reduce_type() -> None:
    """platform_v310/hccl_ccu_v0.h, InitCcuParam: the CCU client's Prepare replaces the op with
    the cc tiling's reduceType. Before, hccl_py summed as the kernel asked."""
    ys, said = _typed_run(CCU, (MAX, FP32, FP32), "AllReduce")
    want = np.maximum(np.arange(4), np.arange(4) + 10).tolist()  # rank 1's values
    assert ys == [want + [0.0] * 4] * 2
    assert any("HCCL_REDUCE_SUM becomes its reduceType HCCL_REDUCE_MAX" in m for m in said), said


@expects_warning("ccu-tiling-types")
def test_the_ccu_client_moves_elements_of_the_tilings_data_type() -> None:
    """A cc tiling built without data types says INT8 (0): the CCU client moves 4 one-byte
    elements per rank of an FP16 AllGather, the low halves of its first two values."""
    ys, said = _typed_run(CCU, (0,), "AllGather")
    xs = [(np.arange(8) + 10 * k).astype(np.float16) for k in range(2)]
    y = np.zeros(8, dtype=np.float16)
    y.view(np.uint8)[:8] = np.concatenate([x.view(np.uint8)[:4] for x in xs])
    assert ys == [y.tolist()] * 2
    assert any("HCCL_DATA_TYPE_FP16 becomes its srcDataType HCCL_DATA_TYPE_INT8" in m for m in said)


def test_a_data_move_of_a_tiling_type_as_wide_as_the_kernels_is_silent() -> None:
    """An AllGather moves bytes: the CCU client's BF16 tiling type on an FP16 Prepare moves
    what FP16 would, with no ccu-tiling-types warning (one tiling serves the E8M0 scales and
    the FP8 rows of ops-transformer's AlltoAllvQuantGroupedMatMul); before, it warned."""
    bf16 = hp.HCCL_DATA_TYPE_BFP16
    ys, said = _typed_run(CCU, (0, bf16, bf16), "AllGather", warns=False)
    want = np.concatenate([(np.arange(4) + 10 * k).astype(np.float16) for k in range(2)])
    assert ys == [want.tolist()] * 2 and said == []


@expects_warning("ccu-tiling-types")
def test_the_ccu_client_reduces_elements_of_an_as_wide_tiling_type() -> None:
    """A reduction is no plain data move: the CCU client sums an FP32 AllReduce's elements
    as its INT32 tiling type (the float bits added as integers), with a warning, although
    both types are 4 bytes wide."""
    ys, said = _typed_run(CCU, (0, INT32, INT32), "AllReduce")
    bits = [(np.arange(4) + 10 * k).astype(np.float32).view(np.int32) for k in range(2)]
    want = (bits[0] + bits[1]).view(np.float32).tolist()
    assert ys == [want + [0.0] * 4] * 2
    assert any("HCCL_DATA_TYPE_FP32 becomes its srcDataType HCCL_DATA_TYPE_INT32;" in m
               for m in said), said  # fmt: skip


@expects_warning("ccu-tiling-types")
@pytest.mark.parametrize(
    ("tiling_types", "said_here"),
    [
        ((PROD, FP32, FP32), "HCCL_REDUCE_SUM becomes its reduceType HCCL_REDUCE_PROD"),
        ((0, INT64, INT64), "HCCL_DATA_TYPE_FP32 becomes its srcDataType HCCL_DATA_TYPE_INT64"),
    ],
)
def test_a_tiling_type_the_op_cannot_run_keeps_the_kernels(
    tiling_types: tuple, said_here: str
) -> None:
    """The CCU client would take a reduce op or data type that AllReduce cannot run; hccl_py
    keeps the Prepare's (an FP32 SUM) and says so."""
    ys, said = _typed_run(CCU, tiling_types, "AllReduce")
    assert ys == [(np.arange(4) * 2 + 10).tolist() + [0.0] * 4] * 2
    tail = ", which AllReduce cannot run; hccl_py keeps the Prepare's;"
    assert any(said_here + tail in m for m in said), said


def test_the_950_ai_cpu_client_keeps_the_kernels_types() -> None:
    """The AI CPU client sends the Prepare's own data type and op: no override, no warning."""
    ys, _ = _typed_run(AICPU, (MAX, FP32, FP32), "AllReduce")
    assert ys == [(np.arange(4) * 2 + 10).tolist() + [0.0] * 4] * 2


# -------------------------------------------------------- test_hccl_aicpu_950.cpp (AI CPU)
AICPU_CASES = {
    "AllGather": (HcclCMDType.HCCL_CMD_ALLGATHER, lambda h, x, y, c, r: h.AllGather[c](
        x, y, 4, INT8, 16, r)),
    "AllReduce": (HcclCMDType.HCCL_CMD_ALLREDUCE, lambda h, x, y, c, r: h.AllReduce[c](
        x, y, 4, INT8, SUM, r)),
    "ReduceScatter": (HcclCMDType.HCCL_CMD_REDUCE_SCATTER, lambda h, x, y, c, r: h.ReduceScatter[c](
        x, y, 1, INT8, SUM, 4, r)),
    "AlltoAll": (HcclCMDType.HCCL_CMD_ALLTOALL, lambda h, x, y, c, r: h.AlltoAll[c](
        x, y, 1, INT8, 4, r)),
}  # fmt: skip


def _aicpu_want(op: str, world: int, repeat: int) -> list[int]:
    """y after ``repeat`` rounds of the AICPU_CASES call on ``world`` ranks (x = rank + 1)."""
    total = world * (world + 1) // 2
    y = np.zeros(16 * world, dtype=np.int64)
    for r in range(repeat):
        if op == "AllGather":
            for k in range(world):
                y[16 * k + 4 * r : 16 * k + 4 * r + 4] = k + 1
        elif op == "AllReduce":
            y[4 * r : 4 * r + 4] = total
        elif op == "ReduceScatter":
            y[r] = total
        else:
            y[[4 * k + r for k in range(world)]] = np.arange(1, world + 1)
    return y.tolist()


@pytest.mark.parametrize("op", list(AICPU_CASES), ids=lambda op: f"{op}_repeat1_prepare1_commit1")
def test_aicpu_repeat1_prepare1_commit1_wait1_success(op: str) -> None:
    """test_hccl_aicpu_950.cpp, AllGather_, AllReduce_, ReduceScatter_ and
    AlltoAll_repeat1_prepare1_commit1_wait1_success: InitV2 with the OpResCtx, GetRankDim the
    context's rankSize (4), SetCcTilingV2 0, Prepare handle 0, Commit, Wait 0."""
    cmd, call = AICPU_CASES[op]

    def body(h: Hccl, x: Any, y: Any, rec: list) -> None:
        hd = call(h, x, y, False, 1)
        h.Commit(hd)
        rec += [hd, h.Wait(hd)]

    for rec, y in run_950(body, world=4, server=AICPU, cmd=cmd):
        assert rec == [("dim", 4, 0), 0, 0]
        assert y[:64] == _aicpu_want(op, 4, 1)


@pytest.mark.parametrize("op", list(AICPU_CASES), ids=lambda op: f"{op}_repeat3_prepare1_commit0")
def test_aicpu_repeat3_prepare1_commit0_wait3_success(op: str) -> None:
    """test_hccl_aicpu_950.cpp, AllGather_, AllReduce_, ReduceScatter_ and
    AlltoAll_repeat3_prepare1_commit0_wait3_success: Prepare<true> with repeat 3 commits all
    three rounds; three Waits return 0."""
    cmd, call = AICPU_CASES[op]

    def body(h: Hccl, x: Any, y: Any, rec: list) -> None:
        hd = call(h, x, y, True, 3)
        rec += [hd] + [h.Wait(hd) for _ in range(3)]

    for rec, y in run_950(body, world=4, server=AICPU, cmd=cmd):
        assert rec == [("dim", 4, 0), 0, 0, 0, 0]
        assert y[:64] == _aicpu_want(op, 4, 3)


def _zero_stride_kernel(xg: Any, yg: Any, tg: Any, op: str, count: int, repeat: int) -> None:
    if hp.g_coreType == hp.AIV:
        h = Hccl()
        h.InitV2(hp.GetHcclContext(0), hp.GET_TILING_DATA_WITH_STRUCT(Tiling950, tg))
        h.SetCcTilingV2(hp.offsetof(Tiling950, "cc"))
        if op == "AllGather":
            hd = h.AllGather[True](xg, yg, count, INT8, 0, repeat)
        else:
            hd = h.ReduceScatter[True](xg, yg, count, INT8, SUM, 0, repeat)
        for _ in range(repeat):
            h.Wait(hd)
        hp.SyncAll()
        h.Finalize()


def _zero_stride_run(op: str, platform: str, world: int = 4, count: int = 1, repeat: int = 3):
    """Every rank's y after ``op`` with strideCount 0 and ``repeat`` rounds on the AI CPU
    server of ``platform``; rank k's x holds 10 * k + i at element i."""
    cmd = getattr(
        HcclCMDType, "HCCL_CMD_ALLGATHER" if op == "AllGather" else "HCCL_CMD_REDUCE_SCATTER"
    )

    def main() -> list[int]:
        x = (torch.arange(N) + 10 * hp.get_rank()).to(torch.int8)
        y = torch.zeros(16 * N, dtype=torch.int8)
        hp.launch(_zero_stride_kernel, x, y, _tiling(cmd), op, count, repeat)
        return y.tolist()

    return hp.run(main, world_size=world, platform=platform, timeout=RUN_TIMEOUT)


def _zero_stride_want(op: str, stride: int, world: int = 4, count: int = 1, repeat: int = 3):
    """numpy: y of every rank when round r of a rank's block starts at r * count + k * stride."""
    xs = np.arange(N)[None, :] + 10 * np.arange(world)[:, None]
    ys = np.zeros((world, 16 * N), dtype=np.int64)
    for j in range(world):
        for r in range(repeat):
            at = r * count
            if op == "AllGather":
                for k in range(world):
                    ys[j, at + k * stride : at + k * stride + count] = xs[k, at : at + count]
            else:
                ys[j, at : at + count] = xs[:, at + j * stride : at + j * stride + count].sum(0)
    return ys.tolist()


@pytest.mark.parametrize("op", ["AllGather", "ReduceScatter"])
def test_aicpu_repeat3_zero_stride(op: str) -> None:
    """test_hccl_aicpu_950.cpp, AllGather_ and ReduceScatter_repeat3_prepare1_commit0_wait3_success
    pass strideCount 0: the 950 AI CPU server reads it as count * repeat
    (comm_kfc_open_kernel_adapter.cc, CreateOpParamByBaseOpParam), so each rank's rounds lie
    side by side. Before, hccl_py read it as count: an HcclOverlapError for the AllGather,
    other sums for the ReduceScatter."""
    assert _zero_stride_run(op, "950") == _zero_stride_want(op, stride=1 * 3)


def test_a3_zero_stride_of_repeated_rounds_is_count() -> None:
    """On Atlas A3 strideCount 0 stays count (the 950 AI CPU server's rule is its own): the
    ReduceScatter's rounds read overlapping blocks, the AllGather's would write them."""
    assert _zero_stride_run("ReduceScatter", "A3") == _zero_stride_want("ReduceScatter", stride=1)
    with pytest.raises(hp.WorldError, match="HcclOverlapError"):
        _zero_stride_run("AllGather", "A3")


def test_950_ai_cpu_finalize_with_a_queue_num_returns() -> None:
    """platform_v310/hccl_aicpu.h's InitV2 never reads the tiling's queueNum, so Finalize<true>
    waits for the last rounds and returns as with one queue. Before, hccl_py reported
    finalize-queues (an HcclUnfinishedError: "would wait forever"), as on A2/A3."""

    def main() -> list[int]:
        x = torch.full((N,), hp.get_rank() + 1, dtype=torch.int8)
        y = torch.zeros(2 * N, dtype=torch.int8)
        t = Tiling950()
        cfg = hp.Mc2CcTilingConfig("hccl_world_group", HcclCMDType.HCCL_CMD_ALLGATHER, "")
        assert cfg.SetQueueNum(2) == 0 and cfg.GetTiling(t.init) == 0 and cfg.GetTiling(t.cc) == 0

        def kernel(xg: Any, yg: Any, tg: Any) -> None:
            if hp.g_coreType == hp.AIV:
                h = Hccl(AICPU)
                h.InitV2(hp.GetHcclContext(0), hp.GET_TILING_DATA_WITH_STRUCT(Tiling950, tg))
                h.SetCcTilingV2(hp.offsetof(Tiling950, "cc"))
                h.Wait(h.AllGather[True](xg, yg, N, INT8, 0))
                hp.SyncAll()
                h.Finalize()

        hp.launch(kernel, x, y, t)
        return y.tolist()

    assert hp.run(main, world_size=2, platform="950", timeout=RUN_TIMEOUT) == [_ranks(2, N)] * 2


@pytest.mark.parametrize("waits", [True, False])
def test_950_ai_cpu_finalize_false_after_a_collective(waits: bool) -> None:
    """Finalize.md restricts Finalize<false> on A2 (not supported) and A3 (BatchWrite tasks
    only) and not on Ascend 950, whose AI CPU client (hccl_aicpu_impl.h, Finalize) sends the
    FINALIZE message and returns; the server still runs the committed rounds. Before, hccl_py
    refused it there as on A2 (finalize-async, an HcclUsageError in a strict run)."""

    def main() -> list[int]:
        x = torch.full((N,), hp.get_rank() + 1, dtype=torch.int8)
        y = torch.zeros(2 * N, dtype=torch.int8)
        t = _tiling(HcclCMDType.HCCL_CMD_ALLGATHER)

        def kernel(xg: Any, yg: Any, tg: Any) -> None:
            if hp.g_coreType == hp.AIV:
                h = Hccl(AICPU)
                h.InitV2(hp.GetHcclContext(0), hp.GET_TILING_DATA_WITH_STRUCT(Tiling950, tg))
                h.SetCcTilingV2(hp.offsetof(Tiling950, "cc"))
                hd = h.AllGather[True](xg, yg, N, INT8, 0)
                if waits:
                    h.Wait(hd)
                h.Finalize[False]()

        hp.launch(kernel, x, y, t)
        return y.tolist()

    got = hp.run(main, world_size=2, platform="950", timeout=RUN_TIMEOUT)
    assert got == [_ranks(2, N)] * 2 and got.warnings == {}


@pytest.mark.parametrize("server", [CCU, AICPU])
def test_alltoallv_of_33_ranks(server: int) -> None:
    """hccl_inner_def.h: the CCU client keeps AlltoAllV's counts in ``AlltoAllVParamCcu``,
    whose arrays hold HCCL_MAX_RANK_NUM (32) entries, and its CommonPrepareImpl copies
    rankNum entries into each (hccl_ccu_v0.h), so on 33 ranks sendCounts[32] overwrites
    sdispls[0] and the data moves wrong: refused (platform-limit; before, hccl_py moved it
    right). The AI CPU client's HcclMsgExt holds 256 (hccl_msg.h): allowed."""

    def body(h: Hccl, x: Any, y: Any, rec: list) -> None:
        zeros = [0] * h.GetRankDim()
        hd = h.AlltoAllV[True](x, zeros, zeros, INT8, y, zeros, zeros, INT8)
        rec += [hd, h.Wait(hd)]

    cmd = None if server == CCU else HcclCMDType.HCCL_CMD_ALLTOALLV
    out = run_950(body, world=33, server=server, cmd=cmd, strict=False)
    want = [-1, -1] if server == CCU else [0, 0]
    assert all(rec[-2:] == want for rec, _ in out)
    if server == CCU:
        with pytest.raises(hp.WorldError, match="HcclUsageError.*at most 32 ranks"):
            run_950(body, world=33, server=server)


def _alltoallv_tables(rank: int, repeat: int) -> tuple[list, list, list, list]:
    """The UT's tables made consistent for 4 ranks. Repeat 1: rank s sends s + 1 elements
    to each peer, packed, and each rank receives peer s's block at 4 * s. Repeat 3: one
    element per peer and round, each peer's rounds ``repeat`` elements apart (a round
    advances every displacement by its count)."""
    if repeat == 1:
        return [rank + 1] * 4, [(rank + 1) * j for j in range(4)], [1, 2, 3, 4], [0, 4, 8, 12]
    spaced = [repeat * j for j in range(4)]
    return [1] * 4, spaced, [1] * 4, spaced


ALLTOALLV_WANT = {
    1: [v for s in range(4) for v in [s + 1] * (s + 1) + [0] * (3 - s)],
    3: [s + 1 for s in range(4) for _ in range(3)] + [0] * 4,
}


@pytest.mark.parametrize("repeat", [1, 3])
def test_AlltoAllV_prepare1_wait_success(repeat: int) -> None:
    """test_hccl_aicpu_950.cpp, AlltoAllV_repeat1_prepare1_commit1_wait1_success and
    AlltoAllV_repeat3_prepare1_commit0_wait3_success: AlltoAllV (Commit, Wait) and
    AlltoAllV<true> with repeat 3 (three Waits) return handle 0 and 0. (The UT gives rank 0
    counts its peers do not match, displacements that the three rounds would overlap, and in
    its repeat-3 case uint32_t arrays that the client reads as uint64_t; here the tables
    agree, keep the rounds apart and hold uint64 values.)"""

    def body(h: Hccl, x: Any, y: Any, rec: list) -> None:
        sc, sd, rc, rd = _alltoallv_tables(h.GetRankId(), repeat)
        if repeat == 1:
            hd = h.AlltoAllV(x, sc, sd, INT8, y, rc, rd, INT8)
            h.Commit(hd)
        else:
            hd = h.AlltoAllV[True](x, sc, sd, INT8, y, rc, rd, INT8, repeat)
        rec += [hd] + [h.Wait(hd) for _ in range(repeat)]

    out = run_950(body, world=4, server=AICPU, cmd=HcclCMDType.HCCL_CMD_ALLTOALLV)
    for rec, y in out:
        assert rec == [("dim", 4, 0), 0] + [0] * repeat
        assert y[:16] == ALLTOALLV_WANT[repeat]


def test_query_on_the_950_ai_cpu_client() -> None:
    """Not a UT case: the suite's AI CPU client (platform_v310/hccl_aicpu.h) includes the
    common hccl_aicpu_impl.h, whose Query (:397) reads the finished-turn counter as on A2/A3;
    only the CCU client has none (platform_v310/hccl_ccu_v0_def.h). Query.md says 950 does
    not support it; the source says its AI CPU client does. After the three Waits of a
    repeat-3 handle Query reports 3, and an unknown handle -1."""

    def body(h: Hccl, x: Any, y: Any, rec: list) -> None:
        hd = AICPU_CASES["AllReduce"][1](h, x, y, True, 3)
        rec += [h.Wait(hd) for _ in range(3)] + [h.Query(hd), h.Query(5)]

    for rec, _ in run_950(body, server=AICPU, cmd=HcclCMDType.HCCL_CMD_ALLREDUCE, strict=False):
        assert rec == [("dim", 2, 0), 0, 0, 0, 3, hp.HCCL_FAILED]

    def ccu(h: Hccl, x: Any, y: Any, rec: list) -> None:
        hd = h.AllReduce[True](x, y, 4, INT8, SUM, 1)
        rec += [h.Wait(hd), h.Query(hd), h.last_error]

    for rec, _ in run_950(ccu, strict=False):
        assert rec[:2] == [0, hp.HCCL_FAILED] and "CCU client" in rec[2]


# ------------------------------------------------------------- test_hcomm(_urma_950).cpp
DATA = 64  # where the data goes in the peer's HCCL buffer (the notify word is at 0)
UBC = hp.COMM_PROTOCOL_UBC_CTP

HcommBody = Callable[[Any, int, Any, Any, Any, list], None]


def _hcomm_kernel(ch: int, peer: Any, own: Any, src: Any, rec: list, body: HcommBody) -> None:
    if hp.get_rank() == 0:
        body(hp.Hcomm[UBC], ch, peer, own, src, rec)


def run_hcomm(body: HcommBody, platform: str = "950", strict: bool = True) -> Any:
    """Rank 0 runs ``body(Hcomm, channel to rank 1, rank 1's HCCL buffer, its own, src, rec)``;
    src holds 1..16. Returns (rank 0's record, the first 80 bytes of rank 1's buffer)."""

    def main() -> tuple[list, list]:
        me = hp.get_rank()
        handle = hp.HcclChannelAcquire(None, hp.COMM_ENGINE_AIV, [hp.HcclChannelDesc(1 - me)], 1)
        peer = hp.HcclChannelGetHcclBuffer(None, handle[0])[0]
        own = hp.HcclGetHcclBuffer()[0]
        hp.gm_tensor(own, torch.uint8, DATA + N)[DATA:] = 100 + me  # what ReadNbi fetches
        hp.barrier()
        rec: list = []
        src = torch.arange(1, N + 1, dtype=torch.uint8)
        hp.launch(_hcomm_kernel, handle[0], peer, own, src, rec, body, block_dim=1,
                  kernel_type="aiv")  # fmt: skip
        hp.barrier()
        return rec, hp.gm_tensor(own, torch.uint8, DATA + N).tolist()

    out = hp.run(main, world_size=2, platform=platform, strict=strict, timeout=RUN_TIMEOUT)
    return out[0][0], out[1][1]


def _ready(hcomm_cls: Any) -> Any:
    hcomm = hcomm_cls()
    assert hcomm.Init(torch.zeros(512, dtype=torch.uint8), HCOMM_URMA_TMP_BUF_SIZE) == 0
    return hcomm


SENT = list(range(1, N + 1))


def test_Aiv_Urma_Read() -> None:
    """test_hcomm_urma_950.cpp, Aiv_Urma_Read: ReadNbi with the default commit=true, then
    Drain: both 0, and the peer's bytes arrived."""

    def body(cls: Any, ch: int, peer: Any, own: Any, src: Any, rec: list) -> None:
        hcomm = _ready(cls)
        rec += [hcomm.ReadNbi(ch, src, peer + DATA, 8), hcomm.Drain(ch)]
        rec.append(hp.gm_tensor(src, torch.uint8, 8).tolist())

    rec, _ = run_hcomm(body)
    assert rec == [0, 0, [101] * 8]


def test_Aiv_Urma_Write() -> None:
    """test_hcomm_urma_950.cpp, Aiv_Urma_Write: WriteNbi<false>, Commit, Drain: all 0, and
    the bytes are in the peer's buffer after the Drain."""

    def body(cls: Any, ch: int, peer: Any, own: Any, src: Any, rec: list) -> None:
        hcomm = _ready(cls)
        rec += [hcomm.WriteNbi[False](ch, peer + DATA, src, 8), hcomm.Commit(ch), hcomm.Drain(ch)]

    rec, buf = run_hcomm(body)
    assert rec == [0, 0, 0] and buf[DATA : DATA + 8] == SENT[:8]


def test_Aiv_Urma_WriteWithNotify() -> None:
    """test_hcomm_urma_950.cpp, Aiv_Urma_WriteWithNotify: WriteWithNotifyNbi<false>, Commit,
    Drain: all 0; the data and the uint64 notify value arrived. (The UT's notifyAddr 0x33 is
    in no registered buffer, which the official client never checks; hccl_py refuses it,
    see test_Aiv_Urma_notify_outside_the_peer_buffer.)"""

    def body(cls: Any, ch: int, peer: Any, own: Any, src: Any, rec: list) -> None:
        hcomm = _ready(cls)
        rec.append(hcomm.WriteWithNotifyNbi[False](ch, peer + DATA, src, 8, peer, 1))
        rec += [hcomm.Commit(ch), hcomm.Drain(ch)]

    rec, buf = run_hcomm(body)
    assert rec == [0, 0, 0]
    assert buf[:8] == [1, 0, 0, 0, 0, 0, 0, 0] and buf[DATA : DATA + 8] == SENT[:8]


def test_Aiv_Urma_notify_outside_the_peer_buffer() -> None:
    """test_hcomm_urma_950.cpp, Aiv_Urma_WriteWithNotify as written: a notify address outside
    the peer's buffer. The official PostSend looks up only the data's remote address
    (hcomm_aiv_urma.h, PostSend), so the call returns 0 and the request fails on the device
    (a CQE error: Drain -1). hccl_py refuses the call (docs/fidelity.md): -1, nothing sent."""

    def body(cls: Any, ch: int, peer: Any, own: Any, src: Any, rec: list) -> None:
        hcomm = _ready(cls)
        rec.append(hcomm.WriteWithNotifyNbi[False](ch, peer + DATA, src, 8, own, 1))
        rec += [hcomm.Commit(ch), hcomm.Drain(ch)]

    rec, buf = run_hcomm(body, strict=False)
    assert rec == [hp.HCOMM_FAILED, 0, 0] and buf[DATA:] == [101] * N
    with pytest.raises(hp.WorldError, match="HcclUsageError.*notifyAddr"):
        run_hcomm(body)


def test_Aiv_Urma_RemoteBufferNotFound() -> None:
    """test_hcomm_urma_950.cpp, Aiv_Urma_RemoteBufferNotFound: a remote address in no
    registered buffer, or in one but with len past its end, is HCOMM_FAILED
    (hcomm_utils.h, HcommFindBufferIdx); nothing is posted, so a later Drain returns 0 and
    the peer's bytes are unchanged. Lenient: -1; strict: HcclUsageError (foreign-memory)."""

    def body(cls: Any, ch: int, peer: Any, own: Any, src: Any, rec: list) -> None:
        hcomm = _ready(cls)
        size = hp.HcclGetHcclBuffer()[1]
        rec.append(hcomm.WriteWithNotifyNbi[False](ch, own + DATA, src, 8, peer, 1))
        rec.append(hcomm.WriteNbi[False](ch, peer + (size - 8), src, 16))
        rec.append(hcomm.WriteNbi[False](ch, peer + size, src, 0))  # the end, len 0: found
        rec += [hcomm.Commit(ch), hcomm.Drain(ch)]

    rec, buf = run_hcomm(body, strict=False)
    assert rec == [hp.HCOMM_FAILED, hp.HCOMM_FAILED, 0, 0, 0]
    assert buf[:8] == [0] * 8 and buf[DATA:] == [101] * N
    with pytest.raises(hp.WorldError, match="HcclUsageError.*HCCL buffer"):
        run_hcomm(body)


def test_Aiv_Urma_BatchCommitDrain() -> None:
    """test_hcomm_urma_950.cpp, Aiv_Urma_BatchCommitDrain: WriteNbi, WriteWithNotifyNbi,
    WriteNbi, all with commit=false, then one Commit and one Drain cover all three."""

    def body(cls: Any, ch: int, peer: Any, own: Any, src: Any, rec: list) -> None:
        hcomm = _ready(cls)
        rec.append(hcomm.WriteNbi[False](ch, peer + DATA, src, 4))
        rec.append(hcomm.WriteWithNotifyNbi[False](ch, peer + DATA + 4, src + 4, 4, peer, 7))
        rec.append(hcomm.WriteNbi[False](ch, peer + DATA + 8, src + 8, 8))
        rec += [hcomm.Commit(ch), hcomm.Drain(ch)]

    rec, buf = run_hcomm(body)
    assert rec == [0] * 5 and buf[0] == 7 and buf[DATA:] == SENT


def test_Aiv_Urma_InitLocalTensor() -> None:
    """test_hcomm_urma_950.cpp, Aiv_Urma_InitLocalTensor: Init(LocalTensor, 512) is 0, Init
    with 511 is HCOMM_FAILED (len < HCOMM_URMA_TMP_BUF_SIZE, hcomm_aiv_urma.h, Init); the
    first object then writes, commits and drains. Lenient: -1; strict: HcclUsageError."""

    def body(cls: Any, ch: int, peer: Any, own: Any, src: Any, rec: list) -> None:
        ub = torch.zeros(HCOMM_URMA_TMP_BUF_SIZE, dtype=torch.uint8)
        hcomm, hcomm2 = cls(), cls()
        rec.append(hcomm.Init(ub, HCOMM_URMA_TMP_BUF_SIZE))
        rec.append(hcomm2.Init(ub, HCOMM_URMA_TMP_BUF_SIZE - 1))
        rec.append(hcomm.WriteNbi[False](ch, peer + DATA, src, 8))
        rec += [hcomm.Commit(ch), hcomm.Drain(ch)]

    rec, buf = run_hcomm(body, strict=False)
    assert rec == [0, hp.HCOMM_FAILED, 0, 0, 0] and buf[DATA : DATA + 8] == SENT[:8]
    with pytest.raises(hp.WorldError, match="HcclUsageError.*HCOMM_URMA_TMP_BUF_SIZE"):
        run_hcomm(body)


@pytest.mark.parametrize("call", ["ReadNbi", "WriteNbi", "WriteWithNotifyNbi"])
def test_hcomm_roce_is_not_emulated(call: str) -> None:
    """test_hcomm.cpp, Aiv_Read, Aiv_Write and Aiv_WriteWithNotifyNbi: Hcomm<COMM_PROTOCOL_ROCE>
    of A2/A3 (platform_v220/hcomm_aiv.h) posts reads and writes (0) and has no
    WriteWithNotifyNbi (-1). hccl_py emulates COMM_PROTOCOL_UBC_CTP only (docs/hcomm.md):
    every ROCE call is refused, -1 in a lenient run (the official value only for
    WriteWithNotifyNbi), HcclUsageError "unsupported" in a strict one."""

    def body(cls: Any, ch: int, peer: Any, own: Any, src: Any, rec: list) -> None:
        roce = hp.Hcomm[hp.COMM_PROTOCOL_ROCE]()
        args = (ch, peer + DATA, src, 8) + ((peer, 1) if call == "WriteWithNotifyNbi" else ())
        rec.append(getattr(roce, call)(*args))

    rec, buf = run_hcomm(body, platform="A3", strict=False)
    assert rec == [hp.HCOMM_FAILED] and buf[DATA:] == [101] * N
    with pytest.raises(hp.WorldError, match="HcclUsageError.*not emulated"):
        run_hcomm(body, platform="A3")


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_AlltoAllV_repeat3_prepare1_commit0_wait3_success_uint32_arrays(kind: str) -> None:
    """test_hccl_aicpu_950.cpp, AlltoAllV_repeat3_prepare1_commit0_wait3_success passes
    ``uint32_t`` arrays; every client casts the ``void*`` to ``uint64_t*`` (hccl_ccu_v0.h,
    AlltoAllV; hccl_aicpu_impl.h) and reads 8-byte entries, so 4 uint32 counts are read as 2
    uint64 values and 2 more past the array. hccl_py refuses an array of entries that are not
    8 bytes (it used to take their values, hiding the bug): -1, or HcclUsageError."""

    def body(h: Hccl, x: Any, y: Any, rec: list) -> None:
        sc, sd, rc, rd = _alltoallv_tables(h.GetRankId(), 1)
        as32 = (
            (lambda v: np.array(v, dtype=np.uint32))
            if kind == "numpy"
            else (lambda v: torch.tensor(v, dtype=torch.int32))
        )
        hd = h.AlltoAllV[True](x, as32(sc), sd, INT8, y, rc, rd, INT8, 1)
        rec += [hd, h.last_error]

    cmd = HcclCMDType.HCCL_CMD_ALLTOALLV
    for rec, _ in run_950(body, world=4, server=AICPU, cmd=cmd, strict=False):
        assert rec[1] == hp.INVALID_HANDLE_ID and "uint64" in rec[2] and "sendCounts" in rec[2]
    with pytest.raises(hp.WorldError, match="HcclUsageError.*sendCounts.*4-byte entries"):
        run_950(body, world=4, server=AICPU, cmd=cmd)


def _interleaved(h: Hccl, x: Any, y: Any, rec: list) -> None:
    """Commits C0 C1 C0: handle 0's second round goes to slot 1, where Prepare put handle 1."""
    h0 = h.AllGather(x, y, 4, INT8, 8, 2)
    h1 = h.AllGather(x, y + 64, 4, INT8, 0, 1)
    h.Commit(h0)
    h.Commit(h1)
    h.Commit(h0)
    rec += [h.Wait(h0), h.Wait(h0), h.Wait(h1)]


def _swapped(h: Hccl, x: Any, y: Any, rec: list) -> None:
    """Prepare h0, Prepare[True] h1, Commit h0: handle 1's round takes slot 0, handle 0's."""
    h0 = h.AllGather(x, y, 4, INT8, 0, 1)
    h1 = h.AllGather[True](x, y + 64, 4, INT8, 0, 1)
    h.Commit(h0)
    rec += [h.Wait(h0), h.Wait(h1)]


def _short_first(h: Hccl, x: Any, y: Any, rec: list) -> None:
    """Handle 0 commits 1 of its 2 rounds: handle 1's round takes slot 1, its Wait polls 2."""
    h0 = h.AllGather(x, y, 4, INT8, 8, 2)
    h.Commit(h0)
    rec.append(h.Wait(h0))
    h1 = h.AllGather[True](x, y + 64, 4, INT8, 0, 1)
    rec.append(h.Wait(h1))


def _all_slots(h: Hccl, x: Any, y: Any, rec: list) -> None:
    """_swapped with all 64 slots in flight: handles 1..3 take slots 0..47, handle 0's 16
    Commits the last 16; the model holds up to all 64 (CCU_MAX_MSG_NUM)."""
    h0 = h.AllGather(x, y, 1, INT8, 16, 16)
    later = [h.AllGather[True](x, y + 32 * k, 1, INT8, 16, 16) for k in (1, 2, 3)]
    for _ in range(16):
        h.Commit(h0)
    rec += [h.Wait(h0), h.Wait(later[0])]


def _wrapped(h: Hccl, x: Any, y: Any, rec: list) -> None:
    """_swapped after 64 rounds sent and waited: the slots wrap, handle 4's Wait polls slot 0."""
    for _ in range(4):
        hd = h.AllGather[True](x, y, 1, INT8, 16, 16)
        rec += [h.Wait(hd) for _ in range(16)]
    h4 = h.AllGather(x, y, 4, INT8, 0, 1)
    h5 = h.AllGather[True](x, y + 64, 4, INT8, 0, 1)
    h.Commit(h4)
    rec += [h.Wait(h4), h.Wait(h5)]


CCU_SLOT_CASES = {
    "wrapped": (_wrapped, "Wait of round 0 of handle 4", "slot 0 holds round 0 of handle 5"),
    "all-slots": (_all_slots, "Wait of round 0 of handle 0", "slot 0 holds round 0 of handle 1"),
    "interleaved": (
        _interleaved,
        "Wait of round 1 of handle 0",
        "slot 1 holds round 0 of handle 1",
    ),
    "swapped": (_swapped, "Wait of round 0 of handle 0", "slot 0 holds round 0 of handle 1"),
    "short-first": (
        _short_first,
        "Wait of round 0 of handle 1",
        "no round was sent to slot 2, so this Wait never returns",
    ),
}


@pytest.mark.parametrize("case", sorted(CCU_SLOT_CASES))
def test_a_ccu_wait_whose_slot_holds_another_round_is_an_error(case: str) -> None:
    """hccl_ccu_v0.h: Prepare gives a handle its Waits' first slot (the previous handle's plus
    its repeat) while Commits take the next free slot; where they part, the Wait returns on
    another round's completion or never. Until stop 65 hccl_py ran these kernels silently."""
    body, which, outcome = CCU_SLOT_CASES[case]
    with pytest.raises(hp.WorldError) as info:
        run_950(body, strict=False)
    errors = [e for e in info.value.failures.values() if isinstance(e, hp.HcclUsageError)]
    assert errors, info.value
    for err in errors:
        assert which in str(err) and outcome in str(err), err
        assert "rounds go to the slots in Commit order" in str(err)


def _extra_round_first(h: Hccl, x: Any, y: Any, rec: list) -> None:
    """Handle 0's extra Commit goes out as its round 1, in slot 1, which handle 1's Wait polls."""
    h0 = h.AllGather[True](x, y, 4, INT8, 0, 1)
    h.Commit(h0)
    h1 = h.AllGather[True](x, y + 64, 4, INT8, 0, 1)
    rec += [h.Wait(h0), h.Wait(h1)]


@expects_warning("extra-commit")
def test_a_ccu_wait_whose_slot_holds_an_extra_round_names_it() -> None:
    """hccl_ccu_v0.h, Commit: a Commit beyond repeat is sent as one more round, in the next
    slot; the Wait of the next handle, which polls that slot, names that round."""
    with pytest.raises(hp.WorldError) as info:
        run_950(_extra_round_first, strict=False)
    errors = [e for e in info.value.failures.values() if isinstance(e, hp.HcclUsageError)]
    assert len(errors) == 2, info.value
    for err in errors:
        assert "Wait of round 0 of handle 1" in str(err), err
        assert "slot 1 holds round 1 of handle 0, so this Wait returns" in str(err), err


def _idle_core_interleaves(x: Any, y: Any, tiling: Any, rec: list) -> None:
    """Block 0, the sending core, commits handle 0's rounds before handle 1's; block 1 commits
    C0 C1 C0 (_interleaved) and Waits as block 0 does."""
    h = Hccl(CCU)
    h.Init(hp.GetHcclContext(0))
    h0 = h.AllGather(x, y, 4, INT8, 8, 2)
    h1 = h.AllGather(x, y + 64, 4, INT8, 0, 1)
    for hd in (h0, h1, h0) if hp.GetBlockIdx() == 1 else (h0, h0, h1):
        h.Commit(hd)
    rec.append((hp.GetBlockIdx(), h.Wait(h0), h.Wait(h0), h.Wait(h1)))
    hp.SyncAll()
    h.Finalize()


def test_only_the_sending_core_s_commits_take_ccu_slots() -> None:
    """hccl_ccu_v0.h: only the sending core's Commits send messages, so another core's Commit
    order puts no round in a slot; its Waits are not ccu-wait-slot errors."""

    def main() -> tuple[list, list]:
        x = torch.full((N,), hp.get_rank() + 1, dtype=torch.int8)
        y = torch.zeros(16 * N, dtype=torch.int8)
        rec: list = []
        tiling = _tiling(HcclCMDType.HCCL_CMD_ALLGATHER)
        hp.launch(_idle_core_interleaves, x, y, tiling, rec, block_dim=2)
        return sorted(rec), y.tolist()

    for rec, y in hp.run(main, world_size=2, platform="950", timeout=RUN_TIMEOUT):
        assert rec == [(0, 0, 0, 0), (1, 0, 0, 0)]
        assert y[:4] + y[8:12] + y[64:72] == [1] * 4 + [2] * 4 + [1] * 4 + [2] * 4


def test_rounds_left_uncommitted_at_a_ccu_finalize_are_said_to_be_no_hang() -> None:
    """hccl_ccu_v0.h: each round is a message of its own and Finalize waits only for the rounds
    sent, so rounds never committed never run and nothing hangs. hccl_py's servers cannot end
    such a task, so it still stops, but says so; until stop 65 it said "the server would wait
    forever", which is not what the CCU does."""

    def body(h: Hccl, x: Any, y: Any, rec: list) -> None:
        hd = h.AllGather(x, y, 4, INT8, 8, 2)
        h.Commit(hd)
        rec.append(h.Wait(hd))

    with pytest.raises(hp.WorldError) as info:
        run_950(body)
    for err in info.value.failures.values():
        assert isinstance(err, hp.HcclUnfinishedError), err
        assert "committed 1 of 2 rounds" in str(err)
        assert "on hardware the rest never run and nothing hangs" in str(err), err
        assert "would wait forever" not in str(err)
