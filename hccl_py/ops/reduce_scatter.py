"""ReduceScatter: rank j receives the reduction of every rank's block j.

Round r: rank j receives at ``recvBuf_j + r*recvCount*size`` the reduction over
all ranks k of ``sendBuf_k + r*recvCount*size + j*stride*size``. In place:
``recvBuf == sendBuf + rank*stride*size``.
"""

from ..core.constants import REDUCE_DTYPES, HcclCMDType
from .spec import OpSpec, regular_layout

SPEC = OpSpec(
    cmd=HcclCMDType.HCCL_CMD_REDUCE_SCATTER,
    name="ReduceScatter",
    count_arg="recvCount",
    reduces=True,
    dtypes=REDUCE_DTYPES,
    zero_count=False,
    alg_config="ReduceScatter=level0:doublering",
    layout=regular_layout(frozenset({"send"})),
    in_place=lambda rank: (rank, 0),
    platforms=frozenset({"A2", "A3", "950"}),
    strided=True,
)
