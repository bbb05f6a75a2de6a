"""Kernel cores: block indices per kernel type, SyncAll, and which core sends the messages.

Every core of a launch runs the kernel; only one core (block 0 of the core type
that calls Prepare, or the block an HcclServerConfig names) writes the
messages, so a task runs once however many cores call Prepare. The tests make
the sender visible by giving every core a different recvBuf: only the
sender's receives data.
"""

from __future__ import annotations

import time
from typing import Any

import cases
import numpy as np
import pytest
import torch
from cases import RUN_TIMEOUT, init_hccl

import hccl_py as hp
from hccl_py import CoreType, Hccl, HcclDataType, HcclReduceOp, HcclServerConfig, HcclServerType

FP32 = HcclDataType.HCCL_DATA_TYPE_FP32
SUM = HcclReduceOp.HCCL_REDUCE_SUM
KERNEL_TYPES = {  # kernel_type -> (AIC cores, AIV cores) per block
    "aiv": (0, 1),
    "aic": (1, 0),
    "mix_aic_1_2": (1, 2),
    "mix_aic_1_1": (1, 1),
    "mix_aic_1_0": (1, 0),  # ops-transformer's 950 MatmulAllReduce (refused before 2026-12-01)
    "mix_aiv_1_0": (0, 1),
}


def _whoami_kernel(record: list) -> None:
    kind = "AIV" if hp.g_coreType == hp.AIV else "AIC" if hp.g_coreType == hp.AIC else "?"
    record.append((kind, hp.GetBlockIdx(), hp.GetBlockNum(), hp.g_coreType != hp.AIV))


def whoami_rank(kernel_type: str, block_dim: int) -> list:
    """Per rank: (core type, GetBlockIdx, GetBlockNum, is-not-AIV) of every core."""
    record: list = []
    hp.launch(_whoami_kernel, record, block_dim=block_dim, kernel_type=kernel_type)
    return sorted(record)


@pytest.mark.parametrize("kernel_type", list(KERNEL_TYPES))
@pytest.mark.parametrize("block_dim", [1, 3])
def test_block_indices_per_kernel_type(backend: str, kernel_type: str, block_dim: int) -> None:
    out = hp.run(
        whoami_rank,
        world_size=2,
        backend=backend,
        timeout=RUN_TIMEOUT,
        args=(kernel_type, block_dim),
    )
    n_aic, n_aiv = KERNEL_TYPES[kernel_type]
    expected = sorted(
        [("AIC", i, block_dim, True) for i in range(n_aic * block_dim)]
        + [("AIV", i, block_dim, False) for i in range(n_aiv * block_dim)]
    )
    assert out == [expected, expected]


def _failing_kernel() -> None:
    raise ValueError("the kernel failed")


def _launching_kernel(record: list) -> None:
    hp.launch(_whoami_kernel, record)  # a one-core kernel launched by a one-core kernel
    record.append(("outer", hp.GetBlockIdx()))


def one_core_launches() -> list:
    """A one-core launch inside one, then one after a failed launch (the rank's one-core scope
    is reused: neither may find it in use or left half-entered)."""
    record: list = []
    hp.launch(_launching_kernel, record)
    with pytest.raises(ValueError, match="the kernel failed"):
        hp.launch(_failing_kernel)
    hp.launch(_whoami_kernel, record)
    return record


def test_one_core_launches_nest_and_follow_a_failed_one(backend: str) -> None:
    out = hp.run(one_core_launches, world_size=2, backend=backend, timeout=RUN_TIMEOUT)
    one = ("AIV", 0, 1, False)
    assert out == [[one, ("outer", 0), one]] * 2


def test_outside_a_kernel_core_queries_fail() -> None:
    with pytest.raises(RuntimeError, match="inside a kernel"):
        hp.GetBlockIdx()


# ---------------------------------------------------------------- SyncAll


def _barrier_kernel(slotsGM: Any, record: list, all_cores: bool) -> None:
    """Each core writes its slot, SyncAll, reads every slot; twice (the barrier is reusable)."""
    n = hp.GetBlockNum() * (3 if all_cores else 1)
    me = hp.GetBlockIdx() + (hp.GetBlockNum() if hp.g_coreType == hp.AIV and all_cores else 0)
    slots = hp.gm_tensor(slotsGM, torch.int32, n)
    seen = []
    for phase in (1, 2):
        time.sleep(0.002 * me)  # late writers: without a barrier the early readers miss them
        slots[me] = phase * 100 + me
        hp.SyncAll[not all_cores]()
        seen.append(slots.clone().tolist())
        hp.SyncAll[not all_cores]()
    record.append((me, seen))


