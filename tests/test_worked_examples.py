"""The worked examples of the spec (section 3 "Worked check", section 6 InterHcclGroupSync).

Each tiled kernel is the documentation's multi-round form; it must leave exactly
the same bytes as the non-tiled form and as the numpy reference. Rank
functions are module-level so that every backend can run them.
"""

from __future__ import annotations

from typing import Any

import cases
import numpy as np
import pytest
import reference as ref
import torch
from cases import RUN_TIMEOUT, init_hccl

import hccl_py as hp
from hccl_py import HCCL_SUCCESS, Hccl, HcclDataType, HcclReduceOp

FP16 = HcclDataType.HCCL_DATA_TYPE_FP16
INT32 = HcclDataType.HCCL_DATA_TYPE_INT32
SUM = HcclReduceOp.HCCL_REDUCE_SUM
HALF = 2  # sizeof(half)
ELEMS = 300  # per rank (AllGather, AllReduce; ReduceScatter receives 300 per rank)
TILE, TILE_NUM, TAIL = 128, 2, 44  # 300 = 2 * 128 + 44
A2A_TAIL = 100  # AlltoAll example: tiles 128, 128, tail 100
A2A_STRIDE = TILE_NUM * TILE + A2A_TAIL  # 356
RS_TILE, RS_TILES = 100, 3  # ReduceScatter example: 3 tiles of 100, strideCount 300
WORLD = 4


def _unique_fp16(rank: int, n: int) -> torch.Tensor:
    """``n`` FP16 elements whose bit patterns are unique across ranks (data movement only)."""
    return (torch.arange(n, dtype=torch.int16) + rank * 4096).view(torch.float16)


def _small_fp16(rank: int, n: int) -> torch.Tensor:
    """``n`` small integer FP16 values (sums over a few ranks stay exact)."""
    return (torch.arange(n) % 17 + 3 * rank).to(torch.float16)


def _launch(kernel: Any, x: torch.Tensor, y_elems: int, *extra: Any) -> np.ndarray:
    """Run ``kernel(xGM, yGM, tilingGM, *extra)`` on 8 AIV cores; return y as int16 bit patterns."""
    y = torch.full((y_elems,), -7.0, dtype=torch.float16, device=hp.device())
    hp.launch(kernel, x.to(hp.device()), y, cases.make_tiling(), *extra, block_dim=8)
    return y.cpu().view(torch.int16).numpy()


def _finish(hccl: Hccl) -> None:
    hp.SyncAll()
    hccl.Finalize()


def _tiles_then_tail(
    hccl: Hccl, prepare: Any, xGM: Any, yGM: Any, tailLen: int, *args: Any
) -> None:
    """The documentation's multi-round form: TILE_NUM tiles of TILE in one Prepare, then a tail.

    ``prepare`` is the committing op (``hccl.AllGather[True]``), ``args`` what
    it takes between the data type and ``repeat`` (strideCount or reduce op).
    Waits for every round.
    """
    handleId = prepare(xGM, yGM, TILE, FP16, *args, TILE_NUM)
    xGM += TILE * TILE_NUM * HALF
    yGM += TILE * TILE_NUM * HALF
    tailHandleId = prepare(xGM, yGM, tailLen, FP16, *args, 1)
    for _ in range(TILE_NUM):
        hccl.Wait(handleId)
    hccl.Wait(tailHandleId)


# ---------------------------------------------------------------- AllGather


def _all_gather_kernel(xGM: Any, yGM: Any, tilingGM: Any, tiled: bool) -> None:
    hccl = Hccl()
    if hp.g_coreType == hp.AIV:
        init_hccl(hccl, tilingGM, ops=("AllGather",))
        if not tiled:
            handleId = hccl.AllGather[True](xGM, yGM, ELEMS, FP16, 0)
            hccl.Wait(handleId)
        else:
            _tiles_then_tail(hccl, hccl.AllGather[True], xGM, yGM, TAIL, ELEMS)
        _finish(hccl)


def all_gather_rank() -> dict[str, np.ndarray]:
    """Per rank: y of the non-tiled and the tiled AllGather."""
    n = hp.get_world_size()
    x = _unique_fp16(hp.get_rank(), ELEMS)
    return {
        form: _launch(_all_gather_kernel, x, ELEMS * n, form == "tiled")
        for form in ("plain", "tiled")
    }


