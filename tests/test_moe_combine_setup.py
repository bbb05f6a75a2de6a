"""ops-transformer's MoeDistributeCombineSetup (samples/mc2_moe_distribute_combine_setup.py):
its status items land past the commCmdInfoOut that the host sizes for them.

``SetStatus`` (arch22/moe_distribute_combine_setup.h) starts its items at ``dataCmdInfoGM_ +
(axisA_ + startRankId_) * 64``, and ``dataCmdInfoGM_`` is where ``Dispatch`` left it: item
``(moeExpertPerRankNum - 1) * epWorldSize + startRankId_`` of ``commCmdInfoOut``. The infershape
and the tiling size ``commCmdInfoOut`` as ``(A + epWorldSize) * 16`` int32, ``A + epWorldSize``
items; the sample passes a larger one, this test the exact size.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import hccl_py as hp

SAMPLES_DIR = Path(__file__).resolve().parent.parent / "samples"


@pytest.fixture
def sample(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.syspath_prepend(str(SAMPLES_DIR))
    import mc2_moe_distribute_combine_setup as module

    yield module
    sys.modules.pop("mc2_moe_distribute_combine_setup", None)


def test_status_items_land_past_the_comm_cmd_info_the_host_sizes(sample) -> None:
    def main() -> None:
        n = hp.get_world_size()
        a = sample.BS * n * min(sample.LOCAL_EXPERTS, sample.K)  # 16 rows: 18 items
        sample.launch_combine(1, cmd_items=a + n)

    with pytest.raises(hp.WorldError) as info:
        hp.run(main, world_size=2, platform=sample.PLATFORM, **sample.RUN_KWARGS)
    # core 0 of rank 0 (startRankId_ 0): item (2 - 1) * 2 + 0 + 16 = 18, its srcLow first
    assert "bytes [1184, 1188) of commCmdInfoOut fall outside its 1152 bytes" in str(info.value)


def test_the_sample_passes_with_room_for_every_item(sample) -> None:
    def main() -> list[bool]:
        x_out = sample.launch_combine(1)
        return [bool((x_out.cpu().numpy() == sample.reference(hp.get_rank(), 1)).all())]

    assert hp.run(main, world_size=2, platform=sample.PLATFORM, **sample.RUN_KWARGS) == [
        [True],
        [True],
    ]
