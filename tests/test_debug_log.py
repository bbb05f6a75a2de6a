"""The debug log (issue 15, item 4): one line per Hccl call, off by default."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import pytest
import test_reliability as kernels

import hccl_py as hp
from hccl_py.client import log

N = kernels.N


def _gather() -> None:
    hp.run(kernels.gather_into, world_size=2, backend="emu", args=(kernels.torch.zeros(2 * N),))


def test_every_call_is_one_line(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="hccl_py"):
        _gather()
    lines = [r.getMessage() for r in caplog.records if r.name == "hccl_py"]
    for rank in (0, 1):
        mine = [line for line in lines if line.startswith(f"rank {rank} AIV core 0: ")]
        calls = [line.split(": ", 1)[1].split("(")[0] for line in mine]
        assert calls == ["InitV2"] + ["SetCcTilingV2"] * 5 + [
            "Commit",
            "AllGather[True]",
            "Wait",
            "Finalize",
        ]
        assert (
            f"AllGather[True](sendBuf=GmAddr(xGM+0, rank {rank}), recvBuf=GmAddr(yGM+0, rank {rank}), count=4, dataType=HCCL_DATA_TYPE_FP32"
            in mine[7]
        )
        assert mine[6].endswith("Commit(0) round 0 -> None")
        assert mine[8].endswith("Wait(0) round 0 -> 0")


def test_the_log_is_off_by_default(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="hccl_py"):
        _gather()
    assert not [r for r in caplog.records if r.name == "hccl_py"]


def test_environment_variable_turns_it_on() -> None:
    code = "import hccl_py.client.log as l; l.logger.debug('hello %s', 1)"
    env = {**os.environ, "HCCL_PY_LOG": "debug"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stderr.strip() == "hccl_py DEBUG hello 1"


@pytest.mark.parametrize(
    ("raw", "level"),
    [("debug", logging.DEBUG), (" Info ", logging.INFO), ("", None), ("0", None), ("off", None)],
)
def test_the_log_variable_takes_levels_and_off(raw: str, level: int | None) -> None:
    assert log._log_level(raw) == level


@pytest.mark.parametrize("raw", ["garbage", "basic_format", "10"])
def test_another_log_value_is_a_clear_error(raw: str) -> None:
    """Before 2026-11-30 any value turned the log on at DEBUG ("basic_format" raised logging's
    "Unknown level" at import)."""
    with pytest.raises(ValueError, match=f"HCCL_PY_LOG={raw!r} is no log level: use one of debug"):
        log._log_level(raw)