def test_all_gather_tiled_equals_non_tiled(backend: str) -> None:
    out = hp.run(all_gather_rank, world_size=WORLD, backend=backend, timeout=RUN_TIMEOUT)
    expected = np.concatenate(
        [_unique_fp16(j, ELEMS).view(torch.int16).numpy() for j in range(WORLD)]
    )
    for rank, ys in enumerate(out):
        np.testing.assert_array_equal(ys["plain"], expected, err_msg=f"rank {rank} non-tiled")
        np.testing.assert_array_equal(ys["tiled"], expected, err_msg=f"rank {rank} tiled")


# ---------------------------------------------------------------- AllReduce


def _all_reduce_kernel(xGM: Any, yGM: Any, tilingGM: Any, tiled: bool) -> None:
    hccl = Hccl()
    if hp.g_coreType == hp.AIV:
        init_hccl(hccl, tilingGM, ops=("AllReduce",))
        if not tiled:
            hccl.Wait(hccl.AllReduce[True](xGM, yGM, ELEMS, FP16, SUM))
        else:
            _tiles_then_tail(hccl, hccl.AllReduce[True], xGM, yGM, TAIL, SUM)
        _finish(hccl)


def all_reduce_rank() -> dict[str, np.ndarray]:
    """Per rank: y of the non-tiled and the tiled (128, 128, 44) AllReduce."""
    x = _small_fp16(hp.get_rank(), ELEMS)
    return {
        form: _launch(_all_reduce_kernel, x, ELEMS, form == "tiled") for form in ("plain", "tiled")
    }


def test_all_reduce_tiled_equals_non_tiled(backend: str) -> None:
    out = hp.run(all_reduce_rank, world_size=WORLD, backend=backend, timeout=RUN_TIMEOUT)
    expected = sum(_small_fp16(j, ELEMS).float() for j in range(WORLD)).half()
    for rank, ys in enumerate(out):
        for form, y in ys.items():
            got = torch.from_numpy(y).view(torch.float16)
            assert torch.equal(got, expected), f"rank {rank} {form}"


# ------------------------------------------------------------ ReduceScatter


def _reduce_scatter_kernel(xGM: Any, yGM: Any, tilingGM: Any, form: str) -> None:
    hccl = Hccl()
    if hp.g_coreType == hp.AIV:
        init_hccl(hccl, tilingGM, ops=("ReduceScatter",))
        if form == "plain":
            handles = [hccl.ReduceScatter[True](xGM, yGM, ELEMS, FP16, SUM, 0)]
        elif form == "repeat":
            h = hccl.ReduceScatter[True](xGM, yGM, RS_TILE, FP16, SUM, ELEMS, RS_TILES)
            handles = [h] * RS_TILES
        else:
            handles = [
                hccl.ReduceScatter[True](
                    xGM + t * RS_TILE * HALF, yGM + t * RS_TILE * HALF, RS_TILE, FP16, SUM, ELEMS, 1
                )
                for t in range(RS_TILES)
            ]
        for h in handles:
            hccl.Wait(h)
        _finish(hccl)


RS_FORMS = ("plain", "repeat", "prepares")


def reduce_scatter_rank() -> dict[str, np.ndarray]:
    """Per rank: y of ReduceScatter non-tiled, with repeat 3, and as three Prepares."""
    x = _small_fp16(hp.get_rank(), ELEMS * hp.get_world_size())
    return {form: _launch(_reduce_scatter_kernel, x, ELEMS, form) for form in RS_FORMS}


def test_reduce_scatter_repeat_equals_separate_prepares(backend: str) -> None:
    out = hp.run(reduce_scatter_rank, world_size=WORLD, backend=backend, timeout=RUN_TIMEOUT)
    total = sum(_small_fp16(k, ELEMS * WORLD).float() for k in range(WORLD)).half()
    for rank, ys in enumerate(out):
        expected = total[rank * ELEMS : (rank + 1) * ELEMS]
        for form in RS_FORMS:
            got = torch.from_numpy(ys[form]).view(torch.float16)
            assert torch.equal(got, expected), f"rank {rank} {form}"


