"""Marks for tests that expect an HcclWarning (pyproject.toml makes every other one an error)."""

from __future__ import annotations

import re

import pytest


def expects_warning(*kinds: str) -> pytest.MarkDecorator:
    """Let HcclWarnings of ``kinds`` (``"alg-config"`` ...) pass in the marked test, and no other."""
    if not kinds:
        raise ValueError("name the warning kinds the test expects")
    pattern = "|".join(re.escape(kind) for kind in kinds)
    return pytest.mark.filterwarnings(
        f"ignore:.*\\[({pattern})\\]$:hccl_py.core.errors.HcclWarning"
    )
