"""Counting the process-group calls that hccl_py's rounds make, in the calling rank process.

The tests of the carried first round (``test_first_round.py``) and of the NPU path's calls
(``test_npu_standin.py``, whose job imports this file from its own folder) share it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: The module-level aliases of rounds.py that call the process group without its ``dist``.
ALIASES = ("_all_gather_single", "_reduce_scatter_single")


def count_calls() -> list[str]:
    """From now on, every process-group call of hccl_py's rounds in this process appends its
    name to the returned list (clear it between the calls to count)."""
    from hccl_py.backends.dist import predicted, rounds

    calls: list[str] = []

    def counted(name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            calls.append(name)
            return real(*args, **kwargs)

        return call

    real_dist = rounds.dist

    class Counting:
        def __getattr__(self, name: str) -> Any:
            real = getattr(real_dist, name)
            return counted(name, real) if callable(real) and name[0].islower() else real

    rounds.dist = predicted.dist = Counting()  # type: ignore[assignment]
    for alias in ALIASES:
        setattr(rounds, alias, counted(alias.lstrip("_"), getattr(rounds, alias)))
    return calls
