"""Every window of a run has an integer address of its own, the same on every rank.

A window's integer address (``int(GetWindowsInAddr(r))``, what BatchWrite items and
``GmAddr.from_int`` carry) holds a number for its domain. That number was a 12-bit hash of the
domain's name, so two domains in 4096 shared one, and a copy meant for one domain's window
landed in the other's without a word: ``new_group([3, 0, 2])`` made twice and
``new_group([3, 1, 0])`` on 4 ranks. Domains are now numbered in the order they are created.
"""

from __future__ import annotations

import itertools
import sys

import numpy as np
import pytest
import torch

import hccl_py as hp
from hccl_py import Hccl, HcclCMDType, Mc2CcTiling, Mc2CcTilingConfig, Mc2InitTiling
from hccl_py.kernel.context import current_rank_context
from hccl_py.ops.batch_write import ITEM_DTYPES
from hccl_py.server.windows import KINDS, window_base

TIMEOUT = 60.0


def window_bases() -> list[int]:
    """This rank's integer addresses of every window of every domain it is a member of, for
    the world and every subset of 2 or 3 of the 4 ranks, each made twice."""
    me, server = hp.get_rank(), current_rank_context().server
    groups = [hp.world_group()]
    for size in (2, 3):
        for ranks in itertools.permutations(range(4), size):
            groups += [hp.new_group(ranks), hp.new_group(ranks)]
    return [
        server.window(g.name, r, kind).int_base()
        for g in groups
        if me in g.ranks
        for r in g.ranks
        for kind in KINDS
    ]


def test_every_window_of_a_run_has_an_address_of_its_own() -> None:
    """With a 12-bit hash of each of these 73 names, some of them shared a number."""
    per_rank = hp.run(window_bases, world_size=4, buffsize_mb=1, timeout=TIMEOUT)
    for bases in per_rank:
        assert len(set(bases)) == len(bases)


class _Tiling(hp.TilingData):
    _fields_ = [("init", Mc2InitTiling), ("bw", Mc2CcTiling)]


def _tiling(group: str) -> _Tiling:
    tiling = _Tiling()
    cfg = Mc2CcTilingConfig(group, HcclCMDType.HCCL_CMD_BATCH_WRITE, "BatchWrite=level0:fullmesh")
    cfg.SetQueueNum(1)
    assert not (cfg.GetTiling(tiling.init) or cfg.GetTiling(tiling.bw))
    return tiling


def _write_into_a(tilingGM, gA, gB, out: dict) -> None:
    """A BatchWrite item that copies 1234 into this rank's In window of domain A at byte 64."""
    me = hp.get_rank()
    h = Hccl()
    h.InitV2(hp.GetHcclContext(0), hp.GET_TILING_DATA_WITH_STRUCT(_Tiling, tilingGM))
    h.SetCcTilingV2(hp.offsetof(_Tiling, "bw"))
    w_a = hp.GetHcclContext(0).windowsIn[gA.ranks.index(me)]
    w_b = hp.GetHcclContext(1).windowsIn[gB.ranks.index(me)]
    stage = h.GetWindowsOutAddr(gA.ranks.index(me))
    hp.gm_tensor(stage, torch.int32, 1)[0] = 1234
    item = np.zeros(1, dtype=ITEM_DTYPES["A3"])
    dst, src = int(w_a) + 64, int(stage)
    item[0]["length"] = 4
    item[0]["srcLow"], item[0]["srcHigh"] = src & 0xFFFFFFFF, src >> 32
    item[0]["dstLow"], item[0]["dstHigh"] = dst & 0xFFFFFFFF, dst >> 32
    hp.gm_tensor(stage + 512, torch.uint8, 64)[:] = torch.from_numpy(item.view(np.uint8).copy())
    h.Wait(h.BatchWrite[True](stage + 512, 1, 0))
    out["A"] = int(hp.gm_tensor(w_a + 64, torch.int32, 1)[0])
    out["B"] = int(hp.gm_tensor(w_b + 64, torch.int32, 1)[0])
    h.Finalize[False]()


def copy_into_one_of_two_domains() -> dict | None:
    me = hp.get_rank()
    hp.new_group([3, 0, 2])
    g_b, g_a = hp.new_group([3, 0, 2]), hp.new_group([3, 1, 0])  # once one number, by the hash
    if me not in (0, 3):
        return None
    out: dict = {}
    hp.launch(_write_into_a, _tiling(g_a.name), g_a, g_b, out, groups={0: g_a, 1: g_b})
    return out


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="gloo windows: Linux memfds")
@pytest.mark.parametrize("backend", ["emu", "gloo"])
def test_a_copy_lands_in_the_window_it_names(backend: str) -> None:
    """Before, rank 0's and 3's copy landed in domain B's window: A [0, 0], B [1234, 1234]."""
    results = hp.run(copy_into_one_of_two_domains, world_size=4, backend=backend,
                     platform="A3", buffsize_mb=1, timeout=TIMEOUT)  # fmt: skip
    assert [r for r in results if r is not None] == [{"A": 1234, "B": 0}] * 2


def _first_window_of_own_group(out: list) -> None:
    out.append(int(hp.GetHcclContext(0).windowsIn[hp.GetHcclContext(0).rankId]))


def _own_group_window() -> int:
    """Ranks 0, 1 and 2, 3 each launch on their own group, created in that order on every rank."""
    pairs = [hp.new_group([0, 1]), hp.new_group([2, 3])]
    out: list[int] = []
    hp.launch(_first_window_of_own_group, out, groups={0: pairs[hp.get_rank() // 2]})
    return out[0]


@pytest.mark.parametrize("backend", ["emu", "gloo"])
def test_domains_are_numbered_as_created_whoever_maps_first(backend: str) -> None:
    """The world is domain 0, then each group in the order every rank creates them. The
    emulator used to number a domain when a rank first asked for one of its windows: which
    rank did so first was the schedule's choice, so the integers differed between schedules
    (explore called a correct program's result schedule-dependent) and from gloo's."""
    want = [window_base(1 + rank // 2, rank, "In") for rank in range(4)]  # global ranks
    run = {"world_size": 4, "buffsize_mb": 1, "timeout": TIMEOUT, "backend": backend}
    assert hp.run(_own_group_window, **run) == want
    if backend == "emu":
        for options in ({"seed": 3}, {"explore": 8}):
            assert hp.run(_own_group_window, **run, **options) == want
