"""The suite's warning policy (pyproject.toml): an HcclWarning fails a test that does not expect it."""

from __future__ import annotations

import warnings

import pytest
from expect import expects_warning

import hccl_py as hp


def test_an_unexpected_hccl_warning_fails_the_test() -> None:
    with pytest.raises(hp.HcclWarning, match=r"\[group-name\]$"):
        warnings.warn(hp.HcclWarning("group-name", "a tiling for another domain"), stacklevel=1)


@expects_warning("group-name")
def test_a_test_lets_through_only_the_kinds_it_expects() -> None:
    warnings.warn(hp.HcclWarning("group-name", "a tiling for another domain"), stacklevel=1)
    with pytest.raises(hp.HcclWarning, match=r"\[alg-config\]$"):
        warnings.warn(hp.HcclWarning("alg-config", "an unknown algConfig"), stacklevel=1)


def test_expects_warning_needs_a_kind() -> None:
    with pytest.raises(ValueError, match="name the warning kinds"):
        expects_warning()