# ----------------------------------------------------------------- AlltoAll


def _all_to_all_kernel(xGM: Any, yGM: Any, tilingGM: Any, tiled: bool) -> None:
    hccl = Hccl()
    if hp.g_coreType == hp.AIV:
        init_hccl(hccl, tilingGM, ops=("AlltoAll",))
        if not tiled:
            hccl.Wait(hccl.AlltoAll[True](xGM, yGM, A2A_STRIDE, FP16))
        else:
            _tiles_then_tail(hccl, hccl.AlltoAll[True], xGM, yGM, A2A_TAIL, A2A_STRIDE)
        _finish(hccl)


def all_to_all_rank() -> dict[str, np.ndarray]:
    """Per rank: y of AlltoAll non-tiled and tiled (128, 128, tail 100, strideCount 356)."""
    n = hp.get_world_size()
    x = _unique_fp16(hp.get_rank(), A2A_STRIDE * n)
    return {
        form: _launch(_all_to_all_kernel, x, A2A_STRIDE * n, form == "tiled")
        for form in ("plain", "tiled")
    }


def test_all_to_all_with_stride_and_tail_equals_non_tiled(backend: str) -> None:
    out = hp.run(all_to_all_rank, world_size=WORLD, backend=backend, timeout=RUN_TIMEOUT)
    blocks = [_unique_fp16(i, A2A_STRIDE * WORLD).view(WORLD, A2A_STRIDE) for i in range(WORLD)]
    for j, ys in enumerate(out):
        # rank j holds, at block i, what rank i sent to j (block j of rank i's x)
        expected = torch.cat([blocks[i][j] for i in range(WORLD)]).view(torch.int16).numpy()
        np.testing.assert_array_equal(ys["plain"], expected, err_msg=f"rank {j} non-tiled")
        np.testing.assert_array_equal(ys["tiled"], expected, err_msg=f"rank {j} tiled")


# ------------------------------------------------------- InterHcclGroupSync

SYNC_COUNT = 6  # int32 elements each rank sends to each peer in the AlltoAll


def _group_sync_kernel(
    xGM: Any, aGM: Any, yGM: Any, tilingGM: Any, commit_late: bool, record: list
) -> None:
    """AlltoAll x -> a on domain 0, then (after InterHcclGroupSync) AllGather a -> y on domain 1.

    With ``commit_late`` the AlltoAll is committed only after the AllGather, so
    only the sync keeps the AllGather from reading ``a`` too early.
    """
    hccl0 = init_hccl(Hccl(), tilingGM, 0, ops=("AlltoAll",))
    hccl1 = init_hccl(Hccl(), tilingGM, 1, ops=("AllGather",))
    n = hccl0.GetRankDim()
    h0 = hccl0.AlltoAll[not commit_late](xGM, aGM, SYNC_COUNT, INT32)
    hccl1.InterHcclGroupSync(0, h0)
    record.append(hccl1.last_error)
    h1 = hccl1.AllGather[True](aGM, yGM, SYNC_COUNT * n, INT32, 0)
    if commit_late:
        hccl0.Commit(h0)
    record.append((h0, h1, hccl1.Wait(h1), hccl0.Wait(h0)))
    hp.SyncAll()
    hccl1.Finalize()
    hccl0.Finalize()


def _sync_input(rank: int, n: int) -> np.ndarray:
    return (np.arange(SYNC_COUNT * n, dtype=np.int32) + 1000 * (rank + 1)).view(np.uint8)


def _sync_reference() -> list[np.ndarray]:
    """numpy's y on every rank: the AllGather (domain 1) of the AlltoAll's output (domain 0)."""
    n = WORLD
    sends = [_sync_input(r, n) for r in range(n)]
    zeros = [np.zeros(SYNC_COUNT * n * 4, np.uint8)] * n
    common = dict(dtype=ref.INT32, repeat=1, send_offsets=[0] * n, recv_offsets=[0] * n)
    a = ref.all_to_all(sends, zeros, count=SYNC_COUNT, stride=0, **common)
    y_zero = [np.zeros(SYNC_COUNT * n * n * 4, np.uint8)] * n
    return ref.all_gather(a, y_zero, count=SYNC_COUNT * n, stride=0, **common)


