"""Enumerations and constants of the AscendC HCCL API, with their C++ (ABI) values.

Every enum is an :class:`enum.IntEnum`; its members are also exported at module
level (``HCCL_DATA_TYPE_FP16``, ``HCCL_REDUCE_SUM`` ...) so that ported kernels
read like the C++ originals.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np
import torch

HCCL_SUCCESS = 0
HCCL_FAILED = -1
INVALID_HANDLE_ID = -1
HCCL_MAX_HANDLE_ID = 63
#: Message queues of the AI CPU client's message area (hccl_msg.h ``MAX_QUE_NUM``): a core's
#: queue ``queueID + GetBlockIdx() * queueNum`` must be below it.
MAX_QUE_NUM = 48
MAX_REPEAT = 255
MAX_DOMAINS = 2
#: The largest blockDim a kernel launch accepts (AscendC: 65535).
MAX_BLOCK_DIM = 65535
#: The most ranks hp.run starts (window addresses keep 16 bits of the rank).
MAX_WORLD_SIZE = 1 << 16
#: Ranks of ``hp.run`` when neither ``world_size`` nor a launcher says how many.
DEFAULT_WORLD_SIZE = 4


class HcclDataType(enum.IntEnum):
    """Element types (``HcclDataType`` in C++)."""

    HCCL_DATA_TYPE_INT8 = 0
    HCCL_DATA_TYPE_INT16 = 1
    HCCL_DATA_TYPE_INT32 = 2
    HCCL_DATA_TYPE_FP16 = 3
    HCCL_DATA_TYPE_FP32 = 4
    HCCL_DATA_TYPE_INT64 = 5
    HCCL_DATA_TYPE_UINT64 = 6
    HCCL_DATA_TYPE_UINT8 = 7
    HCCL_DATA_TYPE_UINT16 = 8
    HCCL_DATA_TYPE_UINT32 = 9
    HCCL_DATA_TYPE_FP64 = 10
    HCCL_DATA_TYPE_BFP16 = 11
    HCCL_DATA_TYPE_INT128 = 12
    HCCL_DATA_TYPE_HIF8 = 14
    HCCL_DATA_TYPE_FP8E4M3 = 15
    HCCL_DATA_TYPE_FP8E5M2 = 16
    HCCL_DATA_TYPE_FP8E8M0 = 17
    HCCL_DATA_TYPE_MXFP8 = 18
    #: 18 in headers before May 2026 (which had no MXFP8).
    HCCL_DATA_TYPE_RESERVED = 255


class HcclReduceOp(enum.IntEnum):
    """Reduction operators (``HcclReduceOp``); the kernel API supports SUM, MAX, MIN."""

    HCCL_REDUCE_SUM = 0
    HCCL_REDUCE_PROD = 1
    HCCL_REDUCE_MAX = 2
    HCCL_REDUCE_MIN = 3
    HCCL_REDUCE_RESERVED = 4


class HcclCMDType(enum.IntEnum):
    """Operation types as written into a tiling (``HcclCMDType``)."""

    HCCL_CMD_INVALID = 0
    HCCL_CMD_BROADCAST = 1
    HCCL_CMD_ALLREDUCE = 2
    HCCL_CMD_REDUCE = 3
    HCCL_CMD_SEND = 4
    HCCL_CMD_RECEIVE = 5
    HCCL_CMD_ALLGATHER = 6
    HCCL_CMD_REDUCE_SCATTER = 7
    HCCL_CMD_ALLTOALLV = 8
    HCCL_CMD_ALLTOALLVC = 9
    HCCL_CMD_ALLTOALL = 10
    HCCL_CMD_GATHER = 11
    HCCL_CMD_SCATTER = 12
    HCCL_CMD_BATCH_SEND_RECV = 13
    HCCL_CMD_BATCH_PUT = 14
    HCCL_CMD_BATCH_GET = 15
    HCCL_CMD_ALLGATHER_V = 16
    HCCL_CMD_REDUCE_SCATTER_V = 17
    HCCL_CMD_BATCH_WRITE = 18
    HCCL_CMD_HALF_ALLTOALLV = 20
    HCCL_CMD_ALL = 21


class HcclServerType(enum.IntEnum):
    """Which engine executes the tasks: the AI CPU (A2/A3) or the CCU (950)."""

    HCCL_SERVER_TYPE_AICPU = 0
    #: 1 in headers before 2025-12.
    HCCL_SERVER_TYPE_CCU = 5
    HCCL_SERVER_TYPE_END = 6


class CoreType(enum.IntEnum):
    """Core types of an AI Core (``CoreType`` in an ``HcclServerConfig``)."""

    DEFAULT = 0
    ON_AIV = 1
    ON_AIC = 2


class ScopeType(enum.IntEnum):
    """Template argument of ``QueueBarrier``: which cores' queues the barrier spans.

    Only ``ALL`` is supported by the official client.
    """

    ALL = 0
    QUEUE = 1
    BLOCK = 2


class CommProtocol(enum.IntEnum):
    """AscendC ``CommProtocol`` (include/adv_api/hcomm/hcomm_common.h): an Hcomm channel's protocol."""

    COMM_PROTOCOL_RESERVED = -1
    COMM_PROTOCOL_HCCS = 0
    COMM_PROTOCOL_ROCE = 1
    COMM_PROTOCOL_PCIE = 2
    COMM_PROTOCOL_SIO = 3
    COMM_PROTOCOL_UBC_CTP = 4
    COMM_PROTOCOL_UBC_TP = 5
    COMM_PROTOCOL_UB_MEM = 6
    COMM_PROTOCOL_UBOE = 7
    COMM_PROTOCOL_HCCS_ONLY = 8


