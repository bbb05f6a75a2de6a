"""AllReduce: every rank receives the reduction of every rank's ``count`` elements.

Round r reduces ``sendBuf + r*count*size`` over all ranks into each rank's
``recvBuf + r*count*size``. In place: ``sendBuf == recvBuf``.
"""

from ..core.constants import REDUCE_DTYPES, HcclCMDType
from .spec import OpSpec, regular_layout

SPEC = OpSpec(
    cmd=HcclCMDType.HCCL_CMD_ALLREDUCE,
    name="AllReduce",
    count_arg="count",
    reduces=True,
    dtypes=REDUCE_DTYPES,
    zero_count=False,
    alg_config="AllReduce=level0:doublering",
    layout=regular_layout(frozenset()),
    in_place=lambda rank: (0, 0),
    platforms=frozenset({"A2", "A3", "950"}),
)
