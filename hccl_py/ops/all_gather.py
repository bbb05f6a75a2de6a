"""AllGather: every rank receives every rank's ``sendCount`` elements, in rank order.

Round r: rank j's elements at ``sendBuf_j + r*sendCount*size`` land at
``recvBuf + r*sendCount*size + j*stride*size`` on every rank. In place: the
rank's own block, ``sendBuf == recvBuf + rank*stride*size``.
"""

from ..core.constants import MOVE_DTYPES, HcclCMDType
from .spec import OpSpec, regular_layout

SPEC = OpSpec(
    cmd=HcclCMDType.HCCL_CMD_ALLGATHER,
    name="AllGather",
    count_arg="sendCount",
    reduces=False,
    dtypes=MOVE_DTYPES,
    zero_count=False,
    alg_config="AllGather=level0:doublering",
    layout=regular_layout(frozenset({"recv"})),
    in_place=lambda rank: (0, rank),
    platforms=frozenset({"A2", "A3", "950"}),
    strided=True,
)
