"""What tests expect of a run: marks for an expected HcclWarning (pyproject.toml makes every
other one an error), and mismatch reports on every rank."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

import hccl_py as hp


def expects_warning(*kinds: str) -> pytest.MarkDecorator:
    """Let HcclWarnings of ``kinds`` (``"alg-config"`` ...) pass in the marked test, and no other."""
    if not kinds:
        raise ValueError("name the warning kinds the test expects")
    pattern = "|".join(re.escape(kind) for kind in kinds)
    return pytest.mark.filterwarnings(
        f"ignore:.*\\[({pattern})\\]$:hccl_py.core.errors.HcclWarning"
    )


def mismatch_on_every_rank(
    fn: Callable[[], object], world_size: int, backend: str, timeout: float, relayed: bool = False
) -> list[str]:
    """Run ``fn`` and require that every rank failed with :class:`hp.HcclMismatchError` (a
    report on both sides, not a hang or a gloo abort); its messages, in rank order.

    ``relayed``: a rank may instead have been stopped by a peer's report of it (an
    :class:`hp.HcclPeerError` that quotes it), where which rank's report comes first is the
    operating system's timing (gloo processes whose checks run in different threads).
    """
    with pytest.raises(hp.WorldError) as info:
        hp.run(fn, world_size=world_size, backend=backend, timeout=timeout)
    failures = info.value.failures
    assert sorted(failures) == list(range(world_size)), info.value
    assert info.value.root_causes, info.value
    for error in failures.values():
        if relayed and isinstance(error, hp.HcclPeerError):
            assert "HcclMismatchError" in str(error), error
        else:
            assert isinstance(error, hp.HcclMismatchError), error
    return [str(failures[rank]) for rank in range(world_size)]
