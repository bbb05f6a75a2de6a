"""What docs/notes/mc2-kernels.md section 28 says about two ports.

MoeUpdateExpert's host tiling (samples/mc2_moe_update_expert.py) and MatmulAllReduceAddRmsNorm's
round-count handshake (samples/mc2_matmul_all_reduce_add_rms_norm.py).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

import hccl_py as hp

SAMPLES_DIR = Path(__file__).resolve().parent.parent / "samples"


def _load(monkeypatch: pytest.MonkeyPatch, name: str):
    """A sample, imported from samples/ as its own module (it imports its neighbours)."""
    monkeypatch.syspath_prepend(str(SAMPLES_DIR))
    spec = importlib.util.spec_from_file_location(name, SAMPLES_DIR / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, name, module)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def update(monkeypatch: pytest.MonkeyPatch):
    return _load(monkeypatch, "mc2_moe_update_expert")


@pytest.fixture
def mar(monkeypatch: pytest.MonkeyPatch):
    return _load(monkeypatch, "mc2_matmul_all_reduce_add_rms_norm")


def _inputs(bs: int = 4, k: int = 2, experts: int = 4, f: int = 3) -> dict:
    return {
        "expertIds": torch.zeros(bs, k, dtype=torch.int32),
        "eplbTable": torch.zeros(experts, f, dtype=torch.int32),
    }


# ---------------------------------------------------------------- MoeUpdateExpert's tiling
@pytest.mark.parametrize(
    ("given", "message"),
    [
        (("expertScales",), "pruning_threshold must be set"),
        (("pruningThreshold",), "expert_scales must be set"),
        (("activeMask",), "pruning_threshold and expert_scales must be set"),
        (("activeMask", "expertScales"), "pruning_threshold must be set"),
        (("activeMask", "pruningThreshold"), "expert_scales must be set"),
    ],
)
def test_pruning_inputs_need_their_partners(update, given, message) -> None:
    """CheckOptionalInputShape: five tailor combinations are refused, each with its reason."""
    optional = {
        "expertScales": torch.zeros(4, 2),
        "pruningThreshold": torch.zeros(2),
        "activeMask": torch.zeros(4, dtype=torch.bool),
    }
    chosen = {name: optional[name] for name in given}
    with pytest.raises(ValueError, match=message):
        update.MoeUpdateExpertTilingFunc(**_inputs(), **chosen, localRankId=0, worldSize=2)


def test_the_keys_balance_mode_is_the_pruning_switch(update) -> None:
    """GetTilingKey: any pruning input selects the pruning template (TOKEN_ID_BALANCING_MODE),
    while the map follows the balance_mode attribute in the tiling data."""
    pruning = {"expertScales": torch.zeros(4, 2, dtype=torch.float16),
               "pruningThreshold": torch.zeros(1, 2)}  # fmt: skip
    tiling, key, blocks = update.MoeUpdateExpertTilingFunc(
        **_inputs(), **pruning, localRankId=1, worldSize=2, balanceMode=0
    )
    assert key == (update.TOKEN_ID_BALANCING_MODE, update.TILINGKEY_HALF)
    assert (tiling.balanceMode, tiling.localRankId, tiling.worldSize) == (0, 1, 2)
    assert blocks == tiling.aivCoreNum == update.AIV_NUM
    tiling, key, _ = update.MoeUpdateExpertTilingFunc(**_inputs(), balanceMode=1)
    assert key == (update.RANK_ID_BALANCING_MODE, update.TILINGKEY_FLOAT)
    assert (tiling.balanceMode, tiling.localRankId, tiling.worldSize) == (1, -1, -1)


def test_table_width_is_bounded_by_the_world_only_in_rank_mode(update) -> None:
    """CheckInputShape: F in (1, worldSize + 1]; without a world size (token mode) the bound is
    MAX_WORLD_SIZE + 1."""
    wide = _inputs(f=4)
    with pytest.raises(ValueError, match=r"dim1 4 not in \(1, 3\]"):
        update.MoeUpdateExpertTilingFunc(**wide, localRankId=0, worldSize=2, balanceMode=0)
    tiling, _, _ = update.MoeUpdateExpertTilingFunc(**wide, balanceMode=1)
    assert tiling.f == 4
    with pytest.raises(ValueError, match="localRankId 2 not in"):
        update.MoeUpdateExpertTilingFunc(**_inputs(), localRankId=2, worldSize=2)


# ---------------------------------------------------------------- MatmulAllReduceAddRmsNorm
def _arn_main(mar):
    def main() -> list[str]:
        return mar.arn(mar.all_reduce_sum(hp.get_world_size()))

    return main


def _with_read_barrier(mar, monkeypatch: pytest.MonkeyPatch) -> None:
    """The fix: a second AIV SyncAll after every core has read the count, so that block 0's
    next count cannot overtake a slower core's read of this one."""

    def ComputeAddRmsNorm(self, tileTiling, tailTiling, keyData, rcvCntGM):
        lastCnt, addRmsNormCount = 0, 1
        total = self.tileCnt_ + self.tailCnt_
        while True:
            if hp.GetBlockIdx() == 0:
                curCnt = self.GetCurFinishedCnt()
                if curCnt <= lastCnt:
                    continue
                hp.gm_tensor(rcvCntGM, torch.int64, 1)[0] = curCnt
            hp.SyncAll()
            lastCnt = int(hp.gm_tensor(rcvCntGM, torch.int64, 1)[0])
            hp.SyncAll()  # the added barrier
            if lastCnt >= addRmsNormCount and addRmsNormCount <= self.tileCnt_:
                done = min(lastCnt, self.tileCnt_)
                addRmsNormCount = self.ComputeAddRmsNormInner(
                    tileTiling, keyData.ARNNumBlocksTile, done, addRmsNormCount
                )
            if self.tailCnt_ and self.tileCnt_ < addRmsNormCount <= lastCnt:
                addRmsNormCount = self.ComputeAddRmsNormInner(
                    tailTiling, keyData.ARNNumBlocksTail, lastCnt, addRmsNormCount
                )
            if lastCnt >= total:
                break

    monkeypatch.setattr(mar.AddRmsNormKernel, "ComputeAddRmsNorm", ComputeAddRmsNorm)


def test_arn_round_count_race(mar, monkeypatch) -> None:
    """Seed 4 at 2 ranks: AIV block 0 publishes the final count before AIV core 5 has read the
    previous one; core 5 reads the final count, leaves the loop and waits in SyncAll<false>
    while the other AIV cores wait in the loop's next SyncAll(). With a barrier after the read
    all 16 explored schedules pass."""
    with pytest.raises(hp.WorldError) as err:
        hp.run(_arn_main(mar), world_size=2, backend="emu", seed=4, timeout=60)
    roots = list((err.value.root_causes or err.value.failures).values())
    assert {type(e).__name__ for e in roots} == {"HcclDeadlockError"}
    text = str(roots[0])
    assert "AIV core 5 waits in SyncAll: 4 of 9 cores arrived" in text
    assert "AIV core 0 waits in SyncAll: 5 of 6 cores arrived" in text
    _with_read_barrier(mar, monkeypatch)
    per_rank = hp.run(_arn_main(mar), world_size=2, backend="emu", explore=16, timeout=60)
    assert [line.split()[2:4] for lines in per_rank for line in lines] == [
        ["arn1", "PASS"],
        ["arn2", "PASS"],
    ] * 2
