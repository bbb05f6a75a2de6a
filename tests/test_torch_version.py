"""The oldest torch hccl_py accepts: the package's requirement and the check at import agree."""

from __future__ import annotations

import re

import pytest
import torch
from launch_helpers import ROOT

from hccl_py.core.torch_version import OLDEST_TORCH, check_torch


def test_the_requirement_names_the_oldest_torch() -> None:
    oldest = ".".join(map(str, OLDEST_TORCH))
    dependencies = next(
        line
        for line in (ROOT / "pyproject.toml").read_text().splitlines()
        if line.startswith("dependencies = ")
    )
    assert f'"torch>={oldest},<3"' in dependencies


@pytest.mark.parametrize("version", ["2.3.1+cu121", "2.8.0", "1.13.1"])
def test_an_older_torch_is_refused_with_what_to_install(version: str) -> None:
    said = rf"needs torch 2\.9 or newer; this is torch {re.escape(version)}:"
    with pytest.raises(ImportError, match=said):
        check_torch(version)


@pytest.mark.parametrize("version", ["2.9.1+cu128", "2.9.0a0+git1234", "2.13.0+cpu", "3.0.0"])
def test_the_oldest_and_newer_ones_pass(version: str) -> None:
    check_torch(version)


def test_the_installed_torch_passes() -> None:
    check_torch(torch.__version__)
