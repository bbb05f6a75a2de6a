"""AlltoAll: rank j receives rank i's block j into its block i.

Round r: the block at ``sendBuf_i + r*dataCount*size + j*stride*size`` lands at
``recvBuf_j + r*dataCount*size + i*stride*size``. ``dataCount`` is what each
pair exchanges; 0 is invalid. In place: the block a rank sends to itself lies
where it receives it.
"""

from ..core.constants import MOVE_DTYPES, HcclCMDType
from .spec import OpSpec, regular_layout

SPEC = OpSpec(
    cmd=HcclCMDType.HCCL_CMD_ALLTOALL,
    name="AlltoAll",
    count_arg="dataCount",
    reduces=False,
    dtypes=MOVE_DTYPES,
    zero_count=False,
    alg_config="AlltoAll=level0:fullmesh;level1:pairwise",
    layout=regular_layout(frozenset({"send", "recv"})),
    in_place=lambda rank: (rank, rank),
    platforms=frozenset({"A2", "A3", "950"}),
    strided=True,
)