def _two_domain_rank(kernel: Any, arg: Any, block_dim: int = 1) -> tuple[list, np.ndarray]:
    """Per rank: the record and y (bytes) of ``kernel(x, a, y, tiling, arg, record)`` on the
    world (context 0) and a group of every rank (context 1)."""
    rank, n = hp.get_rank(), hp.get_world_size()
    groups = {0: hp.world_group(), 1: hp.new_group(range(n))}
    x = torch.from_numpy(_sync_input(rank, n).copy())
    a = torch.zeros(SYNC_COUNT * n * 4, dtype=torch.uint8)
    y = torch.zeros(SYNC_COUNT * n * n * 4, dtype=torch.uint8)
    record: list = []
    tiling = cases.make_tiling(groups=groups)
    hp.launch(kernel, x, a, y, tiling, arg, record, groups=groups, block_dim=block_dim)
    return record, y.numpy()


def group_sync_rank(commit_late: bool, block_dim: int) -> tuple[list, np.ndarray]:
    """Per rank: the kernel's record and y (bytes) after AlltoAll -> sync -> AllGather."""
    return _two_domain_rank(_group_sync_kernel, commit_late, block_dim)


@pytest.mark.parametrize("block_dim", [1, 4])
@pytest.mark.parametrize("schedule", ["eager", "late"])
@pytest.mark.parametrize("commit_late", [False, True], ids=["commit-first", "commit-late"])
def test_inter_group_sync_orders_domains(
    backend: str, schedule: str, commit_late: bool, block_dim: int
) -> None:
    out = hp.run(
        group_sync_rank,
        world_size=WORLD,
        backend=backend,
        timeout=RUN_TIMEOUT,
        schedule=schedule,
        args=(commit_late, block_dim),
    )
    want = _sync_reference()
    for rank, (record, y) in enumerate(out):
        per_core = [None, (0, 0, HCCL_SUCCESS, HCCL_SUCCESS)]
        assert sorted(record, key=str) == sorted(per_core * block_dim, key=str), f"rank {rank}"
        cases.assert_bytes_equal(y, want[rank], f"rank {rank}: AllGather of the AlltoAll output")


def _forward_sync_kernel(
    xGM: Any, aGM: Any, yGM: Any, tilingGM: Any, mode: str, record: list
) -> None:
    """The sync names handle 0 of domain 0 before domain 0 prepares it: right after domain
    1's AllGather, committed first ("later"), or never ("never"; "no-task": nor the AllGather),
    or after domain 1's Finalize<false> ("async")."""
    hccl0 = init_hccl(Hccl(), tilingGM, 0, ops=("AlltoAll",))
    hccl1 = init_hccl(Hccl(), tilingGM, 1, ops=("AllGather",))
    n = hccl0.GetRankDim()
    hccl1.InterHcclGroupSync(0, 0)
    record.append(hccl1.last_error)
    if mode == "async":  # Finalize<false> waits for nothing: the AlltoAll comes after it
        hccl1.Finalize[False]()
        record.append(hccl0.Wait(hccl0.AlltoAll[True](xGM, aGM, SYNC_COUNT, INT32)))
        hccl0.Finalize()
        return
    if mode != "no-task":
        h1 = hccl1.AllGather[True](aGM, yGM, SYNC_COUNT * n, INT32, 0)
    if mode == "later":
        record.append((hccl0.AlltoAll[True](xGM, aGM, SYNC_COUNT, INT32), h1))
        record.append((hccl1.Wait(h1), hccl0.Wait(0)))
    elif mode == "never":
        record.append(hccl1.Wait(h1))
    hccl1.Finalize()
    hccl0.Finalize()


def forward_sync_rank(mode: str) -> tuple[list, np.ndarray]:
    """Per rank: the record and y (bytes) of :func:`_forward_sync_kernel`."""
    return _two_domain_rank(_forward_sync_kernel, mode)


