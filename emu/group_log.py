"""The domains each rank creates with ``hp.new_group``, checked against every other rank's.

torch.distributed and HCCL need every rank of the world to create every group, with the same
ranks, in the same order: a rank that differs hangs a real run (the gloo backend's ranks wait
in ``new_group`` until the run's timeout). The emulator's ranks share one process and could
go on; the log makes the emulator say so instead, at the call that differs.
"""

from __future__ import annotations

from collections.abc import Collection

from hccl_py.core.errors import HcclMismatchError
from hccl_py.core.group import NEW_GROUP_RULE as RULE
from hccl_py.core.group import group_mismatch, group_missing


class GroupLog:
    """The ranks of each group in the order the first rank to get there created them."""

    def __init__(self, world_size: int) -> None:
        self.groups: list[tuple[tuple[int, ...], int]] = []  # (ranks, the rank that created it)
        self.made = [0] * world_size  # groups each rank created so far

    def created(self, rank: int, ranks: tuple[int, ...], returned: Collection[int]) -> None:
        """``rank`` creates a group of ``ranks``: an HcclMismatchError unless it is the group
        the others created at that position (or the first), and no rank ended without it."""
        n = self.made[rank]
        self.made[rank] += 1
        if n == len(self.groups):
            gone = sorted(r for r in returned if self.made[r] <= n)
            if gone:
                why = f"returned after {self.made[gone[0]]} group(s)"
                raise group_missing(rank, n + 1, ranks, gone, why)
            self.groups.append((ranks, rank))
            return
        want, first = self.groups[n]
        if ranks != want:
            raise group_mismatch(rank, n + 1, ranks, first, list(want))

    def ended(self, rank: int) -> None:
        """``rank``'s function returned: an HcclMismatchError if another rank created a group
        it did not."""
        n = self.made[rank]
        if n < len(self.groups):
            ranks, first = self.groups[n]
            raise HcclMismatchError(
                f"rank {rank} returned after {n} group(s), but rank {first} created "
                f"new_group({list(ranks)}) as group #{n + 1}: {RULE}",
                rank=rank,
            )
