"""The command line reads like a mature tool's: --version, plain help, every default shown."""

from __future__ import annotations

import subprocess
import sys

import pytest

import hccl_py as hp


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "hccl_py", *args], capture_output=True, text=True, timeout=60
    )


def test_version() -> None:
    out = _cli("--version")
    assert out.returncode == 0
    assert out.stdout.strip() == f"hccl_py {hp.__version__}"


@pytest.mark.parametrize("args", [("--help",), ("run", "--help")])
def test_help_is_plain_words(args: tuple[str, ...]) -> None:
    out = _cli(*args)
    assert out.returncode == 0, out.stderr
    assert "``" not in out.stdout and ":mod:" not in out.stdout, out.stdout


def test_run_help_lists_every_option_with_its_default() -> None:
    text = " ".join(_cli("run", "--help").stdout.split())
    for option, default in (
        ("--nproc", "4"),
        ("--backend", "None"),
        ("--platform", "None"),
        ("--nnodes", "1"),
        ("--node-rank", "0"),
        ("--master-addr", "127.0.0.1"),
        ("--master-port", "None"),
    ):
        assert option in text
        after = text[text.index(option) :]
        assert f"(default: {default})" in after, (option, default)
