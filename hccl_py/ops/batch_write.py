"""BatchWrite: one-sided copies described by ``itemNum`` items in GM (spec section 6).

Declared so that tilings, platform profiles and op names know it; its Prepare
and execution come with the windows (no executor runs it yet).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..constants import MOVE_DTYPES, HcclCMDType
from .spec import OpSpec

if TYPE_CHECKING:
    from ..task import Task


def _layout(
    task: Task, side: str, r: np.ndarray, peers: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    empty = np.zeros((r.shape[0], 0), dtype=r.dtype)
    return empty, empty


SPEC = OpSpec(
    cmd=HcclCMDType.HCCL_CMD_BATCH_WRITE,
    name="BatchWrite",
    count_arg="itemNum",
    reduces=False,
    dtypes=MOVE_DTYPES,
    zero_count=False,
    alg_config="BatchWrite=level0:fullmesh",
    layout=_layout,
    in_place=lambda rank: (0, 0),
    platforms=frozenset({"A2", "A3"}),
    executable=False,
)