def barrier_rank(kernel_type: str, block_dim: int) -> list:
    """Per rank: what every core read after each SyncAll."""
    all_cores = kernel_type == "mix_aic_1_2"
    slots = torch.zeros(block_dim * 3, dtype=torch.int32)
    record: list = []
    hp.launch(
        _barrier_kernel, slots, record, all_cores, block_dim=block_dim, kernel_type=kernel_type
    )
    return sorted(record)


@pytest.mark.parametrize("kernel_type", ["aiv", "mix_aic_1_2"])
def test_sync_all_is_a_barrier(backend: str, kernel_type: str) -> None:
    block_dim = 4
    out = hp.run(
        barrier_rank,
        world_size=1,
        backend=backend,
        timeout=RUN_TIMEOUT,
        args=(kernel_type, block_dim),
    )
    n = block_dim * (3 if kernel_type == "mix_aic_1_2" else 1)
    want = [[phase * 100 + i for i in range(n)] for phase in (1, 2)]
    assert out[0] == [(me, want) for me in range(n)]


def _aic_sync_kernel(record: list) -> None:
    if hp.g_coreType == hp.AIC:
        try:
            hp.SyncAll()
        except hp.HcclCoreError as exc:
            record.append(str(exc))
    else:
        record.append("AIV")


def test_default_sync_all_is_aiv_only() -> None:
    def main() -> list:
        record: list = []
        hp.launch(_aic_sync_kernel, record, kernel_type="mix_aic_1_1")
        return record

    [record] = hp.run(main, world_size=1, backend="emu", timeout=RUN_TIMEOUT)
    assert "AIV" in record
    assert any("AIC" in r and "SyncAll[False]" in r for r in record if r != "AIV")


# ----------------------------------------------------------- the sender

REGION = 16  # floats of y per core


def _sender_kernel(xGM: Any, yGM: Any, tilingGM: Any, record: list, how: str) -> None:
    """Every core prepares AllReduce SUM of 4 floats into its own region of y; one core sends."""
    if how == "default":
        hccl = Hccl()
    elif how == "config":
        hccl = Hccl(config=HcclServerConfig(CoreType.ON_AIV, 3))
    elif how == "template":
        hccl = Hccl[HcclServerType.HCCL_SERVER_TYPE_AICPU, HcclServerConfig(CoreType.ON_AIV, 3)]()
    else:  # "aic": a mixed kernel whose AIC block 1 sends; AIV cores call everything too
        hccl = Hccl(config=HcclServerConfig(CoreType.ON_AIC, 1))
    init_hccl(hccl, tilingGM, ops=("AllReduce",))
    aiv = hp.g_coreType == hp.AIV
    core = hp.GetBlockIdx() + (0 if aiv or how != "aic" else 8)
    hd = hccl.AllReduce(xGM, yGM + core * REGION * 4, 4, FP32, SUM, 2)
    hccl.Commit(hd)
    hccl.Commit(hd)
    waits = [hccl.Wait(hd), hccl.Wait(hd)]
    record.append((core, hd, waits, hccl.Query(hd), hccl.GetRankId(), hccl.GetRankDim()))
    hp.SyncAll[how != "aic"]()
    hccl.Finalize()


def sender_rank(how: str, kernel_type: str, block_dim: int) -> tuple[list, np.ndarray]:
    """Per rank: (record, y) of the sender kernel."""
    rank = hp.get_rank()
    x = torch.arange(8, dtype=torch.float32) + 10 * rank
    y = torch.zeros(REGION * 16)
    record: list = []
    hp.launch(
        _sender_kernel,
        x,
        y,
        cases.make_tiling(),
        record,
        how,
        block_dim=block_dim,
        kernel_type=kernel_type,
    )
    return sorted(record), y.numpy()


SENDERS = {  # how -> (kernel_type, block_dim, the sending core's region)
    "default": ("aiv", 4, 0),
    "config": ("aiv", 4, 3),
    "template": ("aiv", 4, 3),
    "aic": ("mix_aic_1_2", 2, 8 + 1),
}


