"""Communication domains: an ordered tuple of global ranks with a name."""

from __future__ import annotations

import functools
from collections.abc import Sequence

from .config import as_index
from .errors import HcclMismatchError
from .report import plain_repr

#: The name of the domain of all ranks (the C++ API's world group).
WORLD_GROUP_NAME = "hccl_world_group"
#: What ``hp.new_group`` needs of the ranks, as its errors say it.
NEW_GROUP_RULE = (
    "every rank of the world calls new_group for every group, with the same ranks, in the same "
    "order (torch.distributed and HCCL wait in it until every rank did)"
)


def group_mismatch(
    rank: int, n: int, mine: Sequence[int], other: int, theirs: object
) -> HcclMismatchError:
    """The error of ``rank``, whose group #``n`` is ``mine`` where rank ``other`` created
    ``theirs`` (its ranks, as a list)."""
    return HcclMismatchError(
        f"new_group({list(mine)}) is group #{n} of rank {rank}, but rank {other}'s group #{n} is "
        f"new_group({theirs}): {NEW_GROUP_RULE}",
        rank=rank,
    )


def group_missing(
    rank: int, n: int, mine: Sequence[int], others: Sequence[int], why: str
) -> HcclMismatchError:
    """The error of ``rank``, which created ``mine`` as group #``n`` where ranks ``others``
    did not create one (``why``: they returned without it, or did not create it in time)."""
    return HcclMismatchError(
        f"new_group({list(mine)}) is group #{n} of rank {rank}, but rank(s) {list(others)} "
        f"{why}: {NEW_GROUP_RULE}",
        rank=rank,
    )


def _int_ranks(ranks: object) -> tuple[int, ...] | None:
    """``ranks`` as a tuple of ints, or None when it is no iterable of ints (a bool is none)."""
    try:
        items = tuple(map(as_index, ranks))
    except TypeError:  # not iterable
        return None
    return None if None in items else items


class Group:
    """A communication domain: an ordered tuple of global ranks with a name.

    Made by :func:`hccl_py.new_group` (or :func:`hccl_py.world_group`); collectives and
    launches refuse one made by hand, which names no communicator. Attributes: ``ranks``
    (the global ranks, in domain order), ``name``, ``size`` (the number of ranks,
    ``GetRankDim``).
    """

    def __init__(self, ranks: Sequence[int], name: str) -> None:
        int_ranks = _int_ranks(ranks)
        if int_ranks is None or not isinstance(name, str):
            raise TypeError(
                "Group needs a sequence of int ranks and a str name, not "
                f"ranks={plain_repr(ranks)}, name={plain_repr(name)}"
            )
        self.ranks = int_ranks
        self.name = name
        #: Number of ranks in the domain (``GetRankDim``); asked at every step of a meeting.
        self.size = len(int_ranks)

    def rank_of(self, global_rank: int) -> int | None:
        """The index of ``global_rank`` in this domain, or None if it is not a member."""
        try:
            return self.ranks.index(global_rank)
        except ValueError:
            return None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Group) and (self.name, self.ranks) == (other.name, other.ranks)

    def __hash__(self) -> int:
        return hash((self.name, self.ranks))

    def __repr__(self) -> str:
        return f"Group({self.name!r}, ranks={list(self.ranks)})"


@functools.lru_cache(maxsize=4)
def world(size: int) -> Group:
    """The domain of all ``size`` ranks, one object shared by every rank of a world: each
    rank building its own tuple made starting n ranks take n * n steps (30000 ranks)."""
    return Group(range(size), WORLD_GROUP_NAME)