def test_inter_group_sync_on_a_handle_prepared_later(backend: str) -> None:
    """The AI CPU server retries a sync whose handle its domain has not prepared yet
    (comm_kfc_aicpu_server.cc, GetServerInfoForSync: HCCL_E_AGAIN; comm_kfc_dispatcher.cc keeps
    the message): the AllGather waits for the AlltoAll prepared after it, on any schedule
    (before 2026-11-30 hccl_py refused the sync, or deadlocked waiting for the Prepare)."""
    runs = [hp.run(forward_sync_rank, world_size=WORLD, backend=backend, timeout=RUN_TIMEOUT,
                   args=("later",))]  # fmt: skip
    if backend == "emu":
        runs.append(hp.run(forward_sync_rank, world_size=WORLD, explore=8, args=("later",)))
    want = _sync_reference()
    for out in runs:
        for rank, (record, y) in enumerate(out):
            assert record == [None, (0, 0), (HCCL_SUCCESS, HCCL_SUCCESS)], f"rank {rank}"
            cases.assert_bytes_equal(y, want[rank], f"rank {rank}: AllGather of the AlltoAll")


def test_finalize_false_does_not_wait_for_a_pending_sync(backend: str) -> None:
    """Finalize<false> writes its message and returns (hccl_aicpu_impl.h: every wait is under
    ``if constexpr (sync)``), so the handle the sync names may be prepared after it."""
    out = hp.run(forward_sync_rank, world_size=WORLD, backend=backend, timeout=RUN_TIMEOUT,
                 platform="A3", args=("async",))  # fmt: skip
    assert [record for record, _ in out] == [[None, HCCL_SUCCESS]] * WORLD


@pytest.mark.parametrize("mode", ["never", "no-task"])
def test_inter_group_sync_on_a_handle_never_prepared_is_a_deadlock(backend: str, mode: str) -> None:
    """The server retries the sync forever: the AllGather behind it never runs, and Finalize's
    message, behind it too, is never read."""
    with pytest.raises(hp.WorldError) as info:
        hp.run(forward_sync_rank, world_size=WORLD, backend=backend, timeout=RUN_TIMEOUT,
               args=(mode,))  # fmt: skip
    text = str(info.value)
    for error in info.value.root_causes.values():
        assert isinstance(error, hp.HcclDeadlockError), error
    if mode == "no-task":
        want = "Finalize in domain group_0_1_2_3 waits for handle 0 of domain hccl_world_group"
    else:
        want = "blocked by InterHcclGroupSync on handle 0 of domain hccl_world_group, which"
    assert want in text, text


def test_inter_group_sync_is_not_supported_on_950(backend: str) -> None:
    """InterHcclGroupSync.md: not supported on Ascend 950; the 950 AI CPU client's returns at
    once (platform_v310/hccl_aicpu.h) and the CCU client has none. It orders nothing, so it is
    refused as an unsupported call (no dependency that would order the AllGather)."""
    with pytest.raises(hp.WorldError) as info:
        hp.run(
            group_sync_rank,
            world_size=WORLD,
            backend=backend,
            platform="950",
            timeout=RUN_TIMEOUT,
            args=(False, 1),
        )
    for rank, error in info.value.root_causes.items():
        assert isinstance(error, hp.HcclUsageError), (rank, error)
        assert "InterHcclGroupSync is not supported on Ascend 950" in str(error), error


# -------------------------------------------------------- skipLocalRankCopy


@pytest.mark.parametrize("op", ["AllGather", "AlltoAll"])
def test_skip_local_rank_copy_leaves_own_block(backend: str, op: str) -> None:
    """skipLocalRankCopy=1 (A2): the local rank's own block of recvBuf is not written."""
    case = cases.OpCase(
        op=op, world_size=WORLD, dtype=ref.FP16, count=5, stride=7, repeat=1, skip_local=True
    )
    cases.run_and_check([case], backend, platform="A2")


@pytest.mark.parametrize("platform", ["A3", "950"])
@pytest.mark.parametrize("op", ["AllGather", "AlltoAll"])
def test_skip_local_rank_copy_has_no_effect_off_a2(backend: str, op: str, platform: str) -> None:
    """SetSkipLocalRankCopy.md: a reserved field without effect on A3 (the 950 server never
    reads it): the own block is written as without it."""
    case = cases.OpCase(
        op=op, world_size=WORLD, dtype=ref.FP16, count=5, stride=7, repeat=1, skip_local=True
    )
    cases.run_and_check([case], backend, platform=platform)
