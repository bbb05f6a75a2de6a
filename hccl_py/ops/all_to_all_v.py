"""AlltoAllV: per-peer counts and displacements (uint64 arrays of rankDim entries).

Rank i sends ``sendCounts_i[j]`` elements from ``sendBuf_i + sdispls_i[j]*size``
to rank j, which stores them at ``recvBuf_j + rdispls_j[i]*size``;
``recvCounts_j[i]`` must equal ``sendCounts_i[j]`` (checked pairwise across
ranks). Round r shifts each displacement by ``r * count`` of its peer. All-zero
counts are valid. Its tiling uses the AlltoAll algConfig string. A fine-grained
AlltoAllV (tiling stepSize > 0, ``Task.steps == rankDim``) runs each round as
rankDim steps, the server's rounds: in step k rank i sends its block for peer
i + k and receives the block of peer i - k (the pairwise order of ``Iterate``).
"""

from __future__ import annotations

import numpy as np

from ..core.constants import MOVE_DTYPES, HcclCMDType
from .spec import OpSpec, Task


def _layout(
    task: Task, side: str, r: np.ndarray, peers: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    send = side == "send"
    counts = np.asarray(task.send_counts if send else task.recv_counts, dtype=r.dtype)
    displs = np.asarray(task.sdispls if send else task.rdispls, dtype=r.dtype)
    step = None
    if task.steps > 1:  # a server round is step k of round r
        r, step = r // task.steps, r % task.steps
    starts = displs[None, :] + r * counts[None, :]
    if step is None:
        return starts, np.broadcast_to(counts[None, :], starts.shape)
    # step k: this rank sends its block for peer rank + k and receives that of rank - k
    partner = (task.rank + step if send else task.rank - step) % task.rank_dim
    return starts, np.where(peers == partner, counts[None, :], 0).astype(r.dtype)


SPEC = OpSpec(
    cmd=HcclCMDType.HCCL_CMD_ALLTOALLV,
    name="AlltoAllV",
    count_arg=None,
    reduces=False,
    dtypes=MOVE_DTYPES,
    zero_count=True,
    alg_config="AlltoAll=level0:fullmesh;level1:pairwise",
    layout=_layout,
    in_place=lambda rank: (rank, rank),
    platforms=frozenset({"A3", "950"}),
    pairwise_counts=True,
)