class CommEngine(enum.IntEnum):
    """AscendC ``CommEngine`` (hcomm_inner_def.h): who drives an Hcomm channel."""

    COMM_ENGINE_RESERVED = -1
    COMM_ENGINE_CPU = 0
    COMM_ENGINE_CPU_TS = 1
    COMM_ENGINE_AICPU = 2
    COMM_ENGINE_AICPU_TS = 3
    COMM_ENGINE_AIV = 4
    COMM_ENGINE_CCU = 5


#: Hcomm's return codes (hcomm_inner_def.h).
HCOMM_SUCCESS = 0
HCOMM_FAILED = -1
#: The smallest UB buffer ``Hcomm.Init`` accepts (HCOMM_URMA_TMP_BUF_SIZE, hcomm_aiv_urma_def.h).
HCOMM_URMA_TMP_BUF_SIZE = 512


@dataclass(frozen=True)
class HcclServerConfig:
    """Which core sends the messages: ``{CoreType type, int64 blockId}``.

    Any int64 blockId is a valid struct, as in C++; one that names no core of the
    launch (negative, or beyond its blocks) fails at the first Prepare.
    """

    type: CoreType = CoreType.DEFAULT
    blockId: int = 0  # noqa: N815 - AscendC field name

    def __post_init__(self) -> None:
        kind, block = self.type, self.blockId
        ints = all(
            isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in (kind, block)
        )
        if (
            not ints
            or int(kind) not in CoreType._value2member_map_
            or not -(2**63) <= block < 2**63
        ):
            raise ValueError(
                f"HcclServerConfig needs a CoreType ({', '.join(c.name for c in CoreType)}) and "
                f"an int64 blockId, not type={kind!r}, blockId={block!r}"
            )
        object.__setattr__(self, "type", CoreType(int(kind)))
        object.__setattr__(self, "blockId", int(block))


@dataclass(frozen=True)
class DTypeInfo:
    """Element size and torch dtype of one :class:`HcclDataType`.

    ``torch_dtype`` is None for byte-only types (HIF8, FP8E8M0, MXFP8, INT128): they are
    only moved, never computed on, so hccl_py treats them as raw bytes.
    """

    size: int
    torch_dtype: torch.dtype | None


def _torch(name: str) -> torch.dtype | None:
    """A torch dtype by name, or None on torch versions that lack it."""
    return getattr(torch, name, None)


