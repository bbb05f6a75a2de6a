"""Framework collectives on a group whose generated name does not fit a tiling's groupName.

``new_group`` names a group by its ranks (``group_0_1_..._44``), so a group of some 45
ranks or more has a name of 128 bytes or more. A framework op builds its own tiling and
clips the name, since its client takes the domain from the kernel context; it clipped to
128 bytes, which GetTiling(Mc2CcTiling) refuses (strcpy_s needs room for the NUL), so every
such call that launched its kernel (an asynchronous one, or one too large to ride in the
agreement step) failed with an HcclUsageError about a tiling the user never built.
"""

from __future__ import annotations

import torch

import hccl_py as hp
from hccl_py.core.group import Group
from hccl_py.framework._kernel import build_tiling
from hccl_py.tiling.structs import GROUP_NAME_SIZE

#: ``group_0_1_..._44`` is 6 + 10 + 35 * 2 + 44 = 130 bytes (ranks 0..43 make 127, which fit).
MEMBERS = 45


def test_a_long_group_name_is_clipped_to_what_the_tiling_holds() -> None:
    ranks = tuple(range(MEMBERS))
    group = Group(ranks, "group_" + "_".join(map(str, ranks)))
    assert len(group.name) > GROUP_NAME_SIZE
    tiling = build_tiling(group, hp.HCCL_CMD_ALLREDUCE, hp.HcclReduceOp.HCCL_REDUCE_SUM)
    name = bytes(tiling.ccTiling.groupName).rstrip(b"\0").decode()
    assert name == group.name[: GROUP_NAME_SIZE - 1]


def _async_all_reduce_on_a_long_named_group() -> list[float] | None:
    group = hp.new_group(range(MEMBERS))
    assert len(group.name.encode()) > GROUP_NAME_SIZE
    if hp.get_rank() not in group.ranks:
        return None
    t = torch.full((2,), float(hp.get_rank()))
    hp.all_reduce(t, group=group, async_op=True).wait()  # keeps its kernel launch
    return t.tolist()


def test_an_async_collective_on_a_group_of_45_ranks() -> None:
    got = hp.run(_async_all_reduce_on_a_long_named_group, world_size=MEMBERS + 1)
    total = float(sum(range(MEMBERS)))
    assert got == [[total, total]] * MEMBERS + [None]