@pytest.mark.parametrize("how", list(SENDERS))
def test_exactly_one_core_sends(backend: str, how: str) -> None:
    kernel_type, block_dim, sender = SENDERS[how]
    world = 2
    out = hp.run(
        sender_rank,
        world_size=world,
        backend=backend,
        timeout=RUN_TIMEOUT,
        args=(how, kernel_type, block_dim),
    )
    # two rounds of 4 floats: sum over ranks of arange(8) + 10 * rank, not multiplied by cores
    total = sum(np.arange(8, dtype=np.float32) + 10 * r for r in range(world))
    for rank, (record, y) in enumerate(out):
        n_aic, n_aiv = KERNEL_TYPES[kernel_type]
        assert len(record) == (n_aic + n_aiv) * block_dim
        for core, hd, waits, query, rank_id, rank_dim in record:
            assert (hd, waits, query) == (0, [0, 0], 2), f"core {core}"
            assert (rank_id, rank_dim) == (rank, world)
        regions = y.reshape(-1, REGION)
        np.testing.assert_array_equal(regions[sender, :8], total)
        assert not np.delete(regions, sender, axis=0).any(), "only the sender's recvBuf is used"
        assert not regions[sender, 8:].any()


def _query_loop_kernel(xGM: Any, yGM: Any, tilingGM: Any, record: list) -> None:
    """Every core polls Query until the AllGather's round is done, then reads the result."""
    hccl = init_hccl(Hccl(), tilingGM, ops=("AllGather",))
    handle = hccl.AllGather[True](xGM, yGM, 4, FP32, 0)
    while hccl.Query(handle) < 1:
        pass
    record.append(hp.gm_tensor(yGM, torch.float32, 8).tolist())
    hp.SyncAll()
    hccl.Finalize()


def _query_loop_rank() -> list:
    record: list = []
    x = torch.full((4,), float(hp.get_rank() + 1))
    hp.launch(_query_loop_kernel, x, torch.zeros(8), cases.make_tiling(), record, block_dim=2)
    return record


def test_a_query_loop_on_another_core_lets_the_sending_core_prepare_on_every_schedule() -> None:
    """A core other than the sending one may Query a handle before the sending core prepared
    it (0, "ahead"). Until 2026-11-30 that Query was no scheduling point: on schedules that
    ran such a core first it spun until the run's timeout, where hardware runs the sending
    core meanwhile."""
    got = hp.run(_query_loop_rank, world_size=2, timeout=2.0, explore=16)
    assert got == [[[1.0] * 4 + [2.0] * 4] * 2] * 2


def _both_types_kernel(xGM: Any, yGM: Any, tilingGM: Any, record: list) -> None:
    hccl = init_hccl(Hccl(), tilingGM, ops=("AllReduce",))
    if hp.g_coreType == hp.AIC:
        hp.SyncAll[False]()  # let AIV block 0 prepare first
    hccl.AllReduce[True](xGM, yGM, 4, FP32, SUM)
    if hp.g_coreType == hp.AIV:
        hp.SyncAll[False]()


def test_prepare_from_both_core_types_without_config_is_rejected(backend: str) -> None:
    with pytest.raises(hp.WorldError) as info:
        hp.run(both_types_rank, world_size=1, backend=backend, timeout=RUN_TIMEOUT)
    [err] = info.value.root_causes.values()
    assert isinstance(err, hp.HcclCoreError)
    assert "both AIC and AIV" in str(err) and "HcclServerConfig" in str(err)


def both_types_rank() -> list:
    """Per rank: a mixed kernel whose AIC and AIV block 0 both call Prepare."""
    return cases.probe(_both_types_kernel, kernel_type="mix_aic_1_1")[0]


def _commit_on_block_1(xGM: Any, yGM: Any, tilingGM: Any) -> None:
    """Every core prepares; only block 1 (not the sending core) commits and waits."""
    h = init_hccl(Hccl(), tilingGM, ops=("AllGather",))
    handle = h.AllGather(xGM, yGM, 4, FP32, 0)
    if hp.GetBlockIdx() == 1:
        h.Commit(handle)
        h.Wait(handle)
    hp.SyncAll()
    h.Finalize()


def _commit_on_block_1_rank() -> None:
    n = hp.get_world_size()
    tiling = cases.make_tiling()
    hp.launch(_commit_on_block_1, torch.zeros(4), torch.zeros(4 * n), tiling, block_dim=2)


def test_a_hang_on_a_commit_of_another_core_names_both_cores() -> None:
    """hccl_aicpu_impl.h: Commit counts per core; only the working core's count reaches GM.

    Block 1's Commit lets block 1 Wait, and its Wait blocks until the server ran
    the round, which needs block 0's Commit: the report names both cores.
    """
    with pytest.raises(hp.WorldError) as info:
        hp.run(_commit_on_block_1_rank, world_size=2, timeout=RUN_TIMEOUT)
    err = info.value.failures[0]
    assert isinstance(err, hp.HcclDeadlockError)
    assert (
        "[AIV core 1 committed round 0, but only the sending core's Commits reach the server "
        "and AIV core 0 has not committed it]"
    ) in err.reason


