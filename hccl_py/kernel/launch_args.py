"""``hp.launch``'s arguments: the domains of its contexts and the kernel's parameter names."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..core.constants import MAX_DOMAINS
from ..core.gm import to_gm
from ..core.group import Group
from ..core.report import plain_repr
from .context import RankContext


def resolve_groups(rank_ctx: RankContext, groups: Any) -> dict[int, Group]:
    """``hp.launch``'s ``groups=``: context index (0, 1) -> a group of this rank (the world
    group for index 0 by default)."""
    if groups is None:
        return {0: rank_ctx.world_group}
    if isinstance(groups, Group):
        groups = {0: groups}
    if not isinstance(groups, (Mapping, list, tuple)):
        raise ValueError(
            "groups maps context index 0 or 1 to a Group from hp.new_group (a dict, a list or "
            f"one Group), not {groups!r}"
        )
    resolved = dict(groups) if isinstance(groups, Mapping) else dict(enumerate(groups))
    for index, group in resolved.items():
        if index not in range(MAX_DOMAINS) or not isinstance(group, Group):
            raise ValueError(
                f"groups maps context index 0 or 1 to a Group from hp.new_group; got {index!r}: {group!r}"
            )
        rank_ctx.check_group(group, f"hp.launch: groups[{index}]")
    return resolved


def parameter_names(kernel: Callable[..., Any], n: int) -> list[str | None]:
    """The kernel's names for its first ``n`` arguments (``xGM`` ...), so reports can use them."""
    if not callable(kernel):
        raise TypeError(f"hp.launch needs the kernel function, not {plain_repr(kernel)}")
    code = getattr(kernel, "__code__", None)
    names = list(code.co_varnames[: code.co_argcount]) if code is not None else []
    if getattr(kernel, "__self__", None) is not None:
        names = names[1:]  # a bound method: skip self
    return (names + [None] * n)[:n]


def gm_arguments(rank_ctx: RankContext, kernel: Callable[..., Any], args: tuple) -> list[Any]:
    """``hp.launch``'s arguments as the kernel of rank ``rank_ctx`` gets them (:func:`to_gm`);
    counts the launch in the rank's buffer numbers (emu/posted.py tells launches apart by it)."""
    rank_ctx.buffers.launches += 1
    names = parameter_names(kernel, len(args))
    rank = rank_ctx.rank
    return [to_gm(a, rank, name) for a, name in zip(args, names, strict=True)]
