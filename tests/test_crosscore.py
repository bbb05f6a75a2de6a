"""CrossCoreSetFlag / CrossCoreWaitFlag: counting flags between cores, and their deadlock report."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest
import torch
from cases import RUN_TIMEOUT

import hccl_py as hp
from hccl_py import AIC, AIV

#: Each test is a unit of its own under xdist (conftest.py): none shares a module's jobs.
pytestmark = pytest.mark.spread


def _launch(kernel: Any, block_dim: int) -> list:
    """Per rank: ``kernel(log)`` on ``block_dim`` blocks of a mixed kernel; the log."""
    log: list = []
    hp.launch(kernel, log, block_dim=block_dim, kernel_type="mix_aic_1_2")
    return log


def _run(kernel: Any, block_dim: int = 2, backend: str = "emu", world: int = 1) -> list:
    return hp.run(
        _launch, world_size=world, backend=backend, timeout=RUN_TIMEOUT, args=(kernel, block_dim)
    )


#: Flag ids as plain ints, and as numpy integers (ported kernels compute ids with numpy; before
#: 2026-12-01 those were refused as not an int): (mode, set id, wait id of core 0).
_IDS = {"int": (0, 3, 3), "numpy": (np.int64(0), np.int32(3), np.uint8(3))}


@pytest.mark.parametrize("ids", sorted(_IDS))
def test_mode0_is_a_barrier_across_the_cube_cores(ids: str) -> None:
    """Cube core 1 writes after core 0 read: mode 0 orders them, which SyncAll does not cover;
    a numpy integer names the flag its value names."""
    mode, set_id, wait_id = _IDS[ids]
    box: dict = {}

    def kernel(log: list) -> None:
        if hp.g_coreType != AIC:
            return
        me = hp.GetBlockIdx()
        if me == 1:
            box["value"] = "written"
        hp.CrossCoreSetFlag[mode, hp.PIPE_FIX](set_id)
        hp.CrossCoreWaitFlag(3 if me else wait_id)
        log.append((me, box.get("value")))

    (log,) = _run(kernel, block_dim=3)
    assert sorted(log) == [(0, "written"), (1, "written"), (2, "written")]


def test_mode2_aic_releases_its_aiv_cores_and_they_release_it() -> None:
    order: list = []
    lock = threading.Lock()

    def kernel(log: list) -> None:
        if hp.g_coreType == AIC:
            with lock:
                order.append(("aic-set", hp.GetBlockIdx()))
            hp.CrossCoreSetFlag[2, hp.PIPE_FIX](5)
            hp.CrossCoreWaitFlag(6)  # released once both AIV cores of this AI core set 6
            with lock:
                order.append(("aic-released", hp.GetBlockIdx()))
        else:
            hp.CrossCoreWaitFlag[2, hp.PIPE_MTE2](5)  # the template form, as AscendC writes it
            with lock:
                order.append(("aiv-released", hp.GetBlockIdx()))
            hp.CrossCoreSetFlag[2, hp.PIPE_MTE3](6)

    _run(kernel, block_dim=2)
    for block in (0, 1):
        aivs = [i for kind, i in order if kind == "aiv-released" and i // 2 == block]
        assert len(aivs) == 2
        set_at = order.index(("aic-set", block))
        released_at = order.index(("aic-released", block))
        assert all(set_at < order.index(("aiv-released", i)) < released_at for i in aivs)


def test_mode4_pairs_the_aic_with_one_aiv_by_flag_id() -> None:
    """Ascend 950's mode 4 (MegaMoe's NotifyVector / WaitForCube): the AIC's flags 0..10 go to
    AIV0, 16..26 to AIV1's 0..10; each AIV's 0..10 to the AIC, AIV1's as 16..26. Refused as an
    unknown mode before 2026-11-28."""
    order: list = []
    lock = threading.Lock()

    def note(what: str) -> None:
        with lock:
            order.append((what, hp.GetBlockIdx()))

    def kernel(log: list) -> None:
        if hp.g_coreType == AIC:
            hp.CrossCoreSetFlag[4, hp.PIPE_FIX](4)  # AIV0's flag 4
            hp.CrossCoreWaitFlag[4, hp.PIPE_FIX](6)  # from AIV0
            note("aic-got-aiv0")
            hp.CrossCoreSetFlag[4, hp.PIPE_FIX](16 + 4)  # AIV1's flag 4
            hp.CrossCoreWaitFlag[4, hp.PIPE_FIX](16 + 6)  # from AIV1
            note("aic-got-aiv1")
        else:
            sub = hp.GetSubBlockIdx()
            hp.CrossCoreWaitFlag[4, hp.PIPE_V](4)
            note(f"aiv{sub}-released")
            hp.CrossCoreSetFlag[4, hp.PIPE_S](6)

    _run(kernel, block_dim=2)
    for block in (0, 1):
        got0 = order.index(("aic-got-aiv0", block))
        got1 = order.index(("aic-got-aiv1", block))
        aiv0 = order.index(("aiv0-released", 2 * block))
        aiv1 = order.index(("aiv1-released", 2 * block + 1))
        assert aiv0 < got0 < aiv1 < got1, order


def test_mode4_aiv1_may_set_the_aic_id_its_flag_arrives_as() -> None:
    """ops-transformer's 950 AlltoAllvQuantGroupedMatMul (a2av_gmm_scheduler.h) has each AIV
    Set ``8 + 16 * GetSubBlockIdx()`` and the AIC Wait for 8 and 24: AIV1's 24 names the flag
    its own 8 arrives as. It was refused as outside 0..10 on an AIV core."""
    order: list = []

    def kernel(log: list) -> None:
        if hp.g_coreType == AIC:
            hp.CrossCoreWaitFlag[4, hp.PIPE_MTE2](8)
            hp.CrossCoreWaitFlag[4, hp.PIPE_MTE2](8 + 16)
            order.append("aic")
        else:
            order.append(f"aiv{hp.GetSubBlockIdx()}")
            hp.CrossCoreSetFlag[4, hp.PIPE_V](8 + 16 * hp.GetSubBlockIdx())

    _run(kernel, block_dim=1)
    assert order[-1] == "aic" and sorted(order[:2]) == ["aiv0", "aiv1"], order


def test_mode4_aiv0_may_not_set_an_aic_id_of_aiv1() -> None:
    def kernel(log: list) -> None:
        if hp.g_coreType == AIV and hp.GetSubBlockIdx() == 0:
            hp.CrossCoreSetFlag[4, hp.PIPE_V](24)

    with pytest.raises(hp.WorldError) as info:
        _run(kernel, block_dim=1)
    assert "flagId must be an int in 0..10 in mode 4 on an AIV core, got 24" in str(info.value)


def test_mode4_needs_a_1_2_mixed_kernel() -> None:
    def kernel() -> None:
        if hp.g_coreType == AIC:
            hp.CrossCoreSetFlag[4, hp.PIPE_FIX](1)

    def body() -> None:
        hp.launch(kernel, block_dim=1, kernel_type="mix_aic_1_1")

    with pytest.raises(hp.WorldError) as info:
        hp.run(body, world_size=1, timeout=RUN_TIMEOUT)
    assert "mode 4 pairs an AIC with one AIV of a mix_aic_1_2 kernel" in str(info.value)


def _run_ahead_kernel(log: list) -> None:
    if hp.g_coreType != AIV:
        return
    for _ in range(3):
        hp.CrossCoreSetFlag[1, hp.PIPE_V](2)  # mode 1: the two AIV cores of one AI core
    for _ in range(3):
        hp.CrossCoreWaitFlag(2)
    log.append(hp.GetBlockIdx())


def test_sets_run_ahead_and_each_wait_consumes_one(backend: str) -> None:
    for log in _run(_run_ahead_kernel, block_dim=1, backend=backend, world=2):
        assert sorted(log) == [0, 1]


def _unreleased_kernel(log: list) -> None:
    if hp.g_coreType == AIC and hp.GetBlockIdx() == 0:
        hp.CrossCoreSetFlag(7)  # mode 0, but cube core 1 never sets flag 7
        hp.CrossCoreWaitFlag(7)


def test_a_wait_nobody_releases_is_a_deadlock_report(backend: str) -> None:
    with pytest.raises(hp.WorldError) as info:
        _run(_unreleased_kernel, block_dim=2, backend=backend)
    text = str(info.value)
    assert "CrossCoreWaitFlag(7)" in text and "AIC core 0" in text, text
    assert isinstance(info.value.failures[0], hp.HcclDeadlockError)


@pytest.mark.parametrize(
    ("call", "fact"),
    [
        (lambda: hp.CrossCoreSetFlag[0, hp.PIPE_FIX](16), "flagId must be an int in 0..15"),
        (lambda: hp.CrossCoreWaitFlag("3"), "flagId must be an int in 0..15"),
        (lambda: hp.CrossCoreSetFlag(True), "flagId must be an int in 0..15, got True"),
        (lambda: hp.CrossCoreSetFlag(np.bool_(True)), "CrossCoreSetFlag: flagId must be an int"),
        (lambda: hp.CrossCoreWaitFlag(3.0), "CrossCoreWaitFlag: flagId must be an int in 0..15"),
        (lambda: hp.CrossCoreSetFlag(np.int64(16)), "flagId must be an int in 0..15, got"),
        (lambda: hp.CrossCoreWaitFlag(np.int32(-1)), "flagId must be an int in 0..15, got"),
        (lambda: hp.CrossCoreSetFlag[3, hp.PIPE_FIX](1), "modeId must be 0, 1, 2 or 4"),
        (lambda: hp.CrossCoreSetFlag[0, hp.PIPE_S](1), "modeId must be 0, 1, 2 or 4 and pipe"),
        (lambda: hp.CrossCoreWaitFlag[5, hp.PIPE_S](1), "CrossCoreWaitFlag[5, 0]: modeId must"),
        (lambda: hp.CrossCoreSetFlag[4, hp.PIPE_ALL](1), "CrossCoreSetFlag[4, 6]: modeId must"),
        (lambda: hp.CrossCoreSetFlag[4, hp.PIPE_FIX](11), "0..10 or 16..26 in mode 4 on an AIC"),
        (lambda: hp.CrossCoreWaitFlag[0, 99](1), "pipe one of"),
    ],
)
def test_bad_arguments_name_the_rule(call: Any, fact: str) -> None:
    def kernel(log: list) -> None:
        if hp.g_coreType == AIC:
            call()

    with pytest.raises(hp.WorldError) as info:
        _run(kernel, block_dim=1)
    assert fact in str(info.value)
    assert isinstance(info.value.failures[0], hp.HcclCoreError)


def test_aiv1_waits_in_mode_4_on_its_own_flag_ids_only() -> None:
    """AIV1 may Set the AIC's id of its flag (16..26) in mode 4, but it Waits on its own
    flags, 0..10."""

    def kernel(log: list) -> None:
        if hp.g_coreType == AIV and hp.GetSubBlockIdx() == 1:
            hp.CrossCoreWaitFlag[4, hp.PIPE_S](20)

    with pytest.raises(hp.WorldError) as info:
        _run(kernel, block_dim=1)
    assert isinstance(info.value.failures[0], hp.HcclCoreError)
    assert "CrossCoreWaitFlag: flagId must be an int in 0..10 in mode 4 on an AIV core, got 20" in (
        str(info.value)
    )


@pytest.mark.parametrize(
    ("call", "params", "count"),
    [(hp.CrossCoreSetFlag, (0, hp.PIPE_FIX, 1), 3), (hp.CrossCoreWaitFlag, (), 0)],
)
def test_template_arguments_are_one_or_two(call: Any, params: tuple, count: int) -> None:
    """Before 2026-11-30 a third (or no) template argument raised Python's own "too many
    values to unpack"."""
    name = "CrossCoreSetFlag" if call is hp.CrossCoreSetFlag else "CrossCoreWaitFlag"
    with pytest.raises(hp.HcclUsageError) as info:
        call[params]
    assert str(info.value).startswith(
        f"{name}[modeId, pipe] takes one or two template arguments (the mode, then the pipe), "
        f"got {count}: "
    )