def _commit_on_block_1_only(xGM: Any, yGM: Any, tilingGM: Any, finalize: bool) -> None:
    """Every core prepares; only block 1 (not the sending core) commits; nobody waits."""
    h = init_hccl(Hccl(), tilingGM, ops=("AllGather",))
    handle = h.AllGather(xGM, yGM, 4, FP32, 0)
    if hp.GetBlockIdx() == 1:
        h.Commit(handle)
    hp.SyncAll()
    if finalize:
        h.Finalize()


def _commit_on_block_1_only_rank(finalize: bool) -> None:
    n = hp.get_world_size()
    tiling = cases.make_tiling()
    hp.launch(
        _commit_on_block_1_only, torch.zeros(4), torch.zeros(4 * n), tiling, finalize, block_dim=2
    )


@pytest.mark.parametrize(
    ("finalize", "head"),
    [(True, "Finalize with handle 0"), (False, "handle 0 (AllGather(FP32, count=4, repeat=1))")],
)
def test_an_uncommitted_round_that_another_core_committed_names_both_cores(
    finalize: bool, head: str
) -> None:
    """Until stop 65 the Finalize and kernel-exit reports said only "committed 0 of 1 rounds"
    where the wait report already said which cores committed what."""
    with pytest.raises(hp.WorldError) as info:
        hp.run(_commit_on_block_1_only_rank, args=(finalize,), world_size=2, timeout=RUN_TIMEOUT)
    for err in info.value.failures.values():
        assert isinstance(err, hp.HcclUnfinishedError)
        assert head in str(err) and "0 of 1 rounds" in str(err)
        assert (
            "[AIV core 1 committed round 0, but only the sending core's Commits reach the server "
            "and AIV core 0 has not committed it]" in str(err)
        ), str(err)


def _sync_all_false_kernel() -> None:
    hp.SyncAll[False]()


@pytest.mark.parametrize(("kernel_type", "missing"), [("aiv", "AIC"), ("aic", "AIV")])
def test_sync_all_false_in_a_kernel_of_one_core_type_is_a_core_error(
    kernel_type: str, missing: str
) -> None:
    """dav_c220 SyncAllImpl<false>: the AIV cores signal their AIC core and wait for its answer
    (and the AIC cores for their AIV cores'), so in a kernel of one core type it never returns
    on hardware. Until stop 65 hccl_py ran it as a barrier of the cores there were."""

    def main() -> None:
        hp.launch(_sync_all_false_kernel, block_dim=2, kernel_type=kernel_type)

    with pytest.raises(hp.WorldError) as info:
        hp.run(main, world_size=1, timeout=RUN_TIMEOUT)
    [err] = info.value.root_causes.values()
    assert isinstance(err, hp.HcclCoreError), err
    assert f"SyncAll[False]() in a kernel of type {kernel_type}" in str(err)
    assert f"this kernel has no {missing} cores, so it never returns on hardware" in str(err)


def _one_rank_skips_sync_all() -> None:
    """Rank 0's core 1 returns without SyncAll; rank 1's kernel is right, then it waits in a
    barrier for rank 0."""

    def kernel() -> None:
        if hp.get_rank() == 0 and hp.GetBlockIdx() == 1:
            return
        hp.SyncAll()

    hp.launch(kernel, block_dim=2, kernel_type="aiv")
    hp.barrier()


def test_one_ranks_sync_all_deadlock_stops_the_other_ranks_as_peers() -> None:
    """Before, the emulator raised rank 0's "SyncAll can never complete" in rank 1 too, as rank
    1's own HcclDeadlockError without a rank: a report that rank 1's SyncAll hung (gloo says
    HcclPeerError). A deadlock of the whole world is still every rank's."""
    with pytest.raises(hp.WorldError) as info:
        hp.run(_one_rank_skips_sync_all, world_size=2, timeout=RUN_TIMEOUT)
    failures = info.value.failures
    assert isinstance(failures[0], hp.HcclDeadlockError), failures[0]
    assert "[rank 0] SyncAll can never complete" in str(failures[0])
    assert isinstance(failures[1], hp.HcclPeerError), failures[1]
    # as gloo's: the stopped rank is named (until 2026-12-01 the emulator's had no rank)
    assert failures[1].rank == 1 and "[rank 1] stopped because rank 0 failed" in str(failures[1])