_T = HcclDataType
DTYPE_INFO: dict[HcclDataType, DTypeInfo] = {
    _T.HCCL_DATA_TYPE_INT8: DTypeInfo(1, torch.int8),
    _T.HCCL_DATA_TYPE_INT16: DTypeInfo(2, torch.int16),
    _T.HCCL_DATA_TYPE_INT32: DTypeInfo(4, torch.int32),
    _T.HCCL_DATA_TYPE_FP16: DTypeInfo(2, torch.float16),
    _T.HCCL_DATA_TYPE_FP32: DTypeInfo(4, torch.float32),
    _T.HCCL_DATA_TYPE_INT64: DTypeInfo(8, torch.int64),
    _T.HCCL_DATA_TYPE_UINT64: DTypeInfo(8, _torch("uint64")),
    _T.HCCL_DATA_TYPE_UINT8: DTypeInfo(1, torch.uint8),
    _T.HCCL_DATA_TYPE_UINT16: DTypeInfo(2, _torch("uint16")),
    _T.HCCL_DATA_TYPE_UINT32: DTypeInfo(4, _torch("uint32")),
    _T.HCCL_DATA_TYPE_FP64: DTypeInfo(8, torch.float64),
    _T.HCCL_DATA_TYPE_BFP16: DTypeInfo(2, torch.bfloat16),
    _T.HCCL_DATA_TYPE_INT128: DTypeInfo(16, None),
    _T.HCCL_DATA_TYPE_HIF8: DTypeInfo(1, None),
    _T.HCCL_DATA_TYPE_FP8E4M3: DTypeInfo(1, _torch("float8_e4m3fn")),
    _T.HCCL_DATA_TYPE_FP8E5M2: DTypeInfo(1, _torch("float8_e5m2")),
    _T.HCCL_DATA_TYPE_FP8E8M0: DTypeInfo(1, None),
    _T.HCCL_DATA_TYPE_MXFP8: DTypeInfo(1, None),
}

#: Types that AllReduce and ReduceScatter accept (spec section 2).
REDUCE_DTYPES = frozenset(
    {
        _T.HCCL_DATA_TYPE_FP32,
        _T.HCCL_DATA_TYPE_FP16,
        _T.HCCL_DATA_TYPE_INT8,
        _T.HCCL_DATA_TYPE_INT16,
        _T.HCCL_DATA_TYPE_INT32,
        _T.HCCL_DATA_TYPE_BFP16,
    }
)
#: Types that the pure data-movement ops accept: all but INT128 and RESERVED.
MOVE_DTYPES = frozenset(
    t for t in _T if t not in (_T.HCCL_DATA_TYPE_INT128, _T.HCCL_DATA_TYPE_RESERVED)
)
#: Reduce operators the kernel API supports.
KERNEL_REDUCE_OPS = frozenset(
    {HcclReduceOp.HCCL_REDUCE_SUM, HcclReduceOp.HCCL_REDUCE_MAX, HcclReduceOp.HCCL_REDUCE_MIN}
)

_TORCH_TO_HCCL = {
    info.torch_dtype: t for t, info in DTYPE_INFO.items() if info.torch_dtype is not None
}


def _info(data_type: int) -> DTypeInfo:
    """The :data:`DTYPE_INFO` entry of an HcclDataType value (an int or the enum: the table
    finds either without making an enum member); a ValueError for a value that is none."""
    try:
        info = DTYPE_INFO.get(data_type)  # type: ignore[call-overload]
    except TypeError:  # unhashable: the enum's own lookup says what it is
        info = None
    return DTYPE_INFO[HcclDataType(data_type)] if info is None else info


def dtype_size(data_type: int) -> int:
    """Element size in bytes of an HcclDataType value."""
    return _info(data_type).size


def torch_dtype_of(data_type: int) -> torch.dtype | None:
    """The torch dtype of an HcclDataType value, or None for byte-only types."""
    return _info(data_type).torch_dtype


def hccl_dtype_of(dtype: torch.dtype) -> HcclDataType:
    """The HcclDataType of a torch dtype (``bool`` travels as UINT8)."""
    if dtype == torch.bool:
        return _T.HCCL_DATA_TYPE_UINT8
    try:
        return _TORCH_TO_HCCL[dtype]
    except KeyError:
        raise TypeError(f"torch dtype {dtype} has no HcclDataType") from None


def export_members(namespace: dict, *enums: type[enum.IntEnum]) -> list[str]:
    """Put every enum member into ``namespace`` under its own name; return the names."""
    names = []
    for e in enums:
        for member in e:
            namespace[member.name] = member
            names.append(member.name)
    return names


__all__ = export_members(
    globals(), HcclDataType, HcclReduceOp, HcclCMDType, HcclServerType, CoreType
)
__all__ += [
    "HCCL_SUCCESS",
    "HCCL_FAILED",
    "INVALID_HANDLE_ID",
    "HCCL_MAX_HANDLE_ID",
    "HcclDataType",
    "HcclReduceOp",
    "HcclCMDType",
    "HcclServerType",
    "CoreType",
    "HcclServerConfig",
    "DTypeInfo",
    "DTYPE_INFO",
    "REDUCE_DTYPES",
    "MOVE_DTYPES",
    "KERNEL_REDUCE_OPS",
    "dtype_size",
    "torch_dtype_of",
    "hccl_dtype_of",
]