def test_more_than_15_pending_completions_is_reported() -> None:
    def kernel(log: list) -> None:
        if hp.g_coreType == AIC:
            for _ in range(16):
                hp.CrossCoreSetFlag(1)

    with pytest.raises(hp.WorldError) as info:
        _run(kernel, block_dim=1)
    assert "more than 15 completions" in str(info.value)


def test_15_pending_completions_are_allowed() -> None:
    """A flag holds up to 15 completions not waited for (the limit is more than 15)."""

    def kernel(log: list) -> None:
        if hp.g_coreType == AIC:
            for _ in range(15):
                hp.CrossCoreSetFlag(1)
            for k in range(15):
                hp.CrossCoreWaitFlag(1)
                log.append(k)

    assert _run(kernel, block_dim=1) == [list(range(15))]


def test_task_ratio_is_one_on_the_cube_cores() -> None:
    """AscendC's GetTaskRation is 1 on an AIC core (dav_3510 / dav_c220 GetTaskRationImpl), so
    that ``GetBlockIdx() / GetTaskRation()`` is the AI core on every core (MegaMoe's blockIdx_);
    it was 2 on the AIC cores of a 1:2 kernel before 2026-11-28."""

    def kernel(log: list) -> None:
        log.append(
            ("AIC" if hp.g_coreType == AIC else "AIV", hp.GetBlockIdx() // hp.GetTaskRatio())
        )

    (log,) = _run(kernel, block_dim=2)
    assert sorted(log) == [("AIC", 0), ("AIC", 1), ("AIV", 0), ("AIV", 0), ("AIV", 1), ("AIV", 1)]


def _gm_flag_kernel(flag: hp.GmAddr, log: list) -> None:
    if hp.g_coreType == AIC:
        hp.CrossCoreSetFlag[4, hp.PIPE_FIX](0)  # AIV0 may write the flag now
        while int(hp.gm_tensor(flag, torch.int32, 1)[0]) == 0:  # ReadGmByPassDCache
            pass
        log.append("seen")
    elif hp.GetSubBlockIdx() == 0:
        hp.CrossCoreWaitFlag[4, hp.PIPE_V](0)
        hp.gm_tensor(flag, torch.int32, 1)[0] = 1


def _gm_flag_body() -> list:
    log: list = []
    flag = torch.zeros(8, dtype=torch.int32, device=hp.device())
    hp.launch(_gm_flag_kernel, flag, log, block_dim=1, kernel_type="mix_aic_1_2")
    return log


def test_a_core_polls_a_flag_that_another_core_of_its_rank_sets_in_gm(backend: str) -> None:
    """MegaMoe's cores signal through workspace counters (no window): the AIC polls a GM word
    that its AIV0 writes. Before 2026-11-28 the emulator saw only window polls, and the poll
    kept the baton until the run's timeout."""
    body = _gm_flag_body
    assert hp.run(body, world_size=1, backend=backend, timeout=20) == [["seen"]]


def _gm_flags_kernel(flags: hp.GmAddr, words: int, turns: int) -> None:
    """AIV core 1 reads ``words`` unchanged GM words (held views) ``turns`` times (a flag nobody
    sets when ``turns`` is 0: for ever) and does Python work with them, while core 0 returns."""
    if hp.GetBlockIdx() != 1:
        return
    views = [hp.gm_tensor(flags + 4 * k, torch.int32, 1) for k in range(words)]
    total = 0
    for _ in range(turns or 10**9):
        values = [int(v[0]) for v in views]
        if not turns and values[0] == 1:
            return
        total += sum(values)


def _gm_flags(words: int, turns: int) -> None:
    flags = torch.full((words,), 2, dtype=torch.int32)
    flags[0] = 0
    hp.launch(_gm_flags_kernel, flags, words, turns, block_dim=2, kernel_type="aiv")


def test_a_gm_flag_poll_names_its_core_in_the_deadlock_report() -> None:
    with pytest.raises(hp.WorldError) as info:
        hp.run(_gm_flags, world_size=1, args=(1, 0), timeout=20)
    (error,) = info.value.root_causes.values()
    assert isinstance(error, hp.HcclDeadlockError), error
    assert "rank 0 AIV core 1 polls bytes [0, 4) of flags (domain a kernel argument)" in str(error)


def test_a_loop_that_rereads_three_config_words_is_no_poll() -> None:
    """A loop that reads three unchanged words per turn and works on them in Python looks,
    operation by operation, like a poll of three flags read in turn: a rule that took flags
    read in turn for a poll (tried and reverted) called this correct kernel a deadlock."""
    assert hp.run(_gm_flags, world_size=1, args=(3, 4000), timeout=60) == [None]


TILES = 3000


def _tile_loop_kernel(cfg: hp.GmAddr, x: hp.GmAddr, out: hp.GmAddr) -> None:
    """AIV core 1 scales 3000 tiles, reading the tile length and the scale (two unchanged
    GM words) on every turn, while core 0 waits in SyncAll: real work, no poll."""
    if hp.GetBlockIdx() == 1:
        c = hp.gm_tensor(cfg, torch.int32, 2)
        xs = hp.gm_tensor(x, torch.float32, TILES * 64)
        ys = hp.gm_tensor(out, torch.float32, TILES * 64)
        for t in range(TILES):
            n, scale = int(c[0]), int(c[1])
            ys[t * n : (t + 1) * n] = xs[t * n : (t + 1) * n] * scale
    hp.SyncAll()


def _tile_loop() -> float:
    cfg = torch.tensor([64, 2], dtype=torch.int32)
    x, out = torch.ones(TILES * 64), torch.zeros(TILES * 64)
    hp.launch(_tile_loop_kernel, cfg, x, out, block_dim=2, kernel_type="aiv")
    return float(out.sum())


def test_a_tile_loop_that_rereads_two_config_words_is_no_poll() -> None:
    """A review found the rule that took flags read in turn for a poll (tried and reverted)
    calling this correct kernel a deadlock: its two words read 8 times with nothing new
    between them."""
    assert hp.run(_tile_loop, world_size=1, timeout=60) == [2.0 * TILES * 64]


def _mode4_set_mode0_wait(log: list) -> None:
    if hp.g_coreType == AIC:
        hp.CrossCoreSetFlag[4, hp.PIPE_FIX](2)  # AIV0's mode-4 flag 2
    elif hp.GetSubBlockIdx() == 0:
        hp.CrossCoreWaitFlag(2)  # the mode 0..2 counter of flag 2: never set


def test_mode4_counters_are_separate_from_the_other_modes() -> None:
    """On the 950 mode 4 is set_intra_block / wait_intra_block, apart from modes 0..2's
    counters (CrossCoreWaitFlag(ISASI).md: "模式4的flagId与模式0、1、2独立"); before
    2026-12-01 a mode-4 Set released a Wait of mode 0 of the same id, and the other way round."""
    with pytest.raises(hp.WorldError) as info:
        _run(_mode4_set_mode0_wait, block_dim=1)
    text = str(info.value.failures[0])
    assert isinstance(info.value.failures[0], hp.HcclDeadlockError)
    assert "CrossCoreWaitFlag(2) on AIV core 0 can never return" in text, text
    assert "only a mode 4 Set of flag 2 is pending for it" in text, text


@pytest.mark.parametrize("kernel_type", ["aiv", "aic"])
@pytest.mark.parametrize("mode", [1, 2])
def test_modes_1_and_2_need_a_mixed_kernel(kernel_type: str, mode: int) -> None:
    """Modes 1 and 2 synchronise the cores of one AI core: KERNEL_TYPE_MIX_AIC_1_1 / _1_2 only
    (CrossCoreSetFlag(ISASI).md, table 3). Before 2026-12-01 a mode-2 Set in an AIV-only kernel
    released nobody and a mode-1 Set released its own core, silently."""
    pipe = hp.PIPE_MTE3 if kernel_type == "aiv" else hp.PIPE_FIX

    def kernel() -> None:
        if mode == 2 or kernel_type == "aiv":
            hp.CrossCoreSetFlag[mode, pipe](1)
        else:
            hp.CrossCoreWaitFlag[mode, hp.PIPE_S](1)

    def body() -> None:
        hp.launch(kernel, block_dim=2, kernel_type=kernel_type)

    with pytest.raises(hp.WorldError) as info:
        hp.run(body, world_size=1, timeout=RUN_TIMEOUT)
    assert isinstance(info.value.failures[0], hp.HcclCoreError)
    assert f"mode {mode} synchronises the cores inside one AI core" in str(info.value)
    assert f"this kernel is {kernel_type}" in str(info.value)


def test_an_unhashable_pipe_is_a_clear_error() -> None:
    """Before 2026-12-01 ``CrossCoreSetFlag[0, [1]]`` raised Python's own "unhashable type"."""

    def kernel(log: list) -> None:
        if hp.g_coreType == AIC:
            hp.CrossCoreSetFlag[0, [1]](1)

    with pytest.raises(hp.WorldError) as info:
        _run(kernel, block_dim=1)
    assert isinstance(info.value.failures[0], hp.HcclCoreError)
    assert "CrossCoreSetFlag[0, [1]]: modeId must be 0, 1, 2 or 4 and pipe one of" in str(
        info.value
    )


def test_a_mode_1_set_on_a_cube_core_names_the_rank() -> None:
    """Before 2026-12-01 this error alone among the flag errors did not name the rank."""

    def kernel(log: list) -> None:
        if hp.g_coreType == AIC:
            hp.CrossCoreSetFlag[1, hp.PIPE_FIX](0)

    with pytest.raises(hp.WorldError) as info:
        _run(kernel, block_dim=1)
    assert str(info.value.failures[0]) == (
        "[rank 0] CrossCoreSetFlag mode 1 synchronises AIV cores: called on an AIC core"
    )
