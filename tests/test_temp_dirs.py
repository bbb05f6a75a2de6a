"""The test session's temporary folders: a killed session's are removed by the next one."""

from __future__ import annotations

import os
import subprocess
import sys

from temp_dirs import owned_temp, sweep


def _dead_pid() -> int:
    """The pid of a process that has ended."""
    proc = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(proc.stdout)


def test_a_dead_sessions_folders_are_swept_and_live_ones_kept(tmp_path):
    dead = tmp_path / f"hccl_py-x-{_dead_pid()}-abc"
    (dead / "torchelastic_1").mkdir(parents=True)
    live = tmp_path / f"hccl_py-x-{os.getpid()}-def"
    live.mkdir()
    other = tmp_path / "hccl_py-x-notapid"
    other.mkdir()
    made = owned_temp("hccl_py-x-", str(tmp_path))
    assert not dead.exists()
    assert live.is_dir() and other.is_dir()
    assert os.path.basename(made).startswith(f"hccl_py-x-{os.getpid()}-")
    assert sweep("hccl_py-x-", str(tmp_path)) == []


def test_a_file_of_that_name_is_not_removed(tmp_path):
    path = tmp_path / f"hccl_py-x-{_dead_pid()}-file"
    path.write_text("keep")
    assert sweep("hccl_py-x-", str(tmp_path)) == []
    assert path.read_text() == "keep"
