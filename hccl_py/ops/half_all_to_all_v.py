"""AlltoAllvWrite (Ascend 950): each rank writes one byte slice per peer into that peer's window.

The official client sends it as ``HCCL_CMD_HALF_ALLTOALLV`` with ``count =
localDataSize`` and type INT8. ``sendOffsets`` and ``sendSizes`` are uint64
arrays of byte offsets and sizes into ``usrIn``, one entry per peer, or two
(one half per die: entries ``j`` and ``j + rankDim``) on the CCU server; peer
``j``'s slice (its halves one after the other) lands in ``j``'s In window at
``remoteWinOffset``, which each sender chooses (usually ``rankId * slot``).
Like BatchWrite it is not matched field by field across ranks (``localDataSize``
differs per rank); its Prepare lives in :mod:`hccl_py.client.half_alltoallv`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..core.constants import HcclCMDType, HcclDataType
from .spec import OpSpec, no_blocks

if TYPE_CHECKING:
    pass


SPEC = OpSpec(
    cmd=HcclCMDType.HCCL_CMD_HALF_ALLTOALLV,
    name="AlltoAllvWrite",
    count_arg="localDataSize",
    reduces=False,
    dtypes=frozenset({HcclDataType.HCCL_DATA_TYPE_INT8}),
    zero_count=False,
    alg_config="AlltoAllvWrite=level0:fullmesh",
    layout=no_blocks,
    in_place=lambda rank: (0, 0),
    platforms=frozenset({"950"}),
    executable=False,
    lifecycle="window-write",
)
