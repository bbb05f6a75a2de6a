"""Host-side HCCL tiling: the tiling structs (:mod:`.structs`) and their builder (:mod:`.config`).

The structs are ctypes structures with the byte layout of the C++ ones, so that
``bytes(tiling)`` is what a C++ kernel would receive.
"""

from .config import DEV_TYPE_UNKNOWN, TILING_FAILED, TILING_SUCCESS, Mc2CcTilingConfig
from .structs import (
    ALG_CONFIG_SIZE,
    GET_TILING_DATA_WITH_STRUCT,
    GROUP_NAME_SIZE,
    INIT_TILING_VERSION,
    MAX_CC_TILING_NUM,
    MC2_CC_TILING_SIZE,
    MC2_CC_TILING_VERSION,
    MC2_INIT_TILING_SIZE,
    Mc2CcTiling,
    Mc2InitTiling,
    SupportsReadBytes,
    TilingData,
    cc_alg_config,
    cc_engines,
    cc_group_name,
    offsetof,
    read_cc_tiling,
    tiling_bytes,
)

__all__ = [
    "ALG_CONFIG_SIZE",
    "DEV_TYPE_UNKNOWN",
    "GET_TILING_DATA_WITH_STRUCT",
    "GROUP_NAME_SIZE",
    "INIT_TILING_VERSION",
    "MAX_CC_TILING_NUM",
    "MC2_CC_TILING_SIZE",
    "MC2_CC_TILING_VERSION",
    "MC2_INIT_TILING_SIZE",
    "TILING_FAILED",
    "TILING_SUCCESS",
    "Mc2CcTiling",
    "Mc2CcTilingConfig",
    "Mc2InitTiling",
    "SupportsReadBytes",
    "TilingData",
    "cc_alg_config",
    "cc_engines",
    "cc_group_name",
    "offsetof",
    "read_cc_tiling",
    "tiling_bytes",
]
